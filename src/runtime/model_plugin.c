/*
 * model_plugin.c - models of the kinds registered through
 * include/infd/plugin.h: the registry, loading, and the calls a kind makes
 * while it loads and runs a batch.
 *
 * A kind model is an infd_model like an ONNX one (model.c configures its
 * instance groups, queues and sequence slots the same way); instead of
 * plans its instances call the kind's run_batch. An infd_kind_model is the
 * infd_model being loaded, and an infd_batch the instance running it.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"
#include "core/log.h"
#include "infd/plugin.h"
#include "runtime/runtime.h"

#define MAX_KINDS 16

static pthread_mutex_t kinds_mu = PTHREAD_MUTEX_INITIALIZER;
static const infd_model_kind *kinds[MAX_KINDS];
static int n_kinds;
/* "plugin" (kind_library.c, built in) and the registered kinds. */
static char kind_names[(MAX_KINDS + 1) * 34] = "plugin";

static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 31)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

infd_status infd_model_kind_register(const infd_model_kind *kind, infd_error *err)
{
    if (!kind || !name_ok(kind->name))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model kind name '%s': 1 to 31 of [a-z0-9_]",
                              kind && kind->name ? kind->name : "(null)");
    if (!kind->platform || !kind->load || !kind->unload || !kind->run_batch)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model kind '%s': platform, load, unload and run_batch are required",
                              kind->name);
    if (strcmp(kind->name, "onnxruntime") == 0 || strcmp(kind->name, "infd") == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model kind '%s': the name is the ONNX kind's", kind->name);
    if (strcmp(kind->name, rt_library_kind.name) == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model kind '%s': the name is the shared-library kind's", kind->name);
    pthread_mutex_lock(&kinds_mu);
    infd_status st = INFD_STATUS_OK;
    for (int k = 0; k < n_kinds; k++)
        if (strcmp(kinds[k]->name, kind->name) == 0)
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "model kind '%s' is already registered", kind->name);
    if (st == INFD_STATUS_OK && n_kinds == MAX_KINDS)
        st = infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED, "at most %d model kinds",
                            MAX_KINDS);
    if (st == INFD_STATUS_OK) {
        kinds[n_kinds++] = kind;
        size_t at = strlen(kind_names);
        snprintf(kind_names + at, sizeof(kind_names) - at, "%s%s", at ? ", " : "", kind->name);
    }
    pthread_mutex_unlock(&kinds_mu);
    return st;
}

const infd_model_kind *rt_kind_find(const char *name)
{
    if (strcmp(name, rt_library_kind.name) == 0)
        return &rt_library_kind;
    const infd_model_kind *found = NULL;
    pthread_mutex_lock(&kinds_mu);
    for (int k = 0; k < n_kinds && !found; k++)
        if (strcmp(kinds[k]->name, name) == 0)
            found = kinds[k];
    pthread_mutex_unlock(&kinds_mu);
    return found;
}

const char *rt_kind_names(void)
{
    /* Only grows, and never past its end. */
    return kind_names;
}

/* ------------------------------------------------------------------------- */
/* Loading                                                                   */
/* ------------------------------------------------------------------------- */

static infd_model *km_model(const infd_kind_model *km)
{
    return (infd_model *)km;
}

infd_status rt_plugin_load(infd_model *m, const char *version_dir, const char *cfile,
                           infd_error *err)
{
    m->path = infd_strdup(version_dir);
    if (!m->path)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int k = 1; k < m->n_inst; k++)
        if (m->inst[k].device != m->inst[0].device)
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                  "%s: backend '%s' runs all of a model's instances on one "
                                  "device; the instance groups use several",
                                  cfile, m->kind->name);
    infd_status st = m->kind->load(m->kind->user, (infd_kind_model *)m, &m->kind_state, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (m->n_in == 0 || m->n_out == 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "backend '%s' declared %d inputs and %d outputs; it needs at least "
                              "one of each",
                              m->kind->name, m->n_in, m->n_out);
    return INFD_STATUS_OK;
}

const char *infd_kind_model_name(const infd_kind_model *km)
{
    return km_model(km)->name;
}

int64_t infd_kind_model_version(const infd_kind_model *km)
{
    return km_model(km)->version;
}

const char *infd_kind_model_dir(const infd_kind_model *km)
{
    return km_model(km)->path;
}

const char *infd_kind_model_parameter(const infd_kind_model *km, const char *key)
{
    const Inference__ModelConfig *c = km_model(km)->config;
    for (size_t k = 0; k < c->n_parameters; k++)
        if (strcmp(c->parameters[k]->key, key) == 0 && c->parameters[k]->value)
            return c->parameters[k]->value->string_value;
    return NULL;
}

infd_status infd_kind_model_config_json(const infd_kind_model *km, char **out, size_t *n,
                                        infd_error *err)
{
    return infd_model_config_json(km_model(km), out, n, err);
}

int infd_kind_model_max_batch_size(const infd_kind_model *km)
{
    return km_model(km)->max_batch;
}

infd_device_kind infd_kind_model_device(const infd_kind_model *km, int *gpu)
{
    const infd_model *m = km_model(km);
    const rt_device *d = &m->dev[m->n_inst > 0 ? m->inst[0].device : 0];
    if (gpu)
        *gpu = d->gpu;
    return d->kind;
}

infd_status infd_kind_model_set_submit(infd_kind_model *km, infd_kind_submit_fn submit,
                                       infd_error *err)
{
    infd_model *m = km_model(km);
    if (m->seq)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': a model with sequence batching takes its requests "
                              "through its queue",
                              m->name);
    m->kind_submit = submit;
    return INFD_STATUS_OK;
}

void infd_kind_model_set_lends_outputs(infd_kind_model *km)
{
    km_model(km)->lends_outputs = true;
}

bool infd_model_lends_outputs(const infd_model *model)
{
    return model->lends_outputs;
}

int infd_kind_model_n_instances(const infd_kind_model *km)
{
    return km_model(km)->n_inst;
}

int infd_kind_model_n_sequence_slots(const infd_kind_model *km)
{
    const infd_model *m = km_model(km);
    return m->seq ? m->seq->n_slots : 0;
}

static infd_status add_io(infd_kind_model *km, bool output, const char *name, infd_dtype dtype,
                          int rank, const int64_t *dims, infd_error *err)
{
    infd_model *m = km_model(km);
    const char *what = output ? "output" : "input";
    int *n = output ? &m->n_out : &m->n_in;
    infd_model_io *list = output ? m->out : m->in;
    if (!name || !name[0] || strlen(name) > 127)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s name must have 1 to 127 bytes",
                              what);
    if (dtype <= INFD_DTYPE_INVALID || dtype >= INFD_DTYPE_COUNT_)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s '%s': invalid datatype", what,
                              name);
    if (rank < 0 || rank > INFD_MAX_RANK - 1 || (rank > 0 && !dims))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s '%s': rank %d", what, name,
                              rank);
    if (*n == INFD_MAX_MODEL_IO)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "more than %d %ss",
                              INFD_MAX_MODEL_IO, what);
    for (int i = 0; i < *n; i++)
        if (strcmp(list[i].name, name) == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s '%s' declared twice", what,
                                  name);
    infd_model_io *io = &list[*n];
    memset(io, 0, sizeof(*io));
    size_t row = infd_dtype_size(dtype);
    for (int d = 0; d < rank; d++) {
        if (dims[d] < -1)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s '%s': dims[%d] is %lld",
                                  what, name, d, (long long)dims[d]);
        io->dims[d] = dims[d];
        row = dims[d] < 0 ? 0 : row * (size_t)dims[d];
    }
    io->name = infd_strdup(name);
    if (!io->name)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    io->dtype = dtype;
    io->rank = rank;
    io->row_bytes = row;
    (*n)++;
    return INFD_STATUS_OK;
}

infd_status infd_kind_model_add_input(infd_kind_model *km, const char *name, infd_dtype dtype,
                                      int rank, const int64_t *dims, infd_error *err)
{
    return add_io(km, false, name, dtype, rank, dims, err);
}

infd_status infd_kind_model_add_output(infd_kind_model *km, const char *name, infd_dtype dtype,
                                       int rank, const int64_t *dims, infd_error *err)
{
    return add_io(km, true, name, dtype, rank, dims, err);
}

/* ------------------------------------------------------------------------- */
/* Running                                                                   */
/* ------------------------------------------------------------------------- */

struct infd_batch {
    rt_instance *inst;
    int n;
};

infd_status rt_plugin_run_batch(infd_model *m, rt_instance *inst, int n, infd_error *err)
{
    infd_batch b = { inst, n };
    return m->kind->run_batch(m->kind_state, inst->index, &b, err);
}

int rt_plugin_missing_output(const infd_request *r)
{
    const infd_model *m = r->model;
    for (int k = 0; k < r->n_out; k++) {
        int j = r->out_index[k];
        if (m->out[j].row_bytes == 0 && !(r->kind_set & (1ull << j)))
            return j;
    }
    return -1;
}

int infd_batch_size(const infd_batch *batch)
{
    return batch->n;
}

infd_request *infd_batch_request(const infd_batch *batch, int k)
{
    return k >= 0 && k < batch->n ? batch->inst->batch[k] : NULL;
}

void infd_request_sequence(const infd_request *req, infd_sequence_info *out)
{
    out->slot = req->seq_slot;
    out->flags = req->seq_flags;
    out->id = req->seq_is_string ? 0 : req->seq_id;
    out->id_string = req->seq_is_string ? req->seq_sid : NULL;
}

/* Makes room for `need` more bytes in a kept buffer; false: no memory. */
static bool reserve(void **buf, size_t *cap, size_t used, size_t need)
{
    if (need <= *cap - used)
        return true;
    size_t want = *cap ? *cap : 4096;
    while (want - used < need)
        want *= 2;
    void *p = infd_aligned_alloc(INFD_ALIGNMENT, want);
    if (!p)
        return false;
    if (used)
        memcpy(p, *buf, used);
    infd_free(*buf);
    *buf = p;
    *cap = want;
    return true;
}

infd_status infd_request_input(infd_request *req, int i, infd_tensor *out, infd_error *err)
{
    const infd_model *m = req->model;
    if (i < 0 || i >= m->n_in || !req->in[i].set)
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "input %d is not set", i);
    out->dtype = m->in[i].dtype;
    out->shape = req->in[i].shape;
    out->nbytes = req->in[i].nbytes;
    out->owns_data = false;
    /* One piece at an address its elements may be read at as they are; a
     * piece elsewhere (binary data after a JSON header of any length) is
     * copied like pieces are (found by fuzz_http: a softmax read floats at
     * an odd address). */
    size_t align = infd_dtype_size(m->in[i].dtype);
    align = align < 1 ? 1 : align > 8 ? 8 : align;
    if (req->in[i].n_segs == 1 && (uintptr_t)req->in[i].segs[0].data % align == 0) {
        out->data = (void *)req->in[i].segs[0].data;
        return INFD_STATUS_OK;
    }
    if (!req->in[i].whole) {
        size_t n = req->in[i].nbytes;
        size_t pad = (n + INFD_ALIGNMENT - 1) & ~(size_t)(INFD_ALIGNMENT - 1);
        const char *old = req->join;
        if (!reserve(&req->join, &req->join_cap, req->join_used, pad ? pad : INFD_ALIGNMENT))
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                                  "out of memory joining input '%s' (%zu bytes)", m->in[i].name, n);
        /* Inputs joined before point into the old buffer: move them. */
        for (int k = 0; k < m->n_in; k++)
            if (req->in[k].whole && (const char *)req->join != old)
                req->in[k].whole = (const char *)req->join + ((const char *)req->in[k].whole - old);
        char *dst = (char *)req->join + req->join_used;
        INFD_COUNT_COPY(n);
        for (int g = 0; g < req->in[i].n_segs; g++) {
            memcpy(dst, req->in[i].segs[g].data, req->in[i].segs[g].nbytes);
            dst += req->in[i].segs[g].nbytes;
        }
        req->in[i].whole = (char *)req->join + req->join_used;
        req->join_used += pad ? pad : INFD_ALIGNMENT;
    }
    out->data = (void *)req->in[i].whole;
    return INFD_STATUS_OK;
}

/* Output j's slot in the request's results (*k), after checking `t`
 * against the model's declaration; *k is -1 when the client did not ask
 * for it. */
static infd_status output_check(infd_request *req, int j, const infd_tensor *t, int *k,
                                infd_error *err)
{
    const infd_model *m = req->model;
    *k = -1;
    if (j < 0 || j >= m->n_out)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "output %d: the model has %d", j,
                              m->n_out);
    const infd_model_io *io = &m->out[j];
    int q = 0;
    while (q < req->n_out && req->out_index[q] != j)
        q++;
    if (q == req->n_out)
        return INFD_STATUS_OK; /* not asked for */
    int lead = m->max_batch > 0 ? 1 : 0;
    bool ok = t->dtype == io->dtype && t->shape.rank == io->rank + lead &&
              (!lead || t->shape.dims[0] == req->rows);
    for (int d = 0; ok && d < io->rank; d++)
        ok =
            io->dims[d] < 0 ? t->shape.dims[d + lead] >= 0 : t->shape.dims[d + lead] == io->dims[d];
    int64_t numel = 0;
    if (ok && infd_shape_numel(&t->shape, &numel, NULL) != INFD_STATUS_OK)
        ok = false;
    if (ok && t->dtype != INFD_DTYPE_BYTES)
        ok = t->nbytes == (size_t)numel * infd_dtype_size(t->dtype);
    infd_data_segment whole = { t->data, t->nbytes };
    if (ok && t->dtype == INFD_DTYPE_BYTES)
        ok = rt_bytes_layout_ok(&whole, t->nbytes, numel);
    if (!ok) {
        char got[160];
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "output '%s': %s %s of %zu bytes does not fit the declared %s with "
                              "%d dims (and %lld rows)",
                              io->name, infd_dtype_name(t->dtype),
                              infd_shape_format(&t->shape, got, sizeof(got)), t->nbytes,
                              infd_dtype_name(io->dtype), io->rank, (long long)req->rows);
    }
    *k = q;
    return INFD_STATUS_OK;
}

/* Gives back what slot k borrowed (infd_request_output_adopt). */
static void output_unlend(infd_request *req, int k)
{
    if (req->lent[k].fn) {
        infd_release_fn fn = req->lent[k].fn;
        req->lent[k].fn = NULL;
        fn(req->lent[k].user);
    }
}

void rt_request_unlend(infd_request *req)
{
    if (!req->any_lent)
        return;
    for (int k = 0; k < INFD_MAX_MODEL_IO; k++)
        output_unlend(req, k);
    req->any_lent = false;
}

infd_status infd_request_output_set(infd_request *req, int j, const infd_tensor *t, infd_error *err)
{
    const infd_model *m = req->model;
    int k;
    infd_status st = output_check(req, j, t, &k, err);
    if (st != INFD_STATUS_OK || k < 0)
        return st;
    const infd_model_io *io = &m->out[j];
    output_unlend(req, k);
    infd_tensor *o = &req->out[k];
    INFD_COUNT_COPY(t->nbytes);
    if (io->row_bytes > 0) { /* laid out at submit */
        memcpy(o->data, t->data, t->nbytes);
        req->kind_set |= 1ull << j;
        return INFD_STATUS_OK;
    }
    size_t pad = (t->nbytes + INFD_ALIGNMENT - 1) & ~(size_t)(INFD_ALIGNMENT - 1);
    const char *old = req->var;
    if (!reserve(&req->var, &req->var_cap, req->var_used, pad ? pad : INFD_ALIGNMENT))
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "out of memory for output '%s' (%zu bytes)", io->name, t->nbytes);
    if ((const char *)req->var != old) /* outputs set before point into the old buffer */
        for (int q = 0; q < req->n_out; q++)
            if (m->out[req->out_index[q]].row_bytes == 0 && req->out[q].data && !req->lent[q].fn)
                req->out[q].data = (char *)req->var + ((const char *)req->out[q].data - old);
    char *dst = (char *)req->var + req->var_used;
    if (t->nbytes)
        memcpy(dst, t->data, t->nbytes);
    req->var_used += pad ? pad : INFD_ALIGNMENT;
    o->dtype = t->dtype;
    o->shape = t->shape;
    o->data = dst;
    o->nbytes = t->nbytes;
    o->owns_data = false;
    req->kind_set |= 1ull << j;
    return INFD_STATUS_OK;
}

infd_status infd_request_output_adopt(infd_request *req, int j, const infd_tensor *t,
                                      infd_release_fn release, void *user, infd_error *err)
{
    int k;
    infd_status st = output_check(req, j, t, &k, err);
    /* A caller's buffer (or a classified output's tensor, read once at
     * completion, which the buffer rule also covers) gets a copy. */
    if (st != INFD_STATUS_OK || k < 0 ||
        (req->model->out[j].row_bytes > 0 && req->user_out[j].data && !req->cls[j])) {
        if (st == INFD_STATUS_OK && k >= 0)
            st = infd_request_output_set(req, j, t, err);
        release(user);
        return st;
    }
    output_unlend(req, k);
    infd_tensor *o = &req->out[k];
    o->dtype = t->dtype;
    o->shape = t->shape;
    o->data = t->data;
    o->nbytes = t->nbytes;
    o->owns_data = false;
    req->lent[k].fn = release;
    req->lent[k].user = user;
    req->any_lent = true;
    req->kind_set |= 1ull << j;
    return INFD_STATUS_OK;
}

infd_status infd_request_input_pieces(const infd_request *req, int i, infd_tensor *info,
                                      const infd_data_segment **pieces, int *n, infd_error *err)
{
    const infd_model *m = req->model;
    if (i < 0 || i >= m->n_in || !req->in[i].set)
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "input %d is not set", i);
    info->dtype = m->in[i].dtype;
    info->shape = req->in[i].shape;
    info->nbytes = req->in[i].nbytes;
    info->owns_data = false;
    info->data = req->in[i].n_segs == 1 ? (void *)req->in[i].segs[0].data : NULL;
    *pieces = req->in[i].segs;
    *n = req->in[i].n_segs;
    return INFD_STATUS_OK;
}

bool infd_request_output_wanted(const infd_request *req, int j)
{
    for (int k = 0; k < req->n_out; k++)
        if (req->out_index[k] == j)
            return true;
    return false;
}

void infd_request_fail(infd_request *req, infd_status status, const char *message)
{
    req->kind_status = status == INFD_STATUS_OK ? INFD_STATUS_INTERNAL : status;
    snprintf(req->kind_msg, sizeof(req->kind_msg), "%s", message ? message : "failed");
}
