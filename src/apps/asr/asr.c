/*
 * asr.c - the C ABI of speech recognition (include/infd/asr.h) over the
 * recognizer (recognizer.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>

#include "apps/asr/recognizer.h"
#include "infd/asr.h"

struct infd_asr_recognizer {
    asr_model *m;
    asr_stream_options so;
};

struct infd_asr_stream {
    infd_asr_recognizer *r;
    asr_stream *s;
    int32_t segment;
};

/* What infd_asr_result points at, allocated with it. */
typedef struct result_impl {
    infd_asr_result pub; /* first: the public pointer is this struct's */
    asr_result r;
    const char **tokens;
    int32_t *ids;
    float *times, *durations;
    infd_asr_word *words;
    char *word_text; /* the words, NUL-terminated one after another */
    char *json;
} result_impl;

void infd_asr_config_init(infd_asr_config *c)
{
    asr_stream_options o; /* the recognizer's defaults, in the ABI's units */
    asr_stream_options_init(&o);
    memset(c, 0, sizeof(*c));
    c->device = "cpu";
    c->chunk_ms = (int)(o.chunk_s * 1000 + 0.5);
    c->left_ms = (int)(o.left_s * 1000 + 0.5);
    c->right_ms = (int)(o.right_s * 1000 + 0.5);
    c->rule1_min_trailing_silence = (float)o.rule1_s;
    c->rule2_min_trailing_silence = (float)o.rule2_s;
    c->rule3_min_utterance_length = (float)o.rule3_s;
}

static infd_status parse_device(const char *d, asr_model_options *o, infd_error *err)
{
    if (!d || strcmp(d, "cpu") == 0) {
        o->device = INFD_DEVICE_CPU;
        return INFD_STATUS_OK;
    }
    if (strncmp(d, "cuda", 4) == 0) {
        o->device = INFD_DEVICE_CUDA;
        if (d[4] == '\0')
            return INFD_STATUS_OK;
        char *end = NULL;
        long i = d[4] == ':' ? strtol(d + 5, &end, 10) : -1;
        if (end && end != d + 5 && *end == '\0' && i >= 0 && i < 64) {
            o->device_index = (int)i;
            return INFD_STATUS_OK;
        }
    }
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "device is '%s'; expected cpu, cuda or cuda:N", d);
}

infd_status infd_asr_recognizer_create(const infd_asr_config *c, infd_asr_recognizer **out,
                                       infd_error *err)
{
    *out = NULL;
    if (!c || !c->model_dir)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "model_dir is not set");
    asr_model_options o;
    asr_model_options_init(&o);
    infd_status st = parse_device(c->device, &o, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (c->num_threads < 0 || c->num_threads > 1024)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "num_threads is %d; expected 0 (all cores) to 1024", c->num_threads);
    if (c->chunk_ms < 0 || c->left_ms < 0 || c->right_ms < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "chunk_ms %d, left_ms %d and right_ms %d; none may be negative",
                              c->chunk_ms, c->left_ms, c->right_ms);
    o.n_threads = c->num_threads;
    o.contract = c->contract;
    if (c->precision && !infd_precision_parse(c->precision, &o.precision))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "precision is '%s'; expected fp32, tf32, fp16 or bf16", c->precision);
    infd_asr_recognizer *r = calloc(1, sizeof(*r));
    if (!r)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    asr_stream_options_init(&r->so);
    r->so.chunk_s = c->chunk_ms / 1000.0;
    r->so.left_s = c->left_ms / 1000.0;
    r->so.right_s = c->right_ms / 1000.0;
    r->so.rule1_s = c->rule1_min_trailing_silence;
    r->so.rule2_s = c->rule2_min_trailing_silence;
    r->so.rule3_s = c->rule3_min_utterance_length;
    st = asr_model_load(c->model_dir, &o, &r->m, err);
    if (st == INFD_STATUS_OK) /* the stream settings, checked once here */
        st = asr_stream_options_check(r->m, &r->so, err);
    if (st != INFD_STATUS_OK) {
        infd_asr_recognizer_destroy(r);
        return st;
    }
    *out = r;
    return INFD_STATUS_OK;
}

void infd_asr_recognizer_destroy(infd_asr_recognizer *r)
{
    if (!r)
        return;
    asr_model_destroy(r->m);
    free(r);
}

int infd_asr_recognizer_sample_rate(const infd_asr_recognizer *r)
{
    return asr_model_sample_rate(r->m);
}

infd_status infd_asr_stream_create(infd_asr_recognizer *r, infd_asr_stream **out, infd_error *err)
{
    *out = NULL;
    infd_asr_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    s->r = r;
    infd_status st = asr_stream_create(r->m, &r->so, &s->s, err);
    if (st != INFD_STATUS_OK) {
        free(s);
        return st;
    }
    *out = s;
    return INFD_STATUS_OK;
}

void infd_asr_stream_destroy(infd_asr_stream *s)
{
    if (!s)
        return;
    asr_stream_destroy(s->s);
    free(s);
}

infd_status infd_asr_accept_waveform(infd_asr_stream *s, int32_t sample_rate, const float *samples,
                                     int64_t n, infd_error *err)
{
    return asr_stream_accept(s->s, sample_rate, samples, n, err);
}

void infd_asr_input_finished(infd_asr_stream *s)
{
    asr_stream_finish(s->s);
}

int infd_asr_is_ready(const infd_asr_recognizer *r, const infd_asr_stream *s)
{
    (void)r;
    return asr_stream_ready(s->s);
}

infd_status infd_asr_decode(infd_asr_recognizer *r, infd_asr_stream *s, infd_error *err)
{
    (void)r;
    return asr_stream_decode(s->s, err);
}

infd_status infd_asr_decode_multiple(infd_asr_recognizer *r, infd_asr_stream **s, int32_t n,
                                     infd_error *err)
{
    enum { GROUP = 64 };
    asr_stream *group[GROUP];
    for (int32_t i = 0; i < n; i += GROUP) {
        int k = n - i < GROUP ? (int)(n - i) : GROUP;
        for (int j = 0; j < k; j++)
            group[j] = s[i + j]->s;
        infd_status st = asr_streams_decode(r->m, group, k, err);
        if (st != INFD_STATUS_OK)
            return st;
    }
    return INFD_STATUS_OK;
}

int infd_asr_is_endpoint(const infd_asr_recognizer *r, const infd_asr_stream *s)
{
    (void)r;
    return asr_stream_endpoint(s->s);
}

void infd_asr_reset(infd_asr_recognizer *r, infd_asr_stream *s)
{
    (void)r;
    asr_stream_reset(s->s);
    s->segment++;
}

static void gen_key(yajl_gen g, const char *k)
{
    yajl_gen_string(g, (const unsigned char *)k, strlen(k));
}

/* A time in seconds with 3 decimals (yajl_gen_double prints 17 digits). */
static void gen_seconds(yajl_gen g, double v)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%.3f", v);
    yajl_gen_number(g, buf, (size_t)n);
}

static char *result_json(const result_impl *x)
{
    const infd_asr_result *p = &x->pub;
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g)
        return NULL;
    yajl_gen_map_open(g);
    gen_key(g, "text");
    yajl_gen_string(g, (const unsigned char *)p->text, strlen(p->text));
    gen_key(g, "tokens");
    yajl_gen_array_open(g);
    for (int32_t i = 0; i < p->count; i++)
        yajl_gen_string(g, (const unsigned char *)p->tokens[i], strlen(p->tokens[i]));
    yajl_gen_array_close(g);
    gen_key(g, "token_ids");
    yajl_gen_array_open(g);
    for (int32_t i = 0; i < p->count; i++)
        yajl_gen_integer(g, p->token_ids[i]);
    yajl_gen_array_close(g);
    gen_key(g, "timestamps");
    yajl_gen_array_open(g);
    for (int32_t i = 0; i < p->count; i++)
        gen_seconds(g, p->timestamps[i]);
    yajl_gen_array_close(g);
    gen_key(g, "durations");
    yajl_gen_array_open(g);
    for (int32_t i = 0; i < p->count; i++)
        gen_seconds(g, p->durations[i]);
    yajl_gen_array_close(g);
    gen_key(g, "words");
    yajl_gen_array_open(g);
    for (int32_t i = 0; i < p->n_words; i++) {
        yajl_gen_map_open(g);
        gen_key(g, "word");
        yajl_gen_string(g, (const unsigned char *)p->words[i].word, strlen(p->words[i].word));
        gen_key(g, "start");
        gen_seconds(g, p->words[i].start);
        gen_key(g, "end");
        gen_seconds(g, p->words[i].end);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    gen_key(g, "segment");
    yajl_gen_integer(g, p->segment);
    gen_key(g, "start_time");
    gen_seconds(g, p->start_time);
    gen_key(g, "is_final");
    yajl_gen_bool(g, p->is_final != 0);
    yajl_gen_map_close(g);
    const unsigned char *buf = NULL;
    size_t len = 0;
    char *out = NULL;
    if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok && (out = malloc(len + 1))) {
        memcpy(out, buf, len);
        out[len] = '\0';
    }
    yajl_gen_free(g);
    return out;
}

infd_status infd_asr_get_result(const infd_asr_recognizer *r, const infd_asr_stream *s,
                                infd_asr_result **out, infd_error *err)
{
    *out = NULL;
    result_impl *x = calloc(1, sizeof(*x));
    if (!x)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    infd_status st = asr_stream_result(s->s, &x->r, err);
    if (st != INFD_STATUS_OK) {
        free(x);
        return st;
    }
    const asr_result *a = &x->r;
    size_t nt = (size_t)a->n_tokens + 1, nw = (size_t)a->n_words + 1;
    x->tokens = calloc(nt, sizeof(char *));
    x->ids = calloc(nt, sizeof(int32_t));
    x->times = calloc(nt, sizeof(float));
    x->durations = calloc(nt, sizeof(float));
    x->words = calloc(nw, sizeof(infd_asr_word));
    x->word_text = malloc(strlen(a->text) + nw);
    if (!x->tokens || !x->ids || !x->times || !x->durations || !x->words || !x->word_text) {
        infd_asr_result_destroy(&x->pub);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t i = 0; i < a->n_tokens; i++) {
        x->tokens[i] = asr_model_piece(r->m, a->tokens[i].id);
        x->ids[i] = a->tokens[i].id;
        x->times[i] = (float)((double)a->tokens[i].frame * a->frame_seconds);
        x->durations[i] = (float)((double)a->tokens[i].duration * a->frame_seconds);
    }
    char *wt = x->word_text;
    for (int64_t i = 0; i < a->n_words; i++) {
        memcpy(wt, a->text + a->words[i].text_off, a->words[i].text_len);
        wt[a->words[i].text_len] = '\0';
        x->words[i] = (infd_asr_word){ .word = wt,
                                       .start = (float)a->words[i].start,
                                       .end = (float)a->words[i].end };
        wt += a->words[i].text_len + 1;
    }
    infd_asr_result *p = &x->pub;
    p->text = a->text;
    p->count = (int32_t)a->n_tokens;
    p->tokens = x->tokens;
    p->token_ids = x->ids;
    p->timestamps = x->times;
    p->durations = x->durations;
    p->n_words = (int32_t)a->n_words;
    p->words = x->words;
    p->segment = s->segment;
    p->start_time = (float)((double)a->start_frame * a->frame_seconds);
    p->is_final = asr_stream_done(s->s);
    x->json = result_json(x);
    if (!x->json) {
        infd_asr_result_destroy(p);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    p->json = x->json;
    *out = p;
    return INFD_STATUS_OK;
}

void infd_asr_result_destroy(infd_asr_result *res)
{
    if (!res)
        return;
    result_impl *x = (result_impl *)res;
    asr_result_fini(&x->r);
    free(x->tokens);
    free(x->ids);
    free(x->times);
    free(x->durations);
    free(x->words);
    free(x->word_text);
    free(x->json);
    free(x);
}
