/*
 * node_params.c - ONNX node parameters shared by the backends
 * (node_params.h).
 */
#include "graph/node_params.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

infd_status infd_node_error(const infd_kernel_args *a, infd_error *err, infd_status code,
                            const char *fmt, ...)
{
    char msg[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return infd_error_set(err, code, "%s: node '%s' (%s): %s", a->g->source, a->node->name,
                          a->node->op_type, msg);
}

int64_t infd_node_numel(const infd_ir_value *v)
{
    int64_t n = 1;
    for (int32_t i = 0; i < v->shape.rank; i++)
        n *= v->shape.dims[i].value;
    return n;
}

bool infd_node_is_const(const infd_ir_value *v)
{
    return v && (v->data != NULL || infd_node_numel(v) == 0);
}

bool infd_node_const_ints(const infd_ir_value *v, int64_t *out, int64_t cap, int64_t *n)
{
    *n = 0;
    if (!infd_node_is_const(v))
        return false;
    int64_t count = infd_node_numel(v);
    if (count > cap || (v->dtype != INFD_DTYPE_INT64 && v->dtype != INFD_DTYPE_INT32))
        return false;
    for (int64_t i = 0; i < count; i++) {
        if (v->dtype == INFD_DTYPE_INT64) {
            int64_t x;
            memcpy(&x, (const char *)v->data + i * 8, 8);
            out[i] = x;
        } else {
            int32_t x;
            memcpy(&x, (const char *)v->data + i * 4, 4);
            out[i] = x;
        }
    }
    *n = count;
    return true;
}

static const infd_ir_value *input_at(const infd_kernel_args *a, int i)
{
    return i < a->n_inputs ? a->inputs[i] : NULL;
}

bool infd_slice_params(const infd_kernel_args *a, int64_t *starts, int64_t *ends, int64_t *axes,
                       int64_t *steps, int64_t *n, infd_error *why)
{
    int32_t rank = a->inputs[0]->shape.rank;
    int64_t n_ends = 0, n_axes = 0, n_steps = 0;
    bool has_axes = false, has_steps = false;
    if (a->g->opset < 10) {
        const int64_t *s = NULL, *e = NULL, *x = NULL;
        int32_t ns = 0, ne = 0, nx = 0;
        if (infd_ir_attr_ints(a->g, a->node, "starts", &s, &ns, why) != INFD_STATUS_OK ||
            infd_ir_attr_ints(a->g, a->node, "ends", &e, &ne, why) != INFD_STATUS_OK ||
            infd_ir_attr_ints(a->g, a->node, "axes", &x, &nx, why) != INFD_STATUS_OK)
            return false;
        if (ns > INFD_MAX_RANK || ne != ns || (x && nx != ns))
            goto bad_count;
        *n = ns;
        if (ns) {
            memcpy(starts, s, sizeof(int64_t) * (size_t)ns);
            memcpy(ends, e, sizeof(int64_t) * (size_t)ne);
        }
        if (x) {
            if (nx)
                memcpy(axes, x, sizeof(int64_t) * (size_t)nx);
            has_axes = true;
        }
    } else {
        const infd_ir_value *in_axes = input_at(a, 3), *in_steps = input_at(a, 4);
        if (!infd_node_is_const(input_at(a, 1)) || !infd_node_is_const(input_at(a, 2)) ||
            (in_axes && !infd_node_is_const(in_axes)) ||
            (in_steps && !infd_node_is_const(in_steps))) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "starts, ends, axes and steps must be constants");
            return false;
        }
        if (!infd_node_const_ints(a->inputs[1], starts, INFD_MAX_RANK, n) ||
            !infd_node_const_ints(a->inputs[2], ends, INFD_MAX_RANK, &n_ends) || n_ends != *n)
            goto bad_count;
        if (in_axes) {
            if (!infd_node_const_ints(in_axes, axes, INFD_MAX_RANK, &n_axes) || n_axes != *n)
                goto bad_count;
            has_axes = true;
        }
        if (in_steps) {
            if (!infd_node_const_ints(in_steps, steps, INFD_MAX_RANK, &n_steps) || n_steps != *n)
                goto bad_count;
            has_steps = true;
        }
    }
    for (int64_t i = 0; i < *n; i++) {
        if (!has_axes)
            axes[i] = i;
        if (!has_steps)
            steps[i] = 1;
        if (axes[i] < 0)
            axes[i] += rank;
        /* INT64_MIN: a step whose negation overflows. */
        if (axes[i] < 0 || axes[i] >= rank || steps[i] == 0 || steps[i] == INT64_MIN) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "axis %lld or step %lld out of range", (long long)axes[i],
                            (long long)steps[i]);
            return false;
        }
    }
    return true;
bad_count:
    infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                    "starts/ends/axes/steps are not INT32/INT64 lists of equal length <= %d",
                    INFD_MAX_RANK);
    return false;
}

bool infd_reduce_geom_get(const infd_kernel_args *a, infd_reduce_geom *g, infd_error *why)
{
    memset(g, 0, sizeof(*g));
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    int64_t keepdims = 1, noop = 0;
    if (infd_ir_attr_int(a->g, a->node, "keepdims", 1, &keepdims, why) != INFD_STATUS_OK ||
        infd_ir_attr_int(a->g, a->node, "noop_with_empty_axes", 0, &noop, why) != INFD_STATUS_OK)
        return false;
    int32_t rank = x->shape.rank;
    int64_t axes[INFD_MAX_RANK], n_axes = 0;
    bool axes_as_input =
        a->g->opset >= 18 || (strcmp(a->node->op_type, "ReduceSum") == 0 && a->g->opset >= 13);
    if (axes_as_input) {
        const infd_ir_value *av = input_at(a, 1);
        if (av && !infd_node_const_ints(av, axes, INFD_MAX_RANK, &n_axes)) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "axes must be an INT64 constant");
            return false;
        }
    } else {
        const int64_t *p = NULL;
        int32_t n = 0;
        if (infd_ir_attr_ints(a->g, a->node, "axes", &p, &n, why) != INFD_STATUS_OK)
            return false;
        if (n > INFD_MAX_RANK) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "too many axes");
            return false;
        }
        if (n)
            memcpy(axes, p, sizeof(int64_t) * (size_t)n);
        n_axes = n;
    }
    if (n_axes == 0 && noop && axes_as_input) {
        if (infd_node_numel(y) != infd_node_numel(x)) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "output size differs");
            return false;
        }
        g->copy = true;
        return true;
    }
    bool red[INFD_MAX_RANK] = { false };
    for (int64_t i = 0; i < n_axes; i++) {
        int64_t ax = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (ax < 0 || ax >= rank) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis %lld out of range",
                            (long long)axes[i]);
            return false;
        }
        red[ax] = true;
    }
    if (n_axes == 0)
        for (int32_t d = 0; d < rank; d++)
            red[d] = true;
    int32_t od = 0;
    g->out_numel = 1;
    for (int32_t d = 0; d < rank; d++) {
        int64_t dim = x->shape.dims[d].value;
        if (red[d] && !keepdims)
            continue;
        int64_t want = red[d] ? 1 : dim;
        if (od >= y->shape.rank || y->shape.dims[od].value != want) {
            infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                            "output shape does not match the reduction");
            return false;
        }
        od++;
        g->out_numel *= want;
    }
    if (od != y->shape.rank) {
        infd_node_error(a, why, INFD_STATUS_INVALID_ARGUMENT,
                        "output rank does not match the reduction");
        return false;
    }
    int64_t st[INFD_MAX_RANK], s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= x->shape.dims[d].value;
    }
    g->red_count = 1;
    int last_kind = -1; /* 0 kept, 1 reduced */
    for (int32_t d = 0; d < rank; d++) {
        int64_t dim = x->shape.dims[d].value;
        if (red[d])
            g->red_count *= dim;
        if (dim == 1)
            continue;
        int kind = red[d] ? 1 : 0;
        int64_t *dims = kind ? g->red_dims : g->kept_dims;
        int64_t *strides = kind ? g->red_strides : g->kept_strides;
        int32_t *n = kind ? &g->n_red : &g->n_kept;
        if (kind == last_kind) {
            dims[*n - 1] *= dim;
            strides[*n - 1] = st[d];
        } else {
            dims[*n] = dim;
            strides[*n] = st[d];
            (*n)++;
        }
        last_kind = kind;
    }
    g->ends_kept = last_kind == 0;
    return true;
}

bool infd_lstm_default_activations(const infd_ir_node *node, int dirs)
{
    const infd_ir_attr *a = infd_ir_node_attr(node, "activations");
    if (!a)
        return true;
    if (a->type != INFD_IR_ATTR_STRINGS || a->n != 3 * dirs)
        return false;
    static const char *const want[3] = { "Sigmoid", "Tanh", "Tanh" };
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->strings[i], want[i % 3]) != 0)
            return false;
    return true;
}
