/*
 * cuda_runtime.cu - memory, streams, copies and error reporting for the CUDA
 * backend (cuda_runtime.h).
 *
 * Errors of enqueued work: CUDA reports launch and copy errors at the next
 * synchronisation, and a kernel's run() cannot return one, so library
 * statuses that a run() sees (cuDNN, cuBLASLt) are recorded on the stream
 * object (first one wins) and infd_cuda_sync reports them with the CUDA
 * error state. Each GPU has one compile stream, shared by every plan being
 * compiled there and serialised by a mutex (tuning times kernels on it).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_runtime_impl.h"

extern "C" {
#include "core/clock.h"
}

static void order_leave(infd_cuda_stream *st);

extern "C" int infd_cuda_check_device(char *why, size_t n)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        snprintf(why, n, "%s", cudaGetErrorString(rc));
        cudaGetLastError();
        return -1;
    }
    if (count == 0) {
        snprintf(why, n, "the driver reports no GPU");
        return -1;
    }
    if (infd_cuda_libs_load(why, n) != 0)
        return -1;
    size_t v = cudnnGetVersion();
    if (v < 90000) {
        snprintf(why, n, "cuDNN %zu is loaded; infd needs cuDNN 9", v);
        return -1;
    }
    return 0;
}

extern "C" void *infd_cuda_alloc(int host, size_t bytes, char *why, size_t n)
{
    void *p = NULL;
    cudaError_t rc = host ? cudaMallocHost(&p, bytes) : cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
        snprintf(why, n, "%s allocating %zu bytes of %s memory", cudaGetErrorString(rc), bytes,
                 host ? "pinned host" : "device");
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void infd_cuda_free(int host, void *p)
{
    if (!p)
        return;
    if (host)
        cudaFreeHost(p);
    else
        cudaFree(p);
}

extern "C" void *infd_cuda_stream_create(char *why, size_t n)
{
    infd_cuda_stream *st = (infd_cuda_stream *)calloc(1, sizeof(*st));
    if (!st) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    cudaError_t rc = cudaGetDevice(&st->dev);
    if (rc == cudaSuccess)
        rc = cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking);
    if (rc != cudaSuccess) {
        snprintf(why, n, "cudaStreamCreate: %s", cudaGetErrorString(rc));
        cudaGetLastError();
        free(st);
        return NULL;
    }
    rc = cudaEventCreateWithFlags(&st->done, cudaEventBlockingSync | cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        snprintf(why, n, "cudaEventCreate: %s", cudaGetErrorString(rc));
        cudaGetLastError();
        st->done = NULL;
        infd_cuda_stream_destroy(st);
        return NULL;
    }
    cudnnStatus_t ds = cudnnCreate(&st->dnn);
    if (ds != CUDNN_STATUS_SUCCESS) {
        snprintf(why, n, "cudnnCreate: %s", cudnnGetErrorString(ds));
        infd_cuda_stream_destroy(st);
        return NULL;
    }
    cudnnSetStream(st->dnn, st->s);
    cublasStatus_t bs = cublasLtCreate(&st->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, n, "cublasLtCreate: status %d", (int)bs);
        st->lt = NULL;
        infd_cuda_stream_destroy(st);
        return NULL;
    }
    return st;
}

extern "C" void infd_cuda_stream_destroy(void *stream)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    if (!st)
        return;
    if (st->s)
        cudaStreamSynchronize(st->s);
    order_leave(st);
    if (st->graph)
        cudaGraphExecDestroy(st->graph);
    if (st->lt)
        cublasLtDestroy(st->lt);
    if (st->dnn)
        cudnnDestroy(st->dnn);
    if (st->done)
        cudaEventDestroy(st->done);
    if (st->s)
        cudaStreamDestroy(st->s);
    free(st);
}

extern "C" void infd_cuda_copy(void *dst, const void *src, size_t bytes, int dir, void *stream)
{
    cudaMemcpyKind kind = dir == 0   ? cudaMemcpyHostToDevice
                          : dir == 1 ? cudaMemcpyDeviceToHost
                          : dir == 2 ? cudaMemcpyDeviceToDevice
                                     : cudaMemcpyDefault;
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    if (!st) {
        cudaMemcpy(dst, src, bytes, kind); /* errors stay pending for the sync */
        return;
    }
    cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, kind, st->s);
    if (rc != cudaSuccess)
        infd_cuda_stream_fail(st, "cudaMemcpyAsync of %zu bytes: %s", bytes,
                              cudaGetErrorString(rc));
}

extern "C" void infd_cuda_stream_fail(void *stream, const char *fmt, ...)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    if (!st || st->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err, sizeof(st->err), fmt, ap);
    va_end(ap);
    st->failed = 1;
}

/* Waits shorter than this poll; longer ones sleep. */
#define SYNC_POLL_NS 1000000LL

/* Waits for the stream's work. cudaStreamSynchronize under the default
 * schedule spins (yielding) for the whole wait: four served ResNet-50
 * instances, waiting about 10 ms per batch, spent about a core of a CPU the
 * HTTP loops and clients needed (2.2 s of CPU each per 6.5 s run, 0.7 s
 * when sleeping). Sleeping on a blocking-sync event
 * instead cost about 150 us of wake-up on the H100 machine (batch-1 p50
 * 0.40 -> 0.56 ms). So: when the previous wait on this stream was short,
 * poll (giving up to sleep past twice SYNC_POLL_NS); otherwise sleep. */
static cudaError_t wait_stream(infd_cuda_stream *st)
{
    cudaError_t rc = cudaEventRecord(st->done, st->s);
    if (rc != cudaSuccess)
        return rc;
    long long t0 = (long long)infd_clock_ns();
    if (st->last_wait_ns < SYNC_POLL_NS) {
        while ((rc = cudaEventQuery(st->done)) == cudaErrorNotReady)
            if ((long long)infd_clock_ns() - t0 > 2 * SYNC_POLL_NS) {
                rc = cudaEventSynchronize(st->done);
                break;
            }
    } else {
        rc = cudaEventSynchronize(st->done);
    }
    st->last_wait_ns = (long long)infd_clock_ns() - t0;
    return rc;
}

extern "C" int infd_cuda_sync(void *stream, char *why, size_t n)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    cudaError_t rc = st ? wait_stream(st) : cudaDeviceSynchronize();
    if (st)
        order_leave(st);
    if (rc == cudaSuccess)
        rc = cudaGetLastError();
    if (st && st->failed) {
        snprintf(why, n, "%s", st->err);
        st->failed = 0;
        return -1;
    }
    if (rc != cudaSuccess) {
        snprintf(why, n, "CUDA: %s", cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}

/* Thread-local capture: other threads (contexts of other plans, a plan being
 * compiled) keep allocating and synchronising while this one captures. */
extern "C" int infd_cuda_capture_begin(void *stream, char *why, size_t n)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    cudaError_t rc = cudaStreamBeginCapture(st->s, cudaStreamCaptureModeThreadLocal);
    if (rc != cudaSuccess) {
        snprintf(why, n, "cudaStreamBeginCapture: %s", cudaGetErrorString(rc));
        cudaGetLastError();
        return -1;
    }
    return 0;
}

extern "C" int infd_cuda_capture_end(void *stream, char *why, size_t n)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t rc = cudaStreamEndCapture(st->s, &graph);
    if (rc == cudaSuccess && st->failed) {
        snprintf(why, n, "%s", st->err);
        st->failed = 0;
        rc = cudaErrorStreamCaptureInvalidated;
    } else if (rc != cudaSuccess) {
        snprintf(why, n, "cudaStreamEndCapture: %s", cudaGetErrorString(rc));
    } else {
        rc = cudaGraphInstantiate(&exec, graph, 0);
        if (rc != cudaSuccess)
            snprintf(why, n, "cudaGraphInstantiate: %s", cudaGetErrorString(rc));
    }
    if (graph)
        cudaGraphDestroy(graph);
    cudaGetLastError();
    if (rc != cudaSuccess)
        return -1;
    if (st->graph)
        cudaGraphExecDestroy(st->graph);
    st->graph = exec;
    return 0;
}

extern "C" void infd_cuda_replay(void *stream)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    cudaError_t rc = cudaGraphLaunch(st->graph, st->s);
    if (rc != cudaSuccess)
        infd_cuda_stream_fail(st, "cudaGraphLaunch: %s", cudaGetErrorString(rc));
}

#define MAX_DEVICES 64

/* The run order of each GPU (backend.h, order_begin). Left to the device,
 * the kernels of two contexts' runs share the GPU; sharing evens out their
 * progress, so both runs end at about the same time and then both copy
 * their next inputs with nothing to compute: ResNet-50 FP16 at batch 256,
 * 2 contexts, H200, ran at 33.9k images/s from pinned host memory against
 * 37.8k from device memory (0.79 ms of each batch's 2.8 ms copy exposed).
 * In order, each run's kernels wait on an event recorded after the kernels
 * of the run `width` places before it, so at most `width` runs compute at
 * once while the other contexts copy. The width is half the runs in flight
 * on the device (enqueued and not yet synchronised), rounded up: with 2
 * contexts one computes while the other copies (37.7k images/s from host
 * memory); with 4, two compute at once, which small batches need to fill
 * the GPU (MobileNetV2 at batch 32: 49.5k against 41.1k with one at once).
 * INFD_CUDA_ORDER=N fixes the width at N (at most ORDER_MAX), and 0 leaves
 * the runs to the device. The lock keeps each wait-launch-record in order;
 * what it covers only enqueues (a capture, once per context, also
 * instantiates). A wait names only work enqueued before it, so a width
 * that changes between runs orders them differently but never blocks. */
#define ORDER_MAX 8
typedef struct device_order {
    pthread_mutex_t mu;
    cudaEvent_t ev[ORDER_MAX]; /* ev[k % width]: recorded after run k's kernels */
    bool recorded[ORDER_MAX];
    unsigned long long next; /* the number of the next run */
    int slot;                /* the slot of the run between begin and end */
    int in_flight;           /* runs ordered and not yet synchronised (under mu) */
} device_order;
static device_order order[MAX_DEVICES];
static int order_fixed = -1;     /* INFD_CUDA_ORDER, or -1: half the runs in flight */
static __thread bool order_held; /* this thread is between order_begin and order_end */

/* One compile stream per GPU (made on first use, on that GPU: the caller
 * has made it current), each behind its own lock so GPUs compile in
 * parallel. The lock taken is remembered per thread for the unlock. */
static pthread_mutex_t compile_mu[MAX_DEVICES];
static void *compile_stream[MAX_DEVICES];
static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static __thread int compile_locked = -1;

/* Once per process: each GPU's compile and order locks, and INFD_CUDA_ORDER. */
static void device_locks_init(void)
{
    for (int i = 0; i < MAX_DEVICES; i++) {
        pthread_mutex_init(&compile_mu[i], NULL);
        pthread_mutex_init(&order[i].mu, NULL);
    }
    const char *e = getenv("INFD_CUDA_ORDER");
    if (e && *e) {
        int w = atoi(e);
        order_fixed = w < 0 ? 0 : w > ORDER_MAX ? ORDER_MAX : w;
    }
}

extern "C" void infd_cuda_order_begin(void *stream)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    pthread_once(&device_once, device_locks_init);
    if (order_fixed == 0 || st->dev < 0 || st->dev >= MAX_DEVICES)
        return;
    device_order *o = &order[st->dev];
    pthread_mutex_lock(&o->mu);
    order_held = true;
    if (!st->in_flight) {
        st->in_flight = 1;
        o->in_flight++;
    }
    int width = order_fixed > 0 ? order_fixed : (o->in_flight + 1) / 2;
    if (width > ORDER_MAX)
        width = ORDER_MAX;
    o->slot = (int)(o->next++ % (unsigned)width);
    cudaError_t rc = cudaSuccess;
    if (!o->ev[o->slot])
        rc = cudaEventCreateWithFlags(&o->ev[o->slot], cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        o->ev[o->slot] = NULL;
        infd_cuda_stream_fail(st, "cudaEventCreate: %s", cudaGetErrorString(rc));
    } else if (o->recorded[o->slot]) {
        rc = cudaStreamWaitEvent(st->s, o->ev[o->slot], 0);
        if (rc != cudaSuccess)
            infd_cuda_stream_fail(st, "cudaStreamWaitEvent: %s", cudaGetErrorString(rc));
    }
}

extern "C" void infd_cuda_order_end(void *stream)
{
    infd_cuda_stream *st = (infd_cuda_stream *)stream;
    if (order_fixed == 0 || st->dev < 0 || st->dev >= MAX_DEVICES)
        return;
    device_order *o = &order[st->dev];
    if (o->ev[o->slot]) {
        cudaError_t rc = cudaEventRecord(o->ev[o->slot], st->s);
        if (rc != cudaSuccess)
            infd_cuda_stream_fail(st, "cudaEventRecord: %s", cudaGetErrorString(rc));
        o->recorded[o->slot] = rc == cudaSuccess;
    }
    order_held = false;
    pthread_mutex_unlock(&o->mu);
}

/* The stream's ordered run is over (its sync returned): it no longer counts
 * toward the device's width. A profiled run syncs after each kernel, inside
 * its order_begin and order_end, with the lock already held. */
static void order_leave(infd_cuda_stream *st)
{
    if (!st->in_flight)
        return;
    device_order *o = &order[st->dev];
    if (!order_held)
        pthread_mutex_lock(&o->mu);
    o->in_flight--;
    if (!order_held)
        pthread_mutex_unlock(&o->mu);
    st->in_flight = 0;
}

extern "C" void *infd_cuda_compile_stream_lock(char *why, size_t n)
{
    int dev = 0;
    pthread_once(&device_once, device_locks_init);
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEVICES) {
        cudaGetLastError();
        snprintf(why, n, "no current CUDA device for compiling");
        return NULL;
    }
    pthread_mutex_lock(&compile_mu[dev]);
    if (!compile_stream[dev])
        compile_stream[dev] = infd_cuda_stream_create(why, n);
    if (!compile_stream[dev]) {
        pthread_mutex_unlock(&compile_mu[dev]);
        return NULL;
    }
    compile_locked = dev;
    return compile_stream[dev]; /* kept for the process: handles are costly to make */
}

extern "C" void infd_cuda_compile_stream_unlock(void)
{
    int dev = compile_locked;
    compile_locked = -1;
    if (dev >= 0)
        pthread_mutex_unlock(&compile_mu[dev]);
}

/* Warm-up. The first call a process makes into cuBLASLt for a data type
 * initializes that library's internals for the GPU (on the H200: 80-110 ms
 * for FP16, then 75-95 ms more for FP32), and so does the first cuDNN
 * convolution query (75-110 ms). A plan load paid each inside the compile
 * of the first kernel to need it, one after the other: a third of loading
 * ResNet-50 FP16 from a plan file (issue #6). The plan's helper thread
 * (prepare) starts them here on threads of their own, each with its own
 * handle, while the model is read and the compile stream is made; the
 * compile then finds the work done, or waits inside the library for the
 * rest of it. What each does is a query, no device memory and no kernel.
 * The plan joins them once its kernels are compiled (the backend's settle
 * slot, infd_cuda_warm_join), so none is still inside a library when the
 * process exits and the libraries are torn down: a short FP32 load that
 * exited with them running crashed there. */
#define N_WARM 3 /* cuBLASLt FP16, cuBLASLt FP32, cuDNN */

typedef struct warm_job {
    int dev, what;
} warm_job;

static pthread_mutex_t warm_mu = PTHREAD_MUTEX_INITIALIZER;
static bool warm_started[MAX_DEVICES];
static warm_job warm_jobs[MAX_DEVICES * N_WARM];
static pthread_t warm_threads[MAX_DEVICES * N_WARM];
static int n_warm_threads;

static void warm_cublaslt(cudaDataType_t dt)
{
    cublasLtHandle_t lt = NULL;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t l = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    if (cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&l, dt, 256, 256, 256) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS)
        cublasLtMatmulAlgoGetHeuristic(lt, op, l, l, l, l, pref, 1, &res, &n);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (l)
        cublasLtMatrixLayoutDestroy(l);
    if (op)
        cublasLtMatmulDescDestroy(op);
    if (lt)
        cublasLtDestroy(lt);
}

static void warm_cudnn(void)
{
    cudnnHandle_t h = NULL;
    cudnnTensorDescriptor_t x = NULL;
    cudnnFilterDescriptor_t w = NULL;
    cudnnConvolutionDescriptor_t c = NULL;
    size_t ws = 0;
    if (cudnnCreate(&h) == CUDNN_STATUS_SUCCESS &&
        cudnnCreateTensorDescriptor(&x) == CUDNN_STATUS_SUCCESS &&
        cudnnCreateFilterDescriptor(&w) == CUDNN_STATUS_SUCCESS &&
        cudnnCreateConvolutionDescriptor(&c) == CUDNN_STATUS_SUCCESS &&
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, 1, 16, 32, 32) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnSetFilter4dDescriptor(w, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, 16, 16, 3, 3) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnSetConvolution2dDescriptor(c, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS &&
        cudnnSetConvolutionMathType(c, CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS)
        cudnnGetConvolutionForwardWorkspaceSize(
            h, x, w, c, x, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, &ws);
    if (c)
        cudnnDestroyConvolutionDescriptor(c);
    if (w)
        cudnnDestroyFilterDescriptor(w);
    if (x)
        cudnnDestroyTensorDescriptor(x);
    if (h)
        cudnnDestroy(h);
}

static void *warm_main(void *arg)
{
    const warm_job *j = (const warm_job *)arg;
    if (cudaSetDevice(j->dev) == cudaSuccess) {
        if (j->what == 2)
            warm_cudnn();
        else
            warm_cublaslt(j->what == 0 ? CUDA_R_16F : CUDA_R_32F);
    }
    cudaGetLastError();
    return NULL;
}

extern "C" void infd_cuda_warm_join(int index)
{
    (void)index; /* joins every GPU's: a plan waits at most for another's few ms */
    pthread_mutex_lock(&warm_mu);
    for (int i = 0; i < n_warm_threads; i++)
        pthread_join(warm_threads[i], NULL);
    n_warm_threads = 0;
    pthread_mutex_unlock(&warm_mu);
}

extern "C" void infd_cuda_warm_start(int index)
{
    const char *off = getenv("INFD_CUDA_WARM");
    if (index < 0 || index >= MAX_DEVICES || (off && strcmp(off, "0") == 0))
        return;
    pthread_mutex_lock(&warm_mu);
    if (!warm_started[index]) {
        warm_started[index] = true;
        for (int what = 0; what < N_WARM; what++) {
            warm_job *j = &warm_jobs[n_warm_threads];
            j->dev = index;
            j->what = what;
            if (pthread_create(&warm_threads[n_warm_threads], NULL, warm_main, j) == 0)
                n_warm_threads++;
        }
    }
    pthread_mutex_unlock(&warm_mu);
}

/* Hash-based values in [-1, 1) (see infd_cuda_fill_random). */
__global__ void fill_random_kernel(void *p, size_t n, int kind, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        float v = (float)(h >> 8) / 8388608.0f - 1.0f;
        if (kind == 1)
            ((__half *)p)[i] = __float2half_rn(v);
        else if (kind == 2)
            ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
        else
            ((float *)p)[i] = v;
    }
}

extern "C" bool infd_cuda_conv_disabled(const char *what)
{
    const char *e = getenv("INFD_CONV_DISABLE");
    return e && strstr(e, what) != NULL;
}

extern "C" void infd_cuda_fill_random(void *stream, void *p, size_t n, int kind, unsigned seed)
{
    unsigned blocks = infd_cuda_blocks((long long)n);
    if (blocks > 4096)
        blocks = 4096;
    fill_random_kernel<<<blocks, 256, 0, ((infd_cuda_stream *)stream)->s>>>(p, n, kind, seed);
}
