/*
 * cuda_shared.h - the CUDA kernels' device weights, one copy per model and
 * GPU (graph/weights.h).
 *
 * Every weight a CUDA kernel keeps on the device (FP16 or BF16 converted,
 * KRSC-ordered, or plain FP32) is uploaded by one function, copy_up in
 * cuda_nhwc.cu. While the backend compiles a kernel (cuda_backend.c sets
 * the plan's weights as this thread's context), copy_up takes the device
 * copy from the model's shared forms: keyed by the converted bytes and the
 * GPU, so the plans of other batch sizes get the same device buffer instead
 * of uploading their own. A registry maps each buffer handed out to its
 * form; infd_cuda_weights_free releases that reference (the last one frees
 * the memory) and frees any other buffer with cudaFree, so kernels free
 * their weights the same way whether they are shared or not.
 */
#ifndef INFD_BACKENDS_CUDA_SHARED_H
#define INFD_BACKENDS_CUDA_SHARED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets (weights non-NULL) or clears (NULL) this thread's context: the model
 * whose kernels are being compiled. The type is engine.h's infd_weights. */
void infd_cuda_shared_begin(void *weights);

/* A device copy of `bytes` bytes at `host`: shared through the context's
 * weights when one is set, else a plain cudaMalloc and copy. NULL with the
 * reason in `why` on failure. */
void *infd_cuda_shared_upload(const void *host, size_t bytes, char *why, size_t why_n);

/* Frees device weights from infd_cuda_shared_upload (or any cudaMalloc'ed
 * buffer). NULL is a no-op. */
void infd_cuda_weights_free(void *dev);

#ifdef __cplusplus
}
#endif

#endif /* INFD_BACKENDS_CUDA_SHARED_H */
