/*
 * runtime.h - the runtime's internal structures, shared by its files:
 *   server.c       registry of models, repository scans, load/unload/poll
 *   model.c        one model version: config completion, plans, instances
 *   scheduler.c    requests, the per-model queue, dynamic batching, workers
 *   sequence.c     the sequence batcher (sequence_batching)
 *   model_onnx.c   the ONNX kind's batch run and warmup
 *   model_plugin.c model kinds registered through include/infd/plugin.h
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
#include "infd/plugin.h"
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
    /* infd_request_defer marks the batch's slot: the request may be done
     * (and reused) by another thread before run_batch returns, so execute
     * reads this, never the request, to skip it. */
    bool deferred[INFD_STATS_MAX_BATCH];
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
    /* A step of an ensemble request already accepted: taken while the
     * server drains, so the ensemble request can finish. */
    bool internal;
    char id[128];
    char client[64];     /* who sent it (infd_request_set_client) */
    uint32_t priority;   /* level index (0-based) once resolved */
    bool priority_given; /* by the client (not the default) */
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
        infd_shape shape;  /* as given */
        const void *whole; /* the bytes in one piece (infd_request_input), or NULL */
        /* In memory of CUDA device `device` (infd_request_add_input_device,
         * a model that reads device inputs): never read by the host. */
        bool on_device;
        int device;
        bool host_copy; /* one piece in `dev_host`, copied from a device */
    } in[INFD_MAX_MODEL_IO];
    /* Sequence (infd_request_set_sequence): the correlation id, its flags,
     * and the slot the sequence batcher pinned it to (-1: none). */
    uint64_t seq_id;
    char seq_sid[128];
    bool seq_is_string, seq_set;
    uint32_t seq_flags;
    int seq_slot;
    /* A kind's run_batch: outputs it set (bit per model output) and the
     * request's own failure (infd_request_fail; OK: none). */
    uint64_t kind_set;
    infd_status kind_status;
    char kind_msg[256];
    bool deferred;                 /* infd_request_defer: run_batch left it for infd_request_done */
    struct rt_instance *exec_inst; /* while its batch runs: the instance, and its slot */
    int exec_slot;
    /* Requested outputs (model output indices); n_req 0: all. */
    int n_req;
    int req[INFD_MAX_MODEL_IO];
    /* The classification extension: class_count per model output (0: the
     * tensor itself); any_cls when one is set. */
    int cls[INFD_MAX_MODEL_IO];
    bool any_cls;
    struct {
        void *data;
        size_t capacity;
        bool on_device; /* CUDA device `device`'s memory: copied there at completion */
        int device;
    } user_out[INFD_MAX_MODEL_IO]; /* by model output index */
    bool any_dev_out;
    bool dev_out_done; /* copied there already, with the rest of its batch */
    /* Results: n_out tensors in the order of `out_index`. */
    int n_out;
    int out_index[INFD_MAX_MODEL_IO];
    infd_tensor out[INFD_MAX_MODEL_IO];
    /* Outputs lent by the kind (infd_request_output_adopt), by output slot
     * k: released when the request is destroyed. */
    struct {
        infd_release_fn fn;
        void *user;
    } lent[INFD_MAX_MODEL_IO];
    bool any_lent;
    /* Kept across reuse (infd_request_create): */
    void *own;        /* the request's own output memory */
    size_t own_bytes; /* its capacity */
    void *cls_buf;    /* classified outputs' BYTES */
    size_t cls_cap;
    void *var; /* outputs of no fixed size (kinds), one after another */
    size_t var_cap, var_used;
    void *join; /* inputs given in pieces, joined (infd_request_input) */
    size_t join_cap, join_used;
    void *dev_host; /* device inputs copied to the host for a model that reads none */
    size_t dev_host_cap, dev_host_used;
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

/* One sequence (sequence.c): a slot's, or one waiting for a slot. */
typedef struct rt_seq {
    struct rt_seq *next; /* backlog or free list */
    uint64_t id;
    char sid[128];
    bool is_string;
    bool active;               /* a slot: holds a sequence */
    bool end_queued;           /* its END request is queued: nothing more is accepted */
    bool running;              /* a request of it is executing */
    bool freeing;              /* a slot: released, the kind not yet told (sequence_free) */
    infd_request *head, *tail; /* its queued requests, in order */
    uint64_t last_ns;          /* last request submitted or completed */
} rt_seq;

typedef struct rt_sequencer {
    uint8_t *state;                      /* [n_slots][model->state_bytes]: implicit state */
    bool oldest;                         /* strategy: oldest (else direct) */
    int n_slots;                         /* slots (direct: per instance, max(1, max_batch) each) */
    int per_inst;                        /* direct: slots of each instance */
    rt_seq *slots;                       /* [n_slots] */
    rt_seq *backlog_head, *backlog_tail; /* sequences waiting for a slot */
    rt_seq *spare;                       /* free backlog entries */
    uint64_t idle_ns;                    /* max_sequence_idle_microseconds */
    uint64_t delay_ns;                   /* the strategy's max_queue_delay_microseconds */
    int n_free_pending;                  /* slots freed whose kind has not been told */
    int *free_pending;                   /* [n_slots] */
} rt_sequencer;

/* An input the runtime feeds instead of the client (an ONNX model under
 * the sequence batcher): a control of config.pbtxt's control_input, or an
 * implicit state of its `state`. */
typedef enum rt_hidden_kind {
    RT_HIDDEN_START,
    RT_HIDDEN_END,
    RT_HIDDEN_READY,
    RT_HIDDEN_CORRID,
    RT_HIDDEN_STATE
} rt_hidden_kind;

typedef struct rt_hidden {
    rt_hidden_kind kind;
    uint8_t on[8], off[8]; /* a control's true and false values, in the input's dtype */
    int state_out;         /* STATE: the model output (hidden) it is read back from */
    size_t state_at;       /* STATE: where its row lies in a slot's state */
} rt_hidden;

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
    /* in[0, n_in_pub) and out[0, n_out_pub) are the client's; the rest
     * (controls and implicit state, `hidden`) only the runtime's. */
    int n_in, n_out, n_in_pub, n_out_pub;
    /* Outputs' label_filename (the classification extension): the file's
     * text, its lines split in place. */
    char *label_text[INFD_MAX_MODEL_IO];
    char **labels[INFD_MAX_MODEL_IO];
    int n_labels[INFD_MAX_MODEL_IO];
    rt_hidden hidden[INFD_MAX_MODEL_IO]; /* of in[n_in_pub + k] */
    size_t state_bytes;                  /* a sequence slot's implicit state */
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
    /* Inputs in device memory (infd_request_add_input_device) are read
     * where they lie: an ONNX model whose instances are all on GPUs and copy
     * every input to the device from pieces. Otherwise they are copied to
     * the host when added. */
    bool device_inputs;
    atomic_int state; /* infd_model_state */

    /* A model of a plugin kind (NULL: ONNX), its state from load, and its
     * name for metadata. */
    const infd_model_kind *kind;
    void *kind_state;
    /* Set by the kind's load (infd_kind_model_set_submit): requests go to
     * it at submit, past the queue and the instances. */
    infd_kind_submit_fn kind_submit;
    bool lends_outputs; /* infd_kind_model_set_lends_outputs */
    /* Scheduling (config). */
    bool dynamic;      /* dynamic_batching present */
    rt_sequencer *seq; /* sequence_batching present; guarded by mu */
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

/* shm.c: the server's shared memory regions (infd.h). */
typedef struct rt_shm_table {
    pthread_mutex_t mu;
    infd_shm_region *head;
    unsigned kinds; /* INFD_SHM_* enabled */
} rt_shm_table;
void rt_shm_init(rt_shm_table *t, unsigned kinds);
void rt_shm_fini(rt_shm_table *t); /* unmaps every region */
rt_shm_table *rt_server_shm(infd_server *server);

/* pinned.c: makes the process's pinned memory pool of `bytes` (rounded
 * down to 64 KiB pages) unless it exists; rt_pinned_init_memory lays it
 * over memory the caller provides (tests). */
infd_status rt_pinned_init(size_t bytes, infd_error *err);
infd_status rt_pinned_init_memory(void *mem, size_t bytes, infd_error *err);
/* Reads "<dir>/config.pbtxt" if it exists (else an empty config). */
infd_status rt_config_read(const char *dir, Inference__ModelConfig **out, infd_error *err);
void rt_config_free(Inference__ModelConfig *c);

/* model_onnx.c: runs a batch of an ONNX model on the instance's plan;
 * t[0] and t[1] get the clock before and after the engine run. */
infd_status rt_onnx_run_batch(infd_model *m, rt_instance *inst, int n, int64_t rows, uint64_t t[2],
                              infd_error *err);

/* model_plugin.c */
/* A registered kind, or the built-in "plugin" kind (kind_library.c: a
 * processor from a shared library the config names). */
const infd_model_kind *rt_kind_find(const char *name);
extern const infd_model_kind rt_library_kind;
/* ensemble.c: platform "ensemble" (Triton's ensemble_scheduling). */
extern const infd_model_kind rt_ensemble_kind;
/* model.c: a config DataType as a dtype (TYPE_STRING is BYTES). */
infd_dtype rt_config_dtype(Inference__DataType t);
/* "asr, ..." or "none": the registered kinds, for messages (static). */
const char *rt_kind_names(void);
/* Loads a model of a plugin kind after the common configuration (instance
 * groups, queues, sequence slots). */
infd_status rt_plugin_load(infd_model *m, const char *version_dir, const char *cfile,
                           infd_error *err);
infd_status rt_plugin_run_batch(infd_model *m, rt_instance *inst, int n, infd_error *err);
/* Model outputs of no fixed size (row_bytes 0) that the request asked for
 * and run_batch did not set: the index of the first, or -1. */
int rt_plugin_missing_output(const infd_request *r);

/* sequence.c (every call with m->mu held, except rt_seq_create/free) */
infd_status rt_seq_create(infd_model *m, const char *cfile, infd_error *err);
void rt_seq_free(infd_model *m);
/* Queues an accepted request under its sequence, or refuses it. */
infd_status rt_seq_submit(infd_model *m, infd_request *r, infd_error *err);
/* Pops the instance's next batch into inst->batch (their seq_slot set);
 * 0 when there is none now. *wait_ns: how long until one may be (a delay
 * or an idle deadline; UINT64_MAX: none). */
int rt_seq_pop(infd_model *m, rt_instance *inst, uint64_t now, uint64_t *wait_ns);
/* After a batch ran: END requests free their slots, running flags clear. */
void rt_seq_done(infd_model *m, rt_instance *inst, int n);
/* Takes the slots freed since the last call (the kind's sequence_free is
 * called for them outside the lock): count, into out[cap]. Then
 * rt_seq_reuse makes them free for new sequences. */
int rt_seq_take_freed(infd_model *m, int *out, int cap);
void rt_seq_reuse(infd_model *m, const int *slots, int n);

/* scheduler.c */
/* Whether `segs` (nbytes in all) hold exactly `numel` BYTES elements. */
bool rt_bytes_layout_ok(const infd_data_segment *segs, size_t nbytes, int64_t numel);
/* Releases the outputs a kind lent the request (infd_request_output_adopt;
 * model_plugin.c). */
void rt_request_unlend(infd_request *req);
infd_status rt_model_start_workers(infd_model *m, infd_error *err);
void rt_request_pool_free(infd_model *m);

/* A whole file (at most 16 MiB), NUL-terminated; free with infd_free. */
infd_status rt_read_file(const char *path, char **out, size_t *n, infd_error *err);

/* classify.c: the outputs' label files (config's label_filename, in the
 * model folder, one label per line), and the classification extension
 * applied to a completed request's outputs. */
infd_status rt_labels_load(infd_model *m, const char *version_dir, const char *cfile,
                           infd_error *err);
void rt_labels_free(infd_model *m);
infd_status rt_classify(infd_request *r, infd_error *err);
/* Runs the model once per plan with zero (or config warmup) inputs. */
infd_status rt_model_warmup(infd_model *m, infd_error *err);

/* server.c */
bool rt_server_is_draining(const infd_server *server);

#endif /* INFD_RUNTIME_RUNTIME_H */
