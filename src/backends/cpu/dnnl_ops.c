/*
 * dnnl_ops.c - the table of CPU operators implemented on oneDNN primitives.
 * Implementations live in dnnl_*.c beside this file; each supports()
 * accepts FP32 and the attribute combinations oneDNN computes exactly as
 * ONNX defines them, and declines the rest (with a reason) for the
 * reference table.
 */
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dnnl_common.h"

#define OP(type, name)                                                            \
    {                                                                             \
        type, infd_dnnl_##name##_supports, infd_dnnl_##name##_compile, NULL, NULL \
    }

const infd_cpu_op infd_cpu_ops_dnnl[] = {
    OP("Conv", conv),
    OP("ConvTranspose", conv_transpose),
    OP("MaxPool", max_pool),
    OP("AveragePool", avg_pool),
    OP("GlobalAveragePool", global_avg_pool),
    OP("GlobalMaxPool", global_avg_pool),
    OP("Gemm", gemm),
    OP("MatMul", matmul),
    OP("Relu", eltwise),
    OP("LeakyRelu", eltwise),
    OP("Sigmoid", eltwise),
    OP("Tanh", eltwise),
    OP("Exp", eltwise),
    OP("Abs", eltwise),
    OP("Sqrt", eltwise),
    OP("Clip", eltwise),
    OP("HardSigmoid", eltwise),
    OP("Pow", pow),
    OP("Add", binary),
    OP("Sub", binary),
    OP("Mul", binary),
    OP("Div", binary),
    OP("Softmax", softmax),
    OP("LogSoftmax", softmax),
    OP("BatchNormalization", batch_norm),
    OP("ReduceMean", reduce),
    OP("ReduceSum", reduce),
    OP("ReduceMax", reduce),
    OP("ReduceMin", reduce),
    { NULL, NULL, NULL, NULL, NULL },
};
