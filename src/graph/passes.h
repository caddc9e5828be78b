/*
 * passes.h - graph rewrites that run after shape inference and constant
 * folding, on a graph whose shapes are concrete and whose constants carry
 * data (see plan.c for the order).
 *
 * Each pass keeps node and value indices stable: a removed node is marked
 * dead, a new constant is a new value. Each returns an error only for out
 * of memory; a pattern that does not match is left alone.
 */
#ifndef INFD_GRAPH_PASSES_H
#define INFD_GRAPH_PASSES_H

#include "graph/backend.h"
#include "graph/ir.h"
#include "infd/infd.h"

/* Folds BatchNormalization (inference) into the Conv that feeds it, when the
 * Conv's output has no other reader and all parameters are FP32 constants:
 * W' = W * s, b' = (b - mean) * s + beta with s = scale / sqrt(var + eps).
 * `*n_folded` counts the BatchNormalization nodes removed. */
infd_status infd_pass_fold_batchnorm(infd_ir_graph *g, int *n_folded, infd_error *err);

/* Folds a chain of constant Mul, Add and Sub (x - c) that follows a Conv
 * into its weights and bias, when each value in the chain but the last has
 * no other reader and is not a graph output, and the constants are FP32
 * scalars or per-output-channel ([M], [M,1,1], [1,M,1,1] for an [N,M,H,W]
 * output) that do not broadcast the output. With s and t the chain's
 * per-channel scale and shift (y = conv(x) * s + t): W' = W * s,
 * b' = b * s + t. Run after infd_pass_fold_batchnorm. `*n_folded` counts
 * the nodes removed. */
infd_status infd_pass_fold_conv_affine(infd_ir_graph *g, int *n_folded, infd_error *err);

/* Replaces hard-swish written out in elementary ops by one HardSwish node
 * (ONNX opset 14; y = x * clip(x + 3, 0, 6) / 6) reading x:
 *
 *   Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(., 6) or Mul(., 1/6)
 *   Add(x, 3) -> Clip(0, 6) -> Div(., 6) or Mul(., 1/6) -> Mul(x, .)
 *   Mul(x, HardSigmoid(x; alpha 1/6, beta 0.5))
 *
 * with constant FP32 scalars (either operand order), when every value
 * inside the chain has no other reader and is not a graph output and
 * `backend` accepts the HardSwish node; x itself may have other readers.
 * x * HardSigmoid(y) for another y (a squeeze-excitation gate) is not
 * hard-swish and is left alone. `backend` is asked with the plan's
 * `precision`, as in the passes below. `*n_fused` counts the nodes
 * removed. */
infd_status infd_pass_fuse_hardswish(infd_ir_graph *g, const infd_backend_ops *backend,
                                     int n_threads, infd_precision precision, int *n_fused,
                                     infd_error *err);

/* Fuses an activation (Relu, Clip with constant bounds, Sigmoid,
 * HardSigmoid, LeakyRelu, HardSwish) into the Conv/Gemm/MatMul before it,
 * and a residual Add between them, when the intermediate values have no
 * other reader, by giving the producer the attributes _fused_activation,
 * _fused_alpha, _fused_beta and _fused_sum (with the residual as input 3 of
 * Conv and Gemm, input 2 of MatMul; see src/backends/cpu/dnnl_conv.c). A
 * chain of constant FP32 scalar Mul, Add and Sub (x - c) after the fused
 * activation (or residual) becomes _fused_post_scale and _fused_post_shift
 * (y = scale * act + shift). A fusion is kept only if `backend` accepts the
 * fused node; one the backend refuses with the trailing scale and shift is
 * tried without them. `*n_fused` counts the nodes removed. */
infd_status infd_pass_fuse_activations(infd_ir_graph *g, const infd_backend_ops *backend,
                                       int n_threads, infd_precision precision, int *n_fused,
                                       infd_error *err);

/* Fuses a depthwise Conv (group == channels in == channels out, constant
 * weights, nothing but an activation fused into it) and the 1x1 Conv
 * (stride 1, no pads, group 1) that is its only reader into one _DwPwConv
 * node at the 1x1 Conv's place: inputs x, W, B, residual, the depthwise W
 * and B (see src/backends/cuda/cuda_dwpw.c), the depthwise Conv's window
 * attributes and its activation (as _dw_activation, _dw_alpha, _dw_beta:
 * applied to the depthwise output), and the 1x1 Conv's activation and
 * residual hooks. Run after
 * infd_pass_fuse_activations. Where the residual is a Concat of r with a
 * constant of zeros along the channels (a block widening its shortcut),
 * the node reads r instead (fewer channels than the output: the rest add
 * 0), and where r is a MaxPool 2x2 with stride 2 of t, it reads t with
 * residual_pool = 2; each only when the removed node's output has no
 * other reader and `backend` accepts the node (checked with `precision`),
 * the most fused first. `*n_fused` counts the nodes removed. */
infd_status infd_pass_fuse_depthwise(infd_ir_graph *g, const infd_backend_ops *backend,
                                     int n_threads, infd_precision precision, int *n_fused,
                                     infd_error *err);

#endif /* INFD_GRAPH_PASSES_H */
