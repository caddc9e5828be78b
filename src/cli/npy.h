/*
 * npy.h - reading and writing NumPy .npy files (format versions 1-3), the
 * tensor exchange format of `infd run` and the tests.
 */
#ifndef INFD_CLI_NPY_H
#define INFD_CLI_NPY_H

#include "infd/infd.h"

/* Reads `path` into `t`, which then owns its data (infd_tensor_fini).
 * Little-endian, C-order arrays of bool, (u)int8..64, float16/32/64. */
infd_status infd_npy_read(const char *path, infd_tensor *t, infd_error *err);

/* Writes `t` to `path` (format 1.0). BF16 is written as uint16 bits. */
infd_status infd_npy_write(const char *path, const infd_tensor *t, infd_error *err);

#endif /* INFD_CLI_NPY_H */
