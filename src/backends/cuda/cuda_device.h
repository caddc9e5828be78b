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

/* CUDA IPC (what Triton's CUDA shared memory is built on; the handle is a
 * cudaIpcMemHandle_t's INFD_CUDA_IPC_HANDLE_BYTES bytes). Each returns 0, or
 * -1 with the driver's reason in `why`.
 *   open: device `index`'s memory another process exported, mapped here
 *         (cudaIpcOpenMemHandle with peer access enabled lazily), and in
 *         *bytes how much of the allocation lies from *out on;
 *   close: gives a mapping from open back;
 *   handle: the handle of memory this process allocated (cudaMalloc), for
 *           another process to open;
 *   memcpy: `bytes` between any two of host and device memory (unified
 *           addressing tells which), waited for by this thread only: not a
 *           device-wide synchronisation, so other streams' work goes on. */
#define INFD_CUDA_IPC_HANDLE_BYTES 64
int infd_cuda_ipc_open(int index, const void *handle, void **out, size_t *bytes, char *why,
                       size_t n);
void infd_cuda_ipc_close(int index, void *ptr);
int infd_cuda_ipc_handle(int index, const void *dev, void *handle, char *why, size_t n);
int infd_cuda_memcpy(int index, void *dst, const void *src, size_t bytes, char *why, size_t n);
/* As infd_cuda_memcpy, without the wait: queued on the thread's own stream
 * of device `index`, which infd_cuda_memcpy_wait waits for. */
int infd_cuda_memcpy_async(int index, void *dst, const void *src, size_t bytes, char *why,
                           size_t n);
int infd_cuda_memcpy_wait(int index, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_DEVICE_H */
