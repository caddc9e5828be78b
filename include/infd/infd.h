/*
 * infd.h - the public C API of infd.
 *
 * This is the seam between infd and everything that uses it: the frontends
 * (HTTP, gRPC, raw sockets, Redis) and any embedder (a C program, a Python
 * ctypes binding) call only what this header declares. It includes nothing
 * but the C standard library.
 *
 * This first part holds the value types every layer shares: the version, the
 * status codes and error record, logging control, element types (dtypes) and
 * the tensor descriptor. The server API (repository, models, inference) grows
 * below them.
 *
 * Conventions (see STYLE.md in the design docs):
 *  - Functions that validate outside data take a last, nullable `infd_error *`
 *    that receives the code and a message naming what and where.
 *  - Pointer parameters are borrowed unless the comment says "takes".
 *  - Everything here is thread-safe unless its comment says otherwise.
 */
#ifndef INFD_INFD_H
#define INFD_INFD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define INFD_API                           __attribute__((visibility("default")))
#define INFD_PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))
#else
#define INFD_API
#define INFD_PRINTF(fmt_index, args_index)
#endif

/* ------------------------------------------------------------------------- */
/* Version                                                                   */
/* ------------------------------------------------------------------------- */

#define INFD_VERSION_MAJOR 0
#define INFD_VERSION_MINOR 1
#define INFD_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH"; a static string. */
INFD_API const char *infd_version(void);

/* The git revision the library was configured from ("unknown" outside a
 * checkout); a static string. */
INFD_API const char *infd_version_git(void);

/* ------------------------------------------------------------------------- */
/* Status codes and errors                                                   */
/* ------------------------------------------------------------------------- */

/*
 * One vocabulary of errors for the whole code base. Each frontend maps a code
 * to its protocol once (HTTP status, gRPC status, framed error record), so the
 * list is short on purpose. X(NAME, description).
 */
#define INFD_STATUS_MAP(X)                      \
    X(OK, "ok")                                 \
    X(INVALID_ARGUMENT, "invalid argument")     \
    X(NOT_FOUND, "not found")                   \
    X(UNAVAILABLE, "unavailable")               \
    X(RESOURCE_EXHAUSTED, "resource exhausted") \
    X(DEADLINE_EXCEEDED, "deadline exceeded")   \
    X(UNIMPLEMENTED, "unimplemented")           \
    X(OUT_OF_MEMORY, "out of memory")           \
    X(IO, "i/o error")                          \
    X(INTERNAL, "internal error")

typedef enum infd_status {
#define INFD_STATUS_ENUM_(name, str) INFD_STATUS_##name,
    INFD_STATUS_MAP(INFD_STATUS_ENUM_)
#undef INFD_STATUS_ENUM_
        INFD_STATUS_COUNT_
} infd_status;

/* "INVALID_ARGUMENT" for INFD_STATUS_INVALID_ARGUMENT; "UNKNOWN" for values
 * outside the enum. A static string. */
INFD_API const char *infd_status_name(infd_status status);

/* "invalid argument" for INFD_STATUS_INVALID_ARGUMENT; a static string. */
INFD_API const char *infd_status_str(infd_status status);

/* Longest message an infd_error keeps, including the terminating NUL. Longer
 * messages are truncated, never overflowed. */
#define INFD_ERROR_MSG_BYTES 512

/*
 * An error record: a code and a message that says what went wrong and where
 * ("model.onnx: node 'conv1' (Conv): input 1 has rank 3, expected 4").
 * Caller-owned storage; zero-initialise it (`infd_error err = {0};`) or call
 * infd_error_clear(). Functions that fill one accept NULL when the caller only
 * wants the code.
 */
typedef struct infd_error {
    infd_status code;
    char msg[INFD_ERROR_MSG_BYTES];
} infd_error;

/* Resets `err` to OK with an empty message. `err` may be NULL. */
INFD_API void infd_error_clear(infd_error *err);

/* Sets `err` (nullable) to `code` with a printf-style message and returns
 * `code`, so validation code can `return infd_error_set(err, ...)`. */
INFD_API infd_status infd_error_set(infd_error *err, infd_status code, const char *fmt, ...)
    INFD_PRINTF(3, 4);

/* As infd_error_set with a va_list. */
INFD_API infd_status infd_error_setv(infd_error *err, infd_status code, const char *fmt, va_list ap)
    INFD_PRINTF(3, 0);

/* Puts a printf-style context in front of the existing message, separated by
 * ": " ("config.pbtxt:12: " + "unknown field 'foo'"), keeping the code.
 * Returns the code. `err` may be NULL. */
INFD_API infd_status infd_error_prefix(infd_error *err, const char *fmt, ...) INFD_PRINTF(2, 3);

/* ------------------------------------------------------------------------- */
/* Logging                                                                   */
/* ------------------------------------------------------------------------- */

typedef enum infd_log_level {
    INFD_LOG_LEVEL_ERROR = 0,
    INFD_LOG_LEVEL_WARN = 1,
    INFD_LOG_LEVEL_INFO = 2,
    INFD_LOG_LEVEL_DEBUG = 3,
    INFD_LOG_LEVEL_TRACE = 4,
} infd_log_level;

/* Receives one formatted log line (no trailing newline). Called from any
 * thread, possibly concurrently; must not call back into the logger. */
typedef void (*infd_log_sink)(void *user, infd_log_level level, const char *line);

/* Messages above `level` are dropped. The initial level comes from the
 * environment variable INFD_LOG_LEVEL (error, warn, info, debug, trace),
 * default info. */
INFD_API void infd_log_set_level(infd_log_level level);
INFD_API infd_log_level infd_log_get_level(void);

/* Routes log lines to `sink` (NULL restores the default: one write(2) per line
 * to stderr). Set it before starting threads that log. */
INFD_API void infd_log_set_sink(infd_log_sink sink, void *user);

/* Parses "error", "warn", "info", "debug" or "trace" (case-insensitive). */
INFD_API infd_status infd_log_level_parse(const char *name, infd_log_level *out, infd_error *err);

/* "ERROR", "WARN", ...; a static string. */
INFD_API const char *infd_log_level_name(infd_log_level level);

/* ------------------------------------------------------------------------- */
/* Element types                                                             */
/* ------------------------------------------------------------------------- */

/*
 * Element types, named as in KServe v2 (and Triton's TYPE_* without the
 * prefix). BYTES is a sequence of length-prefixed byte strings; its elements
 * have no fixed size.
 */
#define INFD_DTYPE_MAP(X)    \
    X(INVALID, "INVALID", 0) \
    X(BOOL, "BOOL", 1)       \
    X(UINT8, "UINT8", 1)     \
    X(UINT16, "UINT16", 2)   \
    X(UINT32, "UINT32", 4)   \
    X(UINT64, "UINT64", 8)   \
    X(INT8, "INT8", 1)       \
    X(INT16, "INT16", 2)     \
    X(INT32, "INT32", 4)     \
    X(INT64, "INT64", 8)     \
    X(FP16, "FP16", 2)       \
    X(BF16, "BF16", 2)       \
    X(FP32, "FP32", 4)       \
    X(FP64, "FP64", 8)       \
    X(BYTES, "BYTES", 0)

typedef enum infd_dtype {
#define INFD_DTYPE_ENUM_(name, str, size) INFD_DTYPE_##name,
    INFD_DTYPE_MAP(INFD_DTYPE_ENUM_)
#undef INFD_DTYPE_ENUM_
        INFD_DTYPE_COUNT_
} infd_dtype;

/* Bytes per element; 0 for BYTES and INVALID (and out-of-range values). */
INFD_API size_t infd_dtype_size(infd_dtype dtype);

/* The KServe v2 name ("FP32"); "INVALID" for out-of-range values. */
INFD_API const char *infd_dtype_name(infd_dtype dtype);

/* Parses a KServe v2 name ("FP32") or a Triton config name ("TYPE_FP32").
 * Case-sensitive, as both protocols are. Returns INFD_DTYPE_INVALID for
 * anything else. */
INFD_API infd_dtype infd_dtype_from_name(const char *name);

/* Maps an ONNX TensorProto.DataType value (1 = FLOAT, 10 = FLOAT16, ...) to a
 * dtype; INFD_DTYPE_INVALID for types infd does not carry (complex, float8). */
INFD_API infd_dtype infd_dtype_from_onnx(int32_t onnx_type);

/* The ONNX TensorProto.DataType value of `dtype` (STRING for BYTES); 0
 * (UNDEFINED) for INVALID. */
INFD_API int32_t infd_dtype_to_onnx(infd_dtype dtype);

/*
 * IEEE 754 binary16 and bfloat16 conversions. float -> half rounds to nearest
 * even, keeps NaN a NaN (quiet), overflows to infinity and produces
 * subnormals; half -> float is exact.
 */
INFD_API uint16_t infd_fp16_from_fp32(float value);
INFD_API float infd_fp16_to_fp32(uint16_t bits);
INFD_API uint16_t infd_bf16_from_fp32(float value);
INFD_API float infd_bf16_to_fp32(uint16_t bits);

/* Array forms of the above: `n` elements, `dst` and `src` must not overlap. */
INFD_API void infd_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n);
INFD_API void infd_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n);
INFD_API void infd_fp32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
INFD_API void infd_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n);

/* ------------------------------------------------------------------------- */
/* Shapes and tensors                                                        */
/* ------------------------------------------------------------------------- */

/* The highest rank infd carries (ONNX models in practice stay at or below 6). */
#define INFD_MAX_RANK 8

/* Every buffer infd allocates for tensor data starts on this boundary. */
#define INFD_ALIGNMENT 64

/* A concrete shape: rank 0 is a scalar (one element). Dims are >= 0. */
typedef struct infd_shape {
    int32_t rank;
    int64_t dims[INFD_MAX_RANK];
} infd_shape;

/*
 * A tensor descriptor: element type, shape and one contiguous row-major
 * buffer. A value type (embed it, pass it by pointer); it either borrows its
 * data (owns_data false: a view into a request body, an arena, caller memory)
 * or owns it (owns_data true: allocated by infd_tensor_alloc, released by
 * infd_tensor_fini).
 *
 * For fixed-size dtypes nbytes == numel * dtype size. For BYTES, data holds
 * numel elements, each a 4-byte little-endian length followed by that many
 * bytes (KServe's binary layout), and nbytes is the total.
 */
typedef struct infd_tensor {
    infd_dtype dtype;
    infd_shape shape;
    void *data;
    size_t nbytes;
    bool owns_data;
} infd_tensor;

/* Builds a shape from `rank` dims. Fails (INVALID_ARGUMENT) on a rank above
 * INFD_MAX_RANK or a negative dim, naming it. `dims` may be NULL when rank is
 * 0. */
INFD_API infd_status infd_shape_init(infd_shape *shape, int32_t rank, const int64_t *dims,
                                     infd_error *err);

/* Number of elements (1 for a scalar). Fails on negative dims or when the
 * product overflows int64. */
INFD_API infd_status infd_shape_numel(const infd_shape *shape, int64_t *out, infd_error *err);

/* True when ranks and all dims are equal. */
INFD_API bool infd_shape_equal(const infd_shape *a, const infd_shape *b);

/* Writes "[1,3,224,224]" ("[]" for a scalar) into `buf` of `n` bytes,
 * truncating safely; returns `buf`. */
INFD_API char *infd_shape_format(const infd_shape *shape, char *buf, size_t n);

/* Bytes a fixed-size dtype needs for `shape`. Fails for BYTES and INVALID,
 * negative dims, or a size that overflows size_t. */
INFD_API infd_status infd_tensor_nbytes_for(infd_dtype dtype, const infd_shape *shape, size_t *out,
                                            infd_error *err);

/* Makes `t` a borrowing view of `data` (`nbytes` long). For fixed-size dtypes
 * nbytes must equal the shape's byte size; the message says both. */
INFD_API infd_status infd_tensor_init_view(infd_tensor *t, infd_dtype dtype,
                                           const infd_shape *shape, void *data, size_t nbytes,
                                           infd_error *err);

/* Makes `t` own a zeroed, INFD_ALIGNMENT-aligned buffer for a fixed-size
 * dtype and `shape`. Release it with infd_tensor_fini. Fails with
 * OUT_OF_MEMORY, leaving `t` zeroed. */
INFD_API infd_status infd_tensor_alloc(infd_tensor *t, infd_dtype dtype, const infd_shape *shape,
                                       infd_error *err);

/* Frees owned data and zeroes `t`. A no-op on a zeroed tensor. */
INFD_API void infd_tensor_fini(infd_tensor *t);

/* Element count of `t` (its shape's numel; 0 when the shape is invalid). */
INFD_API int64_t infd_tensor_numel(const infd_tensor *t);

#ifdef __cplusplus
}
#endif

#endif /* INFD_INFD_H */
