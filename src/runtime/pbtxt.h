/*
 * pbtxt.h - protobuf text format (config.pbtxt) to and from protobuf-c
 * messages, driven by protobuf-c's descriptors.
 *
 * The parser knows no message type: it walks the ProtobufCMessageDescriptor
 * it is given, so a new field in proto/model_config.proto is parsed without
 * touching this code. The message it builds has exactly the layout
 * protobuf_c_message_unpack() produces (descriptor->message_init, repeated
 * fields as n_xxx + heap array, heap NUL-terminated strings, heap
 * submessages, oneof `_case` members set through quantifier_offset, map
 * fields as repeated ...Entry messages), so protobuf_c_message_pack(),
 * protobuf_c_message_free_unpacked() and the generated accessors work on it.
 *
 * Accepted grammar (the protobuf text format as TextFormat::Parser reads it,
 * less extensions and Any):
 *   message := { field [',' | ';'] }
 *   field   := name ':' value | name ':' '[' [value {',' value}] ']'
 *            | name [':'] ('{' message '}' | '<' message '>')
 *            | name [':'] '[' [msg {',' msg}] ']'
 *   value   := ['-'] number | identifier | string {string}
 *   number  := decimal | 0x hex | 0 octal | float (1.5, .5, 1e-3, 2.5f)
 *   identifier covers enum names, true/false/True/False/t/f, inf/infinity/nan
 * `#` starts a comment that runs to the end of the line. Strings take single
 * or double quotes and C escapes (\n \t \\ \' \" \ooo \xhh \uhhhh
 * \Uhhhhhhhh); adjacent strings are concatenated; a string field must hold
 * valid UTF-8 without NUL bytes.
 *
 * Checked: integer ranges per type (int32 overflow, negative unsigned), a
 * non-repeated field given twice, two members of one oneof, duplicate map
 * keys, unknown field names, unknown enum values, proto2 required fields,
 * nesting deeper than INFD_PBTXT_MAX_DEPTH, input larger than
 * INFD_PBTXT_MAX_BYTES. Every error reads "file:line:col: path: message",
 * where path names the field ("input[1].dims") and the message says what was
 * expected and what was found:
 *   config.pbtxt:12:5: input[1]: ModelInput has no field "dimz" (did you mean
 * "dims"?) config.pbtxt:3:17: max_batch_size: expected an int32, found 1e3
 *
 * All functions are reentrant; nothing is shared between calls.
 */
#ifndef INFD_RUNTIME_PBTXT_H
#define INFD_RUNTIME_PBTXT_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "infd/infd.h"

/* Largest text infd_pbtxt_parse accepts. A config.pbtxt is a few KiB; the
 * bound keeps hostile input from costing more than ~100 MiB of messages. */
#define INFD_PBTXT_MAX_BYTES ((size_t)1 << 20)

/* Deepest nesting of messages infd_pbtxt_parse accepts (the top-level
 * message is depth 0); bounds the parser's recursion. */
#define INFD_PBTXT_MAX_DEPTH 64

/*
 * Parses `n` bytes of protobuf text format at `text` (need not be
 * NUL-terminated; NUL bytes are an error) into a new message of type `desc`.
 * `file` names the input in error messages ("models/simple/config.pbtxt");
 * NULL reads as "<text>".
 *
 * On success *out receives the message, owned by the caller, released with
 * infd_pbtxt_free() (or protobuf_c_message_free_unpacked() with
 * infd_pbtxt_allocator()). On failure *out is left NULL and `err` (nullable)
 * holds INFD_STATUS_INVALID_ARGUMENT and "file:line:col: path: message", or
 * INFD_STATUS_OUT_OF_MEMORY. Fields absent from the text keep the defaults
 * of descriptor->message_init.
 *
 * Cost: linear in `n` apart from the duplicate-key check of map fields,
 * which is quadratic in the number of entries of one map.
 */
infd_status infd_pbtxt_parse(const char *text, size_t n, const ProtobufCMessageDescriptor *desc,
                             const char *file, ProtobufCMessage **out, infd_error *err);

/* Releases a message from infd_pbtxt_parse (or one unpacked with
 * infd_pbtxt_allocator()). NULL is a no-op. */
void infd_pbtxt_free(ProtobufCMessage *msg);

/* The allocator the parser builds messages with (infd_malloc/infd_free), for
 * protobuf_c_message_unpack() and protobuf_c_message_free_unpacked(). A
 * process-lifetime object; callers must not modify it. */
ProtobufCAllocator *infd_pbtxt_allocator(void);

/*
 * Writes `msg` as protobuf text format, the way TextFormat::Print lays it
 * out: one field per line, two spaces of indent per level, repeated scalars
 * as one line per element, map entries as `key`/`value` messages, enums by
 * name; proto3 scalars equal to their default and unset submessages are
 * left out. infd_pbtxt_parse() reads the result back to an equal message.
 *
 * *out receives a NUL-terminated string released with infd_free, *n
 * (nullable) its length without the NUL. Errors: INFD_STATUS_OUT_OF_MEMORY,
 * INFD_STATUS_INVALID_ARGUMENT for a message nested deeper than
 * INFD_PBTXT_MAX_DEPTH (which the parser could not read back).
 */
infd_status infd_pbtxt_write(const ProtobufCMessage *msg, char **out, size_t *n, infd_error *err);

/* Formats `v` in the shortest form that reads back to the same value (as a
 * float when `is_float`, else as a double): "1", "0.1", "1e+30", "nan",
 * "inf", "-inf". Writes at most 32 bytes including the NUL into `buf` and
 * returns the length. Shared with pbjson.c. */
int infd_pbtxt_format_real(double v, int is_float, char buf[32]);

/* The name of `value` in enum `desc`, or NULL when it has none. */
const char *infd_pbtxt_enum_name(const ProtobufCEnumDescriptor *desc, int value);

/* True when `desc` is the entry type protoc generates for a map field
 * (message FooEntry { key = 1; value = 2; }); protobuf-c keeps no map_entry
 * option, so this is decided from the shape. */
int infd_pbtxt_is_map_entry(const ProtobufCMessageDescriptor *desc);

#endif /* INFD_RUNTIME_PBTXT_H */
