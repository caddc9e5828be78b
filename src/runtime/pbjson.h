/*
 * pbjson.h - protobuf-c message to JSON, in the form Triton's config and
 * metadata endpoints return (protobuf's JSON mapping with
 * preserving_proto_field_names and always_print_primitive_fields).
 *
 * Generic over the descriptors, like pbtxt.h: keys are the .proto field
 * names, enums their value names (the number when a value has no name),
 * int64/uint64 (and fixed/sint variants) JSON strings unless
 * INFD_PBJSON_INT64_AS_NUMBER (below), 32-bit integers JSON numbers, floats the shortest decimal
 * that reads back exactly, NaN and infinities the strings "NaN", "Infinity", "-Infinity", bytes
 * base64, repeated fields arrays (empty ones too), map fields objects keyed by the key's text.
 * proto3 scalars are emitted even at their default
 * ("max_batch_size":0); submessages that are NULL, unset oneof members and
 * unset proto2 optional fields are left out. Field order is the
 * descriptor's (field number order).
 *
 *   {"name":"simple","platform":"onnxruntime_onnx","max_batch_size":8,
 *    "input":[{"name":"INPUT0","data_type":"TYPE_INT32","format":"FORMAT_NONE",
 *              "dims":["16"],...}],...}
 *
 * Reentrant; nothing is shared between calls.
 */
#ifndef INFD_RUNTIME_PBJSON_H
#define INFD_RUNTIME_PBJSON_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "infd/infd.h"

/*
 * Triton's GET .../config is not protobuf's plain mapping: ModelConfigToJson
 * (triton-inference-server/core, src/model_config_utils.cc) prints with
 * protobuf's JSON printer, then converts every 64-bit integer field of
 * ModelConfig back to a JSON number ("dims":[3,224,224],
 * "max_queue_delay_microseconds":100); map keys stay strings. Clients such
 * as perf_analyzer read those fields as integers, so the config endpoint
 * wants INFD_PBJSON_INT64_AS_NUMBER.
 */
typedef enum infd_pbjson_flags {
    INFD_PBJSON_DEFAULT = 0,         /* protobuf's mapping: 64-bit integers as strings */
    INFD_PBJSON_INT64_AS_NUMBER = 1, /* Triton's config form: 64-bit integers as numbers */
} infd_pbjson_flags;

/*
 * Writes `msg` as compact JSON (no whitespace). *out receives a
 * NUL-terminated string released with infd_free, *n (nullable) its length
 * without the NUL. Errors: INFD_STATUS_OUT_OF_MEMORY;
 * INFD_STATUS_INVALID_ARGUMENT when a string field is not valid UTF-8 or the
 * message nests deeper than JSON generation allows (yajl's 128 levels),
 * naming the message type and field. *out is NULL on failure.
 */
infd_status infd_pbjson_write(const ProtobufCMessage *msg, char **out, size_t *n, infd_error *err);

/* As infd_pbjson_write with `flags`, a mask of infd_pbjson_flags. */
infd_status infd_pbjson_write_flags(const ProtobufCMessage *msg, unsigned flags, char **out,
                                    size_t *n, infd_error *err);

#endif /* INFD_RUNTIME_PBJSON_H */
