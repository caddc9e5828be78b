/*
 * scheduler.c - requests, the per-model queue, the dynamic batcher and the
 * instance workers.
 *
 *   frontend thread                      instance worker thread (one per instance)
 *   ───────────────                      ──────────────────────────────────────────
 *   infd_request_create (free list)      wait on model->work_cv
 *   infd_request_add_input (borrow)      form a batch under model->mu:
 *   infd_infer_async ──► queue[level] ─►   expire timed-out requests,
 *                        (model->mu)       wait up to max_queue_delay for more
 *                                          rows unless max / a preferred size
 *                                          is reached, pop in priority order
 *                                        run outside the lock:
 *                                          gather rows into the instance's
 *                                          input buffers (or pass a lone
 *                                          request's memory straight through),
 *                                          infd_plan_run on the smallest plan
 *                                          that fits (extra rows are padding),
 *                                          scatter rows to each request's
 *                                          output memory, call back.
 *
 * Idle workers all wait on one condition variable and whichever wakes first
 * takes the work, so an idle instance is always preferred to a busy one
 * (least-loaded dispatch without bookkeeping). Nothing here allocates once
 * a model's requests have reached their steady-state output sizes: requests
 * come from a free list and keep their output memory.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "core/pool.h"
#include "runtime/runtime.h"

#define ADD(field, v) __atomic_fetch_add(&(field), (uint64_t)(v), __ATOMIC_RELAXED)

/* ------------------------------------------------------------------------- */
/* Requests                                                                  */
/* ------------------------------------------------------------------------- */

infd_status infd_request_create(infd_model *model, infd_request **out, infd_error *err)
{
    *out = NULL;
    infd_request *r = NULL;
    pthread_mutex_lock(&model->mu);
    if (model->free_list) {
        r = model->free_list;
        model->free_list = r->next;
    }
    pthread_mutex_unlock(&model->mu);
    if (!r) {
        r = infd_calloc(1, sizeof(*r));
        if (!r)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for a request");
    }
    memset(r, 0, offsetof(infd_request, own));
    memset(&r->cb, 0, sizeof(*r) - offsetof(infd_request, cb));
    r->var_used = r->join_used = r->dev_host_used = 0;
    r->seq_slot = -1;
    r->model = model;
    infd_model_retain(model);
    *out = r;
    return INFD_STATUS_OK;
}

void infd_request_destroy(infd_request *req)
{
    if (!req)
        return;
    INFD_ASSERT(!req->in_flight);
    rt_request_unlend(req); /* outside the model's lock: a release may take others */
    infd_model *m = req->model;
    pthread_mutex_lock(&m->mu);
    req->next = m->free_list;
    m->free_list = req;
    pthread_mutex_unlock(&m->mu);
    infd_model_release(m);
}

void rt_request_pool_free(infd_model *m)
{
    while (m->free_list) {
        infd_request *r = m->free_list;
        m->free_list = r->next;
        infd_free(r->own);
        infd_free(r->cls_buf);
        infd_free(r->var);
        infd_free(r->join);
        infd_free(r->dev_host);
        infd_free(r);
    }
}

infd_model *infd_request_model(const infd_request *req)
{
    return req->model;
}

void infd_request_set_id(infd_request *req, const char *id)
{
    snprintf(req->id, sizeof(req->id), "%s", id ? id : "");
}

const char *infd_request_id(const infd_request *req)
{
    return req->id;
}

void infd_request_set_client(infd_request *req, const char *client)
{
    snprintf(req->client, sizeof(req->client), "%s", client ? client : "");
}

const char *infd_request_client(const infd_request *req)
{
    return req->client;
}

uint32_t infd_request_priority(const infd_request *req)
{
    return req->priority_given ? req->priority + 1 : 0;
}

uint64_t infd_request_timeout_us(const infd_request *req)
{
    return req->timeout_us;
}

uint64_t infd_request_submit_ns(const infd_request *req)
{
    return req->t_submit_ns;
}

infd_status infd_request_set_priority(infd_request *req, uint32_t priority, infd_error *err)
{
    const infd_model *m = req->model;
    if (priority == 0) {
        req->priority = m->default_level;
        req->priority_given = false;
        return INFD_STATUS_OK;
    }
    if (priority > (uint32_t)m->n_levels)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': priority %u is outside 1..%d (priority_levels)", m->name,
                              priority, m->n_levels);
    req->priority = priority - 1;
    req->priority_given = true;
    return INFD_STATUS_OK;
}

void infd_request_set_timeout_us(infd_request *req, uint64_t timeout_us)
{
    req->timeout_us = timeout_us;
}

infd_status infd_request_set_sequence(infd_request *req, uint64_t id, const char *id_string,
                                      uint32_t flags, infd_error *err)
{
    if (flags & ~(INFD_SEQUENCE_START | INFD_SEQUENCE_END))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "sequence flags 0x%x: only START (1) and END (2) exist", flags);
    if (id_string) {
        size_t n = strlen(id_string);
        if (n == 0 || n >= sizeof(req->seq_sid))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "sequence id: a string id must have 1 to %zu bytes, not %zu",
                                  sizeof(req->seq_sid) - 1, n);
        memcpy(req->seq_sid, id_string, n + 1);
        req->seq_id = 0;
        req->seq_is_string = true;
    } else {
        if (id == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "sequence id 0: a correlation id must be non-zero");
        req->seq_id = id;
        req->seq_sid[0] = '\0';
        req->seq_is_string = false;
    }
    req->seq_flags = flags;
    req->seq_set = true;
    return INFD_STATUS_OK;
}

/* Whether `segs` (nbytes in all) hold exactly `numel` BYTES elements: each a
 * 4-byte little-endian length and that many bytes. */
bool rt_bytes_layout_ok(const infd_data_segment *segs, size_t nbytes, int64_t numel)
{
    size_t at = 0; /* offset of the next element's length */
    int g = 0;
    size_t base = 0; /* offset of segs[g] */
    for (int64_t e = 0; e < numel; e++) {
        if (nbytes - at < 4)
            return false;
        uint8_t len[4];
        for (int b = 0; b < 4; b++) {
            size_t off = at + (size_t)b;
            while (off >= base + segs[g].nbytes) {
                base += segs[g].nbytes;
                g++;
            }
            len[b] = ((const uint8_t *)segs[g].data)[off - base];
        }
        uint32_t n = (uint32_t)len[0] | (uint32_t)len[1] << 8 | (uint32_t)len[2] << 16 |
                     (uint32_t)len[3] << 24;
        if (n > nbytes - at - 4)
            return false;
        at += 4 + (size_t)n;
    }
    return at == nbytes;
}

/* Checks input `name` of `req` (dtype, shape, batch, byte size) and, when
 * it is right, records its pieces. Dims the model declares -1 take any
 * length. */
static infd_status add_input(infd_request *req, const char *name, infd_dtype dtype,
                             const int64_t *shape, int rank, const infd_data_segment *segs,
                             int n_segs, size_t nbytes, infd_error *err)
{
    const infd_model *m = req->model;
    int i = infd_model_input_index(m, name);
    if (i < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "model '%s' has no input '%s'",
                              m->name, name ? name : "(null)");
    const infd_model_io *io = &m->in[i];
    if (req->in[i].set)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "input '%s' given twice", name);
    if (dtype != io->dtype)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "input '%s': datatype %s, the model expects %s", name,
                              infd_dtype_name(dtype), infd_dtype_name(io->dtype));
    int lead = m->max_batch > 0 ? 1 : 0;
    char want[160], got[160];
    infd_shape ws = { .rank = io->rank + lead };
    if (lead)
        ws.dims[0] = -1;
    for (int d = 0; d < io->rank; d++)
        ws.dims[d + lead] = io->dims[d];
    bool ok = rank == ws.rank && rank >= 0 && rank <= INFD_MAX_RANK && (shape || rank == 0);
    for (int d = lead; ok && d < rank; d++)
        ok = ws.dims[d] < 0 ? shape[d] >= 0 : shape[d] == ws.dims[d];
    int64_t rows = 1;
    if (ok && lead) {
        rows = shape[0];
        ok = rows >= 1 && rows <= m->max_batch;
    }
    if (!ok) {
        infd_shape gs = { .rank = rank >= 0 && rank <= INFD_MAX_RANK ? rank : 0 };
        for (int d = 0; d < gs.rank && shape; d++)
            gs.dims[d] = shape[d];
        infd_shape_format(&ws, want, sizeof(want));
        infd_shape_format(&gs, got, sizeof(got));
        if (lead && rank == ws.rank)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input '%s': shape %s, the model expects %s with the batch "
                                  "(first dim) in 1..%d",
                                  name, got, want, m->max_batch);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "input '%s': shape %s, the model expects %s", name, got, want);
    }
    if (req->rows && rows != req->rows)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "input '%s': batch size %lld differs from the other inputs' %lld",
                              name, (long long)rows, (long long)req->rows);
    infd_shape given = { .rank = rank };
    for (int d = 0; d < rank; d++)
        given.dims[d] = shape[d];
    int64_t numel = 0;
    size_t want_bytes = (size_t)rows * io->row_bytes;
    if (io->row_bytes == 0 && infd_shape_numel(&given, &numel, err) != INFD_STATUS_OK)
        return INFD_STATUS_INVALID_ARGUMENT;
    if (dtype == INFD_DTYPE_BYTES) {
        if (!rt_bytes_layout_ok(segs, nbytes, numel))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input '%s': %zu bytes are not %lld BYTES elements (each a "
                                  "4-byte little-endian length and that many bytes)",
                                  name, nbytes, (long long)numel);
    } else if (io->row_bytes == 0 &&
               (numel < 0 || (uint64_t)numel > SIZE_MAX / infd_dtype_size(dtype))) {
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "input '%s': shape too large",
                              name);
    } else if (io->row_bytes == 0) {
        want_bytes = (size_t)numel * infd_dtype_size(dtype);
    }
    if (dtype != INFD_DTYPE_BYTES && nbytes != want_bytes) {
        infd_shape gs = { .rank = rank };
        for (int d = 0; d < rank; d++)
            gs.dims[d] = shape[d];
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "input '%s': %zu bytes of data, shape %s of %s needs %zu", name,
                              nbytes, infd_shape_format(&gs, got, sizeof(got)),
                              infd_dtype_name(dtype), want_bytes);
    }
    for (int k = 0; k < n_segs; k++)
        if (!segs[k].data && segs[k].nbytes)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "input '%s': no data", name);
    req->in[i].segs = segs;
    req->in[i].n_segs = n_segs;
    req->in[i].nbytes = nbytes;
    req->in[i].set = true;
    req->in[i].shape = given;
    req->in[i].whole = NULL;
    req->rows = rows;
    req->n_inputs_set++;
    return INFD_STATUS_OK;
}

infd_status infd_request_add_input(infd_request *req, const char *name, infd_dtype dtype,
                                   const int64_t *shape, int rank, const void *data, size_t nbytes,
                                   infd_error *err)
{
    int i = infd_model_input_index(req->model, name);
    infd_data_segment one = { data, nbytes };
    infd_status st = add_input(req, name, dtype, shape, rank, &one, 1, nbytes, err);
    if (st == INFD_STATUS_OK) {
        req->in[i].one = one;
        req->in[i].segs = &req->in[i].one;
    }
    return st;
}

infd_status infd_request_add_input_segments(infd_request *req, const char *name, infd_dtype dtype,
                                            const int64_t *shape, int rank,
                                            const infd_data_segment *segments, int n_segments,
                                            infd_error *err)
{
    if (n_segments < 0 || (n_segments > 0 && !segments))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "input '%s': %d data segments",
                              name ? name : "(null)", n_segments);
    size_t nbytes = 0;
    for (int k = 0; k < n_segments; k++) {
        if (segments[k].nbytes > SIZE_MAX - nbytes)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input '%s': the data segments' sizes overflow",
                                  name ? name : "(null)");
        nbytes += segments[k].nbytes;
    }
    return add_input(req, name, dtype, shape, rank, segments, n_segments, nbytes, err);
}

/* Room for `n` more bytes (aligned) in the request's dev_host buffer; the
 * inputs copied there before are moved with it. */
static bool dev_host_reserve(infd_request *req, size_t n)
{
    n = (n + INFD_ALIGNMENT - 1) & ~(size_t)(INFD_ALIGNMENT - 1);
    if (n <= req->dev_host_cap - req->dev_host_used)
        return true;
    size_t want = req->dev_host_cap ? req->dev_host_cap : 4096;
    while (want - req->dev_host_used < n)
        want *= 2;
    char *p = infd_aligned_alloc(INFD_ALIGNMENT, want);
    if (!p)
        return false;
    char *old = req->dev_host;
    if (req->dev_host_used)
        memcpy(p, old, req->dev_host_used);
    for (int k = 0; k < INFD_MAX_MODEL_IO; k++)
        if (req->in[k].set && req->in[k].host_copy)
            req->in[k].one.data = p + ((const char *)req->in[k].one.data - old);
    infd_free(old);
    req->dev_host = p;
    req->dev_host_cap = want;
    return true;
}

infd_status infd_request_add_input_device(infd_request *req, const char *name, infd_dtype dtype,
                                          const int64_t *shape, int rank, const void *dev,
                                          size_t nbytes, int device, infd_error *err)
{
    const infd_model *m = req->model;
    int i = infd_model_input_index(m, name);
    if (i >= 0 && m->device_inputs && dtype != INFD_DTYPE_BYTES) {
        infd_status st = infd_request_add_input(req, name, dtype, shape, rank, dev, nbytes, err);
        if (st == INFD_STATUS_OK) {
            req->in[i].on_device = true;
            req->in[i].device = device;
        }
        return st;
    }
    /* A model that reads its inputs on the host (or BYTES, whose lengths
     * the host checks): copied there now. */
    if (i >= 0 && !dev_host_reserve(req, nbytes))
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "out of memory copying input '%s' (%zu bytes) from device %d", name,
                              nbytes, device);
    char *host = i >= 0 ? (char *)req->dev_host + req->dev_host_used : NULL;
    infd_status st;
    if (i >= 0 && nbytes &&
        (st = infd_engine_memcpy(INFD_DEVICE_CUDA, device, host, dev, nbytes, err)) !=
            INFD_STATUS_OK)
        return infd_error_prefix(err, "input '%s' from device %d", name, device);
    if ((st = infd_request_add_input(req, name, dtype, shape, rank, host, nbytes, err)) !=
        INFD_STATUS_OK)
        return st;
    req->in[i].host_copy = true;
    req->dev_host_used += (nbytes + INFD_ALIGNMENT - 1) & ~(size_t)(INFD_ALIGNMENT - 1);
    return INFD_STATUS_OK;
}

infd_status infd_request_add_output(infd_request *req, const char *name, infd_error *err)
{
    const infd_model *m = req->model;
    int j = infd_model_output_index(m, name);
    if (j < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "model '%s' has no output '%s'",
                              m->name, name ? name : "(null)");
    for (int k = 0; k < req->n_req; k++)
        if (req->req[k] == j)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "output '%s' requested twice",
                                  name);
    req->req[req->n_req++] = j;
    return INFD_STATUS_OK;
}

infd_status infd_request_set_output_buffer(infd_request *req, const char *name, void *data,
                                           size_t capacity, infd_error *err)
{
    const infd_model *m = req->model;
    int j = infd_model_output_index(m, name);
    if (j < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "model '%s' has no output '%s'",
                              m->name, name ? name : "(null)");
    req->user_out[j].data = data;
    req->user_out[j].capacity = data ? capacity : 0;
    req->user_out[j].on_device = false;
    return INFD_STATUS_OK;
}

infd_status infd_request_set_output_device(infd_request *req, const char *name, void *dev,
                                           size_t capacity, int device, infd_error *err)
{
    const infd_model *m = req->model;
    int j = infd_model_output_index(m, name);
    if (j < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "model '%s' has no output '%s'",
                              m->name, name ? name : "(null)");
    if (!dev)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "output '%s': no device memory given", name);
    req->user_out[j].data = dev;
    req->user_out[j].capacity = capacity;
    req->user_out[j].on_device = true;
    req->user_out[j].device = device;
    req->any_dev_out = true;
    return INFD_STATUS_OK;
}

/* Copies the outputs that go to device memory there, from the host memory
 * the run wrote them in; each then reads as that device memory. With
 * `queued`, the copies are queued (infd_engine_memcpy_async; the caller
 * waits on every device in *devices) instead of waited for one by one. */
static infd_status outputs_to_device(infd_request *r, bool queued, uint64_t *devices,
                                     infd_error *err)
{
    const infd_model *m = r->model;
    for (int k = 0; k < r->n_out; k++) {
        int j = r->out_index[k];
        if (!r->user_out[j].on_device || r->cls[j])
            continue;
        infd_tensor *t = &r->out[k];
        int dev = r->user_out[j].device;
        if (t->nbytes > r->user_out[j].capacity)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "output '%s': the caller's buffer holds %zu bytes, the result "
                                  "needs %zu",
                                  m->out[j].name, r->user_out[j].capacity, t->nbytes);
        infd_status st = queued
                             ? infd_engine_memcpy_async(INFD_DEVICE_CUDA, dev, r->user_out[j].data,
                                                        t->data, t->nbytes, err)
                             : infd_engine_memcpy(INFD_DEVICE_CUDA, dev, r->user_out[j].data,
                                                  t->data, t->nbytes, err);
        if (st != INFD_STATUS_OK)
            return infd_error_prefix(err, "output '%s' to device %d", m->out[j].name, dev);
        if (devices)
            *devices |= 1ull << (dev & 63);
        t->data = r->user_out[j].data;
    }
    return INFD_STATUS_OK;
}

/* The device outputs of a batch's requests, queued together and waited for
 * once per device (each copy waited for alone costs a round trip to the
 * device per request). A request whose copy cannot be queued fails alone;
 * a failed wait fails them all. */
static void batch_outputs_to_device(rt_instance *inst, int n)
{
    uint64_t devices = 0;
    bool any = false;
    for (int k = 0; k < n; k++) {
        infd_request *r = inst->batch[k];
        if (inst->deferred[k] || !r->any_dev_out || r->kind_status != INFD_STATUS_OK)
            continue;
        infd_error e = { 0 };
        if (outputs_to_device(r, true, &devices, &e) != INFD_STATUS_OK) {
            r->kind_status = e.code;
            snprintf(r->kind_msg, sizeof(r->kind_msg), "%.255s", e.msg);
        }
        r->dev_out_done = true;
        any = true;
    }
    infd_error e = { 0 };
    for (int d = 0; any && d < 64; d++)
        if ((devices >> d & 1) &&
            infd_engine_memcpy_wait(INFD_DEVICE_CUDA, d, &e) != INFD_STATUS_OK)
            break;
    if (e.code == INFD_STATUS_OK)
        return;
    for (int k = 0; k < n; k++) {
        infd_request *r = inst->batch[k];
        if (!inst->deferred[k] && r->dev_out_done && r->kind_status == INFD_STATUS_OK) {
            r->kind_status = e.code;
            snprintf(r->kind_msg, sizeof(r->kind_msg), "output to a device: %.200s", e.msg);
        }
    }
}

int infd_request_n_outputs(const infd_request *req)
{
    return req->n_out;
}

infd_status infd_request_output(const infd_request *req, int i, const char **name, infd_tensor *out)
{
    if (i < 0 || i >= req->n_out)
        return INFD_STATUS_NOT_FOUND;
    if (name)
        *name = req->model->out[req->out_index[i]].name;
    *out = req->out[i];
    out->owns_data = false;
    return INFD_STATUS_OK;
}

void infd_request_timing(const infd_request *req, uint64_t *queue_ns, uint64_t *compute_ns)
{
    if (queue_ns)
        *queue_ns = req->queue_ns;
    if (compute_ns)
        *compute_ns = req->compute_ns;
}

/* Lays out the request's outputs: each gets its rows in the caller's buffer
 * or in the request's own memory (grown here, outside the hot steady state). */
static infd_status prepare_outputs(infd_request *r, infd_error *err)
{
    const infd_model *m = r->model;
    r->n_out = 0;
    if (r->n_req) {
        for (int k = 0; k < r->n_req; k++)
            r->out_index[r->n_out++] = r->req[k];
    } else {
        for (int j = 0; j < m->n_out_pub; j++)
            r->out_index[r->n_out++] = j;
    }
    size_t own = 0;
    for (int k = 0; k < r->n_out; k++) {
        int j = r->out_index[k];
        size_t bytes = (size_t)r->rows * m->out[j].row_bytes;
        if (m->out[j].row_bytes == 0)
            continue; /* no fixed size: the kind sets it (infd_request_output_set) */
        if (r->user_out[j].data && !r->cls[j] && !r->user_out[j].on_device) {
            if (r->user_out[j].capacity < bytes)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "output '%s': the caller's buffer holds %zu bytes, the "
                                      "result needs %zu",
                                      m->out[j].name, r->user_out[j].capacity, bytes);
        } else {
            own += (bytes + INFD_ALIGNMENT - 1) & ~(size_t)(INFD_ALIGNMENT - 1);
        }
    }
    if (own > r->own_bytes) {
        void *p = infd_aligned_alloc(INFD_ALIGNMENT, own);
        if (!p)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                                  "out of memory for %zu bytes of outputs", own);
        infd_free(r->own);
        r->own = p;
        r->own_bytes = own;
    }
    size_t off = 0;
    for (int k = 0; k < r->n_out; k++) {
        int j = r->out_index[k];
        const infd_model_io *io = &m->out[j];
        infd_tensor *t = &r->out[k];
        size_t bytes = (size_t)r->rows * io->row_bytes;
        t->dtype = io->dtype;
        if (io->row_bytes == 0) {
            memset(t, 0, sizeof(*t));
            t->dtype = io->dtype;
            continue;
        }
        int lead = m->max_batch > 0 ? 1 : 0;
        t->shape.rank = io->rank + lead;
        if (lead)
            t->shape.dims[0] = r->rows;
        for (int d = 0; d < io->rank; d++)
            t->shape.dims[d + lead] = io->dims[d];
        t->nbytes = bytes;
        t->owns_data = false;
        /* Classified: its BYTES go elsewhere; on a device: copied there at
         * completion. */
        if (r->user_out[j].data && !r->cls[j] && !r->user_out[j].on_device) {
            t->data = r->user_out[j].data;
        } else {
            t->data = (char *)r->own + off;
            off += (bytes + INFD_ALIGNMENT - 1) & ~(size_t)(INFD_ALIGNMENT - 1);
        }
    }
    return INFD_STATUS_OK;
}

static void record_completion(infd_model *m, infd_request *r, infd_status status)
{
    uint64_t now = infd_clock_ns();
    uint64_t dt = now - r->t_submit_ns;
    if (status == INFD_STATUS_OK) {
        ADD(m->st.success_count, 1);
        ADD(m->st.success_ns, dt);
        infd_histogram_record(m->latency, dt);
    } else {
        ADD(m->st.failure_count, 1);
        ADD(m->st.failure_ns, dt);
    }
    __atomic_store_n(&m->st.last_inference_ms, infd_clock_realtime_ns() / 1000000u,
                     __ATOMIC_RELAXED);
}

/* Completes an accepted request: stats, callback, pending count. */
static void complete(infd_model *m, infd_request *r, infd_status status, const char *msg)
{
    infd_error cerr;
    if (status == INFD_STATUS_OK && r->any_cls) {
        infd_error_clear(&cerr);
        status = rt_classify(r, &cerr);
        msg = cerr.msg;
    }
    if (status == INFD_STATUS_OK && r->any_dev_out && !r->dev_out_done) {
        infd_error_clear(&cerr);
        status = outputs_to_device(r, false, NULL, &cerr);
        msg = cerr.msg;
    }
    record_completion(m, r, status);
    r->in_flight = false;
    infd_infer_callback cb = r->cb;
    void *user = r->cb_user;
    /* The model must outlive the pending decrement even if the callback
     * destroys the request (dropping its reference). */
    infd_model_retain(m);
    cb(user, r, status, status == INFD_STATUS_OK ? NULL : msg);
    pthread_mutex_lock(&m->mu);
    if (--m->pending == 0)
        pthread_cond_broadcast(&m->drain_cv);
    pthread_mutex_unlock(&m->mu);
    infd_model_release(m);
}

infd_status infd_infer_async(infd_request *r, infd_infer_callback callback, void *user,
                             infd_error *err)
{
    infd_model *m = r->model;
    infd_status st = INFD_STATUS_OK;
    if (!callback)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "no completion callback");
    if (r->in_flight)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "request already submitted");
    if (r->n_inputs_set != m->n_in_pub) {
        for (int i = 0; i < m->n_in_pub; i++)
            if (!r->in[i].set) {
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "model '%s': input '%s' is missing (%d of %d given)", m->name,
                                    m->in[i].name, r->n_inputs_set, m->n_in_pub);
                break;
            }
        goto rejected;
    }
    if (m->seq && !r->seq_set) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "model '%s' batches sequences: the request needs a correlation id "
                            "(parameter sequence_id, non-zero or a non-empty string)",
                            m->name);
        goto rejected;
    }
    st = prepare_outputs(r, err);
    if (st != INFD_STATUS_OK)
        goto rejected;
    r->cb = callback;
    r->cb_user = user;
    r->queue_ns = r->compute_ns = 0;
    r->t_submit_ns = infd_clock_ns();
    pthread_mutex_lock(&m->mu);
    rt_queue *q = &m->q[r->priority < (uint32_t)m->n_levels ? r->priority : 0];
    if (!m->accepting || (rt_server_is_draining(m->server) && !r->internal)) {
        pthread_mutex_unlock(&m->mu);
        st = infd_error_set(
            err, INFD_STATUS_UNAVAILABLE, "model '%s' version %lld is not accepting requests (%s)",
            m->name, (long long)m->version,
            rt_server_is_draining(m->server) ? "server shutting down" : "unloading");
        goto rejected;
    }
    if (m->kind_submit) {
        /* The kind takes it now (infd_kind_model_set_submit). */
        m->pending++;
        r->in_flight = true;
        pthread_mutex_unlock(&m->mu);
        r->kind_set = 0;
        r->kind_status = INFD_STATUS_OK;
        r->exec_inst = NULL;
        r->deadline_ns = 0;
        st = m->kind_submit(m->kind_state, r, err);
        if (st == INFD_STATUS_OK)
            return INFD_STATUS_OK;
        r->in_flight = false;
        pthread_mutex_lock(&m->mu);
        if (--m->pending == 0)
            pthread_cond_broadcast(&m->drain_cv);
        pthread_mutex_unlock(&m->mu);
        goto rejected;
    }
    if (m->seq) {
        r->next = NULL;
        r->deadline_ns = 0;
        st = rt_seq_submit(m, r, err);
        if (st != INFD_STATUS_OK) {
            pthread_mutex_unlock(&m->mu);
            goto rejected;
        }
        m->depth++;
        m->pending++;
        r->in_flight = true;
        /* The sequence's slot may belong to any instance (direct). */
        pthread_cond_broadcast(&m->work_cv);
        pthread_mutex_unlock(&m->mu);
        return INFD_STATUS_OK;
    }
    if (q->max_queue_size && q->n >= q->max_queue_size) {
        pthread_mutex_unlock(&m->mu);
        st = infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                            "model '%s': the queue is full (max_queue_size %u); try again later",
                            m->name, q->max_queue_size);
        goto rejected;
    }
    uint64_t timeout = q->timeout_us;
    if (r->timeout_us && (q->allow_timeout_override || !timeout))
        timeout = r->timeout_us;
    r->deadline_ns = timeout && !q->delay_on_timeout ? r->t_submit_ns + timeout * 1000u : 0;
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->n++;
    m->depth++;
    m->pending++;
    r->in_flight = true;
    pthread_cond_signal(&m->work_cv);
    pthread_mutex_unlock(&m->mu);
    return INFD_STATUS_OK;

rejected:
    ADD(m->st.failure_count, 1);
    return st;
}

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    infd_status status;
    char msg[512];
} sync_wait;

static void sync_done(void *user, infd_request *req, infd_status status, const char *message)
{
    INFD_UNUSED(req);
    sync_wait *w = user;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    snprintf(w->msg, sizeof(w->msg), "%s", message ? message : "");
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

infd_status infd_infer(infd_request *req, infd_error *err)
{
    sync_wait w = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    infd_status st = infd_infer_async(req, sync_done, &w, err);
    if (st != INFD_STATUS_OK)
        return st;
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    if (w.status != INFD_STATUS_OK)
        infd_error_set(err, w.status, "%s", w.msg);
    return w.status;
}

/* ------------------------------------------------------------------------- */
/* Batch formation (under model->mu)                                         */
/* ------------------------------------------------------------------------- */

/* Unlinks expired requests into `*expired`. */
static void collect_expired(infd_model *m, uint64_t now, infd_request **expired)
{
    for (int l = 0; l < m->n_levels; l++) {
        rt_queue *q = &m->q[l];
        infd_request *prev = NULL, *r = q->head;
        while (r) {
            infd_request *next = r->next;
            if (r->deadline_ns && now >= r->deadline_ns) {
                if (prev)
                    prev->next = next;
                else
                    q->head = next;
                if (q->tail == r)
                    q->tail = prev;
                q->n--;
                m->depth--;
                r->next = *expired;
                *expired = r;
            } else {
                prev = r;
            }
            r = next;
        }
    }
}

/* Rows that could join a batch now, in priority then FIFO order, stopping
 * at the first request that would pass `limit`. */
static int64_t available_rows(const infd_model *m, int64_t limit)
{
    int64_t rows = 0;
    for (int l = 0; l < m->n_levels; l++)
        for (const infd_request *r = m->q[l].head; r; r = r->next) {
            if (rows + r->rows > limit)
                return rows;
            rows += r->rows;
        }
    return rows;
}

static uint64_t oldest_submit(const infd_model *m)
{
    uint64_t t = UINT64_MAX;
    for (int l = 0; l < m->n_levels; l++)
        if (m->q[l].head && m->q[l].head->t_submit_ns < t)
            t = m->q[l].head->t_submit_ns;
    return t;
}

/* Pops requests totalling at most `limit` rows into inst->batch. */
static int pop_batch(infd_model *m, rt_instance *inst, int64_t limit, int64_t *rows_out)
{
    int n = 0;
    int64_t rows = 0;
    for (int l = 0; l < m->n_levels; l++) {
        rt_queue *q = &m->q[l];
        while (q->head && rows + q->head->rows <= limit && n < INFD_STATS_MAX_BATCH) {
            infd_request *r = q->head;
            q->head = r->next;
            if (!q->head)
                q->tail = NULL;
            r->next = NULL;
            q->n--;
            m->depth--;
            rows += r->rows;
            inst->batch[n++] = r;
        }
        if (q->head)
            break; /* keep priority order: a lower level never jumps a blocked higher one */
    }
    *rows_out = rows;
    return n;
}

static void timed_wait_ns(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t wait_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + wait_ns;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(cv, mu, &ts);
}

/* next_batch for a model with a sequence batcher: the slots freed since
 * the last batch are given to the kind's sequence_free (lock dropped)
 * before they are reused. */
static int next_seq_batch(infd_model *m, rt_instance *inst, int64_t *rows)
{
    for (;;) {
        uint64_t wait = UINT64_MAX;
        int n = rt_seq_pop(m, inst, infd_clock_ns(), &wait);
        if (m->seq->n_free_pending > 0) {
            int freed[64];
            int nf = rt_seq_take_freed(m, freed, 64);
            pthread_mutex_unlock(&m->mu);
            for (int k = 0; k < nf; k++)
                m->kind->sequence_free(m->kind_state, freed[k]);
            pthread_mutex_lock(&m->mu);
            rt_seq_reuse(m, freed, nf);
            if (n == 0)
                continue; /* a waiting sequence may have a slot now */
        }
        if (n > 0) {
            *rows = 0;
            for (int k = 0; k < n; k++)
                *rows += inst->batch[k]->rows;
            return n;
        }
        if (m->stop_workers && m->depth == 0)
            return 0;
        if (wait == UINT64_MAX)
            pthread_cond_wait(&m->work_cv, &m->mu);
        else if (wait > 0)
            timed_wait_ns(&m->work_cv, &m->mu, wait);
    }
}

/* Waits for and forms the next batch. Returns its request count (0: stop).
 * Called and returns with m->mu held; expired requests are completed with
 * the lock dropped. */
static int next_batch(infd_model *m, rt_instance *inst, int64_t *rows)
{
    if (m->seq)
        return next_seq_batch(m, inst, rows);
    int64_t max_rows = m->max_batch > 0 ? m->max_batch : 1;
    for (;;) {
        if (m->depth == 0) {
            if (m->stop_workers)
                return 0;
            pthread_cond_wait(&m->work_cv, &m->mu);
            continue;
        }
        uint64_t now = infd_clock_ns();
        infd_request *expired = NULL;
        collect_expired(m, now, &expired);
        if (expired) {
            pthread_mutex_unlock(&m->mu);
            while (expired) {
                infd_request *r = expired;
                expired = r->next;
                r->queue_ns = now - r->t_submit_ns;
                ADD(m->st.queue_ns, r->queue_ns);
                complete(m, r, INFD_STATUS_DEADLINE_EXCEEDED,
                         "the request timed out in the queue before it could run");
            }
            pthread_mutex_lock(&m->mu);
            continue;
        }
        int64_t limit = max_rows;
        if (m->dynamic && !m->stop_workers) {
            int64_t avail = available_rows(m, max_rows);
            int64_t cut = 0;
            for (int k = 0; k < m->n_preferred; k++)
                if (m->preferred[k] <= avail && m->preferred[k] > cut)
                    cut = m->preferred[k];
            uint64_t age = now - oldest_submit(m);
            if (avail >= max_rows) {
                limit = max_rows;
            } else if (cut > 0) {
                limit = cut;
            } else if (age < m->max_queue_delay_ns) {
                timed_wait_ns(&m->work_cv, &m->mu, m->max_queue_delay_ns - age);
                continue;
            }
        } else if (!m->dynamic) {
            /* Without dynamic batching every request runs on its own. */
            limit = 0;
            for (int l = 0; l < m->n_levels && !limit; l++)
                if (m->q[l].head)
                    limit = m->q[l].head->rows;
        }
        int n = pop_batch(m, inst, limit, rows);
        if (n > 0)
            return n;
        /* The head request is larger than the preferred cut: take it alone. */
        n = pop_batch(m, inst, max_rows, rows);
        if (n > 0)
            return n;
    }
}

/* ------------------------------------------------------------------------- */
/* Execution (no lock held)                                                  */
/* ------------------------------------------------------------------------- */

/* Runs a batch on its model's kind and completes its requests. */
static void execute(infd_model *m, rt_instance *inst, int n, int64_t rows)
{
    uint64_t t0 = infd_clock_ns();
    infd_error err;
    infd_error_clear(&err);
    for (int k = 0; k < n; k++) {
        infd_request *r = inst->batch[k];
        r->queue_ns = t0 - r->t_submit_ns;
        ADD(m->st.queue_ns, r->queue_ns);
        r->kind_set = 0;
        r->kind_status = INFD_STATUS_OK;
        r->exec_inst = inst;
        r->exec_slot = k;
        inst->deferred[k] = false;
    }
    uint64_t t[2] = { t0, t0 };
    infd_status st;
    if (m->kind) {
        st = rt_plugin_run_batch(m, inst, n, &err);
        t[1] = infd_clock_ns();
    } else {
        st = rt_onnx_run_batch(m, inst, n, rows, t, &err);
    }
    uint64_t t3 = infd_clock_ns();
    ADD(m->st.execution_count, 1);
    ADD(m->st.inference_count, rows);
    ADD(m->st.compute_input_ns, (t[0] - t0) * (uint64_t)n);
    ADD(m->st.compute_infer_ns, (t[1] - t[0]) * (uint64_t)n);
    ADD(m->st.compute_output_ns, (t3 - t[1]) * (uint64_t)n);
    int bs = rows > INFD_STATS_MAX_BATCH ? INFD_STATS_MAX_BATCH : (int)rows;
    ADD(m->st.batch_exec_count[bs], 1);
    ADD(m->st.batch_compute_ns[bs], t3 - t0);
    if (st != INFD_STATUS_OK)
        infd_log(INFD_LOG_LEVEL_ERROR, "model '%s' version %lld: batch of %lld failed: %s", m->name,
                 (long long)m->version, (long long)rows, err.msg);
    if (m->seq) {
        pthread_mutex_lock(&m->mu);
        rt_seq_done(m, inst, n);
        pthread_mutex_unlock(&m->mu);
    }
    if (st == INFD_STATUS_OK)
        batch_outputs_to_device(inst, n);
    for (int k = 0; k < n; k++) {
        infd_request *r = inst->batch[k];
        inst->batch[k] = NULL;
        if (inst->deferred[k])
            continue; /* infd_request_done completes it: `r` may be gone already */
        r->exec_inst = NULL;
        r->compute_ns = t3 - t0;
        infd_status rs = st;
        const char *msg = err.msg;
        if (st == INFD_STATUS_OK && r->kind_status != INFD_STATUS_OK) {
            rs = r->kind_status;
            msg = r->kind_msg;
        } else if (st == INFD_STATUS_OK && m->kind) {
            int j = rt_plugin_missing_output(r);
            if (j >= 0) {
                snprintf(r->kind_msg, sizeof(r->kind_msg),
                         "model '%s' (backend %s) produced no output '%s'", m->name,
                         m->config->backend, m->out[j].name);
                rs = INFD_STATUS_INTERNAL;
                msg = r->kind_msg;
            }
        }
        complete(m, r, rs, msg);
    }
}

infd_status infd_request_defer(infd_request *req, infd_error *err)
{
    if (req->model->seq)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': a request of a sequence-batched model cannot be "
                              "deferred",
                              req->model->name);
    if (!req->exec_inst)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': a request is deferred only inside run_batch",
                              req->model->name);
    req->deferred = true;
    req->exec_inst->deferred[req->exec_slot] = true;
    return INFD_STATUS_OK;
}

void infd_request_done(infd_request *r)
{
    infd_model *m = r->model;
    r->deferred = false;
    r->exec_inst = NULL;
    r->compute_ns = infd_clock_ns() - r->t_submit_ns - r->queue_ns;
    infd_status rs = r->kind_status;
    const char *msg = r->kind_msg;
    if (rs == INFD_STATUS_OK) {
        int j = rt_plugin_missing_output(r);
        if (j >= 0) {
            snprintf(r->kind_msg, sizeof(r->kind_msg),
                     "model '%s' (backend %s) produced no output '%s'", m->name, m->config->backend,
                     m->out[j].name);
            rs = INFD_STATUS_INTERNAL;
        }
    }
    complete(m, r, rs, msg);
}

static void *worker_main(void *arg)
{
    rt_instance *inst = arg;
    infd_model *m = inst->model;
    /* Linux wakes timed waits up to the thread's timer slack (50 us by
     * default) late; the batcher's max_queue_delay waits are often 100 us,
     * and overshot by ~80 us with the default (bench/RESULTS.md). */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    pthread_mutex_lock(&m->mu);
    for (;;) {
        int64_t rows = 0;
        int n = next_batch(m, inst, &rows);
        if (n == 0)
            break;
        pthread_mutex_unlock(&m->mu);
        execute(m, inst, n, rows);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

infd_status rt_model_start_workers(infd_model *m, infd_error *err)
{
    for (int k = 0; k < m->n_inst; k++) {
        rt_instance *inst = &m->inst[k];
        int rc = pthread_create(&inst->thread, NULL, worker_main, inst);
        if (rc != 0)
            return infd_error_set(err, INFD_STATUS_INTERNAL,
                                  "model '%s': cannot start instance thread %d: %s", m->name, k,
                                  strerror(rc));
        inst->started = true;
        char tname[16];
        snprintf(tname, sizeof(tname), "w%02d-%.10s", k % 100, m->name);
        pthread_setname_np(inst->thread, tname);
    }
    return INFD_STATUS_OK;
}
