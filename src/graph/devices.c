/*
 * devices.c - which devices the engine can run on (engine.h).
 *
 * The engine asks each backend; the CUDA backend is present only in builds
 * where nvcc was found (INFD_HAVE_CUDA). Plan files (planfile.c) record
 * the device description and the library versions from here, and compare
 * them on load.
 */
#include <stdio.h>
#include <string.h>

#include "graph/backend.h"
#include "graph/planfile.h"
#include "infd/engine.h"

#ifdef INFD_HAVE_CUDA
#include "backends/cuda/cuda_device.h"
#endif

const infd_backend_ops *infd_backend_for(infd_device_kind kind)
{
    switch (kind) {
    case INFD_DEVICE_CPU:
        return &infd_cpu_backend;
    case INFD_DEVICE_CUDA:
#ifdef INFD_HAVE_CUDA
        return &infd_cuda_backend;
#else
        return NULL;
#endif
    }
    return NULL;
}

bool infd_engine_has_backend(infd_device_kind kind)
{
    return infd_backend_for(kind) != NULL;
}

/* The device backend of `kind` when this build has one and it sees a
 * device, or NULL with UNAVAILABLE ("`what` needs a device backend ...")
 * in err. */
static const infd_backend_ops *backend_with_device(infd_device_kind kind, const char *what,
                                                   infd_error *err)
{
    const infd_backend_ops *b = infd_backend_for(kind);
    if (!b || !infd_backend_is_device(b)) {
        infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                       "%s needs a device backend; this build has none for device kind %d", what,
                       (int)kind);
        return NULL;
    }
    infd_error why = { 0 };
    if (infd_engine_device_count(kind, &why) == 0) {
        infd_error_set(err, INFD_STATUS_UNAVAILABLE, "no device for %s: %s", what, why.msg);
        return NULL;
    }
    return b;
}

void *infd_engine_host_alloc(infd_device_kind kind, size_t bytes, infd_error *err)
{
    const infd_backend_ops *b = backend_with_device(kind, "page-locked memory", err);
    return b ? b->alloc(INFD_BACKEND_MEM_HOST, bytes, err) : NULL;
}

void infd_engine_host_free(infd_device_kind kind, void *ptr)
{
    const infd_backend_ops *b = infd_backend_for(kind);
    if (ptr && b && infd_backend_is_device(b))
        b->free(INFD_BACKEND_MEM_HOST, ptr);
}

/* The device backend of `kind` with device `index` current on this
 * thread, or NULL with the reason in err. */
static const infd_backend_ops *device_backend(infd_device_kind kind, int index, infd_error *err)
{
    const infd_backend_ops *b = backend_with_device(kind, "device memory", err);
    return b && infd_backend_set_device(b, index, err) == INFD_STATUS_OK ? b : NULL;
}

void *infd_engine_device_alloc(infd_device_kind kind, int index, size_t bytes, infd_error *err)
{
    const infd_backend_ops *b = device_backend(kind, index, err);
    return b ? b->alloc(INFD_BACKEND_MEM_DEVICE, bytes, err) : NULL;
}

void infd_engine_device_free(infd_device_kind kind, int index, void *ptr)
{
    const infd_backend_ops *b = ptr ? device_backend(kind, index, NULL) : NULL;
    if (b)
        b->free(INFD_BACKEND_MEM_DEVICE, ptr);
}

infd_status infd_engine_device_copy(infd_device_kind kind, int index, void *dst, const void *src,
                                    size_t bytes, bool to_device, infd_error *err)
{
    infd_error local = { 0 }, *e = err ? err : &local;
    const infd_backend_ops *b = device_backend(kind, index, e);
    if (!b)
        return e->code;
    if (bytes && (!dst || !src))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "a device copy needs two buffers");
    if (bytes)
        b->copy(dst, src, bytes, to_device ? INFD_BACKEND_COPY_H2D : INFD_BACKEND_COPY_D2H, NULL);
    return b->sync(NULL, err);
}

/* Device `index` of `kind` when this build can share its memory between
 * processes (CUDA), else the reason. */
static infd_status ipc_device(infd_device_kind kind, int index, infd_error *err)
{
    if (!backend_with_device(kind, "memory shared between processes", err))
        return err ? err->code : INFD_STATUS_UNAVAILABLE;
    int n = infd_engine_device_count(kind, NULL);
    if (index < 0 || index >= n)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "device %d does not exist (this machine has %d)", index, n);
    return INFD_STATUS_OK;
}

infd_status infd_engine_ipc_handle(infd_device_kind kind, int index, const void *dev, void *handle,
                                   size_t handle_bytes, infd_error *err)
{
    infd_status st = ipc_device(kind, index, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (!dev || !handle || handle_bytes < INFD_IPC_HANDLE_BYTES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "an IPC handle needs device memory and %d bytes for the handle",
                              INFD_IPC_HANDLE_BYTES);
#ifdef INFD_HAVE_CUDA
    char why[256];
    if (infd_cuda_ipc_handle(index, dev, handle, why, sizeof(why)) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s", why);
    return INFD_STATUS_OK;
#else
    return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "this build has no CUDA backend");
#endif
}

void *infd_engine_ipc_open(infd_device_kind kind, int index, const void *handle,
                           size_t handle_bytes, size_t *bytes, infd_error *err)
{
    *bytes = 0;
    if (ipc_device(kind, index, err) != INFD_STATUS_OK)
        return NULL;
    if (!handle || handle_bytes != INFD_IPC_HANDLE_BYTES) {
        infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "a CUDA IPC handle is %d bytes, not %zu",
                       INFD_IPC_HANDLE_BYTES, handle ? handle_bytes : 0);
        return NULL;
    }
#ifdef INFD_HAVE_CUDA
    char why[256];
    void *p = NULL;
    if (infd_cuda_ipc_open(index, handle, &p, bytes, why, sizeof(why)) != 0)
        infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s", why);
    return p;
#else
    return NULL;
#endif
}

void infd_engine_ipc_close(infd_device_kind kind, int index, void *ptr)
{
#ifdef INFD_HAVE_CUDA
    if (ptr && kind == INFD_DEVICE_CUDA)
        infd_cuda_ipc_close(index, ptr);
#else
    (void)kind;
    (void)index;
    (void)ptr;
#endif
}

/* A copy of `bytes` told its direction by the pointers, waited for when
 * `wait` (infd_engine_memcpy), else queued (infd_engine_memcpy_async). */
static infd_status engine_copy(infd_device_kind kind, int index, void *dst, const void *src,
                               size_t bytes, bool wait, infd_error *err)
{
    infd_status st = ipc_device(kind, index, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (bytes && (!dst || !src))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "a device copy needs two buffers");
    if (!bytes)
        return INFD_STATUS_OK;
#ifdef INFD_HAVE_CUDA
    char why[256];
    if ((wait ? infd_cuda_memcpy(index, dst, src, bytes, why, sizeof(why))
              : infd_cuda_memcpy_async(index, dst, src, bytes, why, sizeof(why))) != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "%s", why);
    return INFD_STATUS_OK;
#else
    (void)wait;
    return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "this build has no CUDA backend");
#endif
}

infd_status infd_engine_memcpy(infd_device_kind kind, int index, void *dst, const void *src,
                               size_t bytes, infd_error *err)
{
    return engine_copy(kind, index, dst, src, bytes, true, err);
}

infd_status infd_engine_memcpy_async(infd_device_kind kind, int index, void *dst, const void *src,
                                     size_t bytes, infd_error *err)
{
    return engine_copy(kind, index, dst, src, bytes, false, err);
}

infd_status infd_engine_memcpy_wait(infd_device_kind kind, int index, infd_error *err)
{
    infd_status st = ipc_device(kind, index, err);
    if (st != INFD_STATUS_OK)
        return st;
#ifdef INFD_HAVE_CUDA
    char why[256];
    if (infd_cuda_memcpy_wait(index, why, sizeof(why)) != 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "%s", why);
    return INFD_STATUS_OK;
#else
    return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "this build has no CUDA backend");
#endif
}

int infd_engine_device_count(infd_device_kind kind, infd_error *err)
{
    switch (kind) {
    case INFD_DEVICE_CPU:
        return 1;
    case INFD_DEVICE_CUDA: {
#ifdef INFD_HAVE_CUDA
        char why[256] = "";
        int n = infd_cuda_device_count(why, sizeof(why));
        if (n == 0)
            infd_error_set(err, INFD_STATUS_UNAVAILABLE, "%s", why); /* callers frame it */
        return n;
#else
        infd_error_set(err, INFD_STATUS_UNAVAILABLE, "this build has no CUDA backend");
        return 0;
#endif
    }
    }
    infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "unknown device kind %d", (int)kind);
    return 0;
}

/* The "model name" line of /proc/cpuinfo, or "cpu". */
static void cpu_model(char *buf, size_t n)
{
    char line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, n, "cpu");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon += 1 + (colon[1] == ' ');
                colon[strcspn(colon, "\n")] = '\0';
                snprintf(buf, n, "%s", colon);
            }
            break;
        }
    }
    fclose(f);
}

infd_status infd_engine_device_describe(infd_device_kind kind, int index, char *buf, size_t n,
                                        infd_error *err)
{
    if (kind == INFD_DEVICE_CPU && index == 0) {
        cpu_model(buf, n);
        return INFD_STATUS_OK;
    }
#ifdef INFD_HAVE_CUDA
    if (kind == INFD_DEVICE_CUDA) {
        if (infd_cuda_device_describe(index, buf, n) == 0)
            return INFD_STATUS_OK;
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "%s", buf);
    }
#endif
    return infd_error_set(err, INFD_STATUS_NOT_FOUND, "no %s device %d",
                          kind == INFD_DEVICE_CUDA ? "CUDA" : "CPU", index);
}

void infd_devices_libs(infd_device_kind kind, char *buf, size_t n)
{
    if (n)
        buf[0] = '\0';
#ifdef INFD_HAVE_CUDA
    if (kind == INFD_DEVICE_CUDA)
        infd_cuda_library_versions(buf, n);
#else
    (void)kind;
#endif
}
