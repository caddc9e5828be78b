/*
 * dnnl_common.h - plumbing shared by the oneDNN-backed CPU kernels
 * (dnnl_*.c): the process-wide engine, memory descriptors for our dense
 * row-major tensors, compile-time weight reorders, and an executor that
 * turns one primitive into a kernel that runs without allocating.
 *
 * The executor (infd_dnnl_exec) is made at compile time from a primitive
 * descriptor. For every slot (infd_kernel_args.n_slots) it holds a stream
 * and one dnnl_memory_t per primitive argument, created with
 * DNNL_MEMORY_NONE for run-time arguments (kernel inputs, outputs, the
 * scratchpad) and pointing at kernel-owned buffers for constants (reordered
 * weights, bias, statistics). run() only sets the data handles of slot
 * io->slot's memories, executes on that slot's stream and waits: no
 * allocation through infd_*, no lock of ours. oneDNN itself still builds
 * a small argument map per execute inside the library; that is invisible
 * to infd_alloc_get_stats and out of our hands.
 *
 * Scratchpad: primitives are created with scratchpad_mode user; run()
 * points the scratchpad memory at io->workspace plus the executor's
 * scratch offset. A kernel of several steps (a reorder before or after the
 * op) keeps its intermediate buffers at the start of the workspace and the
 * steps' scratchpads (which are never live at once) after them.
 *
 * Layout (see graph/backend.h): an opaque layout of ours is a
 * dnnl_memory_desc_t, copied into the producing kernel (infd_dnnl_kernel.
 * layout) and published as base.output_layout with its padded byte size;
 * readers cast input_layouts[i] back (infd_dnnl_input_md). Conv picks its
 * dst layout (format_tag any: nChw16c and friends); the layout-preserving
 * ops (eltwise, pools, BatchNormalization, binary) write their input's
 * layout when the input is opaque and the output may be, and plain
 * otherwise, adding a reorder step when an opaque input meets a plain
 * output. Weights use format_tag any and are reordered once at compile
 * time into kernel-owned memory.
 *
 * Precision (infd_kernel_args.precision): in a BF16 plan, Conv and
 * ConvTranspose with constant weights compute with bf16 src and weights
 * (reordered once at compile time) and f32 bias and accumulation, and write
 * an opaque dst as bf16; a src that arrives as f32 (plain, or opaque from
 * an f32 kernel) is reordered to bf16 through the workspace. The
 * layout-preserving ops take whatever data type their opaque input has and
 * keep it for an opaque output. Whatever is written plain is f32, so the
 * graph's values keep their FP32 dtype and only opaque layouts (whose md
 * carries the data type) change. infd_dnnl_pd_create refuses a BF16 plan
 * on a CPU without BF16 instructions rather than run it in FP32.
 *
 * Threading: compile-time functions run on the plan-building thread;
 * infd_dnnl_exec_run is safe to call concurrently for distinct slots.
 * oneDNN parallelises inside a primitive with its OpenMP runtime, whose
 * team size is set to infd_kernel_args.n_threads both when primitives are
 * created (oneDNN sizes its work split then) and before each run.
 */
#ifndef INFD_BACKENDS_CPU_DNNL_COMMON_H
#define INFD_BACKENDS_CPU_DNNL_COMMON_H

#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>

#include "backends/cpu/cpu_ops.h"
#include "graph/weights.h"

#define INFD_DNNL_MAX_ARGS   12
#define INFD_DNNL_NAME_BYTES 96

/* Where an argument's data comes from at run time. */
typedef enum infd_dnnl_from {
    INFD_DNNL_FROM_INPUT = 1, /* io->inputs[index] */
    INFD_DNNL_FROM_OUTPUT,    /* io->outputs[index] */
    INFD_DNNL_FROM_WORKSPACE, /* io->workspace (the user scratchpad) */
    INFD_DNNL_FROM_CONST,     /* a kernel-owned buffer set at compile time */
} infd_dnnl_from;

typedef struct infd_dnnl_exec {
    dnnl_primitive_t prim;
    int n_slots;
    int n_args;
    int arg_ids[INFD_DNNL_MAX_ARGS]; /* DNNL_ARG_* */
    uint8_t arg_from[INFD_DNNL_MAX_ARGS];
    int32_t arg_index[INFD_DNNL_MAX_ARGS];
    size_t arg_offset[INFD_DNNL_MAX_ARGS]; /* FROM_WORKSPACE: byte offset into io->workspace */
    dnnl_exec_arg_t *args;                 /* [n_slots][INFD_DNNL_MAX_ARGS]; memories owned */
    dnnl_stream_t *streams;                /* [n_slots], owned */
    /* Constant buffers: the model's shared forms (graph/weights.h), one
     * reference each, released with the executor. */
    infd_weight_form *forms[INFD_DNNL_MAX_ARGS];
    int n_forms;
    size_t scratch_bytes;
    int n_threads; /* OpenMP team size for run (infd_kernel_args.n_threads) */
    /* Split runs (infd_dnnl_exec_split): the primitive runs n_parts times,
     * argument i's data advanced by part_stride[i] bytes each time. */
    int n_parts;
    size_t part_stride[INFD_DNNL_MAX_ARGS];
} infd_dnnl_exec;

/* The kernel most ops use: one primitive (exec), with optional steps
 * around it (prim NULL: absent) that run in the order pre, pre2, exec,
 * post: reorders between an opaque layout and a plain one. */
typedef struct infd_dnnl_kernel {
    infd_cpu_kernel base;
    infd_dnnl_exec pre;
    infd_dnnl_exec pre2;
    infd_dnnl_exec exec;
    infd_dnnl_exec post;
    dnnl_memory_desc_t layout;       /* output 0's opaque layout, when published */
    char name[INFD_DNNL_NAME_BYTES]; /* base.base.name points here */
} infd_dnnl_kernel;

/* The process's CPU engine, created on first use (pthread_once) and kept
 * for the life of the process. NULL when oneDNN cannot create it. */
dnnl_engine_t infd_dnnl_engine(void);

/* OK for dnnl_success; otherwise fills `err` with "<node>: <what>: <oneDNN
 * status>" and returns the matching infd_status. */
infd_status infd_dnnl_check(const infd_kernel_args *a, infd_error *err, dnnl_status_t s,
                            const char *what);

/* A dense row-major FP32 descriptor of `ndims` dims (0 dims: one element). */
dnnl_status_t infd_dnnl_md_plain(dnnl_memory_desc_t *md, int ndims, const int64_t *dims);

/* The same for a value's concrete shape. */
dnnl_status_t infd_dnnl_md_value(dnnl_memory_desc_t *md, const infd_ir_value *v);

/* A descriptor with format_tag any (the primitive picks the layout). */
dnnl_status_t infd_dnnl_md_any(dnnl_memory_desc_t *md, int ndims, const int64_t *dims);

/* The same with data type `dt`. */
dnnl_status_t infd_dnnl_md_any_dt(dnnl_memory_desc_t *md, int ndims, const int64_t *dims,
                                  dnnl_data_type_t dt);

/* The data type a kernel computes in (dnnl_bf16 in a BF16 plan, else
 * dnnl_f32); see "Precision" above. */
dnnl_data_type_t infd_dnnl_compute_type(const infd_kernel_args *a);

/* OK in an FP32 plan, or in a BF16 plan on a CPU with BF16 instructions
 * (AVX512-BF16 or AMX, as oneDNN sees it); UNAVAILABLE otherwise. */
infd_status infd_dnnl_precision_check(const infd_kernel_args *a, infd_error *err);

/* True when inputs[0..n_data) are present FP32 values and output 0 is FP32;
 * otherwise says which one is not in `why` (nullable). */
bool infd_dnnl_fp32_only(const infd_kernel_args *a, int n_data, infd_error *why);

/* The layout of input i: the opaque one its producer published, else
 * plain row-major for its shape. Returns true when opaque. */
bool infd_dnnl_input_md(const infd_kernel_args *a, int i, dnnl_memory_desc_t *md);

/* True when input i arrives in an opaque layout. */
bool infd_dnnl_input_is_opaque(const infd_kernel_args *a, int i);

/* True when `md` is exactly the plain row-major layout of value v. */
bool infd_dnnl_md_is_plain(const dnnl_memory_desc_t *md, const infd_ir_value *v);

/* Publishes `md` as k's output layout (copied into k->layout). */
void infd_dnnl_kernel_publish(infd_dnnl_kernel *k, const dnnl_memory_desc_t *md);

/* Layout hooks of the layout-preserving ops (eltwise, pools, batch norm):
 * produce (only when the input turns out opaque; decided at compile) and
 * accept input 0. */
bool infd_dnnl_produces_opaque(const infd_kernel_args *a);
bool infd_dnnl_accepts_input0(const infd_kernel_args *a, int i);

/* Sets the calling thread's OpenMP team size (no-op when already so). */
void infd_dnnl_set_threads(int n_threads);

/* Creates a primitive descriptor for `op_desc` with scratchpad mode user,
 * the post-ops `po` (nullable) and output scale `scale` (1: none). `what`
 * names the primitive in errors ("convolution"). */
infd_status infd_dnnl_pd_create(const infd_kernel_args *a, const void *op_desc,
                                const_dnnl_post_ops_t po, float scale, const char *what,
                                dnnl_primitive_desc_t *pd, infd_error *err);

/* infd_dnnl_pd_create, taking the first implementation whose name
 * (impl_info_str) contains `impl` rather than oneDNN's first choice;
 * INFD_STATUS_UNIMPLEMENTED when none does. */
infd_status infd_dnnl_pd_create_impl(const infd_kernel_args *a, const void *op_desc,
                                     const_dnnl_post_ops_t po, float scale, const char *what,
                                     const char *impl, dnnl_primitive_desc_t *pd, infd_error *err);

/* Makes an infd_dnnl_kernel for the primitive of `pd` (borrowed), named
 * "<prefix>:<implementation>". The caller adds the arguments with
 * infd_dnnl_exec_arg / _arg_const and destroys the kernel on error. */
infd_status infd_dnnl_kernel_create(const infd_kernel_args *a, const char *prefix,
                                    const_dnnl_primitive_desc_t pd, infd_dnnl_kernel **out,
                                    infd_error *err);

/* The same, with the op's scratchpad at byte `scratch_offset` of the
 * workspace (after intermediate buffers of `scratch_offset` bytes); sets
 * workspace_bytes to cover it. */
infd_status infd_dnnl_kernel_create_at(const infd_kernel_args *a, const char *prefix,
                                       const_dnnl_primitive_desc_t pd, size_t scratch_offset,
                                       infd_dnnl_kernel **out, infd_error *err);

/* Makes the primitive of `pd` (borrowed), a stream per slot and the
 * scratchpad argument in a zeroed executor (for kernels that hold more than
 * one; infd_dnnl_kernel_create does it for the usual one). */
infd_status infd_dnnl_exec_init(infd_dnnl_exec *e, const infd_kernel_args *a,
                                const_dnnl_primitive_desc_t pd, infd_error *err);

/* The same with the scratchpad at byte `scratch_offset` of the workspace. */
infd_status infd_dnnl_exec_init_at(infd_dnnl_exec *e, const infd_kernel_args *a,
                                   const_dnnl_primitive_desc_t pd, size_t scratch_offset,
                                   infd_error *err);

/* Adds a run-time argument whose data is io->workspace + offset. */
infd_status infd_dnnl_exec_arg_ws(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                                  size_t offset, const dnnl_memory_desc_t *md, infd_error *err);

/* A reorder primitive descriptor (scratchpad mode user) from `from` to `to`. */
infd_status infd_dnnl_reorder_pd(const infd_kernel_args *a, const dnnl_memory_desc_t *from,
                                 const dnnl_memory_desc_t *to, dnnl_primitive_desc_t *pd,
                                 infd_error *err);

/* Makes `e` (zeroed) a reorder step from `from` to `to`; each end is an
 * input/output/workspace argument (from_kind, index; for the workspace,
 * index is a byte offset). Scratch at `scratch_offset`. */
infd_status infd_dnnl_exec_reorder(infd_dnnl_exec *e, const infd_kernel_args *a,
                                   const dnnl_memory_desc_t *from, infd_dnnl_from from_kind,
                                   size_t from_index, const dnnl_memory_desc_t *to,
                                   infd_dnnl_from to_kind, size_t to_index, size_t scratch_offset,
                                   infd_error *err);

/* Sets k's workspace_bytes to `head` (intermediate buffers, already
 * rounded to 64) plus the largest scratchpad of its steps. */
void infd_dnnl_kernel_size_workspace(infd_dnnl_kernel *k, size_t head);

/*
 * The common case of a layout-preserving op whose primitive takes one md
 * for src and dst (eltwise, batch norm): the md to build it on and how to
 * run it.
 *   - opaque input, opaque output allowed: md = the input's layout,
 *     published by infd_dnnl_unary_finish;
 *   - opaque input, plain output: md = plain; a pre step reorders input 0
 *     into output 0 and the op runs in place there (src from output 0);
 *   - plain input: md = plain (or `flat`, a 1-D view, when given).
 */
typedef struct infd_dnnl_unary_layout {
    dnnl_memory_desc_t md;
    dnnl_memory_desc_t in_md; /* the input's layout */
    bool in_place;            /* the op's src is output 0 */
    bool publish;
} infd_dnnl_unary_layout;

dnnl_status_t infd_dnnl_unary_layout_get(const infd_kernel_args *a, const dnnl_memory_desc_t *flat,
                                         infd_dnnl_unary_layout *l);

/* Adds the pre reorder (when in_place), publishes (when asked) and sizes
 * the workspace, after the op's arguments are in k->exec. */
infd_status infd_dnnl_unary_finish(infd_dnnl_kernel *k, const infd_kernel_args *a,
                                   const infd_dnnl_unary_layout *l, infd_error *err);

/* Adds a run-time argument `arg_id` described by `md`, whose data is
 * inputs[index] or outputs[index] at run time. */
infd_status infd_dnnl_exec_arg(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                               infd_dnnl_from from, int32_t index, const dnnl_memory_desc_t *md,
                               infd_error *err);

/* Adds a constant argument; takes `buf` (from infd_aligned_alloc, the
 * md's size), freed even when this call fails. Its bytes become the
 * model's shared copy (a->weights): when another plan already holds the
 * same bytes, `buf` is freed and that copy is used. */
infd_status infd_dnnl_exec_arg_const(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                                     const dnnl_memory_desc_t *md, void *buf, infd_error *err);

/* Adds constant argument `arg_id`: `data` (laid out as from_md) reordered
 * to to_md, made once per model (a->weights: a plan that finds the form
 * another made takes it without reordering) and shared. Sets bit `input`
 * in *unread (the kernel's unread_inputs) when input >= 0: data is that
 * input's constant, which the kernel then never reads at run time. */
infd_status infd_dnnl_exec_arg_reordered(infd_dnnl_exec *e, const infd_kernel_args *a, int arg_id,
                                         const dnnl_memory_desc_t *from_md, const void *data,
                                         const dnnl_memory_desc_t *to_md, int input,
                                         uint32_t *unread, infd_error *err);

/* Reorders constant `data` laid out as `from_md` into a new buffer laid out
 * as `to_md` (*out, from infd_aligned_alloc). Runs at compile time. */
infd_status infd_dnnl_reorder_const(const infd_kernel_args *a, const dnnl_memory_desc_t *from_md,
                                    const void *data, const dnnl_memory_desc_t *to_md, void **out,
                                    infd_error *err);

/* A 64-byte aligned copy of `n` bytes (*out); OUT_OF_MEMORY names the node. */
infd_status infd_dnnl_copy_const(const infd_kernel_args *a, const void *data, size_t n, void **out,
                                 infd_error *err);

/*
 * Where the dst of an op whose primitive picked (or was given) layout `md`
 * goes: straight into output 0 when md is plain; into output 0 published
 * as opaque when md is not plain and the output may be opaque; else into
 * a workspace buffer at byte `head` (after `head` bytes of other
 * intermediates), from which a post step reorders it into plain output 0.
 */
typedef struct infd_dnnl_dst {
    dnnl_memory_desc_t md;
    dnnl_memory_desc_t plain;
    bool publish;
    bool via_mid;
    size_t mid_offset;
    size_t head; /* intermediates in all, rounded to 64: the scratch offset */
} infd_dnnl_dst;

dnnl_status_t infd_dnnl_dst_get(const infd_kernel_args *a, const dnnl_memory_desc_t *md,
                                size_t head, infd_dnnl_dst *d);

/* Adds the op's DST argument to k->exec. */
infd_status infd_dnnl_dst_arg(infd_dnnl_kernel *k, const infd_kernel_args *a,
                              const infd_dnnl_dst *d, infd_error *err);

/* Adds the post reorder when via_mid, publishes when asked and sizes the
 * workspace. */
infd_status infd_dnnl_dst_finish(infd_dnnl_kernel *k, const infd_kernel_args *a,
                                 const infd_dnnl_dst *d, infd_error *err);

/* Makes e run its primitive `n_parts` times over consecutive parts of its
 * run-time arguments: the argument `arg_id` (added before) moves by
 * `stride` bytes per part; arguments not named stay put. For a primitive
 * built for a slice of the batch of a layout whose batch is outermost
 * (call once per moving argument). */
infd_status infd_dnnl_exec_split(infd_dnnl_exec *e, const infd_kernel_args *a, int n_parts,
                                 int arg_id, size_t stride, infd_error *err);

/* Sets slot io->slot's handles, executes and waits; a zeroed executor (no
 * primitive) does nothing. */
void infd_dnnl_exec_run(const infd_dnnl_exec *e, const infd_kernel_io *io);

/* Destroys memories, streams, the primitive and owned buffers; a zeroed
 * executor is a no-op. */
void infd_dnnl_exec_fini(infd_dnnl_exec *e);

/*
 * Fusion hooks (for Conv, Gemm, MatMul; attribute names documented in
 * dnnl_conv.c). infd_dnnl_fused_supported declines unknown activations and
 * unknown _fused_* attributes. infd_dnnl_fused_append appends the post-ops
 * the attributes ask for to `po`: with `_fused_sum` = 1, a binary add of the
 * residual (dense, shaped like the output `dst_md`; the caller binds it to
 * post-op index *residual_po, -1 when absent), then the activation, then
 * the trailing scale and shift (eltwise linear) when they are not 1 and 0.
 */
bool infd_dnnl_fused_supported(const infd_kernel_args *a, int residual_input, infd_error *why);
infd_status infd_dnnl_fused_append(const infd_kernel_args *a, dnnl_post_ops_t po,
                                   const dnnl_memory_desc_t *dst_md, int *residual_po,
                                   infd_error *err);

/*
 * The sliding window of Conv and the pools, resolved to oneDNN's terms from
 * the node's attributes (kernel from `kernel` when non-NULL, else the
 * kernel_shape attribute; strides, dilations, pads, auto_pad) and the given
 * input (inputs[0]) and output (outputs[0]) shapes. pad_r is what oneDNN
 * needs to produce the given output, which is more than the ONNX end pad
 * under ceil_mode; extended[i] says so. Errors (INVALID_ARGUMENT) name the
 * attribute; use it in supports() too.
 */
typedef struct infd_dnnl_window {
    int n_sp; /* spatial dims: rank - 2 */
    int64_t kernel[3];
    int64_t strides[3];
    int64_t dilations[3]; /* ONNX convention (1: dense); oneDNN takes d - 1 */
    int64_t pad_l[3];
    int64_t pad_r[3];
    bool extended[3];
} infd_dnnl_window;

infd_status infd_dnnl_window_get(const infd_kernel_args *a, const int64_t *kernel,
                                 infd_dnnl_window *w, infd_error *err);

/* Op entry points, registered in dnnl_ops.c (one pair per dnnl_*.c op). */
#define INFD_DNNL_OP(name)                                                               \
    bool infd_dnnl_##name##_supports(const infd_kernel_args *a, infd_error *why);        \
    infd_status infd_dnnl_##name##_compile(const infd_kernel_args *a, infd_kernel **out, \
                                           infd_error *err);
INFD_DNNL_OP(conv)
INFD_DNNL_OP(conv_transpose)
INFD_DNNL_OP(max_pool)
INFD_DNNL_OP(avg_pool)
INFD_DNNL_OP(global_avg_pool)
INFD_DNNL_OP(gemm)
INFD_DNNL_OP(matmul)
INFD_DNNL_OP(eltwise)
INFD_DNNL_OP(pow)
INFD_DNNL_OP(binary)
INFD_DNNL_OP(concat)
INFD_DNNL_OP(softmax)
INFD_DNNL_OP(batch_norm)
INFD_DNNL_OP(reduce)
#undef INFD_DNNL_OP

/* Layout hooks with op-specific rules (dnnl_conv.c, dnnl_binary.c,
 * dnnl_concat.c). */
bool infd_dnnl_conv_produces_opaque(const infd_kernel_args *a);
bool infd_dnnl_conv_accepts_opaque(const infd_kernel_args *a, int i);
bool infd_dnnl_conv_transpose_produces_opaque(const infd_kernel_args *a);
bool infd_dnnl_binary_accepts_opaque(const infd_kernel_args *a, int i);
bool infd_dnnl_concat_accepts_opaque(const infd_kernel_args *a, int i);

#endif /* INFD_BACKENDS_CPU_DNNL_COMMON_H */
