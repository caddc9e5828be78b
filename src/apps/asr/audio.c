/*
 * audio.c - sound files to mono float samples at the model's rate
 * (audio.h), with libsndfile and libsoxr.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sndfile.h>
#include <soxr.h>

#include "apps/asr/audio.h"

/* A memory buffer behind libsndfile's virtual I/O. */
typedef struct mem_file {
    const unsigned char *data;
    sf_count_t n, at;
} mem_file;

static sf_count_t mem_len(void *user)
{
    return ((mem_file *)user)->n;
}

static sf_count_t mem_seek(sf_count_t off, int whence, void *user)
{
    mem_file *m = user;
    sf_count_t to = whence == SEEK_SET ? off : whence == SEEK_CUR ? m->at + off : m->n + off;
    if (to < 0 || to > m->n)
        return -1;
    m->at = to;
    return to;
}

static sf_count_t mem_read(void *ptr, sf_count_t count, void *user)
{
    mem_file *m = user;
    sf_count_t k = count < m->n - m->at ? count : m->n - m->at;
    if (k <= 0)
        return 0;
    memcpy(ptr, m->data + m->at, (size_t)k);
    m->at += k;
    return k;
}

static sf_count_t mem_write(const void *ptr, sf_count_t count, void *user)
{
    (void)ptr, (void)count, (void)user;
    return 0;
}

static sf_count_t mem_tell(void *user)
{
    return ((mem_file *)user)->at;
}

/* libsndfile reads a file whose data chunk announces more bytes than
 * follow, and only its log says so: "data : 32000 (should be 3200)". True
 * (with both sizes) when the log has such a line. */
static bool data_truncated(SNDFILE *sf, long long *said, long long *has)
{
    char log[4096];
    log[0] = '\0';
    sf_command(sf, SFC_GET_LOG_INFO, log, sizeof(log));
    for (const char *line = log; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (sscanf(line, "data : %lld (should be %lld)", said, has) == 2 && *has < *said)
            return true;
    }
    return false;
}

/* Reads the opened file's frames, averaged to mono, then resamples. */
static infd_status decode(SNDFILE *sf, const SF_INFO *info, const char *name, int rate,
                          asr_audio *out, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    float *mono = NULL, *block = NULL;
    if (info->samplerate < ASR_AUDIO_MIN_RATE || info->samplerate > ASR_AUDIO_MAX_RATE)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: the sample rate is %d Hz; %d to %d Hz are accepted", name,
                              info->samplerate, ASR_AUDIO_MIN_RATE, ASR_AUDIO_MAX_RATE);
    if (info->channels <= 0 || info->channels > 256)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %d channels; a sound file has 1 to 256", name, info->channels);
    if (info->frames <= 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: the file holds no samples",
                              name);
    if (info->frames > ASR_AUDIO_MAX_FRAMES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %lld frames; at most %lld are accepted (4 hours at 48 kHz)",
                              name, (long long)info->frames, (long long)ASR_AUDIO_MAX_FRAMES);
    if (info->frames > ASR_AUDIO_MAX_SECONDS * info->samplerate)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %lld frames at %d Hz, %.0f s; at most %lld s (4 hours) are "
                              "accepted",
                              name, (long long)info->frames, info->samplerate,
                              (double)info->frames / info->samplerate,
                              (long long)ASR_AUDIO_MAX_SECONDS);
    long long said = 0, has = 0;
    if (data_truncated(sf, &said, &has))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: truncated: its data chunk announces %lld bytes, the file "
                              "holds %lld",
                              name, said, has);
    int ch = info->channels;
    enum { BLOCK = 4096 };
    mono = malloc((size_t)info->frames * sizeof(float));
    block = malloc((size_t)BLOCK * (size_t)ch * sizeof(float));
    if (!mono || !block) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory for %lld frames",
                            name, (long long)info->frames);
        goto out;
    }
    sf_count_t got = 0;
    while (got < info->frames) {
        sf_count_t want = info->frames - got < BLOCK ? info->frames - got : BLOCK;
        sf_count_t k = sf_readf_float(sf, block, want);
        if (k <= 0)
            break;
        for (sf_count_t i = 0; i < k; i++) {
            float s = 0.0f;
            for (int c = 0; c < ch; c++)
                s += block[i * ch + c];
            mono[got + i] = ch == 1 ? s : s / (float)ch;
        }
        got += k;
    }
    if (sf_error(sf) != SF_ERR_NO_ERROR) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: %s after %lld frames", name,
                            sf_strerror(sf), (long long)got);
        goto out;
    }
    for (sf_count_t i = 0; i < got; i++)
        if (!(fabsf(mono[i]) <= ASR_AUDIO_MAX_ABS)) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: sample %lld is %g; samples are expected in [-1, 1] (at "
                                "most %g accepted)",
                                name, (long long)i, (double)mono[i], (double)ASR_AUDIO_MAX_ABS);
            goto out;
        }
    if (got < info->frames) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: truncated: the header announces %lld frames, the file holds "
                            "%lld",
                            name, (long long)info->frames, (long long)got);
        goto out;
    }
    out->rate_in = info->samplerate;
    out->channels_in = ch;
    if (rate > 0 && rate != info->samplerate) {
        float *res = NULL;
        int64_t n_res = 0;
        st = asr_resample(mono, got, info->samplerate, rate, &res, &n_res, err);
        if (st != INFD_STATUS_OK) {
            infd_error_prefix(err, "%s", name);
            goto out;
        }
        free(mono);
        mono = res;
        got = n_res;
        out->rate = rate;
    } else {
        out->rate = info->samplerate;
    }
    out->samples = mono;
    out->n = got;
    mono = NULL;
out:
    free(mono);
    free(block);
    return st;
}

/* libsndfile's word on a file it would not open, with what it logged. */
static infd_status open_error(const char *name, infd_error *err)
{
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "%s: not a sound file libsndfile "
                          "reads: %s",
                          name, sf_strerror(NULL));
}

infd_status asr_audio_read_file(const char *path, int rate, asr_audio *out, infd_error *err)
{
    memset(out, 0, sizeof(*out));
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return infd_error_set(err, INFD_STATUS_IO, "%s: cannot open: %s", path, strerror(errno));
    fclose(probe);
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf)
        return open_error(path, err);
    infd_status st = decode(sf, &info, path, rate, out, err);
    sf_close(sf);
    return st;
}

infd_status asr_audio_read_memory(const void *data, size_t n, const char *name, int rate,
                                  asr_audio *out, infd_error *err)
{
    memset(out, 0, sizeof(*out));
    mem_file m = { data, (sf_count_t)n, 0 };
    SF_VIRTUAL_IO io = { mem_len, mem_seek, mem_read, mem_write, mem_tell };
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    SNDFILE *sf = sf_open_virtual(&io, SFM_READ, &info, &m);
    if (!sf)
        return open_error(name, err);
    infd_status st = decode(sf, &info, name, rate, out, err);
    sf_close(sf);
    return st;
}

void asr_audio_fini(asr_audio *a)
{
    if (!a)
        return;
    free(a->samples);
    memset(a, 0, sizeof(*a));
}

infd_status asr_resample(const float *in, int64_t n, int rate_in, int rate_out, float **out,
                         int64_t *n_out, infd_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (rate_in <= 0 || rate_out <= 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "resampling from %d to %d Hz: rates must be positive", rate_in,
                              rate_out);
    size_t cap = (size_t)((double)n * rate_out / rate_in) + 16;
    float *buf = malloc(cap * sizeof(float));
    if (!buf)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory resampling");
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    size_t done = 0;
    soxr_error_t e = soxr_oneshot((double)rate_in, (double)rate_out, 1, in, (size_t)n, NULL, buf,
                                  cap, &done, &io, &q, NULL);
    if (e) {
        free(buf);
        return infd_error_set(err, INFD_STATUS_INTERNAL, "resampling from %d to %d Hz: %s", rate_in,
                              rate_out, e);
    }
    *out = buf;
    *n_out = (int64_t)done;
    return INFD_STATUS_OK;
}

struct asr_resampler {
    soxr_t soxr;
    int rate_in, rate_out;
};

infd_status asr_resampler_create(int rate_in, int rate_out, asr_resampler **out, infd_error *err)
{
    *out = NULL;
    if (rate_in <= 0 || rate_out <= 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "resampling from %d to %d Hz: rates must be positive", rate_in,
                              rate_out);
    asr_resampler *r = calloc(1, sizeof(*r));
    if (!r)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_error_t e = NULL;
    r->soxr = soxr_create((double)rate_in, (double)rate_out, 1, &e, &io, &q, NULL);
    if (!r->soxr || e) {
        free(r);
        return infd_error_set(err, INFD_STATUS_INTERNAL, "libsoxr from %d to %d Hz: %s", rate_in,
                              rate_out, e ? e : "cannot create");
    }
    r->rate_in = rate_in;
    r->rate_out = rate_out;
    *out = r;
    return INFD_STATUS_OK;
}

void asr_resampler_destroy(asr_resampler *r)
{
    if (!r)
        return;
    soxr_delete(r->soxr);
    free(r);
}

infd_status asr_resampler_process(asr_resampler *r, const float *in, int64_t n, int64_t *n_in,
                                  float *out, int64_t cap, int64_t *n_out, infd_error *err)
{
    size_t idone = 0, odone = 0;
    soxr_error_t e =
        soxr_process(r->soxr, in, in ? (size_t)n : 0, &idone, out, (size_t)cap, &odone);
    *n_in = (int64_t)idone;
    *n_out = (int64_t)odone;
    if (e)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "libsoxr from %d to %d Hz: %s", r->rate_in,
                              r->rate_out, e);
    return INFD_STATUS_OK;
}
