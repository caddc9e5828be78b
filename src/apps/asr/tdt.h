/*
 * tdt.h - greedy decoding of a Token-and-Duration Transducer (Parakeet-TDT)
 * with NeMo's label-looping semantics (../shared/reference/streaming.md,
 * section 1; NeMo's tdt_label_looping.py), for one stream, chunk by chunk.
 *
 * The joint network's output per (encoder frame, predictor state) is
 * [V token logits][blank, index V][one logit per duration]. The decoder
 * never sees those logits: the caller's `joint` runs the network (on the
 * engine, with the argmaxes appended to its graph) and hands back the two
 * argmax indices, the token k over [0, V] and the duration index over the
 * durations. Per chunk of T encoder frames, from t = the carried time jump:
 *   - d = durations[duration index]; a blank with d = 0 is taken as d = 1
 *     (blank never stalls); t += d;
 *   - while k is blank and t < T: the joint again at t (the predictor does
 *     not move on blank);
 *   - a non-blank k is emitted with the frame it was found on and its d,
 *     even when t + d goes past T, and the predictor advances with it; a
 *     non-blank with d = 0 stays on its frame, so the joint runs again
 *     there with the new predictor output (several tokens on one frame);
 *   - when a frame has had max_symbols tokens and the last one had d = 0,
 *     a blank is forced: t += 1;
 *   - at the chunk's end, t - T (>= 0) is carried: the next chunk starts
 *     that many frames in (the overshoot of the last duration).
 * Timestamps are absolute encoder frames (the frames of earlier chunks
 * added). Decoding allocates nothing.
 */
#ifndef INFD_APPS_ASR_TDT_H
#define INFD_APPS_ASR_TDT_H

#include <stdbool.h>
#include <stdint.h>

#include "infd/infd.h"

#define ASR_TDT_MAX_DURATIONS 16

typedef struct asr_tdt_config {
    int vocab;                            /* V: tokens 0..V-1; the blank is V */
    int durations[ASR_TDT_MAX_DURATIONS]; /* Parakeet: 0, 1, 2, 3, 4 */
    int n_durations;
    int max_symbols; /* tokens one frame may emit (NeMo: 10) */
} asr_tdt_config;

/* The networks, run by the caller. */
typedef struct asr_tdt_nets {
    void *user;
    /* The joint on encoder frame t (of the current chunk, 0 <= t < T) with
     * the predictor's current output: the token argmax (0..V) in *token and
     * the duration argmax (0..n_durations-1) in *duration. */
    infd_status (*joint)(void *user, int64_t t, int *token, int *duration, infd_error *err);
    /* Advances the predictor with `token` (the blank V primes it at the
     * start of a stream, as NeMo's start-of-sequence). */
    infd_status (*predict)(void *user, int token, infd_error *err);
} asr_tdt_nets;

/* A stream's decoding state, carried from chunk to chunk. Zero it (or
 * asr_tdt_state_reset) for a new stream. */
typedef struct asr_tdt_state {
    bool primed;         /* the predictor has seen the start-of-sequence blank */
    int64_t time_jump;   /* frames of the next chunk already covered by the last duration */
    int64_t frames_done; /* encoder frames of the earlier chunks */
    int64_t last_frame;  /* absolute frame of the last token emitted (-1: none) */
    int on_last_frame;   /* tokens emitted on that frame */
} asr_tdt_state;

typedef struct asr_tdt_token {
    int id;        /* 0..V-1 */
    int64_t frame; /* absolute encoder frame it was emitted on */
    int duration;  /* its duration, in frames */
} asr_tdt_token;

/* INVALID_ARGUMENT naming the field when the config is not usable (vocab
 * >= 1, 1 to ASR_TDT_MAX_DURATIONS durations each >= 0, max_symbols >= 1). */
infd_status asr_tdt_config_check(const asr_tdt_config *c, infd_error *err);

void asr_tdt_state_reset(asr_tdt_state *s);

/* The most tokens one chunk of T frames can emit: the buffer size for
 * asr_tdt_decode. */
static inline int64_t asr_tdt_max_tokens(const asr_tdt_config *c, int64_t T)
{
    return (T + 1) * c->max_symbols;
}

/* Decodes a chunk of T >= 0 encoder frames, appending its tokens to
 * out[0, cap) (*n_out of them), and carries the state on. A joint argmax
 * out of range is INTERNAL (the network does not match the config); a
 * full `out` is RESOURCE_EXHAUSTED. */
infd_status asr_tdt_decode(const asr_tdt_config *c, const asr_tdt_nets *nets, asr_tdt_state *s,
                           int64_t T, asr_tdt_token *out, int64_t cap, int64_t *n_out,
                           infd_error *err);

/*
 * The same decoding a joint step at a time, for decoding many streams in
 * lockstep with one batched joint run per step (NeMo's batched label
 * looping): asr_tdt_decode is
 *
 *     if (!s->primed) { predict(blank); asr_tdt_primed(s); }
 *     asr_tdt_begin(s, T, out, cap, &r);
 *     while ((t = asr_tdt_next(&r)) >= 0) {
 *         joint(t, &token, &duration);
 *         asr_tdt_step(c, s, &r, token, duration, &emitted, err);
 *         if (emitted) predict(token);
 *     }
 *     asr_tdt_end(s, &r);   // r.n tokens in out
 */
typedef struct asr_tdt_run {
    int64_t T, t; /* the chunk's frames; the frame the joint runs on next */
    asr_tdt_token *out;
    int64_t cap, n;
} asr_tdt_run;

/* The predictor has been primed with the start-of-sequence blank. */
void asr_tdt_primed(asr_tdt_state *s);

void asr_tdt_begin(const asr_tdt_state *s, int64_t T, asr_tdt_token *out, int64_t cap,
                   asr_tdt_run *r);

/* The frame of the chunk the joint runs on next, or -1 when it is done. */
static inline int64_t asr_tdt_next(const asr_tdt_run *r)
{
    return r->t < r->T ? r->t : -1;
}

/* Takes the joint's argmaxes at asr_tdt_next(r). *emitted: a token was
 * appended to r->out, and the predictor must advance with it before the
 * next joint run. Errors as asr_tdt_decode's; s and r are then unusable
 * for this chunk. */
infd_status asr_tdt_step(const asr_tdt_config *c, asr_tdt_state *s, asr_tdt_run *r, int token,
                         int duration, bool *emitted, infd_error *err);

/* Ends the chunk: the overshoot of its last duration is carried. */
void asr_tdt_end(asr_tdt_state *s, const asr_tdt_run *r);

#endif /* INFD_APPS_ASR_TDT_H */
