/*
 * dnnl_ops.c - the table of CPU operators implemented on oneDNN primitives.
 * Implementations live in dnnl_*.c beside this file; each supports()
 * accepts FP32 and the attribute combinations oneDNN computes exactly as
 * ONNX defines them, and declines the rest (with a reason) for the
 * reference table.
 */
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dnnl_common.h"

/* An op without layout hooks (plain only), and one with them. */
#define OP(type, name) OPL(type, name, NULL, NULL)
#define OPL(type, name, produces, accepts)                                               \
    {                                                                                    \
        type, infd_dnnl_##name##_supports, infd_dnnl_##name##_compile, produces, accepts \
    }
/* Layout-preserving: opaque output exactly when the input is opaque. */
#define OPP(type, name) OPL(type, name, infd_dnnl_produces_opaque, infd_dnnl_accepts_input0)

const infd_cpu_op infd_cpu_ops_dnnl[] = {
    OPL("Conv", conv, infd_dnnl_conv_produces_opaque, infd_dnnl_conv_accepts_opaque),
    OPL("ConvTranspose", conv_transpose, infd_dnnl_conv_transpose_produces_opaque,
        infd_dnnl_accepts_input0),
    OPP("MaxPool", max_pool),
    OPP("AveragePool", avg_pool),
    OPP("GlobalAveragePool", global_avg_pool),
    OPP("GlobalMaxPool", global_avg_pool),
    OP("Gemm", gemm),
    OP("MatMul", matmul),
    OPP("Relu", eltwise),
    OPP("LeakyRelu", eltwise),
    OPP("Sigmoid", eltwise),
    OPP("Tanh", eltwise),
    OPP("Exp", eltwise),
    OPP("Abs", eltwise),
    OPP("Sqrt", eltwise),
    OPP("Clip", eltwise),
    OPP("HardSigmoid", eltwise),
    OPP("HardSwish", eltwise),
    OPP("Pow", pow),
    OPL("Add", binary, infd_dnnl_produces_opaque, infd_dnnl_binary_accepts_opaque),
    OPL("Sub", binary, infd_dnnl_produces_opaque, infd_dnnl_binary_accepts_opaque),
    OPL("Mul", binary, infd_dnnl_produces_opaque, infd_dnnl_binary_accepts_opaque),
    OPL("Div", binary, infd_dnnl_produces_opaque, infd_dnnl_binary_accepts_opaque),
    OPL("Concat", concat, infd_dnnl_produces_opaque, infd_dnnl_concat_accepts_opaque),
    OP("Softmax", softmax),
    OP("LogSoftmax", softmax),
    OPP("BatchNormalization", batch_norm),
    OP("ReduceMean", reduce),
    OP("ReduceSum", reduce),
    OP("ReduceMax", reduce),
    OP("ReduceMin", reduce),
    { NULL, NULL, NULL, NULL, NULL },
};
