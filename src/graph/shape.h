/*
 * shape.h - shape and dtype inference with concrete shapes.
 *
 * A plan is compiled for concrete input shapes, so inference here computes
 * numbers, not symbols: given a node whose inputs all have known dtypes and
 * concrete shapes (every dim a value >= 0), it sets the dtype and shape of
 * each of its outputs, following ONNX semantics for the node's opset
 * (g->opset): broadcasting, auto_pad, ceil_mode, negative axes, axes as
 * attributes (older opsets) or as inputs (newer ones). Where the output
 * shape depends on input data (Reshape's shape, Slice's starts/ends,
 * Resize's scales/sizes, ConstantOfShape, Expand, Tile, ...), that input
 * must be a constant (value->data set): the plan compiler folds Shape
 * subgraphs into constants before it gets there.
 *
 * Errors are INVALID_ARGUMENT with "<file>: node '<name>' (<op>): ..." and
 * what was expected against what was found; an op without a shape function
 * is UNIMPLEMENTED naming the op and node.
 */
#ifndef INFD_GRAPH_SHAPE_H
#define INFD_GRAPH_SHAPE_H

#include "graph/ir.h"
#include "infd/infd.h"

/* Infers node `node`'s outputs in place (g->values[...].dtype / .shape). */
infd_status infd_shape_infer_node(infd_ir_graph *g, int32_t node, infd_error *err);

/* True when infd has a shape function for `op_type` (default domain). */
bool infd_shape_has_op(const char *op_type);

#endif /* INFD_GRAPH_SHAPE_H */
