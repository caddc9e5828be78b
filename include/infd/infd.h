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
 * the tensor descriptor. The second part is the server: repository, models,
 * statistics and asynchronous inference.
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

/* ------------------------------------------------------------------------- */
/* Memory handed out by the API                                              */
/* ------------------------------------------------------------------------- */

/* Frees memory that an infd_* call documents as "free with infd_free"
 * (JSON documents, index arrays). NULL is a no-op. */
INFD_API void infd_free(void *ptr);

/* ------------------------------------------------------------------------- */
/* Server                                                                    */
/* ------------------------------------------------------------------------- */

/*
 * The server owns a model repository (Triton's layout:
 * <repo>/<model>/config.pbtxt and <repo>/<model>/<version>/model.onnx), the
 * loaded models, their schedulers and instance threads. Frontends turn
 * protocol requests into infd_request objects and submit them here; every
 * frontend shares the same schedulers, so HTTP, gRPC and raw requests for a
 * model batch together.
 *
 * Typical use:
 *   infd_server_options o; infd_server_options_init(&o);
 *   o.model_repository = "models";
 *   infd_server_create(&o, &server, &err);          // loads the repository
 *   infd_server_model_acquire(server, "add_sub", -1, &model, &err);
 *   infd_request_create(model, &req, &err);
 *   infd_request_add_input(req, "INPUT0", INFD_DTYPE_FP32, shape, 2, buf, n, &err);
 *   infd_infer_async(req, done, user, &err);        // done() runs on a worker thread
 *   ...                                             // in done(): read outputs,
 *   infd_request_destroy(req); infd_model_release(model);
 *   infd_server_destroy(server);                     // drains, unloads
 */
typedef struct infd_server infd_server;
/* One loaded version of a model; refcounted (acquire/release). */
typedef struct infd_model infd_model;
/* One inference request and, after completion, its response. */
typedef struct infd_request infd_request;

/* Triton's --model-control-mode. */
typedef enum infd_model_control {
    INFD_MODEL_CONTROL_NONE = 0, /* load everything at start; load/unload API refused */
    INFD_MODEL_CONTROL_POLL,     /* as NONE, then rescan every poll interval */
    INFD_MODEL_CONTROL_EXPLICIT  /* load only startup_models; load/unload API allowed */
} infd_model_control;

/* Parses "none", "poll" or "explicit" (INVALID_ARGUMENT otherwise). */
INFD_API infd_status infd_model_control_parse(const char *name, infd_model_control *out,
                                              infd_error *err);

typedef struct infd_server_options {
    const char *model_repository;      /* folder (borrowed for create); required */
    infd_model_control control_mode;   /* default NONE */
    const char *const *startup_models; /* EXPLICIT: names to load at start ("*" = all) */
    int n_startup_models;
    int repository_poll_secs; /* POLL: rescan period; default 15 */
    int n_threads;            /* engine threads per instance; 0: (cores - 1) / instances, >= 1 */
    bool exit_on_error;       /* create fails when a startup model fails; default false */
    const char *server_id;    /* reported by metadata; default "infd" */
    /* The pinned memory pool (infd_pinned_alloc), made when the first model
     * with GPU instances loads; default 1 GiB, 0: none. The HTTP frontend
     * keeps a slab of it (1 MiB, or twice the largest request) per
     * connection that sends large bodies. */
    size_t pinned_pool_bytes;
    /* Shared memory a client may register (INFD_SHM_* bits); default 0:
     * none, as Triton's --allow-client-shm defaults to false. */
    unsigned shared_memory;
} infd_server_options;

/* Defaults as documented on each field. */
INFD_API void infd_server_options_init(infd_server_options *opts);

/* Creates a server and loads the repository per the control mode: each model
 * is read, completed from its ONNX file where config.pbtxt is missing or
 * partial, compiled, warmed up and marked READY. A model that fails stays
 * UNAVAILABLE with its error (see infd_server_repository_index); the server
 * still starts unless opts->exit_on_error. Fails with NOT_FOUND when the
 * repository folder does not exist. Starts the poll thread in POLL mode. */
INFD_API infd_status infd_server_create(const infd_server_options *opts, infd_server **out,
                                        infd_error *err);

/* Stops accepting requests (infer then fails with UNAVAILABLE), waits for
 * every queued and executing request to complete (callbacks run), stops the
 * poll thread. Idempotent; safe from any thread except a completion
 * callback. */
INFD_API void infd_server_drain(infd_server *server);

/* Readiness turns false from now on (a load balancer stops sending), while
 * requests are still accepted until infd_server_drain: the start of a
 * graceful stop (`infd serve --exit-grace-secs`). Idempotent; any thread. */
INFD_API void infd_server_stop_ready(infd_server *server);

/* Drains, unloads every model and frees the server. Models still acquired by
 * the caller must have been released. NULL is a no-op. */
INFD_API void infd_server_destroy(infd_server *server);

/* Liveness: true until drain begins. Readiness: live, every model the
 * control mode loads at start has finished loading (READY or failed), and
 * infd_server_stop_ready was not called. */
INFD_API bool infd_server_is_live(const infd_server *server);
INFD_API bool infd_server_is_ready(const infd_server *server);

/* The server id from the options (static for the server's life). */
INFD_API const char *infd_server_id(const infd_server *server);
INFD_API const char *infd_server_repository(const infd_server *server);
INFD_API infd_model_control infd_server_control_mode(const infd_server *server);

/* ------------------------------------------------------------------------- */
/* Repository                                                                */
/* ------------------------------------------------------------------------- */

typedef enum infd_model_state {
    INFD_MODEL_STATE_UNKNOWN = 0, /* in the repository, never loaded (EXPLICIT mode) */
    INFD_MODEL_STATE_LOADING,
    INFD_MODEL_STATE_READY,
    INFD_MODEL_STATE_UNLOADING,
    INFD_MODEL_STATE_UNAVAILABLE /* unloaded, or failed to load (reason says why) */
} infd_model_state;

/* "UNKNOWN", "LOADING", "READY", "UNLOADING", "UNAVAILABLE" (Triton's). */
INFD_API const char *infd_model_state_name(infd_model_state state);

/* One row of the repository index: a model (version -1 when it has no
 * loaded version) or one version of it. */
typedef struct infd_repository_entry {
    char name[128];
    int64_t version;
    infd_model_state state;
    char reason[512]; /* load error, or "" */
} infd_repository_entry;

/* Lists the repository: every model folder found at the last scan, one row
 * per known version (or one row with version -1). ready_only keeps READY rows.
 * `*out` is an array of `*n` rows sorted by name then version; free it with
 * infd_free. */
INFD_API infd_status infd_server_repository_index(infd_server *server, bool ready_only,
                                                  infd_repository_entry **out, int *n,
                                                  infd_error *err);

/* Loads (or reloads) model `name` from the repository: its versions per the
 * config's version_policy. Blocks until the model is READY or failed; the
 * previous versions keep serving until the new ones are ready. EXPLICIT mode
 * only (UNAVAILABLE otherwise); NOT_FOUND when the folder does not exist;
 * the load error otherwise. */
INFD_API infd_status infd_server_load_model(infd_server *server, const char *name, infd_error *err);

/* Unloads every version of `name`: new requests get UNAVAILABLE, queued and
 * executing ones complete, then the model's memory is released (when the
 * last acquired handle is released). EXPLICIT mode only. */
INFD_API infd_status infd_server_unload_model(infd_server *server, const char *name,
                                              infd_error *err);

/*
 * A forwarder of repository requests (the cluster router's, which passes
 * them on to its workers): infd_server_load_model and
 * infd_server_unload_model call hook(user, name, load, err) first, on the
 * caller's thread, after their control-mode checks. OK: the server goes on
 * with its own repository; an error is returned to the caller as it is.
 * Set it before the frontends start; NULL removes it, once the calls in
 * flight have returned (so the hook's user may then be freed).
 */
typedef infd_status (*infd_repository_hook)(void *user, const char *name, bool load,
                                            infd_error *err);
INFD_API void infd_server_set_repository_hook(infd_server *server, infd_repository_hook hook,
                                              void *user);

/* Rescans the repository now as POLL mode does: loads new models, reloads
 * those whose files changed, unloads removed ones. Any control mode. */
INFD_API infd_status infd_server_poll_repository(infd_server *server, infd_error *err);

/* ------------------------------------------------------------------------- */
/* Models                                                                    */
/* ------------------------------------------------------------------------- */

/* Most inputs/outputs a served model may have. */
#define INFD_MAX_MODEL_IO 32

/* Gets a READY version of `name`: `version` > 0 picks that version, -1 the
 * highest READY one. NOT_FOUND for an unknown model or version, UNAVAILABLE
 * when it is not READY (the message says its state and load error). The
 * handle keeps the version's memory alive until infd_model_release. */
INFD_API infd_status infd_server_model_acquire(infd_server *server, const char *name,
                                               int64_t version, infd_model **out, infd_error *err);
INFD_API void infd_model_retain(infd_model *model);
INFD_API void infd_model_release(infd_model *model);

/* Strings live as long as the handle. */
INFD_API const char *infd_model_name(const infd_model *model);
INFD_API int64_t infd_model_version(const infd_model *model);
/* "onnxruntime_onnx" (the platform a Triton client expects for ONNX). */
INFD_API const char *infd_model_platform(const infd_model *model);
/* 0: the model does not batch (shapes are the full tensor shapes). */
INFD_API int infd_model_max_batch_size(const infd_model *model);
INFD_API bool infd_model_is_ready(const infd_model *model);

/* An input or output as the model config declares it. dims exclude the
 * batch dim: with max_batch_size > 0 the full shape is [-1, dims...] with
 * the leading dim the batch (1..max_batch_size). All dims are >= 0 (infd
 * serves concrete shapes; variable dims must be fixed in config.pbtxt). */
typedef struct infd_model_io {
    const char *name;
    infd_dtype dtype;
    int32_t rank; /* of dims, without the batch dim */
    int64_t dims[INFD_MAX_RANK];
    size_t row_bytes; /* bytes of one batch row (of the whole tensor when not batching) */
} infd_model_io;

INFD_API int infd_model_n_inputs(const infd_model *model);
INFD_API int infd_model_n_outputs(const infd_model *model);
/* i in [0, n); NOT_FOUND otherwise. */
INFD_API infd_status infd_model_input(const infd_model *model, int i, infd_model_io *out);
INFD_API infd_status infd_model_output(const infd_model *model, int i, infd_model_io *out);
/* Index of the input/output called `name`, or -1. */
INFD_API int infd_model_input_index(const infd_model *model, const char *name);
INFD_API int infd_model_output_index(const infd_model *model, const char *name);

/* The complete model config (after completion from the ONNX model) as JSON
 * in Triton's form (protobuf field names, enums as names). `*out` is a
 * NUL-terminated string of `*n` bytes; free it with infd_free. */
INFD_API infd_status infd_model_config_json(const infd_model *model, char **out, size_t *n,
                                            infd_error *err);

/* The same complete config as a serialized protobuf `inference.ModelConfig`
 * (proto/model_config.proto, Triton's field numbers), for protocols that
 * carry it as a message (gRPC's ModelConfigResponse). `*out` holds `*n`
 * bytes; free it with infd_free. OUT_OF_MEMORY is the only error. */
INFD_API infd_status infd_model_config_pb(const infd_model *model, void **out, size_t *n,
                                          infd_error *err);

/* Latency histogram bucket upper bounds for infd_model_stats, in
 * microseconds (Prometheus "le"; the last bucket is +Inf). */
#define INFD_LATENCY_BUCKETS 14
INFD_API const double *infd_latency_bucket_bounds_us(void);

/* Largest batch size whose executions are counted separately. */
#define INFD_STATS_MAX_BATCH 256

/* Statistics of one model version since it loaded (Triton's
 * ModelStatistics). Durations are cumulative nanoseconds. A request counts
 * once when its callback runs; an execution is one engine run over a batch. */
/* Entries of infd_model_stats.memory_usage. */
#define INFD_STATS_MAX_MEMORY 9

/* Memory a model holds on one device (Triton's MemoryUsage). */
typedef struct infd_memory_usage {
    const char *type;   /* "CPU" or "GPU" (static strings) */
    int64_t id;         /* 0 for the CPU; the CUDA ordinal of a GPU */
    uint64_t byte_size; /* its weights there (one copy, shared by every plan) and arenas */
} infd_memory_usage;

typedef struct infd_model_stats {
    uint64_t success_count;     /* requests completed OK */
    uint64_t failure_count;     /* requests completed with an error or rejected at submit */
    uint64_t inference_count;   /* batch rows inferred (a request of 4 rows counts 4) */
    uint64_t execution_count;   /* engine runs */
    uint64_t success_ns;        /* submit -> completion, successful requests */
    uint64_t failure_ns;        /* submit -> completion, failed requests */
    uint64_t queue_ns;          /* submit -> picked into a batch */
    uint64_t compute_input_ns;  /* gathering inputs into the batch */
    uint64_t compute_infer_ns;  /* the engine run */
    uint64_t compute_output_ns; /* scattering outputs to requests */
    uint64_t last_inference_ms; /* Unix time of the last completion, 0 if none */
    uint64_t queue_depth;       /* requests waiting now */
    uint64_t pending_count;     /* requests submitted and not yet completed */
    /* Request latency (submit -> completion) histogram: counts per bucket of
     * infd_latency_bucket_bounds_us (cumulative counts are for the caller). */
    uint64_t latency_buckets[INFD_LATENCY_BUCKETS + 1];
    double latency_p50_us, latency_p90_us, latency_p95_us, latency_p99_us;
    /* batch_exec_count[b]: executions with b rows (b in 1..INFD_STATS_MAX_BATCH;
     * larger batches count at INFD_STATS_MAX_BATCH), and their engine time. */
    uint64_t batch_exec_count[INFD_STATS_MAX_BATCH + 1];
    uint64_t batch_compute_ns[INFD_STATS_MAX_BATCH + 1];
    /* What the model holds since it became READY, per device: the CPU
     * first when any, then each GPU in use. Weights are the model's
     * constants in the form the kernels read (one copy per device however
     * many batch sizes and instances); arenas are the activation memory of
     * every instance's contexts. */
    infd_memory_usage memory_usage[INFD_STATS_MAX_MEMORY];
    int n_memory_usage;
    uint64_t weight_bytes; /* weights, all devices */
    uint64_t arena_bytes;  /* arenas, all devices */
} infd_model_stats;

INFD_API void infd_model_get_stats(const infd_model *model, infd_model_stats *out);

/* ------------------------------------------------------------------------- */
/* Inference                                                                 */
/* ------------------------------------------------------------------------- */

/* Runs on an instance worker thread (or the submitting thread for requests
 * that fail after being accepted) exactly once per accepted request. `status`
 * is the request's outcome; on failure `message` says why (valid during the
 * call). The callback may read outputs and destroy the request; it must not
 * block for long (it delays the instance's next batch). */
typedef void (*infd_infer_callback)(void *user, infd_request *req, infd_status status,
                                    const char *message);

/* Creates an empty request for `model` (retained by the request until it is
 * destroyed). Requests come from a per-model free list: steady-state creation
 * allocates nothing. */
INFD_API infd_status infd_request_create(infd_model *model, infd_request **out, infd_error *err);

/* Frees a request (not while it is in flight). NULL is a no-op. */
INFD_API void infd_request_destroy(infd_request *req);

INFD_API infd_model *infd_request_model(const infd_request *req);

/* The client's request id (copied, at most 127 bytes kept); "" by default. */
INFD_API void infd_request_set_id(infd_request *req, const char *id);
INFD_API const char *infd_request_id(const infd_request *req);

/* Who sent the request: a client key the frontends take from the HTTP
 * header or gRPC metadata INFD_CLIENT_HEADER (copied, at most 63 bytes
 * kept); "" by default. The cluster router's per-client rate limits key on
 * it. */
#define INFD_CLIENT_HEADER "infd-client"
INFD_API void infd_request_set_client(infd_request *req, const char *client);
INFD_API const char *infd_request_client(const infd_request *req);

/* Priority level: 1 is highest, up to the config's priority_levels; 0 uses
 * default_priority_level. INVALID_ARGUMENT past priority_levels. */
INFD_API infd_status infd_request_set_priority(infd_request *req, uint32_t priority,
                                               infd_error *err);

/* Queue timeout: a request still queued this long after submit completes
 * with DEADLINE_EXCEEDED without running. 0 uses the config's
 * default_timeout_microseconds (0 there: no timeout). */
INFD_API void infd_request_set_timeout_us(infd_request *req, uint64_t timeout_us);

/*
 * Sequences (models with sequence_batching in their config, Triton's
 * sequence batcher): every request of such a model names its sequence by a
 * correlation id, a non-zero uint64 or (id_string non-NULL) a non-empty
 * string of at most 127 bytes, and flags its first request
 * INFD_SEQUENCE_START and its last INFD_SEQUENCE_END (both for a sequence
 * of one). The server pins the sequence to a slot whose state persists
 * between its requests. At submit (infd_infer_async): INVALID_ARGUMENT for
 * a request without an id, a START for an id that is active, or a
 * continuation of an id that is not (never started, ended, or released
 * after max_sequence_idle_microseconds without a request). For other
 * models the call is accepted and ignored.
 */
#define INFD_SEQUENCE_START 1u
#define INFD_SEQUENCE_END   2u
INFD_API infd_status infd_request_set_sequence(infd_request *req, uint64_t id,
                                               const char *id_string, uint32_t flags,
                                               infd_error *err);

/* Adds input `name` with a full shape (batch dim first when the model
 * batches) and `nbytes` of row-major data. The data is borrowed, not copied:
 * it must stay valid and unchanged until the completion callback. Checks the
 * name, dtype, shape (dims match the config; batch in 1..max_batch_size) and
 * byte size, with messages naming the input and expected vs actual. */
INFD_API infd_status infd_request_add_input(infd_request *req, const char *name, infd_dtype dtype,
                                            const int64_t *shape, int rank, const void *data,
                                            size_t nbytes, infd_error *err);

/* One piece of an input's data (see infd_request_add_input_segments). */
typedef struct infd_data_segment {
    const void *data;
    size_t nbytes;
} infd_data_segment;

/* As infd_request_add_input, with the data in `n_segments` pieces that
 * follow one another in the tensor's row-major order: an HTTP body as it
 * sits in the connection's read buffers, say. The batcher gathers the pieces
 * straight into the batch (a GPU instance: into its pinned staging), so the
 * caller need not make them contiguous first. The pieces and the `segments`
 * array are borrowed, like infd_request_add_input's data, until the
 * completion callback. Their sizes must add up to the input's bytes; empty
 * pieces are allowed. */
INFD_API infd_status infd_request_add_input_segments(infd_request *req, const char *name,
                                                     infd_dtype dtype, const int64_t *shape,
                                                     int rank, const infd_data_segment *segments,
                                                     int n_segments, infd_error *err);

/* As infd_request_add_input, with the data in memory of CUDA device
 * `device` (infd_engine_device_alloc, or infd_engine_ipc_open: Triton's
 * CUDA shared memory). A model whose instances all run on GPUs reads it
 * where it lies (a device-to-device copy into the batch, on the instance's
 * stream); any other model (CPU instances, plugin kinds, BYTES inputs)
 * gets a copy to host memory of the request's own, made now. The memory is
 * borrowed as infd_request_add_input's is. */
INFD_API infd_status infd_request_add_input_device(infd_request *req, const char *name,
                                                   infd_dtype dtype, const int64_t *shape, int rank,
                                                   const void *dev, size_t nbytes, int device,
                                                   infd_error *err);

/* The pinned memory pool (Triton's --pinned-memory-pool-byte-size): one
 * region of page-locked host memory per process, made by the first server
 * that loads a model with GPU instances (infd_server_options.
 * pinned_pool_bytes; 0: none). The batcher copies an input piece
 * (infd_request_add_input_segments) that lies in the pool to a GPU
 * instance's device straight from where it lies, instead of gathering it
 * into the instance's staging first; a frontend that receives request
 * bodies into the pool (the HTTP frontend does) saves that pass over the
 * bytes. Thread-safe; the region lives until the process ends. */

/* `nbytes` from the pool (in 64 KiB steps from its page-aligned start), or NULL when there is no
 * pool or no room in it: the caller then uses ordinary memory. */
INFD_API void *infd_pinned_alloc(size_t nbytes);
/* Gives back memory from infd_pinned_alloc; false (nothing done) for a
 * pointer outside the pool, which the caller frees its own way. */
INFD_API bool infd_pinned_free(void *ptr);
/* True when [ptr, ptr + nbytes) lies in the pool. Lock-free. */
INFD_API bool infd_pinned_contains(const void *ptr, size_t nbytes);
/* The allocation from the pool that holds `ptr`: its start and size. False
 * when `ptr` is in no live allocation. */
INFD_API bool infd_pinned_find(const void *ptr, void **start, size_t *nbytes);

/* Asks for output `name` only (default: every output). */
INFD_API infd_status infd_request_add_output(infd_request *req, const char *name, infd_error *err);

/*
 * Asks for output `name` as Triton's classification extension has it: the
 * output's `class_count` (>= 1) largest values per batch row, best first,
 * instead of the tensor. The result is BYTES, [rows, k] (or [k] when the
 * model does not batch), k = min(class_count, classes per row), and each
 * element is "value:index" or "value:index:label", the label being line
 * `index` of the output's label_filename in the model folder. Ties keep the
 * lower index first. A BYTES or BOOL output cannot be classified
 * (INVALID_ARGUMENT here).
 */
INFD_API infd_status infd_request_add_output_classification(infd_request *req, const char *name,
                                                            int class_count, infd_error *err);

/* Gives output `name` a caller buffer (borrowed until the callback) so the
 * result is written there instead of into the request's own memory
 * (zero-copy to a socket buffer or a mapped file). `capacity` must be at
 * least the output's bytes for the request's batch, checked at submit. */
INFD_API infd_status infd_request_set_output_buffer(infd_request *req, const char *name, void *data,
                                                    size_t capacity, infd_error *err);

/* As infd_request_set_output_buffer, with `dev` in memory of CUDA device
 * `device`: the output is copied there when the request completes (and
 * infd_request_output then gives `dev` as its data, which the host must
 * not read). A result larger than `capacity` fails the request with
 * INVALID_ARGUMENT. */
INFD_API infd_status infd_request_set_output_device(infd_request *req, const char *name, void *dev,
                                                    size_t capacity, int device, infd_error *err);

/*
 * Shared memory (Triton's shared-memory extension). A client on the same
 * host puts tensors in a POSIX shared memory object it made (shm_open),
 * registers a region of it under a name, and a request then names the
 * region, an offset and a byte size instead of carrying the bytes; outputs
 * are written there the same way. Regions are the server's, shared by its
 * frontends, and off unless infd_server_options.shared_memory enables them.
 * CUDA regions (INFD_SHM_CUDA) are device memory another process shared by
 * a CUDA IPC handle.
 * A region unregistered while requests use it leaves the table at once and
 * is unmapped when the last of them lets go; all are unmapped when the
 * server is destroyed. Messages name a region, never its key.
 */
#define INFD_SHM_SYSTEM            1u /* POSIX shared memory objects */
#define INFD_SHM_CUDA              2u /* CUDA device memory shared by an IPC handle */
#define INFD_SHM_CUDA_HANDLE_BYTES 64 /* a cudaIpcMemHandle_t (engine.h: INFD_IPC_HANDLE_BYTES) */
#define INFD_SHM_NAME_BYTES        128
#define INFD_SHM_KEY_BYTES         256

typedef struct infd_shm_region infd_shm_region;

typedef struct infd_shm_info {
    const char *name;
    const char *key;    /* the POSIX object's name, "/..." */
    uint64_t offset;    /* of the region in the object */
    uint64_t byte_size; /* of the region */
} infd_shm_info;

/* A CUDA region (Triton's CUDA shared-memory extension). */
typedef struct infd_cuda_shm_info {
    const char *name;
    int device_id;      /* the CUDA device the memory is on */
    uint64_t byte_size; /* of the region */
} infd_cuda_shm_info;

/* The INFD_SHM_* kinds the server takes. */
INFD_API unsigned infd_server_shared_memory(const infd_server *server);

/* Registers region `name` (1 to 127 printable bytes, no '/') as bytes
 * [offset, offset + byte_size) of the POSIX shared memory object `key`
 * ('/' then 1 to 254 bytes without '/'), mapped now for reading and
 * writing. INVALID_ARGUMENT: shared memory off, a bad name or key, the name
 * registered already, a zero size, a sum that overflows or lies past the
 * object's end; NOT_FOUND: no such object. */
INFD_API infd_status infd_server_shm_register(infd_server *server, const char *name,
                                              const char *key, uint64_t offset, uint64_t byte_size,
                                              infd_error *err);

/* Unregisters region `name`, or every region for NULL or "".
 * INVALID_ARGUMENT when `name` is not registered (or shared memory off). */
INFD_API infd_status infd_server_shm_unregister(infd_server *server, const char *name,
                                                infd_error *err);

/* Calls fn(user, region) for region `name`, or for every region for NULL or
 * "" (under the table's lock: fn must not call the other shm functions).
 * INVALID_ARGUMENT when `name` is not registered (or shared memory off). */
INFD_API infd_status infd_server_shm_status(infd_server *server, const char *name,
                                            void (*fn)(void *user, const infd_shm_info *region),
                                            void *user, infd_error *err);

/* Registers CUDA region `name` (the same names as system regions, one
 * namespace with them): the first `byte_size` bytes of the device memory
 * another process exported with cudaIpcGetMemHandle (`raw_handle`, the
 * handle's INFD_SHM_CUDA_HANDLE_BYTES bytes) on CUDA device `device_id`,
 * opened now (infd_engine_ipc_open). INVALID_ARGUMENT: CUDA shared memory
 * off, a bad name, handle or device, the name registered already, a zero
 * size or one past the exported allocation; UNAVAILABLE: this build or
 * machine has no CUDA device. */
INFD_API infd_status infd_server_cuda_shm_register(infd_server *server, const char *name,
                                                   const void *raw_handle, size_t handle_bytes,
                                                   int device_id, uint64_t byte_size,
                                                   infd_error *err);
/* As infd_server_shm_unregister and _status, for CUDA regions. */
INFD_API infd_status infd_server_cuda_shm_unregister(infd_server *server, const char *name,
                                                     infd_error *err);
INFD_API infd_status infd_server_cuda_shm_status(infd_server *server, const char *name,
                                                 void (*fn)(void *user,
                                                            const infd_cuda_shm_info *region),
                                                 void *user, infd_error *err);

/* Bytes [offset, offset + byte_size) of region `name` (system or CUDA) for
 * a request: *data points at them until infd_shm_region_release(*region).
 * For a CUDA region *data is device memory (infd_shm_region_device says
 * which device): give it to infd_request_add_input_device and
 * infd_request_set_output_device, never read it on the host.
 * INVALID_ARGUMENT when the region is not registered (or shared memory
 * off) or the span does not fit in it (checked without overflow). */
INFD_API infd_status infd_server_shm_acquire(infd_server *server, const char *name, uint64_t offset,
                                             uint64_t byte_size, infd_shm_region **region,
                                             void **data, infd_error *err);
INFD_API void infd_shm_region_release(infd_shm_region *region);
/* -1 for a system region, else the CUDA device a CUDA region is on. */
INFD_API int infd_shm_region_device(const infd_shm_region *region);

/* True when the model's outputs arrive in memory of their own and are lent
 * to the request (the cluster router's remote models): a buffer given with
 * infd_request_set_output_buffer then costs a copy, and a caller that can
 * read the outputs where they lie (infd_request_output, valid until the
 * request is destroyed) does better without one. */
INFD_API bool infd_model_lends_outputs(const infd_model *model);

/* Submits the request to its model's scheduler. On OK the callback runs
 * exactly once, later; on an error it never runs: INVALID_ARGUMENT (missing
 * input, inputs with different batch sizes), UNAVAILABLE (model unloading,
 * server draining), RESOURCE_EXHAUSTED (queue full: max_queue_size). */
INFD_API infd_status infd_infer_async(infd_request *req, infd_infer_callback callback, void *user,
                                      infd_error *err);

/* Submits and waits for completion; returns the request's status. For
 * embedders and tests. */
INFD_API infd_status infd_infer(infd_request *req, infd_error *err);

/* After completion: the outputs produced (the requested ones, in request
 * order, or all in model order). `out->data` points into the request's memory
 * (or the caller's buffer) and is valid until the request is destroyed. */
INFD_API int infd_request_n_outputs(const infd_request *req);
INFD_API infd_status infd_request_output(const infd_request *req, int i, const char **name,
                                         infd_tensor *out);

/* Time the request spent queued and computing (ns), for frontends' logs. */
INFD_API void infd_request_timing(const infd_request *req, uint64_t *queue_ns,
                                  uint64_t *compute_ns);

#ifdef __cplusplus
}
#endif

#endif /* INFD_INFD_H */
