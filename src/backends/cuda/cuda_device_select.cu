/*
 * cuda_device_select.cu - the CUDA backend's set_device slot (graph/backend.h):
 * makes one GPU current on the calling thread, so that a plan built with
 * infd_plan_options.device_index lives and runs on that GPU.
 *
 * The CUDA runtime keeps the current device per host thread, and every
 * allocation, stream, library handle and launch acts on it. plan.c calls
 * this before compiling a plan, before creating or destroying a context or
 * a plan, and at the start of every run, so instance threads of models on
 * different GPUs (and the loading thread, which builds them in turn) never
 * depend on what the thread did before.
 *
 * Cost per run: one cudaGetDevice (a thread-local read) when the device is
 * already current, which is the steady state of an instance thread; the
 * device count is read once per process (it cannot change while the
 * runtime is initialised: CUDA_VISIBLE_DEVICES is read at init).
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda_runtime.h"

/* Devices the runtime reports; -1 until read (relaxed: every thread reads
 * the same value, and a race only repeats the query). */
static int g_device_count = -1;

extern "C" infd_status infd_cuda_set_device(int index, infd_error *err)
{
    int count = __atomic_load_n(&g_device_count, __ATOMIC_RELAXED);
    if (count < 0) {
        cudaError_t rc = cudaGetDeviceCount(&count);
        if (rc != cudaSuccess) {
            cudaGetLastError();
            return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "no usable CUDA device: %s",
                                  cudaGetErrorString(rc));
        }
        __atomic_store_n(&g_device_count, count, __ATOMIC_RELAXED);
    }
    if (index < 0 || index >= count)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "GPU %d does not exist (this machine has %d)", index, count);
    /* A fresh thread reads device 0 as current before any context is bound
     * to it, and cuDNN's graph-API execute (driver API underneath) then
     * fails with "invalid device context": set it once per thread. */
    static __thread int bound = -1;
    int cur = -1;
    if (bound == index && cudaGetDevice(&cur) == cudaSuccess && cur == index)
        return INFD_STATUS_OK;
    cudaError_t rc = cudaSetDevice(index);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "GPU %d: cudaSetDevice: %s", index,
                              cudaGetErrorString(rc));
    }
    bound = index;
    return INFD_STATUS_OK;
}
