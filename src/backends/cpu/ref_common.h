/*
 * ref_common.h - helpers shared by the CPU backend's own C kernels (ref_*.c):
 * chunked parallel loops, reading constant inputs at compile time, numpy
 * broadcasting and strided "view copies" (Transpose, Slice, Expand, Tile).
 *
 * Everything a kernel derives from shapes is computed here at compile time
 * into plain structs embedded in the kernel; the run-time halves (iterators,
 * copy loops) never allocate. Tensors are dense row-major.
 */
#ifndef INFD_BACKENDS_CPU_REF_COMMON_H
#define INFD_BACKENDS_CPU_REF_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_ops.h"

/* Elements (or bytes for copies) below which a loop is not worth splitting
 * over the pool. */
#define REF_GRAIN 16384

/* Most inputs a broadcasting kernel takes (Sum, Mean, Min, Max, Where). */
#define REF_MAX_INPUTS 16

/* Rank of a view: Tile splits every dim in two. */
#define REF_VIEW_MAX_RANK (2 * INFD_MAX_RANK)

/* Body of ref_parallel: handles items [begin, end). */
typedef void (*ref_range_fn)(void *arg, int64_t begin, int64_t end);

/* Calls fn over [0, n) in contiguous chunks of at least `grain` items, on the
 * pool when there is one and more than one chunk, else inline. The chunking
 * depends only on n and grain, never on the pool, so kernels whose chunks
 * are independent give identical results either way. */
void ref_parallel(infd_pool *pool, int64_t n, int64_t grain, ref_range_fn fn, void *arg);

/* A grain in rows for rows of `row_len` elements (at least 1). */
static inline int64_t ref_row_grain(int64_t row_len)
{
    return row_len >= REF_GRAIN ? 1 : REF_GRAIN / (row_len > 0 ? row_len : 1);
}

/* infd_node_error for supports(): fills `why` and returns false. */
bool ref_decline(const infd_kernel_args *a, infd_error *why, infd_status code, const char *fmt, ...)
    INFD_PRINTF(4, 5);

/* Copies the concrete shape of `v`. */
void ref_shape_of(const infd_ir_value *v, infd_shape *s);

/* As infd_node_const_ints for FP32/FP16/BF16/FP64 tensors, read as float. */
bool ref_const_floats(const infd_ir_value *v, float *out, int64_t cap, int64_t *n);

/* Reads element 0 of `data` (dtype `dt`) as double / int64; for scalars read
 * at run time (Clip bounds, Range). */
double ref_load_f64(infd_dtype dt, const void *data);
int64_t ref_load_i64(infd_dtype dt, const void *data);

/* True for FP16, BF16, FP32, FP64. */
bool ref_dtype_is_float(infd_dtype dt);
/* True for the signed and unsigned integer dtypes (not BOOL). */
bool ref_dtype_is_int(infd_dtype dt);

/*
 * Broadcasting: n_in inputs against the output shape, collapsed to the
 * fewest dims (dims of size 1 dropped, neighbours merged where every input
 * is contiguous or broadcast across both). rank >= 1 always.
 */
typedef struct ref_bcast {
    int32_t rank;
    int32_t n_in;
    int64_t numel;
    int64_t dims[INFD_MAX_RANK];
    int64_t strides[REF_MAX_INPUTS][INFD_MAX_RANK]; /* elements; 0 where broadcast */
} ref_bcast;

/* False when an input shape does not broadcast to `out` (numpy rules). */
bool ref_bcast_init(ref_bcast *b, int32_t n_in, const infd_ir_value *const *ins,
                    const infd_ir_value *out);

/* Walks the rows (innermost collapsed dim) of a ref_bcast. */
typedef struct ref_bcast_iter {
    int64_t idx[INFD_MAX_RANK];
    int64_t off[REF_MAX_INPUTS]; /* element offset of the current row per input */
} ref_bcast_iter;

/* Positions `it` at row `row`. */
void ref_bcast_iter_seek(const ref_bcast *b, ref_bcast_iter *it, int64_t row);
/* Advances `it` by one row. */
void ref_bcast_iter_next(const ref_bcast *b, ref_bcast_iter *it);

static inline int64_t ref_bcast_row_len(const ref_bcast *b)
{
    return b->dims[b->rank - 1];
}

/*
 * A view copy: out[i0..ik] = in[base + sum(i_d * strides[d])] for an output
 * of `dims`, elements of `esize` bytes. Transpose, Slice, Expand and Tile are
 * all one. Collapsed at init; strides may be negative (Slice) or 0.
 */
typedef struct ref_view {
    int32_t rank;
    size_t esize;
    int64_t numel;
    int64_t base;
    int64_t dims[REF_VIEW_MAX_RANK];
    int64_t strides[REF_VIEW_MAX_RANK];
    /* Set when the collapsed view is a batch of 2-D transposes (the last two
     * dims swapped): run by cache blocks instead of rows. */
    bool transpose2d;
} ref_view;

/* Collapses the view described by rank/dims/strides/base/esize in place and
 * picks the run strategy. */
void ref_view_finish(ref_view *v);

/* Copies the view from `in` to the dense `out`, on the pool if given. */
void ref_view_run(const ref_view *v, const void *in, void *out, infd_pool *pool);

/* memcpy split over the pool for large sizes; no-op when dst == src. */
void ref_copy(void *dst, const void *src, size_t nbytes, infd_pool *pool);

/* Turns a kernel planned on the stack into a real one: allocates `size`
 * bytes (the planned struct's size) with infd_cpu_kernel_new and copies
 * everything of `plan` after its infd_cpu_kernel header. The pattern of
 * kernels whose supports() and compile() share one plan function. */
infd_status ref_kernel_from_plan(const infd_kernel_args *a, const infd_cpu_kernel *plan,
                                 size_t size, const char *name,
                                 void (*run)(const infd_cpu_kernel *, const infd_kernel_io *),
                                 void (*fini)(infd_cpu_kernel *), infd_kernel **out,
                                 infd_error *err);

#endif /* INFD_BACKENDS_CPU_REF_COMMON_H */
