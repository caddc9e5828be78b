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

/* One joint step at frame t: the token and its duration in frames, a
 * blank's 0 made 1. */
static infd_status step(const asr_tdt_config *c, const asr_tdt_nets *nets, int64_t t, int *k,
                        int *d, infd_error *err)
{
    int di = -1;
    *k = -1;
    *d = 0;
    infd_status st = nets->joint(nets->user, t, k, &di, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (*k < 0 || *k > c->vocab || di < 0 || di >= c->n_durations)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "TDT decoder: the joint gave token %d (of 0..%d) and duration "
                              "index %d (of 0..%d) at frame %lld",
                              *k, c->vocab, di, c->n_durations - 1, (long long)t);
    *d = c->durations[di];
    if (*k == c->vocab && *d == 0)
        *d = 1;
    return INFD_STATUS_OK;
}

infd_status asr_tdt_decode(const asr_tdt_config *c, const asr_tdt_nets *nets, asr_tdt_state *s,
                           int64_t T, asr_tdt_token *out, int64_t cap, int64_t *n_out,
                           infd_error *err)
{
    const int blank = c->vocab;
    infd_status st = INFD_STATUS_OK;
    *n_out = 0;
    if (!s->primed) {
        st = nets->predict(nets->user, blank, err);
        if (st != INFD_STATUS_OK)
            return st;
        s->primed = true;
        s->last_frame = -1;
    }
    int64_t t = s->time_jump;
    while (t < T) {
        int64_t t_lab = t;
        int k = 0, d = 0;
        st = step(c, nets, t, &k, &d, err);
        if (st != INFD_STATUS_OK)
            return st;
        t += d;
        while (k == blank && t < T) { /* look for the next non-blank */
            t_lab = t;
            st = step(c, nets, t, &k, &d, err);
            if (st != INFD_STATUS_OK)
                return st;
            t += d;
        }
        if (k == blank)
            break; /* t >= T: the chunk is done */
        if (*n_out >= cap)
            return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                                  "TDT decoder: more than %lld tokens in a chunk of %lld frames",
                                  (long long)cap, (long long)T);
        int64_t frame = s->frames_done + t_lab;
        out[*n_out] = (asr_tdt_token){ .id = k, .frame = frame, .duration = d };
        (*n_out)++;
        if (frame == s->last_frame) {
            s->on_last_frame++;
        } else {
            s->last_frame = frame;
            s->on_last_frame = 1;
        }
        st = nets->predict(nets->user, k, err);
        if (st != INFD_STATUS_OK)
            return st;
        /* Still on the frame (d = 0) with max_symbols tokens from it: a blank. */
        if (t == t_lab && s->on_last_frame >= c->max_symbols)
            t += 1;
    }
    s->time_jump = t - T > 0 ? t - T : 0;
    s->frames_done += T;
    return INFD_STATUS_OK;
}
