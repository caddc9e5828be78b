/*
 * ensemble.c - platform "ensemble": Triton's ensemble_scheduling, steps
 * over other served models wired by tensor names (docs/PIPELINES.md).
 *
 *   name: "pipe"  platform: "ensemble"  max_batch_size: 8
 *   input [...]  output [...]
 *   ensemble_scheduling { step [
 *     { model_name: "pre" model_version: -1
 *       input_map { key: "RAW" value: "IMAGE" }        # step input <- ensemble tensor
 *       output_map { key: "OUT" value: "pixels" } },   # step output -> ensemble tensor
 *     ... ] }
 *
 * At load the wiring is checked and the steps put in an order where each
 * step's tensors exist before it runs (a cycle, a tensor nobody writes or
 * two steps writing one are load errors). The step models themselves are
 * looked up per batch, so an ensemble may load before its steps; a step
 * model that is missing then fails the requests, naming the step.
 *
 * An ensemble is a kind model with no batcher of its own (ensemble_scheduling
 * takes the place of dynamic_batching in the config, as in Triton): each of
 * its "instances" (ensemble_scheduling.max_inflight_responses, default 16)
 * takes one request through the steps, so that many run at once. For a
 * step, the request becomes one request to the step model (where it
 * batches with the other ensemble requests in flight and with other
 * clients' requests), and the instance waits for it. Tensors pass between
 * steps without copies: a step's input borrows the previous step's output
 * memory, which lives until the request is done. Only the
 * ensemble's outputs are copied, into the ensemble requests.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "infd/plugin.h"
#include "runtime/runtime.h"

#define ENS_MAX_STEPS 64

typedef struct ens_map {
    const char *name; /* the step model's input or output */
    int tensor;       /* index into ens.tensors */
} ens_map;

typedef struct ens_step {
    int index; /* in the config's step list (messages say this one) */
    const char *model;
    int64_t version;
    ens_map *in, *out;
    int n_in, n_out;
} ens_step;

/* One instance's scratch, made at load (nothing is allocated per
 * request): the request's tensors, its step requests, and the current
 * step's outcome, written by the completion callback. */
typedef struct ens_slot {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    infd_status status;
    char msg[256];
    infd_tensor *tensors;     /* [n_tensors] */
    infd_request **step_reqs; /* [n_steps] */
} ens_slot;

typedef struct ens {
    infd_server *server;
    char name[128];
    const char **tensors; /* ensemble tensor names: the inputs first, in input order */
    int n_tensors, n_inputs, n_outputs;
    int *out_tensor; /* ensemble output j -> its tensor */
    ens_step *steps; /* in run order */
    int n_steps;
    ens_slot *slots;
    int n_slots;
} ens;

static int tensor_index(const ens *e, const char *name)
{
    for (int t = 0; t < e->n_tensors; t++)
        if (strcmp(e->tensors[t], name) == 0)
            return t;
    return -1;
}

static void ens_free(ens *e)
{
    if (!e)
        return;
    for (int s = 0; s < e->n_slots; s++) {
        ens_slot *sl = &e->slots[s];
        pthread_mutex_destroy(&sl->mu);
        pthread_cond_destroy(&sl->cv);
        infd_free(sl->tensors);
        infd_free(sl->step_reqs);
    }
    infd_free(e->slots);
    for (int s = 0; s < e->n_steps; s++) {
        infd_free(e->steps[s].in);
        infd_free(e->steps[s].out);
    }
    infd_free(e->steps);
    infd_free(e->tensors);
    infd_free(e->out_tensor);
    infd_free(e);
}

static void ens_unload(void *state)
{
    ens_free(state);
}

/* Checks the wiring and orders the steps; the names stay borrowed from the
 * model's config, which outlives the state. */
static infd_status build(ens *e, const Inference__ModelConfig *c, infd_error *err)
{
    const Inference__ModelEnsembling *es =
        c->scheduling_choice_case == INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_ENSEMBLE_SCHEDULING
            ? c->ensemble_scheduling
            : NULL;
    if (!es || es->n_step == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "an ensemble needs ensemble_scheduling with at least one step");
    if (es->n_step > ENS_MAX_STEPS)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "ensemble_scheduling has %zu steps; at most %d", es->n_step,
                              ENS_MAX_STEPS);
    for (size_t s = 0; s < es->n_step; s++)
        if (strcmp(es->step[s]->model_name, e->name) == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "ensemble_scheduling.step[%zu] names the ensemble itself", s);
    size_t max_tensors = c->n_input;
    for (size_t s = 0; s < es->n_step; s++)
        max_tensors += es->step[s]->n_output_map;
    e->tensors = infd_calloc(max_tensors ? max_tensors : 1, sizeof(*e->tensors));
    e->steps = infd_calloc(es->n_step, sizeof(*e->steps));
    e->out_tensor = infd_calloc(c->n_output ? c->n_output : 1, sizeof(int));
    int *producer = infd_calloc(max_tensors ? max_tensors : 1, sizeof(int));
    bool *placed = infd_calloc(es->n_step, sizeof(bool));
    if (!e->tensors || !e->steps || !e->out_tensor || !producer || !placed) {
        infd_free(producer);
        infd_free(placed);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    infd_status st = INFD_STATUS_OK;
    for (size_t i = 0; i < c->n_input; i++) {
        e->tensors[e->n_tensors] = c->input[i]->name;
        producer[e->n_tensors++] = -1;
    }
    e->n_inputs = (int)c->n_input;
    /* Every step output names a new tensor. */
    for (size_t s = 0; s < es->n_step && st == INFD_STATUS_OK; s++) {
        const Inference__ModelEnsembling__Step *step = es->step[s];
        if (!step->model_name[0])
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "ensemble_scheduling.step[%zu] has no model_name", s);
        for (size_t k = 0; k < step->n_output_map && st == INFD_STATUS_OK; k++) {
            const char *t = step->output_map[k]->value;
            int have = tensor_index(e, t);
            if (have >= 0)
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "ensemble_scheduling.step[%zu] (model '%s'): tensor '%s' "
                                    "is already %s",
                                    s, step->model_name, t,
                                    producer[have] < 0 ? "an ensemble input"
                                                       : "written by another step");
            else {
                e->tensors[e->n_tensors] = t;
                producer[e->n_tensors++] = (int)s;
            }
        }
        if (st == INFD_STATUS_OK && step->n_input_map == 0)
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "ensemble_scheduling.step[%zu] (model '%s') has no input_map", s,
                                step->model_name);
        /* A tensor a later step writes is fine: the order is found below. */
        for (size_t k = 0; k < step->n_input_map && st == INFD_STATUS_OK; k++)
            if (tensor_index(e, step->input_map[k]->value) < 0) {
                bool later = false;
                for (size_t s2 = 0; s2 < es->n_step; s2++)
                    for (size_t k2 = 0; k2 < es->step[s2]->n_output_map; k2++)
                        if (strcmp(es->step[s2]->output_map[k2]->value,
                                   step->input_map[k]->value) == 0)
                            later = true;
                if (!later)
                    st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                        "ensemble_scheduling.step[%zu] (model '%s'): input '%s' "
                                        "reads '%s', which is neither an ensemble input nor "
                                        "any step's output",
                                        s, step->model_name, step->input_map[k]->key,
                                        step->input_map[k]->value);
            }
    }
    /* Each ensemble output is some tensor. */
    for (size_t j = 0; j < c->n_output && st == INFD_STATUS_OK; j++) {
        e->out_tensor[j] = tensor_index(e, c->output[j]->name);
        if (e->out_tensor[j] < 0)
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "ensemble output '%s' is not written by any step's output_map",
                                c->output[j]->name);
    }
    e->n_outputs = (int)c->n_output;
    /* Order: a step runs once every tensor it reads exists. */
    bool *ready = infd_calloc(e->n_tensors ? (size_t)e->n_tensors : 1, sizeof(bool));
    if (!ready && st == INFD_STATUS_OK)
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int t = 0; t < e->n_inputs && ready; t++)
        ready[t] = true;
    while (st == INFD_STATUS_OK && e->n_steps < (int)es->n_step) {
        int pick = -1;
        for (size_t s = 0; s < es->n_step && pick < 0; s++) {
            if (placed[s])
                continue;
            bool ok = true;
            for (size_t k = 0; k < es->step[s]->n_input_map && ok; k++)
                ok = ready[tensor_index(e, es->step[s]->input_map[k]->value)];
            if (ok)
                pick = (int)s;
        }
        if (pick < 0) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "ensemble_scheduling: the steps' tensors form a cycle (no step "
                                "can run first among the %d left)",
                                (int)es->n_step - e->n_steps);
            break;
        }
        placed[pick] = true;
        const Inference__ModelEnsembling__Step *step = es->step[pick];
        ens_step *d = &e->steps[e->n_steps++];
        d->index = pick;
        d->model = step->model_name;
        d->version = step->model_version > 0 ? step->model_version : -1;
        d->in = infd_calloc(step->n_input_map, sizeof(ens_map));
        d->out = infd_calloc(step->n_output_map ? step->n_output_map : 1, sizeof(ens_map));
        if (!d->in || !d->out) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            break;
        }
        for (size_t k = 0; k < step->n_input_map; k++)
            d->in[d->n_in++] =
                (ens_map){ step->input_map[k]->key, tensor_index(e, step->input_map[k]->value) };
        for (size_t k = 0; k < step->n_output_map; k++) {
            int t = tensor_index(e, step->output_map[k]->value);
            d->out[d->n_out++] = (ens_map){ step->output_map[k]->key, t };
            ready[t] = true;
        }
    }
    infd_free(ready);
    infd_free(producer);
    infd_free(placed);
    return st;
}

static infd_status ens_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    infd_model *m = (infd_model *)km;
    const Inference__ModelConfig *c = m->config;
    *state = NULL;
    ens *e = infd_calloc(1, sizeof(*e));
    if (!e)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    e->server = m->server;
    snprintf(e->name, sizeof(e->name), "%s", m->name);
    infd_status st = INFD_STATUS_OK;
    if (c->n_input == 0 || c->n_output == 0)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "an ensemble's config lists its inputs and outputs");
    for (size_t i = 0; i < c->n_input && st == INFD_STATUS_OK; i++) {
        const Inference__ModelInput *in = c->input[i];
        st = infd_kind_model_add_input(km, in->name, rt_config_dtype(in->data_type),
                                       (int)in->n_dims, in->dims, err);
    }
    for (size_t j = 0; j < c->n_output && st == INFD_STATUS_OK; j++) {
        const Inference__ModelOutput *out = c->output[j];
        st = infd_kind_model_add_output(km, out->name, rt_config_dtype(out->data_type),
                                        (int)out->n_dims, out->dims, err);
    }
    if (st == INFD_STATUS_OK)
        st = build(e, c, err);
    if (st == INFD_STATUS_OK) {
        int n_slots = infd_kind_model_n_instances(km);
        e->slots = infd_calloc((size_t)n_slots, sizeof(ens_slot));
        if (!e->slots)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        else
            e->n_slots = n_slots;
    }
    for (int s = 0; s < e->n_slots && st == INFD_STATUS_OK; s++) {
        ens_slot *sl = &e->slots[s];
        pthread_mutex_init(&sl->mu, NULL);
        pthread_cond_init(&sl->cv, NULL);
        sl->tensors = infd_calloc((size_t)e->n_tensors, sizeof(infd_tensor));
        sl->step_reqs = infd_calloc((size_t)e->n_steps, sizeof(infd_request *));
        if (!sl->tensors || !sl->step_reqs)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (st != INFD_STATUS_OK) {
        ens_free(e);
        return st;
    }
    infd_log(INFD_LOG_LEVEL_INFO, "model '%s': ensemble of %d step(s), %d request(s) at once",
             e->name, e->n_steps, e->n_slots);
    *state = e;
    return INFD_STATUS_OK;
}

static void on_step_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)req;
    ens_slot *sl = user;
    pthread_mutex_lock(&sl->mu);
    sl->status = status;
    if (status != INFD_STATUS_OK)
        snprintf(sl->msg, sizeof(sl->msg), "%s", message ? message : "");
    sl->done = true;
    pthread_cond_signal(&sl->cv);
    pthread_mutex_unlock(&sl->mu);
}

/* Runs step s of the request: its request to the step model, submitted and
 * waited for; the outputs become the ensemble's tensors. The error (the
 * step's status) with its message in *err. */
static infd_status run_step(ens *e, ens_slot *sl, int s, infd_error *err)
{
    const ens_step *step = &e->steps[s];
    infd_model *sm = NULL;
    if (infd_server_model_acquire(e->server, step->model, step->version, &sm, err) !=
        INFD_STATUS_OK)
        return err->code;
    infd_request **rq = &sl->step_reqs[s];
    infd_status st = infd_request_create(sm, rq, err);
    infd_model_release(sm); /* the request holds the model */
    if (st != INFD_STATUS_OK)
        return st;
    (*rq)->internal = true; /* the ensemble request was accepted */
    for (int i = 0; st == INFD_STATUS_OK && i < step->n_in; i++) {
        const infd_tensor *t = &sl->tensors[step->in[i].tensor];
        st = infd_request_add_input(*rq, step->in[i].name, t->dtype, t->shape.dims, t->shape.rank,
                                    t->data, t->nbytes, err);
    }
    for (int o = 0; st == INFD_STATUS_OK && o < step->n_out; o++)
        st = infd_request_add_output(*rq, step->out[o].name, err);
    sl->done = false;
    if (st == INFD_STATUS_OK)
        st = infd_infer_async(*rq, on_step_done, sl, err);
    if (st != INFD_STATUS_OK)
        return st;
    pthread_mutex_lock(&sl->mu);
    while (!sl->done)
        pthread_cond_wait(&sl->cv, &sl->mu);
    pthread_mutex_unlock(&sl->mu);
    if (sl->status != INFD_STATUS_OK)
        return infd_error_set(err, sl->status, "%s", sl->msg);
    for (int o = 0; o < step->n_out; o++) {
        const char *name = NULL;
        if (infd_request_output(*rq, o, &name, &sl->tensors[step->out[o].tensor]) !=
                INFD_STATUS_OK ||
            strcmp(name, step->out[o].name) != 0)
            return infd_error_set(err, INFD_STATUS_INTERNAL, "output '%s' went missing",
                                  step->out[o].name);
    }
    return INFD_STATUS_OK;
}

/* One ensemble request through every step; its outputs copied in. */
static void run_one(ens *e, ens_slot *sl, infd_request *req)
{
    infd_error err;
    infd_error_clear(&err);
    for (int s = 0; s < e->n_steps; s++)
        sl->step_reqs[s] = NULL;
    bool ok = true;
    for (int i = 0; i < e->n_inputs && ok; i++)
        if (infd_request_input(req, i, &sl->tensors[i], &err) != INFD_STATUS_OK) {
            infd_request_fail(req, err.code, err.msg);
            ok = false;
        }
    for (int s = 0; s < e->n_steps && ok; s++)
        if (run_step(e, sl, s, &err) != INFD_STATUS_OK) {
            char text[INFD_ERROR_MSG_BYTES];
            snprintf(text, sizeof(text), "ensemble '%.100s' step %d (model '%.100s'): %.270s",
                     e->name, e->steps[s].index, e->steps[s].model, err.msg);
            infd_request_fail(req, err.code, text);
            ok = false;
        }
    for (int j = 0; j < e->n_outputs && ok; j++)
        if (infd_request_output_set(req, j, &sl->tensors[e->out_tensor[j]], &err) !=
            INFD_STATUS_OK) {
            char text[INFD_ERROR_MSG_BYTES];
            snprintf(text, sizeof(text), "ensemble '%.100s': output %d: %.370s", e->name, j,
                     err.msg);
            infd_request_fail(req, err.code, text);
            ok = false;
        }
    /* The step outputs the ensemble's tensors borrowed live until here. */
    for (int s = 0; s < e->n_steps; s++)
        if (sl->step_reqs[s])
            infd_request_destroy(sl->step_reqs[s]);
}

/* Without a batcher of its own an ensemble gets one request per call (the
 * scheduler runs unbatched requests alone); any more run in turn. */
static infd_status ens_run_batch(void *state, int instance, infd_batch *batch, infd_error *err)
{
    (void)err;
    ens *e = state;
    for (int k = 0; k < infd_batch_size(batch); k++)
        run_one(e, &e->slots[instance], infd_batch_request(batch, k));
    return INFD_STATUS_OK;
}

const infd_model_kind rt_ensemble_kind = {
    .name = "ensemble",
    .platform = "ensemble",
    .user = NULL,
    .load = ens_load,
    .unload = ens_unload,
    .run_batch = ens_run_batch,
    .sequence_free = NULL,
};
