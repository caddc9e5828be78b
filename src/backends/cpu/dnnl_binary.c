/*
 * dnnl_binary.c - Add, Sub, Mul, Div on oneDNN binary (FP32, numpy
 * broadcasting within what oneDNN allows).
 *
 * oneDNN binary wants src0 shaped exactly like dst and src1 broadcastable
 * to it (each dim 1 or equal). Operands are right-aligned to the output's
 * rank; when only the second matches the output, Add and Mul swap their
 * operands. Anything else (both operands broadcast, Sub/Div with a
 * broadcast first operand, the legacy `broadcast` attribute) is declined so
 * the reference kernel takes it.
 *
 * Layouts: an operand shaped exactly like the output may arrive opaque (a
 * broadcast one stays plain); the output then takes that layout, or is
 * reordered to plain through the workspace when it must be plain.
 *
 * Speed: oneDNN 2.6 gives most mixes of a blocked src0 with anything but an
 * operand in the very same blocked format to its ref:any binary, two orders
 * of magnitude slower than jit. So:
 *   - a constant scalar operand (x+c, c+x, x-c, c-x, x*c, c*x, x/c) is an
 *     eltwise linear (alpha x + beta), jit on plain and blocked layouts;
 *     where that is ref too (a blocked layout with padded channels and
 *     beta != 0, which would write the padding), a binary with the scalar
 *     expanded to a per-channel constant in src0's blocked format;
 *   - otherwise, when the plain formulation is ref, the operands are copied
 *     into the opaque operand's blocked format (a broadcast [N, C, 1, ...]
 *     one into that format of its own shape) through the workspace;
 *   - when that is still ref, everything is computed plain.
 * Each step keeps the first formulation whose implementation is not ref.
 */
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/alloc.h"
#include "core/common.h"

typedef struct binary_plan {
    dnnl_alg_kind_t alg;
    int nd;
    int64_t src0[DNNL_MAX_NDIMS], src1[DNNL_MAX_NDIMS], dst[DNNL_MAX_NDIMS];
    int in0, in1; /* which node inputs feed src0 and src1 */
} binary_plan;

/* Right-aligns v's dims to rank nd. */
static void align_dims(const infd_ir_value *v, int nd, int64_t *out)
{
    int off = nd - v->shape.rank;
    for (int i = 0; i < nd; i++)
        out[i] = i < off ? 1 : v->shape.dims[i - off].value;
}

static bool dims_equal(const int64_t *x, const int64_t *y, int nd)
{
    for (int i = 0; i < nd; i++) {
        if (x[i] != y[i])
            return false;
    }
    return true;
}

static bool broadcasts_to(const int64_t *x, const int64_t *y, int nd)
{
    for (int i = 0; i < nd; i++) {
        if (x[i] != y[i] && x[i] != 1)
            return false;
    }
    return true;
}

static infd_status binary_plan_get(const infd_kernel_args *a, binary_plan *p, infd_error *err)
{
    static const struct {
        const char *op;
        dnnl_alg_kind_t alg;
        bool commutative;
    } algs[] = {
        { "Add", dnnl_binary_add, true },
        { "Sub", dnnl_binary_sub, false },
        { "Mul", dnnl_binary_mul, true },
        { "Div", dnnl_binary_div, false },
    };
    const infd_ir_value *y = a->outputs[0];
    bool commutative = false;
    p->alg = dnnl_alg_kind_undef;
    for (size_t i = 0; i < INFD_ARRAY_SIZE(algs); i++) {
        if (strcmp(algs[i].op, a->node->op_type) == 0) {
            p->alg = algs[i].alg;
            commutative = algs[i].commutative;
        }
    }
    if (p->alg == dnnl_alg_kind_undef)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "not a binary op");
    if (infd_ir_node_attr(a->node, "broadcast") || infd_ir_node_attr(a->node, "axis"))
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                               "legacy broadcast/axis attributes are not supported by oneDNN");
    p->nd = y->shape.rank == 0 ? 1 : y->shape.rank;
    if (a->inputs[0]->shape.rank > p->nd || a->inputs[1]->shape.rank > p->nd)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "an operand has a higher rank than the output");
    align_dims(y, p->nd, p->dst);
    align_dims(a->inputs[0], p->nd, p->src0);
    align_dims(a->inputs[1], p->nd, p->src1);
    p->in0 = 0;
    p->in1 = 1;
    if (!dims_equal(p->src0, p->dst, p->nd)) {
        if (!commutative || !dims_equal(p->src1, p->dst, p->nd))
            return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                   "oneDNN binary needs the first operand shaped like the "
                                   "output%s",
                                   commutative ? " (or the second, for Add/Mul)" : "");
        int64_t tmp[DNNL_MAX_NDIMS];
        memcpy(tmp, p->src0, sizeof(tmp));
        memcpy(p->src0, p->src1, sizeof(tmp));
        memcpy(p->src1, tmp, sizeof(tmp));
        p->in0 = 1;
        p->in1 = 0;
    }
    if (!broadcasts_to(p->src1, p->dst, p->nd))
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "operands do not broadcast to the output");
    return INFD_STATUS_OK;
}

/* True when input i has exactly the output's shape (same rank too). */
static bool shaped_like_output(const infd_kernel_args *a, int i)
{
    const infd_ir_value *v = i < a->n_inputs ? a->inputs[i] : NULL, *y = a->outputs[0];
    if (!v || v->shape.rank != y->shape.rank)
        return false;
    for (int32_t d = 0; d < y->shape.rank; d++) {
        if (v->shape.dims[d].value != y->shape.dims[d].value)
            return false;
    }
    return true;
}

bool infd_dnnl_binary_accepts_opaque(const infd_kernel_args *a, int i)
{
    return (i == 0 || i == 1) && a->n_outputs >= 1 && a->outputs[0] && shaped_like_output(a, i);
}

/* ---- formulations ---------------------------------------------------------- */

/* True when oneDNN picked its reference implementation for pd. */
static bool pd_is_ref(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return true;
    return strncmp(impl, "ref", 3) == 0;
}

/* A descriptor of `dims` in the blocked (or channels-last) format of
 * `like`; false when `like` is in none of those. */
static bool format_like(const dnnl_memory_desc_t *like, int nd, const int64_t *dims,
                        dnnl_memory_desc_t *out)
{
    static const dnnl_format_tag_t tags[][3] = {
        { dnnl_aBc16b, dnnl_aBcd16b, dnnl_aBcde16b },
        { dnnl_aBc8b, dnnl_aBcd8b, dnnl_aBcde8b },
        { dnnl_aBc4b, dnnl_aBcd4b, dnnl_aBcde4b },
        { dnnl_acb, dnnl_acdb, dnnl_acdeb },
    };
    dnnl_memory_desc_t probe;
    if (like->ndims != nd || nd < 3 || nd > 5)
        return false;
    for (size_t i = 0; i < INFD_ARRAY_SIZE(tags); i++) {
        dnnl_format_tag_t tag = tags[i][nd - 3];
        if (dnnl_memory_desc_init_by_tag(&probe, nd, like->dims, like->data_type, tag) ==
                dnnl_success &&
            dnnl_memory_desc_equal(&probe, like))
            return dnnl_memory_desc_init_by_tag(out, nd, dims, like->data_type, tag) ==
                   dnnl_success;
    }
    return false;
}

/* ---- scalar constant operand: eltwise linear --------------------------------- */

typedef struct scalar_plan {
    int var;             /* the non-constant input */
    float alpha, beta;   /* y = alpha x + beta */
    dnnl_alg_kind_t alg; /* the binary form with a constant src1: add or mul, */
    float c1;            /* by c1 */
} scalar_plan;

/* True for Add/Sub/Mul/Div of a value shaped like the output and a
 * constant FP32 scalar, in an order eltwise linear computes. Division by c
 * is multiplication by 1/c: within a rounding step of x / c, far inside
 * our tolerance (1e-4 + 1e-3 |y|). c / x is no linear map: declined. */
static bool scalar_plan_get(const infd_kernel_args *a, scalar_plan *p)
{
    const char *op = a->node->op_type;
    if (a->n_inputs != 2 || !a->inputs[0] || !a->inputs[1] ||
        infd_ir_node_attr(a->node, "broadcast") || infd_ir_node_attr(a->node, "axis"))
        return false;
    int ci = -1;
    for (int i = 1; i >= 0; i--) {
        const infd_ir_value *v = a->inputs[i];
        if (v->data && v->dtype == INFD_DTYPE_FP32 && infd_node_numel(v) == 1 &&
            v->shape.rank <= a->outputs[0]->shape.rank && shaped_like_output(a, 1 - i)) {
            ci = i;
            break;
        }
    }
    if (ci < 0)
        return false;
    float c = *(const float *)a->inputs[ci]->data;
    p->var = 1 - ci;
    p->alpha = 1.0f;
    p->beta = 0.0f;
    p->alg = dnnl_binary_add;
    if (strcmp(op, "Add") == 0) {
        p->beta = c;
    } else if (strcmp(op, "Sub") == 0) {
        p->alpha = ci == 1 ? 1.0f : -1.0f;
        p->beta = ci == 1 ? -c : c;
    } else if (strcmp(op, "Mul") == 0) {
        p->alpha = c;
        p->alg = dnnl_binary_mul;
    } else if (strcmp(op, "Div") == 0 && ci == 1) {
        p->alpha = 1.0f / c;
        p->alg = dnnl_binary_mul;
    } else {
        return false;
    }
    p->c1 = p->alg == dnnl_binary_add ? p->beta : p->alpha;
    return true;
}

static infd_status linear_pd(const infd_kernel_args *a, const scalar_plan *sp,
                             const dnnl_memory_desc_t *md, dnnl_primitive_desc_t *pd,
                             infd_error *err)
{
    dnnl_eltwise_desc_t desc;
    dnnl_status_t s = dnnl_eltwise_forward_desc_init(&desc, dnnl_forward_inference,
                                                     dnnl_eltwise_linear, md, sp->alpha, sp->beta);
    infd_status st = infd_dnnl_check(a, err, s, "oneDNN eltwise descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "eltwise", pd, err);
    return st;
}

/* x op c on a blocked x (opaque output allowed) as a binary with c
 * expanded to a per-channel constant in x's format; NULL *out when oneDNN
 * has no jit for it either. */
static infd_status scalar_binary_compile(const infd_kernel_args *a, const scalar_plan *sp,
                                         const dnnl_memory_desc_t *md, infd_kernel **out,
                                         infd_error *err)
{
    int64_t cdims[DNNL_MAX_NDIMS];
    dnnl_memory_desc_t c_plain, c_md;
    dnnl_binary_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    float *fill = NULL;
    void *buf = NULL;
    infd_status st = INFD_STATUS_OK;
    *out = NULL;
    if (sp->alpha != 1.0f && sp->beta != 0.0f)
        return INFD_STATUS_OK;
    for (int i = 0; i < md->ndims; i++)
        cdims[i] = i == 1 ? md->dims[1] : 1;
    if (md->ndims < 3 || !format_like(md, md->ndims, cdims, &c_md) ||
        infd_dnnl_md_plain(&c_plain, md->ndims, cdims) != dnnl_success ||
        dnnl_binary_desc_init(&desc, sp->alg, md, &c_md, md) != dnnl_success ||
        infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "binary", &pd, NULL) != INFD_STATUS_OK)
        return INFD_STATUS_OK;
    if (pd_is_ref(pd))
        goto out;
    fill = infd_malloc((size_t)cdims[1] * sizeof(float));
    if (!fill) {
        st = infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "no memory for a constant");
        goto out;
    }
    for (int64_t i = 0; i < cdims[1]; i++)
        fill[i] = sp->c1;
    st = infd_dnnl_reorder_const(a, &c_plain, fill, &c_md, &buf, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create(a, "dnnl:binary", pd, &k, err);
    if (st == INFD_STATUS_OK)
        st =
            infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC_0, INFD_DNNL_FROM_INPUT, sp->var, md, err);
    if (st == INFD_STATUS_OK) {
        st = infd_dnnl_exec_arg_const(&k->exec, a, DNNL_ARG_SRC_1, &c_md, buf, err);
        buf = NULL;
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, md, err);
    if (st == INFD_STATUS_OK) {
        infd_dnnl_kernel_publish(k, md);
        infd_dnnl_kernel_size_workspace(k, 0);
        *out = &k->base.base;
        k = NULL;
    }
out:
    infd_free(fill);
    infd_free(buf);
    infd_kernel_destroy(k ? &k->base.base : NULL);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* The scalar case: eltwise linear in the variable operand's layout (kept
 * for the output when it may be opaque), or on the plain output in place
 * after a copy into it, or (blocked with padding) scalar_binary_compile. */
static infd_status scalar_compile(const infd_kernel_args *a, const scalar_plan *sp,
                                  infd_kernel **out, infd_error *err)
{
    dnnl_memory_desc_t in_md, md;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    int64_t n = infd_node_numel(a->outputs[0]);
    bool opaque = infd_dnnl_input_md(a, sp->var, &in_md);
    bool in_place = false;
    infd_status st = INFD_STATUS_OK;
    *out = NULL;
    if (opaque && a->output_opaque_ok) {
        md = in_md;
        st = linear_pd(a, sp, &md, &pd, err);
        if (st == INFD_STATUS_OK && pd_is_ref(pd)) {
            st = scalar_binary_compile(a, sp, &md, out, err);
            if (st != INFD_STATUS_OK || *out) {
                dnnl_primitive_desc_destroy(pd);
                return st;
            }
            /* No jit either way: copy to plain and compute there. */
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
            opaque = true;
            in_place = true;
        }
    } else {
        in_place = opaque;
    }
    if (st == INFD_STATUS_OK && !pd) {
        st = infd_dnnl_check(a, err, infd_dnnl_md_plain(&md, 1, &n),
                             "oneDNN eltwise descriptor rejected the shapes");
        if (st == INFD_STATUS_OK)
            st = linear_pd(a, sp, &md, &pd, err);
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create(a, "dnnl:eltwise", pd, &k, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC,
                                in_place ? INFD_DNNL_FROM_OUTPUT : INFD_DNNL_FROM_INPUT,
                                in_place ? 0 : sp->var, &md, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, &md, err);
    if (st == INFD_STATUS_OK && in_place) {
        dnnl_memory_desc_t plain;
        st =
            infd_dnnl_check(a, err, infd_dnnl_md_value(&plain, a->outputs[0]), "oneDNN descriptor");
        if (st == INFD_STATUS_OK)
            st = infd_dnnl_exec_reorder(&k->pre, a, &in_md, INFD_DNNL_FROM_INPUT, sp->var, &plain,
                                        INFD_DNNL_FROM_OUTPUT, 0, 0, err);
    }
    if (st == INFD_STATUS_OK && opaque && !in_place)
        infd_dnnl_kernel_publish(k, &md);
    if (st == INFD_STATUS_OK)
        infd_dnnl_kernel_size_workspace(k, 0);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

bool infd_dnnl_binary_supports(const infd_kernel_args *a, infd_error *why)
{
    binary_plan p;
    scalar_plan sp;
    if (!infd_dnnl_fp32_only(a, 2, why))
        return false;
    return scalar_plan_get(a, &sp) || binary_plan_get(a, &p, why) == INFD_STATUS_OK;
}

/* ---- the general case -------------------------------------------------------- */

/* One binary formulation: each operand's md as the primitive reads it, and
 * where it lives: the input itself (`in` equal to it) or a workspace copy
 * at `ws` (in_md is then the input's own layout). */
typedef struct operand {
    int input;
    dnnl_memory_desc_t in_md; /* the input's layout */
    dnnl_memory_desc_t md;    /* what the primitive reads */
    bool copy;
    size_t ws;
} operand;

static dnnl_status_t operand_as(operand *o, const dnnl_memory_desc_t *md, size_t *head)
{
    o->md = *md;
    o->copy = !dnnl_memory_desc_equal(&o->in_md, md);
    if (o->copy) {
        o->ws = *head;
        *head += infd_align_up(dnnl_memory_desc_get_size(md), 64);
    }
    return dnnl_success;
}

/* Builds the kernel for operands o[2] and dst md `mdy` whose pd is `pd`
 * (borrowed), copies in pre steps. */
static infd_status binary_build(const infd_kernel_args *a, const_dnnl_primitive_desc_t pd,
                                const operand *o, size_t head, const dnnl_memory_desc_t *mdy,
                                bool plain_out, infd_kernel **out, infd_error *err)
{
    infd_dnnl_kernel *k = NULL;
    infd_dnnl_dst dst;
    infd_status st = infd_dnnl_check(a, err, infd_dnnl_dst_get(a, mdy, head, &dst),
                                     "oneDNN binary descriptor rejected the shapes");
    /* A rank-0 output is described as [1]: plain either way. */
    if (st == INFD_STATUS_OK && plain_out)
        dst.via_mid = dst.publish = false;
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create_at(a, "dnnl:binary", pd, dst.head, &k, err);
    for (int i = 0; i < 2 && st == INFD_STATUS_OK; i++) {
        int arg = i == 0 ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC_1;
        if (o[i].copy) {
            st = infd_dnnl_exec_reorder(i == 0 ? &k->pre : &k->pre2, a, &o[i].in_md,
                                        INFD_DNNL_FROM_INPUT, (size_t)o[i].input, &o[i].md,
                                        INFD_DNNL_FROM_WORKSPACE, o[i].ws, dst.head, err);
            if (st == INFD_STATUS_OK)
                st = infd_dnnl_exec_arg_ws(&k->exec, a, arg, o[i].ws, &o[i].md, err);
        } else {
            st = infd_dnnl_exec_arg(&k->exec, a, arg, INFD_DNNL_FROM_INPUT, o[i].input, &o[i].md,
                                    err);
        }
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_dst_arg(k, a, &dst, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_dst_finish(k, a, &dst, err);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

static dnnl_status_t binary_try(const binary_plan *p, const operand *o,
                                const dnnl_memory_desc_t *mdy, const infd_kernel_args *a,
                                dnnl_primitive_desc_t *pd)
{
    dnnl_binary_desc_t desc;
    *pd = NULL;
    dnnl_status_t s = dnnl_binary_desc_init(&desc, p->alg, &o[0].md, &o[1].md, mdy);
    if (s == dnnl_success &&
        infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "binary", pd, NULL) != INFD_STATUS_OK)
        s = dnnl_unimplemented;
    return s;
}

infd_status infd_dnnl_binary_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    binary_plan p;
    scalar_plan sp;
    operand o[2];
    dnnl_memory_desc_t mdy, blocked;
    dnnl_primitive_desc_t pd = NULL;
    size_t head = 0;
    *out = NULL;
    if (scalar_plan_get(a, &sp))
        return scalar_compile(a, &sp, out, err);
    infd_status st = binary_plan_get(a, &p, err);
    if (st != INFD_STATUS_OK)
        return st;
    /* An opaque operand has the output's shape (accepts_opaque), so its
     * layout describes src0/src1 as well; the output takes src0's opaque
     * layout, else src1's. */
    memset(o, 0, sizeof(o));
    o[0].input = p.in0;
    o[1].input = p.in1;
    bool op0 = infd_dnnl_input_is_opaque(a, p.in0), op1 = infd_dnnl_input_is_opaque(a, p.in1);
    dnnl_status_t s = infd_dnnl_md_plain(&o[0].in_md, p.nd, p.src0);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&o[1].in_md, p.nd, p.src1);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&mdy, p.nd, p.dst);
    if (op0)
        infd_dnnl_input_md(a, p.in0, &o[0].in_md);
    if (op1)
        infd_dnnl_input_md(a, p.in1, &o[1].in_md);
    o[0].md = o[0].in_md;
    o[1].md = o[1].in_md;
    if (op0 || op1)
        mdy = op0 ? o[0].md : o[1].md;
    if (s == dnnl_success)
        s = binary_try(&p, o, &mdy, a, &pd);
    st = infd_dnnl_check(a, err, s, "oneDNN binary descriptor rejected the shapes");
    if (st != INFD_STATUS_OK)
        return st;
    /* ref:any: both operands in the opaque one's format (the broadcast one
     * in that format of its own dims), copied through the workspace. */
    if (pd_is_ref(pd) && (op0 || op1) && format_like(&mdy, p.nd, p.src1, &blocked)) {
        operand t[2] = { o[0], o[1] };
        dnnl_primitive_desc_t pd2 = NULL;
        size_t h = 0;
        operand_as(&t[0], &mdy, &h);
        operand_as(&t[1], &blocked, &h);
        if (binary_try(&p, t, &mdy, a, &pd2) == dnnl_success && !pd_is_ref(pd2)) {
            dnnl_primitive_desc_destroy(pd);
            pd = pd2;
            o[0] = t[0];
            o[1] = t[1];
            head = h;
        } else if (pd2) {
            dnnl_primitive_desc_destroy(pd2);
        }
    }
    /* Still ref: compute plain (the opaque operands copied out). */
    if (pd_is_ref(pd) && (op0 || op1)) {
        operand t[2] = { o[0], o[1] };
        dnnl_memory_desc_t p0, p1, py;
        dnnl_primitive_desc_t pd2 = NULL;
        size_t h = 0;
        if (infd_dnnl_md_plain(&p0, p.nd, p.src0) == dnnl_success &&
            infd_dnnl_md_plain(&p1, p.nd, p.src1) == dnnl_success &&
            infd_dnnl_md_plain(&py, p.nd, p.dst) == dnnl_success) {
            t[0].in_md = op0 ? t[0].in_md : p0;
            t[1].in_md = op1 ? t[1].in_md : p1;
            operand_as(&t[0], &p0, &h);
            operand_as(&t[1], &p1, &h);
            if (binary_try(&p, t, &py, a, &pd2) == dnnl_success && !pd_is_ref(pd2)) {
                dnnl_primitive_desc_destroy(pd);
                pd = pd2;
                o[0] = t[0];
                o[1] = t[1];
                head = h;
                mdy = py;
                op0 = op1 = false;
            } else if (pd2) {
                dnnl_primitive_desc_destroy(pd2);
            }
        }
    }
    st = binary_build(a, pd, o, head, &mdy, !op0 && !op1, out, err);
    dnnl_primitive_desc_destroy(pd);
    return st;
}
