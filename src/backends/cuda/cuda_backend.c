/*
 * cuda_backend.c - the CUDA backend's vtable (graph/backend.h): finds a
 * node's implementation in the op tables (cuda_conv.c, cuda_gemm.c,
 * cuda_ops.c), forwards run and destroy, and maps the device-memory slots
 * onto cuda_runtime.h. Also the helpers the op glue shares (cuda_ops.h).
 *
 * An op this backend lacks fails the plan with UNIMPLEMENTED naming the
 * node ("operator X is not supported on CUDA"); falling back to the CPU for
 * it is a later step of issue #6.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_runtime.h"
#include "core/alloc.h"
#include "core/common.h"
#include "cuda_shared.h"

static const infd_cuda_op *find_op(const infd_kernel_args *a, infd_error *why)
{
    const infd_cuda_op *const tables[] = { infd_cuda_ops_conv, infd_cuda_ops_gemm,
                                           infd_cuda_ops_misc, infd_cuda_ops_extra,
                                           infd_cuda_ops_dwpw, infd_cuda_ops_seq };
    int seen = 0;
    infd_error last = { 0 };
    if (a->node->domain[0] != '\0') {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "operator domain '%s' is not supported on CUDA", a->node->domain);
        return NULL;
    }
    for (size_t t = 0; t < INFD_ARRAY_SIZE(tables); t++) {
        for (const infd_cuda_op *op = tables[t]; op->op_type; op++) {
            if (strcmp(op->op_type, a->node->op_type) != 0)
                continue;
            seen = 1;
            if (!op->supports || op->supports(a, &last))
                return op;
        }
    }
    if (seen) {
        if (why)
            *why = last;
    } else {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "operator %s is not supported on CUDA",
                        a->node->op_type);
    }
    return NULL;
}

static bool cuda_supports(const infd_kernel_args *a, infd_error *why)
{
    return find_op(a, why) != NULL;
}

static infd_status cuda_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    infd_error local = { 0 };
    const infd_cuda_op *op = find_op(a, err ? err : &local);
    if (!op)
        return err ? err->code : local.code;
    /* Weights the kernel uploads are the model's shared copies. */
    infd_cuda_shared_begin(a->weights);
    infd_status st = op->compile(a, out, err);
    infd_cuda_shared_begin(NULL);
    return st;
}

static bool cuda_produces_opaque(const infd_kernel_args *a)
{
    return infd_cuda_conv_opaque(a, -1) || infd_cuda_misc_opaque(a, -1) ||
           infd_cuda_dwpw_opaque(a, -1);
}

static bool cuda_accepts_opaque(const infd_kernel_args *a, int i)
{
    return infd_cuda_conv_opaque(a, i) || infd_cuda_misc_opaque(a, i) ||
           infd_cuda_dwpw_opaque(a, i);
}

static void cuda_run(const infd_kernel *k, const infd_kernel_io *io)
{
    const infd_cuda_kernel *ck = (const infd_cuda_kernel *)k;
    ck->run(ck, io);
}

static void cuda_destroy_kernel(infd_kernel *k)
{
    if (!k)
        return;
    infd_cuda_kernel *ck = (infd_cuda_kernel *)k;
    if (ck->fini)
        ck->fini(ck);
    infd_free((void *)ck->base.tuning);
    infd_free(ck);
}

static infd_status cuda_available(infd_error *err)
{
    char why[256] = "";
    if (infd_cuda_check_device(why, sizeof(why)) != 0)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "no usable CUDA device: %s", why);
    return INFD_STATUS_OK;
}

/* Creates the device's context and its compile stream (cuDNN and cuBLASLt
 * handles), which the first compile would otherwise create, and starts the
 * libraries' one-time initialization beside it (infd_cuda_warm_start). */
static infd_status cuda_prepare(int index, infd_error *err)
{
    char why[256] = "";
    infd_status st = infd_cuda_set_device(index, err);
    if (st != INFD_STATUS_OK)
        return st;
    infd_cuda_warm_start(index);
    if (!infd_cuda_compile_stream_lock(why, sizeof(why)))
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "CUDA: %s", why);
    infd_cuda_compile_stream_unlock();
    return INFD_STATUS_OK;
}

static void *cuda_alloc(infd_backend_mem kind, size_t bytes, infd_error *err)
{
    char why[256] = "";
    void *p = infd_cuda_alloc(kind == INFD_BACKEND_MEM_HOST, bytes, why, sizeof(why));
    if (!p)
        infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "CUDA: %s", why);
    return p;
}

static void cuda_free(infd_backend_mem kind, void *p)
{
    infd_cuda_free(kind == INFD_BACKEND_MEM_HOST, p);
}

static infd_status cuda_stream_create(void **out, infd_error *err)
{
    char why[256] = "";
    *out = infd_cuda_stream_create(why, sizeof(why));
    if (!*out)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "CUDA: %s", why);
    return INFD_STATUS_OK;
}

static void cuda_copy(void *dst, const void *src, size_t bytes, infd_backend_copy dir, void *stream)
{
    infd_cuda_copy(dst, src, bytes, (int)dir, stream);
}

static infd_status cuda_sync(void *stream, infd_error *err)
{
    char why[256] = "";
    if (infd_cuda_sync(stream, why, sizeof(why)) != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "CUDA: %s", why);
    return INFD_STATUS_OK;
}

static infd_status cuda_capture_begin(void *stream, infd_error *err)
{
    char why[256] = "";
    if (infd_cuda_capture_begin(stream, why, sizeof(why)) != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "CUDA: %s", why);
    return INFD_STATUS_OK;
}

static infd_status cuda_capture_end(void *stream, infd_error *err)
{
    char why[256] = "";
    if (infd_cuda_capture_end(stream, why, sizeof(why)) != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "CUDA: %s", why);
    return INFD_STATUS_OK;
}

const infd_backend_ops infd_cuda_backend = {
    .version = INFD_BACKEND_OPS_VERSION,
    .size = sizeof(infd_backend_ops),
    .name = "cuda",
    .supports = cuda_supports,
    .compile = cuda_compile,
    .run = cuda_run,
    .destroy_kernel = cuda_destroy_kernel,
    .produces_opaque = cuda_produces_opaque, /* FP16 plans: FP16 NHWC (cuda_nhwc.h) */
    .accepts_opaque = cuda_accepts_opaque,
    .available = cuda_available,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = infd_cuda_stream_destroy,
    .copy = cuda_copy,
    .sync = cuda_sync,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = infd_cuda_replay,
    .order_begin = infd_cuda_order_begin,
    .order_end = infd_cuda_order_end,
    .set_device = infd_cuda_set_device,
    .prepare = cuda_prepare,
    .settle = infd_cuda_warm_join,
};

infd_cuda_kernel *infd_cuda_kernel_new(size_t size, const char *name,
                                       void (*run)(const infd_cuda_kernel *,
                                                   const infd_kernel_io *),
                                       void (*fini)(infd_cuda_kernel *))
{
    INFD_ASSERT(size >= sizeof(infd_cuda_kernel));
    infd_cuda_kernel *k = infd_calloc(1, size);
    if (!k)
        return NULL;
    k->base.ops = &infd_cuda_backend;
    k->base.name = name;
    k->run = run;
    k->fini = fini;
    return k;
}

bool infd_cuda_fp32_only(const infd_kernel_args *a, int n_in, infd_error *why)
{
    for (int i = 0; i < n_in && i < a->n_inputs; i++) {
        if (a->inputs[i] && a->inputs[i]->dtype != INFD_DTYPE_FP32) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "input %d is %s; the CUDA kernel takes FP32", i,
                            infd_dtype_name(a->inputs[i]->dtype));
            return false;
        }
    }
    for (int i = 0; i < a->n_outputs; i++) {
        if (a->outputs[i] && a->outputs[i]->dtype != INFD_DTYPE_FP32) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "output %d is %s; the CUDA kernel makes FP32", i,
                            infd_dtype_name(a->outputs[i]->dtype));
            return false;
        }
    }
    return true;
}

/* The fusion attributes the CUDA kernels apply. The CPU backend knows more
 * (_fused_post_scale, _fused_post_shift): a node carrying one is declined
 * here, so the fusion pass leaves those ops unfused for CUDA plans instead
 * of a kernel silently dropping them. */
static const char *const cuda_fused_attrs[] = { "_fused_activation", "_fused_alpha", "_fused_beta",
                                                "_fused_sum" };

bool infd_cuda_fused_known(const infd_kernel_args *a, bool fuses, infd_error *why)
{
    for (int32_t k = 0; k < a->node->n_attrs; k++) {
        const char *name = a->node->attrs[k].name;
        bool known = strncmp(name, "_fused_", 7) != 0;
        for (size_t i = 0; i < INFD_ARRAY_SIZE(cuda_fused_attrs) && !known && fuses; i++)
            known = strcmp(name, cuda_fused_attrs[i]) == 0;
        if (!known) {
            infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                            "fusion attribute '%s' is not supported by this CUDA kernel", name);
            return false;
        }
    }
    return true;
}

/* The activation that the node's attributes `names` (kind, alpha, beta)
 * name: NONE without the first. */
static bool activation_attrs(const infd_kernel_args *a, const char *const names[3],
                             infd_cuda_act *act, float *alpha, float *beta, infd_error *why)
{
    const char *kind = NULL;
    *act = INFD_CUDA_ACT_NONE;
    *alpha = 0.0f;
    *beta = 0.0f;
    if (infd_ir_attr_string(a->g, a->node, names[0], NULL, &kind, why) != INFD_STATUS_OK)
        return false;
    if (!kind)
        return true;
    if (infd_ir_attr_float(a->g, a->node, names[1], 0.0f, alpha, why) != INFD_STATUS_OK ||
        infd_ir_attr_float(a->g, a->node, names[2], 0.0f, beta, why) != INFD_STATUS_OK)
        return false;
    static const struct {
        const char *name;
        infd_cuda_act act;
    } acts[] = {
        { "Relu", INFD_CUDA_ACT_RELU },
        { "LeakyRelu", INFD_CUDA_ACT_LEAKY_RELU },
        { "Clip", INFD_CUDA_ACT_CLIP },
        { "Sigmoid", INFD_CUDA_ACT_SIGMOID },
        { "HardSigmoid", INFD_CUDA_ACT_HARD_SIGMOID },
        { "Tanh", INFD_CUDA_ACT_TANH },
    };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(acts); i++) {
        if (strcmp(kind, acts[i].name) == 0) {
            *act = acts[i].act;
            return true;
        }
    }
    infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                    "fused activation '%s' is not supported on CUDA", kind);
    return false;
}

bool infd_cuda_fused_activation(const infd_kernel_args *a, infd_cuda_act *act, float *alpha,
                                float *beta, infd_error *why)
{
    static const char *const names[3] = { "_fused_activation", "_fused_alpha", "_fused_beta" };
    *act = INFD_CUDA_ACT_NONE;
    return infd_cuda_fused_known(a, true, why) && activation_attrs(a, names, act, alpha, beta, why);
}

bool infd_cuda_dw_activation(const infd_kernel_args *a, infd_cuda_act *act, float *alpha,
                             float *beta, infd_error *why)
{
    static const char *const names[3] = { "_dw_activation", "_dw_alpha", "_dw_beta" };
    return activation_attrs(a, names, act, alpha, beta, why);
}

bool infd_cuda_fused_sum(const infd_kernel_args *a)
{
    const infd_ir_attr *at = infd_ir_node_attr(a->node, "_fused_sum");
    return at && at->type == INFD_IR_ATTR_INT && at->i != 0;
}

bool infd_cuda_kernel_keep_tuning(infd_cuda_kernel *k, const void *head, size_t head_n,
                                  const void *tail, size_t tail_n)
{
    infd_free((void *)k->base.tuning);
    k->base.tuning = NULL;
    k->base.tuning_bytes = 0;
    if (head_n + tail_n == 0)
        return true;
    uint8_t *p = infd_malloc(head_n + tail_n);
    if (!p)
        return false;
    if (head_n)
        memcpy(p, head, head_n);
    if (tail_n)
        memcpy(p + head_n, tail, tail_n);
    k->base.tuning = p;
    k->base.tuning_bytes = head_n + tail_n;
    return true;
}
