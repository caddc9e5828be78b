/*
 * dnnl_matmul.c - MatMul and Gemm on the oneDNN matmul primitive (FP32).
 *
 * MatMul: numpy semantics. A 1-D A is [1, K] and a 1-D B is [K, 1] (the
 * squeezed output has the same memory); batch dims are padded with leading
 * 1s to one rank and broadcast by oneDNN (each is 1 or equals the output's).
 *
 * Gemm: Y = alpha A' B' + beta C. Transposes are strides on the plain
 * descriptors (a constant B is reordered once into the layout oneDNN picks,
 * whatever its transB). alpha is the output scale. C, broadcast to [M, N]
 * as ONNX allows ([], [N], [1, N], [M, 1], [M, N]):
 *   alpha == 1, constant C   bias = beta C (kernel-owned copy)
 *   constant C               binary-add post-op of beta C (after the scale)
 *   run-time C, beta == 1    binary-add post-op reading input 2
 *   run-time C, beta != 1    declined (the reference kernel takes it)
 *
 * Both read the fusion attributes documented in dnnl_conv.c; the residual
 * is input 2 for MatMul and input 3 for Gemm.
 */
#include <string.h>

#include "backends/cpu/dnnl_common.h"
#include "core/alloc.h"
#include "core/common.h"

/* What a matmul kernel is built from. */
typedef struct mm_spec {
    int ndims;
    dnnl_memory_desc_t src, w_plain, dst;
    const void *w_const; /* B's data when constant, else NULL (input 1) */
    /* Added to the product: bias or post-op, from c_const or input c_input. */
    bool c_bias;
    bool c_post_op;
    dnnl_memory_desc_t c_md;
    float *c_const; /* owned until handed to the executor */
    int c_input;
    float scale;
    int residual_input;
} mm_spec;

static infd_status mm_compile(const infd_kernel_args *a, mm_spec *m, infd_kernel **out,
                              infd_error *err)
{
    dnnl_memory_desc_t w_md;
    dnnl_matmul_desc_t desc;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    int c_po = -1, residual_po = -1;
    infd_status st;
    *out = NULL;
    if (m->w_const) {
        st = infd_dnnl_check(a, err, infd_dnnl_md_any(&w_md, m->ndims, m->w_plain.dims),
                             "oneDNN matmul weights descriptor");
    } else {
        w_md = m->w_plain;
        st = INFD_STATUS_OK;
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(
            a, err,
            dnnl_matmul_desc_init(&desc, &m->src, &w_md, m->c_bias ? &m->c_md : NULL, &m->dst),
            "oneDNN matmul descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, dnnl_post_ops_create(&po), "oneDNN post-ops");
    if (st == INFD_STATUS_OK && m->c_post_op) {
        st = infd_dnnl_check(a, err, dnnl_post_ops_append_binary(po, dnnl_binary_add, &m->c_md),
                             "oneDNN post-op for C rejected");
        c_po = dnnl_post_ops_len(po) - 1;
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_fused_append(a, po, &m->dst, &residual_po, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, po, m->scale, "matmul", &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create(a, "dnnl:matmul", pd, &k, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC, INFD_DNNL_FROM_INPUT, 0, &m->src, err);
    if (st == INFD_STATUS_OK && m->w_const) {
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        st = infd_dnnl_exec_arg_reordered(&k->exec, a, DNNL_ARG_WEIGHTS, &m->w_plain, m->w_const,
                                          want, 1, &k->base.base.unread_inputs, err);
    } else if (st == INFD_STATUS_OK) {
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_WEIGHTS, INFD_DNNL_FROM_INPUT, 1, &m->w_plain,
                                err);
    }
    if (st == INFD_STATUS_OK && (m->c_bias || m->c_post_op)) {
        int id = m->c_bias ? DNNL_ARG_BIAS : DNNL_ARG_ATTR_MULTIPLE_POST_OP(c_po) | DNNL_ARG_SRC_1;
        if (m->c_const) {
            st = infd_dnnl_exec_arg_const(&k->exec, a, id, &m->c_md, m->c_const, err);
            m->c_const = NULL;
        } else {
            st = infd_dnnl_exec_arg(&k->exec, a, id, INFD_DNNL_FROM_INPUT, m->c_input, &m->c_md,
                                    err);
        }
    }
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_DST, INFD_DNNL_FROM_OUTPUT, 0, &m->dst, err);
    if (st == INFD_STATUS_OK && residual_po >= 0)
        st = infd_dnnl_exec_arg(&k->exec, a,
                                DNNL_ARG_ATTR_MULTIPLE_POST_OP(residual_po) | DNNL_ARG_SRC_1,
                                INFD_DNNL_FROM_INPUT, m->residual_input, &m->dst, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    infd_free(m->c_const);
    m->c_const = NULL;
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}

/* ---- MatMul --------------------------------------------------------------- */

/* MatMul's operands as oneDNN sees them: one rank, 1-D operands expanded. */
typedef struct mm_dims {
    int nd;
    int64_t a[DNNL_MAX_NDIMS], b[DNNL_MAX_NDIMS], y[DNNL_MAX_NDIMS];
} mm_dims;

static infd_status matmul_dims(const infd_kernel_args *a, mm_dims *d, infd_error *err)
{
    const infd_ir_value *va = a->inputs[0], *vb = a->inputs[1], *vy = a->outputs[0];
    int ra = va->shape.rank, rb = vb->shape.rank;
    int64_t ea[DNNL_MAX_NDIMS], eb[DNNL_MAX_NDIMS];
    if (ra < 1 || rb < 1)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "MatMul operands must have rank >= 1");
    int na = ra == 1 ? 2 : ra, nb = rb == 1 ? 2 : rb;
    d->nd = INFD_MAX(na, nb);
    if (d->nd > DNNL_MAX_NDIMS)
        return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "rank %d is above oneDNN's %d",
                               d->nd, DNNL_MAX_NDIMS);
    if (ra == 1) {
        ea[0] = 1;
        ea[1] = va->shape.dims[0].value;
    } else {
        for (int i = 0; i < ra; i++)
            ea[i] = va->shape.dims[i].value;
    }
    if (rb == 1) {
        eb[0] = vb->shape.dims[0].value;
        eb[1] = 1;
    } else {
        for (int i = 0; i < rb; i++)
            eb[i] = vb->shape.dims[i].value;
    }
    for (int i = 0; i < d->nd; i++) {
        int ia = i - (d->nd - na), ib = i - (d->nd - nb);
        d->a[i] = ia >= 0 ? ea[ia] : 1;
        d->b[i] = ib >= 0 ? eb[ib] : 1;
    }
    int n = d->nd;
    if (d->a[n - 1] != d->b[n - 2])
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "MatMul inner dims differ: %lld vs %lld", (long long)d->a[n - 1],
                               (long long)d->b[n - 2]);
    int64_t numel = 1;
    for (int i = 0; i < n - 2; i++) {
        if (d->a[i] != d->b[i] && d->a[i] != 1 && d->b[i] != 1)
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "MatMul batch dims %lld and %lld do not broadcast",
                                   (long long)d->a[i], (long long)d->b[i]);
        d->y[i] = INFD_MAX(d->a[i], d->b[i]);
        numel *= d->y[i];
    }
    d->y[n - 2] = d->a[n - 2];
    d->y[n - 1] = d->b[n - 1];
    numel *= d->y[n - 2] * d->y[n - 1];
    if (numel != infd_node_numel(vy))
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "MatMul output has %lld elements, expected %lld",
                               (long long)infd_node_numel(vy), (long long)numel);
    return INFD_STATUS_OK;
}

bool infd_dnnl_matmul_supports(const infd_kernel_args *a, infd_error *why)
{
    mm_dims d;
    if (!infd_dnnl_fp32_only(a, 2, why) || matmul_dims(a, &d, why) != INFD_STATUS_OK)
        return false;
    return infd_dnnl_fused_supported(a, 2, why);
}

infd_status infd_dnnl_matmul_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    mm_dims d;
    mm_spec m;
    memset(&m, 0, sizeof(m));
    infd_status st = matmul_dims(a, &d, err);
    if (st != INFD_STATUS_OK)
        return st;
    m.ndims = d.nd;
    dnnl_status_t s = infd_dnnl_md_plain(&m.src, d.nd, d.a);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&m.w_plain, d.nd, d.b);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&m.dst, d.nd, d.y);
    if ((st = infd_dnnl_check(a, err, s, "oneDNN matmul descriptors")) != INFD_STATUS_OK)
        return st;
    m.w_const = a->inputs[1]->data;
    m.scale = 1.0f;
    m.residual_input = 2;
    return mm_compile(a, &m, out, err);
}

/* ---- Gemm ----------------------------------------------------------------- */

typedef struct gemm_attrs {
    int64_t trans_a, trans_b;
    float alpha, beta;
    int64_t m, k, n;
    int64_t c_dims[2]; /* C broadcast-ready as [c0, c1] */
    const infd_ir_value *c;
} gemm_attrs;

static infd_status gemm_attrs_get(const infd_kernel_args *a, gemm_attrs *g, infd_error *err)
{
    const infd_ir_value *va = a->inputs[0], *vb = a->inputs[1];
    infd_status st;
    memset(g, 0, sizeof(*g));
    if ((st = infd_ir_attr_int(a->g, a->node, "transA", 0, &g->trans_a, err)) != INFD_STATUS_OK ||
        (st = infd_ir_attr_int(a->g, a->node, "transB", 0, &g->trans_b, err)) != INFD_STATUS_OK ||
        (st = infd_ir_attr_float(a->g, a->node, "alpha", 1.0f, &g->alpha, err)) != INFD_STATUS_OK ||
        (st = infd_ir_attr_float(a->g, a->node, "beta", 1.0f, &g->beta, err)) != INFD_STATUS_OK)
        return st;
    if (va->shape.rank != 2 || vb->shape.rank != 2)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT, "Gemm operands must be 2-D");
    g->m = va->shape.dims[g->trans_a ? 1 : 0].value;
    g->k = va->shape.dims[g->trans_a ? 0 : 1].value;
    g->n = vb->shape.dims[g->trans_b ? 0 : 1].value;
    if (vb->shape.dims[g->trans_b ? 1 : 0].value != g->k)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT, "Gemm inner dims differ");
    g->c = a->n_inputs > 2 ? a->inputs[2] : NULL;
    if (g->c && g->beta == 0.0f)
        g->c = NULL;
    if (g->c) {
        const infd_ir_value *c = g->c;
        if (c->dtype != INFD_DTYPE_FP32 || c->shape.rank > 2)
            return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                   "Gemm C must be FP32 of rank <= 2");
        g->c_dims[0] = c->shape.rank == 2 ? c->shape.dims[0].value : 1;
        g->c_dims[1] = c->shape.rank >= 1 ? c->shape.dims[c->shape.rank - 1].value : 1;
        if ((g->c_dims[0] != 1 && g->c_dims[0] != g->m) ||
            (g->c_dims[1] != 1 && g->c_dims[1] != g->n))
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "Gemm C does not broadcast to [%lld, %lld]", (long long)g->m,
                                   (long long)g->n);
        if (!c->data && g->beta != 1.0f)
            return infd_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                   "oneDNN Gemm takes a run-time C only with beta == 1");
    }
    return INFD_STATUS_OK;
}

bool infd_dnnl_gemm_supports(const infd_kernel_args *a, infd_error *why)
{
    gemm_attrs g;
    if (!infd_dnnl_fp32_only(a, 2, why) || gemm_attrs_get(a, &g, why) != INFD_STATUS_OK)
        return false;
    return infd_dnnl_fused_supported(a, 3, why);
}

infd_status infd_dnnl_gemm_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    gemm_attrs g;
    mm_spec m;
    memset(&m, 0, sizeof(m));
    infd_status st = gemm_attrs_get(a, &g, err);
    if (st != INFD_STATUS_OK)
        return st;
    dnnl_dims_t ad = { g.m, g.k }, bd = { g.k, g.n };
    dnnl_dims_t as = { g.trans_a ? 1 : g.k, g.trans_a ? g.m : 1 };
    dnnl_dims_t bs = { g.trans_b ? 1 : g.n, g.trans_b ? g.k : 1 };
    int64_t y64[2] = { g.m, g.n };
    m.ndims = 2;
    dnnl_status_t s = dnnl_memory_desc_init_by_strides(&m.src, 2, ad, dnnl_f32, as);
    if (s == dnnl_success)
        s = dnnl_memory_desc_init_by_strides(&m.w_plain, 2, bd, dnnl_f32, bs);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&m.dst, 2, y64);
    if (s == dnnl_success && g.c)
        s = infd_dnnl_md_plain(&m.c_md, 2, g.c_dims);
    if ((st = infd_dnnl_check(a, err, s, "oneDNN Gemm descriptors")) != INFD_STATUS_OK)
        return st;
    m.w_const = a->inputs[1]->data;
    m.scale = g.alpha;
    m.residual_input = 3;
    if (g.c) {
        m.c_input = 2;
        m.c_bias = g.alpha == 1.0f && g.c->data;
        m.c_post_op = !m.c_bias;
        if (g.c->data) {
            size_t n = (size_t)(g.c_dims[0] * g.c_dims[1]);
            m.c_const = infd_aligned_alloc(64, sizeof(float) * n);
            if (!m.c_const)
                return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for C");
            const float *c = g.c->data;
            for (size_t i = 0; i < n; i++)
                m.c_const[i] = g.beta * c[i];
        }
    }
    return mm_compile(a, &m, out, err);
}
