/*
 * features.h - log-mel features as NeMo's AudioToMelSpectrogramPreprocessor
 * computes them for Parakeet (the recipe: ../shared/reference/streaming.md,
 * section 2, "Feature extractor"; NeMo's
 * nemo/collections/asr/parts/preprocessing/features.py, FilterbankFeatures).
 *
 * For n samples at the model's rate:
 *   1. pre-emphasis: y[0] = x[0], y[i] = x[i] - preemph * x[i - 1];
 *   2. a centred STFT: frame t covers y[t * hop - n_fft / 2, t * hop +
 *      n_fft / 2) with zeros outside [0, n), times a symmetric Hann window of
 *      win_length samples centred in the n_fft (torch.hann_window(win,
 *      periodic=False), zero-padded); n / hop + 1 frames;
 *   3. the power spectrum |X|^2 of the n_fft / 2 + 1 bins;
 *   4. a Slaney-scale, Slaney-normalised mel filterbank of n_mels filters
 *      over [f_min, f_max] (librosa.filters.mel(..., htk=False,
 *      norm="slaney"));
 *   5. log(x + log_guard), log_guard 2^-24;
 *   6. per-feature normalisation over the seq_len = n / hop valid frames:
 *      (x - mean) / (std + 1e-5), std with N - 1 (0 when N is 1).
 *      ASR_NORM_NONE skips it (cache-aware streaming models: "normalize:
 *      NA");
 *   7. the frame past the valid ones is set to 0 (NeMo's pad_value).
 * No dither (NeMo applies it in training only).
 *
 * The FFT is FFTW's (double precision, r2c), never our own; the features
 * come out in float. An extractor
 * holds its FFT plan and buffers: computing allocates nothing. One
 * extractor is used by one thread at a time; create several for parallel
 * work.
 */
#ifndef INFD_APPS_ASR_FEATURES_H
#define INFD_APPS_ASR_FEATURES_H

#include <stdint.h>

#include "infd/infd.h"

typedef enum asr_norm {
    ASR_NORM_PER_FEATURE = 0, /* NeMo's "per_feature" */
    ASR_NORM_NONE = 1,        /* NeMo's "NA" */
} asr_norm;

typedef struct asr_feature_params {
    int sample_rate;  /* 16000 */
    int n_fft;        /* 512 */
    int win_length;   /* 400 (0.025 s) */
    int hop_length;   /* 160 (0.01 s) */
    int n_mels;       /* 128 (80 for the older FastConformers) */
    float preemph;    /* 0.97; 0: none */
    float f_min;      /* 0 Hz */
    float f_max;      /* 0: sample_rate / 2 */
    double log_guard; /* 2^-24 */
    asr_norm normalize;
} asr_feature_params;

typedef struct asr_features asr_features;

/* Parakeet's parameters (above) with `n_mels` filters. */
asr_feature_params asr_feature_params_nemo(int n_mels);

/* An extractor for `p`. INVALID_ARGUMENT naming the parameter when one is
 * out of range (n_fft a power of two from 64 to 8192, win_length and
 * hop_length in (0, n_fft], n_mels in [1, 512], f_min < f_max <=
 * sample_rate / 2). */
infd_status asr_features_create(const asr_feature_params *p, asr_features **out, infd_error *err);
void asr_features_destroy(asr_features *f);

const asr_feature_params *asr_features_params(const asr_features *f);

/* Frames the STFT yields for n samples (n / hop + 1), and the valid ones
 * (n / hop, NeMo's seq_len). */
static inline int64_t asr_features_frames(const asr_features *f, int64_t n);
static inline int64_t asr_features_valid_frames(const asr_features *f, int64_t n);

/* Features of samples[0, n) into out, feature-major: out[m * stride + t]
 * for mel m and frame t < asr_features_frames(n), as NeMo's [n_mels, T]
 * (stride >= that count; the columns past it are left alone). Returns the
 * valid frames (seq_len). Allocates nothing. */
int64_t asr_features_compute(asr_features *f, const float *samples, int64_t n, float *out,
                             int64_t stride);

/* Steps 6 and 7 of asr_features_compute on `frames` columns of log-mel
 * values already in out (valid of them real): what compute does after it
 * has made them, so that columns made elsewhere (asr_features_compute_range,
 * a cache) and normalised here give compute's bits exactly. */
void asr_features_normalize(const asr_features *f, float *out, int64_t stride, int64_t frames,
                            int64_t valid);

/* Streaming: frames [t0, t0 + count) of a signal n samples long (n < 0:
 * its end is not known yet) of which buf holds samples [buf_start, ...),
 * at least [asr_features_first_sample(t0), asr_features_end_sample(t0 +
 * count - 1)) clipped to [0, n). The same values asr_features_compute gives
 * over the whole signal when its normalisation is ASR_NORM_NONE (the
 * caller's to check): frames from n / hop on are 0. Into out[m * stride +
 * (t - t0)]. Allocates nothing. */
void asr_features_compute_range(asr_features *f, const float *buf, int64_t buf_start, int64_t n,
                                int64_t t0, int64_t count, float *out, int64_t stride);

/* The first sample frame t reads (the one before its window, for the
 * pre-emphasis), and the sample after its last. */
int64_t asr_features_first_sample(const asr_features *f, int64_t t);
int64_t asr_features_end_sample(const asr_features *f, int64_t t);

/* ------------------------------------------------------------------------- */

struct asr_features_head {
    asr_feature_params p;
};

static inline int64_t asr_features_frames(const asr_features *f, int64_t n)
{
    return n / ((const struct asr_features_head *)f)->p.hop_length + 1;
}

static inline int64_t asr_features_valid_frames(const asr_features *f, int64_t n)
{
    return n / ((const struct asr_features_head *)f)->p.hop_length;
}

#endif /* INFD_APPS_ASR_FEATURES_H */
