/*
 * ref_ops.c - the table of CPU operators implemented by our own C kernels.
 * Implementations live in ref_*.c beside this file; ref_kernels.h lists
 * them. The oneDNN table is consulted first, so entries here are the
 * fallback for what it declines and the home of everything it lacks.
 */
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ref_kernels.h"

#define REF_OP(op_type, name)                                            \
    {                                                                    \
        op_type, ref_##name##_supports, ref_##name##_compile, NULL, NULL \
    }

const infd_cpu_op infd_cpu_ops_ref[] = {
    /* Shape plumbing and data movement. */
    REF_OP("Identity", copy),
    REF_OP("Reshape", copy),
    REF_OP("Flatten", copy),
    REF_OP("Squeeze", copy),
    REF_OP("Unsqueeze", copy),
    REF_OP("Dropout", copy),
    REF_OP("Expand", expand),
    REF_OP("Transpose", transpose),
    REF_OP("Slice", slice),
    REF_OP("Tile", tile),
    REF_OP("Concat", concat),
    REF_OP("Split", split),
    REF_OP("Gather", gather),
    REF_OP("Shape", shape),
    REF_OP("Constant", constant),
    REF_OP("ConstantOfShape", constant_of_shape),
    REF_OP("Range", range),
    REF_OP("Cast", cast),
    REF_OP("CastLike", cast),
    /* Broadcasting elementwise. */
    REF_OP("Add", binary),
    REF_OP("Sub", binary),
    REF_OP("Mul", binary),
    REF_OP("Div", binary),
    REF_OP("Pow", binary),
    REF_OP("Equal", compare),
    REF_OP("Less", compare),
    REF_OP("Greater", compare),
    REF_OP("LessOrEqual", compare),
    REF_OP("GreaterOrEqual", compare),
    REF_OP("And", logic),
    REF_OP("Or", logic),
    REF_OP("Xor", logic),
    REF_OP("Not", logical_not),
    REF_OP("Where", where),
    REF_OP("Min", variadic),
    REF_OP("Max", variadic),
    REF_OP("Sum", variadic),
    REF_OP("Mean", variadic),
    /* Unary math. */
    REF_OP("Relu", unary),
    REF_OP("Sigmoid", unary),
    REF_OP("Sqrt", unary),
    REF_OP("Neg", unary),
    REF_OP("Exp", unary),
    REF_OP("Log", unary),
    REF_OP("Tanh", unary),
    REF_OP("Abs", unary),
    REF_OP("Erf", unary),
    REF_OP("Floor", unary),
    REF_OP("Ceil", unary),
    REF_OP("Reciprocal", unary),
    REF_OP("HardSigmoid", unary),
    REF_OP("LeakyRelu", unary),
    REF_OP("Clip", unary),
    REF_OP("Elu", unary),
    REF_OP("Selu", unary),
    REF_OP("Softplus", unary),
    REF_OP("Softsign", unary),
    REF_OP("HardSwish", unary),
    REF_OP("Sin", unary),
    REF_OP("Cos", unary),
    REF_OP("Round", unary),
    REF_OP("Sign", unary),
    REF_OP("Gelu", unary),
    REF_OP("ThresholdedRelu", unary),
    REF_OP("Mish", unary),
    /* Resampling. */
    REF_OP("Resize", resize),
    REF_OP("Upsample", resize),
    /* Reductions, normalisation, matrix products. */
    REF_OP("ReduceSum", reduce),
    REF_OP("ReduceMean", reduce),
    REF_OP("ReduceMax", reduce),
    REF_OP("ReduceMin", reduce),
    REF_OP("ReduceProd", reduce),
    REF_OP("ReduceSumSquare", reduce),
    REF_OP("ReduceL1", reduce),
    REF_OP("ReduceL2", reduce),
    REF_OP("ReduceLogSum", reduce),
    REF_OP("Softmax", softmax),
    REF_OP("LogSoftmax", softmax),
    REF_OP("MatMul", matmul),
    { NULL, NULL, NULL, NULL, NULL },
};
