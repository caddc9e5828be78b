/*
 * kserve_json.h - decodes the JSON header of a KServe v2 inference request.
 *
 * The body of POST /v2/models/{m}/infer is a JSON object (the "inference
 * header"), optionally followed by the binary tensor data of Triton's
 * binary-data extension. This module turns the JSON part into a
 * kserve_request: the request id and parameters, the inputs (name, datatype,
 * shape, and either decoded data or the size of their binary data), and the
 * requested outputs.
 *
 * Tensor data is decoded with yajl's callback (SAX) parser, so no node is
 * built per element: each number is range-checked and written straight into
 * a typed buffer sized from shape x datatype. When "data" comes before
 * "datatype" or "shape" in an input object (JSON objects are unordered), the
 * parser remembers where the array starts and ends and decodes that span
 * once the input object is complete.
 *
 * Memory: a kserve_request owns one growable buffer per input slot and an
 * arena for yajl's own allocations. Both are kept across parses, so a
 * request object reused for the next request (the HTTP frontend keeps them
 * on a free list) decodes without allocating once warm. Not thread-safe: one
 * kserve_request is used by one thread at a time.
 */
#ifndef INFD_FRONTENDS_HTTP_KSERVE_JSON_H
#define INFD_FRONTENDS_HTTP_KSERVE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infd/infd.h"

/* Longest input/output name or request id kept, including the NUL. Longer
 * ones are rejected (names) or truncated (the id). */
#define KSERVE_NAME_BYTES 128

typedef struct kserve_input {
    char name[KSERVE_NAME_BYTES];
    infd_dtype dtype;
    int32_t rank; /* -1 until "shape" is seen */
    int64_t shape[INFD_MAX_RANK];
    /* >= 0: the tensor's bytes follow the JSON header (binary-data
     * extension) and `data` is NULL until the caller points it there; -1:
     * the data was in the JSON and has been decoded into `data`. */
    int64_t binary_data_size;
    /* Decoded row-major data (borrowed from this slot's buffer, valid until
     * the next parse or fini) and its byte size. BYTES data uses KServe's
     * binary layout (4-byte little-endian length, then the bytes). */
    const void *data;
    size_t nbytes;
    /* Triton's shared-memory extension: the parameters shared_memory_region
     * ("" when not given), _offset and _byte_size (-1 when not given). An
     * input in a region has no data and binary_data_size -1; its nbytes is
     * the byte size. */
    char shm_region[KSERVE_NAME_BYTES];
    int64_t shm_offset, shm_byte_size;

    /* Private. */
    uint8_t *_buf; /* owned, reused across parses */
    size_t _cap;
    bool _has_data, _has_dtype, _deferred;
    size_t _data_begin, _data_end; /* byte offsets of a deferred "data" array */
    int64_t _numel, _count;
} kserve_input;

typedef struct kserve_output {
    char name[KSERVE_NAME_BYTES];
    int binary_data; /* parameters.binary_data: -1 not given, 0 false, 1 true */
    int class_count; /* parameters.classification (Triton's extension): 0 not asked */
    /* parameters.shared_memory_region ("" when not given), _offset (0 when
     * not given) and _byte_size: the output is written there. */
    char shm_region[KSERVE_NAME_BYTES];
    int64_t shm_offset, shm_byte_size;
} kserve_output;

#define KSERVE_MAX_JSON_DEPTH 64

typedef struct kserve_request {
    char id[KSERVE_NAME_BYTES]; /* "" when absent */
    bool has_id;
    int binary_data_output; /* parameters.binary_data_output: -1, 0 or 1 */
    int64_t timeout_us;     /* parameters.timeout (microseconds), -1 absent */
    int64_t priority;       /* parameters.priority, -1 absent */
    /* parameters.sequence_id (a number, or a string in sequence_id_string),
     * sequence_start and sequence_end (INFD_SEQUENCE_* flags). */
    bool has_sequence;
    uint64_t sequence_id;
    char sequence_id_string[128];
    uint32_t sequence_flags;
    int n_inputs;
    kserve_input inputs[INFD_MAX_MODEL_IO];
    int n_outputs;
    kserve_output outputs[INFD_MAX_MODEL_IO];
    /* Set by the caller, kept across parses: JSON containers (objects and
     * arrays, skipped values included) open at once; deeper requests are
     * rejected (Triton's CVE class of unbounded nesting). 0: the default,
     * KSERVE_MAX_JSON_DEPTH. */
    int max_depth;

    /* Private: an arena for yajl's allocations, reset per parse. */
    uint8_t *_arena;
    size_t _arena_cap, _arena_used;
    void *_overflow; /* allocations that did not fit, freed at reset */
} kserve_request;

/* Zeroes `r`. Call once before the first parse. */
void kserve_request_init(kserve_request *r);

/* Empties `r` as a parse of a request with no id, inputs, outputs or
 * parameters would (buffers are kept). */
void kserve_request_reset(kserve_request *r);

/* Frees the buffers `r` holds and zeroes it. A no-op on a zeroed request. */
void kserve_request_fini(kserve_request *r);

/*
 * Parses `n` bytes of JSON (the inference header; not NUL-terminated) into
 * `r`, replacing what a previous parse left there (buffers are reused).
 * On error returns INVALID_ARGUMENT (OUT_OF_MEMORY when a buffer cannot
 * grow) with a message naming the input and the problem: malformed JSON
 * (with the byte offset), a missing field, an unknown datatype, a shape
 * that does not match the element count, an element of the wrong JSON type
 * or out of the datatype's range, "data" together with binary_data_size,
 * JSON nested deeper than max_depth, "data" nested deeper than the largest
 * rank.
 * FP16 and BF16 elements are JSON numbers converted from float; BOOL
 * elements are true/false; BYTES elements are strings.
 */
infd_status kserve_request_parse(kserve_request *r, const char *json, size_t n, infd_error *err);

/* "input 'NAME'" or, before the name is known, "input #i", for messages. */
const char *kserve_input_label(const kserve_request *r, int i, char *buf, size_t n);

/*
 * Writing KServe JSON, for the frontends' replies (HTTP) and results (the
 * Redis queue), into an infd_strbuf (src/core/strbuf.h).
 */
struct infd_strbuf;

/* `n` bytes of `s` as a JSON string, escaped. */
void kserve_write_str(struct infd_strbuf *b, const char *s, size_t n);
void kserve_write_cstr(struct infd_strbuf *b, const char *s);
/* A number in %g form at `digits` significant digits (9 reads an FP32
 * back exactly, 17 an FP64); NaN and infinities as Python's json writes
 * them. */
void kserve_write_float(struct infd_strbuf *b, double v, int digits);
/* The first `n` elements of `t` as a flat JSON array (BYTES elements as
 * strings). */
void kserve_write_data(struct infd_strbuf *b, const infd_tensor *t, int64_t n);
/* `{"name":NAME,"datatype":DT,"shape":[...]` of output `t`, the object
 * left open for its data or parameters. */
void kserve_write_output_head(struct infd_strbuf *b, const char *name, const infd_tensor *t);
/* Puts the request's id, queue timeout, priority and sequence parameters
 * on `req` (the frontends' shared part of building a request); the
 * runtime's error on a bad priority or sequence. */
infd_status kserve_request_apply(const kserve_request *r, infd_request *req, infd_error *err);
/* Asks `req` for the outputs the request names (none: all), with the
 * classification extension where an output's parameters ask for it. */
infd_status kserve_request_add_outputs(const kserve_request *r, infd_request *req, infd_error *err);
/* The class count output `name` asked for (0: the tensor itself). */
int kserve_output_class_count(const kserve_request *r, const char *name);
/* Whether output `name` goes back as binary data: its own
 * parameters.binary_data, else the request's binary_data_output. */
bool kserve_output_is_binary(const kserve_request *r, const char *name);

/* The requested output `name` when its parameters put it in a shared memory
 * region, else NULL. */
const kserve_output *kserve_output_shm(const kserve_request *r, const char *name);

#endif /* INFD_FRONTENDS_HTTP_KSERVE_JSON_H */
