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
    void *own = r->own;
    size_t own_bytes = r->own_bytes;
    memset(r, 0, offsetof(infd_request, own));
    memset(&r->cb, 0, sizeof(*r) - offsetof(infd_request, cb));
    r->own = own;
    r->own_bytes = own_bytes;
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

infd_status infd_request_set_priority(infd_request *req, uint32_t priority, infd_error *err)
{
    const infd_model *m = req->model;
    if (priority == 0) {
        req->priority = m->default_level;
        return INFD_STATUS_OK;
    }
    if (priority > (uint32_t)m->n_levels)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': priority %u is outside 1..%d (priority_levels)", m->name,
                              priority, m->n_levels);
    req->priority = priority - 1;
    return INFD_STATUS_OK;
}

void infd_request_set_timeout_us(infd_request *req, uint64_t timeout_us)
{
    req->timeout_us = timeout_us;
}

/* Checks input `name` of `req` (dtype, shape, batch, byte size) and, when
 * it is right, records its pieces. */
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
        ok = shape[d] == ws.dims[d];
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
    size_t want_bytes = (size_t)rows * io->row_bytes;
    if (nbytes != want_bytes) {
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
    return INFD_STATUS_OK;
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
        for (int j = 0; j < m->n_out; j++)
            r->out_index[r->n_out++] = j;
    }
    size_t own = 0;
    for (int k = 0; k < r->n_out; k++) {
        int j = r->out_index[k];
        size_t bytes = (size_t)r->rows * m->out[j].row_bytes;
        if (r->user_out[j].data) {
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
        int lead = m->max_batch > 0 ? 1 : 0;
        t->shape.rank = io->rank + lead;
        if (lead)
            t->shape.dims[0] = r->rows;
        for (int d = 0; d < io->rank; d++)
            t->shape.dims[d + lead] = io->dims[d];
        t->nbytes = bytes;
        t->owns_data = false;
        if (r->user_out[j].data) {
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
    if (r->n_inputs_set != m->n_in) {
        for (int i = 0; i < m->n_in; i++)
            if (!r->in[i].set) {
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "model '%s': input '%s' is missing (%d of %d given)", m->name,
                                    m->in[i].name, r->n_inputs_set, m->n_in);
                break;
            }
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
    if (!m->accepting || rt_server_is_draining(m->server)) {
        pthread_mutex_unlock(&m->mu);
        st = infd_error_set(
            err, INFD_STATUS_UNAVAILABLE, "model '%s' version %lld is not accepting requests (%s)",
            m->name, (long long)m->version,
            rt_server_is_draining(m->server) ? "server shutting down" : "unloading");
        goto rejected;
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

/* Waits for and forms the next batch. Returns its request count (0: stop).
 * Called and returns with m->mu held; expired requests are completed with
 * the lock dropped. */
static int next_batch(infd_model *m, rt_instance *inst, int64_t *rows)
{
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

static const rt_plan *plan_for(const infd_model *m, int64_t rows, int *index)
{
    for (int p = 0; p < m->n_plans; p++)
        if (m->plans[p].batch >= rows) {
            *index = p;
            return &m->plans[p];
        }
    *index = m->n_plans - 1;
    return &m->plans[m->n_plans - 1];
}

static bool wants_all_outputs(const infd_request *r)
{
    return r->n_out == r->model->n_out;
}

/* Copies bytes [from, from + len) of the concatenation of `segs` to dst,
 * leaving out (with `skip_pinned`) the pieces in the pinned memory pool,
 * which the device copy reads where they lie. */
static void copy_from_segments(char *dst, const infd_data_segment *segs, int n_segs, size_t from,
                               size_t len, bool skip_pinned)
{
    for (int g = 0; g < n_segs && len > 0; g++) {
        size_t n = segs[g].nbytes;
        if (from >= n) {
            from -= n;
            continue;
        }
        size_t take = n - from < len ? n - from : len;
        if (!skip_pinned || !infd_pinned_contains(segs[g].data, n))
            memcpy(dst, (const char *)segs[g].data + from, take);
        dst += take;
        len -= take;
        from = 0;
    }
}

/* Gathers chunk `task` of the instance's batch: bytes [c * chunk, (c + 1) *
 * chunk) of input i's batch, from the requests (and their pieces) that
 * hold them. Chunks split large requests too, so a pool balances batches of
 * a few big requests as well as many small ones. */
static void gather_chunk(void *arg, int64_t task)
{
    rt_instance *inst = arg;
    const infd_model *m = inst->model;
    int i = 0;
    while (inst->gather_first[i + 1] <= task)
        i++;
    size_t rb = m->in[i].row_bytes;
    size_t at = (size_t)(task - inst->gather_first[i]) * inst->gather_chunk;
    size_t end = at + inst->gather_chunk;
    /* The request holding byte `at`: the last one starting at or before it. */
    int lo = 0, hi = inst->gather_n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((size_t)inst->row_at[mid] * rb <= at)
            lo = mid;
        else
            hi = mid - 1;
    }
    for (int k = lo; k < inst->gather_n && at < end; k++) {
        const infd_request *r = inst->batch[k];
        size_t base = (size_t)inst->row_at[k] * rb, stop = base + r->in[i].nbytes;
        size_t upto = stop < end ? stop : end;
        if (upto > at)
            copy_from_segments(inst->gather_dst[i] + at, r->in[i].segs, r->in[i].n_segs, at - base,
                               upto - at, inst->gather_skip_pinned[i]);
        at = upto;
    }
}

/* Batches at least this large are gathered by the model's copy pool, in
 * chunks of GATHER_CHUNK_BYTES. */
#define PARALLEL_GATHER_BYTES (1u << 20)
#define GATHER_CHUNK_BYTES    (512u << 10)

/* Gathers the batch's inputs into inst->gather_dst. */
static void gather(const infd_model *m, rt_instance *inst, int n, int64_t rows)
{
    int64_t at = 0;
    size_t bytes = 0;
    for (int k = 0; k < n; k++) {
        inst->row_at[k] = at;
        at += inst->batch[k]->rows;
    }
    for (int i = 0; i < m->n_in; i++)
        bytes += (size_t)rows * m->in[i].row_bytes;
    bool parallel = m->copy_pool && bytes >= PARALLEL_GATHER_BYTES;
    inst->gather_n = n;
    inst->gather_chunk = parallel ? GATHER_CHUNK_BYTES : SIZE_MAX;
    inst->gather_first[0] = 0;
    for (int i = 0; i < m->n_in; i++) {
        size_t in_bytes = (size_t)rows * m->in[i].row_bytes;
        int64_t chunks = parallel
                             ? (int64_t)((in_bytes + GATHER_CHUNK_BYTES - 1) / GATHER_CHUNK_BYTES)
                             : in_bytes > 0;
        inst->gather_first[i + 1] = inst->gather_first[i] + chunks;
    }
    int64_t tasks = inst->gather_first[m->n_in];
    if (parallel)
        infd_pool_parallel_for(m->copy_pool, tasks, gather_chunk, inst);
    else
        for (int64_t t = 0; t < tasks; t++)
            gather_chunk(inst, t);
}

/* Whether input i of the batch should reach the GPU from where its
 * pieces lie: some piece is in the pinned memory pool, and the instance
 * has room to list them (each pinned piece, and at most one run of the
 * staging before each and after the last). */
static bool wants_pieces(const rt_instance *inst, int n, int i)
{
    if (!inst->pieces[i])
        return false;
    int pinned = 0;
    for (int k = 0; k < n; k++) {
        const infd_request *r = inst->batch[k];
        for (int g = 0; g < r->in[i].n_segs; g++)
            pinned += infd_pinned_contains(r->in[i].segs[g].data, r->in[i].segs[g].nbytes);
    }
    return pinned > 0 && 2 * pinned + 1 <= inst->pieces_cap;
}

/* Lists the pieces the device copy of input i reads, in batch order: the
 * requests' pieces in the pinned pool where they lie, the others from the
 * staging `base` the gather put them in (adjacent ones as one). */
static int pinned_pieces(const infd_model *m, rt_instance *inst, int n, int i, char *base)
{
    infd_data_segment *out = inst->pieces[i];
    int np = 0;
    for (int k = 0; k < n; k++) {
        const infd_request *r = inst->batch[k];
        size_t at = (size_t)inst->row_at[k] * m->in[i].row_bytes;
        for (int g = 0; g < r->in[i].n_segs; g++) {
            const infd_data_segment *s = &r->in[i].segs[g];
            if (!s->nbytes)
                continue;
            bool pinned = infd_pinned_contains(s->data, s->nbytes);
            const char *src = pinned ? s->data : base + at;
            if (np > 0 && (const char *)out[np - 1].data + out[np - 1].nbytes == src)
                out[np - 1].nbytes += s->nbytes;
            else
                out[np++] = (infd_data_segment){ src, s->nbytes };
            at += s->nbytes;
        }
    }
    return np;
}

static void execute(infd_model *m, rt_instance *inst, int n, int64_t rows)
{
    uint64_t t0 = infd_clock_ns();
    int pi = 0;
    const rt_plan *p = plan_for(m, rows, &pi);
    infd_tensor ins[INFD_MAX_MODEL_IO], outs[INFD_MAX_MODEL_IO];
    infd_error err;
    infd_error_clear(&err);
    int lead = m->max_batch > 0 ? 1 : 0;
    for (int k = 0; k < n; k++) {
        infd_request *r = inst->batch[k];
        r->queue_ns = t0 - r->t_submit_ns;
        ADD(m->st.queue_ns, r->queue_ns);
    }
    /* Inputs: a lone request that fills the plan is passed through when
     * each input is one piece of aligned memory (kernels may use aligned
     * vector loads; binary HTTP bodies put tensors at any offset and in
     * pieces), otherwise gathered. */
    bool direct_in = n == 1 && rows == p->batch;
    bool any_pieces = false;
    for (int i = 0; i < m->n_in; i++) {
        inst->gather_skip_pinned[i] = wants_pieces(inst, n, i);
        any_pieces |= inst->gather_skip_pinned[i];
    }
    direct_in &= !any_pieces;
    for (int i = 0; direct_in && i < m->n_in; i++)
        direct_in = inst->batch[0]->in[i].n_segs == 1 &&
                    ((uintptr_t)inst->batch[0]->in[i].segs[0].data % INFD_ALIGNMENT) == 0;
    for (int i = 0; i < m->n_in; i++) {
        const infd_model_io *io = &m->in[i];
        infd_tensor *t = &ins[p->in_map[i]];
        t->dtype = io->dtype;
        t->shape.rank = io->rank + lead;
        if (lead)
            t->shape.dims[0] = p->batch;
        for (int d = 0; d < io->rank; d++)
            t->shape.dims[d + lead] = io->dims[d];
        t->nbytes = (size_t)p->batch * io->row_bytes;
        t->owns_data = false;
        if (direct_in) {
            t->data = (void *)inst->batch[0]->in[i].segs[0].data;
            continue;
        }
        /* A GPU plan's context has page-locked staging that its
         * host-to-device copy reads: gathering straight into it saves the
         * engine's copy out of in_buf. */
        char *base = infd_context_input_buffer(inst->ctxs[pi], p->in_map[i]);
        if (!base)
            base = inst->in_buf[i];
        inst->gather_dst[i] = base;
        t->data = base;
    }
    if (!direct_in)
        gather(m, inst, n, rows);
    for (int i = 0; i < m->n_in && any_pieces; i++) {
        if (!inst->gather_skip_pinned[i])
            continue;
        int np = pinned_pieces(m, inst, n, i, inst->gather_dst[i]);
        infd_error perr = { 0 };
        if (infd_context_set_input_pieces(inst->ctxs[pi], p->in_map[i], inst->pieces[i], np,
                                          &perr) != INFD_STATUS_OK) {
            /* Not expected (the pieces fit the input): gather it all. */
            infd_log(INFD_LOG_LEVEL_WARN, "model '%s': %s; gathering input '%s' instead", m->name,
                     perr.msg, m->in[i].name);
            inst->gather_skip_pinned[i] = false;
            gather(m, inst, n, rows);
        } else if (!inst->logged_pinned) {
            inst->logged_pinned = true;
            INFD_LOG_DEBUG("model '%s' instance %d: input '%s' of a batch of %d copied to the "
                           "device from %d pieces, in pinned request memory where it lay",
                           m->name, inst->index, m->in[i].name, n, np);
        }
    }
    /* Outputs: straight into a lone request's memory when it takes them
     * all and that memory is aligned. */
    bool direct_out = n == 1 && rows == p->batch && wants_all_outputs(inst->batch[0]);
    for (int k = 0; direct_out && k < inst->batch[0]->n_out; k++)
        direct_out = ((uintptr_t)inst->batch[0]->out[k].data % INFD_ALIGNMENT) == 0;
    const char *out_base[INFD_MAX_MODEL_IO]; /* where each output's rows are scattered from */
    for (int j = 0; j < m->n_out; j++) {
        infd_tensor *t = &outs[p->out_map[j]];
        memset(t, 0, sizeof(*t));
        t->nbytes = (size_t)p->batch * m->out[j].row_bytes;
        /* GPU plans: scatter straight from the staging the device-to-host
         * copy wrote (valid until this context's next run). */
        t->data = direct_out ? NULL : infd_context_output_buffer(inst->ctxs[pi], p->out_map[j]);
        if (!t->data)
            t->data = inst->out_buf[j];
        out_base[j] = t->data;
        if (direct_out)
            for (int k = 0; k < inst->batch[0]->n_out; k++)
                if (inst->batch[0]->out_index[k] == j)
                    t->data = inst->batch[0]->out[k].data;
    }
    uint64_t t1 = infd_clock_ns();
    infd_plan *plan = rt_instance_plan(inst, pi);
    infd_status st =
        infd_plan_run(plan, inst->ctxs[pi], ins, m->n_in, outs, infd_plan_n_outputs(plan), &err);
    uint64_t t2 = infd_clock_ns();
    if (st == INFD_STATUS_OK && !direct_out) {
        size_t off[INFD_MAX_MODEL_IO] = { 0 };
        for (int k = 0; k < n; k++) {
            infd_request *r = inst->batch[k];
            for (int o = 0; o < r->n_out; o++) {
                int j = r->out_index[o];
                size_t bytes = (size_t)r->rows * m->out[j].row_bytes;
                memcpy(r->out[o].data, out_base[j] + off[j], bytes);
            }
            for (int j = 0; j < m->n_out; j++)
                off[j] += (size_t)r->rows * m->out[j].row_bytes;
        }
    }
    uint64_t t3 = infd_clock_ns();
    ADD(m->st.execution_count, 1);
    ADD(m->st.inference_count, rows);
    ADD(m->st.compute_input_ns, (t1 - t0) * (uint64_t)n);
    ADD(m->st.compute_infer_ns, (t2 - t1) * (uint64_t)n);
    ADD(m->st.compute_output_ns, (t3 - t2) * (uint64_t)n);
    int bs = rows > INFD_STATS_MAX_BATCH ? INFD_STATS_MAX_BATCH : (int)rows;
    ADD(m->st.batch_exec_count[bs], 1);
    ADD(m->st.batch_compute_ns[bs], t3 - t0);
    if (st != INFD_STATUS_OK)
        infd_log(INFD_LOG_LEVEL_ERROR, "model '%s' version %lld: batch of %lld failed: %s", m->name,
                 (long long)m->version, (long long)rows, err.msg);
    for (int k = 0; k < n; k++) {
        infd_request *r = inst->batch[k];
        inst->batch[k] = NULL;
        r->compute_ns = t3 - t0;
        complete(m, r, st, err.msg);
    }
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

/* ------------------------------------------------------------------------- */
/* Warmup                                                                    */
/* ------------------------------------------------------------------------- */

static void fill_random(infd_dtype dtype, void *data, size_t nbytes, uint64_t *seed)
{
    size_t es = infd_dtype_size(dtype);
    size_t n = es ? nbytes / es : 0;
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = (float)(*seed >> 40) / (float)(1u << 24);
        char *p = (char *)data + i * es;
        switch (dtype) {
        case INFD_DTYPE_FP32:
            memcpy(p, &f, 4);
            break;
        case INFD_DTYPE_FP64: {
            double d = f;
            memcpy(p, &d, 8);
            break;
        }
        case INFD_DTYPE_FP16: {
            uint16_t h = infd_fp16_from_fp32(f);
            memcpy(p, &h, 2);
            break;
        }
        case INFD_DTYPE_BF16: {
            uint16_t h = infd_bf16_from_fp32(f);
            memcpy(p, &h, 2);
            break;
        }
        default:
            memset(p, 0, es);
            break; /* integers: zero keeps indices in range */
        }
    }
}

/* One warmup sample: `count` runs of plan `pi` on every instance, with
 * zeros, or random data for the inputs `w` asks it for. `own_out`: host
 * plans write to buffers of the sample's own rather than the instances'
 * (samples running in parallel, rt_model_warmup). */
static infd_status warm_sample(infd_model *m, const Inference__ModelWarmup *w, int pi, int count,
                               bool own_out, uint64_t *seed, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    void *in[INFD_MAX_MODEL_IO] = { 0 };
    void *out[INFD_MAX_MODEL_IO] = { 0 };
    int lead = m->max_batch > 0 ? 1 : 0;
    const rt_plan *p = &m->plans[pi];
    infd_tensor ins[INFD_MAX_MODEL_IO], outs[INFD_MAX_MODEL_IO];
    for (int i = 0; i < m->n_in; i++) {
        size_t bytes = (size_t)p->batch * m->in[i].row_bytes;
        in[i] = infd_aligned_alloc(INFD_ALIGNMENT, bytes ? bytes : 1);
        if (!in[i]) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for warmup");
            goto out;
        }
        memset(in[i], 0, bytes);
        bool random = false;
        for (size_t k = 0; w && k < w->n_inputs; k++)
            if (w->inputs[k]->key && strcmp(w->inputs[k]->key, m->in[i].name) == 0 &&
                w->inputs[k]->value &&
                w->inputs[k]->value->input_data_type_case ==
                    INFERENCE__MODEL_WARMUP__INPUT__INPUT_DATA_TYPE_RANDOM_DATA)
                random = true;
        if (random)
            fill_random(m->in[i].dtype, in[i], bytes, seed);
        infd_tensor *t = &ins[p->in_map[i]];
        memset(t, 0, sizeof(*t));
        t->dtype = m->in[i].dtype;
        t->shape.rank = m->in[i].rank + lead;
        if (lead)
            t->shape.dims[0] = p->batch;
        for (int d = 0; d < m->in[i].rank; d++)
            t->shape.dims[d + lead] = m->in[i].dims[d];
        t->data = in[i];
        t->nbytes = bytes;
    }
    for (int j = 0; own_out && j < m->n_out; j++) {
        size_t bytes = (size_t)p->batch * m->out[j].row_bytes;
        out[j] = infd_aligned_alloc(INFD_ALIGNMENT, bytes ? bytes : 1);
        if (!out[j]) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for warmup");
            goto out;
        }
    }
    for (int k = 0; k < m->n_inst && st == INFD_STATUS_OK; k++) {
        rt_instance *inst = &m->inst[k];
        for (int j = 0; j < m->n_out; j++) {
            infd_tensor *t = &outs[p->out_map[j]];
            memset(t, 0, sizeof(*t));
            t->data = infd_context_output_buffer(inst->ctxs[pi], p->out_map[j]);
            if (!t->data) /* host plans: the instance's batch buffer, or the sample's */
                t->data = own_out ? out[j] : inst->out_buf[j];
            t->nbytes = (size_t)p->batch * m->out[j].row_bytes;
        }
        infd_plan *plan = rt_instance_plan(inst, pi);
        for (int r = 0; r < count && st == INFD_STATUS_OK; r++)
            st = infd_plan_run(plan, inst->ctxs[pi], ins, m->n_in, outs, infd_plan_n_outputs(plan),
                               err);
    }
out:
    for (int i = 0; i < m->n_in; i++)
        infd_free(in[i]);
    for (int j = 0; j < m->n_out; j++)
        infd_free(out[j]);
    return st;
}

/* A thread of the default warmup: runs plans from a shared countdown,
 * the largest batch first, until none is left or one fails. */
typedef struct warm_worker {
    infd_model *m;
    atomic_int *next; /* the next plan to take; < 0: none left */
    infd_status st;
    infd_error err;
    pthread_t thread;
    bool threaded;
} warm_worker;

static void *warm_worker_main(void *arg)
{
    warm_worker *w = arg;
    uint64_t seed = 42;
    int pi;
    while (w->st == INFD_STATUS_OK && (pi = atomic_fetch_sub(w->next, 1)) >= 0)
        w->st = warm_sample(w->m, NULL, pi, 1, true, &seed, &w->err);
    return NULL;
}

/* Warmup: before the workers start, every instance runs every plan once
 * (with zeros), or the config's model_warmup samples (zero or random data,
 * `count` times, on the plan that a batch of batch_size rows would use), so
 * the first real request finds primitives created and memory touched on
 * whichever instance takes it. Runs straight on the contexts: the queue's
 * delay and timeouts do not apply. The default warmup of a model served
 * on the CPU alone runs its plans in parallel, largest batch first, as many
 * at once as the machine's cores hold at the instances' engine threads
 * each (each plan's contexts, and their threads, are their own): ResNet-50
 * served with 3 plans on the 2-core machine was ready in 0.73 s instead of
 * 0.89 s, PaddleOCR det at 640x640 in 0.54 s instead of 0.88 s. */
infd_status rt_model_warmup(infd_model *m, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    uint64_t seed = 42;
    const Inference__ModelConfig *c = m->config;
    int lead = m->max_batch > 0 ? 1 : 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int width = (int)(cores / (m->n_threads > 0 ? m->n_threads : 1)); /* plans at once */
    if (c->n_model_warmup == 0 && m->n_dev == 1 && m->dev[0].kind == INFD_DEVICE_CPU && width > 1 &&
        m->n_plans > 1) {
        warm_worker ws[RT_MAX_PLANS];
        atomic_int next = m->n_plans - 1;
        int n = INFD_MIN(width, m->n_plans);
        for (int k = 0; k < n; k++) {
            memset(&ws[k], 0, sizeof(ws[k]));
            ws[k].m = m;
            ws[k].next = &next;
            ws[k].threaded = pthread_create(&ws[k].thread, NULL, warm_worker_main, &ws[k]) == 0;
            if (!ws[k].threaded)
                warm_worker_main(&ws[k]);
        }
        for (int k = 0; k < n; k++) {
            if (ws[k].threaded)
                pthread_join(ws[k].thread, NULL);
            if (st == INFD_STATUS_OK && ws[k].st != INFD_STATUS_OK) {
                st = ws[k].st;
                if (err)
                    *err = ws[k].err;
            }
        }
    } else {
        int n_samples = c->n_model_warmup > 0 ? (int)c->n_model_warmup : m->n_plans;
        for (int s = 0; s < n_samples && st == INFD_STATUS_OK; s++) {
            const Inference__ModelWarmup *w = c->n_model_warmup > 0 ? c->model_warmup[s] : NULL;
            int pi = s % m->n_plans;
            int count = 1;
            if (w) {
                int64_t rows = lead ? (w->batch_size ? w->batch_size : 1) : 1;
                if (lead && rows > m->max_batch) {
                    st = infd_error_set(
                        err, INFD_STATUS_INVALID_ARGUMENT,
                        "model_warmup '%s': batch_size %lld exceeds max_batch_size %d", w->name,
                        (long long)rows, m->max_batch);
                    break;
                }
                plan_for(m, rows, &pi);
                count = w->count ? (int)w->count : 1;
            }
            st = warm_sample(m, w, pi, count, false, &seed, err);
        }
    }
    if (st != INFD_STATUS_OK)
        infd_error_prefix(err, "warmup");
    return st;
}
