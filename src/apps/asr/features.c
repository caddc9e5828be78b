/*
 * features.c - NeMo's log-mel features (features.h).
 *
 * Each frame is pre-emphasised and windowed straight from the caller's
 * samples into FFTW's input buffer (pre-emphasis needs only the sample
 * before), so no copy of the audio is made. The arithmetic is double up to
 * the log (a 512-point FFT per 10 ms of audio costs little): in single
 * precision the FFT's rounding, relative to a frame's energy, moved the
 * log of the quietest filters (the lowest, near DC, about e^-14 of it) by
 * 1-2e-4. The mel filterbank is kept
 * sparse: each filter's first bin and its weights up to its last nonzero
 * one. The log-mel values go into the caller's output, and normalisation
 * then runs over them in place, in double precision.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>

#include "apps/asr/features.h"

struct asr_features {
    struct asr_features_head head; /* first: features.h reads the parameters */
    int n_bins;                    /* n_fft / 2 + 1 */
    int win_off;                   /* where the window starts in the n_fft frame */
    double *window;                /* win_length Hann weights */
    double *frame;                 /* n_fft inputs (fftw_malloc) */
    fftw_complex *spec;            /* n_bins outputs (fftw_malloc) */
    double *power;                 /* n_bins */
    fftw_plan plan;
    int *mel_first; /* per filter: first nonzero bin */
    int *mel_count; /* per filter: bins from the first to the last nonzero one */
    float *mel_w;   /* per filter, mel_count weights, filter after filter */
    int *mel_start; /* per filter: its weights' offset in mel_w */
};

/* FFTW's planner is not thread-safe (only fftw_execute* are). */
static pthread_mutex_t plan_mu = PTHREAD_MUTEX_INITIALIZER;

asr_feature_params asr_feature_params_nemo(int n_mels)
{
    asr_feature_params p = {
        .sample_rate = 16000,
        .n_fft = 512,
        .win_length = 400,
        .hop_length = 160,
        .n_mels = n_mels,
        .preemph = 0.97f,
        .f_min = 0.0f,
        .f_max = 0.0f,
        .log_guard = 5.9604644775390625e-08, /* 2^-24 */
        .normalize = ASR_NORM_PER_FEATURE,
    };
    return p;
}

const asr_feature_params *asr_features_params(const asr_features *f)
{
    return &f->head.p;
}

/* The Slaney mel scale (librosa's hz_to_mel / mel_to_hz with htk=False):
 * linear below 1 kHz (200/3 Hz a mel), logarithmic above (6.4x per 27
 * mels). */
#define SLANEY_F_SP     (200.0 / 3.0)
#define SLANEY_MIN_HZ   1000.0
#define SLANEY_MIN_MEL  (SLANEY_MIN_HZ / SLANEY_F_SP)
#define SLANEY_LOG_STEP (1.8562979903656263 / 27.0) /* log(6.4) / 27 */

static double hz_to_mel(double hz)
{
    if (hz >= SLANEY_MIN_HZ)
        return SLANEY_MIN_MEL + log(hz / SLANEY_MIN_HZ) / SLANEY_LOG_STEP;
    return hz / SLANEY_F_SP;
}

static double mel_to_hz(double mel)
{
    if (mel >= SLANEY_MIN_MEL)
        return SLANEY_MIN_HZ * exp(SLANEY_LOG_STEP * (mel - SLANEY_MIN_MEL));
    return SLANEY_F_SP * mel;
}

/* Triangular filters between n_mels + 2 points evenly spaced in mels over
 * [f_min, f_max], each scaled by 2 / (its upper edge - its lower edge) in
 * Hz (Slaney's area normalisation), over the FFT bins' centre frequencies;
 * computed in double, kept in float (as librosa returns them). */
static infd_status build_mel(asr_features *f, infd_error *err)
{
    const asr_feature_params *p = &f->head.p;
    int nm = p->n_mels, nb = f->n_bins;
    double f_max = p->f_max > 0 ? p->f_max : p->sample_rate / 2.0;
    double *pts = calloc((size_t)nm + 2, sizeof(*pts));
    double *full = calloc((size_t)nm * (size_t)nb, sizeof(*full));
    infd_status st = INFD_STATUS_OK;
    f->mel_first = calloc((size_t)nm, sizeof(int));
    f->mel_count = calloc((size_t)nm, sizeof(int));
    f->mel_start = calloc((size_t)nm, sizeof(int));
    if (!pts || !full || !f->mel_first || !f->mel_count || !f->mel_start) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "asr features: out of memory");
        goto out;
    }
    double lo = hz_to_mel(p->f_min), hi = hz_to_mel(f_max);
    for (int i = 0; i < nm + 2; i++)
        pts[i] = mel_to_hz(lo + (hi - lo) * i / (nm + 1));
    int total = 0;
    for (int m = 0; m < nm; m++) {
        double enorm = 2.0 / (pts[m + 2] - pts[m]);
        int first = -1, last = -1;
        for (int k = 0; k < nb; k++) {
            double hz = (double)p->sample_rate / 2.0 * k / (nb - 1);
            double lower = (hz - pts[m]) / (pts[m + 1] - pts[m]);
            double upper = (pts[m + 2] - hz) / (pts[m + 2] - pts[m + 1]);
            double w = fmax(0.0, fmin(lower, upper)) * enorm;
            full[(size_t)m * nb + k] = w;
            if ((float)w != 0.0f) {
                if (first < 0)
                    first = k;
                last = k;
            }
        }
        f->mel_first[m] = first < 0 ? 0 : first;
        f->mel_count[m] = first < 0 ? 0 : last - first + 1;
        f->mel_start[m] = total;
        total += f->mel_count[m];
    }
    f->mel_w = calloc((size_t)total + 1, sizeof(float));
    if (!f->mel_w) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "asr features: out of memory");
        goto out;
    }
    for (int m = 0; m < nm; m++)
        for (int k = 0; k < f->mel_count[m]; k++)
            f->mel_w[f->mel_start[m] + k] = (float)full[(size_t)m * nb + f->mel_first[m] + k];
out:
    free(pts);
    free(full);
    return st;
}

infd_status asr_features_create(const asr_feature_params *p, asr_features **out, infd_error *err)
{
    *out = NULL;
    int nf = p->n_fft;
    double nyquist = p->sample_rate / 2.0;
    double f_max = p->f_max > 0 ? p->f_max : nyquist;
    if (p->sample_rate <= 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: sample_rate is %d; it must be positive",
                              p->sample_rate);
    if (nf < 64 || nf > 8192 || (nf & (nf - 1)) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: n_fft is %d; it must be a power of two from 64 to "
                              "8192",
                              nf);
    if (p->win_length <= 0 || p->win_length > nf)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: win_length is %d; it must be in [1, n_fft %d]",
                              p->win_length, nf);
    if (p->hop_length <= 0 || p->hop_length > nf)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: hop_length is %d; it must be in [1, n_fft %d]",
                              p->hop_length, nf);
    if (p->n_mels < 1 || p->n_mels > 512)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: n_mels is %d; it must be in [1, 512]", p->n_mels);
    if (!(p->f_min >= 0) || !(p->f_min < f_max) || f_max > nyquist)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: the mel range [%g, %g] Hz must satisfy 0 <= f_min < "
                              "f_max <= %g (half the sample rate)",
                              (double)p->f_min, f_max, nyquist);
    if (!(p->log_guard > 0))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: log_guard must be positive");
    if (p->normalize != ASR_NORM_PER_FEATURE && p->normalize != ASR_NORM_NONE)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "asr features: unknown normalisation %d", (int)p->normalize);

    asr_features *f = calloc(1, sizeof(*f));
    if (!f)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "asr features: out of memory");
    f->head.p = *p;
    f->n_bins = nf / 2 + 1;
    f->win_off = (nf - p->win_length) / 2;
    f->window = calloc((size_t)p->win_length, sizeof(double));
    f->power = calloc((size_t)f->n_bins, sizeof(double));
    f->frame = fftw_malloc(sizeof(double) * (size_t)nf);
    f->spec = fftw_malloc(sizeof(fftw_complex) * (size_t)f->n_bins);
    infd_status st = INFD_STATUS_OK;
    if (!f->window || !f->power || !f->frame || !f->spec) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "asr features: out of memory");
        goto fail;
    }
    /* torch.hann_window(win, periodic=False): 0.5 - 0.5 cos(2 pi k / (win - 1)). */
    for (int k = 0; k < p->win_length; k++)
        f->window[k] =
            p->win_length == 1 ? 1.0 : 0.5 - 0.5 * cos(2.0 * M_PI * k / (p->win_length - 1));
    pthread_mutex_lock(&plan_mu);
    f->plan = fftw_plan_dft_r2c_1d(nf, f->frame, f->spec, FFTW_ESTIMATE);
    pthread_mutex_unlock(&plan_mu);
    if (!f->plan) {
        st =
            infd_error_set(err, INFD_STATUS_INTERNAL, "asr features: FFTW made no plan for %d", nf);
        goto fail;
    }
    st = build_mel(f, err);
    if (st != INFD_STATUS_OK)
        goto fail;
    *out = f;
    return INFD_STATUS_OK;
fail:
    asr_features_destroy(f);
    return st;
}

void asr_features_destroy(asr_features *f)
{
    if (!f)
        return;
    if (f->plan) {
        pthread_mutex_lock(&plan_mu);
        fftw_destroy_plan(f->plan);
        pthread_mutex_unlock(&plan_mu);
    }
    fftw_free(f->frame);
    fftw_free(f->spec);
    free(f->window);
    free(f->power);
    free(f->mel_first);
    free(f->mel_count);
    free(f->mel_start);
    free(f->mel_w);
    free(f);
}

/* The signal frames are cut from: `x` holds samples [start, start + len)
 * of a signal `n` samples long (n < 0: its end is not known yet). */
typedef struct sig_src {
    const float *x;
    int64_t start, n;
} sig_src;

/* Sample i of the pre-emphasised signal, 0 outside [0, n). */
static inline double emphasised(const sig_src *sg, int64_t i, double a)
{
    if (i < 0 || (sg->n >= 0 && i >= sg->n))
        return 0.0;
    const float *x = sg->x - sg->start;
    return i == 0 ? x[0] : x[i] - a * x[i - 1];
}

/* The log-mel column of frame t into out[m * stride]. */
static void frame_mels(asr_features *f, const sig_src *sg, int64_t t, float *out, int64_t stride)
{
    const asr_feature_params *p = &f->head.p;
    int nf = p->n_fft, wl = p->win_length;
    /* frame t: samples t * hop - n_fft / 2 + [0, n_fft); the window covers
     * [win_off, win_off + win_length) of it. */
    int64_t base = t * p->hop_length - nf / 2 + f->win_off;
    for (int k = 0; k < wl; k++)
        f->frame[f->win_off + k] = f->window[k] * emphasised(sg, base + k, p->preemph);
    fftw_execute_dft_r2c(f->plan, f->frame, f->spec);
    for (int b = 0; b < f->n_bins; b++) {
        double re = f->spec[b][0], im = f->spec[b][1];
        f->power[b] = re * re + im * im;
    }
    for (int m = 0; m < p->n_mels; m++) {
        const float *w = f->mel_w + f->mel_start[m];
        const double *pw = f->power + f->mel_first[m];
        double s = 0.0;
        for (int k = 0; k < f->mel_count[m]; k++)
            s += w[k] * pw[k];
        out[(int64_t)m * stride] = (float)log(s + p->log_guard);
    }
}

int64_t asr_features_first_sample(const asr_features *f, int64_t t)
{
    const asr_feature_params *p = &f->head.p;
    return t * p->hop_length - p->n_fft / 2 + f->win_off - 1;
}

int64_t asr_features_end_sample(const asr_features *f, int64_t t)
{
    const asr_feature_params *p = &f->head.p;
    return t * p->hop_length - p->n_fft / 2 + f->win_off + p->win_length;
}

void asr_features_compute_range(asr_features *f, const float *buf, int64_t buf_start, int64_t n,
                                int64_t t0, int64_t count, float *out, int64_t stride)
{
    const asr_feature_params *p = &f->head.p;
    sig_src sg = { buf, buf_start, n };
    int64_t valid = n >= 0 ? n / p->hop_length : INT64_MAX;
    memset(f->frame, 0, sizeof(double) * (size_t)p->n_fft);
    for (int64_t t = t0; t < t0 + count; t++) {
        if (t < valid)
            frame_mels(f, &sg, t, out + (t - t0), stride);
        else
            for (int m = 0; m < p->n_mels; m++)
                out[(int64_t)m * stride + (t - t0)] = 0.0f;
    }
}

int64_t asr_features_compute(asr_features *f, const float *samples, int64_t n, float *out,
                             int64_t stride)
{
    const asr_feature_params *p = &f->head.p;
    int64_t frames = asr_features_frames(f, n);
    int64_t valid = asr_features_valid_frames(f, n);
    sig_src sg = { samples, 0, n };
    memset(f->frame, 0, sizeof(double) * (size_t)p->n_fft);
    for (int64_t t = 0; t < frames; t++)
        frame_mels(f, &sg, t, out + t, stride);
    asr_features_normalize(f, out, stride, frames, valid);
    return valid;
}

void asr_features_normalize(const asr_features *f, float *out, int64_t stride, int64_t frames,
                            int64_t valid)
{
    const asr_feature_params *p = &f->head.p;
    if (p->normalize == ASR_NORM_PER_FEATURE) {
        for (int m = 0; m < p->n_mels; m++) {
            float *row = out + (int64_t)m * stride;
            double mean = 0.0, var = 0.0;
            for (int64_t t = 0; t < valid; t++)
                mean += row[t];
            mean = valid > 0 ? mean / (double)valid : 0.0;
            for (int64_t t = 0; t < valid; t++)
                var += (row[t] - mean) * (row[t] - mean);
            /* NeMo: std over N - 1; one frame gives NaN there, filled with 0. */
            double sd = valid > 1 ? sqrt(var / (double)(valid - 1)) : 0.0;
            double inv = 1.0 / (sd + 1e-5);
            for (int64_t t = 0; t < valid; t++)
                row[t] = (float)((row[t] - mean) * inv);
        }
    }
    /* Frames from seq_len on are padding (NeMo's pad_value 0), normalised or not. */
    for (int m = 0; m < p->n_mels; m++)
        for (int64_t t = valid; t < frames; t++)
            out[(int64_t)m * stride + t] = 0.0f;
}
