/*
 * kind.c - speech recognition served by `infd serve`: the "asr" model kind
 * (include/infd/plugin.h) over the C ABI (include/infd/asr.h).
 *
 * A model of backend "asr" holds a Parakeet-TDT model directory (either
 * layout; by default its version folder). With sequence_batching it
 * streams: a sequence is a session, its slot holds one recognizer stream,
 * each request carries the next piece of audio (AUDIO, FP32 samples at the
 * model's rate, any count, 0 included) and gets the transcript so far.
 * The requests of a batch feed their streams, and every stream with a
 * ready chunk is decoded in one infd_asr_decode_multiple call, so
 * concurrent sessions share the encoder runs. START makes a fresh stream,
 * END finishes the input (the response is final); a session dropped
 * without END is freed when the sequence batcher releases its slot.
 * Without sequence_batching each request is a whole recording: AUDIO is
 * BYTES, one element holding a sound file (WAV, FLAC, ...: libsndfile,
 * resampled with libsoxr), and the batch's recordings are decoded
 * together. docs/ASR.md ("Serving") has the configuration.
 *
 * Outputs: TRANSCRIPT (BYTES, the text), RESULT (BYTES, the C ABI's JSON
 * with tokens, timestamps and words) and IS_FINAL (BOOL: the segment
 * ended, by END or by an endpoint when endpointing is on).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/asr/audio.h"
#include "infd/asr.h"
#include "infd/plugin.h"

typedef struct kind_model {
    infd_asr_recognizer *rec;
    bool debug;     /* INFD_ASR_DEBUG: a line per batch saying where its time went */
    bool streaming; /* sequence_batching */
    bool endpoint;  /* parameter endpoint: reset at endpoints */
    int lead;       /* 1 when the model batches (a batch dim) */
    int rate;
    int n_slots;
    infd_asr_stream **slots; /* streaming: one per sequence slot */
    char name[128];
} kind_model;

enum { OUT_TRANSCRIPT, OUT_RESULT, OUT_IS_FINAL };

static infd_status decode_ready(kind_model *k, infd_asr_stream **s, int n, infd_error *err);
static infd_status warm_up(kind_model *k, int n, int chunk_ms, int span_ms, infd_error *err);

static infd_status int_param(const infd_kind_model *km, const char *key, int lo, int hi, int *v,
                             infd_error *err)
{
    const char *s = infd_kind_model_parameter(km, key);
    if (!s)
        return INFD_STATUS_OK;
    char *end = NULL;
    long x = strtol(s, &end, 10);
    if (!end || end == s || *end || x < lo || x > hi)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': parameter %s is '%s'; expected an integer in %d..%d",
                              infd_kind_model_name(km), key, s, lo, hi);
    *v = (int)x;
    return INFD_STATUS_OK;
}

static infd_status rules_param(const infd_kind_model *km, infd_asr_config *c, infd_error *err)
{
    const char *s = infd_kind_model_parameter(km, "endpoint_rules");
    if (!s)
        return INFD_STATUS_OK;
    float r[3];
    char tail;
    if (sscanf(s, "%f,%f,%f%c", &r[0], &r[1], &r[2], &tail) != 3 || r[0] < 0 || r[1] < 0 ||
        r[2] < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model '%s': parameter endpoint_rules is '%s'; expected three "
                              "seconds R1,R2,R3 >= 0",
                              infd_kind_model_name(km), s);
    c->rule1_min_trailing_silence = r[0];
    c->rule2_min_trailing_silence = r[1];
    c->rule3_min_utterance_length = r[2];
    return INFD_STATUS_OK;
}

static void kind_unload(void *state)
{
    kind_model *k = state;
    /* A load that failed before the slots were made comes here too. */
    for (int s = 0; k->slots && s < k->n_slots; s++)
        infd_asr_stream_destroy(k->slots[s]);
    free(k->slots);
    infd_asr_recognizer_destroy(k->rec);
    free(k);
}

static infd_status kind_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    kind_model *k = calloc(1, sizeof(*k));
    if (!k)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    snprintf(k->name, sizeof(k->name), "%s", infd_kind_model_name(km));
    k->n_slots = infd_kind_model_n_sequence_slots(km);
    k->streaming = k->n_slots > 0;
    const char *dbg = getenv("INFD_ASR_DEBUG");
    k->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
    k->lead = infd_kind_model_max_batch_size(km) > 0;
    infd_asr_config c;
    infd_asr_config_init(&c);
    char dir[4096], device[32];
    const char *md = infd_kind_model_parameter(km, "model_dir");
    if (!md || md[0] == '/')
        snprintf(dir, sizeof(dir), "%s", md ? md : infd_kind_model_dir(km));
    else
        snprintf(dir, sizeof(dir), "%s/%s", infd_kind_model_dir(km), md);
    c.model_dir = dir;
    int gpu = 0;
    if (infd_kind_model_device(km, &gpu) == INFD_DEVICE_CUDA) {
        snprintf(device, sizeof(device), "cuda:%d", gpu);
        c.device = device;
    }
    c.contract = infd_kind_model_parameter(km, "contract");
    c.precision = infd_kind_model_parameter(km, "precision");
    const char *ep = infd_kind_model_parameter(km, "endpoint");
    k->endpoint = ep && (strcmp(ep, "true") == 0 || strcmp(ep, "1") == 0);
    if (!k->streaming)
        c.chunk_ms = 0; /* each request is a whole recording */
    infd_status st = int_param(km, "chunk_ms", 0, 600000, &c.chunk_ms, err);
    if (st == INFD_STATUS_OK)
        st = int_param(km, "left_ms", 0, 600000, &c.left_ms, err);
    if (st == INFD_STATUS_OK)
        st = int_param(km, "right_ms", 0, 600000, &c.right_ms, err);
    if (st == INFD_STATUS_OK)
        st = int_param(km, "threads", 0, 1024, &c.num_threads, err);
    if (st == INFD_STATUS_OK)
        st = rules_param(km, &c, err);
    if (st == INFD_STATUS_OK && k->streaming && c.chunk_ms == 0)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "model '%s': chunk_ms 0 (offline) with sequence_batching; stream in "
                            "chunks, or drop sequence_batching to send whole recordings",
                            k->name);
    if (st == INFD_STATUS_OK)
        st = infd_asr_recognizer_create(&c, &k->rec, err);
    if (st == INFD_STATUS_OK && k->streaming) {
        k->slots = calloc((size_t)k->n_slots, sizeof(*k->slots));
        if (!k->slots)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    int64_t any = -1, one = 1;
    if (st == INFD_STATUS_OK)
        st = k->streaming ? infd_kind_model_add_input(km, "AUDIO", INFD_DTYPE_FP32, 1, &any, err)
                          : infd_kind_model_add_input(km, "AUDIO", INFD_DTYPE_BYTES, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "TRANSCRIPT", INFD_DTYPE_BYTES, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "RESULT", INFD_DTYPE_BYTES, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "IS_FINAL", INFD_DTYPE_BOOL, 1, &one, err);
    if (st == INFD_STATUS_OK)
        k->rate = infd_asr_recognizer_sample_rate(k->rec);
    const char *warm = infd_kind_model_parameter(km, "warmup");
    if (st == INFD_STATUS_OK && k->streaming && !(warm && strcmp(warm, "false") == 0)) {
        /* Batches of 1, 2, 4, ... up to the encoder's 64 windows a run. */
        int most = infd_kind_model_max_batch_size(km);
        if (most > k->n_slots)
            most = k->n_slots;
        int span = c.left_ms + 3 * c.chunk_ms + c.right_ms;
        for (int n = 1; st == INFD_STATUS_OK && n <= 64 && n <= (most > 0 ? most : 1); n *= 2)
            st = warm_up(k, n, c.chunk_ms, span, err);
        if (st != INFD_STATUS_OK)
            infd_error_prefix(err, "model '%s' warmup", k->name);
    }
    if (st != INFD_STATUS_OK) {
        kind_unload(k);
        return st;
    }
    *state = k;
    return INFD_STATUS_OK;
}

/* Streams `n` sessions of quiet noise in lockstep, chunk by chunk, to the
 * end: every encoder plan a batch of n windows uses (each window length
 * the first chunks and the steady state have, and the last) is built
 * before the first session comes, instead of during it (Triton's
 * model_warmup). A few seconds of audio per batch size. */
static infd_status warm_up(kind_model *k, int n, int chunk_ms, int span_ms, infd_error *err)
{
    infd_asr_stream *s[64] = { NULL };
    int piece = k->rate * chunk_ms / 1000;
    float *buf = malloc((size_t)piece * sizeof(float));
    infd_status st =
        buf ? INFD_STATUS_OK : infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    uint32_t seed = 12345;
    for (int i = 0; i < piece && buf; i++) {
        seed = seed * 1664525u + 1013904223u;
        buf[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.01f;
    }
    for (int i = 0; i < n && st == INFD_STATUS_OK; i++)
        st = infd_asr_stream_create(k->rec, &s[i], err);
    for (int t = 0; t < span_ms && st == INFD_STATUS_OK; t += chunk_ms) {
        for (int i = 0; i < n && st == INFD_STATUS_OK; i++)
            st = infd_asr_accept_waveform(s[i], k->rate, buf, piece, err);
        if (st == INFD_STATUS_OK)
            st = decode_ready(k, s, n, err);
    }
    for (int i = 0; i < n && st == INFD_STATUS_OK; i++)
        infd_asr_input_finished(s[i]);
    if (st == INFD_STATUS_OK)
        st = decode_ready(k, s, n, err);
    for (int i = 0; i < n; i++)
        infd_asr_stream_destroy(s[i]);
    free(buf);
    return st;
}

static void kind_sequence_free(void *state, int slot)
{
    kind_model *k = state;
    if (slot >= 0 && slot < k->n_slots) {
        infd_asr_stream_destroy(k->slots[slot]);
        k->slots[slot] = NULL;
    }
}

/* Sets one BYTES element output (shape [1], or [1, 1] with the batch dim). */
static infd_status set_text(kind_model *k, infd_request *req, int j, const char *text,
                            infd_error *err)
{
    size_t n = strlen(text);
    char stack[4096];
    char *buf = n + 4 <= sizeof(stack) ? stack : malloc(n + 4);
    if (!buf)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    uint32_t len = (uint32_t)n;
    buf[0] = (char)(len & 0xff);
    buf[1] = (char)((len >> 8) & 0xff);
    buf[2] = (char)((len >> 16) & 0xff);
    buf[3] = (char)((len >> 24) & 0xff);
    memcpy(buf + 4, text, n);
    infd_tensor t = { .dtype = INFD_DTYPE_BYTES, .data = buf, .nbytes = n + 4 };
    t.shape.rank = 1 + k->lead;
    t.shape.dims[0] = t.shape.dims[1] = 1;
    infd_status st = infd_request_output_set(req, j, &t, err);
    if (buf != stack)
        free(buf);
    return st;
}

/* The request's outputs from its stream's result. */
static void respond(kind_model *k, infd_request *req, infd_asr_stream *s, bool final)
{
    infd_error err;
    infd_error_clear(&err);
    infd_asr_result *res = NULL;
    infd_status st = infd_asr_get_result(k->rec, s, &res, &err);
    if (st == INFD_STATUS_OK)
        st = set_text(k, req, OUT_TRANSCRIPT, res->text, &err);
    if (st == INFD_STATUS_OK)
        st = set_text(k, req, OUT_RESULT, res->json, &err);
    if (st == INFD_STATUS_OK) {
        uint8_t f = final ? 1 : 0;
        infd_tensor t = { .dtype = INFD_DTYPE_BOOL, .data = &f, .nbytes = 1 };
        t.shape.rank = 1 + k->lead;
        t.shape.dims[0] = t.shape.dims[1] = 1;
        st = infd_request_output_set(req, OUT_IS_FINAL, &t, &err);
    }
    infd_asr_result_destroy(res);
    if (st != INFD_STATUS_OK)
        infd_request_fail(req, st, err.msg);
}

/* Decodes every ready chunk of the n streams, in rounds of one chunk per
 * stream that has one. */
static infd_status decode_ready(kind_model *k, infd_asr_stream **s, int n, infd_error *err)
{
    infd_asr_stream *ready[256];
    for (;;) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (s[i] && infd_asr_is_ready(k->rec, s[i]))
                ready[m++] = s[i];
        if (m == 0)
            return INFD_STATUS_OK;
        infd_status st = infd_asr_decode_multiple(k->rec, ready, m, err);
        if (st != INFD_STATUS_OK)
            return st;
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static infd_status run_streaming(kind_model *k, infd_batch *b, infd_error *err)
{
    int n = infd_batch_size(b);
    uint64_t t0 = now_ns();
    infd_asr_stream *streams[256];
    char msg[INFD_ERROR_MSG_BYTES + 64];
    for (int i = 0; i < n; i++) {
        infd_request *req = infd_batch_request(b, i);
        infd_sequence_info si;
        infd_request_sequence(req, &si);
        streams[i] = NULL;
        infd_error e;
        infd_error_clear(&e);
        if (si.slot < 0 || si.slot >= k->n_slots) {
            infd_request_fail(req, INFD_STATUS_INTERNAL, "no sequence slot");
            continue;
        }
        infd_asr_stream **slot = &k->slots[si.slot];
        if (si.flags & INFD_SEQUENCE_START) {
            infd_asr_stream_destroy(*slot);
            *slot = NULL;
            if (infd_asr_stream_create(k->rec, slot, &e) != INFD_STATUS_OK) {
                infd_request_fail(req, e.code, e.msg);
                continue;
            }
        }
        if (!*slot) {
            infd_request_fail(req, INFD_STATUS_INTERNAL, "the sequence has no stream");
            continue;
        }
        infd_tensor audio;
        infd_status st = infd_request_input(req, 0, &audio, &e);
        if (st == INFD_STATUS_OK)
            st = infd_asr_accept_waveform(*slot, k->rate, audio.data,
                                          (int64_t)(audio.nbytes / sizeof(float)), &e);
        if (st != INFD_STATUS_OK) {
            snprintf(msg, sizeof(msg), "input 'AUDIO': %s", e.msg);
            infd_request_fail(req, st, msg);
            continue;
        }
        if (si.flags & INFD_SEQUENCE_END)
            infd_asr_input_finished(*slot);
        streams[i] = *slot;
    }
    uint64_t t1 = now_ns();
    infd_status st = decode_ready(k, streams, n, err);
    if (st != INFD_STATUS_OK)
        return st;
    uint64_t t2 = now_ns();
    for (int i = 0; i < n; i++) {
        if (!streams[i])
            continue;
        infd_request *req = infd_batch_request(b, i);
        infd_sequence_info si;
        infd_request_sequence(req, &si);
        bool end = (si.flags & INFD_SEQUENCE_END) != 0;
        bool at_endpoint = !end && k->endpoint && infd_asr_is_endpoint(k->rec, streams[i]);
        respond(k, req, streams[i], end || at_endpoint);
        if (at_endpoint)
            infd_asr_reset(k->rec, streams[i]);
    }
    if (k->debug)
        fprintf(stderr,
                "infd asr: model '%s': batch of %d: %.2f ms: audio in %.2f, decoding %.2f, "
                "results %.2f\n",
                k->name, n, (double)(now_ns() - t0) / 1e6, (double)(t1 - t0) / 1e6,
                (double)(t2 - t1) / 1e6, (double)(now_ns() - t2) / 1e6);
    return INFD_STATUS_OK;
}

static infd_status run_offline(kind_model *k, infd_batch *b, infd_error *err)
{
    int n = infd_batch_size(b);
    infd_asr_stream *streams[256];
    char msg[INFD_ERROR_MSG_BYTES + 64];
    infd_status st = INFD_STATUS_OK;
    for (int i = 0; i < n; i++) {
        infd_request *req = infd_batch_request(b, i);
        streams[i] = NULL;
        infd_error e;
        infd_error_clear(&e);
        infd_tensor in;
        asr_audio a = { 0 };
        infd_status rs = infd_request_input(req, 0, &in, &e);
        if (rs == INFD_STATUS_OK) {
            /* One element: a 4-byte length, then the file. */
            const uint8_t *p = in.data;
            size_t len = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
            rs = asr_audio_read_memory(p + 4, len, "AUDIO", k->rate, &a, &e);
        }
        if (rs == INFD_STATUS_OK)
            rs = infd_asr_stream_create(k->rec, &streams[i], &e);
        if (rs == INFD_STATUS_OK)
            rs = infd_asr_accept_waveform(streams[i], k->rate, a.samples, a.n, &e);
        asr_audio_fini(&a);
        if (rs != INFD_STATUS_OK) {
            snprintf(msg, sizeof(msg), "input 'AUDIO': %s", e.msg);
            infd_request_fail(req, rs, msg);
            infd_asr_stream_destroy(streams[i]);
            streams[i] = NULL;
            continue;
        }
        infd_asr_input_finished(streams[i]);
    }
    st = decode_ready(k, streams, n, err);
    for (int i = 0; i < n; i++) {
        if (streams[i] && st == INFD_STATUS_OK)
            respond(k, infd_batch_request(b, i), streams[i], true);
        infd_asr_stream_destroy(streams[i]);
    }
    return st;
}

static infd_status kind_run_batch(void *state, int instance, infd_batch *b, infd_error *err)
{
    (void)instance;
    kind_model *k = state;
    if (infd_batch_size(b) > 256)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "batch of %d; at most 256",
                              infd_batch_size(b));
    return k->streaming ? run_streaming(k, b, err) : run_offline(k, b, err);
}

static const infd_model_kind asr_kind = {
    .name = "asr",
    .platform = "infd_asr",
    .load = kind_load,
    .unload = kind_unload,
    .run_batch = kind_run_batch,
    .sequence_free = kind_sequence_free,
};

infd_status infd_asr_register_model_kind(infd_error *err)
{
    return infd_model_kind_register(&asr_kind, err);
}
