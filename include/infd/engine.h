/*
 * engine.h - the public API of infd's inference engine.
 *
 * The engine turns an ONNX model into a plan for one backend (CPU through
 * oneDNN and our own kernels, or CUDA) and runs it through per-thread
 * contexts. This header grows with the engine (issue #3); today it says which
 * devices this build and this machine offer. It includes only infd.h.
 */
#ifndef INFD_ENGINE_H
#define INFD_ENGINE_H

#include "infd/infd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum infd_device_kind {
    INFD_DEVICE_CPU = 0,
    INFD_DEVICE_CUDA = 1,
} infd_device_kind;

/* True when the backend for `kind` was compiled into this build (CUDA: nvcc
 * was found at configure time). */
INFD_API bool infd_engine_has_backend(infd_device_kind kind);

/* Devices of `kind` usable now: 1 for the CPU; for CUDA the number of GPUs
 * the driver reports, 0 when the build has no CUDA, there is no driver or no
 * GPU (the reason goes to `err` as UNAVAILABLE, with the count still 0).
 * Cost: the first CUDA call initialises the driver (tens of ms). */
INFD_API int infd_engine_device_count(infd_device_kind kind, infd_error *err);

/* Writes a one-line description of device `index` of `kind` ("NVIDIA H100 80GB
 * HBM3, sm_90, 79.1 GiB" or the CPU's model name) into `buf`. */
INFD_API infd_status infd_engine_device_describe(infd_device_kind kind, int index, char *buf,
                                                 size_t n, infd_error *err);

#ifdef __cplusplus
}
#endif

#endif /* INFD_ENGINE_H */
