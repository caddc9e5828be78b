/*
 * cuda_device.h - C-linkage device queries of the CUDA backend.
 *
 * Compiled only when nvcc is found (INFD_HAVE_CUDA). Every function tolerates
 * a machine without a driver or GPU: it reports zero devices and a reason,
 * never aborts. No CUDA type appears here.
 */
#ifndef INFD_BACKENDS_CUDA_DEVICE_H
#define INFD_BACKENDS_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices; on failure 0, with the driver's reason written into
 * `why` (`n` bytes) when `why` is not NULL. */
int infd_cuda_device_count(char *why, size_t n);

/* "NAME, sm_XY, N.N GiB" for device `index`; returns 0 on success, -1 with the
 * reason in `buf` otherwise. */
int infd_cuda_device_describe(int index, char *buf, size_t n);

/* The versions of the libraries whose choices a plan file's tuning records
 * hold, as this process loaded them: "cuDNN 9.13.0, cuBLASLt 13.1.0, CUDA
 * runtime 13.0" (entries "NAME VERSION" joined by ", "; the version is the
 * entry's last word). cuDNN's algorithm ids and cuBLASLt's heuristic
 * candidates are only valid for the library that listed them. Needs no
 * GPU or driver. */
void infd_cuda_library_versions(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_DEVICE_H */
