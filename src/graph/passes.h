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

/* Fuses an activation (Relu, Clip with constant bounds, Sigmoid,
 * HardSigmoid, LeakyRelu) into the Conv/Gemm/MatMul before it, and a
 * residual Add between them, when the intermediate values have no other
 * reader, by giving the producer the attributes _fused_activation,
 * _fused_alpha, _fused_beta and _fused_sum (with the residual as input 3 of
 * Conv and Gemm, input 2 of MatMul; see src/backends/cpu/dnnl_conv.c). A fusion is kept only if
 * `backend` accepts the fused node.
 * `*n_fused` counts the nodes removed. */
infd_status infd_pass_fuse_activations(infd_ir_graph *g, const infd_backend_ops *backend,
                                       int n_threads, int *n_fused, infd_error *err);

#endif /* INFD_GRAPH_PASSES_H */
