/*
 * cpu_backend.c - the CPU backend's vtable: finds an implementation of a
 * node in the op tables (oneDNN first, then our own kernels) and forwards
 * run and destroy to the kernel's own functions.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_ops.h"
#include "core/alloc.h"
#include "core/common.h"

/* The first entry of the op tables that accepts the node, or NULL with the
 * last decline's reason (or "no CPU kernel") in `why`. */
static const infd_cpu_op *find_op(const infd_kernel_args *a, infd_error *why)
{
    const infd_cpu_op *const tables[] = { infd_cpu_ops_dnnl, infd_cpu_ops_ref };
    int seen = 0;
    infd_error last = { 0 };
    if (a->node->domain[0] != '\0') {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED, "operator domain '%s' is not supported",
                        a->node->domain);
        return NULL;
    }
    for (size_t t = 0; t < INFD_ARRAY_SIZE(tables); t++) {
        for (const infd_cpu_op *op = tables[t]; op->op_type; op++) {
            if (strcmp(op->op_type, a->node->op_type) != 0)
                continue;
            seen = 1;
            if (!op->supports || op->supports(a, &last))
                return op;
        }
    }
    if (seen) {
        if (why)
            *why = last;
    } else {
        infd_node_error(a, why, INFD_STATUS_UNIMPLEMENTED,
                        "operator %s is not supported on the CPU", a->node->op_type);
    }
    return NULL;
}

static bool cpu_supports(const infd_kernel_args *a, infd_error *why)
{
    return find_op(a, why) != NULL;
}

static infd_status cpu_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    const infd_cpu_op *op = find_op(a, err);
    if (!op)
        return err ? err->code : INFD_STATUS_UNIMPLEMENTED;
    return op->compile(a, out, err);
}

static void cpu_run(const infd_kernel *k, const infd_kernel_io *io)
{
    const infd_cpu_kernel *ck = (const infd_cpu_kernel *)k;
    ck->run(ck, io);
}

static void cpu_destroy_kernel(infd_kernel *k)
{
    if (!k)
        return;
    infd_cpu_kernel *ck = (infd_cpu_kernel *)k;
    if (ck->fini)
        ck->fini(ck);
    infd_free(ck);
}

static bool cpu_produces_opaque(const infd_kernel_args *a)
{
    const infd_cpu_op *op = find_op(a, NULL);
    return op && op->produces_opaque && op->produces_opaque(a);
}

static bool cpu_accepts_opaque(const infd_kernel_args *a, int i)
{
    const infd_cpu_op *op = find_op(a, NULL);
    return op && op->accepts_opaque && op->accepts_opaque(a, i);
}

const infd_backend_ops infd_cpu_backend = {
    .version = INFD_BACKEND_OPS_VERSION,
    .size = sizeof(infd_backend_ops),
    .name = "cpu",
    .supports = cpu_supports,
    .compile = cpu_compile,
    .run = cpu_run,
    .destroy_kernel = cpu_destroy_kernel,
    .produces_opaque = cpu_produces_opaque,
    .accepts_opaque = cpu_accepts_opaque,
    .layout_stacks = infd_dnnl_layout_stacks,
};

infd_cpu_kernel *infd_cpu_kernel_new(size_t size, const char *name,
                                     void (*run)(const infd_cpu_kernel *, const infd_kernel_io *),
                                     void (*fini)(infd_cpu_kernel *))
{
    INFD_ASSERT(size >= sizeof(infd_cpu_kernel));
    infd_cpu_kernel *k = infd_calloc(1, size);
    if (!k)
        return NULL;
    k->base.ops = &infd_cpu_backend;
    k->base.name = name;
    k->run = run;
    k->fini = fini;
    return k;
}
