/*
 * cuda_shared.c - shared device weights of the CUDA kernels (cuda_shared.h).
 *
 * The registry is a small array under a mutex: one entry per reference
 * handed out (a few hundred per model), looked up when a kernel frees its
 * weights at plan destruction, never on a run's path.
 */
#include "cuda_shared.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>

#include "core/alloc.h"
#include "graph/weights.h"

static _Thread_local infd_weights *current;

typedef struct entry {
    void *dev;
    infd_weight_form *form;
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry *entries;
static size_t n_entries, cap_entries;

void infd_cuda_shared_begin(void *weights)
{
    current = weights;
}

typedef struct upload_ctx {
    const void *host;
    size_t bytes;
} upload_ctx;

/* Plain upload; the reason in why. */
static void *upload(const void *host, size_t bytes, char *why, size_t why_n)
{
    void *d = NULL;
    cudaError_t rc = cudaMalloc(&d, bytes ? bytes : 1);
    if (rc == cudaSuccess && bytes)
        rc = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    if (rc != cudaSuccess) {
        snprintf(why, why_n, "uploading constants: %s", cudaGetErrorString(rc));
        cudaGetLastError();
        if (d)
            cudaFree(d);
        return NULL;
    }
    return d;
}

static infd_status make_upload(void *ctx, void **data, size_t *bytes, infd_error *err)
{
    const upload_ctx *u = ctx;
    char why[256] = "";
    *data = upload(u->host, u->bytes, why, sizeof(why));
    if (!*data)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "CUDA: %s", why);
    *bytes = u->bytes;
    return INFD_STATUS_OK;
}

static void free_upload(void *data, int32_t device, const void *arg)
{
    (void)arg;
    int was = -1;
    if (cudaGetDevice(&was) != cudaSuccess)
        was = -1;
    cudaSetDevice(device);
    cudaFree(data);
    if (was >= 0 && was != device)
        cudaSetDevice(was);
    cudaGetLastError();
}

void *infd_cuda_shared_upload(const void *host, size_t bytes, char *why, size_t why_n)
{
    if (!current)
        return upload(host, bytes, why, why_n);
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        cudaGetLastError();
        return upload(host, bytes, why, why_n);
    }
    infd_form_key k;
    infd_form_key_init(&k, host, bytes, "cuda:weights", NULL, 0, device);
    upload_ctx u = { host, bytes };
    infd_weight_form *f = NULL;
    infd_error err = { 0 };
    if (infd_weights_form(current, &k, make_upload, &u, free_upload, NULL, "CUDA weights", &f,
                          &err) != INFD_STATUS_OK) {
        snprintf(why, why_n, "%s", err.msg);
        return NULL;
    }
    void *d = infd_weight_form_data(f);
    pthread_mutex_lock(&mu);
    if (n_entries == cap_entries) {
        size_t cap = cap_entries ? cap_entries * 2 : 256;
        entry *e = infd_realloc(entries, cap * sizeof(*e));
        if (!e) {
            pthread_mutex_unlock(&mu);
            infd_weight_form_release(f);
            snprintf(why, why_n, "out of memory");
            return NULL;
        }
        entries = e;
        cap_entries = cap;
    }
    entries[n_entries++] = (entry){ d, f };
    pthread_mutex_unlock(&mu);
    return d;
}

void infd_cuda_weights_free(void *dev)
{
    if (!dev)
        return;
    infd_weight_form *f = NULL;
    pthread_mutex_lock(&mu);
    for (size_t i = n_entries; i-- > 0;) {
        if (entries[i].dev == dev) {
            f = entries[i].form;
            entries[i] = entries[--n_entries];
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (f)
        infd_weight_form_release(f); /* the last holder frees it (free_upload) */
    else
        cudaFree(dev);
}
