/*
 * loader.h - reads ONNX models into the engine's IR (src/graph/ir.h).
 *
 * The file is parsed with protobuf-c from our proto/onnx.proto subset, after
 * a bounded wire-format scan (nesting depth, lengths) so that a hostile file
 * cannot exhaust the stack, and with an allocation budget proportional to the
 * file size. Then every length, index, dtype and shape is checked while the
 * IR is built: a truncated, corrupted or hostile model gives an
 * INVALID_ARGUMENT error whose message names the file and the tensor, node or
 * field at fault, never a crash and never an allocation larger than the data
 * that backs it.
 *
 * Accepted: IR versions 3 and up, default-domain opsets 7..21, initializers
 * inline (raw_data or typed fields) or in external data files next to the
 * model (paths relative, never escaping the model's folder). Constant data is
 * copied into 64-byte aligned memory owned by the graph.
 *
 * Thread-safe: loads share nothing.
 */
#ifndef INFD_ONNX_LOADER_H
#define INFD_ONNX_LOADER_H

#include <stddef.h>

#include "graph/ir.h"
#include "infd/infd.h"

/* The opset range of the default ONNX domain that infd reads. */
#define INFD_ONNX_OPSET_MIN 7
#define INFD_ONNX_OPSET_MAX 21

/* Largest model file: protobuf's own 2 GiB limit. */
#define INFD_ONNX_MAX_FILE_BYTES ((size_t)2147483647)

/* Loads the model at `path`; external data is looked up in its folder. On
 * success `*out` is a new graph (infd_ir_graph_destroy). Errors: NOT_FOUND /
 * IO for the file, INVALID_ARGUMENT for a malformed model, OUT_OF_MEMORY. */
infd_status infd_onnx_load_file(const char *path, infd_ir_graph **out, infd_error *err);

/* Loads a model from `n` bytes at `data` (borrowed for the call). `source`
 * names it in messages; `base_dir` is where external data files are looked
 * up, or NULL to refuse external data. */
infd_status infd_onnx_load_buffer(const void *data, size_t n, const char *source,
                                  const char *base_dir, infd_ir_graph **out, infd_error *err);

#endif /* INFD_ONNX_LOADER_H */
