/*
 * tap.c - recording streams and playing them back (tap.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yajl/yajl_tree.h>

#include "apps/asr/audio.h"
#include "apps/asr/tap.h"

struct asr_tap {
    FILE *audio, *features, *events;
};

static atomic_int tap_count;
static atomic_flag tap_warned = ATOMIC_FLAG_INIT;

static FILE *open_in(const char *dir, const char *name)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return fopen(path, "w");
}

asr_tap *asr_tap_open(const char *settings)
{
    const char *root = getenv("INFD_ASR_TAP_DIR");
    if (!root || !*root)
        return NULL;
    char dir[PATH_MAX - 32];
    snprintf(dir, sizeof(dir), "%s/stream-%ld-%d", root, (long)getpid(),
             atomic_fetch_add(&tap_count, 1));
    asr_tap *t = calloc(1, sizeof(*t));
    bool ok = t && (mkdir(root, 0755) == 0 || errno == EEXIST) && mkdir(dir, 0755) == 0;
    if (ok) {
        t->audio = open_in(dir, "audio.f32");
        t->features = open_in(dir, "features.f32");
        t->events = open_in(dir, "events.jsonl");
        ok = t->audio && t->features && t->events;
    }
    if (!ok) {
        if (!atomic_flag_test_and_set(&tap_warned))
            fprintf(stderr,
                    "infd asr: INFD_ASR_TAP_DIR: cannot record in %s: %s; streams run "
                    "untapped\n",
                    dir, strerror(errno));
        asr_tap_close(t);
        return NULL;
    }
    fprintf(t->events, "{\"event\":\"start\",%s}\n", settings);
    fflush(t->events);
    return t;
}

void asr_tap_close(asr_tap *t)
{
    if (!t)
        return;
    if (t->audio)
        fclose(t->audio);
    if (t->features)
        fclose(t->features);
    if (t->events)
        fclose(t->events);
    free(t);
}

void asr_tap_accept(asr_tap *t, int rate, const float *x, int64_t n)
{
    if (!t || n <= 0)
        return;
    fwrite(x, sizeof(float), (size_t)n, t->audio);
    fflush(t->audio);
    fprintf(t->events, "{\"event\":\"accept\",\"rate\":%d,\"n\":%lld}\n", rate, (long long)n);
    fflush(t->events);
}

void asr_tap_finish(asr_tap *t)
{
    if (!t)
        return;
    fputs("{\"event\":\"finish\"}\n", t->events);
    fflush(t->events);
}

void asr_tap_reset(asr_tap *t)
{
    if (!t)
        return;
    fputs("{\"event\":\"reset\"}\n", t->events);
    fflush(t->events);
}

void asr_tap_decode(asr_tap *t, int64_t chunk, int64_t ws, int64_t we, int n_mels, int64_t frames,
                    const float *feats, const asr_tdt_token *tokens, int64_t n)
{
    if (!t)
        return;
    fwrite(feats, sizeof(float), (size_t)(n_mels * frames), t->features);
    fflush(t->features);
    fprintf(t->events,
            "{\"event\":\"decode\",\"chunk\":%lld,\"window\":[%lld,%lld],\"features\":[%d,%lld],"
            "\"tokens\":[",
            (long long)chunk, (long long)ws, (long long)we, n_mels, (long long)frames);
    for (int64_t i = 0; i < n; i++)
        fprintf(t->events, "%s[%d,%lld,%d]", i ? "," : "", tokens[i].id, (long long)tokens[i].frame,
                tokens[i].duration);
    fputs("]}\n", t->events);
    fflush(t->events);
}

/* ------------------------------------------------------------------------ */

static double num(yajl_val o, const char *k, double dflt)
{
    const char *path[] = { k, NULL };
    yajl_val v = yajl_tree_get(o, path, yajl_t_number);
    return v ? YAJL_GET_DOUBLE(v) : dflt;
}

static const char *text_of(yajl_val o, const char *k)
{
    const char *path[] = { k, NULL };
    yajl_val v = yajl_tree_get(o, path, yajl_t_string);
    return v ? YAJL_GET_STRING(v) : NULL;
}

static infd_status print_segment(const asr_stream *s, int segment, FILE *out, infd_error *err)
{
    asr_result r;
    infd_status st = asr_stream_result(s, &r, err);
    if (st != INFD_STATUS_OK)
        return st;
    fprintf(out, "segment %d (%lld tokens): %s\n", segment, (long long)r.n_tokens, r.text);
    asr_result_fini(&r);
    return INFD_STATUS_OK;
}

infd_status asr_replay(const char *dir, const char *model_dir, FILE *out, infd_error *err)
{
    char path[PATH_MAX + 32], apath[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/events.jsonl", dir);
    snprintf(apath, sizeof(apath), "%s/audio.f32", dir);
    FILE *ev = fopen(path, "r"), *au = fopen(apath, "rb");
    infd_status st = INFD_STATUS_OK;
    if (!ev || !au)
        st = infd_error_set(err, INFD_STATUS_IO, "%s: cannot open: %s", ev ? apath : path,
                            strerror(errno));
    asr_model *m = NULL;
    asr_stream *s = NULL;
    float *x = NULL;
    char *line = NULL;
    size_t cap = 0;
    int line_no = 0, segment = 0, chunks = 0;
    while (st == INFD_STATUS_OK && getline(&line, &cap, ev) > 0) {
        line_no++;
        char ebuf[128] = "";
        yajl_val o = yajl_tree_parse(line, ebuf, sizeof(ebuf));
        const char *kind = o && YAJL_IS_OBJECT(o) ? text_of(o, "event") : NULL;
        if (!kind) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s:%d: not an event: expected {\"event\": ...}", path, line_no);
        } else if ((strcmp(kind, "start") == 0) != (m == NULL)) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s:%d: a \"%s\" event %s", path,
                                line_no, kind, m ? "after the start" : "before the start");
        } else if (strcmp(kind, "start") == 0) {
            asr_model_options mo;
            asr_model_options_init(&mo);
            mo.n_threads = (int)num(o, "n_threads", 0);
            mo.bucket_frames = (int)num(o, "bucket_frames", 0);
            mo.max_seconds = num(o, "max_seconds", 0);
            const char *dev = text_of(o, "device");
            mo.device = dev && strcmp(dev, "cuda") == 0 ? INFD_DEVICE_CUDA : INFD_DEVICE_CPU;
            mo.device_index = (int)num(o, "device_index", 0);
            mo.precision = (infd_precision)num(o, "precision", INFD_PRECISION_FP32);
            const char *md = model_dir ? model_dir : text_of(o, "model");
            asr_stream_options so;
            asr_stream_options_init(&so);
            so.chunk_s = num(o, "chunk_s", 0);
            so.left_s = num(o, "left_s", 0);
            so.right_s = num(o, "right_s", 0);
            so.rule1_s = num(o, "rule1_s", 0);
            so.rule2_s = num(o, "rule2_s", 0);
            so.rule3_s = num(o, "rule3_s", 0);
            st = !md ? infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s:%d: the start names no model", path, line_no)
                     : asr_model_load(md, &mo, &m, err);
            if (st == INFD_STATUS_OK)
                st = asr_stream_create(m, &so, &s, err);
            if (st == INFD_STATUS_OK)
                fprintf(out, "replaying %s with %s\n", dir, md);
        } else if (strcmp(kind, "accept") == 0) {
            int rate = (int)num(o, "rate", 0);
            double n = num(o, "n", -1);
            if (!(n >= 0 && n <= (double)ASR_AUDIO_MAX_FRAMES)) {
                st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                    "%s:%d: an accept of %g samples", path, line_no, n);
            } else {
                float *nx = realloc(x, ((size_t)n + 1) * sizeof(float));
                if (!nx) {
                    st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
                } else if ((x = nx), fread(x, sizeof(float), (size_t)n, au) != (size_t)n) {
                    st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                        "%s: shorter than %s:%d says", apath, path, line_no);
                } else {
                    st = asr_stream_accept(s, rate, x, (int64_t)n, err);
                }
            }
        } else if (strcmp(kind, "finish") == 0) {
            asr_stream_finish(s);
        } else if (strcmp(kind, "reset") == 0) {
            st = print_segment(s, segment++, out, err);
            asr_stream_reset(s);
        } else if (strcmp(kind, "decode") == 0) {
            const char *k_tokens[] = { "tokens", NULL };
            yajl_val want = yajl_tree_get(o, k_tokens, yajl_t_array);
            int64_t before = 0, after = 0;
            asr_stream_tokens(s, &before);
            if (!asr_stream_ready(s))
                st = infd_error_set(err, INFD_STATUS_INTERNAL,
                                    "%s:%d: chunk %d was decoded here, but the replay has no "
                                    "chunk ready",
                                    path, line_no, chunks);
            else
                st = asr_stream_decode(s, err);
            const asr_tdt_token *got = asr_stream_tokens(s, &after);
            size_t nw = want ? YAJL_GET_ARRAY(want)->len : 0;
            bool same = st == INFD_STATUS_OK && want && (size_t)(after - before) == nw;
            for (size_t i = 0; same && i < nw; i++) {
                yajl_val t = YAJL_GET_ARRAY(want)->values[i];
                same = YAJL_IS_ARRAY(t) && YAJL_GET_ARRAY(t)->len == 3;
                for (int k = 0; same && k < 3; k++) {
                    yajl_val v = YAJL_GET_ARRAY(t)->values[k];
                    long long g = k == 0   ? got[before + (int64_t)i].id
                                  : k == 1 ? got[before + (int64_t)i].frame
                                           : got[before + (int64_t)i].duration;
                    same = YAJL_IS_INTEGER(v) && YAJL_GET_INTEGER(v) == g;
                }
            }
            if (st == INFD_STATUS_OK && !same)
                st = infd_error_set(err, INFD_STATUS_INTERNAL,
                                    "%s:%d: chunk %d decoded to %lld tokens that differ from "
                                    "the %zu recorded",
                                    path, line_no, chunks, (long long)(after - before), nw);
            chunks++;
        } else {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s:%d: unknown event \"%s\"",
                                path, line_no, kind);
        }
        yajl_tree_free(o);
    }
    if (st == INFD_STATUS_OK && !m)
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: no start event", path);
    if (st == INFD_STATUS_OK)
        st = print_segment(s, segment, out, err);
    if (st == INFD_STATUS_OK) {
        fprintf(out, "replay: %d chunks, every one as recorded\n", chunks);
    }
    free(line);
    free(x);
    asr_stream_destroy(s);
    asr_model_destroy(m);
    if (ev)
        fclose(ev);
    if (au)
        fclose(au);
    return st;
}
