/*
 * ref_kernels.h - the supports/compile pairs of the CPU backend's own
 * kernels, one block per ref_*.c file, for the table in ref_ops.c.
 * supports() may be NULL in the table when compile alone decides.
 */
#ifndef INFD_BACKENDS_CPU_REF_KERNELS_H
#define INFD_BACKENDS_CPU_REF_KERNELS_H

#include "backends/cpu/cpu_ops.h"

#define REF_DECLARE(name)                                                   \
    bool ref_##name##_supports(const infd_kernel_args *a, infd_error *why); \
    infd_status ref_##name##_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)

/* ref_movement.c: Identity, Reshape, Flatten, Squeeze, Unsqueeze, Dropout
 * (copies), Expand, Transpose, Slice, Tile, Concat, Split, Gather,
 * DepthToSpace, SpaceToDepth, GatherElements. */
REF_DECLARE(copy);
REF_DECLARE(expand);
REF_DECLARE(transpose);
REF_DECLARE(slice);
REF_DECLARE(tile);
REF_DECLARE(concat);
REF_DECLARE(split);
REF_DECLARE(gather);
REF_DECLARE(depth_space);
REF_DECLARE(gather_elements);

/* ref_shape.c: Shape, Constant, ConstantOfShape, Range, Cast. */
REF_DECLARE(shape);
REF_DECLARE(constant);
REF_DECLARE(constant_of_shape);
REF_DECLARE(range);
REF_DECLARE(cast);

/* ref_elementwise.c: broadcasting arithmetic, comparisons, logic, Where,
 * variadic Min/Max/Sum/Mean, unary math, Clip. */
REF_DECLARE(binary);
REF_DECLARE(compare);
REF_DECLARE(logic);
REF_DECLARE(logical_not);
REF_DECLARE(where);
REF_DECLARE(variadic);
REF_DECLARE(unary);

/* ref_resize.c: Resize, Upsample. */
REF_DECLARE(resize);

/* ref_reduce.c: ReduceMean/Sum/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp,
 * Softmax, LogSoftmax, Hardmax, MatMul, LayerNormalization. */
REF_DECLARE(reduce);
REF_DECLARE(softmax);
REF_DECLARE(hardmax);
REF_DECLARE(matmul);
REF_DECLARE(layernorm);

/* ref_pad.c: Pad. */
REF_DECLARE(pad);

/* ref_index.c: ArgMax, ArgMin, IsNaN, IsInf, Trilu, Mod, CumSum, EyeLike,
 * OneHot. */
REF_DECLARE(arg);
REF_DECLARE(segarg);
REF_DECLARE(isx);
REF_DECLARE(trilu);
REF_DECLARE(mod);
REF_DECLARE(cumsum);
REF_DECLARE(eye_like);
REF_DECLARE(one_hot);

/* ref_rnn.c: LSTM. */
REF_DECLARE(lstm);

#endif /* INFD_BACKENDS_CPU_REF_KERNELS_H */
