/*
 * wire.h - splits a ModelInferRequest's wire form, as gRPC core received it
 * (one or more slices), into its raw_input_contents (field 7), left where
 * they lie, and the rest of the message, which is small and is copied into
 * one contiguous buffer for protobuf-c to unpack.
 *
 * So a large tensor is never joined or copied by the frontend: each raw
 * input becomes the list of slice pieces it spans, which the runtime reads
 * as they are (infd_request_add_input_segments), or which the frontend
 * copies once into pinned memory for a GPU model.
 */
#ifndef INFD_FRONTENDS_GRPC_WIRE_H
#define INFD_FRONTENDS_GRPC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "infd/infd.h"

/* One raw_input_contents entry: the pieces of the received slices it spans,
 * in order (no empty piece), and its size. */
typedef struct grpc_wire_raw {
    infd_data_segment *pieces; /* in the arena */
    int n_pieces;
    size_t nbytes;
} grpc_wire_raw;

/* Splits the message held in the `n_in` pieces `in` (every byte of it, in
 * order). On success `*rest`/`*rest_n` are the message without its field-7
 * entries (a pointer into `in` when the message is one piece and has no raw
 * contents, else a copy in `a`), and raw[0..*n_raw) its raw contents in
 * order. INVALID_ARGUMENT, saying at which byte, for malformed framing (a
 * bad varint, a field past the end, wire types 3/4/6/7) or more than
 * `max_raw` entries; OUT_OF_MEMORY when the arena cannot grow. */
infd_status grpc_wire_split(infd_arena *a, const infd_data_segment *in, int n_in,
                            const uint8_t **rest, size_t *rest_n, grpc_wire_raw *raw, int max_raw,
                            int *n_raw, infd_error *err);

#endif /* INFD_FRONTENDS_GRPC_WIRE_H */
