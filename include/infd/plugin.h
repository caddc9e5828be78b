/*
 * infd/plugin.h - model kinds: code above the public API that the server
 * serves as a model.
 *
 * A model kind is a const table of functions, like the engine's backend
 * vtable. The server's scheduler, batchers (dynamic and sequence),
 * instances, statistics and frontends treat a model of a registered kind
 * as they treat an ONNX model: requests are queued, formed into batches and
 * handed to the kind's run_batch on an instance thread, with the same
 * statistics and the same protocol errors. A model chooses its kind in
 * config.pbtxt with `backend: "<kind name>"`.
 *
 * The speech app registers "asr" (src/apps/asr/kind.c): its pipeline runs
 * under the sequence batcher with one recognizer stream per sequence slot.
 *
 * Threads: load and unload run on the thread that loads the model;
 * run_batch runs on the instance's worker thread, at most one call per
 * instance at a time (instances run concurrently); sequence_free on
 * whichever worker thread notices the sequence ended or went idle.
 */
#ifndef INFD_PLUGIN_H
#define INFD_PLUGIN_H

#include "infd/engine.h"
#include "infd/infd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model while its kind loads it. */
typedef struct infd_kind_model infd_kind_model;

/* The requests of one execution. */
typedef struct infd_batch infd_batch;

typedef struct infd_model_kind {
    /* config.pbtxt's backend; [a-z0-9_]+, at most 31 bytes. */
    const char *name;
    /* What model metadata reports as the platform (e.g. "infd_asr"). */
    const char *platform;
    /* Passed to load unchanged. */
    void *user;
    /*
     * Reads the model from infd_kind_model_dir and its parameters, declares
     * its inputs and outputs (infd_kind_model_add_input/output; the config's
     * own input/output lists, when given, are checked against them) and
     * returns the model's state in *state. An error leaves the model
     * UNAVAILABLE with err's message; the server keeps serving.
     */
    infd_status (*load)(void *user, infd_kind_model *km, void **state, infd_error *err);
    /* Frees what load made; after the last run_batch has returned. */
    void (*unload)(void *state);
    /*
     * Runs the batch on instance `instance` (0-based, < the model's
     * instance count). Every request of the batch either gets its outputs
     * (infd_request_output_set) or fails on its own (infd_request_fail); a
     * request left with neither, or every one when run_batch returns an
     * error, completes with the error. Requests come in arrival order per
     * sequence; a sequence's requests never run concurrently.
     */
    infd_status (*run_batch)(void *state, int instance, infd_batch *batch, infd_error *err);
    /*
     * Optional: a sequence slot is free again (its END request ran, or it
     * went idle past max_sequence_idle_microseconds). The kind may release
     * what the slot held; the slot's next request will carry
     * INFD_SEQUENCE_START.
     */
    void (*sequence_free)(void *state, int slot);
} infd_model_kind;

/*
 * Registers a kind for the servers of this process, before they load a
 * model of it. The table is borrowed and must outlive every server.
 * INVALID_ARGUMENT for a bad name, a missing function or a second kind of
 * the same name; RESOURCE_EXHAUSTED past 16 kinds.
 */
INFD_API infd_status infd_model_kind_register(const infd_model_kind *kind, infd_error *err);

/*
 * A processor in a shared library: config.pbtxt says
 *   backend: "plugin"
 *   parameters { key: "library" value { string_value: "libmyproc.so" } }
 * (a path relative to the version folder or the model folder, or
 * absolute), and the library exports infd_plugin_kind(), which returns its
 * kind table. The server opens the library when it loads the model and
 * uses the table as it uses a registered kind's: the processor batches,
 * has instances, statistics and metrics, and can be a step of an
 * ensemble. The table's name and platform are the processor's own; the
 * model's backend stays "plugin". The library calls the host's infd_*
 * functions (the `infd` command exports them; an embedder loads
 * libinfd.so with RTLD_GLOBAL) and links no copy of libinfd itself.
 */
#define INFD_PLUGIN_EXPORT INFD_API
typedef const infd_model_kind *(*infd_plugin_kind_fn)(void);
INFD_PLUGIN_EXPORT const infd_model_kind *infd_plugin_kind(void);

/* ----- while loading ------------------------------------------------------ */

INFD_API const char *infd_kind_model_name(const infd_kind_model *km);
INFD_API int64_t infd_kind_model_version(const infd_kind_model *km);
/* The version folder (<repo>/<model>/<version>). */
INFD_API const char *infd_kind_model_dir(const infd_kind_model *km);
/* config.pbtxt's `parameters { key: ... value { string_value: ... } }`, or
 * NULL when absent. */
INFD_API const char *infd_kind_model_parameter(const infd_kind_model *km, const char *key);
/* The config's max_batch_size (rows of one execution; 0: no batching). */
INFD_API int infd_kind_model_max_batch_size(const infd_kind_model *km);
/* The instances' device: INFD_DEVICE_CPU, or INFD_DEVICE_CUDA with the
 * GPU's ordinal in *gpu (a kind model's instances all run on one device). */
INFD_API infd_device_kind infd_kind_model_device(const infd_kind_model *km, int *gpu);
INFD_API int infd_kind_model_n_instances(const infd_kind_model *km);
/* Sequence slots (the sequence batcher's: each active sequence holds one
 * in [0, n)); 0 when the model has no sequence_batching. */
INFD_API int infd_kind_model_n_sequence_slots(const infd_kind_model *km);

/* The model's config as JSON (what GET /v2/models/{name}/config returns,
 * before the kind declares its inputs and outputs): *out is NUL-terminated,
 * *n its length; free it with infd_free. */
INFD_API infd_status infd_kind_model_config_json(const infd_kind_model *km, char **out, size_t *n,
                                                 infd_error *err);

/*
 * Declares an input or output. dims exclude the batch dim when the model
 * batches; -1 is a dim of any length. BYTES elements are 4-byte
 * little-endian lengths, each followed by its bytes (infd.h). Outputs with a
 * -1 dim or BYTES have no fixed size: the kind sets each request's.
 */
INFD_API infd_status infd_kind_model_add_input(infd_kind_model *km, const char *name,
                                               infd_dtype dtype, int rank, const int64_t *dims,
                                               infd_error *err);
INFD_API infd_status infd_kind_model_add_output(infd_kind_model *km, const char *name,
                                                infd_dtype dtype, int rank, const int64_t *dims,
                                                infd_error *err);

/*
 * Taking requests directly: a kind's load may name a function that gets
 * each request of the model on the thread that submits it, instead of the
 * model's queue and instances (which then stay idle). infd_infer_async
 * calls submit(state, req, err) after its own checks. OK: the kind has
 * taken the request and completes it later with infd_request_done (after
 * infd_request_output_set or infd_request_fail), exactly once, from any
 * thread; a server drain waits for it. An error rejects the submit, and the
 * caller gets it at once (the cluster router answers rate limits and
 * overload this way). Requests do not batch. INVALID_ARGUMENT for a model
 * with sequence batching.
 */
typedef infd_status (*infd_kind_submit_fn)(void *state, infd_request *req, infd_error *err);
INFD_API infd_status infd_kind_model_set_submit(infd_kind_model *km, infd_kind_submit_fn submit,
                                                infd_error *err);

/*
 * Lending outputs: a kind whose outputs arrive in memory of their own (the
 * cluster router's, whose outputs are ZeroMQ frames) says so at load, and
 * sets them with infd_request_output_adopt instead of copying. Frontends see
 * it (infd_model_lends_outputs) and read such outputs where they lie
 * instead of lending the request buffers of their own.
 */
INFD_API void infd_kind_model_set_lends_outputs(infd_kind_model *km);

/* ----- while running a batch --------------------------------------------- */

INFD_API int infd_batch_size(const infd_batch *batch);
/* Request k in [0, infd_batch_size). */
INFD_API infd_request *infd_batch_request(const infd_batch *batch, int k);

typedef struct infd_sequence_info {
    int slot;              /* the sequence's slot; -1 when the model has no sequence batcher */
    uint32_t flags;        /* INFD_SEQUENCE_START / END */
    uint64_t id;           /* the correlation id (0 when it is a string) */
    const char *id_string; /* the string correlation id, or NULL */
} infd_sequence_info;

INFD_API void infd_request_sequence(const infd_request *req, infd_sequence_info *out);

/*
 * Input i (model order) of the request: its dtype and full shape, and its
 * bytes in one piece (*data, *nbytes), at an address aligned to its element
 * size (up to 8). A request whose input came in pieces
 * (infd_request_add_input_segments), or in one piece at an address not so
 * aligned, has it copied into the request's own memory (INFD_ALIGNMENT
 * aligned) on the first call; OUT_OF_MEMORY is then possible. Valid until
 * the request completes.
 */
INFD_API infd_status infd_request_input(infd_request *req, int i, infd_tensor *out,
                                        infd_error *err);

/* Sets output j (model order) of the request: the bytes are copied into the
 * request's memory. Outputs the client did not ask for are ignored (OK).
 * INVALID_ARGUMENT when the dtype or the shape disagree with the model's
 * declaration or the bytes with the shape. */
INFD_API infd_status infd_request_output_set(infd_request *req, int j, const infd_tensor *t,
                                             infd_error *err);

/* Whether the request's client asked for output j (model order): a kind may
 * skip computing the others (infd_request_output_set ignores them). */
INFD_API bool infd_request_output_wanted(const infd_request *req, int j);

/*
 * Sets output j (model order) like infd_request_output_set, without copying:
 * the output is t->data itself, lent until release(user) is called, which
 * happens exactly once, from any thread: when the request is destroyed, or
 * at once when the output is not wanted, when the call fails, or when the
 * bytes were copied after all (the caller gave the output a buffer of its
 * own: infd_request_set_output_buffer).
 */
typedef void (*infd_release_fn)(void *user);
INFD_API infd_status infd_request_output_adopt(infd_request *req, int j, const infd_tensor *t,
                                               infd_release_fn release, void *user,
                                               infd_error *err);

/*
 * Input i as the request holds it: its dtype, shape and bytes in *info
 * (info->data is the data when it is in one piece, else NULL), and its
 * data in *n pieces (one for infd_request_add_input; none when empty),
 * without joining them as infd_request_input does, so without a copy.
 * Valid until the request completes. NOT_FOUND when the input is not set.
 */
INFD_API infd_status infd_request_input_pieces(const infd_request *req, int i, infd_tensor *info,
                                               const infd_data_segment **pieces, int *n,
                                               infd_error *err);

/*
 * Finishing later: run_batch may defer request `req` (infd_request_defer,
 * during run_batch) and return; the instance takes its next batch, and the
 * request completes when infd_request_done is called for it, exactly once,
 * from any thread, after its outputs are set (infd_request_output_set) or
 * it failed (infd_request_fail). A server drain waits for it. For kinds
 * whose requests wait on something else than the instance (the cluster
 * router's, whose requests wait on the network). INVALID_ARGUMENT for a
 * model with sequence batching, whose slots follow the batch.
 */
INFD_API infd_status infd_request_defer(infd_request *req, infd_error *err);
INFD_API void infd_request_done(infd_request *req);

/* What the client asked for: the priority level (1 is highest; 0: none
 * given, the model's default applies), the queue timeout (0: none given),
 * and when the request was submitted (CLOCK_MONOTONIC, ns). */
INFD_API uint32_t infd_request_priority(const infd_request *req);
INFD_API uint64_t infd_request_timeout_us(const infd_request *req);
INFD_API uint64_t infd_request_submit_ns(const infd_request *req);

/* Fails one request of the batch with `status` and `message`. */
INFD_API void infd_request_fail(infd_request *req, infd_status status, const char *message);

#ifdef __cplusplus
}
#endif

#endif /* INFD_PLUGIN_H */
