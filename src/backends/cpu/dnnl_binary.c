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
 */
#include <string.h>

#include "backends/cpu/dnnl_common.h"
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
        return infd_cpu_node_error(a, err, INFD_STATUS_UNIMPLEMENTED, "not a binary op");
    if (infd_ir_node_attr(a->node, "broadcast") || infd_ir_node_attr(a->node, "axis"))
        return infd_cpu_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
                                   "legacy broadcast/axis attributes are not supported by oneDNN");
    p->nd = y->shape.rank == 0 ? 1 : y->shape.rank;
    if (a->inputs[0]->shape.rank > p->nd || a->inputs[1]->shape.rank > p->nd)
        return infd_cpu_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "an operand has a higher rank than the output");
    align_dims(y, p->nd, p->dst);
    align_dims(a->inputs[0], p->nd, p->src0);
    align_dims(a->inputs[1], p->nd, p->src1);
    p->in0 = 0;
    p->in1 = 1;
    if (!dims_equal(p->src0, p->dst, p->nd)) {
        if (!commutative || !dims_equal(p->src1, p->dst, p->nd))
            return infd_cpu_node_error(a, err, INFD_STATUS_UNIMPLEMENTED,
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
        return infd_cpu_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "operands do not broadcast to the output");
    return INFD_STATUS_OK;
}

bool infd_dnnl_binary_supports(const infd_kernel_args *a, infd_error *why)
{
    binary_plan p;
    return infd_dnnl_fp32_only(a, 2, why) && binary_plan_get(a, &p, why) == INFD_STATUS_OK;
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

infd_status infd_dnnl_binary_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    binary_plan p;
    dnnl_memory_desc_t md0, md1, mdy;
    dnnl_binary_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    infd_dnnl_kernel *k = NULL;
    infd_dnnl_dst dst;
    *out = NULL;
    infd_status st = binary_plan_get(a, &p, err);
    if (st != INFD_STATUS_OK)
        return st;
    /* An opaque operand has the output's shape (accepts_opaque), so its
     * layout describes src0/src1 as well; the output takes src0's opaque
     * layout, else src1's. */
    bool op0 = infd_dnnl_input_is_opaque(a, p.in0), op1 = infd_dnnl_input_is_opaque(a, p.in1);
    dnnl_status_t s = infd_dnnl_md_plain(&md0, p.nd, p.src0);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&md1, p.nd, p.src1);
    if (s == dnnl_success)
        s = infd_dnnl_md_plain(&mdy, p.nd, p.dst);
    if (op0)
        infd_dnnl_input_md(a, p.in0, &md0);
    if (op1)
        infd_dnnl_input_md(a, p.in1, &md1);
    if (op0 || op1)
        mdy = op0 ? md0 : md1;
    if (s == dnnl_success)
        s = dnnl_binary_desc_init(&desc, p.alg, &md0, &md1, &mdy);
    st = infd_dnnl_check(a, err, s, "oneDNN binary descriptor rejected the shapes");
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_pd_create(a, &desc, NULL, 1.0f, "binary", &pd, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_check(a, err, infd_dnnl_dst_get(a, &mdy, 0, &dst),
                             "oneDNN binary descriptor rejected the shapes");
    /* A rank-0 output is described as [1]: plain either way. */
    if (st == INFD_STATUS_OK && !op0 && !op1)
        dst.via_mid = dst.publish = false;
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_kernel_create_at(a, "dnnl:binary", pd, dst.head, &k, err);
    if (st == INFD_STATUS_OK)
        st =
            infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC_0, INFD_DNNL_FROM_INPUT, p.in0, &md0, err);
    if (st == INFD_STATUS_OK)
        st =
            infd_dnnl_exec_arg(&k->exec, a, DNNL_ARG_SRC_1, INFD_DNNL_FROM_INPUT, p.in1, &md1, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_dst_arg(k, a, &dst, err);
    if (st == INFD_STATUS_OK)
        st = infd_dnnl_dst_finish(k, a, &dst, err);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != INFD_STATUS_OK) {
        infd_kernel_destroy(k ? &k->base.base : NULL);
        return st;
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
