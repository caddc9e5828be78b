/*
 * recognizer.c - offline Parakeet-TDT transcription on infd's engine
 * (recognizer.h).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "apps/asr/audio.h"
#include "apps/asr/contract.h"
#include "apps/asr/tap.h"
#include "apps/asr/features.h"
#include "apps/asr/recognizer.h"

#define MAX_BUCKETS 128
/* The most windows of streams one encoder run takes (asr_streams_decode). */
#define ASR_MAX_BATCH 16
/* Buffered windows encoded at once (cache-aware chunks: ASR_MAX_BATCH). */
#define ASR_MAX_WINDOWS 64
/* Most threads computing a batch's features (the caller's included). */
#define ASR_FEATURE_THREADS 16
#define MAX_VOCAB           65536

/* One encoder length: its plan, context and output buffers. */
typedef struct enc_bucket {
    int64_t frames; /* the padded feature frames (T) */
    int64_t batch;  /* windows encoded at once (a power of two, ASR_MAX_WINDOWS at most) */
    int64_t *lengths, *enc_lens; /* [batch] */
    infd_plan *plan;
    infd_context *ctx;
    int64_t out_frames; /* T' of the plan's outputs */
    float *feats;       /* [n_mels, frames] input */
    float *enc;         /* [D, out_frames] output */
} enc_bucket;

typedef enum model_layout {
    LAYOUT_ONNX_ASR = 0, /* encoder-model.onnx, decoder_joint-model.onnx, vocab.txt, config.json */
    LAYOUT_SHERPA = 1,   /* encoder.onnx, decoder.onnx, joiner.onnx, tokens.txt */
} model_layout;

/* A cache-aware encoder for a batch of windows, with the buffers its runs
 * gather into and scatter from. */
typedef struct ca_batch {
    int64_t batch;
    infd_plan *plan;
    infd_context *ctx;
    float *feats, *enc, *cc_in, *cc_out, *ct_in, *ct_out;
    int64_t *ints; /* lengths, encoded lengths, cache lengths in and out: batch each */
} ca_batch;

static void ca_batch_fini(ca_batch *b)
{
    infd_context_destroy(b->ctx);
    infd_plan_destroy(b->plan);
    free(b->feats);
    free(b->enc);
    free(b->cc_in);
    free(b->cc_out);
    free(b->ct_in);
    free(b->ct_out);
    free(b->ints);
    memset(b, 0, sizeof(*b));
}

/* The onnx-asr decoder-joint for a batch of streams decoded in lockstep
 * (decode_rows): its plan and context, and the buffers its runs gather
 * each stream's encoder frame, last token and state into, and give the
 * argmaxes (or logits) and next states in. */
#define DJ_MAX_BATCH 64
#define DJ_SLOTS     7 /* batches of 1, 2, 4, ..., 64 */
/* dj_batch.buf: the decoder-joint's 5 inputs, then its 4 outputs */
enum { DJ_ENC, DJ_TARGETS, DJ_TLEN, DJ_S_IN, DJ_OUT = 5, DJ_LENS, DJ_S_OUT, DJ_BUFS = 9 };

typedef struct dj_batch {
    int64_t batch;
    bool borrowed; /* batch 1: the model's own plan (m->dj) */
    infd_plan *plan;
    infd_context *ctx;
    /* encoder_outputs [batch, D, 1], targets and target_length INT32
     * [batch], the states in [L, batch, H] (two); the argmaxes INT64
     * [batch, 2] or the logits FP32 [batch, W], prednet_lengths, the
     * states out (two) */
    void *buf[DJ_BUFS];
    unsigned pinned; /* bit i: buf[i] is page-locked (a GPU plan's) */
    infd_tensor in[5], outs[4];
} dj_batch;

static void dj_batch_fini(dj_batch *b)
{
    if (!b->borrowed) {
        infd_context_destroy(b->ctx);
        infd_plan_destroy(b->plan);
    }
    for (int i = 0; i < DJ_BUFS; i++) {
        if (b->pinned & (1u << i))
            infd_engine_host_free(INFD_DEVICE_CUDA, b->buf[i]);
        else
            free(b->buf[i]);
    }
    memset(b, 0, sizeof(*b));
}

struct feature_pool;
static void feature_pool_destroy(struct feature_pool *p);

struct asr_model {
    char *dir;
    char *name;          /* the directory's last component */
    char *contract_path; /* where its contract is read from */
    asr_contract contract;
    asr_norm normalize; /* the features' (sherpa-onnx's normalize_type; per_feature otherwise) */
    /* cache-aware streaming (mode b): the encoder takes and gives its
     * caches; every chunk feeds `window` feature frames and moves on by
     * `shift` (sherpa-onnx's window_size and chunk_shift) */
    bool cache_aware;
    int64_t window, shift, pre;    /* pre: the window's pre-encode cache, window - shift */
    infd_shape cc_shape, ct_shape; /* cache_last_channel, cache_last_time at batch 1 */
    size_t cc_n, ct_n;             /* their element counts */
    infd_plan *ca_plan;
    infd_context *ca_ctx;
    int64_t ca_frames;      /* encoder frames a chunk gives */
    float *ca_feats;        /* [n_mels, window] */
    float *ca_enc;          /* [D, ca_frames] */
    ca_batch ca_batches[5]; /* batches of 2, 4, 8, 16 (slot 0 unused: ca_plan) */
    int debug;              /* INFD_ASR_DEBUG: 1 a line per chunk, 2 also per joint run */
    bool nan_guard;         /* INFD_ASR_NAN_GUARD: features, encoder outputs and logits checked */
    bool joint_argmax;      /* the joint's plan gives the two argmaxes (joint_argmax_plan) */
    /* INFD_ASR_DEBUG: where one asr_streams_decode call's time went (ns)
     * and what it ran (buffered streams). */
    uint64_t t_features, t_encoder, t_decode;
    int64_t n_windows, n_enc_runs, n_joints;
    int64_t joint_idx[2]; /* ...here: token, duration index */
    model_layout layout;
    const char *enc_file, *vocab_file; /* per layout */
    asr_model_options opts;
    int n_mels, subsampling, max_symbols;
    int64_t max_frames; /* the longest padded feature length encoded at once */
    int vocab;          /* V; blank = V */
    char **pieces;      /* V entries */
    asr_tdt_config tdt;
    asr_features *feat;
    /* Threads that compute a batch's window features beside the caller
     * (feature_workers), made on the first batch of two or more windows;
     * each with its own extractor. */
    struct feature_pool *fpool;
    infd_weights *enc_w;
    enc_bucket buckets[MAX_BUCKETS];
    int n_buckets;
    int64_t d_enc; /* D */
    /* decoder_joint: its plan at batch 1, and at larger batches built on
     * first use from its weights (dj_batches) */
    infd_plan *dj;
    infd_context *dj_ctx;
    infd_weights *dj_w;
    dj_batch dj_batches[DJ_SLOTS];
    int64_t n_joint_steps;           /* INFD_ASR_DEBUG: batched joint runs of one call */
    int64_t n_layers, hidden, width; /* states [L, 1, H]; logits width V + 1 + 5 */
    /* sherpa-onnx: the predictor (decoder.onnx) and the joiner, run apart,
     * and their buffers (decode_buffers) */
    float *dj_enc; /* [D] */
    int32_t dj_target, dj_target_len;
    float *pending[2]; /* h, c from the last predictor run (the committed ones are the stream's) */
    float *logits;
    int64_t dj_lengths; /* prednet_lengths output (unused; INT32 or INT64 as exported) */
    infd_plan *pred;
    infd_context *pred_ctx;
    infd_plan *joiner;
    infd_context *joiner_ctx;
    /* Views of the buffers above, made once (decode_buffers): the
     * joiner's and the predictor's inputs and outputs. Those of the committed state and
     * the predictor's output point into the stream being decoded (bind). */
    infd_tensor jn_in[2], jn_out[1], pr_in[4], pr_out[4];
    /* the chunk being decoded: its stream and encoder frames */
    pthread_mutex_t lock; /* one decode at a time: the plans' contexts are the model's */
    struct asr_stream *cur;
    uint64_t calls; /* asr_streams_decode calls, to mark the streams each has taken */
    const float *enc_out;
    int64_t enc_stride;
};

struct asr_stream {
    asr_model *m;
    asr_stream_options o;
    int64_t chunk, left, right; /* samples, whole encoder frames; chunk 0 until an
                                   offline stream finishes */
    bool offline, finished, done;
    float *buf; /* samples [buf_start, buf_start + buf_len) */
    int64_t buf_start, buf_len, buf_cap;
    int64_t next; /* the sample where the next chunk starts */
    int rate_in;  /* the rate audio comes at (0: none yet) */
    asr_resampler *rs;
    /* the decoder: the predictor's committed state (h, c) and output, the
     * last token, the TDT state */
    float *state[2], *g;
    int last_token;
    asr_tdt_state tdt;
    asr_tdt_token *tokens; /* the segment's */
    int64_t n_tokens, cap_tokens;
    int64_t seg_start; /* the segment's first encoder frame */
    int64_t n_joint_runs;
    int64_t n_chunks; /* chunks decoded */
    /* cache-aware streams: the encoder's caches (read from [cur], written
     * to [!cur]) and the feature frame the next chunk starts at */
    float *cc[2], *ct[2];
    int64_t clen[2];
    int cur;
    int64_t next_frame;
    asr_tap *tap;     /* INFD_ASR_TAP_DIR's recorder (tap.h), or NULL */
    uint64_t handled; /* the asr_streams_decode call that last decoded a chunk of it */
    /* buffered streams: the raw log-mel frames of the whole signal that
     * windows share (window_features), a ring of fc_n frames of n_mels:
     * frame g in slot g % fc_n when fc_idx[slot] == g */
    float *fc;
    int64_t *fc_idx;
    int64_t fc_n;
};

void asr_model_options_init(asr_model_options *o)
{
    memset(o, 0, sizeof(*o));
    o->device = INFD_DEVICE_CPU;
    o->precision = INFD_PRECISION_FP32;
}

int asr_model_sample_rate(const asr_model *m)
{
    return asr_features_params(m->feat)->sample_rate;
}

const char *asr_model_piece(const asr_model *m, int id)
{
    return id >= 0 && id < m->vocab ? m->pieces[id] : NULL;
}

static char *read_text(const char *path, size_t *n, infd_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        infd_error_set(err, errno == ENOENT ? INFD_STATUS_NOT_FOUND : INFD_STATUS_IO,
                       "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t nc = cap ? cap * 2 : 8192;
            if (nc > (64u << 20)) {
                infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: larger than 64 MiB", path);
                goto fail;
            }
            char *nb = realloc(buf, nc);
            if (!nb) {
                infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
                goto fail;
            }
            buf = nb, cap = nc;
        }
        size_t k = fread(buf + len, 1, cap - len - 1, f);
        len += k;
        if (k == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    *n = len;
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* config.json (contract.h's parser). */
static infd_status read_config(asr_model *m, infd_error *err)
{
    size_t n = 0;
    char *path = path_join(m->dir, "config.json");
    char *text = path ? read_text(path, &n, err) : NULL;
    infd_status st = !path   ? infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory")
                     : !text ? (err ? err->code : INFD_STATUS_IO)
                             : asr_config_parse(text, n, path, &m->n_mels, &m->subsampling,
                                                &m->max_symbols, err);
    free(text);
    free(path);
    return st;
}

/* vocab.txt (tokens.txt): "piece id" lines with ids 0.. in order and <blk>
 * last. */
static infd_status read_vocab(asr_model *m, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    size_t n = 0;
    char *path = path_join(m->dir, m->vocab_file);
    char *text = path ? read_text(path, &n, err) : NULL;
    if (!path)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (!text) {
        free(path);
        return err ? err->code : INFD_STATUS_IO;
    }
    int count = 0, blank = -1, line_no = 0;
    m->pieces = calloc(MAX_VOCAB, sizeof(char *));
    if (!m->pieces) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r')
            line[--len] = '\0';
        if (!len)
            continue;
        char *sp = strrchr(line, ' ');
        char *end = NULL;
        long id = sp ? strtol(sp + 1, &end, 10) : -1;
        if (!sp || sp == line || !end || *end || id != count || count >= MAX_VOCAB) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s:%d: expected \"piece %d\" (ids in order from 0)", path, line_no,
                                count);
            goto out;
        }
        *sp = '\0';
        if (blank >= 0) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s:%d: a piece after <blk>; the blank must be last (id V)", path,
                                line_no);
            goto out;
        }
        if (strcmp(line, "<blk>") == 0) {
            blank = count;
        } else if (!(m->pieces[count] = strdup(line))) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            goto out;
        }
        count++;
    }
    if (blank < 1) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: no <blk> after the pieces (a TDT vocabulary ends with it)", path);
        goto out;
    }
    m->vocab = blank;
out:
    free(text);
    free(path);
    return st;
}

/* Checks plan input or output i: its name, dtype and rank, and the dims
 * that are not -1 in want[]. */
static infd_status check_io(const infd_plan *p, bool output, int i, const char *file,
                            const char *name, infd_dtype dtype, int rank, const int64_t *want,
                            infd_tensor_info *info, infd_error *err)
{
    infd_status st = output ? infd_plan_output(p, i, info) : infd_plan_input(p, i, info);
    if (st != INFD_STATUS_OK)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: %s %d missing: expected '%s'",
                              file, output ? "output" : "input", i, name);
    bool ok = strcmp(info->name, name) == 0 && info->dtype == dtype && info->shape.rank == rank;
    for (int d = 0; ok && d < rank; d++)
        ok = want[d] < 0 || info->shape.dims[d] == want[d];
    if (!ok) {
        char got[128], ws[128] = "";
        infd_shape_format(&info->shape, got, sizeof(got));
        size_t at = 0;
        for (int d = 0; d < rank && at < sizeof(ws); d++)
            at += want[d] < 0 ? (size_t)snprintf(ws + at, sizeof(ws) - at, "%s?", d ? "," : "")
                              : (size_t)snprintf(ws + at, sizeof(ws) - at, "%s%lld", d ? "," : "",
                                                 (long long)want[d]);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s %d is '%s' %s %s; expected '%s' %s [%s]", file,
                              output ? "output" : "input", i, info->name,
                              infd_dtype_name(info->dtype), got, name, infd_dtype_name(dtype), ws);
    }
    return INFD_STATUS_OK;
}

/* Output 0 of the joint `p` holds V + 1 + 5 logits (tokens, blank,
 * durations) and nothing else; sets m->width. */
static infd_status check_logits(asr_model *m, const infd_plan *p, const char *path, infd_error *err)
{
    infd_tensor_info t;
    infd_status st = infd_plan_output(p, 0, &t);
    if (st != INFD_STATUS_OK)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: no output", path);
    int64_t width = t.shape.rank > 0 ? t.shape.dims[t.shape.rank - 1] : 0;
    int64_t numel = 1;
    for (int d = 0; d < t.shape.rank; d++)
        numel *= t.shape.dims[d];
    if (strcmp(t.name, "outputs") != 0 || t.dtype != INFD_DTYPE_FP32 || numel != width ||
        width != m->vocab + 1 + m->tdt.n_durations)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: output 0 is '%s' %s with %lld values; expected 'outputs' "
                              "FP32 with %d (%s's %d tokens, the blank, %d durations)",
                              path, t.name, infd_dtype_name(t.dtype), (long long)numel,
                              m->vocab + 1 + m->tdt.n_durations, m->vocab_file, m->vocab,
                              m->tdt.n_durations);
    m->width = width;
    return INFD_STATUS_OK;
}

/* Options `o` with the joint's output `output` reduced to its two
 * argmaxes (the token over [0, V], the duration index), described in *a. */
static infd_plan_options argmax_options(const asr_model *m, const char *output,
                                        const infd_plan_options *o, infd_argmax_output *a)
{
    *a = (infd_argmax_output){ .output = output,
                               .n_segments = 2,
                               .starts = { 0, m->vocab + 1 },
                               .ends = { m->vocab + 1, m->width } };
    infd_plan_options oa = *o;
    oa.argmax = a;
    oa.n_argmax = 1;
    return oa;
}

/* On a GPU the joint hands back its two argmaxes, the token over [0, V]
 * and the duration index, instead of its V + 1 + D logits (engine.h,
 * infd_plan_options.argmax): the joint `*p`, checked, is built again from
 * its weights `w` with `o` so, and only 16 bytes cross to the host per step. Not
 * with the NaN guard, which reads the logits. */
static infd_status joint_argmax_plan(asr_model *m, infd_weights *w, infd_plan **p, const char *path,
                                     const infd_plan_options *o, infd_error *err)
{
    if (m->opts.device != INFD_DEVICE_CUDA || m->nan_guard)
        return INFD_STATUS_OK;
    infd_tensor_info t;
    infd_status st = infd_plan_output(*p, 0, &t);
    if (st != INFD_STATUS_OK)
        return infd_error_set(err, st, "%s: no output", path);
    infd_argmax_output a;
    infd_plan_options oa = argmax_options(m, t.name, o, &a);
    infd_plan *q = NULL;
    st = infd_plan_create_from_weights(w, &oa, &q, err);
    if (st != INFD_STATUS_OK)
        return st;
    infd_plan_destroy(*p);
    *p = q;
    m->joint_argmax = true;
    return INFD_STATUS_OK;
}

/* Reads the states' declared shape [L, batch, H] (graph inputs i and i + 1
 * of `w`) into m->n_layers and m->hidden. */
static infd_status state_dims(asr_model *m, infd_weights *w, int i, const char *path,
                              infd_error *err)
{
    infd_graph_input gi;
    infd_status st = infd_weights_input(w, i, &gi, err);
    if (st == INFD_STATUS_OK &&
        (gi.shape.rank != 3 || gi.shape.dims[0] < 1 || gi.shape.dims[2] < 1))
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: input %d ('%s') has rank %d; expected a predictor state "
                            "[layers, batch, hidden] with layers and hidden given",
                            path, i, gi.name, (int)gi.shape.rank);
    if (st == INFD_STATUS_OK) {
        m->n_layers = gi.shape.dims[0];
        m->hidden = gi.shape.dims[2];
    }
    return st;
}

/* Buffers of the sherpa-onnx layout's decoding (joint and predict): the
 * predictor's next states, the joiner's logits, an encoder frame. */
static infd_status decode_buffers(asr_model *m, infd_error *err)
{
    size_t sb = sizeof(float) * (size_t)(m->n_layers * m->hidden);
    m->dj_enc = calloc((size_t)m->d_enc, sizeof(float));
    m->logits = calloc((size_t)m->width, sizeof(float));
    for (int k = 0; k < 2; k++)
        m->pending[k] = calloc(1, sb);
    if (!m->dj_enc || !m->logits || !m->pending[0] || !m->pending[1])
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    /* the stream's committed state and predictor output until bind() */
    float *state0 = m->pending[0], *state1 = m->pending[1], *g_buf = m->pending[0];
    /* prednet_lengths (unused) as the export typed it: INT32 or INT64 */
    infd_dtype len_dt = INFD_DTYPE_INT64;
    infd_tensor_info li;
    if (infd_plan_output(m->pred, 1, &li) == INFD_STATUS_OK && li.dtype == INFD_DTYPE_INT32)
        len_dt = INFD_DTYPE_INT32;
    const infd_shape enc = { .rank = 3, .dims = { 1, m->d_enc, 1 } };
    const infd_shape g = { .rank = 3, .dims = { 1, m->hidden, 1 } };
    const infd_shape state = { .rank = 3, .dims = { m->n_layers, 1, m->hidden } };
    const infd_shape one = { .rank = 1, .dims = { 1 } }, one2 = { .rank = 2, .dims = { 1, 1 } };
    const infd_shape logits = { .rank = 1, .dims = { m->width } };
    const infd_shape two = { .rank = 1, .dims = { 2 } };
    infd_dtype jt = m->joint_argmax ? INFD_DTYPE_INT64 : INFD_DTYPE_FP32;
    const infd_shape *js = m->joint_argmax ? &two : &logits;
    void *jd = m->joint_argmax ? (void *)m->joint_idx : (void *)m->logits;
    struct {
        infd_tensor *t;
        infd_dtype dtype;
        const infd_shape *shape;
        void *data;
    } views[] = {
        { &m->jn_in[0], INFD_DTYPE_FP32, &enc, m->dj_enc },
        { &m->jn_in[1], INFD_DTYPE_FP32, &g, g_buf },
        { &m->jn_out[0], jt, js, jd },
        { &m->pr_in[0], INFD_DTYPE_INT32, &one2, &m->dj_target },
        { &m->pr_in[1], INFD_DTYPE_INT32, &one, &m->dj_target_len },
        { &m->pr_in[2], INFD_DTYPE_FP32, &state, state0 },
        { &m->pr_in[3], INFD_DTYPE_FP32, &state, state1 },
        { &m->pr_out[0], INFD_DTYPE_FP32, &g, g_buf },
        { &m->pr_out[1], len_dt, &one, &m->dj_lengths },
        { &m->pr_out[2], INFD_DTYPE_FP32, &state, m->pending[0] },
        { &m->pr_out[3], INFD_DTYPE_FP32, &state, m->pending[1] },
    };
    m->dj_target_len = 1;
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
        size_t nb = 0;
        infd_status st = infd_tensor_nbytes_for(views[i].dtype, views[i].shape, &nb, err);
        if (st == INFD_STATUS_OK)
            st = infd_tensor_init_view(views[i].t, views[i].dtype, views[i].shape, views[i].data,
                                       nb, err);
        if (st != INFD_STATUS_OK)
            return st;
    }
    return INFD_STATUS_OK;
}

/* Options of the model's plans: its device, one context, `n_threads`
 * threads and the given input shapes. */
static infd_plan_options plan_options(const asr_model *m, int n_threads,
                                      const infd_input_shape *shapes, int n_shapes)
{
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.device = m->opts.device;
    o.device_index = m->opts.device_index;
    o.precision = m->opts.precision;
    o.n_threads = n_threads;
    o.max_contexts = 1;
    o.shapes = shapes;
    o.n_shapes = n_shapes;
    return o;
}

static infd_status load_decoder(asr_model *m, infd_error *err)
{
    char *path = path_join(m->dir, "decoder_joint-model.onnx");
    if (!path)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    /* The states' declared shape [L, batch, H] gives L and H. */
    infd_weights *w = NULL;
    infd_status st = infd_weights_create(path, &w, err);
    if (st == INFD_STATUS_OK && infd_weights_n_inputs(w) != 5)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %d graph inputs; the onnx-asr decoder_joint has 5 "
                            "(encoder_outputs, targets, target_length, input_states_1, "
                            "input_states_2)",
                            path, infd_weights_n_inputs(w));
    if (st == INFD_STATUS_OK)
        st = state_dims(m, w, 3, path, err);
    infd_input_shape shapes[5] = {
        { .name = "encoder_outputs", .shape = { .rank = 3, .dims = { 1, m->d_enc, 1 } } },
        { .name = "targets", .shape = { .rank = 2, .dims = { 1, 1 } } },
        { .name = "target_length", .shape = { .rank = 1, .dims = { 1 } } },
        { .name = "input_states_1", .shape = { .rank = 3, .dims = { m->n_layers, 1, m->hidden } } },
        { .name = "input_states_2", .shape = { .rank = 3, .dims = { m->n_layers, 1, m->hidden } } },
    };
    /* one joint step is small: threads would only wait */
    infd_plan_options o = plan_options(m, 1, shapes, 5);
    if (st == INFD_STATUS_OK)
        st = infd_plan_create_from_weights(w, &o, &m->dj, err);
    m->dj_w = w; /* for the plans of larger batches */
    infd_tensor_info t;
    if (st == INFD_STATUS_OK && (infd_plan_n_inputs(m->dj) != 5 || infd_plan_n_outputs(m->dj) != 4))
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %d inputs and %d outputs; the onnx-asr decoder_joint has 5 "
                            "(encoder_outputs, targets, target_length, input_states_1, "
                            "input_states_2) and 4",
                            path, infd_plan_n_inputs(m->dj), infd_plan_n_outputs(m->dj));
    if (st == INFD_STATUS_OK)
        st = check_io(m->dj, false, 0, path, "encoder_outputs", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ 1, m->d_enc, 1 }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->dj, false, 1, path, "targets", INFD_DTYPE_INT32, 2,
                      (const int64_t[]){ 1, 1 }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->dj, false, 2, path, "target_length", INFD_DTYPE_INT32, 1,
                      (const int64_t[]){ 1 }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->dj, false, 3, path, "input_states_1", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ m->n_layers, 1, m->hidden }, &t, err);
    if (st == INFD_STATUS_OK) {
        st = check_io(m->dj, false, 4, path, "input_states_2", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ m->n_layers, 1, m->hidden }, &t, err);
    }
    if (st == INFD_STATUS_OK)
        st = check_logits(m, m->dj, path, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->dj, true, 2, path, "output_states_1", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ m->n_layers, 1, m->hidden }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->dj, true, 3, path, "output_states_2", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ m->n_layers, 1, m->hidden }, &t, err);
    if (st == INFD_STATUS_OK) {
        asr_contract_record(&m->contract.nets[m->contract.n_nets++], "decoder_joint",
                            "decoder_joint-model.onnx", m->dj);
        st = joint_argmax_plan(m, w, &m->dj, path, &o, err);
    }
    if (st == INFD_STATUS_OK) {
        st = infd_context_create(m->dj, &m->dj_ctx, err);
    }
    free(path);
    return st;
}

/* The sherpa-onnx layout's predictor (decoder.onnx) and joiner
 * (joiner.onnx). The predictor's state inputs and outputs have names the
 * export made up ("states.1", "onnx::Slice_3"): they go by position. */
static infd_status load_sherpa(asr_model *m, infd_error *err)
{
    char *dpath = path_join(m->dir, "decoder.onnx"), *jpath = path_join(m->dir, "joiner.onnx");
    infd_weights *w = NULL, *jw = NULL;
    infd_graph_input s1, s2;
    infd_tensor_info t;
    infd_status st = dpath && jpath
                         ? infd_weights_create(dpath, &w, err)
                         : infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (st == INFD_STATUS_OK && infd_weights_n_inputs(w) != 4)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %d graph inputs; a NeMo predictor export has 4 (targets, "
                            "target_length and two states)",
                            dpath, infd_weights_n_inputs(w));
    if (st == INFD_STATUS_OK)
        st = state_dims(m, w, 2, dpath, err);
    if (st == INFD_STATUS_OK)
        st = infd_weights_input(w, 2, &s1, err);
    if (st == INFD_STATUS_OK)
        st = infd_weights_input(w, 3, &s2, err);
    infd_plan_options o = plan_options(m, 1, NULL, 0); /* one step: threads would only wait */
    if (st == INFD_STATUS_OK) {
        infd_input_shape shapes[4] = {
            { .name = "targets", .shape = { .rank = 2, .dims = { 1, 1 } } },
            { .name = "target_length", .shape = { .rank = 1, .dims = { 1 } } },
            { .name = s1.name, .shape = { .rank = 3, .dims = { m->n_layers, 1, m->hidden } } },
            { .name = s2.name, .shape = { .rank = 3, .dims = { m->n_layers, 1, m->hidden } } },
        };
        o.shapes = shapes;
        o.n_shapes = 4;
        st = infd_plan_create_from_weights(w, &o, &m->pred, err);
    }
    infd_weights_destroy(w);
    const int64_t state[3] = { m->n_layers, 1, m->hidden };
    if (st == INFD_STATUS_OK && infd_plan_n_outputs(m->pred) != 4)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %d outputs; expected 4 (outputs, prednet_lengths, two states)",
                            dpath, infd_plan_n_outputs(m->pred));
    if (st == INFD_STATUS_OK)
        st = check_io(m->pred, false, 0, dpath, "targets", INFD_DTYPE_INT32, 2,
                      (const int64_t[]){ 1, 1 }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->pred, false, 1, dpath, "target_length", INFD_DTYPE_INT32, 1,
                      (const int64_t[]){ 1 }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->pred, true, 0, dpath, "outputs", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ 1, m->hidden, 1 }, &t, err);
    for (int k = 2; k < 4 && st == INFD_STATUS_OK; k++) {
        st = infd_plan_output(m->pred, k, &t);
        if (st == INFD_STATUS_OK)
            st = check_io(m->pred, true, k, dpath, t.name, INFD_DTYPE_FP32, 3, state, &t, err);
    }
    if (st == INFD_STATUS_OK) {
        asr_contract_record(&m->contract.nets[m->contract.n_nets++], "decoder", "decoder.onnx",
                            m->pred);
        st = infd_context_create(m->pred, &m->pred_ctx, err);
    }
    if (st == INFD_STATUS_OK) {
        infd_input_shape shapes[2] = {
            { .name = "encoder_outputs", .shape = { .rank = 3, .dims = { 1, m->d_enc, 1 } } },
            { .name = "decoder_outputs", .shape = { .rank = 3, .dims = { 1, m->hidden, 1 } } },
        };
        o.shapes = shapes;
        o.n_shapes = 2;
        st = infd_weights_create(jpath, &jw, err);
        if (st == INFD_STATUS_OK)
            st = infd_plan_create_from_weights(jw, &o, &m->joiner, err);
    }
    if (st == INFD_STATUS_OK)
        st = check_io(m->joiner, false, 0, jpath, "encoder_outputs", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ 1, m->d_enc, 1 }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->joiner, false, 1, jpath, "decoder_outputs", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ 1, m->hidden, 1 }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_logits(m, m->joiner, jpath, err);
    if (st == INFD_STATUS_OK) {
        asr_contract_record(&m->contract.nets[m->contract.n_nets++], "joiner", "joiner.onnx",
                            m->joiner);
        infd_input_shape shapes[2] = {
            { .name = "encoder_outputs", .shape = { .rank = 3, .dims = { 1, m->d_enc, 1 } } },
            { .name = "decoder_outputs", .shape = { .rank = 3, .dims = { 1, m->hidden, 1 } } },
        };
        o.shapes = shapes;
        o.n_shapes = 2;
        st = joint_argmax_plan(m, jw, &m->joiner, jpath, &o, err);
        o.shapes = NULL;
        o.n_shapes = 0;
    }
    infd_weights_destroy(jw);
    if (st == INFD_STATUS_OK)
        st = infd_context_create(m->joiner, &m->joiner_ctx, err);
    if (st == INFD_STATUS_OK)
        st = decode_buffers(m, err);
    free(dpath);
    free(jpath);
    return st;
}

/* The encoder plan for `frames` padded feature frames, built on first use. */
static infd_status encoder_bucket(asr_model *m, int64_t frames, int64_t batch, enc_bucket **out,
                                  infd_error *err)
{
    for (int i = 0; i < m->n_buckets; i++)
        if (m->buckets[i].frames == frames && m->buckets[i].batch == batch) {
            *out = &m->buckets[i];
            return INFD_STATUS_OK;
        }
    if (m->n_buckets == MAX_BUCKETS)
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "%s: more than %d encoder lengths in use", m->dir, MAX_BUCKETS);
    enc_bucket *b = &m->buckets[m->n_buckets];
    memset(b, 0, sizeof(*b));
    b->frames = frames;
    b->batch = batch;
    infd_input_shape shapes[2] = {
        { .name = "audio_signal", .shape = { .rank = 3, .dims = { batch, m->n_mels, frames } } },
        { .name = "length", .shape = { .rank = 1, .dims = { batch } } }
    };
    infd_plan_options o = plan_options(m, m->opts.n_threads, shapes, 2);
    const char *file = m->enc_file;
    infd_status st = infd_plan_create_from_weights(m->enc_w, &o, &b->plan, err);
    infd_tensor_info t;
    if (st == INFD_STATUS_OK &&
        (infd_plan_n_inputs(b->plan) != 2 || infd_plan_n_outputs(b->plan) != 2))
        st =
            infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                           "%s/%s: %d inputs and %d outputs; expected 2 (audio_signal, length) "
                           "and 2 (outputs, encoded_lengths)",
                           m->dir, file, infd_plan_n_inputs(b->plan), infd_plan_n_outputs(b->plan));
    if (st == INFD_STATUS_OK)
        st = check_io(b->plan, false, 0, file, "audio_signal", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ batch, m->n_mels, frames }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(b->plan, false, 1, file, "length", INFD_DTYPE_INT64, 1,
                      (const int64_t[]){ batch }, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(b->plan, true, 0, file, "outputs", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ batch, m->d_enc > 0 ? m->d_enc : -1, -1 }, &t, err);
    if (st == INFD_STATUS_OK) {
        m->d_enc = t.shape.dims[1];
        b->out_frames = t.shape.dims[2];
        st = check_io(b->plan, true, 1, file, "encoded_lengths", INFD_DTYPE_INT64, 1,
                      (const int64_t[]){ batch }, &t, err);
    }
    if (st == INFD_STATUS_OK)
        st = infd_context_create(b->plan, &b->ctx, err);
    if (st == INFD_STATUS_OK) {
        b->feats = calloc((size_t)(batch * m->n_mels * frames), sizeof(float));
        b->enc = calloc((size_t)(batch * m->d_enc * b->out_frames), sizeof(float));
        b->lengths = calloc((size_t)batch, sizeof(int64_t));
        b->enc_lens = calloc((size_t)batch, sizeof(int64_t));
        if (!b->feats || !b->enc || !b->lengths || !b->enc_lens)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (st != INFD_STATUS_OK) {
        infd_context_destroy(b->ctx);
        infd_plan_destroy(b->plan);
        free(b->feats);
        free(b->enc);
        free(b->lengths);
        free(b->enc_lens);
        memset(b, 0, sizeof(*b));
        if (err && strncmp(err->msg, m->dir, strlen(m->dir)) != 0)
            infd_error_prefix(err, "%s", m->dir);
        return st;
    }
    m->n_buckets++;
    *out = b;
    return INFD_STATUS_OK;
}

void asr_model_destroy(asr_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_buckets; i++) {
        infd_context_destroy(m->buckets[i].ctx);
        infd_plan_destroy(m->buckets[i].plan);
        free(m->buckets[i].feats);
        free(m->buckets[i].enc);
        free(m->buckets[i].lengths);
        free(m->buckets[i].enc_lens);
    }
    infd_weights_destroy(m->enc_w);
    for (int i = 0; i < 5; i++)
        ca_batch_fini(&m->ca_batches[i]);
    infd_context_destroy(m->ca_ctx);
    infd_plan_destroy(m->ca_plan);
    free(m->ca_feats);
    free(m->ca_enc);
    for (int i = 0; i < DJ_SLOTS; i++)
        dj_batch_fini(&m->dj_batches[i]);
    infd_context_destroy(m->dj_ctx);
    infd_plan_destroy(m->dj);
    infd_weights_destroy(m->dj_w);
    infd_context_destroy(m->pred_ctx);
    infd_plan_destroy(m->pred);
    infd_context_destroy(m->joiner_ctx);
    infd_plan_destroy(m->joiner);
    for (int k = 0; k < 2; k++)
        free(m->pending[k]);
    pthread_mutex_destroy(&m->lock);
    free(m->dj_enc);
    free(m->logits);
    if (m->pieces)
        for (int i = 0; i < MAX_VOCAB; i++)
            free(m->pieces[i]);
    free(m->pieces);
    feature_pool_destroy(m->fpool);
    asr_features_destroy(m->feat);
    free(m->contract_path);
    free(m->name);
    free(m->dir);
    free(m);
}

static bool file_in(const char *dir, const char *name)
{
    char *p = path_join(dir, name);
    bool ok = p && access(p, R_OK) == 0;
    free(p);
    return ok;
}

/* The onnx-asr layout when encoder-model.onnx is there, sherpa-onnx's
 * when encoder.onnx is; NOT_FOUND listing both otherwise. */
static infd_status detect_layout(asr_model *m, infd_error *err)
{
    if (file_in(m->dir, "encoder-model.onnx")) {
        m->layout = LAYOUT_ONNX_ASR;
        m->enc_file = "encoder-model.onnx";
        m->vocab_file = "vocab.txt";
    } else if (file_in(m->dir, "encoder.onnx")) {
        m->layout = LAYOUT_SHERPA;
        m->enc_file = "encoder.onnx";
        m->vocab_file = "tokens.txt";
    } else {
        return infd_error_set(err, INFD_STATUS_NOT_FOUND,
                              "%s: not a Parakeet-TDT model directory: expected the onnx-asr "
                              "layout (encoder-model.onnx, decoder_joint-model.onnx, vocab.txt, "
                              "config.json) or sherpa-onnx's (encoder.onnx, decoder.onnx, "
                              "joiner.onnx, tokens.txt)",
                              m->dir);
    }
    return INFD_STATUS_OK;
}

/* Metadata key `key` of the sherpa-onnx encoder as an integer in [lo, hi]:
 * 0 and *v untouched when absent; INVALID_ARGUMENT naming it otherwise. */
static infd_status meta_int(const asr_model *m, const char *path, const char *key, long lo, long hi,
                            int64_t *v, infd_error *err)
{
    const char *s = infd_weights_metadata(m->enc_w, key);
    if (!s)
        return INFD_STATUS_OK;
    char *end = NULL;
    long x = strtol(s, &end, 10);
    if (!*s || !end || *end || x < lo || x > hi)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: metadata %s is \"%.40s\"; expected an integer in [%ld, %ld]",
                              path, key, s, lo, hi);
    *v = x;
    return INFD_STATUS_OK;
}

/* sherpa-onnx's metadata keys on encoder.onnx (its NeMo export scripts):
 * normalize_type, subsampling_factor and feat_dim set and check what the
 * encoder declares; window_size and chunk_shift, with the cache inputs,
 * make a cache-aware encoder (vocab_size, pred_rnn_layers and pred_hidden
 * are checked once the other files are read: sherpa_metadata_sizes). */
static infd_status sherpa_metadata(asr_model *m, const char *path, infd_error *err)
{
    const char *norm = infd_weights_metadata(m->enc_w, "normalize_type");
    if (norm && strcmp(norm, "per_feature") == 0)
        m->normalize = ASR_NORM_PER_FEATURE;
    else if (norm && (!*norm || strcmp(norm, "NA") == 0 || strcmp(norm, "None") == 0))
        m->normalize = ASR_NORM_NONE;
    else if (norm)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: metadata normalize_type is \"%.40s\"; infd reads "
                              "per_feature and \"\" (none)",
                              path, norm);
    int64_t sub = m->subsampling, feat = m->n_mels, window = 0, shift = 0;
    infd_status st = meta_int(m, path, "subsampling_factor", 1, 64, &sub, err);
    if (st == INFD_STATUS_OK)
        st = meta_int(m, path, "feat_dim", 1, 512, &feat, err);
    if (st == INFD_STATUS_OK && feat != m->n_mels)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: metadata feat_dim is %lld, but audio_signal declares %d "
                            "features",
                            path, (long long)feat, m->n_mels);
    m->subsampling = (int)sub;
    int n_in = infd_weights_n_inputs(m->enc_w);
    infd_graph_input gi;
    if (st != INFD_STATUS_OK || n_in == 2)
        return st;
    /* cache-aware: audio_signal, length, cache_last_channel, cache_last_time,
     * cache_last_channel_len */
    const char *names[5] = { "audio_signal", "length", "cache_last_channel", "cache_last_time",
                             "cache_last_channel_len" };
    for (int i = 0; i < 5 && st == INFD_STATUS_OK; i++) {
        st = infd_weights_input(m->enc_w, i, &gi, err);
        if (st == INFD_STATUS_OK && (n_in != 5 || strcmp(gi.name, names[i]) != 0))
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: %d inputs, input %d '%s'; an encoder has 2 (audio_signal, "
                                "length) or, cache-aware, 5 (audio_signal, length, "
                                "cache_last_channel, cache_last_time, cache_last_channel_len)",
                                path, n_in, i, gi.name);
        if (st == INFD_STATUS_OK && (i == 2 || i == 3)) {
            infd_shape *sh = i == 2 ? &m->cc_shape : &m->ct_shape;
            bool ok = gi.shape.rank == 4;
            *sh = gi.shape;
            sh->dims[0] = 1;
            for (int d = 1; ok && d < 4; d++) {
                char key[64];
                int64_t v = gi.shape.dims[d];
                snprintf(key, sizeof(key), "%s_dim%d", names[i], d);
                st = meta_int(m, path, key, 1, 1 << 20, &v, err);
                ok = st == INFD_STATUS_OK && v >= 1 &&
                     (gi.shape.dims[d] < 0 || gi.shape.dims[d] == v);
                sh->dims[d] = v;
            }
            if (st == INFD_STATUS_OK && !ok)
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "%s: input %s has rank %d and dims that neither it nor the "
                                    "metadata keys %s_dim1..3 give consistently; expected "
                                    "[batch, layers, ., .]",
                                    path, names[i], (int)gi.shape.rank, names[i]);
        }
    }
    if (st == INFD_STATUS_OK)
        st = meta_int(m, path, "window_size", 1, 100000, &window, err);
    if (st == INFD_STATUS_OK)
        st = meta_int(m, path, "chunk_shift", 1, 100000, &shift, err);
    if (st == INFD_STATUS_OK && (!window || !shift))
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: a cache-aware encoder needs the metadata keys window_size and "
                            "chunk_shift (feature frames a chunk takes and moves on)",
                            path);
    if (st == INFD_STATUS_OK && window < shift)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: window_size %lld is less than chunk_shift %lld; a window is the "
                            "shift and its pre-encode cache",
                            path, (long long)window, (long long)shift);
    if (st == INFD_STATUS_OK && m->normalize != ASR_NORM_NONE)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: a cache-aware encoder with per_feature normalisation; its "
                            "chunks need features that do not depend on the rest of the audio "
                            "(normalize_type \"\")",
                            path);
    if (st == INFD_STATUS_OK) {
        m->cache_aware = true;
        m->window = window;
        m->shift = shift;
        m->pre = window - shift;
        m->cc_n = (size_t)(m->cc_shape.dims[1] * m->cc_shape.dims[2] * m->cc_shape.dims[3]);
        m->ct_n = (size_t)(m->ct_shape.dims[1] * m->ct_shape.dims[2] * m->ct_shape.dims[3]);
    }
    return st;
}

/* vocab_size (V + 1), pred_rnn_layers and pred_hidden, when present, match
 * tokens.txt and decoder.onnx. */
static infd_status sherpa_metadata_sizes(asr_model *m, infd_error *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", m->dir, m->enc_file);
    int64_t vocab = m->vocab + 1, layers = m->n_layers, hidden = m->hidden;
    infd_status st = meta_int(m, path, "vocab_size", 1, MAX_VOCAB + 1, &vocab, err);
    if (st == INFD_STATUS_OK)
        st = meta_int(m, path, "pred_rnn_layers", 1, 64, &layers, err);
    if (st == INFD_STATUS_OK)
        st = meta_int(m, path, "pred_hidden", 1, 1 << 16, &hidden, err);
    if (st == INFD_STATUS_OK && vocab != m->vocab + 1)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: metadata vocab_size is %lld; %s has %d tokens and the blank", path,
                            (long long)vocab, m->vocab_file, m->vocab);
    if (st == INFD_STATUS_OK && (layers != m->n_layers || hidden != m->hidden))
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: metadata pred_rnn_layers %lld and pred_hidden %lld; "
                            "decoder.onnx's states are [%lld, batch, %lld]",
                            path, (long long)layers, (long long)hidden, (long long)m->n_layers,
                            (long long)m->hidden);
    return st;
}

/* The cache-aware encoder's plan: one chunk of `window` frames, the caches
 * at batch 1; checked by name, dtype and shape. */
static infd_status load_cache_aware(asr_model *m, infd_error *err)
{
    char file[4096];
    snprintf(file, sizeof(file), "%s/%s", m->dir, m->enc_file);
    infd_input_shape shapes[5] = {
        { .name = "audio_signal", .shape = { .rank = 3, .dims = { 1, m->n_mels, m->window } } },
        { .name = "length", .shape = { .rank = 1, .dims = { 1 } } },
        { .name = "cache_last_channel", .shape = m->cc_shape },
        { .name = "cache_last_time", .shape = m->ct_shape },
        { .name = "cache_last_channel_len", .shape = { .rank = 1, .dims = { 1 } } },
    };
    infd_plan_options o = plan_options(m, m->opts.n_threads, shapes, 5);
    infd_status st = infd_plan_create_from_weights(m->enc_w, &o, &m->ca_plan, err);
    infd_tensor_info t;
    if (st == INFD_STATUS_OK && infd_plan_n_outputs(m->ca_plan) != 5)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %d outputs; a cache-aware encoder has 5 (outputs, "
                            "encoded_lengths, cache_last_channel_next, cache_last_time_next, "
                            "cache_last_channel_next_len)",
                            file, infd_plan_n_outputs(m->ca_plan));
    int64_t frames = 0;
    if (st == INFD_STATUS_OK)
        st = check_io(m->ca_plan, true, 0, file, "outputs", INFD_DTYPE_FP32, 3,
                      (const int64_t[]){ 1, -1, -1 }, &t, err);
    if (st == INFD_STATUS_OK) {
        m->d_enc = t.shape.dims[1];
        m->ca_frames = frames = t.shape.dims[2];
        st = check_io(m->ca_plan, true, 1, file, "encoded_lengths", INFD_DTYPE_INT64, 1,
                      (const int64_t[]){ 1 }, &t, err);
    }
    if (st == INFD_STATUS_OK)
        st = check_io(m->ca_plan, true, 2, file, "cache_last_channel_next", INFD_DTYPE_FP32, 4,
                      m->cc_shape.dims, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->ca_plan, true, 3, file, "cache_last_time_next", INFD_DTYPE_FP32, 4,
                      m->ct_shape.dims, &t, err);
    if (st == INFD_STATUS_OK)
        st = check_io(m->ca_plan, true, 4, file, "cache_last_channel_next_len", INFD_DTYPE_INT64, 1,
                      (const int64_t[]){ 1 }, &t, err);
    for (int i = 2; i < 5 && st == INFD_STATUS_OK; i++) {
        static const infd_dtype want[5] = { INFD_DTYPE_FP32, INFD_DTYPE_INT64, INFD_DTYPE_FP32,
                                            INFD_DTYPE_FP32, INFD_DTYPE_INT64 };
        st = infd_plan_input(m->ca_plan, i, &t);
        if (st == INFD_STATUS_OK && t.dtype != want[i])
            st =
                infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: input %s is %s; expected %s",
                               file, t.name, infd_dtype_name(t.dtype), infd_dtype_name(want[i]));
    }
    if (st == INFD_STATUS_OK)
        st = infd_context_create(m->ca_plan, &m->ca_ctx, err);
    if (st == INFD_STATUS_OK) {
        asr_contract_record(&m->contract.nets[m->contract.n_nets++], "encoder", m->enc_file,
                            m->ca_plan);
        m->ca_feats = calloc((size_t)(m->n_mels * m->window), sizeof(float));
        m->ca_enc = calloc((size_t)(m->d_enc * frames), sizeof(float));
        if (!m->ca_feats || !m->ca_enc)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (st == INFD_STATUS_OK)
        infd_weights_trim(m->enc_w);
    return st;
}

/* The model's name (the directory's last component) and its contract's
 * path: `given`, or <parent>/contracts/<name>.contract.json. */
static infd_status model_paths(asr_model *m, const char *given)
{
    size_t len = strlen(m->dir);
    while (len > 1 && m->dir[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && m->dir[start - 1] != '/')
        start--;
    m->name = malloc(len - start + 1);
    if (!m->name)
        return INFD_STATUS_OUT_OF_MEMORY;
    memcpy(m->name, m->dir + start, len - start);
    m->name[len - start] = '\0';
    if (given) {
        m->contract_path = strdup(given);
    } else {
        size_t n = start + strlen(m->name) + 64;
        m->contract_path = malloc(n);
        if (m->contract_path)
            snprintf(m->contract_path, n, "%.*scontracts/%s.contract.json", (int)start, m->dir,
                     m->name);
    }
    return m->contract_path ? INFD_STATUS_OK : INFD_STATUS_OUT_OF_MEMORY;
}

/* The loaded model's facts (contract.h), checked against its contract file
 * when that is there (or was given). */
static infd_status check_contract(asr_model *m, infd_error *err)
{
    asr_contract *c = &m->contract;
    c->model = m->name;
    c->layout = m->layout == LAYOUT_ONNX_ASR ? "onnx-asr" : "sherpa-onnx";
    c->features = *asr_features_params(m->feat);
    c->subsampling = m->subsampling;
    c->d_model = m->d_enc;
    c->pred_layers = m->n_layers;
    c->pred_hidden = m->hidden;
    c->tdt = m->tdt;
    c->cache_kind = m->cache_aware ? "cache_aware" : "none";
    c->window = m->window;
    c->shift = m->shift;
    if (!m->opts.contract && access(m->contract_path, F_OK) != 0)
        return INFD_STATUS_OK;
    size_t n = 0;
    char *text = read_text(m->contract_path, &n, err);
    if (!text)
        return err ? err->code : INFD_STATUS_IO;
    infd_status st = asr_contract_check(c, text, n, m->contract_path, err);
    free(text);
    return st;
}

char *asr_model_contract_json(const asr_model *m)
{
    return asr_contract_json(&m->contract);
}

const char *asr_model_contract_path(const asr_model *m)
{
    return m->contract_path;
}

infd_status asr_model_load(const char *dir, const asr_model_options *o, asr_model **out,
                           infd_error *err)
{
    *out = NULL;
    asr_model *m = calloc(1, sizeof(*m));
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    pthread_mutex_init(&m->lock, NULL);
    m->normalize = ASR_NORM_PER_FEATURE;
    const char *dbg = getenv("INFD_ASR_DEBUG"), *guard = getenv("INFD_ASR_NAN_GUARD");
    m->debug = dbg && *dbg ? atoi(dbg) : 0;
    m->nan_guard = guard && *guard && strcmp(guard, "0") != 0;
    if (model_paths(m, o ? o->contract : NULL) != INFD_STATUS_OK) {
        asr_model_destroy(m);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (o)
        m->opts = *o;
    else
        asr_model_options_init(&m->opts);
    if (m->opts.bucket_frames <= 0)
        m->opts.bucket_frames = 256;
    if (m->opts.max_seconds <= 0)
        m->opts.max_seconds = 40;
    infd_status st = detect_layout(m, err);
    if (st == INFD_STATUS_OK && m->layout == LAYOUT_ONNX_ASR) {
        st = read_config(m, err);
    } else if (st == INFD_STATUS_OK) {
        /* sherpa-onnx: the features the encoder declares; NeMo's defaults. */
        char *path = path_join(dir, m->enc_file);
        st = path ? infd_weights_create(path, &m->enc_w, err)
                  : infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        infd_graph_input gi;
        if (st == INFD_STATUS_OK)
            st = infd_weights_input(m->enc_w, 0, &gi, err);
        if (st == INFD_STATUS_OK &&
            (gi.shape.rank != 3 || gi.shape.dims[1] < 1 || gi.shape.dims[1] > 512))
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: input 0 ('%s') does not declare its features: expected "
                                "audio_signal [batch, features, time]",
                                path, gi.name);
        if (st == INFD_STATUS_OK) {
            m->n_mels = (int)gi.shape.dims[1];
            m->subsampling = 8;
            m->max_symbols = 10;
            st = sherpa_metadata(m, path, err);
        }
        free(path);
    }
    if (st == INFD_STATUS_OK)
        st = read_vocab(m, err);
    if (st == INFD_STATUS_OK) {
        m->tdt = (asr_tdt_config){ .vocab = m->vocab,
                                   .durations = { 0, 1, 2, 3, 4 },
                                   .n_durations = 5,
                                   .max_symbols = m->max_symbols };
        asr_feature_params fp = asr_feature_params_nemo(m->n_mels);
        fp.normalize = m->normalize;
        st = asr_features_create(&fp, &m->feat, err);
        int64_t most = (int64_t)(m->opts.max_seconds * fp.sample_rate / fp.hop_length) + 1;
        m->max_frames =
            (most + m->opts.bucket_frames - 1) / m->opts.bucket_frames * m->opts.bucket_frames;
    }
    if (st == INFD_STATUS_OK && !m->enc_w) {
        char *path = path_join(dir, m->enc_file);
        st = path ? infd_weights_create(path, &m->enc_w, err)
                  : infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        free(path);
    }
    enc_bucket *b = NULL;
    if (st == INFD_STATUS_OK && m->cache_aware)
        st = load_cache_aware(m, err);
    else if (st == INFD_STATUS_OK) /* the first length checks the encoder and gives D */
        st = encoder_bucket(m, m->opts.bucket_frames, 1, &b, err);
    if (st == INFD_STATUS_OK &&
        b) { /* the first bucket's plan: the encoder's I/O, time dims chosen */
        asr_contract_record(&m->contract.nets[m->contract.n_nets++], "encoder", m->enc_file,
                            b->plan);
        m->contract.nets[0].in[0].dims[2] = -1;
        m->contract.nets[0].out[0].dims[2] = -1;
    }
    if (st == INFD_STATUS_OK) /* the plans hold what they read; a new length reloads */
        infd_weights_trim(m->enc_w);
    if (st == INFD_STATUS_OK)
        st = m->layout == LAYOUT_ONNX_ASR ? load_decoder(m, err) : load_sherpa(m, err);
    if (st == INFD_STATUS_OK && m->layout == LAYOUT_SHERPA)
        st = sherpa_metadata_sizes(m, err);
    if (st == INFD_STATUS_OK)
        st = check_contract(m, err);
    if (st != INFD_STATUS_OK) {
        asr_model_destroy(m);
        return st;
    }
    *out = m;
    return INFD_STATUS_OK;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The joint's result for stream s at frame t of its chunk: its two
 * argmaxes, the token over [0, V] and the duration index, from `idx` (a
 * plan that gives them) or from its V + 1 + D `logits`, which the NaN
 * guard checks. */
static infd_status joint_result(const asr_model *m, asr_stream *s, int64_t t, const float *logits,
                                const int64_t *idx, int *token, int *duration, infd_error *err)
{
    s->n_joint_runs++;
    if (m->joint_argmax) {
        *token = (int)idx[0];
        *duration = (int)idx[1];
    } else {
        if (m->nan_guard)
            for (int64_t i = 0; i < m->width; i++)
                if (!isfinite(logits[i]))
                    return infd_error_set(err, INFD_STATUS_INTERNAL,
                                          "%s: NaN guard: the joint's logit %lld is %g at frame "
                                          "%lld (chunk %lld)",
                                          m->dir, (long long)i, (double)logits[i],
                                          (long long)(s->tdt.frames_done + t),
                                          (long long)s->n_chunks);
        int k = 0, di = 0;
        for (int i = 1; i <= m->vocab; i++)
            if (logits[i] > logits[k])
                k = i;
        const float *dl = logits + m->vocab + 1;
        for (int i = 1; i < m->tdt.n_durations; i++)
            if (dl[i] > dl[di])
                di = i;
        *token = k;
        *duration = di;
    }
    if (m->debug >= 2)
        fprintf(stderr, "infd asr: joint at frame %lld: token %d, duration index %d\n",
                (long long)(s->tdt.frames_done + t), *token, *duration);
    return INFD_STATUS_OK;
}

/* The TDT decoder's networks (tdt.h) of the sherpa-onnx layout, for the
 * stream m->cur: the predictor runs when a token is emitted (and on the
 * start-of-sequence blank), the joiner per frame on its output. (The
 * onnx-asr layout's decoder-joint is run by decode_rows.) */
static infd_status joint(void *user, int64_t t, int *token, int *duration, infd_error *err)
{
    asr_model *m = user;
    for (int64_t d = 0; d < m->d_enc; d++)
        m->dj_enc[d] = m->enc_out[d * m->enc_stride + t];
    infd_status st = infd_plan_run(m->joiner, m->joiner_ctx, m->jn_in, 2, m->jn_out, 1, err);
    m->n_joint_steps++;
    if (st != INFD_STATUS_OK)
        return st;
    return joint_result(m, m->cur, t, m->logits, m->joint_idx, token, duration, err);
}

static infd_status predict(void *user, int token, infd_error *err)
{
    asr_model *m = user;
    asr_stream *s = m->cur;
    size_t sb = sizeof(float) * (size_t)(m->n_layers * m->hidden);
    if (token == m->vocab) { /* start of sequence: zero state, the blank as last token */
        memset(s->state[0], 0, sb);
        memset(s->state[1], 0, sb);
    }
    s->last_token = token;
    m->dj_target = token;
    infd_status st = infd_plan_run(m->pred, m->pred_ctx, m->pr_in, 4, m->pr_out, 4, err);
    if (st != INFD_STATUS_OK)
        return st;
    memcpy(s->state[0], m->pending[0], sb);
    memcpy(s->state[1], m->pending[1], sb);
    return INFD_STATUS_OK;
}

/* Points the decoder's views of the committed state and the predictor's
 * output at stream s (m->lock held). */
static void bind(asr_model *m, asr_stream *s)
{
    m->cur = s;
    m->pr_in[2].data = s->state[0];
    m->pr_in[3].data = s->state[1];
    m->pr_out[0].data = s->g;
    m->jn_in[1].data = s->g;
}

void asr_result_fini(asr_result *r)
{
    if (!r)
        return;
    free(r->text);
    free(r->tokens);
    free(r->words);
    memset(r, 0, sizeof(*r));
}

/* The padded feature frames of a window of n samples. */
static int64_t window_frames(const asr_model *m, int64_t n)
{
    int64_t bf = m->opts.bucket_frames;
    return (asr_features_frames(m->feat, n) + bf - 1) / bf * bf;
}

/* A stream's ready chunk (buffered streaming): the chunk [cs, ce) and its
 * window [ws, we) in samples, whether it is the last, the window's padded
 * feature frames, and its row in the encoder's batch. */
typedef struct chunk_job {
    asr_stream *s;
    int64_t cs, ce, ws, we, total, frames;
    bool last;
    int row;
} chunk_job;

static void plan_chunk(asr_stream *s, chunk_job *j)
{
    const asr_model *m = s->m;
    memset(j, 0, sizeof(*j));
    j->s = s;
    j->total = s->buf_start + s->buf_len;
    j->cs = s->next;
    j->ce = j->cs + s->chunk;
    j->last = s->finished && j->ce >= j->total;
    if (j->last)
        j->ce = j->total;
    j->ws = j->cs - s->left > 0 ? j->cs - s->left : 0;
    j->we = j->ce + s->right < j->total ? j->ce + s->right : j->total;
    j->frames = window_frames(m, j->we - j->ws);
}

/* The features of samples [ws, we) of s, as asr_features_compute gives
 * them over that window alone (into out, feature-major with `stride`),
 * computing only what the last window did not: a frame whose samples (and
 * the one before them, for the pre-emphasis) lie inside the window is the
 * same as the frame of the whole signal there, so it comes from the
 * stream's cache of raw frames (made once, from the stream's samples);
 * the few frames at the window's edges, which see its zero padding, are
 * made from the window alone; then the window's normalisation. Windows
 * start on a hop (chunks and contexts are whole encoder frames). Returns
 * the valid frames. */
static int64_t window_features(const asr_model *m, asr_features *f, asr_stream *s, int64_t ws,
                               int64_t we, float *out, int64_t stride)
{
    const asr_feature_params *fp = asr_features_params(f);
    int64_t n = we - ws;
    const float *win = s->buf + (ws - s->buf_start);
    if (!s->fc || ws % fp->hop_length != 0)
        return asr_features_compute(f, win, n, out, stride);
    int64_t frames = asr_features_frames(f, n), valid = asr_features_valid_frames(f, n);
    int64_t g0 = ws / fp->hop_length;
    for (int64_t t = 0; t < frames; t++) {
        if (t >= valid) {
            continue; /* padding: normalize zeroes it */
        }
        bool inside = asr_features_first_sample(f, t) >= 0 && asr_features_end_sample(f, t) <= n;
        if (!inside) {
            asr_features_compute_range(f, win, 0, n, t, 1, out + t, stride);
            continue;
        }
        int64_t g = g0 + t, slot = g % s->fc_n;
        float *col = s->fc + slot * m->n_mels;
        if (s->fc_idx[slot] != g) {
            asr_features_compute_range(f, s->buf, s->buf_start, -1, g, 1, col, 1);
            s->fc_idx[slot] = g;
        }
        for (int64_t k = 0; k < m->n_mels; k++)
            out[k * stride + t] = col[k];
    }
    asr_features_normalize(f, out, stride, frames, valid);
    return valid;
}

/* The feature threads: a batch's windows are handed out one at a time to
 * the caller and the pool's threads, each with its own extractor (a
 * window belongs to one stream, whose frame cache only that window's
 * thread touches). */
typedef struct feature_pool feature_pool;

typedef struct feature_thread {
    feature_pool *p;
    int i;
} feature_thread;

struct feature_pool {
    int n; /* threads besides the caller */
    pthread_t th[ASR_FEATURE_THREADS];
    feature_thread arg[ASR_FEATURE_THREADS];
    asr_features *feat[ASR_FEATURE_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen; /* the batch being computed */
    bool stop;
    int next, k, finished; /* windows handed out, in the batch, done */
    /* the batch */
    const asr_model *m;
    chunk_job *jobs;
    float *feats;
    int64_t *lengths;
    size_t row;
    int64_t frames;
};

/* Takes windows of the batch until none is left. */
static void feature_take(feature_pool *p, asr_features *f)
{
    pthread_mutex_lock(&p->mu);
    while (p->next < p->k) {
        int r = p->next++;
        pthread_mutex_unlock(&p->mu);
        chunk_job *j = &p->jobs[r];
        p->lengths[r] =
            window_features(p->m, f, j->s, j->ws, j->we, p->feats + p->row * r, p->frames);
        pthread_mutex_lock(&p->mu);
        if (++p->finished == p->k)
            pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
}

static void *feature_main(void *arg)
{
    feature_thread *t = arg;
    feature_pool *p = t->p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        feature_take(p, p->feat[t->i]);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void feature_pool_destroy(feature_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        pthread_join(p->th[i], NULL);
        asr_features_destroy(p->feat[i]);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}

/* A pool of one thread per core but the caller's (at most
 * ASR_FEATURE_THREADS - 1), or NULL when there is one core or it cannot be
 * made (the caller then computes alone). */
static feature_pool *feature_pool_create(const asr_model *m)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores > ASR_FEATURE_THREADS ? ASR_FEATURE_THREADS - 1 : (int)cores - 1;
    if (n < 1)
        return NULL;
    feature_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < n; i++) {
        if (asr_features_create(asr_features_params(m->feat), &p->feat[i], NULL) != INFD_STATUS_OK)
            break;
        p->arg[i] = (feature_thread){ p, i };
        if (pthread_create(&p->th[i], NULL, feature_main, &p->arg[i]) != 0) {
            asr_features_destroy(p->feat[i]);
            break;
        }
        p->n++;
    }
    if (p->n == 0) {
        feature_pool_destroy(p);
        return NULL;
    }
    return p;
}

/* The features of the windows of jobs[0, k), row r of `feats` for job r,
 * on the caller's thread and the pool's. */
static void batch_features(asr_model *m, chunk_job *jobs, int k, float *feats, int64_t *lengths,
                           size_t row, int64_t frames)
{
    if (k >= 2 && !m->fpool)
        m->fpool = feature_pool_create(m);
    feature_pool *p = m->fpool;
    if (!p || k < 2) {
        for (int r = 0; r < k; r++)
            lengths[r] = window_features(m, m->feat, jobs[r].s, jobs[r].ws, jobs[r].we,
                                         feats + row * r, frames);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->m = m;
    p->jobs = jobs;
    p->feats = feats;
    p->lengths = lengths;
    p->row = row;
    p->frames = frames;
    p->next = p->finished = 0;
    p->k = k;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    feature_take(p, m->feat);
    pthread_mutex_lock(&p->mu);
    while (p->finished < p->k)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Encodes the windows of jobs[0, k) (the same padded length) in one run of
 * the encoder plan for a batch of the next power of two: each row's
 * features over its window alone, the rows past k copies of row 0's
 * length over zeros. */
static infd_status encode_batch(asr_model *m, chunk_job *jobs, int k, enc_bucket **out,
                                infd_error *err)
{
    int64_t batch = 1, frames = jobs[0].frames;
    while (batch < k)
        batch *= 2;
    enc_bucket *b = NULL;
    infd_status st = encoder_bucket(m, frames, batch, &b, err);
    if (st != INFD_STATUS_OK)
        return st;
    size_t row = (size_t)(m->n_mels * frames);
    uint64_t t0 = now_ns();
    memset(b->feats, 0, sizeof(float) * row * (size_t)batch);
    for (int r = 0; r < k; r++)
        jobs[r].row = r;
    batch_features(m, jobs, k, b->feats, b->lengths, row, frames);
    for (int64_t r = k; r < batch; r++)
        b->lengths[r] = b->lengths[0];
    infd_tensor in[2], outs[2];
    memset(in, 0, sizeof(in));
    memset(outs, 0, sizeof(outs));
    in[0] = (infd_tensor){ .dtype = INFD_DTYPE_FP32,
                           .shape = { .rank = 3, .dims = { batch, m->n_mels, frames } },
                           .data = b->feats,
                           .nbytes = sizeof(float) * row * (size_t)batch };
    in[1] = (infd_tensor){ .dtype = INFD_DTYPE_INT64,
                           .shape = { .rank = 1, .dims = { batch } },
                           .data = b->lengths,
                           .nbytes = 8 * (size_t)batch };
    outs[0] = (infd_tensor){ .data = b->enc,
                             .nbytes = sizeof(float) * (size_t)(batch * m->d_enc * b->out_frames) };
    outs[1] = (infd_tensor){ .data = b->enc_lens, .nbytes = 8 * (size_t)batch };
    uint64_t t1 = now_ns();
    st = infd_plan_run(b->plan, b->ctx, in, 2, outs, 2, err);
    m->t_features += t1 - t0;
    m->t_encoder += now_ns() - t1;
    m->n_windows += k;
    m->n_enc_runs++;
    for (int r = 0; st == INFD_STATUS_OK && r < k; r++)
        if (b->enc_lens[r] < 0 || b->enc_lens[r] > b->out_frames)
            st = infd_error_set(err, INFD_STATUS_INTERNAL,
                                "%s: the encoder gave encoded_lengths %lld of %lld frames", m->dir,
                                (long long)b->enc_lens[r], (long long)b->out_frames);
    if (st == INFD_STATUS_OK)
        *out = b;
    return st;
}

double asr_model_frame_seconds(const asr_model *m)
{
    const asr_feature_params *fp = asr_features_params(m->feat);
    return (double)fp->hop_length * m->subsampling / fp->sample_rate;
}

/* Samples per encoder frame (1280 for Parakeet: hop 160 x subsampling 8). */
static int64_t frame_samples(const asr_model *m)
{
    return (int64_t)asr_features_params(m->feat)->hop_length * m->subsampling;
}

void asr_stream_options_init(asr_stream_options *o)
{
    memset(o, 0, sizeof(*o));
    o->chunk_s = 2.0;
    o->left_s = 10.0;
    o->right_s = 2.0;
    o->rule1_s = 2.4;
    o->rule2_s = 1.2;
    o->rule3_s = 20.0;
}

/* Seconds as whole encoder frames' samples into *out; INVALID_ARGUMENT
 * naming `what` when they are not. */
static infd_status frames_of(const asr_model *m, double sec, const char *what, int64_t *out,
                             infd_error *err)
{
    double fs = asr_model_frame_seconds(m);
    double k = sec / fs;
    if (!(sec >= 0) || sec > 3600 || fabs(k - floor(k + 0.5)) > 1e-6)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s is %g s; it must be a whole number of encoder frames "
                              "(%g s each) in [0, 3600]",
                              m->dir, what, sec, fs);
    *out = (int64_t)floor(k + 0.5) * frame_samples(m);
    return INFD_STATUS_OK;
}

static infd_status window_fits(const asr_model *m, int64_t chunk, int64_t left, int64_t right,
                               infd_error *err)
{
    int64_t rate = asr_model_sample_rate(m);
    if (window_frames(m, left + chunk + right) > m->max_frames)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: a window of %.2f + %.2f + %.2f s is longer than the %.1f s "
                              "encoded at once (max_seconds)",
                              m->dir, (double)left / rate, (double)chunk / rate,
                              (double)right / rate, m->opts.max_seconds);
    return INFD_STATUS_OK;
}

/* The options' chunk, left and right contexts in samples (0 for an offline
 * stream), checked: whole encoder frames, a chunk of one at least, a window
 * the model encodes at once, endpoint rules >= 0. */
static infd_status stream_lengths(const asr_model *m, const asr_stream_options *o, int64_t *chunk,
                                  int64_t *left, int64_t *right, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    *chunk = *left = *right = 0;
    if (o->chunk_s != 0) {
        st = frames_of(m, o->chunk_s, "the chunk", chunk, err);
        if (st == INFD_STATUS_OK)
            st = frames_of(m, o->left_s, "the left context", left, err);
        if (st == INFD_STATUS_OK)
            st = frames_of(m, o->right_s, "the right context", right, err);
        if (st == INFD_STATUS_OK && *chunk == 0)
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: the chunk is %g s; it must be at least one encoder frame "
                                "(%g s)",
                                m->dir, o->chunk_s, asr_model_frame_seconds(m));
        if (st == INFD_STATUS_OK)
            st = window_fits(m, *chunk, *left, *right, err);
    }
    if (st == INFD_STATUS_OK && (!(o->rule1_s >= 0) || !(o->rule2_s >= 0) || !(o->rule3_s >= 0)))
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: endpoint rules of %g, %g and %g s; they must be >= 0 (0: off)",
                            m->dir, o->rule1_s, o->rule2_s, o->rule3_s);
    return st;
}

infd_status asr_stream_options_check(const asr_model *m, const asr_stream_options *o,
                                     infd_error *err)
{
    int64_t chunk, left, right;
    return stream_lengths(m, o, &chunk, &left, &right, err);
}

void asr_stream_destroy(asr_stream *s)
{
    if (!s)
        return;
    asr_resampler_destroy(s->rs);
    asr_tap_close(s->tap);
    free(s->buf);
    free(s->state[0]);
    free(s->state[1]);
    free(s->g);
    free(s->tokens);
    for (int k = 0; k < 2; k++) {
        free(s->cc[k]);
        free(s->ct[k]);
    }
    free(s->fc);
    free(s->fc_idx);
    free(s);
}

infd_status asr_stream_create(asr_model *m, const asr_stream_options *o, asr_stream **out,
                              infd_error *err)
{
    *out = NULL;
    asr_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    s->m = m;
    if (o)
        s->o = *o;
    else
        asr_stream_options_init(&s->o);
    s->offline = s->o.chunk_s == 0;
    infd_status st = stream_lengths(m, &s->o, &s->chunk, &s->left, &s->right, err);
    size_t sb = sizeof(float) * (size_t)(m->n_layers * m->hidden);
    if (st == INFD_STATUS_OK) {
        /* room for a window and a second of audio, and for the most
         * tokens 30 s can give (every frame max_symbols) */
        s->buf_cap = s->left + s->chunk + s->right + asr_model_sample_rate(m);
        if (m->cache_aware) {
            s->buf_cap += (m->window + 4) * asr_features_params(m->feat)->hop_length +
                          asr_features_params(m->feat)->n_fft;
            for (int k = 0; k < 2 && st == INFD_STATUS_OK; k++) {
                s->cc[k] = calloc(m->cc_n, sizeof(float));
                s->ct[k] = calloc(m->ct_n, sizeof(float));
                if (!s->cc[k] || !s->ct[k])
                    st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            }
        }
        if (!m->cache_aware && !s->offline) {
            /* a window's frames and one more chunk's */
            int hop = asr_features_params(m->feat)->hop_length;
            s->fc_n = (s->left + 2 * s->chunk + s->right) / hop + 2;
            s->fc = malloc((size_t)(s->fc_n * m->n_mels) * sizeof(float));
            s->fc_idx = malloc((size_t)s->fc_n * sizeof(int64_t));
            if (!s->fc || !s->fc_idx)
                st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            for (int64_t i = 0; s->fc_idx && i < s->fc_n; i++)
                s->fc_idx[i] = -1;
        }
        s->cap_tokens = (int64_t)(30.0 / asr_model_frame_seconds(m) + 1) * m->tdt.max_symbols;
        s->buf = malloc((size_t)s->buf_cap * sizeof(float));
        s->state[0] = calloc(1, sb);
        s->state[1] = calloc(1, sb);
        s->g = calloc((size_t)m->hidden, sizeof(float));
        s->tokens = calloc((size_t)s->cap_tokens, sizeof(asr_tdt_token));
        if (st == INFD_STATUS_OK &&
            (!s->buf || !s->state[0] || !s->state[1] || !s->g || !s->tokens))
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (st != INFD_STATUS_OK) {
        asr_stream_destroy(s);
        return st;
    }
    asr_tdt_state_reset(&s->tdt);
    s->last_token = m->vocab;
    if (getenv("INFD_ASR_TAP_DIR")) {
        char settings[2 * PATH_MAX + 512], path[PATH_MAX], model[2 * PATH_MAX];
        if (!realpath(m->dir, path))
            snprintf(path, sizeof(path), "%s", m->dir);
        size_t at = 0; /* a JSON string: quotes and backslashes escaped, controls dropped */
        for (const char *c = path; *c && at + 2 < sizeof(model); c++) {
            if (*c == '"' || *c == '\\')
                model[at++] = '\\';
            if ((unsigned char)*c >= 0x20)
                model[at++] = *c;
        }
        model[at] = '\0';
        snprintf(settings, sizeof(settings),
                 "\"model\":\"%s\",\"device\":\"%s\",\"device_index\":%d,"
                 "\"precision\":%d,\"n_threads\":%d,"
                 "\"bucket_frames\":%d,\"max_seconds\":%.17g,\"chunk_s\":%.17g,"
                 "\"left_s\":%.17g,\"right_s\":%.17g,\"rule1_s\":%.17g,\"rule2_s\":%.17g,"
                 "\"rule3_s\":%.17g",
                 model, m->opts.device == INFD_DEVICE_CUDA ? "cuda" : "cpu", m->opts.device_index,
                 (int)m->opts.precision, m->opts.n_threads, m->opts.bucket_frames,
                 m->opts.max_seconds, s->o.chunk_s, s->o.left_s, s->o.right_s, s->o.rule1_s,
                 s->o.rule2_s, s->o.rule3_s);
        s->tap = asr_tap_open(settings);
    }
    *out = s;
    return INFD_STATUS_OK;
}

/* Room for `more` samples after the buffered ones. */
static infd_status reserve_samples(asr_stream *s, int64_t more, infd_error *err)
{
    if (s->buf_len + more <= s->buf_cap)
        return INFD_STATUS_OK;
    int64_t cap = s->buf_cap * 2 > s->buf_len + more ? s->buf_cap * 2 : s->buf_len + more;
    if (cap > ASR_AUDIO_MAX_FRAMES)
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "%s: more than %lld samples held by one stream", s->m->dir,
                              (long long)ASR_AUDIO_MAX_FRAMES);
    float *nb = realloc(s->buf, (size_t)cap * sizeof(float));
    if (!nb)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for %lld samples",
                              (long long)cap);
    s->buf = nb;
    s->buf_cap = cap;
    return INFD_STATUS_OK;
}

/* Appends what the resampler gives for in[0, n) (NULL: its flush). */
static infd_status resample_in(asr_stream *s, const float *in, int64_t n, infd_error *err)
{
    int rate = asr_model_sample_rate(s->m);
    for (;;) {
        int64_t room = (int64_t)((double)n * rate / s->rate_in) + 64;
        infd_status st = reserve_samples(s, room, err);
        int64_t used = 0, made = 0;
        if (st == INFD_STATUS_OK)
            st = asr_resampler_process(s->rs, in, n, &used, s->buf + s->buf_len,
                                       s->buf_cap - s->buf_len, &made, err);
        if (st != INFD_STATUS_OK)
            return st;
        s->buf_len += made;
        if (in) {
            in += used;
            n -= used;
            if (n == 0)
                return INFD_STATUS_OK;
        } else if (made == 0) {
            return INFD_STATUS_OK;
        }
    }
}

infd_status asr_stream_accept(asr_stream *s, int sample_rate, const float *samples, int64_t n,
                              infd_error *err)
{
    asr_model *m = s->m;
    if (s->finished && n > 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "audio after the input finished");
    if (sample_rate < ASR_AUDIO_MIN_RATE || sample_rate > ASR_AUDIO_MAX_RATE)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "a sample rate of %d Hz; it must be in [%d, %d]", sample_rate,
                              ASR_AUDIO_MIN_RATE, ASR_AUDIO_MAX_RATE);
    if (s->rate_in && sample_rate != s->rate_in)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "the sample rate changed from %d to %d Hz within the stream",
                              s->rate_in, sample_rate);
    if (n < 0 || (n > 0 && !samples))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%lld samples at %p", (long long)n,
                              (const void *)samples);
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(samples[i]) <= ASR_AUDIO_MAX_ABS))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "sample %lld of the chunk is %g; samples are expected in "
                                  "[-1, 1] (at most %g accepted)",
                                  (long long)i, (double)samples[i], (double)ASR_AUDIO_MAX_ABS);
    if (n == 0)
        return INFD_STATUS_OK;
    asr_tap_accept(s->tap, sample_rate, samples, n);
    if (!s->rate_in) {
        if (sample_rate != asr_model_sample_rate(m)) {
            infd_status st =
                asr_resampler_create(sample_rate, asr_model_sample_rate(m), &s->rs, err);
            if (st != INFD_STATUS_OK)
                return st;
        }
        s->rate_in = sample_rate;
    }
    if (s->rs)
        return resample_in(s, samples, n, err);
    infd_status st = reserve_samples(s, n, err);
    if (st != INFD_STATUS_OK)
        return st;
    memcpy(s->buf + s->buf_len, samples, (size_t)n * sizeof(float));
    s->buf_len += n;
    return INFD_STATUS_OK;
}

/* Chunked decoding of audio longer than one encoding, for offline streams:
 * chunks of ASR_CHUNK_S seconds, each with ASR_LEFT_S before it and
 * ASR_RIGHT_S after (whole encoder frames, 80 ms for Parakeet). */
#define ASR_CHUNK_S 20.0
#define ASR_LEFT_S  10.0
#define ASR_RIGHT_S 4.96

void asr_stream_finish(asr_stream *s)
{
    if (s->finished)
        return;
    asr_tap_finish(s->tap);
    if (s->rs) {
        infd_error e = { 0 };
        if (resample_in(s, NULL, 0, &e) != INFD_STATUS_OK)
            fprintf(stderr, "infd asr: flushing the resampler: %s\n", e.msg);
    }
    s->finished = true;
    if (!s->offline)
        return;
    /* the whole audio in one window when it fits, else NeMo's buffered
     * chunks */
    asr_model *m = s->m;
    int64_t unit = frame_samples(m), total = s->buf_start + s->buf_len;
    if (window_frames(m, total) <= m->max_frames) {
        s->chunk = total > 0 ? (total + unit - 1) / unit * unit : unit;
        s->left = s->right = 0;
    } else {
        int64_t rate = asr_model_sample_rate(m);
        s->chunk = (int64_t)(ASR_CHUNK_S * rate / unit + 0.5) * unit;
        s->left = (int64_t)(ASR_LEFT_S * rate / unit + 0.5) * unit;
        s->right = (int64_t)(ASR_RIGHT_S * rate / unit + 0.5) * unit;
    }
}

bool asr_stream_ready(const asr_stream *s)
{
    int64_t total = s->buf_start + s->buf_len;
    const asr_model *m = s->m;
    if (m->cache_aware) { /* the next window's features can be made */
        if (s->done || (s->offline && !s->finished))
            return false;
        if (s->finished) /* frames past the pre-encode cache are left */
            return s->next_frame + m->pre < asr_features_valid_frames(m->feat, total);
        return total >= asr_features_end_sample(m->feat, s->next_frame + m->window - 1);
    }
    if (s->done || s->chunk == 0)
        return false;
    return s->finished ? s->next < total : total >= s->next + s->chunk + s->right;
}

bool asr_stream_done(const asr_stream *s)
{
    return s->finished && !asr_stream_ready(s);
}

/* Room for `more` tokens after the segment's. */
static infd_status reserve_tokens(asr_stream *s, int64_t more, infd_error *err)
{
    if (s->n_tokens + more <= s->cap_tokens)
        return INFD_STATUS_OK;
    int64_t cap = s->cap_tokens * 2 > s->n_tokens + more ? s->cap_tokens * 2 : s->n_tokens + more;
    asr_tdt_token *nt = realloc(s->tokens, (size_t)cap * sizeof(asr_tdt_token));
    if (!nt)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for %lld tokens",
                              (long long)cap);
    s->tokens = nt;
    s->cap_tokens = cap;
    return INFD_STATUS_OK;
}

/* INFD_ASR_NAN_GUARD: the window's features and its encoder frames are
 * finite. */
static infd_status guard_window(const asr_model *m, const float *feats, int64_t frames,
                                const float *enc, int64_t out_frames, int64_t enc_len,
                                int64_t chunk, infd_error *err)
{
    for (int64_t i = 0; i < m->n_mels * frames; i++)
        if (!isfinite(feats[i]))
            return infd_error_set(err, INFD_STATUS_INTERNAL,
                                  "%s: NaN guard: feature %lld of frame %lld is %g (chunk %lld)",
                                  m->dir, (long long)(i / frames), (long long)(i % frames),
                                  (double)feats[i], (long long)chunk);
    for (int64_t d = 0; d < m->d_enc; d++)
        for (int64_t t = 0; t < enc_len; t++) {
            float v = enc[d * out_frames + t];
            if (!isfinite(v))
                return infd_error_set(err, INFD_STATUS_INTERNAL,
                                      "%s: NaN guard: the encoder's output %lld of frame %lld of "
                                      "the window is %g (chunk %lld)",
                                      m->dir, (long long)d, (long long)t, (double)v,
                                      (long long)chunk);
        }
    return INFD_STATUS_OK;
}

/* Drops the buffered samples before sample `keep`, moving the rest to the
 * buffer's start (no allocation). */
static void drop_before(asr_stream *s, int64_t keep)
{
    int64_t drop = (keep > 0 ? keep : 0) - s->buf_start;
    if (drop > s->buf_len)
        drop = s->buf_len;
    if (drop > 0) {
        memmove(s->buf, s->buf + drop, (size_t)(s->buf_len - drop) * sizeof(float));
        s->buf_start += drop;
        s->buf_len -= drop;
    }
}

/* A view of n elements of dtype at data. */
static infd_tensor view(infd_dtype dtype, const infd_shape *shape, void *data)
{
    infd_tensor t;
    memset(&t, 0, sizeof(t));
    size_t nb = 0;
    infd_tensor_nbytes_for(dtype, shape, &nb, NULL);
    infd_tensor_init_view(&t, dtype, shape, data, nb, NULL);
    return t;
}

/* The onnx-asr decoder-joint at batch 1 << slot (m->lock held): slot 0 is
 * the model's own plan; the others are built on first use from its
 * weights, with the argmaxes appended as the batch-1 plan has them. The
 * buffers are sized from the plan's inputs and outputs. */
static infd_status dj_batch_get(asr_model *m, int slot, dj_batch **out, infd_error *err)
{
    dj_batch *b = &m->dj_batches[slot];
    *out = b;
    if (b->plan)
        return INFD_STATUS_OK;
    int64_t batch = (int64_t)1 << slot, L = m->n_layers, H = m->hidden;
    infd_status st = INFD_STATUS_OK;
    if (slot == 0) {
        b->plan = m->dj;
        b->ctx = m->dj_ctx;
        b->borrowed = true;
    } else {
        infd_input_shape shapes[5] = {
            { .name = "encoder_outputs", .shape = { .rank = 3, .dims = { batch, m->d_enc, 1 } } },
            { .name = "targets", .shape = { .rank = 2, .dims = { batch, 1 } } },
            { .name = "target_length", .shape = { .rank = 1, .dims = { batch } } },
            { .name = "input_states_1", .shape = { .rank = 3, .dims = { L, batch, H } } },
            { .name = "input_states_2", .shape = { .rank = 3, .dims = { L, batch, H } } },
        };
        infd_tensor_info t;
        infd_argmax_output a;
        /* threads pay off from a few rows on (the joint's matmul) */
        infd_plan_options o = plan_options(m, batch >= 4 ? m->opts.n_threads : 1, shapes, 5);
        if (m->joint_argmax) {
            st = infd_plan_output(m->dj, 0, &t);
            o = argmax_options(m, t.name, &o, &a);
        }
        if (st == INFD_STATUS_OK)
            st = infd_plan_create_from_weights(m->dj_w, &o, &b->plan, err);
        if (st == INFD_STATUS_OK)
            st = infd_context_create(b->plan, &b->ctx, err);
    }
    /* the buffers, and how many values each must hold */
    const int64_t state = L * batch * H, want[DJ_BUFS] = { batch * m->d_enc,
                                                           batch,
                                                           batch,
                                                           state,
                                                           state,
                                                           batch * (m->joint_argmax ? 2 : m->width),
                                                           batch,
                                                           state,
                                                           state };
    for (int i = 0; i < DJ_BUFS && st == INFD_STATUS_OK; i++) {
        infd_tensor_info t;
        int64_t numel = -1;
        st = i < 5 ? infd_plan_input(b->plan, i, &t) : infd_plan_output(b->plan, i - 5, &t);
        if (st == INFD_STATUS_OK)
            infd_shape_numel(&t.shape, &numel, NULL);
        if (st != INFD_STATUS_OK || numel != want[i]) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: the decoder-joint at batch %lld: %s %d has %lld values; "
                                "expected %lld",
                                m->dir, (long long)batch, i < 5 ? "input" : "output",
                                i < 5 ? i : i - 5, (long long)numel, (long long)want[i]);
            break;
        }
        /* page-locked for a GPU plan: its copies then skip the staging */
        size_t nb = t.nbytes > 0 ? t.nbytes : 1;
        infd_error ignored = { 0 };
        void *p = m->opts.device == INFD_DEVICE_CUDA
                      ? infd_engine_host_alloc(INFD_DEVICE_CUDA, nb, &ignored)
                      : NULL;
        if (p) {
            memset(p, 0, nb);
            b->pinned |= 1u << i;
        } else {
            p = calloc(1, nb);
        }
        b->buf[i] = p;
        if (!p)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        else
            st = infd_tensor_init_view(i < 5 ? &b->in[i] : &b->outs[i - 5], t.dtype, &t.shape, p,
                                       t.nbytes, err);
    }
    for (int64_t r = 0; st == INFD_STATUS_OK && r < batch; r++)
        ((int32_t *)b->buf[DJ_TLEN])[r] = 1;
    if (st != INFD_STATUS_OK) {
        dj_batch_fini(b);
        return st;
    }
    b->batch = batch;
    return INFD_STATUS_OK;
}

/* One stream's chunk in decode_rows: the window's features (for the NaN
 * guard and the tap), its encoder frames (`stride` a row, enc_len valid),
 * the frames [off, off + cnt) to decode, the window [ws, we) in samples,
 * and the decoding under way. */
typedef struct dec_row {
    asr_stream *s;
    const float *feats;
    int64_t frames;
    const float *enc;
    int64_t stride, enc_len, off, cnt, ws, we;
    asr_tdt_run run; /* run.n: the tokens the chunk emitted */
} dec_row;

/* One decoder-joint run for rows idx[0, n) (n <= DJ_MAX_BATCH): each row's
 * encoder frame, last token and predictor state gathered into the batch,
 * then each row's argmaxes taken by its TDT decoder; a row that emitted a
 * token commits the state the run reached (m->lock held). */
static infd_status joint_step(asr_model *m, dec_row *rows, const int *idx, int n, infd_error *err)
{
    int slot = 0;
    while ((1 << slot) < n)
        slot++;
    dj_batch *b = NULL;
    infd_status st = dj_batch_get(m, slot, &b, err);
    if (st != INFD_STATUS_OK)
        return st;
    int64_t B = b->batch, D = m->d_enc, H = m->hidden;
    size_t hb = sizeof(float) * (size_t)H;
    float *enc = b->buf[DJ_ENC];
    int32_t *targets = b->buf[DJ_TARGETS];
    for (int i = 0; i < n; i++) {
        const dec_row *w = &rows[idx[i]];
        const asr_stream *s = w->s;
        const float *e = w->enc + w->off + w->run.t;
        for (int64_t d = 0; d < D; d++)
            enc[i * D + d] = e[d * w->stride];
        targets[i] = s->last_token;
        for (int k = 0; k < 2; k++)
            for (int64_t l = 0; l < m->n_layers; l++)
                memcpy((float *)b->buf[DJ_S_IN + k] + (l * B + i) * H, s->state[k] + l * H, hb);
    }
    st = infd_plan_run(b->plan, b->ctx, b->in, 5, b->outs, 4, err);
    m->n_joint_steps++;
    for (int i = 0; i < n && st == INFD_STATUS_OK; i++) {
        dec_row *w = &rows[idx[i]];
        asr_stream *s = w->s;
        int k = 0, di = 0;
        bool emitted = false;
        st = joint_result(m, s, w->run.t, (const float *)b->buf[DJ_OUT] + i * m->width,
                          (const int64_t *)b->buf[DJ_OUT] + 2 * i, &k, &di, err);
        if (st == INFD_STATUS_OK)
            st = asr_tdt_step(&m->tdt, &s->tdt, &w->run, k, di, &emitted, err);
        if (st != INFD_STATUS_OK || !emitted)
            continue;
        s->last_token = k;
        for (int c = 0; c < 2; c++)
            for (int64_t l = 0; l < m->n_layers; l++)
                memcpy(s->state[c] + l * H, (const float *)b->buf[DJ_S_OUT + c] + (l * B + i) * H,
                       hb);
    }
    return st;
}

/* The onnx-asr layout's rows in lockstep (NeMo's batched label looping):
 * every step runs the decoder-joint once for all the rows whose chunks
 * are not done (m->lock held). */
static infd_status lockstep(asr_model *m, dec_row *rows, int k, infd_error *err)
{
    for (;;) {
        int idx[ASR_MAX_WINDOWS], n = 0;
        for (int r = 0; r < k; r++)
            if (asr_tdt_next(&rows[r].run) >= 0)
                idx[n++] = r;
        if (n == 0)
            return INFD_STATUS_OK;
        for (int g = 0; g < n; g += DJ_MAX_BATCH) {
            infd_status st =
                joint_step(m, rows, idx + g, n - g < DJ_MAX_BATCH ? n - g : DJ_MAX_BATCH, err);
            if (st != INFD_STATUS_OK)
                return st;
        }
    }
}

/* Decodes rows[0, k) (k <= ASR_MAX_WINDOWS), each with its stream's state
 * (m->lock held): the NaN guard over each window, then the onnx-asr
 * layout's rows together (lockstep), the sherpa-onnx layout's one by one
 * (its predictor and joiner run apart, a row at a time), then each chunk's
 * tokens appended to its stream and recorded by the tap. */
static infd_status decode_rows(asr_model *m, dec_row *rows, int k, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    size_t sb = sizeof(float) * (size_t)(m->n_layers * m->hidden);
    for (int r = 0; r < k && st == INFD_STATUS_OK; r++) {
        dec_row *w = &rows[r];
        asr_stream *s = w->s;
        if (m->nan_guard)
            st = guard_window(m, w->feats, w->frames, w->enc, w->stride, w->enc_len, s->n_chunks,
                              err);
        if (st == INFD_STATUS_OK)
            st = reserve_tokens(s, asr_tdt_max_tokens(&m->tdt, w->cnt), err);
        if (st != INFD_STATUS_OK)
            break;
        asr_tdt_token *out = s->tokens + s->n_tokens;
        int64_t cap = s->cap_tokens - s->n_tokens;
        if (m->layout == LAYOUT_SHERPA) {
            bind(m, s);
            m->enc_out = w->enc + w->off;
            m->enc_stride = w->stride;
            asr_tdt_nets nets = { m, joint, predict };
            int64_t got = 0;
            st = asr_tdt_decode(&m->tdt, &nets, &s->tdt, w->cnt, out, cap, &got, err);
            m->cur = NULL;
            w->run = (asr_tdt_run){ .n = got };
            continue;
        }
        if (!s->tdt.primed) { /* start of sequence: zero state, the blank as last token */
            memset(s->state[0], 0, sb);
            memset(s->state[1], 0, sb);
            s->last_token = m->vocab;
            asr_tdt_primed(&s->tdt);
        }
        asr_tdt_begin(&s->tdt, w->cnt, out, cap, &w->run);
    }
    if (st == INFD_STATUS_OK && m->layout != LAYOUT_SHERPA) {
        st = lockstep(m, rows, k, err);
        for (int r = 0; r < k && st == INFD_STATUS_OK; r++)
            asr_tdt_end(&rows[r].s->tdt, &rows[r].run);
    }
    for (int r = 0; r < k && st == INFD_STATUS_OK; r++) {
        dec_row *w = &rows[r];
        asr_stream *s = w->s;
        s->n_tokens += w->run.n;
        asr_tap_decode(s->tap, s->n_chunks, w->ws, w->we, m->n_mels, w->frames, w->feats,
                       s->tokens + s->n_tokens - w->run.n, w->run.n);
    }
    return st;
}

/* A cache-aware stream's next window: its first feature frame, the valid
 * frames in it (the `length` input), and the stream's end. */
typedef struct ca_job {
    asr_stream *s;
    int64_t t0, length, valid, total;
} ca_job;

static void plan_cached(asr_stream *s, ca_job *j)
{
    const asr_model *m = s->m;
    j->s = s;
    j->total = s->buf_start + s->buf_len;
    j->t0 = s->next_frame;
    j->valid = s->finished ? asr_features_valid_frames(m->feat, j->total) : INT64_MAX;
    j->length = j->valid - j->t0 < m->window ? j->valid - j->t0 : m->window;
}

/* The window's features into feats (stride m->window). */
static void cached_features(asr_model *m, const ca_job *j, float *feats)
{
    const asr_stream *s = j->s;
    asr_features_compute_range(m->feat, s->buf, s->buf_start, s->finished ? j->total : -1, j->t0,
                               m->window, feats, m->window);
}

/* The decoding of job j's chunk: its enc_len encoder frames (enc, stride
 * m->ca_frames), all of them new. */
static infd_status cached_row(const asr_model *m, const ca_job *j, const float *feats,
                              const float *enc, int64_t enc_len, dec_row *w, infd_error *err)
{
    if (enc_len < 0 || enc_len > m->ca_frames)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "%s: the encoder gave encoded_lengths %lld of %lld frames", m->dir,
                              (long long)enc_len, (long long)m->ca_frames);
    int64_t ws = asr_features_first_sample(m->feat, j->t0) + 1;
    int64_t we = asr_features_end_sample(m->feat, j->t0 + m->window - 1);
    *w = (dec_row){ .s = j->s,
                    .feats = feats,
                    .frames = m->window,
                    .enc = enc,
                    .stride = m->ca_frames,
                    .enc_len = enc_len,
                    .off = 0,
                    .cnt = enc_len,
                    .ws = ws > 0 ? ws : 0,
                    .we = we < j->total ? we : j->total };
    return INFD_STATUS_OK;
}

/* After job j's chunk is decoded (row w): its debug line. */
static void cached_decoded(const asr_model *m, const ca_job *j, const dec_row *w)
{
    asr_stream *s = j->s;
    if (m->debug)
        fprintf(stderr,
                "infd asr: chunk %lld: feature frames [%lld, %lld), %lld valid; %lld encoder "
                "frames, %lld tokens, cache %lld frames deep, %lld joint runs in all\n",
                (long long)s->n_chunks, (long long)j->t0, (long long)(j->t0 + m->window),
                (long long)j->length, (long long)w->enc_len, (long long)w->run.n,
                (long long)s->clen[!s->cur], (long long)s->n_joint_runs);
    s->n_chunks++;
}

/* After job j: the caches just written become the current ones, the next
 * window, the samples before it dropped. */
static void advance_cached(const ca_job *j)
{
    asr_stream *s = j->s;
    const asr_model *m = s->m;
    s->cur = !s->cur;
    s->next_frame += m->shift;
    s->done = s->finished && s->next_frame + m->pre >= j->valid;
    drop_before(s, asr_features_first_sample(m->feat, s->next_frame));
}

/* A cache-aware chunk of one stream: the window's features (no
 * normalisation, so the same frames the whole audio gives), the encoder on
 * them reading the stream's caches and writing the next ones straight into
 * its other set, the chunk's valid frames decoded. */
static infd_status decode_cached(asr_stream *s, infd_error *err)
{
    asr_model *m = s->m;
    ca_job j;
    plan_cached(s, &j);
    const infd_shape feats = { .rank = 3, .dims = { 1, m->n_mels, m->window } };
    const infd_shape one = { .rank = 1, .dims = { 1 } };
    const infd_shape enc = { .rank = 3, .dims = { 1, m->d_enc, m->ca_frames } };
    int cur = s->cur, nxt = !s->cur;
    int64_t enc_len = 0;
    pthread_mutex_lock(&m->lock);
    cached_features(m, &j, m->ca_feats);
    infd_tensor in[5] = { view(INFD_DTYPE_FP32, &feats, m->ca_feats),
                          view(INFD_DTYPE_INT64, &one, &j.length),
                          view(INFD_DTYPE_FP32, &m->cc_shape, s->cc[cur]),
                          view(INFD_DTYPE_FP32, &m->ct_shape, s->ct[cur]),
                          view(INFD_DTYPE_INT64, &one, &s->clen[cur]) };
    infd_tensor out[5] = { view(INFD_DTYPE_FP32, &enc, m->ca_enc),
                           view(INFD_DTYPE_INT64, &one, &enc_len),
                           view(INFD_DTYPE_FP32, &m->cc_shape, s->cc[nxt]),
                           view(INFD_DTYPE_FP32, &m->ct_shape, s->ct[nxt]),
                           view(INFD_DTYPE_INT64, &one, &s->clen[nxt]) };
    dec_row w;
    infd_status st = infd_plan_run(m->ca_plan, m->ca_ctx, in, 5, out, 5, err);
    if (st == INFD_STATUS_OK)
        st = cached_row(m, &j, m->ca_feats, m->ca_enc, enc_len, &w, err);
    if (st == INFD_STATUS_OK)
        st = decode_rows(m, &w, 1, err);
    if (st == INFD_STATUS_OK)
        cached_decoded(m, &j, &w);
    pthread_mutex_unlock(&m->lock);
    if (st == INFD_STATUS_OK)
        advance_cached(&j);
    return st;
}

/* The cache-aware encoder's plan and buffers for `batch` windows (built
 * on first use; the caches of a batch are gathered into them). */
static infd_status ca_batch_get(asr_model *m, int64_t batch, ca_batch **out, infd_error *err)
{
    int slot = 0;
    while ((1 << slot) < batch)
        slot++;
    ca_batch *b = &m->ca_batches[slot];
    *out = b;
    if (b->plan)
        return INFD_STATUS_OK;
    infd_shape cc = m->cc_shape, ct = m->ct_shape;
    cc.dims[0] = ct.dims[0] = batch;
    infd_input_shape shapes[5] = {
        { .name = "audio_signal", .shape = { .rank = 3, .dims = { batch, m->n_mels, m->window } } },
        { .name = "length", .shape = { .rank = 1, .dims = { batch } } },
        { .name = "cache_last_channel", .shape = cc },
        { .name = "cache_last_time", .shape = ct },
        { .name = "cache_last_channel_len", .shape = { .rank = 1, .dims = { batch } } },
    };
    infd_plan_options o = plan_options(m, m->opts.n_threads, shapes, 5);
    infd_status st = infd_plan_create_from_weights(m->enc_w, &o, &b->plan, err);
    if (st == INFD_STATUS_OK)
        st = infd_context_create(b->plan, &b->ctx, err);
    size_t n = (size_t)batch;
    if (st == INFD_STATUS_OK) {
        b->feats = calloc(n * (size_t)(m->n_mels * m->window), sizeof(float));
        b->enc = calloc(n * (size_t)(m->d_enc * m->ca_frames), sizeof(float));
        b->cc_in = calloc(n * m->cc_n, sizeof(float));
        b->cc_out = calloc(n * m->cc_n, sizeof(float));
        b->ct_in = calloc(n * m->ct_n, sizeof(float));
        b->ct_out = calloc(n * m->ct_n, sizeof(float));
        b->ints = calloc(4 * n, sizeof(int64_t));
        if (!b->feats || !b->enc || !b->cc_in || !b->cc_out || !b->ct_in || !b->ct_out || !b->ints)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (st != INFD_STATUS_OK) {
        ca_batch_fini(b);
        return st;
    }
    b->batch = batch;
    return INFD_STATUS_OK;
}

/* Cache-aware chunks of jobs[0, k) (k >= 2) in one encoder run: each
 * stream's features and caches gathered into the batch's rows (spare rows
 * copy row 0), the next caches scattered back into each stream's other set,
 * then each stream's frames decoded (m->lock held). */
static infd_status decode_cached_batch(asr_model *m, ca_job *jobs, int k, infd_error *err)
{
    int64_t batch = 1;
    while (batch < k)
        batch *= 2;
    ca_batch *b = NULL;
    infd_status st = ca_batch_get(m, batch, &b, err);
    if (st != INFD_STATUS_OK)
        return st;
    size_t frow = (size_t)(m->n_mels * m->window), erow = (size_t)(m->d_enc * m->ca_frames);
    int64_t *lengths = b->ints, *enc_lens = b->ints + batch, *clen_in = b->ints + 2 * batch;
    int64_t *clen_out = b->ints + 3 * batch;
    for (int64_t r = 0; r < batch; r++) {
        const ca_job *j = &jobs[r < k ? r : 0];
        const asr_stream *s = j->s;
        if (r < k)
            cached_features(m, j, b->feats + frow * (size_t)r);
        else
            memcpy(b->feats + frow * (size_t)r, b->feats, frow * sizeof(float));
        lengths[r] = j->length;
        memcpy(b->cc_in + m->cc_n * (size_t)r, s->cc[s->cur], m->cc_n * sizeof(float));
        memcpy(b->ct_in + m->ct_n * (size_t)r, s->ct[s->cur], m->ct_n * sizeof(float));
        clen_in[r] = s->clen[s->cur];
    }
    infd_shape cc = m->cc_shape, ct = m->ct_shape;
    cc.dims[0] = ct.dims[0] = batch;
    const infd_shape feats = { .rank = 3, .dims = { batch, m->n_mels, m->window } };
    const infd_shape vec = { .rank = 1, .dims = { batch } };
    const infd_shape enc = { .rank = 3, .dims = { batch, m->d_enc, m->ca_frames } };
    infd_tensor in[5] = { view(INFD_DTYPE_FP32, &feats, b->feats),
                          view(INFD_DTYPE_INT64, &vec, lengths),
                          view(INFD_DTYPE_FP32, &cc, b->cc_in),
                          view(INFD_DTYPE_FP32, &ct, b->ct_in),
                          view(INFD_DTYPE_INT64, &vec, clen_in) };
    infd_tensor out[5] = { view(INFD_DTYPE_FP32, &enc, b->enc),
                           view(INFD_DTYPE_INT64, &vec, enc_lens),
                           view(INFD_DTYPE_FP32, &cc, b->cc_out),
                           view(INFD_DTYPE_FP32, &ct, b->ct_out),
                           view(INFD_DTYPE_INT64, &vec, clen_out) };
    st = infd_plan_run(b->plan, b->ctx, in, 5, out, 5, err);
    if (m->debug)
        fprintf(stderr, "infd asr: %d cache-aware windows in one encoder run of batch %lld\n", k,
                (long long)batch);
    dec_row rows[ASR_MAX_BATCH];
    for (int r = 0; r < k && st == INFD_STATUS_OK; r++) {
        asr_stream *s = jobs[r].s;
        int nxt = !s->cur;
        memcpy(s->cc[nxt], b->cc_out + m->cc_n * (size_t)r, m->cc_n * sizeof(float));
        memcpy(s->ct[nxt], b->ct_out + m->ct_n * (size_t)r, m->ct_n * sizeof(float));
        s->clen[nxt] = clen_out[r];
        st = cached_row(m, &jobs[r], b->feats + frow * (size_t)r, b->enc + erow * (size_t)r,
                        enc_lens[r], &rows[r], err);
    }
    if (st == INFD_STATUS_OK)
        st = decode_rows(m, rows, k, err);
    for (int r = 0; r < k && st == INFD_STATUS_OK; r++) {
        cached_decoded(m, &jobs[r], &rows[r]);
        advance_cached(&jobs[r]);
    }
    return st;
}

/* Cache-aware streams of one asr_streams_decode call: their next chunks in
 * batches of up to ASR_MAX_BATCH (a lone one straight from its caches). */
static infd_status decode_cached_all(asr_model *m, asr_stream *const *streams, int n,
                                     infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    pthread_mutex_lock(&m->lock);
    uint64_t call = ++m->calls;
    pthread_mutex_unlock(&m->lock);
    for (;;) {
        ca_job jobs[ASR_MAX_BATCH];
        int k = 0;
        for (int i = 0; i < n && k < ASR_MAX_BATCH; i++)
            if (streams[i]->handled != call && asr_stream_ready(streams[i])) {
                streams[i]->handled = call;
                plan_cached(streams[i], &jobs[k++]);
            }
        if (k == 0)
            return INFD_STATUS_OK;
        if (k == 1) {
            st = decode_cached(jobs[0].s, err);
        } else {
            pthread_mutex_lock(&m->lock);
            st = decode_cached_batch(m, jobs, k, err);
            pthread_mutex_unlock(&m->lock);
        }
        if (st != INFD_STATUS_OK)
            return st;
    }
}

/* The decoding of job j's chunk from row j->row of bucket b. */
static void job_row(const asr_model *m, const chunk_job *j, const enc_bucket *b, dec_row *w)
{
    int64_t unit = frame_samples(m), enc_len = b->enc_lens[j->row];
    int64_t off = (j->cs - j->ws) / unit;
    int64_t cnt = j->last ? enc_len - off : j->s->chunk / unit;
    if (cnt > enc_len - off)
        cnt = enc_len - off;
    if (cnt < 0)
        cnt = 0;
    *w = (dec_row){ .s = j->s,
                    .feats = b->feats + (size_t)(j->row * m->n_mels * b->frames),
                    .frames = b->frames,
                    .enc = b->enc + (size_t)(j->row * m->d_enc * b->out_frames),
                    .stride = b->out_frames,
                    .enc_len = enc_len,
                    .off = off,
                    .cnt = cnt,
                    .ws = j->ws,
                    .we = j->we };
}

/* After job j's chunk is decoded (row w of bucket b): its debug line. */
static void job_decoded(const asr_model *m, const chunk_job *j, const enc_bucket *b,
                        const dec_row *w)
{
    asr_stream *s = j->s;
    if (m->debug)
        fprintf(stderr,
                "infd asr: chunk %lld: window [%lld, %lld) samples, row %d of %lld, encoder "
                "frames %lld to %lld of the window, %lld tokens, %lld joint runs in all\n",
                (long long)s->n_chunks, (long long)j->ws, (long long)j->we, j->row,
                (long long)b->batch, (long long)w->off, (long long)(w->off + w->cnt),
                (long long)w->run.n, (long long)s->n_joint_runs);
    s->n_chunks++;
}

/* After job j: the next chunk, and the samples before its window dropped. */
static void advance(const chunk_job *j)
{
    asr_stream *s = j->s;
    s->next = j->last ? j->total : j->cs + s->chunk;
    s->done = j->last;
    drop_before(s, s->next - s->left);
}

infd_status asr_streams_decode(asr_model *m, asr_stream *const *streams, int n, infd_error *err)
{
    for (int i = 0; i < n; i++)
        if (streams[i]->m != m)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "stream %d belongs to another model", i);
    if (m->cache_aware)
        return decode_cached_all(m, streams, n, err);
    infd_status st = INFD_STATUS_OK;
    pthread_mutex_lock(&m->lock);
    uint64_t call = ++m->calls;
    uint64_t t_start = now_ns();
    m->t_features = m->t_encoder = m->t_decode = 0;
    m->n_windows = m->n_enc_runs = m->n_joints = m->n_joint_steps = 0;
    for (;;) {
        /* up to ASR_MAX_WINDOWS ready chunks whose windows pad to one length */
        chunk_job jobs[ASR_MAX_WINDOWS];
        int k = 0;
        for (int i = 0; i < n && k < ASR_MAX_WINDOWS && st == INFD_STATUS_OK; i++) {
            asr_stream *s = streams[i];
            if (s->handled == call || !asr_stream_ready(s))
                continue;
            plan_chunk(s, &jobs[k]);
            if (jobs[k].frames > m->max_frames)
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "%s: a window of %.2f s is longer than the %.1f s encoded at "
                                    "once (max_seconds)",
                                    m->dir,
                                    (double)(jobs[k].we - jobs[k].ws) / asr_model_sample_rate(m),
                                    m->opts.max_seconds);
            else if (k == 0 || jobs[k].frames == jobs[0].frames) {
                s->handled = call;
                k++;
            }
        }
        if (st != INFD_STATUS_OK || k == 0)
            break;
        enc_bucket *b = NULL;
        st = encode_batch(m, jobs, k, &b, err);
        uint64_t t0 = now_ns();
        dec_row rows[ASR_MAX_WINDOWS];
        int64_t runs = 0;
        for (int r = 0; r < k && st == INFD_STATUS_OK; r++) {
            job_row(m, &jobs[r], b, &rows[r]);
            runs -= jobs[r].s->n_joint_runs;
        }
        if (st == INFD_STATUS_OK)
            st = decode_rows(m, rows, k, err);
        for (int r = 0; r < k && st == INFD_STATUS_OK; r++) {
            runs += jobs[r].s->n_joint_runs;
            job_decoded(m, &jobs[r], b, &rows[r]);
            advance(&jobs[r]);
        }
        m->n_joints += runs;
        m->t_decode += now_ns() - t0;
    }
    if (m->debug && m->n_windows > 0)
        fprintf(stderr,
                "infd asr: %d streams: %lld windows in %lld encoder runs; %.2f ms in all: "
                "features %.2f, encoder %.2f, decoding %.2f (%lld joint runs in %lld steps)\n",
                n, (long long)m->n_windows, (long long)m->n_enc_runs,
                (double)(now_ns() - t_start) / 1e6, (double)m->t_features / 1e6,
                (double)m->t_encoder / 1e6, (double)m->t_decode / 1e6, (long long)m->n_joints,
                (long long)m->n_joint_steps);
    pthread_mutex_unlock(&m->lock);
    return st;
}

infd_status asr_stream_decode(asr_stream *s, infd_error *err)
{
    return asr_streams_decode(s->m, &s, 1, err);
}

bool asr_stream_endpoint(const asr_stream *s)
{
    double fs = asr_model_frame_seconds(s->m);
    int64_t done = s->tdt.frames_done;
    int64_t since = s->n_tokens > 0 ? s->tdt.last_frame + 1 : s->seg_start;
    if (since < s->seg_start)
        since = s->seg_start;
    double trailing = (double)(done - since) * fs, length = (double)(done - s->seg_start) * fs;
    if (s->n_tokens == 0 && s->o.rule1_s > 0 && trailing >= s->o.rule1_s)
        return true;
    if (s->n_tokens > 0 && s->o.rule2_s > 0 && trailing >= s->o.rule2_s)
        return true;
    return s->o.rule3_s > 0 && length >= s->o.rule3_s;
}

const asr_tdt_token *asr_stream_tokens(const asr_stream *s, int64_t *n)
{
    *n = s->n_tokens;
    return s->tokens;
}

void asr_stream_reset(asr_stream *s)
{
    asr_tap_reset(s->tap);
    s->n_tokens = 0;
    s->seg_start = s->tdt.frames_done;
}

/* The text of tokens (SentencePiece: U+2581, E2 96 81, starts a word and
 * becomes a space; the text's leading space goes) and its words. */
static infd_status fill_text(const asr_model *m, asr_result *r, infd_error *err)
{
    size_t len = 1;
    for (int64_t i = 0; i < r->n_tokens; i++)
        len += strlen(m->pieces[r->tokens[i].id]);
    r->text = malloc(len);
    r->words = calloc((size_t)r->n_tokens + 1, sizeof(asr_word));
    if (!r->text || !r->words)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    size_t at = 0;
    asr_word *w = NULL;
    for (int64_t i = 0; i < r->n_tokens; i++) {
        const char *p = m->pieces[r->tokens[i].id];
        bool mark = (unsigned char)p[0] == 0xE2 && (unsigned char)p[1] == 0x96 &&
                    (unsigned char)p[2] == 0x81;
        if (mark || !w) {
            if (mark && at > 0)
                r->text[at++] = ' ';
            w = &r->words[r->n_words++];
            w->first = i;
            w->text_off = at;
            w->start = (double)r->tokens[i].frame * r->frame_seconds;
        }
        while (*p) {
            if ((unsigned char)p[0] == 0xE2 && (unsigned char)p[1] == 0x96 &&
                (unsigned char)p[2] == 0x81) {
                if (p != m->pieces[r->tokens[i].id] && at > 0)
                    r->text[at++] = ' ';
                p += 3;
            } else {
                r->text[at++] = *p++;
            }
        }
        w->n = i - w->first + 1;
        w->text_len = at - w->text_off;
        w->end = (double)(r->tokens[i].frame + r->tokens[i].duration) * r->frame_seconds;
    }
    r->text[at] = '\0';
    return INFD_STATUS_OK;
}

infd_status asr_stream_result(const asr_stream *s, asr_result *out, infd_error *err)
{
    memset(out, 0, sizeof(*out));
    out->frame_seconds = asr_model_frame_seconds(s->m);
    out->n_frames = s->tdt.frames_done - s->seg_start;
    out->start_frame = s->seg_start;
    out->n_joint_runs = s->n_joint_runs;
    out->tokens = malloc(((size_t)s->n_tokens + 1) * sizeof(asr_tdt_token));
    if (!out->tokens)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    memcpy(out->tokens, s->tokens, (size_t)s->n_tokens * sizeof(asr_tdt_token));
    out->n_tokens = s->n_tokens;
    infd_status st = fill_text(s->m, out, err);
    if (st != INFD_STATUS_OK)
        asr_result_fini(out);
    return st;
}

infd_status asr_model_transcribe(asr_model *m, const float *samples, int64_t n, asr_result *out,
                                 infd_error *err)
{
    memset(out, 0, sizeof(*out));
    asr_stream_options o;
    asr_stream_options_init(&o);
    o.chunk_s = 0;
    asr_stream *s = NULL;
    infd_status st = asr_stream_create(m, &o, &s, err);
    if (st == INFD_STATUS_OK)
        st = asr_stream_accept(s, asr_model_sample_rate(m), samples, n, err);
    if (st == INFD_STATUS_OK) {
        asr_stream_finish(s);
        while (st == INFD_STATUS_OK && asr_stream_ready(s))
            st = asr_stream_decode(s, err);
    }
    if (st == INFD_STATUS_OK)
        st = asr_stream_result(s, out, err);
    asr_stream_destroy(s);
    return st;
}
