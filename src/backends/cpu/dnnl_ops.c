/*
 * dnnl_ops.c - the table of CPU operators implemented on oneDNN primitives.
 * Implementations live in dnnl_*.c beside this file.
 */
#include "backends/cpu/cpu_ops.h"

const infd_cpu_op infd_cpu_ops_dnnl[] = {
    { NULL, NULL, NULL },
};
