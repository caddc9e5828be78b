/*
 * tdt.c - TDT greedy decoding with label-looping semantics (tdt.h).
 */
#include <string.h>

#include "apps/asr/tdt.h"

infd_status asr_tdt_config_check(const asr_tdt_config *c, infd_error *err)
{
    if (c->vocab < 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "TDT decoder: vocab is %d; it must be at least 1", c->vocab);
    if (c->n_durations < 1 || c->n_durations > ASR_TDT_MAX_DURATIONS)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "TDT decoder: %d durations; 1 to %d are supported", c->n_durations,
                              ASR_TDT_MAX_DURATIONS);
    for (int i = 0; i < c->n_durations; i++)
        if (c->durations[i] < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "TDT decoder: duration %d is %d; durations are >= 0", i,
                                  c->durations[i]);
    if (c->max_symbols < 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "TDT decoder: max_symbols is %d; it must be at least 1",
                              c->max_symbols);
    return INFD_STATUS_OK;
}

void asr_tdt_state_reset(asr_tdt_state *s)
{
    memset(s, 0, sizeof(*s));
    s->last_frame = -1;
}

void asr_tdt_primed(asr_tdt_state *s)
{
    s->primed = true;
    s->last_frame = -1;
}

void asr_tdt_begin(const asr_tdt_state *s, int64_t T, asr_tdt_token *out, int64_t cap,
                   asr_tdt_run *r)
{
    *r = (asr_tdt_run){ .T = T, .t = s->time_jump, .out = out, .cap = cap, .n = 0 };
}

infd_status asr_tdt_step(const asr_tdt_config *c, asr_tdt_state *s, asr_tdt_run *r, int k, int di,
                         bool *emitted, infd_error *err)
{
    *emitted = false;
    if (k < 0 || k > c->vocab || di < 0 || di >= c->n_durations)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "TDT decoder: the joint gave token %d (of 0..%d) and duration "
                              "index %d (of 0..%d) at frame %lld",
                              k, c->vocab, di, c->n_durations - 1, (long long)r->t);
    int d = c->durations[di];
    if (k == c->vocab) { /* blank: on to the next frame (never stalling) */
        r->t += d > 0 ? d : 1;
        return INFD_STATUS_OK;
    }
    if (r->n >= r->cap)
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "TDT decoder: more than %lld tokens in a chunk of %lld frames",
                              (long long)r->cap, (long long)r->T);
    int64_t frame = s->frames_done + r->t;
    r->out[r->n++] = (asr_tdt_token){ .id = k, .frame = frame, .duration = d };
    if (frame == s->last_frame) {
        s->on_last_frame++;
    } else {
        s->last_frame = frame;
        s->on_last_frame = 1;
    }
    *emitted = true;
    r->t += d;
    /* Still on the frame (d = 0) with max_symbols tokens from it: a blank. */
    if (d == 0 && s->on_last_frame >= c->max_symbols)
        r->t += 1;
    return INFD_STATUS_OK;
}

void asr_tdt_end(asr_tdt_state *s, const asr_tdt_run *r)
{
    s->time_jump = r->t - r->T > 0 ? r->t - r->T : 0;
    s->frames_done += r->T;
}

infd_status asr_tdt_decode(const asr_tdt_config *c, const asr_tdt_nets *nets, asr_tdt_state *s,
                           int64_t T, asr_tdt_token *out, int64_t cap, int64_t *n_out,
                           infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    *n_out = 0;
    if (!s->primed) {
        st = nets->predict(nets->user, c->vocab, err);
        if (st != INFD_STATUS_OK)
            return st;
        asr_tdt_primed(s);
    }
    asr_tdt_run r;
    asr_tdt_begin(s, T, out, cap, &r);
    for (int64_t t = asr_tdt_next(&r); t >= 0; t = asr_tdt_next(&r)) {
        int k = -1, di = -1;
        bool emitted = false;
        st = nets->joint(nets->user, t, &k, &di, err);
        if (st == INFD_STATUS_OK)
            st = asr_tdt_step(c, s, &r, k, di, &emitted, err);
        if (st == INFD_STATUS_OK && emitted)
            st = nets->predict(nets->user, k, err);
        if (st != INFD_STATUS_OK) {
            *n_out = r.n; /* the tokens emitted before the error */
            return st;
        }
    }
    asr_tdt_end(s, &r);
    *n_out = r.n;
    return INFD_STATUS_OK;
}
