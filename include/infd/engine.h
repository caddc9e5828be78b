/*
 * engine.h - the public API of infd's inference engine.
 *
 * The engine turns an ONNX model into a plan for one backend (CPU through
 * oneDNN and our own kernels, or CUDA) and runs it through per-thread
 * contexts:
 *
 *   infd_plan_options opts;
 *   infd_plan_options_init(&opts);
 *   opts.batch = 8;
 *   infd_plan_create("resnet50.onnx", &opts, &plan, &err);   // load, optimize, compile
 *   infd_context_create(plan, &ctx, &err);                   // one per executing thread
 *   infd_plan_run(plan, ctx, inputs, 1, outputs, 1, &err);   // allocation-free
 *
 * A plan is compiled for concrete input shapes: symbolic dims are bound when
 * it is created (the first dim of an input to `batch`, others from
 * `shapes`). A plan is immutable and shared by its contexts; a context holds
 * everything mutable (the activation arena, scratch, threads) and is used by
 * one thread at a time. It includes only infd.h.
 */
#ifndef INFD_ENGINE_H
#define INFD_ENGINE_H

#include "infd/infd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum infd_device_kind {
    INFD_DEVICE_CPU = 0,
    INFD_DEVICE_CUDA = 1,
} infd_device_kind;

/* True when the backend for `kind` was compiled into this build (CUDA: nvcc
 * was found at configure time). */
INFD_API bool infd_engine_has_backend(infd_device_kind kind);

/* Devices of `kind` usable now: 1 for the CPU; for CUDA the number of GPUs
 * the driver reports, 0 when the build has no CUDA, there is no driver or no
 * GPU (the reason goes to `err` as UNAVAILABLE, with the count still 0).
 * Cost: the first CUDA call initialises the driver (tens of ms). */
INFD_API int infd_engine_device_count(infd_device_kind kind, infd_error *err);

/* Writes a one-line description of device `index` of `kind` ("NVIDIA H100 80GB
 * HBM3, sm_90, 79.1 GiB" or the CPU's model name) into `buf`. */
INFD_API infd_status infd_engine_device_describe(infd_device_kind kind, int index, char *buf,
                                                 size_t n, infd_error *err);

/* `bytes` of page-locked host memory from the backend of device `kind`
 * (CUDA: cudaMallocHost), which that device's copies read and write without
 * staging it first; see infd_context_set_input_pieces. NULL with
 * UNAVAILABLE when `kind` has no device backend in this build or no
 * device, OUT_OF_MEMORY when the driver refuses. Slow (milliseconds per
 * call): allocate once, at start-up. Free with infd_engine_host_free. */
INFD_API void *infd_engine_host_alloc(infd_device_kind kind, size_t bytes, infd_error *err);
INFD_API void infd_engine_host_free(infd_device_kind kind, void *ptr);

/* `bytes` of memory on device `index` of `kind` (CUDA: cudaMalloc on that
 * GPU), for inputs that are already on the device when a run starts
 * (infd_context_set_device_input): what Triton's CUDA shared memory gives
 * a client. NULL with UNAVAILABLE when `kind` has no device backend or no
 * such device, OUT_OF_MEMORY when the driver refuses; INVALID_ARGUMENT
 * for a device that does not exist. Slow: allocate once. Free with
 * infd_engine_device_free (same kind and index). */
INFD_API void *infd_engine_device_alloc(infd_device_kind kind, int index, size_t bytes,
                                        infd_error *err);
INFD_API void infd_engine_device_free(infd_device_kind kind, int index, void *ptr);

/* A synchronous copy of `bytes` between host memory and memory from
 * infd_engine_device_alloc(kind, index): to the device when `to_device`,
 * else from it. It waits for all work queued on that device (it reports
 * the copy's errors that way): for setting up, not for a run's path. */
INFD_API infd_status infd_engine_device_copy(infd_device_kind kind, int index, void *dst,
                                             const void *src, size_t bytes, bool to_device,
                                             infd_error *err);

/* Memory shared between processes (CUDA IPC; what Triton's CUDA shared
 * memory is built on). A handle is INFD_IPC_HANDLE_BYTES opaque bytes (a
 * cudaIpcMemHandle_t).
 *   infd_engine_ipc_handle: the handle of memory from
 *     infd_engine_device_alloc(kind, index), for another process;
 *   infd_engine_ipc_open: that memory mapped into this process (not the
 *     process that exported it: the driver refuses that), with in *bytes
 *     the size of the allocation from the returned pointer on; NULL with the
 *     reason otherwise (INVALID_ARGUMENT for a handle the driver rejects or
 *     a device that does not exist, UNAVAILABLE without a device backend);
 *     give it back with infd_engine_ipc_close.
 * The calling thread's current device is kept. */
#define INFD_IPC_HANDLE_BYTES 64
INFD_API infd_status infd_engine_ipc_handle(infd_device_kind kind, int index, const void *dev,
                                            void *handle, size_t handle_bytes, infd_error *err);
INFD_API void *infd_engine_ipc_open(infd_device_kind kind, int index, const void *handle,
                                    size_t handle_bytes, size_t *bytes, infd_error *err);
INFD_API void infd_engine_ipc_close(infd_device_kind kind, int index, void *ptr);

/* Copies `bytes` between any two of host memory and memory of device
 * `index` (or memory from infd_engine_ipc_open), the direction told by the
 * pointers, and waits for that copy only: unlike infd_engine_device_copy it
 * does not wait for the device's other work, so it may run beside a
 * model's runs. The calling thread's current device is kept. */
INFD_API infd_status infd_engine_memcpy(infd_device_kind kind, int index, void *dst,
                                        const void *src, size_t bytes, infd_error *err);
/* infd_engine_memcpy in two steps, for many copies and one wait: each
 * _async queues a copy on the calling thread's own stream of device
 * `index` (both sides must stay as they are until the wait), and _wait
 * waits for every copy that thread queued on that device. */
INFD_API infd_status infd_engine_memcpy_async(infd_device_kind kind, int index, void *dst,
                                              const void *src, size_t bytes, infd_error *err);
INFD_API infd_status infd_engine_memcpy_wait(infd_device_kind kind, int index, infd_error *err);

/* ------------------------------------------------------------------------- */
/* Plans and contexts                                                        */
/* ------------------------------------------------------------------------- */

typedef struct infd_plan infd_plan;
typedef struct infd_context infd_context;

/* A concrete shape for one graph input, by name. */
typedef struct infd_input_shape {
    const char *name;
    infd_shape shape;
} infd_input_shape;

/* An input bound to a value when the plan is built (a "shape input", as
 * TensorRT calls them: a Reshape target, Resize scales, Slice bounds fed as
 * graph inputs). The plan folds everything that depends on it; runs must
 * feed the same value. */
typedef struct infd_input_value {
    const char *name;
    infd_tensor value; /* borrowed for the call; the plan keeps a copy */
} infd_input_value;

/* The arithmetic kernels use inside a plan. Graph inputs and outputs, and
 * constants folded at compile time, stay FP32 either way. */
typedef enum infd_precision {
    INFD_PRECISION_FP32 = 0, /* everything in FP32 (the default); on CUDA strict: no TF32 */
    INFD_PRECISION_BF16 = 1, /* see infd_plan_options.precision */
    INFD_PRECISION_FP16 = 2, /* CUDA only; see infd_plan_options.precision */
    INFD_PRECISION_TF32 = 3, /* CUDA only; see infd_plan_options.precision */
} infd_precision;

/* "fp32", "bf16", "fp16" or "tf32" (anything else reads "fp32"). */
INFD_API const char *infd_precision_name(infd_precision precision);

/* The precision infd_precision_name calls `name` (any case); false, *out
 * untouched, for anything else (NULL included). */
INFD_API bool infd_precision_parse(const char *name, infd_precision *out);

typedef struct infd_plan_options {
    /* INFD_DEVICE_CPU, or INFD_DEVICE_CUDA: every kernel on GPU
     * device_index (FP32; an op the CUDA backend lacks fails the build,
     * naming it; no usable GPU fails with UNAVAILABLE "no usable CUDA
     * device: ..."). Inputs and outputs of infd_plan_run stay host memory
     * either way. */
    infd_device_kind device;
    /* Which device of that kind: the CUDA ordinal (as CUDA_VISIBLE_DEVICES
     * numbers the GPUs); default 0. Everything of the plan lives there: the
     * compile, the weights, and each context's arena, stream and pinned
     * staging. Every call on the plan or its contexts (create, run,
     * destroy) makes that device current on the calling thread first
     * (cudaSetDevice, a thread-local switch), so contexts of plans on
     * different GPUs may run on one thread in turn. A GPU that does not
     * exist is INVALID_ARGUMENT "GPU 3 does not exist (this machine has
     * 1)"; the CPU backend has device 0 only. */
    int device_index;
    int n_threads;                  /* threads per context, caller included; 0: all cores */
    int max_contexts;               /* contexts that may run at once; 0: 4 */
    int64_t batch;                  /* value for a symbolic first dim of an input; 0: 1 */
    const infd_input_shape *shapes; /* explicit shapes for inputs (borrowed for the call) */
    int n_shapes;
    const infd_input_value *values; /* inputs bound to values (borrowed for the call) */
    int n_values;
    /* INFD_PRECISION_BF16 (opt-in, like TensorRT's --bf16). CPU: Conv and
     * ConvTranspose with constant weights multiply in BF16 (weights
     * converted once at compile time, inputs rounded to BF16) and
     * accumulate in FP32 (Gemm and MatMul stay FP32 for now); activations
     * passed between oneDNN kernels in blocked layouts are stored as BF16,
     * so results differ from FP32 by about 1% of an output's magnitude.
     * infd_plan_create fails with UNAVAILABLE when the CPU has no BF16
     * instructions (AVX512-BF16 or AMX) rather than falling back to FP32.
     * CUDA: as FP16 below, in BF16. INFD_PRECISION_FP16 (CUDA plans only;
     * UNIMPLEMENTED on the CPU): Conv with constant weights multiplies in
     * FP16 on tensor cores with FP32 accumulation, and 4-D activations
     * between convolutions, pools, residual Adds and Concats stay FP16
     * NHWC (converted at the plan's edges), so results differ from FP32 by
     * about 1e-3 of an output's magnitude (up to 4e-2 on deep
     * trained models). Other kernels, the IR, graph inputs and outputs stay
     * FP32 on both backends. INFD_PRECISION_TF32 (CUDA plans only;
     * UNIMPLEMENTED on the CPU, which has no TF32): every tensor stays
     * FP32, but Conv and ConvTranspose let cuDNN use TF32 tensor cores
     * (CUDNN_TENSOR_OP_MATH) and Gemm/MatMul compute in
     * CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to 10 mantissa bits,
     * FP32 accumulation, so results differ from FP32 by around 1e-3 of an
     * output's magnitude (tested to 1e-2). Plain FP32 on CUDA never uses
     * TF32 (CUDNN_FMA_MATH, CUBLAS_COMPUTE_32F). */
    infd_precision precision;
    /* Outputs the plan reduces to argmax indices before they leave it
     * (borrowed for the call): see infd_argmax_output. */
    const struct infd_argmax_output *argmax;
    int n_argmax;
} infd_plan_options;

/* Most segments one argmax output has. */
#define INFD_MAX_ARGMAX_SEGMENTS 4

/*
 * An output reduced to argmax indices inside the plan. Graph output
 * `output` (FP32, last axis of length N) becomes INT64 [..., n_segments],
 * keeping its name: element k is the index, counted from starts[k], of
 * the largest value of the last axis in [starts[k], ends[k]) (the first
 * on ties; a NaN never wins). 0 <= starts[k] < ends[k] <= N. A
 * transducer's joint (speech) then hands back its token and duration
 * indices instead of thousands of logits a step; on a GPU only the
 * indices cross to the host. INVALID_ARGUMENT at build for a name that
 * is not a graph output, or a segment outside the axis.
 */
typedef struct infd_argmax_output {
    const char *output;
    int n_segments; /* 1..INFD_MAX_ARGMAX_SEGMENTS */
    int64_t starts[INFD_MAX_ARGMAX_SEGMENTS];
    int64_t ends[INFD_MAX_ARGMAX_SEGMENTS];
} infd_argmax_output;

/* Defaults: CPU (device 0), all cores, 4 contexts, batch 1, no explicit shapes, FP32. */
INFD_API void infd_plan_options_init(infd_plan_options *opts);

/* Loads the ONNX model at `path`, optimizes it and compiles it for
 * `opts->device` with concrete input shapes. Errors name the file and the
 * node or input at fault: NOT_FOUND / IO (file), INVALID_ARGUMENT (malformed
 * model, bad shapes), UNIMPLEMENTED (an operator or attribute infd does not
 * support, named with its node), UNAVAILABLE (device), OUT_OF_MEMORY.
 * Cost: the load plus kernel compilation (about a second for ResNet-50).
 *
 * A plan file (`infd build`, infd_plan_builder; the file starts with
 * "INFDPLAN") is loaded instead of an ONNX model: its fingerprint must
 * match this process (infd version, backend and, for GPU plans or plans
 * holding tuning records, the device description), else INVALID_ARGUMENT
 * saying what it was built for and "rebuild it with infd build". The
 * input shapes, bound values, device and precision come from the file:
 * opts->shapes and opts->values are ignored, opts->device and
 * opts->precision must be the defaults (CPU, FP32: "as built") or the
 * file's, and opts->batch must be one of the batch sizes built (0: the
 * smallest), else INVALID_ARGUMENT listing them. n_threads and
 * max_contexts are taken from opts. Kernels are compiled with the stored
 * tuning records, so they skip tuning (infd_plan_stats.n_from_cache); a
 * truncated or corrupted file is INVALID_ARGUMENT naming the byte offset. */
INFD_API infd_status infd_plan_create(const char *path, const infd_plan_options *opts,
                                      infd_plan **out, infd_error *err);

/* As infd_plan_create for a model held in memory (`n` bytes at `data`,
 * borrowed for the call); `name` names it in messages. External data files
 * are refused. */
INFD_API infd_status infd_plan_create_from_memory(const void *data, size_t n, const char *name,
                                                  const infd_plan_options *opts, infd_plan **out,
                                                  infd_error *err);

/* Frees a plan. Its contexts must have been destroyed. NULL is a no-op. */
INFD_API void infd_plan_destroy(infd_plan *plan);

/* ------------------------------------------------------------------------- */
/* Shared weights: many plans of one model, one copy of its constants        */
/* ------------------------------------------------------------------------- */

/* A loaded model from which plans are built for other shapes (batch sizes,
 * audio lengths), devices and precisions without loading it again. Every
 * plan built from one infd_weights shares one copy of each constant and of
 * what each backend makes of it (oneDNN's reordered weights, the CUDA
 * backend's device and FP16 copies): a plan holds only its kernels and
 * what differs, and its contexts only their arenas. A form a plan needs
 * that another already made is taken, not made again. How it works:
 * docs/ENGINE.md, "Shared weights". */
typedef struct infd_weights infd_weights;

/* Loads the ONNX model at `path` (external data files included). Errors:
 * NOT_FOUND / IO (file), INVALID_ARGUMENT (a malformed model, or a plan
 * file: those load with infd_plan_create), OUT_OF_MEMORY. Cost: the load
 * (reading, parsing, copying the initializers). */
INFD_API infd_status infd_weights_create(const char *path, infd_weights **out, infd_error *err);

/* As infd_weights_create for a model held in memory (`n` bytes at `data`,
 * borrowed for the call); `name` names it in messages. */
INFD_API infd_status infd_weights_create_from_memory(const void *data, size_t n, const char *name,
                                                     infd_weights **out, infd_error *err);

/* Drops the caller's reference. Plans built from `w` keep what they use
 * (and `w` itself, internally) until they are destroyed. NULL is a no-op. */
INFD_API void infd_weights_destroy(infd_weights *w);

/* A plan of the model in `w` built with `opts`, as infd_plan_create of
 * the same file with the same options would build it (same errors), sharing
 * constants with every other plan of `w`. Thread-safe: plans of one `w` may
 * be built on several threads at once; a form two of them need is made by
 * one while the other waits for it. */
INFD_API infd_status infd_plan_create_from_weights(infd_weights *w, const infd_plan_options *opts,
                                                   infd_plan **out, infd_error *err);

/* A graph input of the model as declared, before any shape is given: a
 * symbolic or unknown dim is -1 (rank -1: no declared shape). What a
 * caller needs to name every input's shape (a speech decoder's states are
 * [layers, batch, hidden] with a symbolic batch in dim 1). */
typedef struct infd_graph_input {
    char name[256]; /* truncated past 255 bytes */
    infd_dtype dtype;
    infd_shape shape;
} infd_graph_input;

/* The model's graph inputs (constants excluded), recorded when it was
 * loaded: neither call reads a trimmed model again. */
INFD_API int infd_weights_n_inputs(const infd_weights *w);
/* Input i in [0, infd_weights_n_inputs); NOT_FOUND otherwise. */
INFD_API infd_status infd_weights_input(const infd_weights *w, int i, infd_graph_input *out,
                                        infd_error *err);
/* The value of the model's metadata_props entry `key` (the first, when
 * there are several), or NULL when it has none; valid while w lives. */
INFD_API const char *infd_weights_metadata(const infd_weights *w, const char *key);

/* Frees the model as loaded (its initializers): call it once the plans
 * needed now are built, and only what they hold stays in memory. A plan
 * built later loads the model from its file again (the file must still be
 * there) and still reuses every form the living plans hold. Weights made
 * from memory keep their model: trim does nothing to them. */
INFD_API void infd_weights_trim(infd_weights *w);

/* GPUs whose shared bytes infd_weights_stats counts one by one. */
#define INFD_WEIGHTS_MAX_GPUS 16

typedef struct infd_weights_stats {
    size_t model_bytes;                      /* constants of the model as loaded; 0 once trimmed */
    size_t host_bytes;                       /* shared constants and forms in host memory */
    size_t device_bytes;                     /* shared forms in device memory, all devices */
    size_t gpu_bytes[INFD_WEIGHTS_MAX_GPUS]; /* of those, on GPU i */
    int n_forms;                             /* shared forms alive */
    int n_plans;                             /* plans alive built from w */
    uint64_t n_reused;                       /* times a plan took a form instead of making it */
} infd_weights_stats;

/* A snapshot of what `w` holds. Thread-safe. */
INFD_API void infd_weights_get_stats(const infd_weights *w, infd_weights_stats *out);

/* The weights `plan` was built from (infd_plan_create makes ones of its
 * own), borrowed: valid while the plan lives. For their statistics. */
INFD_API const infd_weights *infd_plan_weights(const infd_plan *plan);

/* An input or output of a plan: its name (valid while the plan lives),
 * dtype, concrete shape and byte size. */
typedef struct infd_tensor_info {
    const char *name;
    infd_dtype dtype;
    infd_shape shape;
    size_t nbytes;
} infd_tensor_info;

INFD_API int infd_plan_n_inputs(const infd_plan *plan);
INFD_API int infd_plan_n_outputs(const infd_plan *plan);
/* Index i in [0, n); returns NOT_FOUND otherwise. */
INFD_API infd_status infd_plan_input(const infd_plan *plan, int i, infd_tensor_info *out);
INFD_API infd_status infd_plan_output(const infd_plan *plan, int i, infd_tensor_info *out);

/* Statistics of a compiled plan, for logs and benchmarks. */
typedef struct infd_plan_stats {
    int n_nodes_model;   /* nodes in the ONNX graph */
    int n_kernels;       /* kernels left after folding and fusion */
    int n_folded;        /* nodes evaluated at compile time */
    int n_fused;         /* nodes merged into others (BatchNorm, activations, residual Add) */
    int n_opaque;        /* intermediates kept in a backend layout (oneDNN blocked) */
    size_t arena_bytes;  /* activation memory per context */
    size_t weight_bytes; /* constant data held by the plan */
    double compile_ms;   /* load + optimize + compile */
    /* Tuning (plan files): kernels that chose something by tuning (timing
     * cuDNN's algorithms, say) while this plan was compiled, and kernels
     * that took the record a plan file kept instead (n_tuned is then 0
     * unless a record was refused: another library version, say). Their
     * sum is the records `infd build` keeps; both 0 on the CPU backend,
     * which tunes nothing. */
    int n_tuned;
    int n_from_cache;
    /* Leading kernels that run image by image (CPU plans for a batch > 1
     * whose first layers have large activations; see docs/ENGINE.md). */
    int n_image_kernels;
} infd_plan_stats;

INFD_API void infd_plan_get_stats(const infd_plan *plan, infd_plan_stats *out);

/* ------------------------------------------------------------------------- */
/* Plan files (`infd build`; docs/ENGINE.md, "Plan files")                   */
/* ------------------------------------------------------------------------- */

/* A plan file holds the ONNX model, the options it was built with and, per
 * batch size built, the tuning record of every kernel (what cuDNN's timing
 * chose, say): loading it with infd_plan_create skips the tuning, as a
 * TensorRT engine file does. It is tied to the infd version and the device
 * it was built on. */
typedef struct infd_plan_builder infd_plan_builder;

/* Most batch sizes one plan file holds. */
#define INFD_PLAN_FILE_MAX_BATCHES 32

/* The batch sizes a server compiles for `max_batch` (>= 1), besides its
 * dynamic batcher's preferred sizes: the powers of two below it, then
 * max_batch itself, ascending. Writes at most `cap`
 * into `out` and returns how many there are (0 when max_batch < 1). */
INFD_API int infd_plan_batch_sizes(int64_t max_batch, int64_t *out, int cap);

/* Starts a plan file for the ONNX model at `path` (read into memory now;
 * external data files are refused) built with `opts` (copied: shapes and
 * bound values included; opts->batch is ignored, see _add). On success
 * `*out` is a new builder (infd_plan_builder_destroy). Errors: NOT_FOUND /
 * IO (file), INVALID_ARGUMENT (a plan file, not a model), OUT_OF_MEMORY. */
INFD_API infd_status infd_plan_builder_create(const char *path, const infd_plan_options *opts,
                                              infd_plan_builder **out, infd_error *err);

/* Compiles the model for batch size `batch` (>= 1; each at most once, up to
 * INFD_PLAN_FILE_MAX_BATCHES) with the builder's options, keeps every
 * kernel's tuning record and frees the plan. `stats` (nullable) gets the
 * plan's statistics (n_tuned: the records kept; compile_ms: the build
 * time). Errors: those of infd_plan_create, INVALID_ARGUMENT for a bad or
 * repeated batch. Cost: a full compile, tuning included. */
INFD_API infd_status infd_plan_builder_add(infd_plan_builder *b, int64_t batch,
                                           infd_plan_stats *stats, infd_error *err);

/* Writes the plan file to `path` atomically (a temporary file in the same
 * folder, then rename): readers see the old file or the new one. Needs at
 * least one batch added. Errors: IO naming the file, OUT_OF_MEMORY. */
INFD_API infd_status infd_plan_builder_write(infd_plan_builder *b, const char *path,
                                             infd_error *err);

/* Frees a builder. NULL is a no-op. */
INFD_API void infd_plan_builder_destroy(infd_plan_builder *b);

/* What a plan file says about itself (strings NUL-terminated, cut to fit). */
typedef struct infd_plan_file_info {
    char infd_version[64]; /* infd_version() of the build */
    char infd_git[64];     /* infd_version_git() of the build */
    char backend[32];      /* "cpu", "cuda" */
    char device[256];      /* infd_engine_device_describe() of the GPU built for */
    infd_device_kind device_kind;
    infd_precision precision;
    int n_batches; /* batch sizes built, ascending */
    int64_t batches[INFD_PLAN_FILE_MAX_BATCHES];
    int n_kernels;        /* kernels per plan, of the first batch size */
    int n_records;        /* non-empty tuning records, all batch sizes */
    char model_name[256]; /* the model's file name when built */
    uint64_t model_bytes; /* bytes of ONNX model embedded */
    uint64_t model_hash;  /* a 64-bit hash of those bytes */
} infd_plan_file_info;

/* True when the file at `path` starts with a plan file's magic ("INFDPLAN"). */
INFD_API bool infd_plan_file_is(const char *path);

/* Reads and checks a plan file (structure, every length, the checksum) and
 * fills `out`, without checking it against this process or compiling
 * anything. Errors: NOT_FOUND / IO (file), INVALID_ARGUMENT naming the
 * byte offset of what is wrong. */
INFD_API infd_status infd_plan_file_read_info(const char *path, infd_plan_file_info *out,
                                              infd_error *err);

/* A context for running `plan` on one thread at a time: allocates the
 * activation arena and starts opts.n_threads - 1 helper threads. Fails with
 * RESOURCE_EXHAUSTED when max_contexts contexts exist. */
INFD_API infd_status infd_context_create(infd_plan *plan, infd_context **out, infd_error *err);
INFD_API void infd_context_destroy(infd_context *ctx);

/* Runs the plan. `inputs` are in plan input order, each with the plan's
 * dtype and shape (INVALID_ARGUMENT naming the input otherwise), and bound
 * inputs (opts.values) with the value they were bound to; their data is
 * only read. `outputs` are in plan output order with caller-provided data
 * of at least the output's nbytes; dtype and shape are set by the call.
 * Allocation-free and thread-safe across contexts of one plan. */
INFD_API infd_status infd_plan_run(const infd_plan *plan, infd_context *ctx,
                                   const infd_tensor *inputs, int n_inputs, infd_tensor *outputs,
                                   int n_outputs, infd_error *err);

/* Zero-copy I/O for device plans: the context's page-locked staging for
 * input (output) i, nbytes of the plan's input (output) i, or NULL for a
 * host plan (or an input the plan does not copy). infd_plan_run copies
 * inputs from caller memory into staging before the host-to-device copy
 * and outputs back after the device-to-host copy; an infd_tensor whose
 * data is this buffer skips that copy, so a caller that writes its input
 * straight into it (a frontend receiving from a socket) saves a pass over
 * the bytes. Valid while the context lives; only its own thread writes it,
 * and an output buffer holds the output until the context's next run. */
INFD_API void *infd_context_input_buffer(infd_context *ctx, int i);
INFD_API void *infd_context_output_buffer(infd_context *ctx, int i);

/* Zero-copy input from several places: the next infd_plan_run on `ctx`
 * copies input i to the device from the `n` pieces, one after the other
 * (a batch whose requests each lie in their own page-locked buffer), and
 * ignores that input's tensor data, which may then be NULL. Every piece
 * must be page-locked host memory (a range of infd_context_input_buffer or
 * of memory from infd_engine_host_alloc) or device memory the plan's
 * device can read (infd_engine_device_alloc, infd_engine_ipc_open): each
 * piece's copy is told its direction by its pointer. The pieces fill the first sum(nbytes) bytes
 * of the input; the rest (rows a batch pads) holds whatever it held. The
 * array and the memory are read during that run only, which consumes the
 * setting whatever its outcome. INVALID_ARGUMENT for an input the plan does
 * not copy to a device (infd_context_input_buffer NULL) or pieces larger
 * than the input. */
INFD_API infd_status infd_context_set_input_pieces(infd_context *ctx, int i,
                                                   const infd_data_segment *pieces, int n,
                                                   infd_error *err);

/* Input already on the device: the next infd_plan_run on `ctx` copies
 * input i from `dev` (the input's nbytes of memory from
 * infd_engine_device_alloc on the plan's device) with a device-to-device
 * copy on the context's stream, no host copy, and ignores that input's
 * tensor data, which may then be NULL. `dev` must hold the input until that
 * run returns; the run consumes the setting whatever its outcome.
 * INVALID_ARGUMENT for an input the plan does not copy to a device
 * (infd_context_input_buffer NULL) or a NULL `dev`. */
INFD_API infd_status infd_context_set_device_input(infd_context *ctx, int i, const void *dev,
                                                   infd_error *err);

/* Per-kernel timing, off by default. When on, each run times every kernel
 * (two clock reads per kernel, about 40 ns each). */
INFD_API void infd_context_set_profiling(infd_context *ctx, bool on);

/* One kernel's accumulated time in a context (strings live as long as the
 * plan). */
typedef struct infd_step_profile {
    const char *node;    /* node name in the model */
    const char *op_type; /* ONNX op, e.g. "Conv" */
    const char *kernel;  /* backend kernel, e.g. "dnnl:conv" */
    uint64_t total_ns;
    uint64_t runs;
} infd_step_profile;

/* Number of kernels a run executes, and the profile of kernel i (NOT_FOUND
 * outside [0, n)). */
INFD_API int infd_context_n_steps(const infd_context *ctx);
INFD_API infd_status infd_context_step_profile(const infd_context *ctx, int i,
                                               infd_step_profile *out);

#ifdef __cplusplus
}
#endif

#endif /* INFD_ENGINE_H */
