/*
 * backend.h - the contract between the plan compiler and a backend.
 *
 * A backend is a const table of function pointers (infd_backend_ops). The
 * plan compiler (src/graph/plan.c) walks the optimized graph in order, asks
 * the backend whether it supports each node with the node's concrete shapes,
 * and compiles it into a kernel. At run time it calls run() on each kernel
 * with the data pointers the memory plan assigned. Constant folding uses the
 * same kernels at compile time, so an op is implemented once.
 *
 * Shapes are concrete when a kernel is compiled: a plan is built for fixed
 * input shapes (a batch size, an image size), so every value's dims are
 * known numbers. The backend may precompute anything from them (oneDNN
 * primitives, blocking, reordered weights).
 *
 * Threading: compile() runs on the thread building the plan. run() is called
 * concurrently on one kernel from several contexts (one per instance
 * thread). Each context owns a slot number in [0, n_slots): a kernel may keep
 * per-slot mutable state made at compile time (oneDNN memory objects and
 * streams whose data handles are set at run time) and touch only slot
 * io->slot in run(); everything else is immutable after compile. Per-run
 * scratch comes from the workspace the memory plan reserves
 * (workspace_bytes), so run() never allocates.
 *
 * Layout: values are dense row-major in the ONNX logical layout (NCHW for
 * images), except between two kernels of one backend that agree on an
 * opaque layout (oneDNN's blocked nChw16c, say). Before compiling, the plan
 * asks produces_opaque() of a value's producer and accepts_opaque() of
 * every reader; when all agree (and the value is not a graph output), the
 * producer is compiled with output_opaque_ok[0] set and may pick a layout,
 * which it publishes in kernel->output_layout (with its byte size, padding
 * included); each reader is then compiled with that layout in
 * input_layouts[i] and must read it. Constants and graph inputs are always
 * plain.
 *
 * Device backends (CUDA): a backend that fills the memory slots (alloc, free,
 * copy, stream_create, stream_destroy, sync) runs on its own memory. The
 * plan then keeps the constants its kernels read in one device buffer, each
 * context's arena (activations, graph inputs, workspace) in device memory,
 * and host staging buffers from alloc(INFD_BACKEND_MEM_HOST) for the copies
 * at the plan's edges; every pointer in infd_kernel_io is a device pointer.
 * run() only enqueues work on io->stream (the context's stream) and returns;
 * infd_plan_run calls sync() once, after the copies out. compile() still
 * reads constants on the host (value->data) and may keep device copies of
 * its own (reordered or converted weights), freed in destroy_kernel.
 */
#ifndef INFD_GRAPH_BACKEND_H
#define INFD_GRAPH_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "graph/ir.h"
#include "infd/engine.h"
#include "infd/infd.h"

/* What a kernel is compiled from: one node with concrete input and output
 * values (shapes all known, dtypes known). inputs[i] is NULL for an omitted
 * optional input; a constant input has value->data set, and a kernel may
 * read it at compile time (weights, a Reshape target, Resize scales). */
typedef struct infd_kernel_args {
    const infd_ir_graph *g;
    const infd_ir_node *node;
    int32_t n_inputs;
    int32_t n_outputs;
    const infd_ir_value *const *inputs;
    const infd_ir_value *const *outputs;
    int n_threads; /* threads a kernel may use at run time (>= 1) */
    int n_slots;   /* contexts that may run the kernel at once (>= 1) */
    /* Per input: the opaque layout its producer chose (backend-private,
     * owned by the producing kernel), or NULL for plain. The array itself
     * may be NULL: all plain. */
    const void *const *input_layouts;
    /* Whether output 0 may be written in an opaque layout the kernel picks
     * (false: plain). Only output 0 ever is. */
    bool output_opaque_ok;
    /* The plan's precision (infd_plan_options.precision). A kernel may
     * compute in it and keep its opaque output in it, as long as plain
     * outputs stay in the value's dtype. Constant folding always passes
     * INFD_PRECISION_FP32. */
    infd_precision precision;
    /* A tuning record this backend's compile() wrote for this node in an
     * earlier build (infd_kernel.tuning, kept in a plan file), or NULL:
     * tune afresh. A kernel that takes it skips its tuning (timing cuDNN's
     * algorithms, say); one it cannot use (another shape, a library that
     * rejects it) is ignored and the kernel tunes as if it were NULL. */
    const void *tuning;
    size_t tuning_bytes;
    /* The model's shared weights (graph/weights.h), or NULL (constant
     * folding): what a kernel makes of a constant (reordered or converted
     * weights) it gets through infd_weights_form, so that every plan of the
     * model holds one copy and makes it once; it then sets the input's bit
     * in infd_kernel.unread_inputs, and the plan lets go of the plain
     * constant. */
    infd_weights *weights;
} infd_kernel_args;

/* Data for one run of a kernel. Pointers are INFD_ALIGNMENT-aligned except
 * user-provided graph inputs and outputs, which are only element-aligned. */
typedef struct infd_kernel_io {
    const void *const *inputs; /* n_inputs entries; NULL for omitted ones */
    void *const *outputs;      /* n_outputs entries; NULL for unused ones */
    void *workspace;           /* workspace_bytes of scratch, or NULL; a device
                                  plan's is INFD_WORKSPACE_ALIGNMENT-aligned */
    infd_pool *pool;           /* the context's threads (may be NULL: run inline) */
    int slot;                  /* the running context's slot, in [0, n_slots) */
    /* The context's stream, made by the backend's stream_create (NULL for a
     * backend without one): device kernels enqueue their work on it. */
    void *stream;
} infd_kernel_io;

/* Kinds of memory a device backend hands out (infd_backend_ops.alloc). */
typedef enum infd_backend_mem {
    INFD_BACKEND_MEM_DEVICE = 0, /* device memory: kernels' data; the host never touches it */
    INFD_BACKEND_MEM_HOST = 1,   /* page-locked host memory, for staging copies */
} infd_backend_mem;

/* Directions of infd_backend_ops.copy. */
typedef enum infd_backend_copy {
    INFD_BACKEND_COPY_H2D = 0,
    INFD_BACKEND_COPY_D2H = 1,
    INFD_BACKEND_COPY_D2D = 2,
    /* Told by the pointers (unified addressing): page-locked host memory or
     * device memory on either side. */
    INFD_BACKEND_COPY_ANY = 3,
} infd_backend_copy;

typedef struct infd_backend_ops infd_backend_ops;

/* Alignment of a device plan's kernel workspace (infd_kernel_io.workspace):
 * cuBLASLt requires 256 bytes of its workspace pointer and answers
 * INVALID_VALUE otherwise. */
#define INFD_WORKSPACE_ALIGNMENT 256

/* Bytes of tuning record a kernel may keep (infd_kernel.tuning): room for
 * a serialized runtime-compiled cuDNN execution plan (50-65 KB). */
#define INFD_KERNEL_TUNING_MAX (1u << 20)

/* A compiled node. Backends allocate a larger struct that starts with this
 * one and free it in destroy_kernel. */
typedef struct infd_kernel {
    const infd_backend_ops *ops;
    const char *name;       /* kernel variant, for profiles ("dnnl:conv:jit_avx512") */
    size_t workspace_bytes; /* scratch run() needs, reserved by the memory plan */
    /* Set by compile when output_opaque_ok was given and the kernel chose an
     * opaque layout for output 0: the layout (owned by the kernel, passed to
     * readers as input_layouts[i]) and the bytes it occupies. NULL: plain. */
    const void *output_layout;
    size_t output_layout_bytes;
    /* What compile chose by tuning (an algorithm id, a compiled engine),
     * as tuning_bytes bytes at tuning (owned by the kernel, freed with it)
     * that the same backend's compile reads back from
     * infd_kernel_args.tuning on a later build of the same node and
     * shapes; NULL and 0 bytes: nothing to keep. */
    const uint8_t *tuning;
    size_t tuning_bytes;
    /* Bit i (i < 32): input i is a constant that compile copied (converted
     * weights in device memory, reordered weights, say) and run never reads
     * through io->inputs[i], which may then be NULL. A device plan uploads
     * a constant only when some kernel reads it; a plan keeps a constant
     * in host memory only when some kernel reads it (or it is a graph
     * output). */
    uint32_t unread_inputs;
} infd_kernel;

#define INFD_BACKEND_OPS_VERSION 2

struct infd_backend_ops {
    uint32_t version; /* INFD_BACKEND_OPS_VERSION */
    size_t size;      /* sizeof(infd_backend_ops), for forward compatibility */
    const char *name; /* "cpu", "cuda" */

    /* True when this backend can run the node with these shapes and dtypes.
     * When false, `why` (nullable) says what is missing, e.g. "Resize mode
     * 'cubic' is not supported"; the plan compiler puts it in the error. */
    bool (*supports)(const infd_kernel_args *args, infd_error *why);

    /* Compiles the node into a kernel (the backend's struct). Errors name the
     * node. May be slow (primitive creation, tuning); never called at run
     * time. */
    infd_status (*compile)(const infd_kernel_args *args, infd_kernel **out, infd_error *err);

    /* Runs a kernel. Must not allocate, lock or fail on valid data: every
     * check happened in compile. */
    void (*run)(const infd_kernel *kernel, const infd_kernel_io *io);

    /* Frees a kernel. NULL is a no-op. */
    void (*destroy_kernel)(infd_kernel *kernel);

    /* Optional (NULL: never). Whether the node, if compiled, could write
     * output 0 in an opaque layout of this backend. */
    bool (*produces_opaque)(const infd_kernel_args *args);

    /* Optional (NULL: never). Whether the node can read input `i` in any
     * opaque layout this backend's kernels produce. */
    bool (*accepts_opaque)(const infd_kernel_args *args, int i);

    /* Version 2: device backends. Optional, all or none (NULL: the backend
     * runs on host memory and the plan uses infd_aligned_alloc and memcpy;
     * see "Device backends" above). */

    /* Optional (NULL: always available). OK when the backend can run here;
     * UNAVAILABLE with the reason ("no usable CUDA device: ...") otherwise.
     * Called before a plan is compiled for the backend. */
    infd_status (*available)(infd_error *err);

    /* `bytes` (> 0) of `kind` memory, 256-byte aligned, or NULL with
     * OUT_OF_MEMORY (naming the kind and size) in `err`. Compile and
     * context-create time only. */
    void *(*alloc)(infd_backend_mem kind, size_t bytes, infd_error *err);

    /* Frees memory from alloc. NULL is a no-op. */
    void (*free)(infd_backend_mem kind, void *ptr);

    /* A stream (in-order queue of device work) with whatever per-stream
     * state the kernels need (library handles), for one context. */
    infd_status (*stream_create)(void **out, infd_error *err);
    void (*stream_destroy)(void *stream); /* NULL is a no-op */

    /* Enqueues a copy of `bytes` on `stream`; host pointers must come from
     * alloc(INFD_BACKEND_MEM_HOST). stream NULL: a synchronous copy from or
     * to any host memory (compile time). Errors surface at sync. */
    void (*copy)(void *dst, const void *src, size_t bytes, infd_backend_copy dir, void *stream);

    /* Waits until the work enqueued on `stream` is done; returns the first
     * error any of it hit (INTERNAL, with the library's message). */
    infd_status (*sync)(void *stream, infd_error *err);

    /* Optional, all three or none (NULL: every run enqueues its work). Work
     * enqueued on `stream` between capture_begin and capture_end is
     * recorded, not run, into a graph the stream keeps (CUDA graphs);
     * replay enqueues that graph. capture_end fails (and keeps nothing)
     * when something in between could not be captured; the plan then runs
     * eagerly. Pointers and launch parameters are frozen in the graph, so
     * the plan captures only when they are fixed: one context's arena,
     * staging and the plan's weights. */
    infd_status (*capture_begin)(void *stream, infd_error *err);
    infd_status (*capture_end)(void *stream, infd_error *err);
    void (*replay)(void *stream);

    /* Optional (NULL: the backend has one device, index 0). Makes device
     * `index` (infd_plan_options.device_index) current on the calling
     * thread, so that the slots above (compile, alloc, stream_create, copy,
     * run, sync) act on it until another call changes it. The plan calls it
     * before compiling, before creating or destroying a context or the
     * plan, and at the start of every run (it must be cheap when the
     * device is already current: no allocation, no lock). INVALID_ARGUMENT
     * "GPU 3 does not exist (this machine has 1)" for an index outside
     * the devices, UNAVAILABLE when the device cannot be used. */
    infd_status (*set_device)(int index, infd_error *err);

    /* Optional (NULL: nothing to ready). Makes device `index` ready to
     * compile on (CUDA: the device's context and the compile stream's
     * library handles, about 100 ms that the first compile would pay
     * otherwise). The plan calls it on a helper thread, after `available`,
     * while it reads and optimizes the model, and joins that thread before
     * compiling: it must not touch anything a plan being read uses. */
    infd_status (*prepare)(int index, infd_error *err);

    /* Optional (NULL: prepare leaves nothing running). Waits for what
     * `prepare` started in the background on device `index` (CUDA: the
     * libraries' one-time initialization, on threads of their own, which
     * the compile uses and which must not still be inside a library when
     * the process exits and the libraries are torn down). The plan calls it
     * once its kernels are compiled, or when it gives up before; it returns
     * at once when nothing runs. */
    void (*settle)(int index);

    /* Optional (NULL: a plan never runs kernels image by image). True when
     * `layout`, a one-image opaque layout (published by a kernel compiled
     * with dim 0 of its values 1), also describes N images when N copies
     * of it lie output_layout_bytes apart: then a reader compiled for the
     * whole batch gets this one-image layout in input_layouts[i] and reads
     * the value's N images that way. The plan's per-image prefix
     * (plan.c) depends on it. */
    bool (*layout_stacks)(const void *layout);

    /* Optional, both or neither (NULL: the runs of a device's contexts
     * overlap as the device schedules them). The plan brackets each run's
     * kernels (not its copies) with order_begin and order_end on the
     * context's stream, outside any capture: the kernels then start once
     * those the device's previous run enqueued between the pair are done,
     * so the runs of several contexts take the device in turn while each
     * one's copies overlap another's kernels. order_begin may block until
     * the matching order_end of another thread (a lock held between the
     * two); nothing between them may wait for another context. */
    void (*order_begin)(void *stream);
    void (*order_end)(void *stream);
};

/* True when the backend computes on its own memory (the memory slots are
 * filled). */
static inline bool infd_backend_is_device(const infd_backend_ops *ops)
{
    return ops->alloc != NULL;
}

/* Call-site wrappers, so one place can add checks or tracing. */
static inline bool infd_backend_supports(const infd_backend_ops *ops, const infd_kernel_args *a,
                                         infd_error *why)
{
    return ops->supports(a, why);
}

static inline infd_status infd_backend_compile(const infd_backend_ops *ops,
                                               const infd_kernel_args *a, infd_kernel **out,
                                               infd_error *err)
{
    return ops->compile(a, out, err);
}

/* Makes device `index` of `ops` current on this thread (see set_device). A
 * backend without the slot has device 0 only. */
static inline infd_status infd_backend_set_device(const infd_backend_ops *ops, int index,
                                                  infd_error *err)
{
    if (ops->set_device)
        return ops->set_device(index, err);
    if (index != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "device %d does not exist: the %s backend has device 0 only", index,
                              ops->name);
    return INFD_STATUS_OK;
}

static inline void infd_kernel_run(const infd_kernel *k, const infd_kernel_io *io)
{
    k->ops->run(k, io);
}

static inline void infd_kernel_destroy(infd_kernel *k)
{
    if (k)
        k->ops->destroy_kernel(k);
}

/* The CPU backend (src/backends/cpu/). */
extern const infd_backend_ops infd_cpu_backend;

#ifdef INFD_HAVE_CUDA
/* The CUDA backend (src/backends/cuda/), in builds where nvcc was found. */
extern const infd_backend_ops infd_cuda_backend;
#endif

/* The backend for a device kind (graph/devices.c); NULL when this build has
 * none (CUDA without nvcc) or the kind is unknown. */
const infd_backend_ops *infd_backend_for(infd_device_kind kind);

#endif /* INFD_GRAPH_BACKEND_H */
