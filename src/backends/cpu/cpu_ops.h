/*
 * cpu_ops.h - how CPU operator implementations plug into the CPU backend.
 *
 * Each implementation file exports one table of infd_cpu_op entries, ended
 * by an entry whose op_type is NULL:
 *
 *   infd_cpu_ops_dnnl[]  oneDNN primitives (dnnl_*.c): convolution, matmul,
 *                        pooling, eltwise, binary, softmax, ... in FP32
 *   infd_cpu_ops_ref[]   our own C kernels (ref_*.c): data movement, shape
 *                        ops, integer arithmetic, and what oneDNN lacks
 *
 * The backend (cpu_backend.c) looks an op up in the tables in that order and
 * takes the first entry whose supports() accepts the node, so a table may
 * cover only some dtypes or attribute combinations of an op and leave the
 * rest to the next.
 *
 * A kernel is an infd_cpu_kernel (embedding infd_kernel) at the start of the
 * implementation's own struct, made with infd_cpu_kernel_new(); the backend's
 * run and destroy_kernel call the function pointers in it.
 */
#ifndef INFD_BACKENDS_CPU_OPS_H
#define INFD_BACKENDS_CPU_OPS_H

#include "graph/backend.h"
#include "graph/node_params.h"

typedef struct infd_cpu_kernel infd_cpu_kernel;

struct infd_cpu_kernel {
    infd_kernel base; /* base.ops is &infd_cpu_backend */
    /* Runs the kernel; see infd_backend_ops.run for the rules. */
    void (*run)(const infd_cpu_kernel *k, const infd_kernel_io *io);
    /* Frees what compile made, except the kernel memory itself (NULL: nothing). */
    void (*fini)(infd_cpu_kernel *k);
};

typedef struct infd_cpu_op {
    const char *op_type; /* ONNX op type in the default domain; NULL ends a table */
    /* Accepts or declines a node (dtypes, attributes, ranks). NULL: accepts
     * every node of op_type. On decline, says why in `why` (nullable). */
    bool (*supports)(const infd_kernel_args *args, infd_error *why);
    infd_status (*compile)(const infd_kernel_args *args, infd_kernel **out, infd_error *err);
    /* Optional layout hooks (see infd_backend_ops): NULL means plain only. */
    bool (*produces_opaque)(const infd_kernel_args *args);
    bool (*accepts_opaque)(const infd_kernel_args *args, int i);
} infd_cpu_op;

extern const infd_cpu_op infd_cpu_ops_dnnl[];

/* backend.h's layout_stacks for the oneDNN layouts (dnnl_common.c): the
 * plain blocked ones with dim 0 outermost. */
bool infd_dnnl_layout_stacks(const void *layout);
extern const infd_cpu_op infd_cpu_ops_ref[];

/* A zeroed kernel of `size` bytes (>= sizeof(infd_cpu_kernel)) with base.ops
 * set and base.name = `name` (a static string); NULL on out of memory.
 * Freed by the backend's destroy_kernel after calling fini. */
infd_cpu_kernel *infd_cpu_kernel_new(size_t size, const char *name,
                                     void (*run)(const infd_cpu_kernel *, const infd_kernel_io *),
                                     void (*fini)(infd_cpu_kernel *));

#endif /* INFD_BACKENDS_CPU_OPS_H */
