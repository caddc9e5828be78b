/*
 * audio.h - audio in for speech recognition: a sound file (WAV and the
 * other formats libsndfile reads) decoded to mono float samples and
 * resampled to the model's rate with libsoxr. Both libraries do the work;
 * this module checks what comes in and says what is wrong with it.
 */
#ifndef INFD_APPS_ASR_AUDIO_H
#define INFD_APPS_ASR_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "infd/infd.h"

/* Mono samples in [-1, 1] (as libsndfile scales integer PCM). */
typedef struct asr_audio {
    float *samples; /* owned (malloc; asr_audio_fini frees it) */
    int64_t n;
    int rate;        /* samples per second of `samples` */
    int rate_in;     /* the file's */
    int channels_in; /* the file's; averaged into one */
} asr_audio;

/* The longest input accepted: 4 hours, and at most as many frames as 4
 * hours at 48 kHz. */
#define ASR_AUDIO_MAX_SECONDS (4LL * 3600)
#define ASR_AUDIO_MAX_FRAMES  (ASR_AUDIO_MAX_SECONDS * 48000)
/* Sample rates accepted, in Hz. Below 4 kHz no speech is left, and a tiny
 * file at a rate of a few Hz resamples to hours of audio: fuzz_wav found a
 * 2.4 KB file at 1 Hz that became 19 minutes at 16 kHz. */
#define ASR_AUDIO_MIN_RATE 4000
#define ASR_AUDIO_MAX_RATE 1000000
/* The largest sample magnitude accepted (float files may hold anything;
 * audio is in [-1, 1], and far larger values overflow the features). */
#define ASR_AUDIO_MAX_ABS 1000.0f

/* Decodes the sound file at `path` (or, with asr_audio_read_memory, the
 * `n` bytes at `data`, named `name` in messages) to mono and resamples it to
 * `rate` (0: keep the file's). INVALID_ARGUMENT, naming the file, when it
 * is not a sound file libsndfile reads, is truncated (fewer samples than
 * its header announces), has no samples, a channel count of 0, a sample
 * rate outside [ASR_AUDIO_MIN_RATE, ASR_AUDIO_MAX_RATE], more than
 * ASR_AUDIO_MAX_SECONDS or ASR_AUDIO_MAX_FRAMES, or a sample that is not
 * finite or beyond ASR_AUDIO_MAX_ABS; IO when it cannot be opened. */
infd_status asr_audio_read_file(const char *path, int rate, asr_audio *out, infd_error *err);
infd_status asr_audio_read_memory(const void *data, size_t n, const char *name, int rate,
                                  asr_audio *out, infd_error *err);

/* Frees the samples; a zeroed struct is a no-op. */
void asr_audio_fini(asr_audio *a);

/* Resamples n samples from rate_in to rate_out (libsoxr, high quality) into
 * a new buffer (*out, *n_out; free it). */
infd_status asr_resample(const float *in, int64_t n, int rate_in, int rate_out, float **out,
                         int64_t *n_out, infd_error *err);

/* A resampler for audio that comes in pieces (a stream): libsoxr's
 * streaming interface, high quality, one channel. */
typedef struct asr_resampler asr_resampler;

infd_status asr_resampler_create(int rate_in, int rate_out, asr_resampler **out, infd_error *err);
void asr_resampler_destroy(asr_resampler *r);

/* Resamples in[0, n) (n = 0 and in = NULL: flushes what libsoxr holds back
 * at the end of the input) into out[0, cap): *n_out samples written, *n_in
 * of the input consumed (less than n when out is full; call again with the
 * rest). Allocates nothing. */
infd_status asr_resampler_process(asr_resampler *r, const float *in, int64_t n, int64_t *n_in,
                                  float *out, int64_t cap, int64_t *n_out, infd_error *err);

#endif /* INFD_APPS_ASR_AUDIO_H */
