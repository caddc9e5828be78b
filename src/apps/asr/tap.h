/*
 * tap.h - the speech app's instrumentation (docs/ASR.md, "Taps, guards and
 * replay"), after the seed's audio taps and replay harness.
 *
 * With INFD_ASR_TAP_DIR=DIR set, every stream records into its own folder,
 * DIR/stream-<pid>-<n>/:
 *   audio.f32       the samples exactly as they were accepted (little-endian
 *                   float32, at the rate each accept gave);
 *   features.f32    each decoded window's features, [n_mels, padded frames]
 *                   float32 as the encoder took them;
 *   events.jsonl    one JSON object a line: "start" (the model directory and
 *                   every setting that changes the result), "accept" (rate
 *                   and sample count), "finish", "decode" (the chunk, its
 *                   window in samples, its features' shape and the tokens it
 *                   gave as [id, frame, duration]) and "reset".
 * Recording costs a write per accept and decode; without the variable
 * nothing is done. A folder that cannot be made is reported once on stderr
 * and the stream runs untapped.
 *
 * asr_replay() plays a recording back through a new stream: the same
 * accepts, finishes and resets in the same order, checking that each chunk
 * decodes to the recorded tokens (`infd asr --replay TAPDIR`).
 */
#ifndef INFD_APPS_ASR_TAP_H
#define INFD_APPS_ASR_TAP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "apps/asr/recognizer.h"

typedef struct asr_tap asr_tap;

/* A recorder for a new stream, or NULL when INFD_ASR_TAP_DIR is not set
 * (or its folder cannot be made). `settings` is a JSON object's members
 * (no braces) recorded in the start event. */
asr_tap *asr_tap_open(const char *settings);
void asr_tap_close(asr_tap *t);

void asr_tap_accept(asr_tap *t, int rate, const float *x, int64_t n);
void asr_tap_finish(asr_tap *t);
void asr_tap_reset(asr_tap *t);
void asr_tap_decode(asr_tap *t, int64_t chunk, int64_t ws, int64_t we, int n_mels, int64_t frames,
                    const float *feats, const asr_tdt_token *tokens, int64_t n);

/* Replays the recording in `dir` with the model it names (or model_dir
 * when not NULL), printing the transcript to `out`. OK when every chunk
 * gave its recorded tokens; INVALID_ARGUMENT for a recording that cannot
 * be read (naming the file and line); INTERNAL naming the first chunk
 * that decoded differently. */
infd_status asr_replay(const char *dir, const char *model_dir, FILE *out, infd_error *err);

#endif /* INFD_APPS_ASR_TAP_H */
