/*
 * ref_ops.c - the table of CPU operators implemented by our own C kernels.
 * Implementations live in ref_*.c beside this file.
 */
#include "backends/cpu/cpu_ops.h"

const infd_cpu_op infd_cpu_ops_ref[] = {
    { NULL, NULL, NULL },
};
