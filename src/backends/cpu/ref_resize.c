/*
 * ref_resize.c - Resize (opset 10-21) and Upsample (7-9): nearest in every
 * dtype, N-linear in FP32, with ONNX Runtime's coordinate arithmetic (float
 * math, clamping at the borders) so results match it.
 *
 * Everything but the data is known at compile: per output dim, the input
 * index (nearest) or the two neighbours and their weights (linear) for each
 * output coordinate. run() is then a gather (nearest) or a weighted sum over
 * the 2^k corners of the k interpolated dims.
 *
 * Declined: cubic, tf_crop_and_resize, antialias, and scales (or sizes with
 * a keep_aspect_ratio_policy) that are not constants.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "core/alloc.h"
#include "core/common.h"

typedef enum coord_mode {
    CT_HALF_PIXEL,
    CT_ASYMMETRIC,
    CT_ALIGN_CORNERS,
    CT_PYTORCH_HALF_PIXEL,
    CT_TF_HALF_PIXEL_FOR_NN,
    CT_HALF_PIXEL_SYMMETRIC,
} coord_mode;

typedef enum nearest_mode {
    NM_SIMPLE, /* opset < 11: truncate, or ceil when downsampling */
    NM_ROUND_PREFER_FLOOR,
    NM_ROUND_PREFER_CEIL,
    NM_FLOOR,
    NM_CEIL,
} nearest_mode;

typedef struct resize_params {
    bool linear;
    coord_mode ct;
    nearest_mode nm;
    float scales[INFD_MAX_RANK];
} resize_params;

typedef struct resize_kernel {
    infd_cpu_kernel base;
    bool linear;
    int32_t rank;
    size_t esize;
    int64_t numel;
    int64_t out_dims[INFD_MAX_RANK];
    int64_t in_strides[INFD_MAX_RANK];
    bool interp[INFD_MAX_RANK]; /* linear: this dim needs weights */
    int64_t *lo[INFD_MAX_RANK]; /* per output coordinate: input index */
    int64_t *hi[INFD_MAX_RANK]; /* linear: the upper neighbour */
    float *wlo[INFD_MAX_RANK];  /* linear: weights of lo and hi */
    float *whi[INFD_MAX_RANK];
    void *maps; /* owned: one block holding every array above */
} resize_kernel;

static float original_coord(coord_mode ct, float x, float scale, int64_t out_len, int64_t in_len)
{
    switch (ct) {
    case CT_ASYMMETRIC:
        return x / scale;
    case CT_ALIGN_CORNERS:
        return out_len == 1 ? 0.0f : x * (float)(in_len - 1) / (float)(out_len - 1);
    case CT_PYTORCH_HALF_PIXEL:
        return out_len > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case CT_TF_HALF_PIXEL_FOR_NN:
        return (x + 0.5f) / scale;
    case CT_HALF_PIXEL_SYMMETRIC: {
        float adj = (float)out_len / (scale * (float)in_len);
        float center = (float)in_len / 2.0f;
        float offset = center * (1.0f - adj);
        return offset + (x + 0.5f) / scale - 0.5f;
    }
    default:
        return (x + 0.5f) / scale - 0.5f;
    }
}

static int64_t nearest_index(nearest_mode nm, float x, bool down)
{
    switch (nm) {
    case NM_SIMPLE:
        return down ? (int64_t)ceilf(x) : (int64_t)x;
    case NM_ROUND_PREFER_CEIL:
        return (int64_t)roundf(x);
    case NM_FLOOR:
        return (int64_t)floorf(x);
    case NM_CEIL:
        return (int64_t)ceilf(x);
    default:
        if (x == (float)(int64_t)x + 0.5f)
            return (int64_t)floorf(x);
        return (int64_t)roundf(x);
    }
}

/* Reads the Resize/Upsample attributes and scales. */
static bool resize_params_read(const infd_kernel_args *a, resize_params *p, infd_error *why)
{
    const char *op = a->node->op_type;
    bool upsample = strcmp(op, "Upsample") == 0;
    int64_t opset = a->g->opset;
    const char *mode = "nearest";
    memset(p, 0, sizeof(*p));
    if (a->n_inputs < 1 || !a->inputs[0] || a->n_outputs < 1)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "missing input or output");
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    int32_t rank = x->shape.rank;
    if (y->shape.rank != rank || y->dtype != x->dtype || infd_dtype_size(x->dtype) == 0)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                           "output rank or dtype differs from the input");
    if (infd_ir_attr_string(a->g, a->node, "mode", "nearest", &mode, why) != INFD_STATUS_OK)
        return false;
    if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0)
        p->linear = true;
    else if (strcmp(mode, "nearest") != 0)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED, "%s mode '%s' is not supported", op,
                           mode);
    if (p->linear && x->dtype != INFD_DTYPE_FP32)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "linear %s supports FP32 only, not %s", op, infd_dtype_name(x->dtype));

    p->ct = CT_ASYMMETRIC;
    p->nm = NM_SIMPLE;
    if (!upsample && opset >= 11) {
        const char *ct = "half_pixel", *nm = "round_prefer_floor";
        int64_t antialias = 0, exclude = 0;
        if (infd_ir_attr_string(a->g, a->node, "coordinate_transformation_mode", "half_pixel", &ct,
                                why) != INFD_STATUS_OK ||
            infd_ir_attr_string(a->g, a->node, "nearest_mode", "round_prefer_floor", &nm, why) !=
                INFD_STATUS_OK ||
            infd_ir_attr_int(a->g, a->node, "antialias", 0, &antialias, why) != INFD_STATUS_OK ||
            infd_ir_attr_int(a->g, a->node, "exclude_outside", 0, &exclude, why) != INFD_STATUS_OK)
            return false;
        static const char *const cts[] = { "half_pixel",
                                           "asymmetric",
                                           "align_corners",
                                           "pytorch_half_pixel",
                                           "tf_half_pixel_for_nearest",
                                           "half_pixel_symmetric" };
        static const char *const nms[] = { "", "round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil" };
        int found = -1;
        for (int i = 0; i < (int)INFD_ARRAY_SIZE(cts); i++)
            if (strcmp(ct, cts[i]) == 0)
                found = i;
        if (found < 0)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "Resize coordinate_transformation_mode '%s' is not supported", ct);
        p->ct = (coord_mode)found;
        found = -1;
        for (int i = 1; i < (int)INFD_ARRAY_SIZE(nms); i++)
            if (strcmp(nm, nms[i]) == 0)
                found = i;
        if (found < 0)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "Resize nearest_mode '%s' is not supported", nm);
        p->nm = (nearest_mode)found;
        if (antialias)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "Resize antialias=1 is not supported");
        if (exclude)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "Resize exclude_outside=1 is not supported");
    }

    /* Scales: Upsample-7/8 attribute; Upsample-9 and Resize-10 input 1;
     * Resize-11+ input 2, or sizes (input 3). */
    for (int32_t d = 0; d < rank; d++)
        p->scales[d] = 1.0f;
    const infd_ir_value *sv = NULL, *zv = NULL;
    int64_t n = 0;
    if (upsample && opset < 9) {
        const infd_ir_attr *at = infd_ir_node_attr(a->node, "scales");
        if (!at || at->type != INFD_IR_ATTR_FLOATS || at->n != rank)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "needs a 'scales' attribute with one float per dim");
        memcpy(p->scales, at->floats, sizeof(float) * (size_t)rank);
        return true;
    }
    if (upsample || opset < 11) {
        sv = a->n_inputs > 1 ? a->inputs[1] : NULL;
    } else {
        sv = a->n_inputs > 2 ? a->inputs[2] : NULL;
        zv = a->n_inputs > 3 ? a->inputs[3] : NULL;
        if (sv && infd_node_numel(sv) == 0)
            sv = NULL;
    }
    const int64_t *axes_attr = NULL;
    int32_t n_axes = 0;
    int64_t axes[INFD_MAX_RANK];
    if (!upsample && opset >= 18 &&
        infd_ir_attr_ints(a->g, a->node, "axes", &axes_attr, &n_axes, why) != INFD_STATUS_OK)
        return false;
    if (n_axes > rank)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "too many axes");
    for (int32_t i = 0; i < (axes_attr ? n_axes : rank); i++) {
        axes[i] = axes_attr ? axes_attr[i] : i;
        if (axes[i] < 0)
            axes[i] += rank;
        if (axes[i] < 0 || axes[i] >= rank)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "axis out of range");
    }
    int32_t na = axes_attr ? n_axes : rank;
    if (sv) {
        float s[INFD_MAX_RANK];
        if (!ref_const_floats(sv, s, INFD_MAX_RANK, &n))
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "%s scales must be a float constant", op);
        if (n != na)
            return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT,
                               "scales has %lld entries for %d axes", (long long)n, (int)na);
        for (int32_t i = 0; i < na; i++) {
            if (!(s[i] > 0))
                return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "scales must be > 0");
            p->scales[axes[i]] = s[i];
        }
        return true;
    }
    if (!zv)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "needs scales or sizes");
    const char *policy = "stretch";
    if (opset >= 18 && infd_ir_attr_string(a->g, a->node, "keep_aspect_ratio_policy", "stretch",
                                           &policy, why) != INFD_STATUS_OK)
        return false;
    if (strcmp(policy, "stretch") == 0) {
        /* Scales follow from the concrete output shape. */
        for (int32_t d = 0; d < rank; d++) {
            int64_t in = x->shape.dims[d].value, out = y->shape.dims[d].value;
            p->scales[d] = in ? (float)out / (float)in : 1.0f;
        }
        return true;
    }
    int64_t sizes[INFD_MAX_RANK];
    if (!infd_node_const_ints(zv, sizes, INFD_MAX_RANK, &n) || n != na)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "keep_aspect_ratio_policy '%s' needs constant sizes", policy);
    bool larger = strcmp(policy, "not_smaller") == 0;
    if (!larger && strcmp(policy, "not_larger") != 0)
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "keep_aspect_ratio_policy '%s' is not supported", policy);
    float s = larger ? 0.0f : INFINITY;
    for (int32_t i = 0; i < na; i++) {
        int64_t in = x->shape.dims[axes[i]].value;
        float r = in ? (float)sizes[i] / (float)in : 1.0f;
        s = larger ? fmaxf(s, r) : fminf(s, r);
    }
    for (int32_t i = 0; i < na; i++)
        p->scales[axes[i]] = s;
    return true;
}

static void resize_fini(infd_cpu_kernel *ck)
{
    infd_free(((resize_kernel *)ck)->maps);
}

bool ref_resize_supports(const infd_kernel_args *a, infd_error *why)
{
    resize_params p;
    return resize_params_read(a, &p, why);
}

typedef struct resize_job {
    const resize_kernel *k;
    const char *in;
    char *out;
} resize_job;

#define NEAREST_ROW(T)                    \
    do {                                  \
        const T *s_ = (const T *)src;     \
        T *d_ = (T *)dst;                 \
        for (int64_t i = 0; i < len; i++) \
            d_[i] = s_[map[i]];           \
    } while (0)

static void nearest_rows(const resize_job *j, int64_t begin, int64_t end)
{
    const resize_kernel *k = j->k;
    int32_t last = k->rank - 1;
    int64_t len = k->out_dims[last];
    const int64_t *map = k->lo[last];
    size_t es = k->esize;
    for (int64_t r = begin; r < end; r++) {
        int64_t off = 0, rem = r;
        for (int32_t d = last - 1; d >= 0; d--) {
            off += k->lo[d][rem % k->out_dims[d]] * k->in_strides[d];
            rem /= k->out_dims[d];
        }
        const char *src = j->in + (size_t)off * es;
        char *dst = j->out + (size_t)(r * len) * es;
        switch (es) {
        case 1:
            NEAREST_ROW(uint8_t);
            break;
        case 2:
            NEAREST_ROW(uint16_t);
            break;
        case 4:
            NEAREST_ROW(uint32_t);
            break;
        default:
            NEAREST_ROW(uint64_t);
            break;
        }
    }
}

static void linear_rows(const resize_job *j, int64_t begin, int64_t end)
{
    const resize_kernel *k = j->k;
    int32_t last = k->rank - 1;
    int64_t len = k->out_dims[last];
    const float *in = (const float *)j->in;
    int32_t idims[INFD_MAX_RANK], n_interp = 0;
    for (int32_t d = 0; d < last; d++)
        if (k->interp[d])
            idims[n_interp++] = d;
    for (int64_t r = begin; r < end; r++) {
        int64_t pos[INFD_MAX_RANK], base = 0, rem = r;
        for (int32_t d = last - 1; d >= 0; d--) {
            pos[d] = rem % k->out_dims[d];
            rem /= k->out_dims[d];
            if (!k->interp[d])
                base += k->lo[d][pos[d]] * k->in_strides[d];
        }
        float *o = (float *)j->out + r * len;
        for (int64_t i = 0; i < len; i++)
            o[i] = 0.0f;
        for (int32_t c = 0; c < (1 << n_interp); c++) {
            int64_t off = base;
            float w = 1.0f;
            for (int32_t t = 0; t < n_interp; t++) {
                int32_t d = idims[t];
                bool up = (c >> t) & 1;
                off += (up ? k->hi[d] : k->lo[d])[pos[d]] * k->in_strides[d];
                w *= (up ? k->whi[d] : k->wlo[d])[pos[d]];
            }
            const float *src = in + off;
            if (k->interp[last]) {
                const int64_t *l = k->lo[last], *h = k->hi[last];
                const float *wl = k->wlo[last], *wh = k->whi[last];
                for (int64_t i = 0; i < len; i++)
                    o[i] += w * (src[l[i]] * wl[i] + src[h[i]] * wh[i]);
            } else {
                const int64_t *l = k->lo[last];
                for (int64_t i = 0; i < len; i++)
                    o[i] += w * src[l[i]];
            }
        }
    }
}

static void resize_body(void *arg, int64_t begin, int64_t end)
{
    const resize_job *j = arg;
    if (j->k->linear)
        linear_rows(j, begin, end);
    else
        nearest_rows(j, begin, end);
}

static void resize_run(const infd_cpu_kernel *ck, const infd_kernel_io *io)
{
    const resize_kernel *k = (const resize_kernel *)ck;
    if (k->numel == 0)
        return;
    resize_job j = { .k = k, .in = io->inputs[0], .out = io->outputs[0] };
    int64_t len = k->out_dims[k->rank - 1];
    ref_parallel(io->pool, k->numel / len, ref_row_grain(len), resize_body, &j);
}

infd_status ref_resize_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    resize_params p;
    *out = NULL;
    if (!resize_params_read(a, &p, err))
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    const infd_ir_value *x = a->inputs[0], *y = a->outputs[0];
    resize_kernel *k = (resize_kernel *)infd_cpu_kernel_new(
        sizeof(resize_kernel), p.linear ? "ref:resize:linear" : "ref:resize:nearest", resize_run,
        resize_fini);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    k->linear = p.linear;
    k->esize = infd_dtype_size(x->dtype);
    k->numel = infd_node_numel(y);
    int32_t rank = x->shape.rank;
    /* A scalar resizes to itself: treat it as one dim of size 1. */
    k->rank = rank ? rank : 1;
    int64_t in_dims[INFD_MAX_RANK], total = 0, st = 1;
    for (int32_t d = 0; d < k->rank; d++) {
        in_dims[d] = rank ? x->shape.dims[d].value : 1;
        k->out_dims[d] = rank ? y->shape.dims[d].value : 1;
        total += k->out_dims[d];
        if (k->out_dims[d] > 0 && in_dims[d] == 0) {
            infd_kernel_destroy(&k->base.base);
            return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                                   "cannot resize an empty dim %d to %lld", (int)d,
                                   (long long)k->out_dims[d]);
        }
    }
    for (int32_t d = k->rank - 1; d >= 0; d--) {
        k->in_strides[d] = st;
        st *= in_dims[d];
    }
    size_t per = p.linear ? 2 * sizeof(int64_t) + 2 * sizeof(float) : sizeof(int64_t);
    k->maps = infd_malloc((size_t)(total ? total : 1) * per);
    if (!k->maps) {
        infd_kernel_destroy(&k->base.base);
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    /* int64 arrays first, then floats, so everything stays aligned. */
    int64_t *ip = k->maps;
    float *fp = (float *)(ip + (p.linear ? 2 : 1) * total);
    for (int32_t d = 0; d < k->rank; d++) {
        int64_t on = k->out_dims[d], inl = in_dims[d];
        float scale = p.scales[d];
        k->lo[d] = ip;
        ip += on;
        if (p.linear) {
            k->hi[d] = ip;
            ip += on;
            k->wlo[d] = fp;
            fp += on;
            k->whi[d] = fp;
            fp += on;
        }
        for (int64_t i = 0; i < on; i++) {
            float xo = original_coord(p.ct, (float)i, scale, on, inl);
            if (!p.linear) {
                int64_t ix = nearest_index(p.nm, xo, scale < 1.0f);
                k->lo[d][i] = ix < 0 ? 0 : ix >= inl ? inl - 1 : ix;
                continue;
            }
            xo = xo < 0 ? 0 : xo > (float)(inl - 1) ? (float)(inl - 1) : xo;
            int64_t l = (int64_t)xo;
            l = l >= inl ? inl - 1 : l;
            int64_t h = l + 1 < inl ? l + 1 : inl - 1;
            float f = h == l ? 0.0f : xo - (float)l;
            k->lo[d][i] = l;
            k->hi[d][i] = h;
            k->wlo[d][i] = 1.0f - f;
            k->whi[d][i] = f;
            if (f != 0.0f || l != i)
                k->interp[d] = true;
        }
    }
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
