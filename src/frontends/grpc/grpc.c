/*
 * grpc.c - the KServe v2 gRPC frontend on the gRPC core C API (see grpc.h).
 *
 * Life of a call:
 *
 *   completion-queue thread                 runtime worker thread
 *   -------------------------------------   ------------------------------
 *   T_NEW: grpc_server_request_call gave
 *   us a call; re-arm, look the method up,
 *   start RECV_MESSAGE (streams also
 *   RECV_CLOSE_ON_SERVER)
 *   T_RECV: decode the message; simple
 *   RPCs answer at once (T_FINAL batch);
 *   ModelInfer plans its response in one
 *   slice, lends the slice's output spans
 *   to the request, infd_infer_async ──────► batch, run, outputs land in
 *                                            the slice; on_infer_done
 *                                            starts the send (unary: the
 *                                            T_FINAL batch; stream: T_SEND,
 *                                            one write at a time)
 *   T_SEND: next queued response; stream ◄─┘
 *   half-closed and idle: send the status
 *   T_FINAL (+T_CLOSE for streams): unref the call, state back to the free list
 *
 * Ownership: a gcall (one RPC) lives from T_NEW until its last batch has
 * completed; its `refs` counts outstanding batches plus the inferences in
 * flight on it, and the call is recycled by whichever completion drops it
 * to zero (always on its completion-queue thread: inferences drop their
 * reference when their send completes). A ginfer (one inference) holds the
 * received message (raw inputs point into its slices), an arena with the
 * decoded request, and the response slice; it goes back to its thread's
 * free list when its response has been sent.
 *
 * Zero copy: raw_input_contents are found by walking the wire format across
 * the slices gRPC received the message in (wire.c), and are handed to the
 * runtime as the slice pieces they span (protobuf-c would copy them, and
 * joining the slices would be a copy too); the rest of the message (small)
 * is unpacked by protobuf-c into the ginfer's arena. (Copying them once
 * into the pinned pool instead, as HTTP receives bodies there, was measured
 * on the H200: 10% more gRPC throughput, and a default-sized pool then too
 * full for HTTP's bodies; bench/RESULTS.md.) The response is planned before
 * submit: header, `raw_output_contents` tags and room for every output in
 * one slice, with each output's room lent to the request
 * (infd_request_set_output_buffer), so the engine writes the response
 * bytes in place and nothing is serialized after the run. Outputs are
 * always raw, as Triton returns them (typed `contents` are read, never
 * written).
 *
 * Memory: calls and inferences (with their arenas) come from per-thread
 * free lists, so a warm server allocates per request only the response
 * slice (gRPC holds it until the bytes are on the wire, so it cannot be
 * reused at once) and whatever gRPC core allocates itself.
 *
 * Streams: one write in flight per stream (gRPC's rule), later responses
 * wait in the stream's queue. A stream with STREAM_MAX_PENDING requests
 * running or queued stops reading until half of them are out, so a client
 * that sends without reading is held back by HTTP/2 flow control.
 *
 * Locks: gcall.mu guards a stream's write queue and status (runtime
 * workers queue responses, the queue thread drains them); everything else
 * in a gcall or ginfer is touched by one thread at a time, handed over by
 * the batch that is in flight. A load/unload runs on a thread of its own,
 * which answers the call and hands its reference to that last batch.
 *
 * Stop: shutdown_and_notify (no new calls), a grace period for calls in
 * flight, then every call still open (idle streams) is cancelled; the
 * queues are shut down and drained once every call has been recycled.
 */
#include "frontends/grpc/grpc.h"
#include "frontends/grpc/infer_params.h"
#include "frontends/grpc/wire.h"

#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/arena.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "frontends/common/restricted.h"
#include "frontends/common/tls.h"
#include "grpc_service.pb-c.h"
#include "health.pb-c.h"

/* Calls requested from the server per queue at any time. */
#define PENDING_CALLS 32
/* Idle calls and inferences kept per queue thread; more are freed. */
#define CALLS_KEPT  1024
#define INFERS_KEPT 256
/* An inference whose arena grew past this gives it back on release. */
#define INFER_KEEP_BYTES (4u << 20)
/* infd_grpc_stop: how long calls may finish before they are cancelled. */
#define STOP_GRACE_NS (3ull * 1000 * 1000 * 1000)
#define NAME_BYTES    128
/* A stream stops reading requests while this many of its requests are
 * running or waiting to be written (a client that sends without reading
 * cannot make the server buffer without bound); HTTP/2 flow control then
 * holds the client back. */
#define STREAM_MAX_PENDING 256
/* Most raw_input_contents entries a request may carry. */
#define MAX_RAW INFD_MAX_MODEL_IO

/* ------------------------------------------------------------------------- */
/* Types                                                                     */
/* ------------------------------------------------------------------------- */

typedef enum method {
    M_SERVER_LIVE,
    M_SERVER_READY,
    M_MODEL_READY,
    M_SERVER_METADATA,
    M_MODEL_METADATA,
    M_MODEL_INFER,
    M_MODEL_STREAM_INFER,
    M_MODEL_CONFIG,
    M_MODEL_STATISTICS,
    M_REPOSITORY_INDEX,
    M_REPOSITORY_LOAD,
    M_REPOSITORY_UNLOAD,
    M_HEALTH_CHECK,
    M_HEALTH_WATCH,
    M_SHM_STATUS,
    M_SHM_REGISTER,
    M_SHM_UNREGISTER,
    M_CUDA_SHM_STATUS,
    M_CUDA_SHM_REGISTER,
    M_CUDA_SHM_UNREGISTER,
    M_UNKNOWN
} method;

static const char *const g_methods[M_UNKNOWN] = {
    [M_SERVER_LIVE] = "/inference.GRPCInferenceService/ServerLive",
    [M_SERVER_READY] = "/inference.GRPCInferenceService/ServerReady",
    [M_MODEL_READY] = "/inference.GRPCInferenceService/ModelReady",
    [M_SERVER_METADATA] = "/inference.GRPCInferenceService/ServerMetadata",
    [M_MODEL_METADATA] = "/inference.GRPCInferenceService/ModelMetadata",
    [M_MODEL_INFER] = "/inference.GRPCInferenceService/ModelInfer",
    [M_MODEL_STREAM_INFER] = "/inference.GRPCInferenceService/ModelStreamInfer",
    [M_MODEL_CONFIG] = "/inference.GRPCInferenceService/ModelConfig",
    [M_MODEL_STATISTICS] = "/inference.GRPCInferenceService/ModelStatistics",
    [M_REPOSITORY_INDEX] = "/inference.GRPCInferenceService/RepositoryIndex",
    [M_REPOSITORY_LOAD] = "/inference.GRPCInferenceService/RepositoryModelLoad",
    [M_REPOSITORY_UNLOAD] = "/inference.GRPCInferenceService/RepositoryModelUnload",
    [M_SHM_STATUS] = "/inference.GRPCInferenceService/SystemSharedMemoryStatus",
    [M_SHM_REGISTER] = "/inference.GRPCInferenceService/SystemSharedMemoryRegister",
    [M_SHM_UNREGISTER] = "/inference.GRPCInferenceService/SystemSharedMemoryUnregister",
    [M_CUDA_SHM_STATUS] = "/inference.GRPCInferenceService/CudaSharedMemoryStatus",
    [M_CUDA_SHM_REGISTER] = "/inference.GRPCInferenceService/CudaSharedMemoryRegister",
    [M_CUDA_SHM_UNREGISTER] = "/inference.GRPCInferenceService/CudaSharedMemoryUnregister",
    [M_HEALTH_CHECK] = "/grpc.health.v1.Health/Check",
    [M_HEALTH_WATCH] = "/grpc.health.v1.Health/Watch",
};

typedef enum tag_op { T_NEW, T_RECV, T_SEND, T_CLOSE, T_FINAL } tag_op;

typedef struct gcall gcall;
typedef struct gloop gloop;

/* What a completion-queue event points at. */
typedef struct gtag {
    gcall *call;
    tag_op op;
} gtag;

/* One inference: a unary ModelInfer or one message of a stream. */
typedef struct ginfer {
    struct ginfer *next; /* free list or a stream's write queue */
    gcall *call;
    /* The received message (raw and uncompressed); raw inputs point into
     * its slices. */
    grpc_byte_buffer *in;
    infd_arena arena; /* decoded request, converted typed inputs */
    infd_model *model;
    infd_request *req;
    char id[NAME_BYTES];
    /* The planned response: [stream prefix][header][per output: tag, length,
     * data]; out_data[i] is where output i's bytes go. */
    grpc_slice out;
    bool has_out;
    int n_out;
    uint8_t *out_data[INFD_MAX_MODEL_IO];
    size_t out_bytes[INFD_MAX_MODEL_IO];
    infd_shape out_shape[INFD_MAX_MODEL_IO];
    /* Shared memory (Triton's extension): the regions held until the
     * inference goes back, and per planned output where its bytes go
     * (NULL: in the response) and how many fit there. */
    infd_shm_region *shm[2 * INFD_MAX_MODEL_IO];
    int n_shm;
    uint8_t *shm_out[INFD_MAX_MODEL_IO];
    size_t shm_cap[INFD_MAX_MODEL_IO];
    /* Filled by the completing thread. */
    infd_status status;
    char message[INFD_ERROR_MSG_BYTES];
    grpc_byte_buffer *send; /* the message being sent */
} ginfer;

/* One RPC. */
struct gcall {
    gcall *next; /* free list */
    gloop *loop;
    method m;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *recv;
    int cancelled; /* RECV_CLOSE_ON_SERVER's answer */
    gtag t_new, t_recv, t_send, t_close, t_final;
    atomic_int refs; /* outstanding batches + inferences in flight */

    /* Unary answers (T_FINAL batch). */
    grpc_byte_buffer *reply;
    struct ginfer *unary; /* ModelInfer: its inference, recycled at T_FINAL */
    grpc_slice status_details;
    bool has_status_details;

    /* Load / unload. */
    pthread_t thread;
    char name[NAME_BYTES];
    /* A reference taken for the T_FINAL batch by a thread that answers the
     * call (load/unload): that thread may not drop references itself, as
     * the last one recycles the call on its queue thread. */
    bool final_ref_held;

    /* Streams; guarded by mu. */
    pthread_mutex_t mu;
    ginfer *q_head, *q_tail; /* responses waiting to be written */
    ginfer *writing;         /* the response being written, or NULL */
    bool md_sent;            /* initial metadata went with the first write */
    bool half_closed;        /* the client finished sending */
    bool status_sent;
    bool recv_paused; /* STREAM_MAX_PENDING reached: no RECV_MESSAGE out */
    int n_inflight;   /* inferences submitted, response not yet queued */
    int n_queued;     /* responses in q_head..q_tail */
};

struct gloop {
    infd_grpc *g;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool thread_started;
    /* Queue thread only. */
    gcall *free_calls;
    int n_free_calls;
    ginfer *free_infers;
    int n_free_infers;
};

struct infd_grpc {
    infd_server *server;
    grpc_server *srv;
    int port;
    size_t max_message_bytes;
    const infd_restricted *restricted; /* borrowed; NULL: all open */
    int n_loops;
    gloop *loops;
    bool started;
    bool grpc_inited;
    atomic_bool stopping;
    atomic_int n_calls; /* calls taken from the server and not yet recycled */
    atomic_int n_loads; /* load/unload threads running */
    gtag shutdown_tag;
    pthread_mutex_t mu; /* guards shutdown_done */
    pthread_cond_t cv;
    bool sync_init;
    bool shutdown_done;
};

static void call_unref(gcall *c);

/* ------------------------------------------------------------------------- */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------- */

static grpc_status_code grpc_code(infd_status st)
{
    switch (st) {
    case INFD_STATUS_OK:
        return GRPC_STATUS_OK;
    case INFD_STATUS_INVALID_ARGUMENT:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case INFD_STATUS_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case INFD_STATUS_UNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case INFD_STATUS_RESOURCE_EXHAUSTED:
    case INFD_STATUS_OUT_OF_MEMORY:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case INFD_STATUS_DEADLINE_EXCEEDED:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case INFD_STATUS_UNIMPLEMENTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

static void *pb_alloc(void *data, size_t n)
{
    (void)data;
    return infd_malloc(n ? n : 1);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    infd_free(p);
}

static ProtobufCAllocator g_pb_heap = { pb_alloc, pb_free, NULL };

/* protobuf-c allocations of an inference come from its arena and go all at
 * once when the arena is reset. */
static void *pb_arena_alloc(void *data, size_t n)
{
    return infd_arena_alloc(data, n ? n : 1, 0);
}

static void pb_arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

/* A message packed into a new byte buffer (gRPC's allocator aborts when
 * memory runs out, so no NULL comes back). */
static grpc_byte_buffer *pack_message(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* The message of `bb` as one slice: a reference to its only slice when it
 * arrived in one piece, else one copy (grpc_byte_buffer_reader_readall,
 * which also decompresses). */
static bool message_slice(grpc_byte_buffer *bb, grpc_slice *out)
{
    if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
        bb->data.raw.slice_buffer.count == 1) {
        *out = grpc_slice_ref(bb->data.raw.slice_buffer.slices[0]);
        return true;
    }
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return false;
    *out = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    INFD_COUNT_COPY(GRPC_SLICE_LENGTH(*out));
    return true;
}

/* `bb` when it is raw and uncompressed (its slices are read where they
 * lie), else a new one of its decompressed bytes (one copy); NULL when it
 * cannot be read. */
static grpc_byte_buffer *message_raw(grpc_byte_buffer *bb)
{
    if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE)
        return bb;
    grpc_slice s;
    if (!message_slice(bb, &s))
        return NULL;
    grpc_byte_buffer *out = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return out;
}

/* A model version from a request: "" (any) or a positive integer. */
static bool parse_version(const char *s, int64_t *out)
{
    *out = -1;
    if (!s || !*s)
        return true;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno == ERANGE || v <= 0)
        return false;
    *out = v;
    return true;
}

static infd_status acquire(infd_grpc *g, const char *name, const char *version, infd_model **out,
                           infd_error *err)
{
    int64_t v;
    if (!parse_version(version, &v))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%.127s': invalid version '%.32s'", name, version);
    if (!name || !*name)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "no model name given");
    return infd_server_model_acquire(g->server, name, v, out, err);
}

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* ------------------------------------------------------------------------- */
/* Calls                                                                     */
/* ------------------------------------------------------------------------- */

static gcall *call_get(gloop *loop)
{
    gcall *c = loop->free_calls;
    if (c) {
        loop->free_calls = c->next;
        loop->n_free_calls--;
    } else {
        c = infd_calloc(1, sizeof(*c));
        if (!c)
            return NULL;
        if (pthread_mutex_init(&c->mu, NULL) != 0) {
            infd_free(c);
            return NULL;
        }
        c->loop = loop;
        c->t_new = (gtag){ c, T_NEW };
        c->t_recv = (gtag){ c, T_RECV };
        c->t_send = (gtag){ c, T_SEND };
        c->t_close = (gtag){ c, T_CLOSE };
        c->t_final = (gtag){ c, T_FINAL };
    }
    c->next = NULL;
    c->m = M_UNKNOWN;
    c->call = NULL;
    c->recv = NULL;
    c->reply = NULL;
    c->unary = NULL;
    c->final_ref_held = false;
    c->cancelled = 0;
    c->has_status_details = false;
    c->q_head = c->q_tail = c->writing = NULL;
    c->md_sent = c->half_closed = c->status_sent = c->recv_paused = false;
    c->n_inflight = c->n_queued = 0;
    atomic_store(&c->refs, 0);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    return c;
}

static void call_free(gcall *c)
{
    pthread_mutex_destroy(&c->mu);
    infd_free(c);
}

/* Recycles a call whose every batch has completed (queue thread). */
static void call_put(gcall *c)
{
    gloop *loop = c->loop;
    bool counted = c->call != NULL;
    if (c->call)
        grpc_call_unref(c->call);
    c->call = NULL;
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    c->recv = NULL;
    if (c->reply)
        grpc_byte_buffer_destroy(c->reply);
    c->reply = NULL;
    if (c->has_status_details)
        grpc_slice_unref(c->status_details);
    c->has_status_details = false;
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (counted)
        atomic_fetch_sub(&loop->g->n_calls, 1);
    if (loop->n_free_calls >= CALLS_KEPT) {
        call_free(c);
        return;
    }
    c->next = loop->free_calls;
    loop->free_calls = c;
    loop->n_free_calls++;
}

static void call_ref(gcall *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void call_unref(gcall *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        call_put(c);
}

/* Starts a batch holding a reference for it. A failure here is our bug
 * (an op already in flight), never the peer's: logged, and the call
 * cancelled so that it still ends. */
static bool start_batch(gcall *c, const grpc_op *ops, size_t n, gtag *tag)
{
    if (tag == &c->t_final && c->final_ref_held)
        c->final_ref_held = false;
    else
        call_ref(c);
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (e == GRPC_CALL_OK)
        return true;
    INFD_LOG_ERROR("grpc: %s: grpc_call_start_batch failed (%d)", g_methods[c->m], (int)e);
    atomic_fetch_sub(&c->refs, 1);
    grpc_call_cancel(c->call, NULL);
    return false;
}

/* Asks the server for the next call on this queue. */
static bool request_call(gloop *loop)
{
    gcall *c = call_get(loop);
    if (!c)
        return false;
    call_ref(c);
    grpc_call_error e = grpc_server_request_call(loop->g->srv, &c->call, &c->details, &c->md,
                                                 loop->cq, loop->cq, &c->t_new);
    if (e != GRPC_CALL_OK) {
        atomic_store(&c->refs, 0);
        call_put(c);
        return false;
    }
    return true;
}

/* The T_FINAL batch of a unary call: initial metadata, the reply (when
 * `reply` is set), the status, and the close. Any thread. */
static void unary_finish(gcall *c, grpc_byte_buffer *reply, grpc_status_code code,
                         const char *message)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n++].data.send_initial_metadata.count = 0;
    c->reply = reply;
    if (reply) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = reply;
    }
    c->status_details =
        message && *message ? grpc_slice_from_copied_string(message) : grpc_empty_slice();
    c->has_status_details = true;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.trailing_metadata_count = 0;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &c->status_details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    if (code != GRPC_STATUS_OK)
        INFD_LOG_DEBUG("grpc: %s -> %d: %s", g_methods[c->m], (int)code, message ? message : "");
    start_batch(c, ops, n, &c->t_final);
}

static void unary_error(gcall *c, const infd_error *err)
{
    unary_finish(c, NULL, grpc_code(err->code),
                 err->msg[0] ? err->msg : infd_status_str(err->code));
}

/* Packs `msg` and answers OK, or RESOURCE_EXHAUSTED when packing ran out
 * of memory. */
static void unary_reply(gcall *c, const ProtobufCMessage *msg)
{
    grpc_byte_buffer *bb = pack_message(msg);
    if (!bb)
        unary_finish(c, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory packing the reply");
    else
        unary_finish(c, bb, GRPC_STATUS_OK, NULL);
}

/* ------------------------------------------------------------------------- */
/* Simple RPCs                                                               */
/* ------------------------------------------------------------------------- */

/* Unpacks the request of a simple RPC; answers INVALID_ARGUMENT itself. */
static ProtobufCMessage *unpack_request(gcall *c, const ProtobufCMessageDescriptor *d, grpc_slice s)
{
    ProtobufCMessage *m =
        protobuf_c_message_unpack(d, &g_pb_heap, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    if (!m) {
        char msg[160];
        snprintf(msg, sizeof(msg), "malformed %s message (%zu bytes)", d->name,
                 (size_t)GRPC_SLICE_LENGTH(s));
        unary_finish(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, msg);
    }
    return m;
}

static void fill_tensor_metadata(Inference__ModelMetadataResponse__TensorMetadata *t,
                                 const infd_model_io *io, bool batched, int64_t *shape)
{
    inference__model_metadata_response__tensor_metadata__init(t);
    t->name = (char *)io->name;
    t->datatype = (char *)infd_dtype_name(io->dtype);
    size_t k = 0;
    if (batched)
        shape[k++] = -1;
    for (int d = 0; d < io->rank; d++)
        shape[k++] = io->dims[d];
    t->n_shape = k;
    t->shape = shape;
}

static void rpc_model_metadata(gcall *c, grpc_slice s)
{
    infd_grpc *g = c->loop->g;
    Inference__ModelMetadataRequest *rq = (Inference__ModelMetadataRequest *)unpack_request(
        c, &inference__model_metadata_request__descriptor, s);
    if (!rq)
        return;
    infd_error err = { 0 };
    infd_model *m = NULL;
    infd_repository_entry *rows = NULL;
    if (acquire(g, rq->name, rq->version, &m, &err) != INFD_STATUS_OK) {
        unary_error(c, &err);
        goto out;
    }
    Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
    r.name = (char *)infd_model_name(m);
    r.platform = (char *)infd_model_platform(m);
    /* Every READY version; the acquired one at least. */
    char vbuf[64][24];
    char *vers[64];
    int n_rows = 0;
    size_t nv = 0;
    if (infd_server_repository_index(g->server, true, &rows, &n_rows, NULL) == INFD_STATUS_OK) {
        for (int i = 0; i < n_rows && nv < 64; i++) {
            if (strcmp(rows[i].name, r.name) != 0 || rows[i].version < 0)
                continue;
            snprintf(vbuf[nv], sizeof(vbuf[nv]), "%" PRId64, rows[i].version);
            vers[nv] = vbuf[nv];
            nv++;
        }
    }
    if (nv == 0) {
        snprintf(vbuf[0], sizeof(vbuf[0]), "%" PRId64, infd_model_version(m));
        vers[nv++] = vbuf[0];
    }
    r.n_versions = nv;
    r.versions = vers;
    bool batched = infd_model_max_batch_size(m) > 0;
    Inference__ModelMetadataResponse__TensorMetadata tin[INFD_MAX_MODEL_IO],
        tout[INFD_MAX_MODEL_IO];
    Inference__ModelMetadataResponse__TensorMetadata *pin[INFD_MAX_MODEL_IO],
        *pout[INFD_MAX_MODEL_IO];
    int64_t shapes[2 * INFD_MAX_MODEL_IO][INFD_MAX_RANK + 1];
    for (int i = 0; i < infd_model_n_inputs(m) && i < INFD_MAX_MODEL_IO; i++) {
        infd_model_io io;
        if (infd_model_input(m, i, &io) != INFD_STATUS_OK)
            continue;
        fill_tensor_metadata(&tin[r.n_inputs], &io, batched, shapes[r.n_inputs]);
        pin[r.n_inputs] = &tin[r.n_inputs];
        r.n_inputs++;
    }
    for (int i = 0; i < infd_model_n_outputs(m) && i < INFD_MAX_MODEL_IO; i++) {
        infd_model_io io;
        if (infd_model_output(m, i, &io) != INFD_STATUS_OK)
            continue;
        fill_tensor_metadata(&tout[r.n_outputs], &io, batched,
                             shapes[INFD_MAX_MODEL_IO + r.n_outputs]);
        pout[r.n_outputs] = &tout[r.n_outputs];
        r.n_outputs++;
    }
    r.inputs = pin;
    r.outputs = pout;
    unary_reply(c, &r.base);
out:
    infd_free(rows);
    infd_model_release(m);
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

static void rpc_model_ready(gcall *c, grpc_slice s)
{
    Inference__ModelReadyRequest *rq = (Inference__ModelReadyRequest *)unpack_request(
        c, &inference__model_ready_request__descriptor, s);
    if (!rq)
        return;
    infd_error err = { 0 };
    infd_model *m = NULL;
    infd_status st = acquire(c->loop->g, rq->name, rq->version, &m, &err);
    /* As Triton: an unknown or unavailable model is "not ready", not an
     * error; a malformed version is. */
    if (st == INFD_STATUS_INVALID_ARGUMENT) {
        unary_error(c, &err);
    } else {
        Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
        r.ready = st == INFD_STATUS_OK && infd_model_is_ready(m);
        unary_reply(c, &r.base);
    }
    infd_model_release(m);
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

static void rpc_model_config(gcall *c, grpc_slice s)
{
    Inference__ModelConfigRequest *rq = (Inference__ModelConfigRequest *)unpack_request(
        c, &inference__model_config_request__descriptor, s);
    if (!rq)
        return;
    infd_error err = { 0 };
    infd_model *m = NULL;
    void *pb = NULL;
    size_t n = 0;
    if (acquire(c->loop->g, rq->name, rq->version, &m, &err) != INFD_STATUS_OK ||
        infd_model_config_pb(m, &pb, &n, &err) != INFD_STATUS_OK) {
        unary_error(c, &err);
        goto out;
    }
    /* ModelConfigResponse is one field, `ModelConfig config = 1`: its
     * tag, length and the runtime's serialized config. */
    grpc_slice sl = grpc_slice_malloc(1 + varint_size(n) + n);
    uint8_t *p = GRPC_SLICE_START_PTR(sl);
    *p++ = (1 << 3) | 2;
    p = put_varint(p, n);
    memcpy(p, pb, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    unary_finish(c, bb, GRPC_STATUS_OK, NULL);
out:
    infd_free(pb);
    infd_model_release(m);
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

static void set_duration(Inference__StatisticDuration *d, uint64_t count, uint64_t ns)
{
    d->count = count;
    d->ns = ns;
}

/* One ModelStatistics entry, allocated in `a`. */
static Inference__ModelStatistics *model_stats(infd_arena *a, infd_model *m)
{
    /* About 4 KiB of per-batch-size counters: kept off the stack. */
    static _Thread_local infd_model_stats st;
    infd_model_get_stats(m, &st);
    Inference__ModelStatistics *ms = infd_arena_alloc(a, sizeof(*ms), 0);
    Inference__InferStatistics *is = infd_arena_alloc(a, sizeof(*is), 0);
    Inference__StatisticDuration *d = infd_arena_alloc(a, 8 * sizeof(*d), 0);
    char *ver = infd_arena_alloc(a, 24, 0);
    if (!ms || !is || !d || !ver)
        return NULL;
    inference__model_statistics__init(ms);
    inference__infer_statistics__init(is);
    for (int i = 0; i < 8; i++)
        inference__statistic_duration__init(&d[i]);
    snprintf(ver, 24, "%" PRId64, infd_model_version(m));
    ms->name = (char *)infd_model_name(m);
    ms->version = ver;
    ms->last_inference = st.last_inference_ms;
    ms->inference_count = st.inference_count;
    ms->execution_count = st.execution_count;
    set_duration(&d[0], st.success_count, st.success_ns);
    set_duration(&d[1], st.failure_count, st.failure_ns);
    set_duration(&d[2], st.success_count, st.queue_ns);
    set_duration(&d[3], st.success_count, st.compute_input_ns);
    set_duration(&d[4], st.success_count, st.compute_infer_ns);
    set_duration(&d[5], st.success_count, st.compute_output_ns);
    is->success = &d[0];
    is->fail = &d[1];
    is->queue = &d[2];
    is->compute_input = &d[3];
    is->compute_infer = &d[4];
    is->compute_output = &d[5];
    is->cache_hit = &d[6];
    is->cache_miss = &d[7];
    ms->inference_stats = is;
    size_t nb = 0;
    for (int b = 1; b <= INFD_STATS_MAX_BATCH; b++)
        nb += st.batch_exec_count[b] != 0;
    if (nb) {
        ms->batch_stats = infd_arena_alloc(a, nb * sizeof(*ms->batch_stats), 0);
        Inference__InferBatchStatistics *bs = infd_arena_alloc(a, nb * sizeof(*bs), 0);
        Inference__StatisticDuration *bd = infd_arena_alloc(a, 3 * nb * sizeof(*bd), 0);
        if (!ms->batch_stats || !bs || !bd)
            return NULL;
        for (int b = 1; b <= INFD_STATS_MAX_BATCH; b++) {
            uint64_t n = st.batch_exec_count[b];
            if (!n)
                continue;
            size_t k = ms->n_batch_stats++;
            inference__infer_batch_statistics__init(&bs[k]);
            for (int j = 0; j < 3; j++)
                inference__statistic_duration__init(&bd[3 * k + j]);
            bs[k].batch_size = (uint64_t)b;
            bd[3 * k].count = n;
            bd[3 * k + 1].count = n;
            bd[3 * k + 1].ns = st.batch_compute_ns[b];
            bd[3 * k + 2].count = n;
            bs[k].compute_input = &bd[3 * k];
            bs[k].compute_infer = &bd[3 * k + 1];
            bs[k].compute_output = &bd[3 * k + 2];
            ms->batch_stats[k] = &bs[k];
        }
    }
    if (st.n_memory_usage > 0) {
        size_t nm = (size_t)st.n_memory_usage;
        ms->memory_usage = infd_arena_alloc(a, nm * sizeof(*ms->memory_usage), 0);
        Inference__MemoryUsage *mu = infd_arena_alloc(a, nm * sizeof(*mu), 0);
        if (!ms->memory_usage || !mu)
            return NULL;
        for (size_t k = 0; k < nm; k++) {
            inference__memory_usage__init(&mu[k]);
            mu[k].type = (char *)st.memory_usage[k].type;
            mu[k].id = st.memory_usage[k].id;
            mu[k].byte_size = st.memory_usage[k].byte_size;
            ms->memory_usage[k] = &mu[k];
        }
        ms->n_memory_usage = nm;
    }
    return ms;
}

static void rpc_model_statistics(gcall *c, grpc_slice s)
{
    infd_grpc *g = c->loop->g;
    Inference__ModelStatisticsRequest *rq = (Inference__ModelStatisticsRequest *)unpack_request(
        c, &inference__model_statistics_request__descriptor, s);
    if (!rq)
        return;
    infd_error err = { 0 };
    infd_arena a;
    infd_arena_init(&a, 0);
    infd_repository_entry *rows = NULL;
    int n_rows = 0;
    int64_t version;
    const char *name = rq->name[0] ? rq->name : NULL;
    if (!parse_version(rq->version, &version)) {
        infd_error_set(&err, INFD_STATUS_INVALID_ARGUMENT, "invalid version '%.32s'", rq->version);
        unary_error(c, &err);
        goto out;
    }
    if (infd_server_repository_index(g->server, true, &rows, &n_rows, &err) != INFD_STATUS_OK) {
        unary_error(c, &err);
        goto out;
    }
    Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    r.model_stats = infd_arena_alloc(&a, (size_t)(n_rows + 1) * sizeof(*r.model_stats), 0);
    if (!r.model_stats)
        goto oom;
    for (int i = 0; i < n_rows; i++) {
        if (rows[i].version < 0 || (name && strcmp(rows[i].name, name) != 0) ||
            (version > 0 && rows[i].version != version))
            continue;
        infd_model *m = NULL;
        if (infd_server_model_acquire(g->server, rows[i].name, rows[i].version, &m, NULL) !=
            INFD_STATUS_OK)
            continue; /* unloaded since the index was taken */
        Inference__ModelStatistics *ms = model_stats(&a, m);
        /* Names point into the model: copy before releasing it. */
        if (ms)
            ms->name = infd_arena_strdup(&a, ms->name);
        infd_model_release(m);
        if (!ms || !ms->name)
            goto oom;
        r.model_stats[r.n_model_stats++] = ms;
    }
    if (name && r.n_model_stats == 0) {
        /* Say why: unknown (NOT_FOUND) or not ready (UNAVAILABLE). */
        infd_model *m = NULL;
        if (acquire(g, name, rq->version, &m, &err) != INFD_STATUS_OK) {
            unary_error(c, &err);
            goto out;
        }
        infd_model_release(m);
    }
    unary_reply(c, &r.base);
    goto out;
oom:
    unary_finish(c, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory writing statistics");
out:
    infd_free(rows);
    infd_arena_fini(&a);
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

static void rpc_repository_index(gcall *c, grpc_slice s)
{
    Inference__RepositoryIndexRequest *rq = (Inference__RepositoryIndexRequest *)unpack_request(
        c, &inference__repository_index_request__descriptor, s);
    if (!rq)
        return;
    infd_error err = { 0 };
    infd_repository_entry *rows = NULL;
    int n_rows = 0;
    Inference__RepositoryIndexResponse__ModelIndex *mi = NULL;
    Inference__RepositoryIndexResponse__ModelIndex **pmi = NULL;
    char(*vers)[24] = NULL;
    if (infd_server_repository_index(c->loop->g->server, rq->ready, &rows, &n_rows, &err) !=
        INFD_STATUS_OK) {
        unary_error(c, &err);
        goto out;
    }
    size_t n = (size_t)n_rows + 1;
    mi = infd_calloc(n, sizeof(*mi));
    pmi = infd_calloc(n, sizeof(*pmi));
    vers = infd_calloc(n, sizeof(*vers));
    if (!mi || !pmi || !vers) {
        unary_finish(c, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
    for (int i = 0; i < n_rows; i++) {
        inference__repository_index_response__model_index__init(&mi[i]);
        mi[i].name = rows[i].name;
        if (rows[i].version >= 0)
            snprintf(vers[i], sizeof(vers[i]), "%" PRId64, rows[i].version);
        mi[i].version = vers[i];
        mi[i].state = (char *)infd_model_state_name(rows[i].state);
        mi[i].reason = rows[i].reason;
        pmi[i] = &mi[i];
    }
    r.n_models = (size_t)n_rows;
    r.models = pmi;
    unary_reply(c, &r.base);
out:
    infd_free(mi);
    infd_free(pmi);
    infd_free(vers);
    infd_free(rows);
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

/* A (blocking) load or unload, on a thread of its own; it answers the call
 * itself. */
static void *load_main(void *arg)
{
    gcall *c = arg;
    /* Read before answering: the answer's completion may recycle `c`. */
    infd_grpc *g = c->loop->g;
    infd_server *s = g->server;
    infd_error err = { 0 };
    infd_status st = c->m == M_REPOSITORY_LOAD ? infd_server_load_model(s, c->name, &err)
                                               : infd_server_unload_model(s, c->name, &err);
    if (st != INFD_STATUS_OK) {
        unary_error(c, &err);
    } else {
        INFD_LOG_INFO("grpc: %s of model '%s' done", c->m == M_REPOSITORY_LOAD ? "load" : "unload",
                      c->name);
        /* Both responses are empty messages. */
        grpc_slice e = grpc_empty_slice();
        unary_finish(c, grpc_raw_byte_buffer_create(&e, 1), GRPC_STATUS_OK, NULL);
    }
    atomic_fetch_sub(&g->n_loads, 1);
    return NULL;
}

static void rpc_load(gcall *c, grpc_slice s)
{
    bool load = c->m == M_REPOSITORY_LOAD;
    /* Both requests have model_name = 2; the load request is unpacked for
     * both (an unload's parameters are ignored either way). */
    Inference__RepositoryModelLoadRequest *rq =
        (Inference__RepositoryModelLoadRequest *)unpack_request(
            c, &inference__repository_model_load_request__descriptor, s);
    if (!rq)
        return;
    if (!rq->model_name[0] || strlen(rq->model_name) >= NAME_BYTES) {
        unary_finish(c, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                     rq->model_name[0] ? "model name longer than 127 bytes"
                                       : "no model_name given");
        goto out;
    }
    snprintf(c->name, sizeof(c->name), "%s", rq->model_name);
    call_ref(c);
    c->final_ref_held = true; /* the thread's T_FINAL batch keeps it */
    atomic_fetch_add(&c->loop->g->n_loads, 1);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, load_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "cannot start a thread for the %s: %s", load ? "load" : "unload",
                 strerror(rc));
        atomic_fetch_sub(&c->loop->g->n_loads, 1);
        unary_finish(c, NULL, GRPC_STATUS_INTERNAL, msg);
        goto out;
    }
    pthread_detach(c->thread);
out:
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

static void rpc_health_check(gcall *c, grpc_slice s)
{
    Grpc__Health__V1__HealthCheckRequest *rq =
        (Grpc__Health__V1__HealthCheckRequest *)unpack_request(
            c, &grpc__health__v1__health_check_request__descriptor, s);
    if (!rq)
        return;
    if (rq->service[0] && strcmp(rq->service, "inference.GRPCInferenceService") != 0) {
        char msg[200];
        snprintf(msg, sizeof(msg), "unknown service '%.128s'", rq->service);
        unary_finish(c, NULL, GRPC_STATUS_NOT_FOUND, msg);
    } else {
        Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status = infd_server_is_ready(c->loop->g->server)
                       ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                       : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        unary_reply(c, &r.base);
    }
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

/* The system shared-memory RPCs (Triton's extension). */
typedef struct shm_rows {
    infd_arena *a;
    Inference__SystemSharedMemoryStatusResponse__RegionsEntry **e;
    size_t n, cap;
    bool oom;
} shm_rows;

static void shm_row(void *user, const infd_shm_info *info)
{
    shm_rows *t = user;
    if (t->oom || t->n == t->cap) {
        t->oom = true;
        return;
    }
    Inference__SystemSharedMemoryStatusResponse__RegionsEntry *e =
        infd_arena_alloc(t->a, sizeof(*e), 0);
    Inference__SystemSharedMemoryStatusResponse__RegionStatus *v =
        infd_arena_alloc(t->a, sizeof(*v), 0);
    if (!e || !v) {
        t->oom = true;
        return;
    }
    inference__system_shared_memory_status_response__regions_entry__init(e);
    inference__system_shared_memory_status_response__region_status__init(v);
    v->name = infd_arena_strdup(t->a, info->name);
    v->key = infd_arena_strdup(t->a, info->key);
    v->offset = info->offset;
    v->byte_size = info->byte_size;
    e->key = v->name;
    e->value = v;
    if (!v->name || !v->key)
        t->oom = true;
    t->e[t->n++] = e;
}

static void rpc_shm(gcall *c, grpc_slice s)
{
    infd_server *server = c->loop->g->server;
    infd_error err = { 0 };
    if (c->m == M_SHM_REGISTER) {
        Inference__SystemSharedMemoryRegisterRequest *rq =
            (Inference__SystemSharedMemoryRegisterRequest *)unpack_request(
                c, &inference__system_shared_memory_register_request__descriptor, s);
        if (!rq)
            return;
        if (infd_server_shm_register(server, rq->name, rq->key, rq->offset, rq->byte_size, &err) !=
            INFD_STATUS_OK) {
            unary_error(c, &err);
        } else {
            Inference__SystemSharedMemoryRegisterResponse r =
                INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
            unary_reply(c, &r.base);
        }
        protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
        return;
    }
    if (c->m == M_SHM_UNREGISTER) {
        Inference__SystemSharedMemoryUnregisterRequest *rq =
            (Inference__SystemSharedMemoryUnregisterRequest *)unpack_request(
                c, &inference__system_shared_memory_unregister_request__descriptor, s);
        if (!rq)
            return;
        if (infd_server_shm_unregister(server, rq->name, &err) != INFD_STATUS_OK) {
            unary_error(c, &err);
        } else {
            Inference__SystemSharedMemoryUnregisterResponse r =
                INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
            unary_reply(c, &r.base);
        }
        protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
        return;
    }
    Inference__SystemSharedMemoryStatusRequest *rq =
        (Inference__SystemSharedMemoryStatusRequest *)unpack_request(
            c, &inference__system_shared_memory_status_request__descriptor, s);
    if (!rq)
        return;
    infd_arena a;
    infd_arena_init(&a, 0);
    shm_rows t = { .a = &a, .cap = 4096 };
    t.e = infd_arena_alloc(&a, t.cap * sizeof(*t.e), 0);
    t.oom = !t.e;
    if (infd_server_shm_status(server, rq->name, shm_row, &t, &err) != INFD_STATUS_OK) {
        unary_error(c, &err);
    } else if (t.oom) {
        unary_finish(c, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory writing the status");
    } else {
        Inference__SystemSharedMemoryStatusResponse r =
            INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
        r.n_regions = t.n;
        r.regions = t.e;
        unary_reply(c, &r.base);
    }
    infd_arena_fini(&a);
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

/* The CUDA shared-memory RPCs (Triton's extension). */
typedef struct cuda_shm_rows {
    infd_arena *a;
    Inference__CudaSharedMemoryStatusResponse__RegionsEntry **e;
    size_t n, cap;
    bool oom;
} cuda_shm_rows;

static void cuda_shm_row(void *user, const infd_cuda_shm_info *info)
{
    cuda_shm_rows *t = user;
    if (t->oom || t->n == t->cap) {
        t->oom = true;
        return;
    }
    Inference__CudaSharedMemoryStatusResponse__RegionsEntry *e =
        infd_arena_alloc(t->a, sizeof(*e), 0);
    Inference__CudaSharedMemoryStatusResponse__RegionStatus *v =
        infd_arena_alloc(t->a, sizeof(*v), 0);
    if (!e || !v) {
        t->oom = true;
        return;
    }
    inference__cuda_shared_memory_status_response__regions_entry__init(e);
    inference__cuda_shared_memory_status_response__region_status__init(v);
    v->name = infd_arena_strdup(t->a, info->name);
    v->device_id = (uint64_t)info->device_id;
    v->byte_size = info->byte_size;
    e->key = v->name;
    e->value = v;
    if (!v->name)
        t->oom = true;
    t->e[t->n++] = e;
}

static void rpc_cuda_shm(gcall *c, grpc_slice s)
{
    infd_server *server = c->loop->g->server;
    infd_error err = { 0 };
    if (c->m == M_CUDA_SHM_REGISTER) {
        Inference__CudaSharedMemoryRegisterRequest *rq =
            (Inference__CudaSharedMemoryRegisterRequest *)unpack_request(
                c, &inference__cuda_shared_memory_register_request__descriptor, s);
        if (!rq)
            return;
        if (rq->device_id < 0 || rq->device_id > INT32_MAX) {
            infd_error_set(&err, INFD_STATUS_INVALID_ARGUMENT,
                           "region '%.127s': device_id %" PRId64 " is not a device", rq->name,
                           rq->device_id);
            unary_error(c, &err);
        } else if (infd_server_cuda_shm_register(server, rq->name, rq->raw_handle.data,
                                                 rq->raw_handle.len, (int)rq->device_id,
                                                 rq->byte_size, &err) != INFD_STATUS_OK) {
            unary_error(c, &err);
        } else {
            Inference__CudaSharedMemoryRegisterResponse r =
                INFERENCE__CUDA_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
            unary_reply(c, &r.base);
        }
        protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
        return;
    }
    if (c->m == M_CUDA_SHM_UNREGISTER) {
        Inference__CudaSharedMemoryUnregisterRequest *rq =
            (Inference__CudaSharedMemoryUnregisterRequest *)unpack_request(
                c, &inference__cuda_shared_memory_unregister_request__descriptor, s);
        if (!rq)
            return;
        if (infd_server_cuda_shm_unregister(server, rq->name, &err) != INFD_STATUS_OK) {
            unary_error(c, &err);
        } else {
            Inference__CudaSharedMemoryUnregisterResponse r =
                INFERENCE__CUDA_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
            unary_reply(c, &r.base);
        }
        protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
        return;
    }
    Inference__CudaSharedMemoryStatusRequest *rq =
        (Inference__CudaSharedMemoryStatusRequest *)unpack_request(
            c, &inference__cuda_shared_memory_status_request__descriptor, s);
    if (!rq)
        return;
    infd_arena a;
    infd_arena_init(&a, 0);
    cuda_shm_rows t = { .a = &a, .cap = 4096 };
    t.e = infd_arena_alloc(&a, t.cap * sizeof(*t.e), 0);
    t.oom = !t.e;
    if (infd_server_cuda_shm_status(server, rq->name, cuda_shm_row, &t, &err) != INFD_STATUS_OK) {
        unary_error(c, &err);
    } else if (t.oom) {
        unary_finish(c, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory writing the status");
    } else {
        Inference__CudaSharedMemoryStatusResponse r =
            INFERENCE__CUDA_SHARED_MEMORY_STATUS_RESPONSE__INIT;
        r.n_regions = t.n;
        r.regions = t.e;
        unary_reply(c, &r.base);
    }
    infd_arena_fini(&a);
    protobuf_c_message_free_unpacked(&rq->base, &g_pb_heap);
}

static void rpc_simple(gcall *c, grpc_slice s)
{
    infd_grpc *g = c->loop->g;
    switch (c->m) {
    case M_SERVER_LIVE: {
        Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
        r.live = infd_server_is_live(g->server);
        unary_reply(c, &r.base);
        break;
    }
    case M_SERVER_READY: {
        Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
        r.ready = infd_server_is_ready(g->server);
        unary_reply(c, &r.base);
        break;
    }
    case M_SERVER_METADATA: {
        const char *ext[8] = { "binary_tensor_data", "model_repository", "model_configuration",
                               "statistics",         "parameters",       "schedule_policy" };
        Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
        r.name = (char *)infd_server_id(g->server);
        r.version = (char *)infd_version();
        r.n_extensions = 6;
        if (infd_server_shared_memory(g->server) & INFD_SHM_SYSTEM)
            ext[r.n_extensions++] = "system_shared_memory";
        if (infd_server_shared_memory(g->server) & INFD_SHM_CUDA)
            ext[r.n_extensions++] = "cuda_shared_memory";
        r.extensions = (char **)ext;
        unary_reply(c, &r.base);
        break;
    }
    case M_MODEL_READY:
        rpc_model_ready(c, s);
        break;
    case M_MODEL_METADATA:
        rpc_model_metadata(c, s);
        break;
    case M_MODEL_CONFIG:
        rpc_model_config(c, s);
        break;
    case M_MODEL_STATISTICS:
        rpc_model_statistics(c, s);
        break;
    case M_REPOSITORY_INDEX:
        rpc_repository_index(c, s);
        break;
    case M_REPOSITORY_LOAD:
    case M_REPOSITORY_UNLOAD:
        rpc_load(c, s);
        break;
    case M_HEALTH_CHECK:
        rpc_health_check(c, s);
        break;
    case M_SHM_STATUS:
    case M_SHM_REGISTER:
    case M_SHM_UNREGISTER:
        rpc_shm(c, s);
        break;
    case M_CUDA_SHM_STATUS:
    case M_CUDA_SHM_REGISTER:
    case M_CUDA_SHM_UNREGISTER:
        rpc_cuda_shm(c, s);
        break;
    default:
        unary_finish(c, NULL, GRPC_STATUS_UNIMPLEMENTED, "method not implemented");
        break;
    }
}

/* ------------------------------------------------------------------------- */
/* Inference: decoding                                                       */
/* ------------------------------------------------------------------------- */

static ginfer *infer_get(gloop *loop)
{
    ginfer *g = loop->free_infers;
    if (g) {
        loop->free_infers = g->next;
        loop->n_free_infers--;
    } else {
        g = infd_calloc(1, sizeof(*g));
        if (!g)
            return NULL;
        infd_arena_init(&g->arena, 0);
    }
    g->next = NULL;
    g->call = NULL;
    g->in = NULL;
    g->has_out = false;
    g->model = NULL;
    g->req = NULL;
    g->id[0] = '\0';
    g->n_out = 0;
    g->status = INFD_STATUS_OK;
    g->message[0] = '\0';
    g->send = NULL;
    return g;
}

/* Releases everything an inference holds and recycles it (queue thread). */
static void infer_put(gloop *loop, ginfer *g)
{
    infd_request_destroy(g->req);
    g->req = NULL;
    for (int i = 0; i < g->n_shm; i++)
        infd_shm_region_release(g->shm[i]);
    g->n_shm = 0;
    memset(g->shm_out, 0, sizeof(g->shm_out));
    infd_model_release(g->model);
    g->model = NULL;
    if (g->in)
        grpc_byte_buffer_destroy(g->in);
    g->in = NULL;
    if (g->has_out)
        grpc_slice_unref(g->out);
    g->has_out = false;
    if (g->send)
        grpc_byte_buffer_destroy(g->send);
    g->send = NULL;
    if (loop->n_free_infers >= INFERS_KEPT) {
        infd_arena_fini(&g->arena);
        infd_free(g);
        return;
    }
    if (infd_arena_capacity_bytes(&g->arena) > INFER_KEEP_BYTES) {
        infd_arena_fini(&g->arena);
        infd_arena_init(&g->arena, 0);
    } else {
        infd_arena_reset(&g->arena);
    }
    g->next = loop->free_infers;
    loop->free_infers = g;
    loop->n_free_infers++;
}

/* Converts a typed `contents` to the tensor's row-major bytes: a view of
 * the unpacked array when it has the element size, else a converted copy
 * in the arena. */
static infd_status typed_input(infd_arena *a, const char *name, infd_dtype dt,
                               const Inference__InferTensorContents *tc, int64_t numel,
                               const void **data, size_t *nbytes, infd_error *err)
{
    size_t n = 0;
    const char *field = NULL;
    switch (dt) {
    case INFD_DTYPE_BOOL:
        n = tc ? tc->n_bool_contents : 0, field = "bool_contents";
        break;
    case INFD_DTYPE_INT8:
    case INFD_DTYPE_INT16:
    case INFD_DTYPE_INT32:
        n = tc ? tc->n_int_contents : 0, field = "int_contents";
        break;
    case INFD_DTYPE_UINT8:
    case INFD_DTYPE_UINT16:
    case INFD_DTYPE_UINT32:
        n = tc ? tc->n_uint_contents : 0, field = "uint_contents";
        break;
    case INFD_DTYPE_INT64:
        n = tc ? tc->n_int64_contents : 0, field = "int64_contents";
        break;
    case INFD_DTYPE_UINT64:
        n = tc ? tc->n_uint64_contents : 0, field = "uint64_contents";
        break;
    case INFD_DTYPE_FP32:
        n = tc ? tc->n_fp32_contents : 0, field = "fp32_contents";
        break;
    case INFD_DTYPE_FP64:
        n = tc ? tc->n_fp64_contents : 0, field = "fp64_contents";
        break;
    case INFD_DTYPE_BYTES:
        n = tc ? tc->n_bytes_contents : 0, field = "bytes_contents";
        break;
    default:
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "input '%s': %s has no typed contents field; send it in "
                              "raw_input_contents",
                              name, infd_dtype_name(dt));
    }
    if ((int64_t)n != numel)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "input '%s': contents.%s has %zu elements, the shape needs %" PRId64,
                              name, field, n, numel);
    size_t es = infd_dtype_size(dt);
    switch (dt) {
    case INFD_DTYPE_INT32:
        *data = tc->int_contents;
        break;
    case INFD_DTYPE_UINT32:
        *data = tc->uint_contents;
        break;
    case INFD_DTYPE_INT64:
        *data = tc->int64_contents;
        break;
    case INFD_DTYPE_UINT64:
        *data = tc->uint64_contents;
        break;
    case INFD_DTYPE_FP32:
        *data = tc->fp32_contents;
        break;
    case INFD_DTYPE_FP64:
        *data = tc->fp64_contents;
        break;
    case INFD_DTYPE_BYTES: {
        size_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += 4 + tc->bytes_contents[i].len;
        uint8_t *w = infd_arena_alloc(a, total ? total : 1, 0);
        if (!w)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "input '%s': out of memory",
                                  name);
        *data = w;
        for (size_t i = 0; i < n; i++) {
            uint32_t len = (uint32_t)tc->bytes_contents[i].len;
            w[0] = (uint8_t)len, w[1] = (uint8_t)(len >> 8), w[2] = (uint8_t)(len >> 16),
            w[3] = (uint8_t)(len >> 24);
            memcpy(w + 4, tc->bytes_contents[i].data, len);
            w += 4 + len;
        }
        *nbytes = total;
        return INFD_STATUS_OK;
    }
    default: {
        /* Narrowing: range-checked, as the HTTP frontend checks JSON. */
        uint8_t *w = infd_arena_alloc(a, n * es + 1, 0);
        if (!w)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "input '%s': out of memory",
                                  name);
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            if (dt == INFD_DTYPE_BOOL)
                v = tc->bool_contents[i] != 0;
            else if (dt == INFD_DTYPE_INT8 || dt == INFD_DTYPE_INT16)
                v = tc->int_contents[i];
            else
                v = tc->uint_contents[i];
            int64_t lo = dt == INFD_DTYPE_INT8 ? INT8_MIN : dt == INFD_DTYPE_INT16 ? INT16_MIN : 0;
            int64_t hi = dt == INFD_DTYPE_INT8    ? INT8_MAX
                         : dt == INFD_DTYPE_INT16 ? INT16_MAX
                         : dt == INFD_DTYPE_UINT8 ? UINT8_MAX
                         : dt == INFD_DTYPE_BOOL  ? 1
                                                  : UINT16_MAX;
            if (v < lo || v > hi)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "input '%s': element %zu: %" PRId64 " is out of range for %s",
                                      name, i, v, infd_dtype_name(dt));
            if (es == 1) {
                w[i] = (uint8_t)v;
            } else {
                uint16_t u = (uint16_t)v;
                memcpy(w + 2 * i, &u, 2);
            }
        }
        *data = w;
        break;
    }
    }
    *nbytes = n * es;
    return INFD_STATUS_OK;
}

/* A tensor's shared-memory parameters (Triton's extension). */
typedef struct shm_param {
    const char *region;   /* NULL: none */
    int64_t offset, size; /* -1: not given */
    const char *bad;      /* a parameter of the wrong type, or NULL */
} shm_param;

static void shm_param_take(shm_param *p, const char *key, const Inference__InferParameter *v)
{
    if (!key || !v || strncmp(key, "shared_memory_", 14) != 0)
        return;
    bool is_int =
        v->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM ||
        v->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    int64_t n = v->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM
                    ? v->int64_param
                : v->uint64_param > INT64_MAX ? INT64_MAX
                                              : (int64_t)v->uint64_param;
    if (strcmp(key, "shared_memory_region") == 0) {
        if (v->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
            p->bad = key;
        else
            p->region = v->string_param;
    } else if (strcmp(key, "shared_memory_offset") == 0 ||
               strcmp(key, "shared_memory_byte_size") == 0) {
        if (!is_int || n < 0)
            p->bad = key;
        else if (key[14] == 'o')
            p->offset = n;
        else
            p->size = n;
    }
}

/* Checks `p` for tensor `what` ("input 'x'"): region and size together. */
static infd_status shm_param_check(shm_param *p, const char *what, infd_error *err)
{
    if (p->bad)
        return infd_error_set(
            err, INFD_STATUS_INVALID_ARGUMENT, "%s: parameter '%s' must be %s", what, p->bad,
            strcmp(p->bad, "shared_memory_region") == 0 ? "a string" : "a non-negative integer");
    if ((p->region != NULL) != (p->size >= 0) || (!p->region && p->offset >= 0))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: parameters 'shared_memory_region' and "
                              "'shared_memory_byte_size' go together",
                              what);
    if (p->offset < 0)
        p->offset = 0;
    return INFD_STATUS_OK;
}

/* The span of a region for `gi`, held until it goes back; *device is -1
 * for system memory, else the CUDA device *data is on. */
static infd_status shm_span(ginfer *gi, const shm_param *p, void **data, int *device,
                            infd_error *err)
{
    if (gi->n_shm >= (int)(sizeof(gi->shm) / sizeof(gi->shm[0])))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "too many shared memory spans in one request");
    infd_status st =
        infd_server_shm_acquire(gi->call->loop->g->server, p->region, (uint64_t)p->offset,
                                (uint64_t)p->size, &gi->shm[gi->n_shm], data, err);
    if (st == INFD_STATUS_OK)
        *device = infd_shm_region_device(gi->shm[gi->n_shm++]);
    return st;
}

/* Plans the response of `gi`: the header of a ModelInferResponse (model,
 * version, id, every output's name, datatype and shape) packed at the
 * start of one slice, followed by each output's raw_output_contents tag
 * and length and room for its bytes; for a stream all of it wrapped as
 * ModelStreamInferResponse.infer_response. `outs` are the outputs' shapes
 * and sizes. */
static infd_status plan_response(ginfer *gi, bool stream, int n, const char *const *names,
                                 const infd_dtype *dtypes, const infd_shape *shapes,
                                 const size_t *sizes, infd_error *err)
{
    Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    Inference__ModelInferResponse__InferOutputTensor ot[INFD_MAX_MODEL_IO];
    Inference__ModelInferResponse__InferOutputTensor *pot[INFD_MAX_MODEL_IO];
    int64_t dims[INFD_MAX_MODEL_IO][INFD_MAX_RANK];
    char ver[24];
    snprintf(ver, sizeof(ver), "%" PRId64, infd_model_version(gi->model));
    r.model_name = (char *)infd_model_name(gi->model);
    r.model_version = ver;
    r.id = gi->id;
    for (int i = 0; i < n; i++) {
        inference__model_infer_response__infer_output_tensor__init(&ot[i]);
        ot[i].name = (char *)names[i];
        ot[i].datatype = (char *)infd_dtype_name(dtypes[i]);
        for (int d = 0; d < shapes[i].rank; d++)
            dims[i][d] = shapes[i].dims[d];
        ot[i].n_shape = (size_t)shapes[i].rank;
        ot[i].shape = dims[i];
        pot[i] = &ot[i];
    }
    r.n_outputs = (size_t)n;
    r.outputs = pot;
    size_t head = protobuf_c_message_get_packed_size(&r.base);
    size_t inner = head;
    for (int i = 0; i < n; i++)
        inner += 1 + varint_size(sizes[i]) + sizes[i];
    size_t prefix = stream ? 1 + varint_size(inner) : 0;
    if (gi->has_out)
        grpc_slice_unref(gi->out);
    gi->has_out = false;
    /* Our allocator, so that the counters see it and OOM is an error. */
    uint8_t *p = infd_malloc(prefix + inner + 1);
    if (!p)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "out of memory for a response of %zu bytes", prefix + inner);
    gi->out = grpc_slice_new(p, prefix + inner, infd_free);
    gi->has_out = true;
    if (stream) {
        *p++ = (2 << 3) | 2; /* ModelStreamInferResponse.infer_response */
        p = put_varint(p, inner);
    }
    p += protobuf_c_message_pack(&r.base, p);
    for (int i = 0; i < n; i++) {
        *p++ = (6 << 3) | 2; /* raw_output_contents */
        p = put_varint(p, sizes[i]);
        gi->out_data[i] = p;
        gi->out_bytes[i] = sizes[i];
        gi->out_shape[i] = shapes[i];
        p += sizes[i];
    }
    gi->n_out = n;
    return INFD_STATUS_OK;
}

/* A request the runtime refused as built (unknown input name, wrong dtype
 * or shape) is the client's error, INVALID_ARGUMENT, whatever code the
 * runtime chose (NOT_FOUND for a name would read as an unknown model). */
static infd_status client_error(infd_error *err)
{
    infd_status st = err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    if (st != INFD_STATUS_OUT_OF_MEMORY)
        st = INFD_STATUS_INVALID_ARGUMENT;
    if (err)
        err->code = st;
    return st;
}

/* Plans the response from the model's outputs for a batch of `batch` rows
 * (0: the model does not batch) and lends each output's room to the
 * request. */
static infd_status plan_outputs(ginfer *gi, const Inference__ModelInferRequest *r, bool stream,
                                int64_t batch, infd_error *err)
{
    infd_model *m = gi->model;
    /* Zeroed: gcc -O1 cannot see that only the first n are read. */
    const char *names[INFD_MAX_MODEL_IO] = { 0 };
    infd_dtype dtypes[INFD_MAX_MODEL_IO] = { 0 };
    infd_shape shapes[INFD_MAX_MODEL_IO] = { 0 };
    size_t sizes[INFD_MAX_MODEL_IO] = { 0 };
    int idx[INFD_MAX_MODEL_IO];
    int n = 0;
    if (r->n_outputs > 0) {
        if (r->n_outputs > INFD_MAX_MODEL_IO)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "more than %d outputs asked",
                                  INFD_MAX_MODEL_IO);
        for (size_t j = 0; j < r->n_outputs; j++) {
            int i = infd_model_output_index(m, r->outputs[j]->name);
            if (i < 0)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "unknown output '%.127s' of model '%s'", r->outputs[j]->name,
                                      infd_model_name(m));
            idx[n++] = i;
        }
    } else {
        for (int i = 0; i < infd_model_n_outputs(m) && i < INFD_MAX_MODEL_IO; i++)
            idx[n++] = i;
    }
    for (int j = 0; j < n; j++) {
        infd_model_io io;
        infd_model_output(m, idx[j], &io);
        names[j] = io.name;
        dtypes[j] = io.dtype;
        shapes[j].rank = 0;
        if (batch > 0)
            shapes[j].dims[shapes[j].rank++] = batch;
        for (int d = 0; d < io.rank && shapes[j].rank < INFD_MAX_RANK; d++)
            shapes[j].dims[shapes[j].rank++] = io.dims[d];
        sizes[j] = io.row_bytes * (size_t)(batch > 0 ? batch : 1);
        if (io.dtype == INFD_DTYPE_BYTES)
            sizes[j] = 0; /* unknown until run: copied afterwards */
        /* In shared memory: written there (fixed size) or copied there
         * afterwards; its raw_output_contents entry stays empty. */
        gi->shm_out[j] = NULL;
        if (r->n_outputs > 0) {
            const Inference__ModelInferRequest__InferRequestedOutputTensor *o = r->outputs[j];
            shm_param sp = { NULL, -1, -1, NULL };
            for (size_t k = 0; k < o->n_parameters; k++)
                shm_param_take(&sp, o->parameters[k]->key, o->parameters[k]->value);
            char what[200];
            snprintf(what, sizeof(what), "output '%.127s'", io.name);
            void *p;
            int dev = -1;
            infd_status st;
            if ((st = shm_param_check(&sp, what, err)) != INFD_STATUS_OK)
                return st;
            if (sp.region) {
                if ((st = shm_span(gi, &sp, &p, &dev, err)) != INFD_STATUS_OK)
                    return infd_error_prefix(err, "%s", what);
                gi->shm_out[j] = p;
                gi->shm_cap[j] = (size_t)sp.size;
                /* A CUDA region's output is copied there at completion. */
                if (dev >= 0   ? (st = infd_request_set_output_device(gi->req, io.name, p,
                                                                      (size_t)sp.size, dev, err))
                    : sizes[j] ? (st = infd_request_set_output_buffer(gi->req, io.name, p,
                                                                      (size_t)sp.size, err))
                               : INFD_STATUS_OK)
                    return client_error(err);
                sizes[j] = 0;
            }
        }
    }
    infd_status st = plan_response(gi, stream, n, names, dtypes, shapes, sizes, err);
    if (st != INFD_STATUS_OK)
        return st;
    for (int j = 0; j < n; j++)
        if (sizes[j] && (st = infd_request_set_output_buffer(gi->req, names[j], gi->out_data[j],
                                                             sizes[j], err)) != INFD_STATUS_OK)
            return client_error(err);
    return INFD_STATUS_OK;
}

/* Microseconds left before the call's deadline; false when it has none. */
static bool deadline_left_us(const gcall *c, int64_t *out)
{
    gpr_timespec dl = c->details.deadline;
    if (gpr_time_cmp(dl, gpr_inf_future(dl.clock_type)) == 0)
        return false;
    gpr_timespec now = gpr_now(dl.clock_type);
    double us = gpr_timespec_to_micros(gpr_time_sub(dl, now));
    *out = us < 0 ? 0 : us > (double)INT64_MAX ? INT64_MAX : (int64_t)us;
    return true;
}

static void on_infer_done(void *user, infd_request *req, infd_status status, const char *message);

/* raw_input_contents that do not match the inputs outside shared memory. */
static infd_status raw_count_error(const Inference__ModelInferRequest *r, int n_raw,
                                   infd_error *err)
{
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "%d raw_input_contents for %zu inputs: give one per input not in "
                          "shared memory, in input order",
                          n_raw, r->n_inputs);
}

/* Decodes one ModelInferRequest (the message in gi->in) and submits it.
 * On error nothing was submitted; `gi->id` is set as far as it was read. */
static infd_status infer_submit(gcall *c, ginfer *gi, infd_error *err)
{
    infd_grpc *g = c->loop->g;
    bool stream = c->m == M_MODEL_STREAM_INFER;
    grpc_wire_raw raw[MAX_RAW];
    const uint8_t *rest;
    size_t rest_n;
    int n_raw = 0;
    const grpc_slice_buffer *sb = &gi->in->data.raw.slice_buffer;
    infd_data_segment *in =
        infd_arena_alloc(&gi->arena, (sb->count ? sb->count : 1) * sizeof(infd_data_segment), 0);
    if (!in)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory decoding the request");
    for (size_t k = 0; k < sb->count; k++)
        in[k] = (infd_data_segment){ GRPC_SLICE_START_PTR(sb->slices[k]),
                                     GRPC_SLICE_LENGTH(sb->slices[k]) };
    infd_status st =
        grpc_wire_split(&gi->arena, in, (int)sb->count, &rest, &rest_n, raw, MAX_RAW, &n_raw, err);
    if (st != INFD_STATUS_OK)
        return st;
    ProtobufCAllocator al = { pb_arena_alloc, pb_arena_free, &gi->arena };
    Inference__ModelInferRequest *r = inference__model_infer_request__unpack(&al, rest_n, rest);
    if (!r)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "malformed ModelInferRequest (%zu bytes)", rest_n);
    snprintf(gi->id, sizeof(gi->id), "%s", r->id);
    if ((st = acquire(g, r->model_name, r->model_version, &gi->model, err)) != INFD_STATUS_OK)
        return st;
    if (r->n_inputs == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "model '%s': no inputs given",
                              infd_model_name(gi->model));
    if (r->n_inputs > INFD_MAX_MODEL_IO)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "more than %d inputs",
                              INFD_MAX_MODEL_IO);
    if ((st = infd_request_create(gi->model, &gi->req, err)) != INFD_STATUS_OK)
        return st;
    infd_request_set_id(gi->req, r->id);
    bool bad = false;
    int64_t v = 0;
    if (grpc_param_int(r, "priority", &v, &bad) && (v < 0 || v > UINT32_MAX))
        bad = true;
    if (!bad && v > 0 &&
        (st = infd_request_set_priority(gi->req, (uint32_t)v, err)) != INFD_STATUS_OK)
        return st;
    int64_t timeout_us = 0, left_us;
    if (!bad && grpc_param_int(r, "timeout", &v, &bad) && v > 0)
        timeout_us = v;
    if (bad)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameters 'priority' and 'timeout' must be integers "
                              "(priority 0..2^32-1)");
    if (deadline_left_us(c, &left_us)) {
        if (left_us <= 0)
            return infd_error_set(err, INFD_STATUS_DEADLINE_EXCEEDED,
                                  "the call's deadline passed before the request was queued");
        if (timeout_us == 0 || left_us < timeout_us)
            timeout_us = left_us;
    }
    if (timeout_us > 0)
        infd_request_set_timeout_us(gi->req, (uint64_t)timeout_us);
    if ((st = grpc_set_sequence(r, gi->req, err)) != INFD_STATUS_OK)
        return st;

    int ri = 0; /* the next raw_input_contents entry */
    for (size_t i = 0; i < r->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *t = r->inputs[i];
        infd_dtype dt = infd_dtype_from_name(t->datatype);
        if (dt == INFD_DTYPE_INVALID || strncmp(t->datatype, "TYPE_", 5) == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input '%.127s': unknown datatype '%.32s'", t->name, t->datatype);
        if (t->n_shape > INFD_MAX_RANK)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input '%.127s': rank %zu is above %d", t->name, t->n_shape,
                                  INFD_MAX_RANK);
        infd_shape shape;
        if ((st = infd_shape_init(&shape, (int32_t)t->n_shape, t->shape, err)) != INFD_STATUS_OK)
            return infd_error_prefix(err, "input '%.127s'", t->name);
        int64_t numel;
        if ((st = infd_shape_numel(&shape, &numel, err)) != INFD_STATUS_OK)
            return infd_error_prefix(err, "input '%.127s'", t->name);
        const void *data = NULL;
        size_t nbytes = 0;
        shm_param sp = { NULL, -1, -1, NULL };
        for (size_t k = 0; k < t->n_parameters; k++)
            shm_param_take(&sp, t->parameters[k]->key, t->parameters[k]->value);
        char what[160];
        snprintf(what, sizeof(what), "input '%.127s'", t->name);
        if ((st = shm_param_check(&sp, what, err)) != INFD_STATUS_OK)
            return st;
        if (sp.region) {
            void *p;
            int dev = -1;
            if (t->contents)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s is in shared memory region '%.127s': it has no "
                                      "contents",
                                      what, sp.region);
            if ((st = shm_span(gi, &sp, &p, &dev, err)) != INFD_STATUS_OK)
                return infd_error_prefix(err, "%s", what);
            if (dev >= 0) {
                if ((st = infd_request_add_input_device(gi->req, t->name, dt, t->shape,
                                                        (int)t->n_shape, p, (size_t)sp.size, dev,
                                                        err)) != INFD_STATUS_OK)
                    return client_error(err);
                continue;
            }
            data = p;
            nbytes = (size_t)sp.size;
        } else if (n_raw > 0) {
            if (ri == n_raw)
                return raw_count_error(r, n_raw, err);
            if (t->contents)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "input '%.127s': has contents, but the request carries "
                                      "raw_input_contents",
                                      t->name);
            grpc_wire_raw *w = &raw[ri++];
            if ((st = infd_request_add_input_segments(gi->req, t->name, dt, t->shape,
                                                      (int)t->n_shape, w->pieces, w->n_pieces,
                                                      err)) != INFD_STATUS_OK)
                return client_error(err);
            continue;
        } else if ((st = typed_input(&gi->arena, t->name, dt, t->contents, numel, &data, &nbytes,
                                     err)) != INFD_STATUS_OK) {
            return st;
        }
        if ((st = infd_request_add_input(gi->req, t->name, dt, t->shape, (int)t->n_shape, data,
                                         nbytes, err)) != INFD_STATUS_OK)
            return client_error(err);
    }
    if (ri != n_raw) /* inputs in shared memory have no raw_input_contents entry */
        return raw_count_error(r, n_raw, err);
    if (grpc_add_outputs(r, gi->req, err) != INFD_STATUS_OK)
        return client_error(err);
    int64_t batch = 0;
    if (infd_model_max_batch_size(gi->model) > 0 && r->inputs[0]->n_shape > 0)
        batch = r->inputs[0]->shape[0];
    if ((st = plan_outputs(gi, r, stream, batch, err)) != INFD_STATUS_OK)
        return st;
    for (size_t k = 0; k < c->md.count; k++)
        if (grpc_slice_str_cmp(c->md.metadata[k].key, INFD_CLIENT_HEADER) == 0) {
            char client[64];
            size_t n = GRPC_SLICE_LENGTH(c->md.metadata[k].value);
            n = n < sizeof(client) - 1 ? n : sizeof(client) - 1;
            memcpy(client, GRPC_SLICE_START_PTR(c->md.metadata[k].value), n);
            client[n] = '\0';
            infd_request_set_client(gi->req, client);
        }
    return infd_infer_async(gi->req, on_infer_done, gi, err);
}

/* ------------------------------------------------------------------------- */
/* Inference: responses                                                      */
/* ------------------------------------------------------------------------- */

/* Checks that the outputs landed where the plan put them, with the planned
 * shapes; otherwise plans again from the actual outputs and copies them. */
static infd_status finish_outputs(ginfer *gi, bool stream, infd_error *err)
{
    int n = infd_request_n_outputs(gi->req);
    bool in_place = n == gi->n_out;
    infd_tensor ts[INFD_MAX_MODEL_IO];
    const char *names[INFD_MAX_MODEL_IO];
    for (int i = 0; i < n && i < INFD_MAX_MODEL_IO; i++) {
        if (infd_request_output(gi->req, i, &names[i], &ts[i]) != INFD_STATUS_OK)
            return infd_error_set(err, INFD_STATUS_INTERNAL, "output %d missing", i);
        if (i < gi->n_out && gi->shm_out[i]) {
            /* In shared memory: in place, or copied there now. */
            if (ts[i].nbytes > gi->shm_cap[i])
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "output '%s': %zu bytes do not fit its "
                                      "shared_memory_byte_size %zu",
                                      names[i], ts[i].nbytes, gi->shm_cap[i]);
            if (ts[i].data != gi->shm_out[i] && ts[i].nbytes) { /* a CUDA region's is there */
                INFD_COUNT_COPY(ts[i].nbytes);
                memcpy(gi->shm_out[i], ts[i].data, ts[i].nbytes);
            }
            if (in_place && !infd_shape_equal(&ts[i].shape, &gi->out_shape[i]))
                in_place = false;
            continue;
        }
        if (in_place && (ts[i].data != gi->out_data[i] || ts[i].nbytes != gi->out_bytes[i] ||
                         !infd_shape_equal(&ts[i].shape, &gi->out_shape[i])))
            in_place = false;
    }
    if (in_place)
        return INFD_STATUS_OK;
    INFD_LOG_TRACE("grpc: outputs of request '%s' copied into the response", gi->id);
    if (n > INFD_MAX_MODEL_IO)
        n = INFD_MAX_MODEL_IO;
    infd_dtype dtypes[INFD_MAX_MODEL_IO];
    infd_shape shapes[INFD_MAX_MODEL_IO];
    size_t sizes[INFD_MAX_MODEL_IO] = { 0 };
    bool in_shm[INFD_MAX_MODEL_IO] = { false };
    for (int i = 0; i < n; i++) {
        dtypes[i] = ts[i].dtype;
        shapes[i] = ts[i].shape;
        in_shm[i] = i < gi->n_out && gi->shm_out[i];
        sizes[i] = in_shm[i] ? 0 : ts[i].nbytes;
    }
    /* The old slice may hold outputs the engine wrote: keep it until the
     * copies are made. */
    grpc_slice old = gi->out;
    bool had = gi->has_out;
    if (had)
        grpc_slice_ref(old);
    infd_status st = plan_response(gi, stream, n, names, dtypes, shapes, sizes, err);
    if (st == INFD_STATUS_OK)
        for (int i = 0; i < n; i++) {
            if (in_shm[i])
                continue;
            INFD_COUNT_COPY(sizes[i]);
            memcpy(gi->out_data[i], ts[i].data, sizes[i]);
        }
    if (had)
        grpc_slice_unref(old);
    return st;
}

/* A stream's error message for one request: error_message, and the
 * request's id and model in infer_response so the client can match it. */
static grpc_byte_buffer *stream_error(ginfer *gi, const char *msg)
{
    Inference__ModelInferResponse ir = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    Inference__ModelStreamInferResponse r = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    char ver[24] = "";
    r.error_message = (char *)msg;
    ir.id = gi->id;
    if (gi->model) {
        ir.model_name = (char *)infd_model_name(gi->model);
        snprintf(ver, sizeof(ver), "%" PRId64, infd_model_version(gi->model));
        ir.model_version = ver;
    }
    r.infer_response = &ir;
    return pack_message(&r.base);
}

/* Starts writing `gi` (c->mu held, nothing being written). */
static void stream_write_locked(gcall *c, ginfer *gi)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (!c->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n++].data.send_initial_metadata.count = 0;
        c->md_sent = true;
    }
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = gi->send;
    c->writing = gi;
    start_batch(c, ops, n, &c->t_send);
}

/* Queues a finished inference's message on its stream; any thread. */
static void stream_push(gcall *c, ginfer *gi)
{
    pthread_mutex_lock(&c->mu);
    c->n_inflight--;
    gi->next = NULL;
    if (c->writing) {
        if (c->q_tail)
            c->q_tail->next = gi;
        else
            c->q_head = gi;
        c->q_tail = gi;
        c->n_queued++;
    } else {
        stream_write_locked(c, gi);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Ends a stream once the client finished sending and every response is
 * out (c->mu held; queue thread). */
static void stream_maybe_finish_locked(gcall *c)
{
    if (!c->half_closed || c->n_inflight > 0 || c->writing || c->q_head || c->status_sent)
        return;
    c->status_sent = true;
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (!c->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n++].data.send_initial_metadata.count = 0;
        c->md_sent = true;
    }
    c->status_details = grpc_empty_slice();
    c->has_status_details = true;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
    ops[n++].data.send_status_from_server.status_details = &c->status_details;
    start_batch(c, ops, n, &c->t_final);
}

/* Hands a finished inference (any thread) to its call: the unary reply or
 * the stream's next message. The inference's reference on the call is
 * dropped once its message has been sent. */
static void infer_respond(ginfer *gi)
{
    gcall *c = gi->call;
    bool stream = c->m == M_MODEL_STREAM_INFER;
    infd_error err = { 0 };
    if (gi->status == INFD_STATUS_OK && finish_outputs(gi, stream, &err) != INFD_STATUS_OK) {
        gi->status = err.code;
        snprintf(gi->message, sizeof(gi->message), "%s", err.msg);
    }
    if (gi->status == INFD_STATUS_OK)
        gi->send = grpc_raw_byte_buffer_create(&gi->out, 1);
    if (!stream) {
        if (gi->status == INFD_STATUS_OK) {
            grpc_byte_buffer *bb = gi->send;
            gi->send = NULL;
            unary_finish(c, bb, GRPC_STATUS_OK, NULL);
        } else {
            unary_finish(c, NULL, grpc_code(gi->status), gi->message);
        }
        return;
    }
    if (gi->status != INFD_STATUS_OK) {
        INFD_LOG_DEBUG("grpc: stream request '%s': %s", gi->id, gi->message);
        gi->send = stream_error(gi, gi->message);
    }
    stream_push(c, gi);
}

static void on_infer_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    ginfer *gi = user;
    gi->status = status;
    if (status != INFD_STATUS_OK)
        snprintf(gi->message, sizeof(gi->message), "%s",
                 message && *message ? message : infd_status_str(status));
    infer_respond(gi);
}

/* A received ModelInfer / ModelStreamInfer message (queue thread), raw and
 * uncompressed (message_raw); taken over. */
static void on_infer_message(gcall *c, grpc_byte_buffer *bb)
{
    gloop *loop = c->loop;
    bool stream = c->m == M_MODEL_STREAM_INFER;
    ginfer *gi = infer_get(loop);
    if (!gi) {
        grpc_byte_buffer_destroy(bb);
        if (!stream)
            unary_finish(c, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    gi->call = c;
    gi->in = bb;
    call_ref(c); /* dropped when gi's message has been sent (or at once) */
    if (!stream)
        c->unary = gi;
    if (stream) {
        pthread_mutex_lock(&c->mu);
        c->n_inflight++;
        pthread_mutex_unlock(&c->mu);
    }
    infd_error err = { 0 };
    infd_status st = infer_submit(c, gi, &err);
    if (st == INFD_STATUS_OK)
        return;
    gi->status = st;
    snprintf(gi->message, sizeof(gi->message), "%s", err.msg[0] ? err.msg : infd_status_str(st));
    if (!stream) {
        /* The reply refers to nothing of gi: recycle it now. */
        c->unary = NULL;
        unary_finish(c, NULL, grpc_code(st), gi->message);
        infer_put(loop, gi);
        call_unref(c);
        return;
    }
    infer_respond(gi);
}

/* ------------------------------------------------------------------------- */
/* The completion-queue loop                                                 */
/* ------------------------------------------------------------------------- */

static method find_method(grpc_slice name)
{
    for (int i = 0; i < M_UNKNOWN; i++)
        if (grpc_slice_str_cmp(name, g_methods[i]) == 0)
            return (method)i;
    return M_UNKNOWN;
}

static void start_recv(gcall *c)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv;
    start_batch(c, &op, 1, &c->t_recv);
}

/* Triton's API group of an RPC (--grpc-restricted-protocol). */
static infd_api api_of(method m)
{
    switch (m) {
    case M_SERVER_LIVE:
    case M_SERVER_READY:
    case M_MODEL_READY:
    case M_HEALTH_CHECK:
    case M_HEALTH_WATCH:
        return INFD_API_HEALTH;
    case M_MODEL_INFER:
    case M_MODEL_STREAM_INFER:
        return INFD_API_INFERENCE;
    case M_MODEL_CONFIG:
        return INFD_API_MODEL_CONFIG;
    case M_MODEL_STATISTICS:
        return INFD_API_STATISTICS;
    case M_REPOSITORY_INDEX:
    case M_REPOSITORY_LOAD:
    case M_REPOSITORY_UNLOAD:
        return INFD_API_MODEL_REPOSITORY;
    case M_SHM_STATUS:
    case M_SHM_REGISTER:
    case M_SHM_UNREGISTER:
    case M_CUDA_SHM_STATUS:
    case M_CUDA_SHM_REGISTER:
    case M_CUDA_SHM_UNREGISTER:
        return INFD_API_SHARED_MEMORY;
    default:
        return INFD_API_METADATA;
    }
}

/* False when the call's API group is restricted and its metadata lacks
 * triton-grpc-protocol-<key> with the group's value; *key is then the
 * metadata key to name. */
static bool call_allowed(const infd_grpc *g, gcall *c, char *key, size_t key_n)
{
    const infd_restricted *r = g->restricted;
    infd_api api = api_of(c->m);
    if (!r || !infd_restricted_key(r, api)[0])
        return true;
    int kn = snprintf(key, key_n, "triton-grpc-protocol-%s", infd_restricted_key(r, api));
    for (size_t i = 0; i < c->md.count; i++) {
        grpc_slice k = c->md.metadata[i].key;
        if (GRPC_SLICE_LENGTH(k) == (size_t)kn &&
            memcmp(GRPC_SLICE_START_PTR(k), key, (size_t)kn) == 0) {
            grpc_slice v = c->md.metadata[i].value;
            return infd_restricted_allows(r, api, (const char *)GRPC_SLICE_START_PTR(v),
                                          GRPC_SLICE_LENGTH(v));
        }
    }
    return false;
}

static void on_new_call(gcall *c, bool ok)
{
    gloop *loop = c->loop;
    infd_grpc *g = loop->g;
    if (!ok) {
        /* The server is shutting down: this request will not be served. */
        atomic_store(&c->refs, 0);
        c->call = NULL;
        call_put(c);
        return;
    }
    atomic_fetch_add(&g->n_calls, 1);
    if (!atomic_load(&g->stopping))
        request_call(loop);
    c->m = find_method(c->details.method);
    char key[INFD_RESTRICTED_KEY_BYTES + 32];
    if (c->m == M_UNKNOWN || c->m == M_HEALTH_WATCH) {
        char msg[300];
        snprintf(msg, sizeof(msg), "unknown method %.*s",
                 (int)(GRPC_SLICE_LENGTH(c->details.method) > 256
                           ? 256
                           : GRPC_SLICE_LENGTH(c->details.method)),
                 (const char *)GRPC_SLICE_START_PTR(c->details.method));
        unary_finish(c, NULL, GRPC_STATUS_UNIMPLEMENTED, msg);
    } else if (!call_allowed(g, c, key, sizeof(key))) {
        char msg[160];
        snprintf(msg, sizeof(msg), "This protocol is restricted, expecting header '%s'", key);
        unary_finish(c, NULL, GRPC_STATUS_PERMISSION_DENIED, msg);
    } else if (c->m == M_MODEL_STREAM_INFER) {
        grpc_op op;
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        op.data.recv_close_on_server.cancelled = &c->cancelled;
        start_batch(c, &op, 1, &c->t_close);
        start_recv(c);
    } else {
        start_recv(c);
    }
    call_unref(c); /* the T_NEW reference */
}

static void on_recv(gcall *c, bool ok)
{
    grpc_byte_buffer *bb = c->recv;
    c->recv = NULL;
    bool infer = c->m == M_MODEL_INFER || c->m == M_MODEL_STREAM_INFER;
    grpc_slice s;
    grpc_byte_buffer *raw = NULL;
    bool have = ok && bb && (infer ? (raw = message_raw(bb)) != NULL : message_slice(bb, &s));
    if (bb && raw != bb)
        grpc_byte_buffer_destroy(bb);
    if (c->m == M_MODEL_STREAM_INFER) {
        if (have) {
            on_infer_message(c, raw);
            pthread_mutex_lock(&c->mu);
            c->recv_paused = c->n_inflight + c->n_queued >= STREAM_MAX_PENDING;
            bool more = !c->recv_paused;
            pthread_mutex_unlock(&c->mu);
            if (!more)
                INFD_LOG_DEBUG("grpc: stream paused at %d pending requests", STREAM_MAX_PENDING);
            if (more)
                start_recv(c);
        } else {
            /* The client half-closed, or the call failed. */
            pthread_mutex_lock(&c->mu);
            c->half_closed = true;
            stream_maybe_finish_locked(c);
            pthread_mutex_unlock(&c->mu);
        }
        return;
    }
    if (!have) {
        unary_finish(c, NULL, ok && bb ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_CANCELLED,
                     ok && bb ? "cannot read the request message" : "no request message");
        return;
    }
    if (c->m == M_MODEL_INFER) {
        on_infer_message(c, raw);
        return;
    }
    rpc_simple(c, s);
    grpc_slice_unref(s);
}

static void on_send(gcall *c)
{
    gloop *loop = c->loop;
    pthread_mutex_lock(&c->mu);
    ginfer *done = c->writing;
    c->writing = NULL;
    ginfer *next = c->q_head;
    if (next) {
        c->q_head = next->next;
        if (!c->q_head)
            c->q_tail = NULL;
        c->n_queued--;
        stream_write_locked(c, next);
    } else {
        stream_maybe_finish_locked(c);
    }
    bool resume = c->recv_paused && c->n_inflight + c->n_queued < STREAM_MAX_PENDING / 2;
    if (resume)
        c->recv_paused = false;
    pthread_mutex_unlock(&c->mu);
    if (resume)
        start_recv(c);
    if (done) {
        infer_put(loop, done);
        call_unref(c);
    }
}

static void on_event(gloop *loop, gtag *t, bool ok)
{
    infd_grpc *g = loop->g;
    if (t == &g->shutdown_tag) {
        pthread_mutex_lock(&g->mu);
        g->shutdown_done = true;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return;
    }
    gcall *c = t->call;
    switch (t->op) {
    case T_NEW:
        on_new_call(c, ok);
        return;
    case T_RECV:
        on_recv(c, ok);
        break;
    case T_SEND:
        on_send(c);
        break;
    case T_FINAL:
        if (c->unary) {
            infer_put(loop, c->unary);
            c->unary = NULL;
            call_unref(c); /* the inference's reference */
        }
        break;
    case T_CLOSE:
        break;
    }
    call_unref(c); /* the batch's reference */
}

static void *loop_main(void *arg)
{
    gloop *loop = arg;
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(loop->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE)
            on_event(loop, ev.tag, ev.success != 0);
    }
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* Start and stop                                                            */
/* ------------------------------------------------------------------------- */

void infd_grpc_options_init(infd_grpc_options *o)
{
    o->host = "0.0.0.0";
    o->port = 8001;
    o->max_message_bytes = (size_t)64 << 20;
    o->n_threads = 1;
    o->handshake_timeout_secs = 30;
    o->idle_timeout_secs = 0;
    o->max_concurrent_streams = 1024;
    o->use_ssl = o->use_ssl_mutual = false;
    o->server_cert = o->server_key = o->root_cert = NULL;
    o->restricted = NULL;
}

/* gRPC core's SSL server credentials from the PEM files of `o`. The files
 * are first loaded into an OpenSSL context, which gRPC core would do only at
 * the first handshake: a bad file is an error at start, naming the file. */
static infd_status ssl_credentials(const infd_grpc_options *o, grpc_server_credentials **out,
                                   infd_error *err)
{
    *out = NULL;
    if (o->use_ssl_mutual && !o->root_cert)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "grpc: --grpc-use-ssl-mutual needs --grpc-root-cert (the CAs "
                              "that sign client certificates)");
    SSL_CTX *check = NULL;
    infd_status st = infd_tls_server_ctx("grpc", o->server_cert, o->server_key,
                                         o->use_ssl_mutual ? o->root_cert : NULL, &check, err);
    SSL_CTX_free(check);
    if (st != INFD_STATUS_OK)
        return st;
    char *cert = NULL, *key = NULL, *root = NULL;
    if ((st = infd_tls_read_pem("grpc: server certificate", o->server_cert, &cert, err)) ==
            INFD_STATUS_OK &&
        (st = infd_tls_read_pem("grpc: server key", o->server_key, &key, err)) == INFD_STATUS_OK &&
        (!o->root_cert || (st = infd_tls_read_pem("grpc: root certificate", o->root_cert, &root,
                                                  err)) == INFD_STATUS_OK)) {
        grpc_ssl_pem_key_cert_pair pair = { .private_key = key, .cert_chain = cert };
        *out = grpc_ssl_server_credentials_create_ex(
            root, &pair, 1,
            o->use_ssl_mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        if (!*out)
            st = infd_error_set(err, INFD_STATUS_INTERNAL, "grpc: SSL server credentials");
    }
    /* gRPC core copies what it keeps. */
    if (key)
        OPENSSL_cleanse(key, strlen(key));
    infd_free(cert);
    infd_free(key);
    infd_free(root);
    return st;
}

int infd_grpc_port(const infd_grpc *g)
{
    return g->port;
}

/* Waits until the server's shutdown tag has been seen, at most until
 * `deadline_ns` (0: no limit); true when it was. With `or_idle`, also
 * returns (false) once no call is open: what is left then are idle client
 * connections, which gRPC waits for and nothing needs. */
static bool wait_shutdown(infd_grpc *g, uint64_t deadline_ns, bool or_idle)
{
    pthread_mutex_lock(&g->mu);
    while (!g->shutdown_done) {
        if (deadline_ns && infd_clock_ns() >= deadline_ns)
            break;
        if (or_idle && atomic_load(&g->n_calls) == 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 5 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    bool done = g->shutdown_done;
    pthread_mutex_unlock(&g->mu);
    return done;
}

/* infd_grpc_start failed before the queue threads ran: poll the queues
 * here until the server's shutdown has completed (its pending
 * request_calls come back failed and are recycled). */
static void poll_until_shutdown(infd_grpc *g)
{
    grpc_server_cancel_all_calls(g->srv);
    while (!g->shutdown_done) {
        for (int i = 0; i < g->n_loops; i++) {
            gpr_timespec t =
                gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(1, GPR_TIMESPAN));
            grpc_event ev = grpc_completion_queue_next(g->loops[i].cq, t, NULL);
            if (ev.type == GRPC_OP_COMPLETE)
                on_event(&g->loops[i], ev.tag, ev.success != 0);
        }
    }
}

static void destroy(infd_grpc *g)
{
    if (!g)
        return;
    atomic_store(&g->stopping, true);
    if (g->srv && g->started) {
        /* Stop listening; calls in flight may finish for a grace period,
         * then the rest (idle streams) are cancelled. The shutdown tag
         * arrives once every call has ended. */
        grpc_server_shutdown_and_notify(g->srv, g->loops[0].cq, &g->shutdown_tag);
        if (!g->loops[0].thread_started)
            poll_until_shutdown(g);
        else if (!wait_shutdown(g, infd_clock_ns() + STOP_GRACE_NS, true)) {
            int n = atomic_load(&g->n_calls);
            if (n > 0)
                INFD_LOG_INFO("grpc: cancelling %d open call(s)", n);
            grpc_server_cancel_all_calls(g->srv);
            wait_shutdown(g, 0, false);
        }
        /* Streams' last batches may still be completing. Bounded: a call
         * whose batch failed to start (logged) is never recycled. */
        uint64_t until = infd_clock_ns() + STOP_GRACE_NS;
        while (atomic_load(&g->n_calls) > 0 && infd_clock_ns() < until)
            infd_clock_sleep_us(1000);
        /* A load or unload still running answers its call later: the
         * server and queues must outlive it (it ends: loads do). */
        while (atomic_load(&g->n_loads) > 0)
            infd_clock_sleep_us(1000);
    }
    if (g->srv)
        grpc_server_destroy(g->srv);
    for (int i = 0; i < g->n_loops; i++)
        if (g->loops[i].cq)
            grpc_completion_queue_shutdown(g->loops[i].cq);
    for (int i = 0; i < g->n_loops; i++) {
        gloop *loop = &g->loops[i];
        if (loop->thread_started) {
            pthread_join(loop->thread, NULL);
        } else if (loop->cq) {
            /* Never polled: drain it here. */
            while (grpc_completion_queue_next(loop->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                       .type != GRPC_QUEUE_SHUTDOWN) {
            }
        }
        if (loop->cq)
            grpc_completion_queue_destroy(loop->cq);
        while (loop->free_calls) {
            gcall *c = loop->free_calls;
            loop->free_calls = c->next;
            call_free(c);
        }
        while (loop->free_infers) {
            ginfer *gi = loop->free_infers;
            loop->free_infers = gi->next;
            infd_arena_fini(&gi->arena);
            infd_free(gi);
        }
    }
    if (g->sync_init) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    infd_free(g->loops);
    if (g->grpc_inited)
        grpc_shutdown();
    infd_free(g);
}

infd_status infd_grpc_start(infd_server *s, const infd_grpc_options *o, infd_grpc **out,
                            infd_error *err)
{
    infd_grpc *g = NULL;
    infd_status st = INFD_STATUS_OK;
    *out = NULL;
    if (o->port < 0 || o->port > 65535 || o->n_threads < 1 || o->n_threads > 64 ||
        o->max_message_bytes == 0 || o->max_message_bytes > INT32_MAX ||
        o->handshake_timeout_secs < 1 || o->handshake_timeout_secs > 86400 ||
        o->idle_timeout_secs < 0 || o->idle_timeout_secs > 86400 * 30 ||
        o->max_concurrent_streams < 1) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "grpc: invalid options (port %d, %d threads, max message %zu bytes)",
                            o->port, o->n_threads, o->max_message_bytes);
        goto out;
    }
    g = infd_calloc(1, sizeof(*g));
    if (!g || !(g->loops = infd_calloc((size_t)o->n_threads, sizeof(gloop)))) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "grpc: frontend");
        goto out;
    }
    if (pthread_mutex_init(&g->mu, NULL) != 0 || pthread_cond_init(&g->cv, NULL) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "grpc: mutex");
        goto out;
    }
    g->sync_init = true;
    g->server = s;
    g->n_loops = o->n_threads;
    g->max_message_bytes = o->max_message_bytes;
    g->restricted = o->restricted;
    g->shutdown_tag = (gtag){ NULL, T_FINAL };
    grpc_init();
    g->grpc_inited = true;

    grpc_arg args[8];
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)o->max_message_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    /* gRPC sets SO_REUSEPORT by default: a second server on the same port
     * would then start and take half the connections instead of failing. */
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    /* Large messages over one connection: clients may send HTTP/2 frames of
     * up to 1 MiB instead of 16 KB, and each stream's window starts at 4 MiB.
     * Measured on the H200 (bench/RESULTS.md): ResNet-50 inputs from 8
     * clients, one connection each, 12.2k -> 14.1k requests/s. */
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
    args[3].value.integer = 1 << 20;
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = (char *)GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
    args[4].value.integer = 4 << 20;
    /* Limits (issue #24): the handshake's deadline, idle connections, calls
     * in flight per connection. */
    size_t n_args = 5;
    args[n_args].type = GRPC_ARG_INTEGER;
    args[n_args].key = (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS;
    args[n_args++].value.integer = o->handshake_timeout_secs * 1000;
    args[n_args].type = GRPC_ARG_INTEGER;
    args[n_args].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
    args[n_args++].value.integer = o->max_concurrent_streams;
    if (o->idle_timeout_secs > 0) {
        args[n_args].type = GRPC_ARG_INTEGER;
        args[n_args].key = (char *)GRPC_ARG_MAX_CONNECTION_IDLE_MS;
        args[n_args++].value.integer = o->idle_timeout_secs * 1000;
    }
    grpc_channel_args ch = { n_args, args };
    g->srv = grpc_server_create(&ch, NULL);
    if (!g->srv) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "grpc: grpc_server_create failed");
        goto out;
    }
    for (int i = 0; i < g->n_loops; i++) {
        g->loops[i].g = g;
        g->loops[i].cq = grpc_completion_queue_create_for_next(NULL);
        if (!g->loops[i].cq) {
            st = infd_error_set(err, INFD_STATUS_INTERNAL, "grpc: completion queue");
            goto out;
        }
        grpc_server_register_completion_queue(g->srv, g->loops[i].cq, NULL);
    }
    char addr[300];
    const char *host = o->host ? o->host : "0.0.0.0";
    snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, o->port);
    grpc_server_credentials *creds = NULL;
    if (o->use_ssl || o->use_ssl_mutual) {
        if ((st = ssl_credentials(o, &creds, err)) != INFD_STATUS_OK)
            goto out;
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    g->port = grpc_server_add_http2_port(g->srv, addr, creds);
    grpc_server_credentials_release(creds);
    if (g->port <= 0) {
        st = infd_error_set(err, INFD_STATUS_IO,
                            "grpc: cannot listen on %s (address in use or not resolvable)", addr);
        goto out;
    }
    grpc_server_start(g->srv);
    g->started = true;
    for (int i = 0; i < g->n_loops; i++) {
        for (int k = 0; k < PENDING_CALLS; k++) {
            if (!request_call(&g->loops[i])) {
                st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "grpc: pending calls");
                goto out;
            }
        }
    }
    /* Queue threads start with every signal blocked, as the HTTP loops do:
     * SIGTERM/SIGINT reach the thread that waits for them. */
    for (int i = 0; i < g->n_loops; i++) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&g->loops[i].thread, NULL, loop_main, &g->loops[i]);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            st = infd_error_set(err, INFD_STATUS_INTERNAL, "grpc: thread: %s", strerror(rc));
            goto out;
        }
        g->loops[i].thread_started = true;
        char tname[16];
        snprintf(tname, sizeof(tname), "grpc-%d", i % 1000);
        pthread_setname_np(g->loops[i].thread, tname); /* for profiles (top -H, perf) */
    }
    *out = g;
    g = NULL;
out:
    destroy(g);
    return st;
}

void infd_grpc_stop(infd_grpc *g)
{
    destroy(g);
}
