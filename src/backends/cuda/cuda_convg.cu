/*
 * cuda_convg.cu - convolution (+ bias + residual + activation) on cuDNN's
 * graph API (cuda_convg.h).
 *
 * Graph: tensors get unique ids (UID_*), 16-byte alignment, dims in NCHW
 * order with NHWC strides for FP16 (KRSC strides for the weights); the
 * convolution writes a virtual FP32 tensor when pointwise ops follow, each
 * pointwise op (ADD bias, ADD z, RELU_FWD with clips) writes the next
 * virtual tensor, the last one writes y.
 *
 * Engine choice: heuristics mode A, then mode B, then the fallback list,
 * deduplicated by engine global index + knob choices; the first
 * MAX_CANDIDATES acceptable configurations (numerical notes: no
 * reduced-precision reduction; FP32: no tensor cores, i.e. no TF32; at most
 * MAX_RTC needing runtime compilation, the costly part of create()) are
 * finalized into plans; each plan whose workspace fits MAX_WORKSPACE runs
 * 2 + 5 times on the compile stream and the fastest by CUDA events wins.
 * Runtime compilation (NVRTC) costs time at create() (finalize) only.
 *
 * The record: "cg", version, knob count, FNV-1a hash of the description,
 * engine global index (int16) and per knob its type (uint8) and value
 * (int32, little-endian), then the length and FNV-1a hash of the compiled
 * plan (uint32 each) and the plan: cuDNN's serialized execution plan
 * (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION) for a runtime-compiled
 * engine, none (length 0) for the others. All little-endian; 18 + 5 per
 * knob bytes, plus the plan's.
 *
 * Restoring a runtime-compiled engine from its serialized plan takes about
 * 1 ms; finalizing it again compiles it with NVRTC, 20-65 ms each on the
 * H200 (issue #6's "warm start in well under a second": five such engines
 * in ResNet-50 FP16 were a third of its plan load). A serialized plan is
 * compiled GPU code: the plan file that carries it is as trusted as a
 * TensorRT engine, and is refused on another GPU or cuDNN (planfile.c).
 * When cuDNN does not take it back, the configuration is finalized again
 * from the key, and failing that the candidates are timed.
 *
 * Shared plans: convolutions of one description on one GPU (ResNet-50's
 * repeated blocks) share the operation graph and execution plan of the
 * first one alive, which owns them (the registry below): a later one takes
 * the owner's configuration instead of timing candidates again (or, given a
 * record, when the record names the owner's configuration), so a
 * runtime-compiled engine, 20-50 ms to finalize, is compiled once per
 * description rather than per convolution. Each convolution keeps its own
 * weights; a plan runs on any device pointers. The owner's graph and plan
 * live until the last convolution sharing them is destroyed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "cuda_convg.h"
#include "cuda_nhwc.h"
#include "cuda_runtime_impl.h"
#include "cuda_shared.h"

#define MAX_WORKSPACE  ((size_t)256 << 20)
#define MAX_HEUR_A     8  /* mode A configurations considered */
#define MAX_HEUR_B     8  /* mode B configurations considered */
#define MAX_CANDIDATES 12 /* plans timed in all (A + B + fallback) */
#define MAX_RTC        3  /* of them needing runtime compilation (0.3-5 s each) */
#define MAX_KNOBS      16 /* knob choices read per configuration */
#define MAX_REC_KNOBS  9  /* knobs a record holds */
#define REC_VERSION    2
#define REC_HEAD       18 /* bytes of a record without knobs and plan */
#define MAX_KEEP       24 /* graph descriptors kept alive with the plan */

/* Tensor unique ids. */
enum { UID_X = 1, UID_W = 2, UID_Y = 3, UID_B = 4, UID_Z = 5, UID_V0 = 100 };

/* One engine configuration, as a record holds it. */
typedef struct cfg_key {
    int64_t engine;
    int n_knobs;
    int64_t knob_type[MAX_KNOBS], knob_value[MAX_KNOBS];
} cfg_key;

struct infd_cuda_convg {
    infd_cuda_convg_desc d;
    cudnnBackendDescriptor_t keep[MAX_KEEP]; /* tensors, ops, graph (freed last) */
    int n_keep;
    cudnnBackendDescriptor_t graph; /* the operation graph (in keep) */
    cudnnBackendDescriptor_t plan;  /* the chosen execution plan */
    void *w, *b;                    /* device weights and bias (owned) */
    size_t ws_bytes;
    float ms; /* the chosen plan's time per run (0: taken from a record) */
    char name[96];
    /* Shared plans (see the top). An owner (owner == NULL, in the registry)
     * holds graph and plan for itself and its borrowers; refs counts them
     * all, itself until it is destroyed (its plan lives on while lent). */
    infd_cuda_convg *owner; /* a borrower's owner, whose graph and plan it runs */
    int refs;
    int device;
    cfg_key key;           /* the configuration chosen */
    infd_cuda_convg *next; /* registry link */
    unsigned char *rec;    /* the tuning record (owned; NULL: none) */
    size_t rec_n;
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static infd_cuda_convg *registry; /* owners, guarded by registry_mu */

/* "what: STATUS (cuDNN's last error message)" into why. */
static void set_why(char *why, size_t why_n, const char *what, cudnnStatus_t s)
{
    char last[384] = "";
    cudnnGetLastErrorString(last, sizeof(last));
    if (why && why_n)
        snprintf(why, why_n, "%s: %s%s%s%s", what, cudnnGetErrorString(s), last[0] ? " (" : "",
                 last, last[0] ? ")" : "");
}

#define BK(call)                            \
    do {                                    \
        cudnnStatus_t s_ = (call);          \
        if (s_ != CUDNN_STATUS_SUCCESS) {   \
            set_why(why, why_n, #call, s_); \
            goto fail;                      \
        }                                   \
    } while (0)

/* Deprecated in cuDNN 9 (a handle-free finalize exists) but still honoured;
 * named by value so -Werror=all-warnings accepts them. */
static const cudnnBackendAttributeName_t ATTR_OPERATIONGRAPH_HANDLE =
    (cudnnBackendAttributeName_t)800;
static const cudnnBackendAttributeName_t ATTR_EXECUTION_PLAN_HANDLE =
    (cudnnBackendAttributeName_t)400;

static cudnnStatus_t create_kept(infd_cuda_convg *c, cudnnBackendDescriptorType_t t,
                                 cudnnBackendDescriptor_t *out)
{
    *out = NULL;
    if (c->n_keep >= MAX_KEEP)
        return CUDNN_STATUS_INTERNAL_ERROR;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(t, out);
    if (s == CUDNN_STATUS_SUCCESS)
        c->keep[c->n_keep++] = *out;
    return s;
}

/* A finalized tensor descriptor; dims in NCHW order. */
static cudnnStatus_t make_tensor(infd_cuda_convg *c, int64_t uid, cudnnDataType_t dt,
                                 const int64_t dims[4], const int64_t strides[4], bool is_virtual,
                                 cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t t = NULL;
    int64_t align = 16;
    cudnnStatus_t s = create_kept(c, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
                                     &align);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1,
                                     &is_virtual);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(t);
    *out = t;
    return s;
}

/* Strides of an [n, c, h, w] tensor stored channels-last (nhwc) or not. */
static void strides_of(const int64_t dims[4], int nhwc, int64_t st[4])
{
    if (nhwc) {
        st[1] = 1;
        st[3] = dims[1];
        st[2] = dims[3] * dims[1];
        st[0] = dims[2] * dims[3] * dims[1];
    } else {
        st[3] = 1;
        st[2] = dims[3];
        st[1] = dims[2] * dims[3];
        st[0] = dims[1] * dims[2] * dims[3];
    }
}

/* A finalized pointwise operation y = mode(x[, b]). */
static cudnnStatus_t make_pointwise(infd_cuda_convg *c, cudnnPointwiseMode_t mode,
                                    cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                    cudnnBackendDescriptor_t y, int clip, float lo, float hi,
                                    cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t pw = NULL, op = NULL;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnStatus_t s = create_kept(c, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1,
                                     &mode);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
                                     &prec);
    if (s == CUDNN_STATUS_SUCCESS && mode == CUDNN_POINTWISE_RELU_FWD) {
        float zero = 0.0f, slope = 0.0f;
        s = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_FLOAT, 1,
                                     clip ? &lo : &zero);
        if (s == CUDNN_STATUS_SUCCESS && clip)
            s = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_FLOAT,
                                         1, &hi);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE,
                                         CUDNN_TYPE_FLOAT, 1, &slope);
    }
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(pw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = create_kept(c, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (s == CUDNN_STATUS_SUCCESS && b)
        s = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(op);
    *out = op;
    return s;
}

/* Builds c->graph for c->d; false with the reason. */
static bool build_graph(infd_cuda_convg *c, cudnnHandle_t h, char *why, size_t why_n)
{
    const infd_cuda_convg_desc *d = &c->d;
    const int nhwc = d->fp16 != 0;
    const cudnnDataType_t dt = d->fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    const cudnnDataType_t vt = CUDNN_DATA_FLOAT;
    int64_t xd[4] = { d->n, d->c, d->h, d->w }, yd[4] = { d->n, d->k, d->oh, d->ow };
    int64_t wd[4] = { d->k, d->c / d->groups, d->r, d->s }, bd[4] = { 1, d->k, 1, 1 };
    int64_t xs[4], ys[4], ws[4], bs[4];
    cudnnBackendDescriptor_t tx, tw, ty, tb = NULL, tz = NULL, conv_desc, conv_op, cur;
    cudnnBackendDescriptor_t ops[4];
    int n_ops = 0, n_post = (d->has_bias != 0) + (d->has_res != 0) + (d->act != 0), done = 0;
    int64_t vuid = UID_V0;
    strides_of(xd, nhwc, xs);
    strides_of(yd, nhwc, ys);
    strides_of(wd, nhwc, ws); /* KRSC for FP16, KCRS for FP32 */
    strides_of(bd, nhwc, bs);

    BK(make_tensor(c, UID_X, dt, xd, xs, false, &tx));
    BK(make_tensor(c, UID_W, dt, wd, ws, false, &tw));
    BK(make_tensor(c, UID_Y, dt, yd, ys, false, &ty));
    if (d->has_bias)
        BK(make_tensor(c, UID_B, dt, bd, bs, false, &tb));
    if (d->has_res)
        BK(make_tensor(c, UID_Z, dt, yd, ys, false, &tz));

    {
        int64_t dims = 2, pre[2] = { d->pad_h, d->pad_w }, post[2],
                str[2] = { d->stride_h, d->stride_w }, dil[2] = { d->dil_h, d->dil_w };
        cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
        /* cuDNN sizes the output floor((in + pre + post - extent) / stride)
         * + 1: post padding in [lo, lo + stride - 1] gives oh (ow); the
         * symmetric one when it is in range (the legacy API's rounding). */
        int64_t lo[2], pad[2] = { d->pad_h, d->pad_w };
        lo[0] = (int64_t)(d->oh - 1) * d->stride_h + (int64_t)(d->r - 1) * d->dil_h + 1 - d->h -
                d->pad_h;
        lo[1] = (int64_t)(d->ow - 1) * d->stride_w + (int64_t)(d->s - 1) * d->dil_w + 1 - d->w -
                d->pad_w;
        for (int i = 0; i < 2; i++) {
            int64_t hi = lo[i] + str[i] - 1;
            if (hi < 0) {
                snprintf(why, why_n,
                         "output %dx%d does not follow from input %dx%d, kernel %dx%d, pads "
                         "%d,%d, strides %d,%d, dilations %d,%d",
                         d->oh, d->ow, d->h, d->w, d->r, d->s, d->pad_h, d->pad_w, d->stride_h,
                         d->stride_w, d->dil_h, d->dil_w);
                return false;
            }
            post[i] = pad[i] < lo[i] ? lo[i] : pad[i] > hi ? hi : pad[i];
            if (post[i] < 0)
                post[i] = 0;
        }
        BK(create_kept(c, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv_desc));
        BK(cudnnBackendSetAttribute(conv_desc, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
                                    CUDNN_TYPE_DATA_TYPE, 1, &comp));
        BK(cudnnBackendSetAttribute(conv_desc, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                    CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
        BK(cudnnBackendSetAttribute(conv_desc, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
                                    CUDNN_TYPE_INT64, 1, &dims));
        BK(cudnnBackendSetAttribute(conv_desc, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
                                    CUDNN_TYPE_INT64, 2, pre));
        BK(cudnnBackendSetAttribute(conv_desc, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
                                    CUDNN_TYPE_INT64, 2, post));
        BK(cudnnBackendSetAttribute(conv_desc, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                                    CUDNN_TYPE_INT64, 2, str));
        BK(cudnnBackendSetAttribute(conv_desc, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64,
                                    2, dil));
        BK(cudnnBackendFinalize(conv_desc));
    }

    /* The convolution writes y, or a virtual FP32 tensor the epilogue reads. */
    if (n_post)
        BK(make_tensor(c, vuid++, vt, yd, ys, true, &cur));
    else
        cur = ty;
    {
        float alpha = 1.0f, beta = 0.0f;
        BK(create_kept(c, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &conv_op));
        BK(cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
        BK(cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
        BK(cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cur));
        BK(cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_desc));
        BK(cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                    CUDNN_TYPE_FLOAT, 1, &alpha));
        BK(cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                    CUDNN_TYPE_FLOAT, 1, &beta));
        BK(cudnnBackendFinalize(conv_op));
        ops[n_ops++] = conv_op;
    }

    /* The epilogue: each op writes the next virtual tensor, the last y. */
    for (int step = 0; step < 3; step++) {
        cudnnBackendDescriptor_t next, op;
        if ((step == 0 && !d->has_bias) || (step == 1 && !d->has_res) || (step == 2 && !d->act))
            continue;
        done++;
        if (done == n_post)
            next = ty;
        else
            BK(make_tensor(c, vuid++, vt, yd, ys, true, &next));
        if (step == 0)
            BK(make_pointwise(c, CUDNN_POINTWISE_ADD, cur, tb, next, 0, 0, 0, &op));
        else if (step == 1)
            BK(make_pointwise(c, CUDNN_POINTWISE_ADD, cur, tz, next, 0, 0, 0, &op));
        else
            BK(make_pointwise(c, CUDNN_POINTWISE_RELU_FWD, cur, NULL, next,
                              d->act == INFD_CUDA_CONVG_ACT_CLIP, d->act_lo, d->act_hi, &op));
        ops[n_ops++] = op;
        cur = next;
    }

    BK(create_kept(c, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &c->graph));
    BK(cudnnBackendSetAttribute(c->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops));
    BK(cudnnBackendSetAttribute(c->graph, ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BK(cudnnBackendFinalize(c->graph));
    return true;
fail:
    return false;
}

/* Reads the engine global index, knob choices and notes of a finalized
 * engine configuration. *skip: its numerical notes rule it out. */
static cudnnStatus_t describe_cfg(const infd_cuda_convg *c, cudnnBackendDescriptor_t cfg,
                                  cfg_key *key, bool *skip, bool *rtc)
{
    cudnnBackendDescriptor_t eng = NULL, knobs[MAX_KNOBS] = { 0 };
    int64_t n = 0;
    int n_made = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 4];
    cudnnBackendBehaviorNote_t behaviors[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT + 4];
    memset(key, 0, sizeof(*key));
    *skip = false;
    *rtc = false;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                     &key->engine);
    bool have_notes = false;
    if (s == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 (int64_t)(sizeof(notes) / sizeof(notes[0])), &n,
                                 notes) == CUDNN_STATUS_SUCCESS) {
        have_notes = true;
        for (int64_t i = 0; i < n && i < (int64_t)(sizeof(notes) / sizeof(notes[0])); i++) {
            /* Reduced-precision sums, and Winograd/FFT transforms of FP16
             * data, lose too much for inference that must match FP32. */
            if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
                notes[i] == CUDNN_NUMERICAL_NOTE_FFT || notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD ||
                notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
                notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 ||
                notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13 ||
                (c->d.fp16 && notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
                *skip = true;
            if (!c->d.fp16 && (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
                               notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
                *skip = true; /* TF32 */
        }
    }
    if (!have_notes && !c->d.fp16)
        *skip = true; /* FP32 fails closed: no notes, no proof it is not TF32 */
    if (s == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 (int64_t)(sizeof(behaviors) / sizeof(behaviors[0])), &n,
                                 behaviors) == CUDNN_STATUS_SUCCESS) {
        for (int64_t i = 0; i < n && i < (int64_t)(sizeof(behaviors) / sizeof(behaviors[0])); i++)
            if (behaviors[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)
                *rtc = true;
    }
    for (; n_made < MAX_KNOBS && s == CUDNN_STATUS_SUCCESS; n_made++)
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[n_made]);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_KNOBS, &n, knobs);
    if (s == CUDNN_STATUS_SUCCESS) {
        key->n_knobs = (int)(n < MAX_KNOBS ? n : MAX_KNOBS);
        for (int i = 0; i < key->n_knobs && s == CUDNN_STATUS_SUCCESS; i++) {
            cudnnBackendKnobType_t t;
            int64_t got = 0;
            s = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                         CUDNN_TYPE_KNOB_TYPE, 1, &got, &t);
            if (s == CUDNN_STATUS_SUCCESS)
                s = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                             CUDNN_TYPE_INT64, 1, &got, &key->knob_value[i]);
            key->knob_type[i] = (int64_t)t;
        }
    }
    for (int i = 0; i < n_made; i++)
        if (knobs[i])
            cudnnBackendDestroyDescriptor(knobs[i]);
    if (eng)
        cudnnBackendDestroyDescriptor(eng);
    return s;
}

static bool same_key(const cfg_key *a, const cfg_key *b)
{
    if (a->engine != b->engine || a->n_knobs != b->n_knobs)
        return false;
    for (int i = 0; i < a->n_knobs; i++)
        if (a->knob_type[i] != b->knob_type[i] || a->knob_value[i] != b->knob_value[i])
            return false;
    return true;
}

static uint32_t bytes_hash(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

static uint32_t desc_hash(const infd_cuda_convg_desc *d)
{
    return bytes_hash(d, sizeof(*d));
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The record of key and the serialized plan (plan_n bytes, 0: none) in a
 * new buffer (*out, malloc'd; *out_n bytes); false when the key does not
 * fit a record or out of memory. */
static bool record_write(const infd_cuda_convg_desc *d, const cfg_key *k, const char *plan,
                         size_t plan_n, unsigned char **out, size_t *out_n)
{
    size_t head = REC_HEAD + 5 * (size_t)k->n_knobs;
    *out = NULL;
    *out_n = 0;
    if (k->n_knobs > MAX_REC_KNOBS || k->engine < 0 || k->engine > 32767 ||
        plan_n > INFD_CUDA_CONVG_PLAN_MAX)
        return false;
    for (int i = 0; i < k->n_knobs; i++)
        if (k->knob_type[i] < 0 || k->knob_type[i] > 255 || k->knob_value[i] < INT32_MIN ||
            k->knob_value[i] > INT32_MAX)
            return false;
    unsigned char *p = (unsigned char *)malloc(head + plan_n);
    if (!p)
        return false;
    p[0] = 'c';
    p[1] = 'g';
    p[2] = REC_VERSION;
    p[3] = (unsigned char)k->n_knobs;
    put32(p + 4, desc_hash(d));
    p[8] = (unsigned char)k->engine;
    p[9] = (unsigned char)(k->engine >> 8);
    for (int i = 0; i < k->n_knobs; i++) {
        p[10 + 5 * i] = (unsigned char)k->knob_type[i];
        put32(p + 11 + 5 * i, (uint32_t)(int32_t)k->knob_value[i]);
    }
    put32(p + head - 8, (uint32_t)plan_n);
    put32(p + head - 4, bytes_hash(plan, plan_n));
    if (plan_n)
        memcpy(p + head, plan, plan_n);
    *out = p;
    *out_n = head + plan_n;
    return true;
}

/* c keeps a copy of the n-byte record `rec` (none when n is 0 or out of
 * memory: a plan file then loses the choice, not its correctness). */
static void keep_record(infd_cuda_convg *c, const void *rec, size_t n)
{
    c->rec = n ? (unsigned char *)malloc(n) : NULL;
    c->rec_n = c->rec ? n : 0;
    if (c->rec)
        memcpy(c->rec, rec, n);
}

/* Parses a record for d: its key, and its serialized plan (*plan, *plan_n;
 * NULL, 0 when it has none); false when it is not one. */
static bool record_read(const infd_cuda_convg_desc *d, const void *rec, size_t n, cfg_key *k,
                        const char **plan, size_t *plan_n)
{
    const unsigned char *p = (const unsigned char *)rec;
    *plan = NULL;
    *plan_n = 0;
    if (!rec || n < REC_HEAD || p[0] != 'c' || p[1] != 'g' || p[2] != REC_VERSION ||
        p[3] > MAX_REC_KNOBS || get32(p + 4) != desc_hash(d))
        return false;
    size_t head = REC_HEAD + 5 * (size_t)p[3];
    if (n < head || n - head != get32(p + head - 8) ||
        bytes_hash(p + head, n - head) != get32(p + head - 4))
        return false;
    memset(k, 0, sizeof(*k));
    k->n_knobs = p[3];
    k->engine = (int64_t)(p[8] | p[9] << 8);
    for (int i = 0; i < k->n_knobs; i++) {
        k->knob_type[i] = p[10 + 5 * i];
        k->knob_value[i] = (int32_t)get32(p + 11 + 5 * i);
    }
    if (n > head) {
        *plan = (const char *)p + head;
        *plan_n = n - head;
    }
    return true;
}

/* Builds a finalized engine configuration from a record's key. */
static cudnnStatus_t cfg_from_key(cudnnBackendDescriptor_t graph, const cfg_key *k,
                                  cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t eng = NULL, cfg = NULL, knobs[MAX_KNOBS] = { 0 };
    int n_made = 0;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                     &k->engine);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(eng);
    for (; n_made < k->n_knobs && s == CUDNN_STATUS_SUCCESS; n_made++) {
        cudnnBackendKnobType_t t = (cudnnBackendKnobType_t)k->knob_type[n_made];
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[n_made]);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(knobs[n_made], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                         CUDNN_TYPE_KNOB_TYPE, 1, &t);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(knobs[n_made], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                         CUDNN_TYPE_INT64, 1, &k->knob_value[n_made]);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendFinalize(knobs[n_made]);
    }
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng);
    if (s == CUDNN_STATUS_SUCCESS && k->n_knobs)
        s = cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, k->n_knobs, knobs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(cfg);
    for (int i = 0; i < n_made; i++)
        if (knobs[i])
            cudnnBackendDestroyDescriptor(knobs[i]);
    if (eng)
        cudnnBackendDestroyDescriptor(eng);
    if (s != CUDNN_STATUS_SUCCESS && cfg) {
        cudnnBackendDestroyDescriptor(cfg);
        cfg = NULL;
    }
    *out = cfg;
    return s;
}

/* A finalized execution plan for cfg and its workspace size. */
static cudnnStatus_t make_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg,
                               cudnnBackendDescriptor_t *out, size_t *ws)
{
    cudnnBackendDescriptor_t plan = NULL;
    int64_t n = 0, bytes = 0;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(plan, ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(plan);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &bytes);
    if (s != CUDNN_STATUS_SUCCESS) {
        if (plan)
            cudnnBackendDestroyDescriptor(plan);
        plan = NULL;
    }
    *out = plan;
    *ws = bytes > 0 ? (size_t)bytes : 0;
    return s;
}

/* The execution plan cuDNN serialized as `json` (json_n bytes), restored
 * without compiling, and its workspace size. */
static cudnnStatus_t restore_plan(cudnnHandle_t h, const char *json, size_t json_n,
                                  cudnnBackendDescriptor_t *out, size_t *ws)
{
    cudnnBackendDescriptor_t plan = NULL;
    int64_t n = 0, bytes = 0;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                     CUDNN_TYPE_CHAR, (int64_t)json_n, json);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(plan, ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(plan);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &bytes);
    if (s != CUDNN_STATUS_SUCCESS && plan) {
        cudnnBackendDestroyDescriptor(plan);
        plan = NULL;
    }
    *out = plan;
    *ws = bytes > 0 ? (size_t)bytes : 0;
    return s;
}

/* Whether a finalized plan runs the configuration `want` (a restored
 * plan must be the one its record names: the key is what plans are shared
 * by): the same engine, and each of want's knob choices among the plan's
 * (a restored plan also lists the knobs left at their defaults, as -1). */
static bool plan_has_key(const infd_cuda_convg *c, cudnnBackendDescriptor_t plan,
                         const cfg_key *want)
{
    cudnnBackendDescriptor_t cfg = NULL;
    int64_t n = 0;
    cfg_key key;
    bool skip = false, rtc = false, same = false;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg) !=
        CUDNN_STATUS_SUCCESS)
        return false;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                 &cfg) == CUDNN_STATUS_SUCCESS &&
        n == 1 && describe_cfg(c, cfg, &key, &skip, &rtc) == CUDNN_STATUS_SUCCESS) {
        same = key.engine == want->engine;
        for (int i = 0; i < want->n_knobs && same; i++) {
            bool seen = false;
            for (int j = 0; j < key.n_knobs && !seen; j++)
                seen = key.knob_type[j] == want->knob_type[i] &&
                       key.knob_value[j] == want->knob_value[i];
            same = seen;
        }
    }
    cudnnBackendDestroyDescriptor(cfg);
    return same;
}

/* cuDNN's serialization of a finalized plan (malloc'd into *json, *json_n
 * bytes); false, with nothing kept, when it has none. */
static bool serialize_plan(cudnnBackendDescriptor_t plan, char **json, size_t *json_n)
{
    int64_t n = 0;
    *json = NULL;
    *json_n = 0;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                 CUDNN_TYPE_CHAR, 0, &n, NULL) != CUDNN_STATUS_SUCCESS ||
        n <= 0 || (uint64_t)n > INFD_CUDA_CONVG_PLAN_MAX)
        return false;
    char *p = (char *)malloc((size_t)n);
    int64_t got = 0;
    if (!p ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                 CUDNN_TYPE_CHAR, n, &got, p) != CUDNN_STATUS_SUCCESS ||
        got <= 0 || got > n) {
        free(p);
        return false;
    }
    *json = p;
    *json_n = (size_t)got;
    return true;
}

/* Executes `plan` with a variant pack built for this call (cuDNN's
 * per-execution argument list; nothing shared is written). */
static cudnnStatus_t execute(const infd_cuda_convg *c, cudnnBackendDescriptor_t plan,
                             cudnnHandle_t h, const void *x, const void *z, void *y, void *ws)
{
    int64_t uids[5];
    void *ptrs[5];
    int n = 0;
    uids[n] = UID_X;
    ptrs[n++] = (void *)x;
    uids[n] = UID_W;
    ptrs[n++] = c->w;
    uids[n] = UID_Y;
    ptrs[n++] = y;
    if (c->d.has_bias) {
        uids[n] = UID_B;
        ptrs[n++] = c->b;
    }
    if (c->d.has_res) {
        uids[n] = UID_Z;
        ptrs[n++] = (void *)z;
    }
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                     uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                     n, ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                     &ws);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendExecute(h, plan, vp);
    if (vp)
        cudnnBackendDestroyDescriptor(vp);
    return s;
}

/* Frees an owner's graph and plan and the struct (refs reached 0). */
static void free_owner(infd_cuda_convg *c)
{
    if (c->plan)
        cudnnBackendDestroyDescriptor(c->plan);
    for (int i = c->n_keep - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(c->keep[i]);
    free(c->rec);
    free(c);
}

/* Drops one reference to owner o (registry_mu held); frees it at 0. */
static void unref_owner(infd_cuda_convg *o)
{
    if (--o->refs > 0)
        return;
    for (infd_cuda_convg **p = &registry; *p; p = &(*p)->next) {
        if (*p == o) {
            *p = o->next;
            break;
        }
    }
    free_owner(o);
}

extern "C" void infd_cuda_convg_destroy(infd_cuda_convg *c)
{
    if (!c)
        return;
    infd_cuda_weights_free(c->w);
    infd_cuda_weights_free(c->b);
    c->w = c->b = NULL;
    if (!c->owner && c->refs == 0) { /* never shared: a failed create */
        free_owner(c);
        return;
    }
    pthread_mutex_lock(&registry_mu);
    if (c->owner) {
        unref_owner(c->owner);
        free(c->rec);
        free(c);
    } else {
        unref_owner(c);
    }
    pthread_mutex_unlock(&registry_mu);
}

static bool same_desc(const infd_cuda_convg_desc *a, const infd_cuda_convg_desc *b)
{
    return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
           a->oh == b->oh && a->ow == b->ow && a->r == b->r && a->s == b->s &&
           a->pad_h == b->pad_h && a->pad_w == b->pad_w && a->stride_h == b->stride_h &&
           a->stride_w == b->stride_w && a->dil_h == b->dil_h && a->dil_w == b->dil_w &&
           a->groups == b->groups && a->fp16 == b->fp16 && a->has_bias == b->has_bias &&
           a->has_res == b->has_res && a->act == b->act && a->act_lo == b->act_lo &&
           a->act_hi == b->act_hi;
}

/* Timing buffers on the compile stream. */
typedef struct bench {
    void *x, *z, *y, *ws;
    size_t ws_bytes;
    cudaEvent_t e0, e1;
} bench;

/* Runs plan (2 warm-up + 5 timed, or 1 checked run when !timed); the mean
 * milliseconds, or < 0 when it fails (reason in why). */
static float try_plan(const infd_cuda_convg *c, infd_cuda_stream *st, bench *b,
                      cudnnBackendDescriptor_t plan, size_t need, int timed, char *why,
                      size_t why_n)
{
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    cudaError_t rc;
    float ms = 0.0f;
    if (need > b->ws_bytes) {
        cudaStreamSynchronize(st->s);
        cudaFree(b->ws);
        b->ws = NULL;
        b->ws_bytes = 0;
        if (cudaMalloc(&b->ws, need) != cudaSuccess) {
            cudaGetLastError();
            snprintf(why, why_n, "no device memory for a %zu-byte workspace", need);
            return -1.0f;
        }
        b->ws_bytes = need;
    }
    for (int r = 0; r < (timed ? 2 : 1) && s == CUDNN_STATUS_SUCCESS; r++)
        s = execute(c, plan, st->dnn, b->x, b->z, b->y, need ? b->ws : NULL);
    if (s != CUDNN_STATUS_SUCCESS) {
        set_why(why, why_n, "cudnnBackendExecute", s);
        cudaStreamSynchronize(st->s);
        cudaGetLastError();
        return -1.0f;
    }
    rc = cudaStreamSynchronize(st->s);
    if (rc != cudaSuccess) {
        snprintf(why, why_n, "cudnnBackendExecute: %s", cudaGetErrorString(rc));
        cudaGetLastError();
        return -1.0f;
    }
    if (!timed)
        return 0.0f;
    cudaEventRecord(b->e0, st->s);
    for (int r = 0; r < 5 && s == CUDNN_STATUS_SUCCESS; r++)
        s = execute(c, plan, st->dnn, b->x, b->z, b->y, need ? b->ws : NULL);
    cudaEventRecord(b->e1, st->s);
    rc = cudaEventSynchronize(b->e1);
    if (rc == cudaSuccess)
        rc = cudaEventElapsedTime(&ms, b->e0, b->e1);
    if (s != CUDNN_STATUS_SUCCESS) {
        set_why(why, why_n, "cudnnBackendExecute", s);
        return -1.0f;
    }
    if (rc != cudaSuccess) {
        snprintf(why, why_n, "timing: %s", cudaGetErrorString(rc));
        cudaGetLastError();
        return -1.0f;
    }
    return ms / 5.0f;
}

/* Candidate engine configurations from heuristics mode `mode`, appended to
 * cfgs (owned by the caller) up to `cap`; returns the new count. */
static int heuristics(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                      cudnnBackendDescriptor_t *cfgs, int count, int cap, char *err, size_t err_n)
{
    cudnnBackendDescriptor_t heur = NULL;
    int64_t n = 0, got = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) !=
        CUDNN_STATUS_SUCCESS)
        return count;
    cudnnStatus_t s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                     &mode);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(heur);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (s != CUDNN_STATUS_SUCCESS && !err[0]) {
        char what[48];
        snprintf(what, sizeof(what), "heuristics mode %d", (int)mode);
        set_why(err, err_n, what, s);
    }
    if (s == CUDNN_STATUS_SUCCESS && n > 0) {
        cudnnBackendDescriptor_t *all =
            (cudnnBackendDescriptor_t *)calloc((size_t)n, sizeof(cudnnBackendDescriptor_t));
        int64_t made = 0;
        for (; all && made < n; made++)
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &all[made]) !=
                CUDNN_STATUS_SUCCESS)
                break;
        if (all && made == n &&
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                     all) == CUDNN_STATUS_SUCCESS) {
            for (int64_t i = 0; i < got && i < n && count < cap; i++) {
                cfgs[count++] = all[i];
                all[i] = NULL;
            }
        }
        for (int64_t i = 0; all && i < made; i++)
            if (all[i])
                cudnnBackendDestroyDescriptor(all[i]);
        free(all);
    }
    cudnnBackendDestroyDescriptor(heur);
    return count;
}

extern "C" infd_cuda_convg *infd_cuda_convg_create(const infd_cuda_convg_desc *d,
                                                   const float *host_w, const float *host_b,
                                                   const void *record, size_t record_n,
                                                   size_t *workspace_bytes, char *name,
                                                   size_t name_n, char *why, size_t why_n)
{
    infd_cuda_convg *c = (infd_cuda_convg *)calloc(1, sizeof(*c));
    infd_cuda_stream *st = NULL;
    bench b;
    cfg_key best_key, rec_key;
    bool found = false, have_rec;
    size_t es = d->fp16 ? 2 : 4;
    size_t xn = (size_t)d->n * d->c * d->h * d->w, yn = (size_t)d->n * d->k * d->oh * d->ow;
    size_t wn = d->groups > 0 ? (size_t)d->k * (d->c / d->groups) * d->r * d->s : 0;
    char first_err[320] = "";
    int n_tried = 0, n_failed = 0;
    const char *rec_plan = NULL; /* the record's serialized plan */
    size_t rec_plan_n = 0;
    bool best_rtc = false; /* the chosen engine compiles at run time */
    memset(&b, 0, sizeof(b));
    memset(&best_key, 0, sizeof(best_key));
    if (!c) {
        snprintf(why, why_n, "out of memory");
        return NULL;
    }
    c->d = *d;
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->k <= 0 || d->oh <= 0 || d->ow <= 0 ||
        d->r <= 0 || d->s <= 0 || d->groups <= 0 || d->c % d->groups || d->k % d->groups ||
        d->stride_h <= 0 || d->stride_w <= 0 || d->dil_h <= 0 || d->dil_w <= 0 || d->pad_h < 0 ||
        d->pad_w < 0) {
        snprintf(why, why_n, "invalid convolution description");
        goto fail;
    }
    if (d->act < INFD_CUDA_CONVG_ACT_NONE || d->act > INFD_CUDA_CONVG_ACT_CLIP) {
        snprintf(why, why_n, "activation %d is not supported", d->act);
        goto fail;
    }
    if (!host_w || (d->has_bias && !host_b)) {
        snprintf(why, why_n, "the graph convolution needs its weights (and bias) on the host");
        goto fail;
    }
    {
        /* KCRS -> KRSC for FP16 (channels-last), as is for FP32. */
        infd_cuda_fmt f = d->fp16 ? INFD_CUDA_FMT_F16_NHWC : INFD_CUDA_FMT_F32_NCHW;
        c->w = d->fp16 ? infd_cuda_upload_krsc(host_w, d->k, d->c / d->groups, (int64_t)d->r * d->s,
                                               f, why, why_n)
                       : infd_cuda_upload(host_w, wn, f, why, why_n);
        if (!c->w ||
            (d->has_bias && !(c->b = infd_cuda_upload(host_b, (size_t)d->k, f, why, why_n))))
            goto fail;
    }

    /* An owner of this description on this GPU: its configuration, when the
     * record names it, or without a record when the owner was timed (see
     * "Shared plans" at the top). */
    cudaGetDevice(&c->device);
    have_rec = record_read(d, record, record_n, &rec_key, &rec_plan, &rec_plan_n);
    pthread_mutex_lock(&registry_mu);
    for (infd_cuda_convg *o = infd_cuda_conv_disabled("share") ? NULL : registry; o; o = o->next) {
        if (o->device == c->device && same_desc(&o->d, d) &&
            (have_rec ? same_key(&o->key, &rec_key) : o->ms > 0.0f)) {
            o->refs++;
            c->owner = o;
            break;
        }
    }
    pthread_mutex_unlock(&registry_mu);
    if (c->owner) {
        c->ws_bytes = c->owner->ws_bytes;
        c->ms = have_rec ? 0.0f : c->owner->ms;
        best_key = c->key = c->owner->key;
        found = true;
        /* The record it was given, or the owner's: the same key either way. */
        keep_record(c, have_rec ? record : c->owner->rec, have_rec ? record_n : c->owner->rec_n);
        goto chosen;
    }

    st = (infd_cuda_stream *)infd_cuda_compile_stream_lock(why, why_n);
    if (!st)
        goto fail;
    if (cudaMalloc(&b.x, xn * es) != cudaSuccess || cudaMalloc(&b.y, yn * es) != cudaSuccess ||
        cudaMalloc(&b.z, yn * es) != cudaSuccess || cudaEventCreate(&b.e0) != cudaSuccess ||
        cudaEventCreate(&b.e1) != cudaSuccess) {
        snprintf(why, why_n, "out of device memory timing the convolution");
        cudaGetLastError();
        goto unlock;
    }
    infd_cuda_fill_random(st, b.x, xn, d->fp16 ? 1 : 0, 1);
    infd_cuda_fill_random(st, b.z, yn, d->fp16 ? 1 : 0, 2);

    /* A record with a serialized plan: restored, not compiled, then one
     * checked run; it needs no operation graph. */
    if (have_rec && rec_plan_n) {
        cudnnBackendDescriptor_t plan = NULL;
        size_t need = 0;
        cudnnStatus_t s = restore_plan(st->dnn, rec_plan, rec_plan_n, &plan, &need);
        if (s == CUDNN_STATUS_SUCCESS && need <= MAX_WORKSPACE && plan_has_key(c, plan, &rec_key) &&
            try_plan(c, st, &b, plan, need, 0, first_err, sizeof(first_err)) >= 0.0f) {
            c->plan = plan;
            c->ws_bytes = need;
            best_key = rec_key;
            found = true;
            keep_record(c, record, record_n);
        } else if (plan) {
            cudnnBackendDestroyDescriptor(plan);
        }
        first_err[0] = '\0';
    }
    if (!found && !build_graph(c, st->dnn, why, why_n))
        goto unlock;

    /* A record: its configuration after one checked run, no timing. */
    if (have_rec && !found) {
        cudnnBackendDescriptor_t cfg = NULL, plan = NULL;
        size_t need = 0;
        cfg_key key;
        bool skip = false;
        cudnnStatus_t s = cfg_from_key(c->graph, &rec_key, &cfg);
        if (s == CUDNN_STATUS_SUCCESS)
            s = describe_cfg(c, cfg, &key, &skip, &best_rtc);
        if (s == CUDNN_STATUS_SUCCESS)
            s = make_plan(st->dnn, cfg, &plan, &need);
        if (cfg)
            cudnnBackendDestroyDescriptor(cfg);
        if (s == CUDNN_STATUS_SUCCESS && need <= MAX_WORKSPACE &&
            try_plan(c, st, &b, plan, need, 0, first_err, sizeof(first_err)) >= 0.0f) {
            c->plan = plan;
            c->ws_bytes = need;
            best_key = rec_key;
            found = true;
        } else if (plan) {
            cudnnBackendDestroyDescriptor(plan);
        }
        first_err[0] = '\0'; /* a stale record is not the reason for anything */
    }

    if (!found) {
        cudnnBackendDescriptor_t cfgs[64];
        cfg_key keys[MAX_CANDIDATES];
        int n_cfg = 0, n_keys = 0;
        float best_ms = 1e30f;
        int n_rtc = 0;
        char herr[320] = "";
        n_cfg = heuristics(c->graph, CUDNN_HEUR_MODE_A, cfgs, 0, MAX_HEUR_A, herr, sizeof(herr));
        n_cfg = heuristics(c->graph, CUDNN_HEUR_MODE_B, cfgs, n_cfg, MAX_HEUR_A + MAX_HEUR_B, herr,
                           sizeof(herr));
        n_cfg = heuristics(c->graph, CUDNN_HEUR_MODE_FALLBACK, cfgs, n_cfg, 64, herr, sizeof(herr));
        for (int i = 0; i < n_cfg; i++) {
            cfg_key key;
            bool skip = false, rtc = false, dup = false;
            cudnnBackendDescriptor_t plan = NULL;
            size_t need = 0;
            char err[320] = "";
            if (n_keys >= MAX_CANDIDATES)
                break;
            if (describe_cfg(c, cfgs[i], &key, &skip, &rtc) != CUDNN_STATUS_SUCCESS || skip)
                continue;
            for (int j = 0; j < n_keys && !dup; j++)
                dup = same_key(&keys[j], &key);
            if (dup || (rtc && n_rtc >= MAX_RTC))
                continue;
            n_rtc += rtc;
            keys[n_keys++] = key;
            n_tried++;
            cudnnStatus_t s = make_plan(st->dnn, cfgs[i], &plan, &need);
            float ms = -1.0f;
            if (s != CUDNN_STATUS_SUCCESS) {
                char what[64];
                snprintf(what, sizeof(what), "engine %lld: finalizing the plan",
                         (long long)key.engine);
                set_why(err, sizeof(err), what, s);
            } else if (need > MAX_WORKSPACE) {
                snprintf(err, sizeof(err), "engine %lld: needs %zu bytes of workspace",
                         (long long)key.engine, need);
            } else {
                ms = try_plan(c, st, &b, plan, need, 1, err, sizeof(err));
            }
            if (ms < 0.0f) {
                n_failed++;
                if (!first_err[0])
                    snprintf(first_err, sizeof(first_err), "%s", err);
                if (plan)
                    cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            if (ms < best_ms) {
                if (c->plan)
                    cudnnBackendDestroyDescriptor(c->plan);
                c->plan = plan;
                c->ws_bytes = need;
                best_key = key;
                best_rtc = rtc;
                best_ms = ms;
                c->ms = ms;
                found = true;
            } else {
                cudnnBackendDestroyDescriptor(plan);
            }
        }
        for (int i = 0; i < n_cfg; i++)
            cudnnBackendDestroyDescriptor(cfgs[i]);
        if (!found) {
            if (!n_cfg)
                snprintf(why, why_n, "cuDNN's heuristics offer no engine for this graph%s%s",
                         herr[0] ? "; " : "", herr);
            else if (!n_tried)
                snprintf(why, why_n,
                         "cuDNN offers %d engine configurations, none with the required "
                         "precision (FP32 accumulation%s)",
                         n_cfg, d->fp16 ? "" : ", no TF32");
            else
                snprintf(why, why_n, "none of %d engine configurations ran; the first: %s", n_tried,
                         first_err);
        }
    }
unlock:
    cudaStreamSynchronize(st->s);
    cudaFree(b.x);
    cudaFree(b.y);
    cudaFree(b.z);
    cudaFree(b.ws);
    if (b.e0)
        cudaEventDestroy(b.e0);
    if (b.e1)
        cudaEventDestroy(b.e1);
    cudaGetLastError();
    infd_cuda_compile_stream_unlock();
    if (!found)
        goto fail;
    /* A plan made now is recorded, serialized when its engine compiles at
     * run time (restoring it is what skips the compile). */
    if (!c->rec) {
        char *json = NULL;
        size_t json_n = 0;
        if (best_rtc) /* when cuDNN cannot, the record goes without: compiled at load */
            serialize_plan(c->plan, &json, &json_n);
        record_write(d, &best_key, json, json_n, &c->rec, &c->rec_n);
        free(json);
    }
    c->key = best_key;
    c->refs = 1;
    pthread_mutex_lock(&registry_mu);
    c->next = registry;
    registry = c;
    pthread_mutex_unlock(&registry_mu);
chosen:
    (void)n_failed;
    snprintf(c->name, sizeof(c->name), "cudnng:conv%s%s%s%s:eng%lld", d->fp16 ? "_fp16" : "",
             d->has_bias ? "_bias" : "", d->has_res ? "_res" : "",
             d->act == INFD_CUDA_CONVG_ACT_RELU   ? "_relu"
             : d->act == INFD_CUDA_CONVG_ACT_CLIP ? "_clip"
                                                  : "",
             (long long)best_key.engine);
    if (name && name_n)
        snprintf(name, name_n, "%s", c->name);
    if (workspace_bytes)
        *workspace_bytes = c->ws_bytes;
    return c;
fail:
    infd_cuda_convg_destroy(c);
    return NULL;
}

extern "C" void infd_cuda_convg_run(const infd_cuda_convg *c, void *stream, const void *x,
                                    const void *z, void *y, void *workspace)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    cudnnStatus_t s = execute(c, c->owner ? c->owner->plan : c->plan, st->dnn, x, z, y, workspace);
    if (s != CUDNN_STATUS_SUCCESS) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof(last));
        infd_cuda_stream_fail(st, "%s: %s%s%s%s", c->name, cudnnGetErrorString(s),
                              last[0] ? " (" : "", last, last[0] ? ")" : "");
    }
}

extern "C" float infd_cuda_convg_ms(const infd_cuda_convg *c)
{
    return c->ms;
}

extern "C" const void *infd_cuda_convg_record(const infd_cuda_convg *c, size_t *n)
{
    *n = c->rec_n;
    return c->rec;
}
