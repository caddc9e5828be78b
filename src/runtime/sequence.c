/*
 * sequence.c - the sequence batcher (config.pbtxt's sequence_batching), as
 * Triton's: stateful streams such as speech sessions.
 *
 * Every request names its sequence by a correlation id (uint64 or string)
 * and flags its first request START and its last END. A START takes a free
 * slot; the sequence keeps that slot, and whatever state the model holds
 * for it, until its END request has run or it has had no request for
 * max_sequence_idle_microseconds (default 1 s). With every slot taken, new
 * sequences wait in a backlog, in arrival order, with their requests.
 *
 * Strategies:
 *  - direct (the default): slot s belongs to instance s / per_inst, where
 *    per_inst is max(1, max_batch_size). An instance's batch takes the next
 *    request of each of its slots that has one, waiting up to the direct
 *    max_queue_delay_microseconds for more of its active slots to have one.
 *  - oldest: any instance takes the next requests of the sequences whose
 *    next request is oldest, up to max_batch_size rows, waiting up to the
 *    oldest max_queue_delay_microseconds for more; max_candidate_sequences
 *    slots (default max(1, max_batch_size) x instances).
 * A sequence's requests run one at a time, in order, in either strategy.
 *
 * Everything here runs with model->mu held; nothing allocates once the
 * backlog has reached its largest size.
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "runtime/runtime.h"

#define DEFAULT_IDLE_US 1000000u

static bool same_id(const rt_seq *e, const infd_request *r)
{
    if (e->is_string != r->seq_is_string)
        return false;
    return e->is_string ? strcmp(e->sid, r->seq_sid) == 0 : e->id == r->seq_id;
}

/* A correlation id for messages: 42, or 'session-7' for a string. */
static void format_id(bool is_string, uint64_t id, const char *sid, char *buf, size_t n)
{
    if (is_string)
        snprintf(buf, n, "'%s'", sid);
    else
        snprintf(buf, n, "%llu", (unsigned long long)id);
}

infd_status rt_seq_create(infd_model *m, const char *cfile, infd_error *err)
{
    const Inference__ModelSequenceBatching *sb = m->config->sequence_batching;
    if (m->kind && (sb->n_control_input > 0 || sb->n_state > 0))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: sequence_batching control_input and state are for ONNX "
                              "models; backend '%s' keeps its own per-sequence state and sees "
                              "the controls as request flags",
                              cfile, m->kind->name);
    rt_sequencer *q = infd_calloc(1, sizeof(*q));
    if (!q)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    int rows = m->max_batch > 0 ? m->max_batch : 1;
    uint64_t idle_us =
        sb->max_sequence_idle_microseconds ? sb->max_sequence_idle_microseconds : DEFAULT_IDLE_US;
    q->idle_ns = idle_us * 1000u;
    q->per_inst = rows;
    if (sb->strategy_choice_case == INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_OLDEST) {
        const Inference__ModelSequenceBatching__StrategyOldest *o = sb->oldest;
        q->oldest = true;
        q->delay_ns = o->max_queue_delay_microseconds * 1000u;
        q->n_slots = o->max_candidate_sequences > 0 ? o->max_candidate_sequences : rows * m->n_inst;
        if (o->max_candidate_sequences < 0) {
            infd_free(q);
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: sequence_batching.oldest.max_candidate_sequences is %d",
                                  cfile, o->max_candidate_sequences);
        }
    } else {
        if (sb->strategy_choice_case == INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_DIRECT)
            q->delay_ns = sb->direct->max_queue_delay_microseconds * 1000u;
        q->n_slots = rows * m->n_inst;
    }
    if (q->n_slots > 65536) {
        infd_free(q);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %d sequence slots; at most 65536", cfile, q->n_slots);
    }
    q->slots = infd_calloc((size_t)q->n_slots, sizeof(*q->slots));
    q->free_pending = infd_calloc((size_t)q->n_slots, sizeof(*q->free_pending));
    if (m->state_bytes)
        q->state = infd_calloc((size_t)q->n_slots, m->state_bytes);
    if (!q->slots || !q->free_pending || (m->state_bytes && !q->state)) {
        infd_free(q->slots);
        infd_free(q->free_pending);
        infd_free(q->state);
        infd_free(q);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    m->seq = q;
    return INFD_STATUS_OK;
}

void rt_seq_free(infd_model *m)
{
    rt_sequencer *q = m->seq;
    if (!q)
        return;
    for (rt_seq *e = q->backlog_head; e;) {
        rt_seq *next = e->next;
        infd_free(e);
        e = next;
    }
    for (rt_seq *e = q->spare; e;) {
        rt_seq *next = e->next;
        infd_free(e);
        e = next;
    }
    infd_free(q->slots);
    infd_free(q->free_pending);
    infd_free(q->state);
    infd_free(q);
    m->seq = NULL;
}

/* The sequence of `r`'s id: in a slot, or (*in_backlog) waiting. */
static rt_seq *find(rt_sequencer *q, const infd_request *r, bool *in_backlog)
{
    *in_backlog = false;
    for (int s = 0; s < q->n_slots; s++)
        if (q->slots[s].active && same_id(&q->slots[s], r))
            return &q->slots[s];
    for (rt_seq *e = q->backlog_head; e; e = e->next)
        if (same_id(e, r)) {
            *in_backlog = true;
            return e;
        }
    return NULL;
}

/* A free slot: direct, on the instance with the most free slots. */
static int free_slot(const rt_sequencer *q)
{
    if (q->oldest) {
        for (int s = 0; s < q->n_slots; s++)
            if (!q->slots[s].active && !q->slots[s].freeing)
                return s;
        return -1;
    }
    int best = -1, best_free = 0;
    for (int base = 0; base < q->n_slots; base += q->per_inst) {
        int nfree = 0, first = -1;
        for (int s = base; s < base + q->per_inst; s++)
            if (!q->slots[s].active && !q->slots[s].freeing) {
                nfree++;
                if (first < 0)
                    first = s;
            }
        if (nfree > best_free) {
            best_free = nfree;
            best = first;
        }
    }
    return best;
}

static void set_id(rt_seq *e, const infd_request *r)
{
    e->is_string = r->seq_is_string;
    e->id = r->seq_id;
    memcpy(e->sid, r->seq_sid, sizeof(e->sid));
}

infd_status rt_seq_submit(infd_model *m, infd_request *r, infd_error *err)
{
    rt_sequencer *q = m->seq;
    char id[160];
    format_id(r->seq_is_string, r->seq_id, r->seq_sid, id, sizeof(id));
    if (r->rows != 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': a request of a sequence (correlation id %s) has one "
                              "row (batch dim 1), not %lld",
                              m->name, id, (long long)r->rows);
    bool waiting;
    rt_seq *e = find(q, r, &waiting);
    bool start = (r->seq_flags & INFD_SEQUENCE_START) != 0;
    if (start && e)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': sequence %s is already active; a START for it is "
                              "refused until its END (or use another correlation id)",
                              m->name, id);
    if (!start && !e)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': sequence %s is not active: its first request must "
                              "have sequence_start, and a sequence ends with its END request "
                              "or after %llu us without one",
                              m->name, id, (unsigned long long)(q->idle_ns / 1000u));
    if (e && e->end_queued)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': sequence %s has ended (its END request is queued)",
                              m->name, id);
    uint64_t now = infd_clock_ns();
    if (start) {
        int s = free_slot(q);
        if (s >= 0) {
            e = &q->slots[s];
            memset(e, 0, sizeof(*e));
            e->active = true;
        } else {
            e = q->spare;
            if (e)
                q->spare = e->next;
            else
                e = infd_malloc(sizeof(*e));
            if (!e)
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                                      "out of memory for a waiting sequence");
            memset(e, 0, sizeof(*e));
            if (q->backlog_tail)
                q->backlog_tail->next = e;
            else
                q->backlog_head = e;
            q->backlog_tail = e;
            INFD_LOG_DEBUG("model '%s': all %d sequence slots are taken; sequence %s waits",
                           m->name, q->n_slots, id);
        }
        set_id(e, r);
    }
    r->next = NULL;
    if (e->tail)
        e->tail->next = r;
    else
        e->head = r;
    e->tail = r;
    if (r->seq_flags & INFD_SEQUENCE_END)
        e->end_queued = true;
    e->last_ns = now;
    return INFD_STATUS_OK;
}

/* Gives free slot s to the oldest waiting sequence, if any. */
static void reuse_slot(rt_sequencer *q, int s)
{
    rt_seq *e = &q->slots[s];
    e->freeing = false;
    rt_seq *w = q->backlog_head;
    if (!w)
        return;
    q->backlog_head = w->next;
    if (!q->backlog_head)
        q->backlog_tail = NULL;
    *e = *w;
    e->next = NULL;
    e->active = true;
    e->running = false;
    e->freeing = false;
    w->next = q->spare;
    q->spare = w;
}

/* Frees slot s. A kind with sequence_free is told first (outside the lock,
 * rt_seq_take_freed), and the slot is reused only after that, so the kind
 * never frees a slot that a new sequence already runs on. */
static void release_slot(infd_model *m, int s)
{
    rt_sequencer *q = m->seq;
    rt_seq *e = &q->slots[s];
    INFD_ASSERT(!e->head);
    e->active = false;
    if (m->kind && m->kind->sequence_free) {
        e->freeing = true;
        q->free_pending[q->n_free_pending++] = s;
    } else {
        reuse_slot(q, s);
    }
}

/* Releases the slots idle past the limit; returns the time until the next
 * one would be (UINT64_MAX: none). */
static uint64_t reap_idle(infd_model *m, uint64_t now)
{
    rt_sequencer *q = m->seq;
    uint64_t next = UINT64_MAX;
    /* Unloading or draining: sequences that wait for nothing are released
     * now, so that those in the backlog get slots and finish. */
    bool closing = !m->accepting || rt_server_is_draining(m->server);
    for (int s = 0; s < q->n_slots; s++) {
        rt_seq *e = &q->slots[s];
        if (!e->active || e->head || e->running)
            continue;
        uint64_t idle = now - e->last_ns;
        if (closing && q->backlog_head) {
            release_slot(m, s);
            s--;
            continue;
        }
        if (idle >= q->idle_ns) {
            char id[160];
            format_id(e->is_string, e->id, e->sid, id, sizeof(id));
            infd_log(INFD_LOG_LEVEL_WARN,
                     "model '%s': sequence %s released after %.0f ms without a request "
                     "(max_sequence_idle_microseconds %llu) and before its END",
                     m->name, id, (double)idle / 1e6, (unsigned long long)(q->idle_ns / 1000u));
            release_slot(m, s);
            /* The slot may now hold a waiting sequence with requests. */
            s--;
            continue;
        }
        if (q->idle_ns - idle < next)
            next = q->idle_ns - idle;
    }
    return next;
}

int rt_seq_pop(infd_model *m, rt_instance *inst, uint64_t now, uint64_t *wait_ns)
{
    rt_sequencer *q = m->seq;
    *wait_ns = reap_idle(m, now);
    int lo = 0, hi = q->n_slots;
    if (!q->oldest) {
        lo = inst->index * q->per_inst;
        hi = lo + q->per_inst;
    }
    int64_t max_rows = m->max_batch > 0 ? m->max_batch : 1;
    int ready = 0, active = 0;
    uint64_t oldest = UINT64_MAX;
    for (int s = lo; s < hi; s++) {
        const rt_seq *e = &q->slots[s];
        if (!e->active)
            continue;
        active++;
        if (e->head && !e->running) {
            ready++;
            if (e->head->t_submit_ns < oldest)
                oldest = e->head->t_submit_ns;
        }
    }
    if (ready == 0)
        return 0;
    /* Wait for more of the active sequences to have a request, up to the
     * strategy's delay from the oldest waiting one. */
    int want = active < max_rows ? active : (int)max_rows;
    if (ready < want && q->delay_ns > 0 && !m->stop_workers) {
        uint64_t age = now - oldest;
        if (age < q->delay_ns) {
            uint64_t w = q->delay_ns - age;
            if (w < *wait_ns)
                *wait_ns = w;
            return 0;
        }
    }
    int n = 0;
    int64_t rows = 0;
    while (rows < max_rows && n < INFD_STATS_MAX_BATCH) {
        /* The ready sequence with the oldest next request (direct: all of
         * the instance's, in slot order, which is the same set). */
        int pick = -1;
        for (int s = lo; s < hi; s++) {
            const rt_seq *e = &q->slots[s];
            if (e->active && e->head && !e->running &&
                (pick < 0 || e->head->t_submit_ns < q->slots[pick].head->t_submit_ns))
                pick = s;
        }
        if (pick < 0)
            break;
        rt_seq *e = &q->slots[pick];
        infd_request *r = e->head;
        e->head = r->next;
        if (!e->head)
            e->tail = NULL;
        r->next = NULL;
        r->seq_slot = pick;
        e->running = true;
        m->depth--;
        rows += r->rows;
        inst->batch[n++] = r;
    }
    return n;
}

void rt_seq_done(infd_model *m, rt_instance *inst, int n)
{
    rt_sequencer *q = m->seq;
    uint64_t now = infd_clock_ns();
    bool freed = false;
    for (int k = 0; k < n; k++) {
        const infd_request *r = inst->batch[k];
        rt_seq *e = &q->slots[r->seq_slot];
        e->running = false;
        e->last_ns = now;
        if (r->seq_flags & INFD_SEQUENCE_END) {
            release_slot(m, r->seq_slot);
            freed = true;
        }
    }
    /* Other instances may now have work: the next request of a sequence
     * (oldest), or a waiting sequence in a freed slot. */
    if (freed || q->oldest)
        pthread_cond_broadcast(&m->work_cv);
}

int rt_seq_take_freed(infd_model *m, int *out, int cap)
{
    rt_sequencer *q = m->seq;
    int n = q->n_free_pending < cap ? q->n_free_pending : cap;
    memcpy(out, q->free_pending, (size_t)n * sizeof(*out));
    memmove(q->free_pending, q->free_pending + n, (size_t)(q->n_free_pending - n) * sizeof(*out));
    q->n_free_pending -= n;
    return n;
}

void rt_seq_reuse(infd_model *m, const int *slots, int n)
{
    for (int k = 0; k < n; k++)
        reuse_slot(m->seq, slots[k]);
    if (n > 0)
        pthread_cond_broadcast(&m->work_cv);
}
