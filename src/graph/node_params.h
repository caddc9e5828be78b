/*
 * node_params.h - what every backend reads from an ONNX node the same way:
 * errors that name the node, constant integer inputs, Slice's
 * starts/ends/axes/steps, and a reduction's axes grouped into kept and
 * reduced dims. Shape inference (shape.c) checks the same parameters to
 * derive output shapes; these give kernels their values, once for the CPU
 * and CUDA backends both.
 */
#ifndef INFD_GRAPH_NODE_PARAMS_H
#define INFD_GRAPH_NODE_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/backend.h"

/* Sets `err` to "<model>: node '<name>' (<op>): <message>" and returns
 * `code`. */
infd_status infd_node_error(const infd_kernel_args *a, infd_error *err, infd_status code,
                            const char *fmt, ...) INFD_PRINTF(4, 5);

/* Elements of `v` (the product of its concrete dims). */
int64_t infd_node_numel(const infd_ir_value *v);

/* True when `v` is present and its data is known at compile time (an empty
 * tensor always is). */
bool infd_node_is_const(const infd_ir_value *v);

/* Reads a constant INT32/INT64 tensor into out[0..cap); *n gets the element
 * count. False for other dtypes, missing data or more than `cap`. */
bool infd_node_const_ints(const infd_ir_value *v, int64_t *out, int64_t cap, int64_t *n);

/* Slice's parameters: attributes before opset 10, constant inputs from 10
 * (axes default to 0..n-1, steps to 1; negative axes wrap). *n gets their
 * count (<= INFD_MAX_RANK). False with a message naming the node otherwise
 * (inputs that are not constants: UNIMPLEMENTED). */
bool infd_slice_params(const infd_kernel_args *a, int64_t *starts, int64_t *ends, int64_t *axes,
                       int64_t *steps, int64_t *n, infd_error *why);

/* Whether an LSTM node's `activations` attribute is absent or lists the
 * defaults (Sigmoid, Tanh, Tanh) for each of its `dirs` directions. */
bool infd_lstm_default_activations(const infd_ir_node *node, int dirs);

/* A Reduce* node's input dims as the kernels walk them: size-1 dims
 * dropped, neighbours of the same kind (kept or reduced) merged, element
 * strides of the dense input. The kept groups stay in input order, which is
 * the output's row-major order. */
typedef struct infd_reduce_geom {
    bool copy; /* noop_with_empty_axes and no axes: the output is the input */
    int32_t n_kept, n_red;
    int64_t kept_dims[INFD_MAX_RANK], kept_strides[INFD_MAX_RANK];
    int64_t red_dims[INFD_MAX_RANK], red_strides[INFD_MAX_RANK];
    bool ends_kept;    /* the last group, in dim order, is a kept one */
    int64_t red_count; /* input elements per output element (may be 0) */
    int64_t out_numel;
} infd_reduce_geom;

/* Reads a Reduce* node's axes (attribute, or a constant input from opset 18
 * and for ReduceSum from 13), keepdims and noop_with_empty_axes, checks the
 * output shape against them and fills `g`. False with a message naming the
 * node otherwise. */
bool infd_reduce_geom_get(const infd_kernel_args *a, infd_reduce_geom *g, infd_error *why);

#endif /* INFD_GRAPH_NODE_PARAMS_H */
