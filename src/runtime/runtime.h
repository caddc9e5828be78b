/*
 * runtime.h - the runtime's internal structures, shared by its files:
 *   server.c     registry of models, repository scans, load/unload/poll
 *   model.c      one model version: config completion, plans, instances
 *   scheduler.c  requests, the per-model queue, dynamic batching, workers
 *
 * Ownership and threads:
 *  - The server owns a registry of entries (one per model folder), guarded
 *    by server->mu. An entry lists its versions; a loaded version is an
 *    infd_model held by the registry (one reference) and by every handle
 *    and request that acquired it.
 *  - A model owns its devices (the CPU and/or GPUs its instance groups
 *    place instances on), on each device one plan per served batch size,
 *    its instances (one worker thread and one engine context per plan of
 *    its device each), its queue and its request free list. model->mu
 *    guards the queue, the pending count and the flags; the statistics are
 *    relaxed atomics.
 *  - Worker threads are joined when the model is unloaded (model_stop), so
 *    the final release (possibly from a completion callback on a worker
 *    thread) only frees memory.
 */
#ifndef INFD_RUNTIME_RUNTIME_H
#define INFD_RUNTIME_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/histogram.h"
#include "infd/engine.h"
#include "model_config.pb-c.h"
#include "runtime/pbjson.h"
#include "runtime/pbtxt.h"

/* Most priority levels a model may configure. */
#define RT_MAX_PRIORITY_LEVELS 16
/* Most plans (distinct batch sizes) per model and device. */
#define RT_MAX_PLANS 16
/* Most devices (the CPU and GPUs) one model's instances run on. */
#define RT_MAX_DEVICES 17

typedef struct rt_queue {
    infd_request *head, *tail;
    uint32_t n;              /* requests queued at this level */
    uint64_t timeout_us;     /* default queue timeout of this level (0: none) */
    uint32_t max_queue_size; /* 0: unbounded */
    bool delay_on_timeout;   /* timeout_action DELAY: never expire */
    bool allow_timeout_override;
} rt_queue;

typedef struct rt_instance {
    infd_model *model;
    int index;
    int device; /* index in model->dev */
    int group;  /* config instance_group index */
    pthread_t thread;
    bool started;
    infd_context *ctxs[RT_MAX_PLANS]; /* one per plan */
    /* Gathered inputs and plan outputs, sized for the largest plan; NULL
     * where every plan's context has pinned staging for it (GPU plans:
     * the batcher uses that instead). */
    void *in_buf[INFD_MAX_MODEL_IO];
    void *out_buf[INFD_MAX_MODEL_IO];
    infd_request *batch[INFD_STATS_MAX_BATCH]; /* requests of the running batch */
    /* The running batch's gather (scheduler.c): each request's first row,
     * where each input's rows go, the chunk size, and the first chunk of
     * each input (chunks of all inputs are numbered in one sequence). */
    int64_t row_at[INFD_STATS_MAX_BATCH];
    char *gather_dst[INFD_MAX_MODEL_IO];
    int gather_n;
    size_t gather_chunk;
    int64_t gather_first[INFD_MAX_MODEL_IO + 1];
    /* GPU instances: per input staged everywhere, room for RT_PIECES(max
     * rows) pieces that the device copy of a batch reads (scheduler.c,
     * pinned_pieces), and whether the running batch's gather leaves out
     * the pieces in the pinned memory pool. */
    infd_data_segment *pieces[INFD_MAX_MODEL_IO];
    int pieces_cap;
    bool gather_skip_pinned[INFD_MAX_MODEL_IO];
    bool logged_pinned;
} rt_instance;

#define RT_PIECES(rows) (4 * (int)(rows) + 16)

struct infd_request {
    infd_request *next; /* queue or free-list link */
    infd_model *model;
    char id[128];
    uint32_t priority; /* level index (0-based) once resolved */
    uint64_t timeout_us;
    int64_t rows; /* batch rows (1 when the model does not batch); 0: no input yet */
    int n_inputs_set;
    struct {
        /* The data in n_segs pieces (add_input: one, `one`), nbytes in all. */
        const infd_data_segment *segs;
        int n_segs;
        infd_data_segment one;
        size_t nbytes;
        bool set;
    } in[INFD_MAX_MODEL_IO];
    /* Requested outputs (model output indices); n_req 0: all. */
    int n_req;
    int req[INFD_MAX_MODEL_IO];
    struct {
        void *data;
        size_t capacity;
    } user_out[INFD_MAX_MODEL_IO]; /* by model output index */
    /* Results: n_out tensors in the order of `out_index`. */
    int n_out;
    int out_index[INFD_MAX_MODEL_IO];
    infd_tensor out[INFD_MAX_MODEL_IO];
    void *own;        /* the request's own output memory (kept across reuse) */
    size_t own_bytes; /* its capacity */
    infd_infer_callback cb;
    void *cb_user;
    uint64_t t_submit_ns, deadline_ns, queue_ns, compute_ns;
    bool in_flight;
};

/* One served batch size. Every device's plan for it is compiled from the
 * same model with the same shapes, so the maps hold for all of them. */
typedef struct rt_plan {
    int64_t batch;                  /* rows the plan runs (1 for a non-batching model) */
    int out_map[INFD_MAX_MODEL_IO]; /* plan output index of model output j */
    int in_map[INFD_MAX_MODEL_IO];  /* plan input index of model input i */
} rt_plan;

/* A device the model's instances run on, with its plans. */
typedef struct rt_device {
    infd_device_kind kind;
    int gpu;                        /* CUDA ordinal (kind CUDA); 0 for the CPU */
    int n_inst;                     /* instances on it: its plans' max_contexts */
    bool auto_only;                 /* only KIND_AUTO groups use it: may fall back to the CPU */
    infd_plan *plans[RT_MAX_PLANS]; /* per model->plans[p]; owned */
} rt_device;

struct infd_model {
    atomic_int refs;
    infd_server *server;
    char *name;
    int64_t version;
    char *path; /* the ONNX file */
    /* The model's constants, shared by every plan of every device (one
     * copy per device however many batch sizes; engine.h), trimmed once
     * the plans are built. */
    infd_weights *weights;
    /* Memory held once READY (infd_model_stats.memory_usage; fixed after
     * the load). */
    infd_memory_usage mem[INFD_STATS_MAX_MEMORY];
    int n_mem;
    uint64_t mem_weight_bytes, mem_arena_bytes;
    Inference__ModelConfig *config; /* completed; owned */
    int max_batch;                  /* 0: no batching */
    int n_in, n_out;
    infd_model_io in[INFD_MAX_MODEL_IO], out[INFD_MAX_MODEL_IO];
    rt_plan plans[RT_MAX_PLANS]; /* ascending batch */
    int n_plans;
    rt_device dev[RT_MAX_DEVICES]; /* GPUs first (ascending), then the CPU */
    int n_dev;
    infd_precision gpu_precision; /* of CUDA plans (config: precision_mode / precision) */
    rt_instance *inst;
    int n_inst;
    int n_threads; /* engine threads per CPU instance */
    /* Gathers the instances' large batches in parallel (model.c,
     * create_copy_pool); NULL when the model has none. */
    struct infd_pool *copy_pool;
    atomic_int state; /* infd_model_state */

    /* Scheduling (config). */
    bool dynamic; /* dynamic_batching present */
    uint64_t max_queue_delay_ns;
    int preferred[INFD_STATS_MAX_BATCH];
    int n_preferred;
    int n_levels;
    uint32_t default_level; /* 0-based */

    /* Guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers wait for requests */
    pthread_cond_t drain_cv; /* drain waits for pending == 0 */
    rt_queue q[RT_MAX_PRIORITY_LEVELS];
    uint64_t depth;   /* queued requests */
    uint64_t pending; /* accepted, not completed */
    bool accepting;   /* false once unloading or draining */
    bool stop_workers;
    infd_request *free_list;

    /* Statistics (relaxed atomics). */
    infd_model_stats st;
    infd_histogram *latency; /* ns, submit -> completion */
};

/* The plan instance `inst` runs for served batch size index `p`. */
static inline infd_plan *rt_instance_plan(const rt_instance *inst, int p)
{
    return inst->model->dev[inst->device].plans[p];
}

/* model.c */
infd_status rt_model_load(infd_server *server, const char *name, int64_t version,
                          const char *version_dir, const Inference__ModelConfig *config,
                          const char *config_file, infd_model **out, infd_error *err);
/* Stops accepting, waits for pending requests, joins the workers. */
void rt_model_stop(infd_model *m);
void rt_model_free(infd_model *m);
int rt_server_threads(const infd_server *server);
size_t rt_server_pinned_pool_bytes(const infd_server *server);

/* pinned.c: makes the process's pinned memory pool of `bytes` (rounded
 * down to 64 KiB pages) unless it exists; rt_pinned_init_memory lays it
 * over memory the caller provides (tests). */
infd_status rt_pinned_init(size_t bytes, infd_error *err);
infd_status rt_pinned_init_memory(void *mem, size_t bytes, infd_error *err);
/* Reads "<dir>/config.pbtxt" if it exists (else an empty config). */
infd_status rt_config_read(const char *dir, Inference__ModelConfig **out, infd_error *err);
void rt_config_free(Inference__ModelConfig *c);

/* scheduler.c */
infd_status rt_model_start_workers(infd_model *m, infd_error *err);
void rt_request_pool_free(infd_model *m);
/* Runs the model once per plan with zero (or config warmup) inputs. */
infd_status rt_model_warmup(infd_model *m, infd_error *err);

/* server.c */
bool rt_server_is_draining(const infd_server *server);

#endif /* INFD_RUNTIME_RUNTIME_H */
