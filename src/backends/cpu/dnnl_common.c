/*
 * dnnl_common.c - the engine, descriptors, reorders and the per-slot
 * executor shared by the oneDNN kernels; see dnnl_common.h for the rules.
 */
#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/alloc.h"
#include "core/common.h"

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;

static void engine_create(void)
{
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        engine = NULL;
}

dnnl_engine_t infd_dnnl_engine(void)
{
    pthread_once(&engine_once, engine_create);
    return engine;
}

infd_status infd_dnnl_check(const infd_kernel_args *a, infd_error *err, dnnl_status_t s,
                            const char *what)
{
    infd_status code;
    switch (s) {
    case dnnl_success:
        return INFD_STATUS_OK;
    case dnnl_out_of_memory:
        code = INFD_STATUS_OUT_OF_MEMORY;
        break;
    case dnnl_unimplemented:
        code = INFD_STATUS_UNIMPLEMENTED;
        break;
    case dnnl_invalid_arguments:
        code = INFD_STATUS_INVALID_ARGUMENT;
        break;
    default:
        code = INFD_STATUS_INTERNAL;
        break;
    }
    return infd_node_error(a, err, code, "%s: %s", what, dnnl_status2str(s));
}

dnnl_status_t infd_dnnl_md_plain(dnnl_memory_desc_t *md, int ndims, const int64_t *dims)
{
    dnnl_dims_t d, strides;
    if (ndims == 0) {
        d[0] = 1;
        strides[0] = 1;
        return dnnl_memory_desc_init_by_strides(md, 1, d, dnnl_f32, strides);
    }
    if (ndims > DNNL_MAX_NDIMS)
        return dnnl_invalid_arguments;
    int64_t stride = 1;
    for (int i = ndims - 1; i >= 0; i--) {
        d[i] = dims[i];
        strides[i] = stride;
        stride *= dims[i] > 0 ? dims[i] : 1;
    }
    return dnnl_memory_desc_init_by_strides(md, ndims, d, dnnl_f32, strides);
}

dnnl_status_t infd_dnnl_md_value(dnnl_memory_desc_t *md, const infd_ir_value *v)
{
    int64_t dims[INFD_MAX_RANK];
    for (int32_t i = 0; i < v->shape.rank; i++)
        dims[i] = v->shape.dims[i].value;
    return infd_dnnl_md_plain(md, v->shape.rank, dims);
}

dnnl_status_t infd_dnnl_md_any(dnnl_memory_desc_t *md, int ndims, const int64_t *dims)
{
    return infd_dnnl_md_any_dt(md, ndims, dims, dnnl_f32);
}

dnnl_status_t infd_dnnl_md_any_dt(dnnl_memory_desc_t *md, int ndims, const int64_t *dims,
                                  dnnl_data_type_t dt)
{
    dnnl_dims_t d;
    if (ndims < 1 || ndims > DNNL_MAX_NDIMS)
        return dnnl_invalid_arguments;
    for (int i = 0; i < ndims; i++)
        d[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(md, ndims, d, dt, dnnl_format_tag_any);
}

dnnl_data_type_t infd_dnnl_compute_type(const infd_kernel_args *a)
{
    return a->precision == INFD_PRECISION_BF16 ? dnnl_bf16 : dnnl_f32;
}

infd_status infd_dnnl_precision_check(const infd_kernel_args *a, infd_error *err)
{
    if (a->precision == INFD_PRECISION_FP32)
        return INFD_STATUS_OK;
    /* ISA values are bit masks of their features: AMX includes BF16, but
     * AVX2-VNNI (numerically larger) does not. */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    unsigned want = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    if (a->precision == INFD_PRECISION_BF16 && (isa & want) == want)
        return INFD_STATUS_OK;
    if (a->precision == INFD_PRECISION_BF16)
        return infd_node_error(a, err, INFD_STATUS_UNAVAILABLE,
                               "BF16 needs AVX512-BF16 (or AMX) on this CPU");
    return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT, "unknown precision %d",
                           (int)a->precision);
}

bool infd_dnnl_input_is_opaque(const infd_kernel_args *a, int i)
{
    return a->input_layouts && i < a->n_inputs && a->input_layouts[i];
}

bool infd_dnnl_layout_stacks(const void *layout)
{
    const dnnl_memory_desc_t *md = layout;
    if (md->ndims < 1 || md->format_kind != dnnl_blocked || md->dims[0] != 1 ||
        md->padded_dims[0] != 1 || md->padded_offsets[0] != 0 || md->offset0 != 0 ||
        md->extra.flags != dnnl_memory_extra_flag_none)
        return false;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    for (int i = 0; i < b->inner_nblks; i++) {
        if (b->inner_idxs[i] == 0)
            return false;
    }
    /* Dim 0 outermost: one image's stride is the whole layout. */
    size_t bytes = dnnl_memory_desc_get_size(md);
    return bytes > 0 && (size_t)b->strides[0] * dnnl_data_type_size(md->data_type) == bytes;
}

bool infd_dnnl_input_md(const infd_kernel_args *a, int i, dnnl_memory_desc_t *md)
{
    if (infd_dnnl_input_is_opaque(a, i)) {
        *md = *(const dnnl_memory_desc_t *)a->input_layouts[i];
        /* A one-image layout of the plan's per-image prefix, read by a
         * kernel compiled for the batch (infd_dnnl_layout_stacks said the
         * images follow each other): the same layout with N images. */
        int64_t n = a->inputs[i]->shape.rank >= 1 ? a->inputs[i]->shape.dims[0].value : 1;
        if (md->ndims >= 1 && md->dims[0] == 1 && n > 1) {
            md->dims[0] = n;
            md->padded_dims[0] = n;
        }
        return true;
    }
    infd_dnnl_md_value(md, a->inputs[i]);
    return false;
}

bool infd_dnnl_md_is_plain(const dnnl_memory_desc_t *md, const infd_ir_value *v)
{
    dnnl_memory_desc_t plain;
    return infd_dnnl_md_value(&plain, v) == dnnl_success && dnnl_memory_desc_equal(md, &plain);
}

void infd_dnnl_kernel_publish(infd_dnnl_kernel *k, const dnnl_memory_desc_t *md)
{
    k->layout = *md;
    k->base.base.output_layout = &k->layout;
    k->base.base.output_layout_bytes = dnnl_memory_desc_get_size(&k->layout);
}

bool infd_dnnl_produces_opaque(const infd_kernel_args *a)
{
    INFD_UNUSED(a);
    return true;
}

bool infd_dnnl_accepts_input0(const infd_kernel_args *a, int i)
{
    INFD_UNUSED(a);
    return i == 0;
}

void infd_dnnl_set_threads(int n_threads)
{
    if (n_threads > 0 && omp_get_max_threads() != n_threads)
        omp_set_num_threads(n_threads);
}

bool infd_dnnl_fp32_only(const infd_kernel_args *a, int n_data, infd_error *why)
{
    for (int i = 0; i < n_data; i++) {
        const infd_ir_value *v = i < a->n_inputs ? a->inputs[i] : NULL;
        if (!v) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "input %d is missing", i);
            return false;
        }
        if (v->dtype != INFD_DTYPE_FP32) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "oneDNN kernel takes FP32 only; input %d is %s", i,
                            infd_dtype_name(v->dtype));
            return false;
        }
        if (v->shape.rank < 0 || v->shape.rank > DNNL_MAX_NDIMS) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "input %d has rank %d; oneDNN takes 0 to %d", i, (int)v->shape.rank,
                            DNNL_MAX_NDIMS);
            return false;
        }
    }
    if (a->n_outputs < 1 || !a->outputs[0] || a->outputs[0]->dtype != INFD_DTYPE_FP32) {
        infd_node_error(
            a, why, INFD_STATUS_UNIMPLEMENTED, "oneDNN kernel takes FP32 only; output 0 is %s",
            a->n_outputs >= 1 && a->outputs[0] ? infd_dtype_name(a->outputs[0]->dtype) : "missing");
        return false;
    }
    return true;
}

/* Walks the implementations of `op_desc` (in oneDNN's order of
 * preference) and takes the first whose name contains `impl`, or the first
 * when `impl` is NULL. */
static infd_status pd_pick(const infd_kernel_args *a, const void *op_desc,
                           const_dnnl_primitive_attr_t attr, dnnl_engine_t eng, const char *impl,
                           const char *msg, dnnl_primitive_desc_t *pd, infd_error *err)
{
    dnnl_primitive_desc_iterator_t it = NULL;
    infd_status st = infd_dnnl_check(
        a, err, dnnl_primitive_desc_iterator_create(&it, op_desc, attr, eng, NULL), msg);
    if (st != INFD_STATUS_OK)
        return st;
    for (;;) {
        dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
        const char *name = NULL;
        if (!cand) {
            st = infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "%s", msg);
            break;
        }
        if (!impl ||
            (dnnl_primitive_desc_query(cand, dnnl_query_impl_info_str, 0, &name) == dnnl_success &&
             name && strstr(name, impl))) {
            *pd = cand;
            break;
        }
        dnnl_primitive_desc_destroy(cand);
        if (dnnl_primitive_desc_iterator_next(it) != dnnl_success) {
            st = infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                 "oneDNN has no '%s' implementation for these shapes", impl);
            break;
        }
    }
    dnnl_primitive_desc_iterator_destroy(it);
    return st;
}

infd_status infd_dnnl_pd_create_impl(const infd_kernel_args *a, const void *op_desc,
                                     const_dnnl_post_ops_t po, float scale, const char *what,
                                     const char *impl, dnnl_primitive_desc_t *pd, infd_error *err)
{
    char msg[96];
    dnnl_primitive_attr_t attr = NULL;
    dnnl_engine_t eng = infd_dnnl_engine();
    infd_status st;
    *pd = NULL;
    if (!eng)
        return infd_node_error(a, err, INFD_STATUS_INTERNAL,
                               "oneDNN could not create a CPU engine");
    st = infd_dnnl_precision_check(a, err);
    if (st != INFD_STATUS_OK)
        return st;
    /* oneDNN splits the work for the team size it sees now. */
    infd_dnnl_set_threads(a->n_threads);
    st = infd_dnnl_check(a, err, dnnl_primitive_attr_create(&attr), "oneDNN attributes");
    if (st != INFD_STATUS_OK)
        goto out;
    st = infd_dnnl_check(a, err,
                         dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
                         "oneDNN scratchpad mode");
    if (st == INFD_STATUS_OK && po)
        st = infd_dnnl_check(a, err, dnnl_primitive_attr_set_post_ops(attr, po),
                             "oneDNN post-ops rejected");
    if (st == INFD_STATUS_OK && scale != 1.0f)
        st = infd_dnnl_check(a, err, dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale),
                             "oneDNN output scale rejected");
    if (st != INFD_STATUS_OK)
        goto out;
    snprintf(msg, sizeof(msg), "oneDNN %s primitive rejected the shapes or attributes", what);
    if (impl)
        st = pd_pick(a, op_desc, attr, eng, impl, msg, pd, err);
    else
        st = infd_dnnl_check(a, err, dnnl_primitive_desc_create(pd, op_desc, attr, eng, NULL), msg);
out:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

infd_status infd_dnnl_pd_create(const infd_kernel_args *a, const void *op_desc,
                                const_dnnl_post_ops_t po, float scale, const char *what,
                                dnnl_primitive_desc_t *pd, infd_error *err)
{
    return infd_dnnl_pd_create_impl(a, op_desc, po, scale, what, NULL, pd, err);
}

static void kernel_run(const infd_cpu_kernel *k, const infd_kernel_io *io)
{
    const infd_dnnl_kernel *dk = (const infd_dnnl_kernel *)k;
    infd_dnnl_exec_run(&dk->pre, io);
    infd_dnnl_exec_run(&dk->pre2, io);
    infd_dnnl_exec_run(&dk->exec, io);
    infd_dnnl_exec_run(&dk->post, io);
}

static void kernel_fini(infd_cpu_kernel *k)
{
    infd_dnnl_kernel *dk = (infd_dnnl_kernel *)k;
    infd_dnnl_exec_fini(&dk->pre);
    infd_dnnl_exec_fini(&dk->pre2);
    infd_dnnl_exec_fini(&dk->exec);
    infd_dnnl_exec_fini(&dk->post);
}

infd_status infd_dnnl_exec_init(infd_dnnl_exec *e, const infd_kernel_args *a,
                                const_dnnl_primitive_desc_t pd, infd_error *err)
{
    return infd_dnnl_exec_init_at(e, a, pd, 0, err);
}

infd_status infd_dnnl_exec_init_at(infd_dnnl_exec *e, const infd_kernel_args *a,
                                   const_dnnl_primitive_desc_t pd, size_t scratch_offset,
                                   infd_error *err)
{
    dnnl_engine_t eng = infd_dnnl_engine();
    infd_status st;
    e->n_slots = a->n_slots;
    e->n_threads = a->n_threads;
    e->streams = infd_calloc((size_t)a->n_slots, sizeof(*e->streams));
    e->args = infd_calloc((size_t)a->n_slots * INFD_DNNL_MAX_ARGS, sizeof(*e->args));
    if (!e->streams || !e->args)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY,
                               "out of memory for oneDNN streams");
    st = infd_dnnl_check(a, err, dnnl_primitive_create(&e->prim, pd),
                         "oneDNN primitive creation failed");
    for (int s = 0; s < a->n_slots && st == INFD_STATUS_OK; s++)
        st = infd_dnnl_check(a, err,
                             dnnl_stream_create(&e->streams[s], eng, dnnl_stream_default_flags),
                             "oneDNN stream creation failed");
    if (st != INFD_STATUS_OK)
        return st;
    const dnnl_memory_desc_t *scratch =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
    if (e->scratch_bytes > 0)
        st = infd_dnnl_exec_arg_ws(e, a, DNNL_ARG_SCRATCHPAD, scratch_offset, scratch, err);
    return st;
}

infd_status infd_dnnl_kernel_create(const infd_kernel_args *a, const char *prefix,
                                    const_dnnl_primitive_desc_t pd, infd_dnnl_kernel **out,
                                    infd_error *err)
{
    return infd_dnnl_kernel_create_at(a, prefix, pd, 0, out, err);
}

infd_status infd_dnnl_kernel_create_at(const infd_kernel_args *a, const char *prefix,
                                       const_dnnl_primitive_desc_t pd, size_t scratch_offset,
                                       infd_dnnl_kernel **out, infd_error *err)
{
    const char *impl = NULL;
    *out = NULL;
    infd_dnnl_kernel *k = (infd_dnnl_kernel *)infd_cpu_kernel_new(sizeof(infd_dnnl_kernel), prefix,
                                                                  kernel_run, kernel_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the kernel");
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        impl = "?";
    snprintf(k->name, sizeof(k->name), "%s:%s", prefix, impl);
    k->base.base.name = k->name;
    infd_status st = infd_dnnl_exec_init_at(&k->exec, a, pd, scratch_offset, err);
    infd_dnnl_kernel_size_workspace(k, scratch_offset);
    *out = k;
    return st;
}

void infd_dnnl_kernel_size_workspace(infd_dnnl_kernel *k, size_t head)
{
    size_t scratch = INFD_MAX(INFD_MAX(k->exec.scratch_bytes, k->pre2.scratch_bytes),
                              INFD_MAX(k->pre.scratch_bytes, k->post.scratch_bytes));
    k->base.base.workspace_bytes = head + scratch;
}

infd_status infd_dnnl_reorder_pd(const infd_kernel_args *a, const dnnl_memory_desc_t *from,
                                 const dnnl_memory_desc_t *to, dnnl_primitive_desc_t *pd,
                                 infd_error *err)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_engine_t eng = infd_dnnl_engine();
    *pd = NULL;
    if (!eng)
        return infd_node_error(a, err, INFD_STATUS_INTERNAL,
                               "oneDNN could not create a CPU engine");
    infd_dnnl_set_threads(a->n_threads);
    infd_status st =
        infd_dnnl_check(a, err, dnnl_primitive_attr_create(&attr), "oneDNN attributes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(
            a, err, dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
            "oneDNN scratchpad mode");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err,
                             dnnl_reorder_primitive_desc_create(pd, from, eng, to, eng, attr),
                             "oneDNN reorder rejected the layouts");
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Adds one end of a reorder step. */
static infd_status reorder_end(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                               infd_dnnl_from kind, size_t index, const dnnl_memory_desc_t *md,
                               infd_error *err)
{
    if (kind == INFD_DNNL_FROM_WORKSPACE)
        return infd_dnnl_exec_arg_ws(e, a, arg_id, index, md, err);
    return infd_dnnl_exec_arg(e, a, arg_id, kind, (int32_t)index, md, err);
}

infd_status infd_dnnl_exec_reorder(infd_dnnl_exec *e, const infd_kernel_args *a,
                                   const dnnl_memory_desc_t *from, infd_dnnl_from from_kind,
                                   size_t from_index, const dnnl_memory_desc_t *to,
                                   infd_dnnl_from to_kind, size_t to_index, size_t scratch_offset,
                                   infd_error *err)
{
    dnnl_primitive_desc_t pd = NULL;
    infd_status st = infd_dnnl_reorder_pd(a, from, to, &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_init_at(e, a, pd, scratch_offset, err);
    if (st == INFD_STATUS_OK)
        st = reorder_end(e, a, DNNL_ARG_FROM, from_kind, from_index, from, err);
    if (st == INFD_STATUS_OK)
        st = reorder_end(e, a, DNNL_ARG_TO, to_kind, to_index, to, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return st;
}

dnnl_status_t infd_dnnl_unary_layout_get(const infd_kernel_args *a, const dnnl_memory_desc_t *flat,
                                         infd_dnnl_unary_layout *l)
{
    memset(l, 0, sizeof(*l));
    bool opaque = infd_dnnl_input_md(a, 0, &l->in_md);
    if (opaque && a->output_opaque_ok) {
        l->md = l->in_md;
        l->publish = true;
        return dnnl_success;
    }
    l->in_place = opaque;
    if (flat) {
        l->md = *flat;
        return dnnl_success;
    }
    return infd_dnnl_md_value(&l->md, a->outputs[0]);
}

infd_status infd_dnnl_unary_finish(infd_dnnl_kernel *k, const infd_kernel_args *a,
                                   const infd_dnnl_unary_layout *l, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    if (l->in_place) {
        dnnl_memory_desc_t plain;
        st =
            infd_dnnl_check(a, err, infd_dnnl_md_value(&plain, a->outputs[0]), "oneDNN descriptor");
        if (st == INFD_STATUS_OK)
            st = infd_dnnl_exec_reorder(&k->pre, a, &l->in_md, INFD_DNNL_FROM_INPUT, 0, &plain,
                                        INFD_DNNL_FROM_OUTPUT, 0, 0, err);
    }
    if (l->publish)
        infd_dnnl_kernel_publish(k, &l->md);
    infd_dnnl_kernel_size_workspace(k, 0);
    return st;
}

dnnl_status_t infd_dnnl_dst_get(const infd_kernel_args *a, const dnnl_memory_desc_t *md,
                                size_t head, infd_dnnl_dst *d)
{
    memset(d, 0, sizeof(*d));
    d->md = *md;
    d->mid_offset = head;
    d->head = head;
    dnnl_status_t s = infd_dnnl_md_value(&d->plain, a->outputs[0]);
    if (s != dnnl_success || dnnl_memory_desc_equal(md, &d->plain))
        return s;
    if (a->output_opaque_ok) {
        d->publish = true;
    } else {
        d->via_mid = true;
        d->head = head + infd_align_up(dnnl_memory_desc_get_size(md), 64);
    }
    return dnnl_success;
}

infd_status infd_dnnl_dst_arg(infd_dnnl_kernel *k, const infd_kernel_args *a,
                              const infd_dnnl_dst *d, infd_error *err)
{
    if (d->via_mid)
        return infd_dnnl_exec_arg_ws(&k->exec, a, DNNL_ARG_DST, d->mid_offset, &d->md, err);
    return infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, &d->md, err);
}

infd_status infd_dnnl_dst_finish(infd_dnnl_kernel *k, const infd_kernel_args *a,
                                 const infd_dnnl_dst *d, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    if (d->via_mid)
        st = infd_dnnl_exec_reorder(&k->post, a, &d->md, INFD_DNNL_FROM_WORKSPACE, d->mid_offset,
                                    &d->plain, INFD_DNNL_FROM_OUTPUT, 0, d->head, err);
    if (d->publish)
        infd_dnnl_kernel_publish(k, &d->md);
    infd_dnnl_kernel_size_workspace(k, d->head);
    return st;
}

/* Creates slot memories for the next argument; on failure the memories made
 * so far stay in e->args and exec_fini frees them. */
static infd_status add_arg(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                           infd_dnnl_from from, int32_t index, const dnnl_memory_desc_t *md,
                           void *handle, infd_error *err)
{
    if (e->n_args >= INFD_DNNL_MAX_ARGS)
        return infd_node_error(a, err, INFD_STATUS_INTERNAL, "too many oneDNN arguments");
    int n = e->n_args;
    for (int s = 0; s < e->n_slots; s++) {
        dnnl_exec_arg_t *arg = &e->args[s * INFD_DNNL_MAX_ARGS + n];
        arg->arg = arg_id;
        infd_status st = infd_dnnl_check(
            a, err, dnnl_memory_create(&arg->memory, md, infd_dnnl_engine(), handle),
            "oneDNN memory creation failed");
        if (st != INFD_STATUS_OK)
            return st;
    }
    e->arg_ids[n] = arg_id;
    e->arg_from[n] = (uint8_t)from;
    e->arg_index[n] = index;
    e->n_args++;
    return INFD_STATUS_OK;
}

infd_status infd_dnnl_exec_arg(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                               infd_dnnl_from from, int32_t index, const dnnl_memory_desc_t *md,
                               infd_error *err)
{
    return add_arg(e, a, arg_id, from, index, md, DNNL_MEMORY_NONE, err);
}

infd_status infd_dnnl_exec_arg_ws(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                                  size_t offset, const dnnl_memory_desc_t *md, infd_error *err)
{
    int n = e->n_args;
    infd_status st = add_arg(e, a, arg_id, INFD_DNNL_FROM_WORKSPACE, 0, md, DNNL_MEMORY_NONE, err);
    if (st == INFD_STATUS_OK)
        e->arg_offset[n] = offset;
    return st;
}

/* "<file>: node '<name>' (<op>)", for the messages of the weights table. */
static const char *node_what(const infd_kernel_args *a, char *buf, size_t n)
{
    snprintf(buf, n, "%s: node '%s' (%s)", a->g->source, a->node->name, a->node->op_type);
    return buf;
}

/* Adds form f (a reference, taken) as constant argument arg_id. */
static infd_status add_form_arg(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                                const dnnl_memory_desc_t *md, infd_weight_form *f, infd_error *err)
{
    if (e->n_forms >= INFD_DNNL_MAX_ARGS) {
        infd_weight_form_release(f);
        return infd_node_error(a, err, INFD_STATUS_INTERNAL, "too many oneDNN constants");
    }
    e->forms[e->n_forms++] = f;
    return add_arg(e, a, arg_id, INFD_DNNL_FROM_CONST, -1, md, infd_weight_form_data(f), err);
}

/* Hands a finished buffer to the weights table (infd_weights_form's make). */
typedef struct given_buf {
    void *buf;
    size_t bytes;
    bool taken;
} given_buf;

static infd_status give_buf(void *ctx, void **data, size_t *bytes, infd_error *err)
{
    given_buf *g = ctx;
    (void)err;
    *data = g->buf;
    *bytes = g->bytes;
    g->taken = true;
    return INFD_STATUS_OK;
}

static void free_buf(void *data, int32_t device, const void *arg)
{
    (void)device;
    (void)arg;
    infd_free(data);
}

infd_status infd_dnnl_exec_arg_const(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                                     const dnnl_memory_desc_t *md, void *buf, infd_error *err)
{
    size_t n = dnnl_memory_desc_get_size(md);
    infd_form_key k;
    infd_form_key_init(&k, buf, n, "bytes", NULL, 0, -1); /* as infd_weights_copy's */
    given_buf g = { buf, n, false };
    infd_weight_form *f = NULL;
    char what[INFD_ERROR_MSG_BYTES / 2];
    infd_status st = infd_weights_form(a->weights, &k, give_buf, &g, free_buf, NULL,
                                       node_what(a, what, sizeof(what)), &f, err);
    if (!g.taken)
        infd_free(buf); /* the same bytes were there: the shared copy serves */
    if (st != INFD_STATUS_OK)
        return st;
    return add_form_arg(e, a, arg_id, md, f, err);
}

typedef struct reorder_ctx {
    const infd_kernel_args *a;
    const dnnl_memory_desc_t *from_md;
    const void *data;
    const dnnl_memory_desc_t *to_md;
} reorder_ctx;

static infd_status make_reordered(void *ctx, void **data, size_t *bytes, infd_error *err)
{
    const reorder_ctx *r = ctx;
    *bytes = dnnl_memory_desc_get_size(r->to_md);
    return infd_dnnl_reorder_const(r->a, r->from_md, r->data, r->to_md, data, err);
}

infd_status infd_dnnl_exec_arg_reordered(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                                         const dnnl_memory_desc_t *from_md, const void *data,
                                         const dnnl_memory_desc_t *to_md, int input,
                                         uint32_t *unread, infd_error *err)
{
    /* The key: the source bytes, and both layouts (oneDNN 2's memory
     * descriptors are plain structs that oneDNN zero-fills, so their bytes
     * say what they describe). */
    dnnl_memory_desc_t desc[2] = { *from_md, *to_md };
    infd_form_key k;
    infd_form_key_init(&k, data, dnnl_memory_desc_get_size(from_md), "dnnl:reorder", desc,
                       sizeof(desc), -1);
    reorder_ctx r = { a, from_md, data, to_md };
    infd_weight_form *f = NULL;
    char what[INFD_ERROR_MSG_BYTES / 2];
    infd_status st = infd_weights_form(a->weights, &k, make_reordered, &r, free_buf, NULL,
                                       node_what(a, what, sizeof(what)), &f, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (input >= 0 && input < 32 && unread)
        *unread |= 1u << input;
    return add_form_arg(e, a, arg_id, to_md, f, err);
}

infd_status infd_dnnl_copy_const(const infd_kernel_args *a, const void *data, size_t n, void **out,
                                 infd_error *err)
{
    *out = infd_aligned_alloc(64, n ? n : 1);
    if (!*out)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY,
                               "out of memory for a %zu-byte constant", n);
    if (n)
        memcpy(*out, data, n);
    return INFD_STATUS_OK;
}

infd_status infd_dnnl_reorder_const(const infd_kernel_args *a, const dnnl_memory_desc_t *from_md,
                                    const void *data, const dnnl_memory_desc_t *to_md, void **out,
                                    infd_error *err)
{
    dnnl_engine_t eng = infd_dnnl_engine();
    dnnl_memory_t from = NULL, to = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_stream_t stream = NULL;
    size_t n = dnnl_memory_desc_get_size(to_md);
    void *buf = infd_aligned_alloc(64, n ? n : 1);
    infd_status st;
    *out = NULL;
    if (!buf)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY,
                               "out of memory for %zu bytes of reordered weights", n);
    /* The source is only read; oneDNN's API has no const handle. */
    st = infd_dnnl_check(a, err, dnnl_memory_create(&from, from_md, eng, (void *)data),
                         "oneDNN weight memory creation failed");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, dnnl_memory_create(&to, to_md, eng, buf),
                             "oneDNN weight memory creation failed");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(
            a, err, dnnl_reorder_primitive_desc_create(&pd, from_md, eng, to_md, eng, NULL),
            "oneDNN weight reorder rejected the layouts");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, dnnl_primitive_create(&prim, pd),
                             "oneDNN weight reorder creation failed");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, dnnl_stream_create(&stream, eng, dnnl_stream_default_flags),
                             "oneDNN stream creation failed");
    if (st == INFD_STATUS_OK) {
        dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, from }, { DNNL_ARG_TO, to } };
        st = infd_dnnl_check(a, err, dnnl_primitive_execute(prim, stream, 2, args),
                             "oneDNN weight reorder failed");
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, dnnl_stream_wait(stream), "oneDNN weight reorder failed");
    if (stream)
        dnnl_stream_destroy(stream);
    if (prim)
        dnnl_primitive_destroy(prim);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (to)
        dnnl_memory_destroy(to);
    if (from)
        dnnl_memory_destroy(from);
    if (st == INFD_STATUS_OK) {
        *out = buf;
        buf = NULL;
    }
    infd_free(buf);
    return st;
}

infd_status infd_dnnl_exec_split(infd_dnnl_exec *e, const infd_kernel_args *a, int n_parts,
                                 int arg_id, size_t stride, infd_error *err)
{
    for (int i = 0; i < e->n_args; i++) {
        if (e->arg_ids[i] == arg_id && e->arg_from[i] != INFD_DNNL_FROM_CONST) {
            e->n_parts = n_parts;
            e->part_stride[i] = stride;
            return INFD_STATUS_OK;
        }
    }
    return infd_node_error(a, err, INFD_STATUS_INTERNAL,
                           "split run: no run-time oneDNN argument %d", arg_id);
}

void infd_dnnl_exec_run(const infd_dnnl_exec *e, const infd_kernel_io *io)
{
    if (!e->prim)
        return;
    infd_dnnl_set_threads(e->n_threads);
    dnnl_exec_arg_t *args = &e->args[io->slot * INFD_DNNL_MAX_ARGS];
    char *base[INFD_DNNL_MAX_ARGS] = { 0 }; /* run-time arguments; constants keep theirs */
    for (int i = 0; i < e->n_args; i++) {
        if (e->arg_from[i] == INFD_DNNL_FROM_INPUT)
            base[i] = (char *)io->inputs[e->arg_index[i]];
        else if (e->arg_from[i] == INFD_DNNL_FROM_OUTPUT)
            base[i] = io->outputs[e->arg_index[i]];
        else if (e->arg_from[i] == INFD_DNNL_FROM_WORKSPACE)
            base[i] = (char *)io->workspace + e->arg_offset[i];
    }
    dnnl_status_t s = dnnl_success;
    for (int part = 0; part < (e->n_parts > 1 ? e->n_parts : 1); part++) {
        for (int i = 0; i < e->n_args; i++) {
            if (e->arg_from[i] != INFD_DNNL_FROM_CONST)
                dnnl_memory_set_data_handle(args[i].memory,
                                            base[i] + (size_t)part * e->part_stride[i]);
        }
        s = dnnl_primitive_execute(e->prim, e->streams[io->slot], e->n_args, args);
        INFD_ASSERT(s == dnnl_success);
    }
    s = dnnl_stream_wait(e->streams[io->slot]);
    INFD_ASSERT(s == dnnl_success);
    INFD_UNUSED(s);
}

void infd_dnnl_exec_fini(infd_dnnl_exec *e)
{
    if (e->args) {
        for (int i = 0; i < e->n_slots * INFD_DNNL_MAX_ARGS; i++) {
            if (e->args[i].memory)
                dnnl_memory_destroy(e->args[i].memory);
        }
    }
    if (e->streams) {
        for (int s = 0; s < e->n_slots; s++) {
            if (e->streams[s])
                dnnl_stream_destroy(e->streams[s]);
        }
    }
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    for (int i = 0; i < e->n_forms; i++)
        infd_weight_form_release(e->forms[i]);
    infd_free(e->args);
    infd_free(e->streams);
    memset(e, 0, sizeof(*e));
}

/* ---- Fusion hooks ------------------------------------------------------- */

static const char *const fused_acts[] = { "Relu",        "LeakyRelu", "Clip",     "Sigmoid",
                                          "HardSigmoid", "Tanh",      "HardSwish" };

/* Every fusion attribute this file reads; any other _fused_* is declined,
 * so a pass that learns a new one cannot be silently ignored here. */
static const char *const fused_attrs[] = { "_fused_activation", "_fused_alpha",
                                           "_fused_beta",       "_fused_sum",
                                           "_fused_post_scale", "_fused_post_shift" };

bool infd_dnnl_fused_supported(const infd_kernel_args *a, int residual_input, infd_error *why)
{
    const char *act = NULL;
    int64_t sum = 0;
    float scale = 1.0f, shift = 0.0f;
    for (int32_t k = 0; k < a->node->n_attrs; k++) {
        const char *name = a->node->attrs[k].name;
        bool known = strncmp(name, "_fused_", 7) != 0;
        for (size_t i = 0; i < INFD_ARRAY_SIZE(fused_attrs) && !known; i++)
            known = strcmp(name, fused_attrs[i]) == 0;
        if (!known) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "fusion attribute '%s' is not supported", name);
            return false;
        }
    }
    if (infd_ir_attr_string(a->g, a->node, "_fused_activation", NULL, &act, why) !=
            INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "_fused_sum", 0, &sum, why) != INFD_STATUS_OK ||
        infd_ir_attr_float(a->g, a->node, "_fused_post_scale", 1.0f, &scale, why) !=
            INFD_STATUS_OK ||
        infd_ir_attr_float(a->g, a->node, "_fused_post_shift", 0.0f, &shift, why) != INFD_STATUS_OK)
        return false;
    if (act) {
        bool known = false;
        for (size_t i = 0; i < INFD_ARRAY_SIZE(fused_acts); i++)
            known = known || strcmp(act, fused_acts[i]) == 0;
        if (!known) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "fused activation '%s' is not supported", act);
            return false;
        }
    }
    if (sum) {
        const infd_ir_value *r = residual_input < a->n_inputs ? a->inputs[residual_input] : NULL;
        const infd_ir_value *y = a->outputs[0];
        bool same = r && r->dtype == INFD_DTYPE_FP32 && r->shape.rank == y->shape.rank;
        for (int32_t i = 0; same && i < y->shape.rank; i++)
            same = r->shape.dims[i].value == y->shape.dims[i].value;
        if (!same) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "_fused_sum needs an FP32 input %d shaped like the output",
                            residual_input);
            return false;
        }
    }
    return true;
}

/* Appends the eltwise post-op(s) of fused activation `act`. */
static infd_status append_activation(const infd_kernel_args *a, dnnl_post_ops_t po, const char *act,
                                     infd_error *err)
{
    float alpha = 0, beta = 0;
    infd_status st;
    dnnl_alg_kind_t alg = dnnl_eltwise_relu;
    float dalpha = 0, dbeta = 0;
    if (strcmp(act, "LeakyRelu") == 0) {
        dalpha = 0.01f;
    } else if (strcmp(act, "Clip") == 0) {
        alg = dnnl_eltwise_clip_v2;
        dalpha = -INFINITY;
        dbeta = INFINITY;
    } else if (strcmp(act, "Sigmoid") == 0) {
        alg = dnnl_eltwise_logistic;
    } else if (strcmp(act, "Tanh") == 0) {
        alg = dnnl_eltwise_tanh;
    } else if (strcmp(act, "HardSwish") == 0) {
        alg = dnnl_eltwise_hardswish; /* x * min(max(x + 3, 0), 6) / 6; alpha, beta unused */
    } else if (strcmp(act, "HardSigmoid") == 0) {
        alg = dnnl_eltwise_linear;
        dalpha = 0.2f;
        dbeta = 0.5f;
    }
    st = infd_ir_attr_float(a->g, a->node, "_fused_alpha", dalpha, &alpha, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_float(a->g, a->node, "_fused_beta", dbeta, &beta, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, beta),
                             "oneDNN activation post-op rejected");
    /* HardSigmoid is max(0, min(1, alpha x + beta)): a linear step, then a clip. */
    if (st == INFD_STATUS_OK && strcmp(act, "HardSigmoid") == 0)
        st = infd_dnnl_check(
            a, err, dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip_v2, 0.0f, 1.0f),
            "oneDNN activation post-op rejected");
    return st;
}

infd_status infd_dnnl_fused_append(const infd_kernel_args *a, dnnl_post_ops_t po,
                                   const dnnl_memory_desc_t *dst_md, int *residual_po,
                                   infd_error *err)
{
    const char *act = NULL;
    int64_t sum = 0;
    float scale = 1.0f, shift = 0.0f;
    infd_status st;
    *residual_po = -1;
    st = infd_ir_attr_string(a->g, a->node, "_fused_activation", NULL, &act, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_int(a->g, a->node, "_fused_sum", 0, &sum, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_float(a->g, a->node, "_fused_post_scale", 1.0f, &scale, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_float(a->g, a->node, "_fused_post_shift", 0.0f, &shift, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (sum) {
        st = infd_dnnl_check(a, err, dnnl_post_ops_append_binary(po, dnnl_binary_add, dst_md),
                             "oneDNN residual post-op rejected");
        if (st != INFD_STATUS_OK)
            return st;
        *residual_po = dnnl_post_ops_len(po) - 1;
    }
    if (act)
        st = append_activation(a, po, act, err);
    /* The trailing scale and shift: one more eltwise step, alpha x + beta. */
    if (st == INFD_STATUS_OK && (scale != 1.0f || shift != 0.0f))
        st = infd_dnnl_check(
            a, err, dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, scale, shift),
            "oneDNN scale-and-shift post-op rejected");
    return st;
}

/* ---- Conv and pool windows ----------------------------------------------- */

/* Reads an ints attribute of exactly `n` values into out[], or fills it with
 * `dflt` when absent. */
static infd_status attr_ints_n(const infd_kernel_args *a, const char *name, int n, int64_t dflt,
                               int64_t *out, infd_error *err)
{
    const int64_t *v = NULL;
    int32_t nv = 0;
    infd_status st = infd_ir_attr_ints(a->g, a->node, name, &v, &nv, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (!v) {
        for (int i = 0; i < n; i++)
            out[i] = dflt;
        return INFD_STATUS_OK;
    }
    if (nv != n)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "attribute %s has %d values, expected %d", name, (int)nv, n);
    for (int i = 0; i < n; i++)
        out[i] = v[i];
    return INFD_STATUS_OK;
}

infd_status infd_dnnl_window_get(const infd_kernel_args *a, const int64_t *kernel,
                                 infd_dnnl_window *w, infd_error *err)
{
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    const char *auto_pad = NULL;
    int64_t pads[6];
    infd_status st;
    memset(w, 0, sizeof(*w));
    if (x->shape.rank < 3 || x->shape.rank > 5 || y->shape.rank != x->shape.rank)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "oneDNN takes 1-D to 3-D windows; input rank is %d",
                               (int)x->shape.rank);
    w->n_sp = x->shape.rank - 2;
    if (kernel)
        memcpy(w->kernel, kernel, sizeof(int64_t) * (size_t)w->n_sp);
    else if ((st = attr_ints_n(a, "kernel_shape", w->n_sp, -1, w->kernel, err)) != INFD_STATUS_OK)
        return st;
    if ((st = attr_ints_n(a, "strides", w->n_sp, 1, w->strides, err)) != INFD_STATUS_OK ||
        (st = attr_ints_n(a, "dilations", w->n_sp, 1, w->dilations, err)) != INFD_STATUS_OK ||
        (st = attr_ints_n(a, "pads", 2 * w->n_sp, 0, pads, err)) != INFD_STATUS_OK ||
        (st = infd_ir_attr_string(a->g, a->node, "auto_pad", "NOTSET", &auto_pad, err)) !=
            INFD_STATUS_OK)
        return st;
    for (int i = 0; i < w->n_sp; i++) {
        int64_t in = x->shape.dims[2 + i].value, out = y->shape.dims[2 + i].value;
        int64_t k = w->kernel[i], s = w->strides[i], d = w->dilations[i];
        if (k < 1 || s < 1 || d < 1)
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "kernel_shape, strides and dilations must be >= 1");
        int64_t dk = (k - 1) * d + 1;
        int64_t pl = pads[i], pr = pads[i + w->n_sp];
        if (strcmp(auto_pad, "VALID") == 0) {
            pl = pr = 0;
        } else if (strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0) {
            int64_t total = INFD_MAX(0, (out - 1) * s + dk - in);
            /* SAME_UPPER puts the odd pixel at the end, SAME_LOWER at the start. */
            pl = auto_pad[5] == 'U' ? total / 2 : total - total / 2;
            pr = total - pl;
        } else if (strcmp(auto_pad, "NOTSET") != 0) {
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "auto_pad '%s' is not one of NOTSET, SAME_UPPER, "
                                   "SAME_LOWER, VALID",
                                   auto_pad);
        }
        if (pl < 0 || pr < 0)
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT, "pads must be >= 0");
        /* oneDNN wants out == (in + pl + pr - dk) / s + 1 exactly: ceil_mode
         * (and SAME) windows that overhang the end pad get it widened. */
        int64_t need = (out - 1) * s + dk - in - pl;
        if (in + pl + pr < dk || (in + pl + pr - dk) / s + 1 != out) {
            if (need < pr || (in + pl + need - dk) / s + 1 != out)
                return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                       "output dim %d is %lld, which the window attributes "
                                       "do not produce from input %lld",
                                       2 + i, (long long)out, (long long)in);
            w->extended[i] = need > pr;
            pr = need;
        }
        w->pad_l[i] = pl;
        w->pad_r[i] = pr;
    }
    return INFD_STATUS_OK;
}
