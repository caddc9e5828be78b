/*
 * cmd_asr.c - `infd asr`: speech recognition from the command line (issue
 * #21, being built).
 *
 *   infd asr MODEL_DIR FILE... [--stream [--chunk-ms N] [--left-ms N]
 *            [--right-ms N] [--feed-ms N] [--endpoint]] [--device cpu|cuda]
 *            [--precision fp32|tf32|bf16|fp16] [--threads N] [--json]
 *   infd asr MODEL_DIR --write-contract [-o FILE]
 *   infd asr --replay TAPDIR [MODEL_DIR]
 *   infd asr --features FILE [-o OUT.npy] [--mels N] [--no-normalize]
 *
 * The model's contract (src/apps/asr/contract.h) is checked when it loads
 * if its file is there, <parent of MODEL_DIR>/contracts/<model>.contract.json
 * or --contract FILE; --write-contract writes it there (or to -o FILE).
 *
 * MODEL_DIR FILE...: transcribes each sound file with the Parakeet-TDT
 * model in MODEL_DIR (the onnx-asr or the sherpa-onnx layout,
 * src/apps/asr/recognizer.h), printing "FILE: text", or with --json one
 * object per transcript with its words (start and end in seconds) and each
 * token's piece, encoder frame, start time and duration.
 *
 * Offline by default. --stream feeds the file to a stream in pieces of
 * --feed-ms (default 100) at the file's own rate, as a live client would,
 * decodes each chunk of --chunk-ms (default 2000) as soon as --right-ms
 * (2000) of audio after it has come, encoded with --left-ms (10000) before
 * it, and prints a partial transcript whenever it grows ("FILE [partial
 * 1.20 s]: ..." or "final": false) and the final one at the end. With
 * --endpoint a segment ends at an endpoint (sherpa-onnx's rules): it is
 * printed as final and the next begins; --endpoint-rules R1,R2,R3 sets
 * the rules' seconds (default 2.4,1.2,20; 0 turns one off).
 *
 * --device, --precision and --threads are those of `infd run` (cli.h,
 * infd_cli_parse_common), applied to every plan of the model.
 *
 * --replay plays back a stream recorded with INFD_ASR_TAP_DIR set
 * (src/apps/asr/tap.h) with the model it names (or MODEL_DIR), checking
 * each chunk gives its recorded tokens; exit 0 when all do.
 *
 * --features decodes FILE (WAV or any format libsndfile reads), mixes it to
 * mono, resamples it to 16 kHz (libsoxr) and computes Parakeet's log-mel
 * features (src/apps/asr/features.h), printing their shape and writing
 * them, [n_mels, frames] FP32, to OUT.npy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yajl/yajl_gen.h>

#include "apps/asr/audio.h"
#include "apps/asr/features.h"
#include "apps/asr/recognizer.h"
#include "apps/asr/tap.h"
#include "cli/cli.h"
#include "cli/npy.h"
#include "core/alloc.h"

static void usage(void)
{
    fprintf(stderr, "usage: infd asr MODEL_DIR FILE... [--stream [--chunk-ms N] [--left-ms N] "
                    "[--right-ms N]\n"
                    "                [--feed-ms N] [--endpoint] [--endpoint-rules R1,R2,R3]]\n"
                    "                [--contract FILE] [--device cpu|cuda] "
                    "[--precision fp32|tf32|bf16|fp16]\n"
                    "                [--threads N] [--json]\n"
                    "       infd asr MODEL_DIR --write-contract [-o FILE]\n"
                    "       infd asr --replay TAPDIR [MODEL_DIR]\n"
                    "       infd asr --features FILE [-o OUT.npy] [--mels N] [--no-normalize]\n");
}

static int features(const char *path, const char *out_path, int n_mels, bool normalize)
{
    int rc = INFD_EXIT_FAILURE;
    infd_error err = { 0 };
    asr_audio a = { 0 };
    asr_features *f = NULL;
    float *feat = NULL;
    asr_feature_params p = asr_feature_params_nemo(n_mels);
    if (!normalize)
        p.normalize = ASR_NORM_NONE;
    if (asr_features_create(&p, &f, &err) != INFD_STATUS_OK ||
        asr_audio_read_file(path, p.sample_rate, &a, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd asr: %s\n", err.msg);
        goto out;
    }
    int64_t frames = asr_features_frames(f, a.n);
    feat = infd_malloc((size_t)(frames * n_mels) * sizeof(float));
    if (!feat) {
        fprintf(stderr, "infd asr: out of memory for %lld frames\n", (long long)frames);
        goto out;
    }
    int64_t valid = asr_features_compute(f, a.samples, a.n, feat, frames);
    printf("%s: %lld samples at %d Hz (the file: %d Hz, %d channel%s); features [%d, %lld], "
           "%lld valid frames\n",
           path, (long long)a.n, a.rate, a.rate_in, a.channels_in, a.channels_in == 1 ? "" : "s",
           n_mels, (long long)frames, (long long)valid);
    if (out_path) {
        infd_tensor t = { 0 };
        t.dtype = INFD_DTYPE_FP32;
        t.shape.rank = 2;
        t.shape.dims[0] = n_mels;
        t.shape.dims[1] = frames;
        t.data = feat;
        t.nbytes = (size_t)(frames * n_mels) * sizeof(float);
        if (infd_npy_write(out_path, &t, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd asr: %s\n", err.msg);
            goto out;
        }
    }
    rc = INFD_EXIT_OK;
out:
    infd_free(feat);
    asr_audio_fini(&a);
    asr_features_destroy(f);
    return rc;
}

static void gen_key(yajl_gen g, const char *k)
{
    yajl_gen_string(g, (const unsigned char *)k, strlen(k));
}

static void gen_str(yajl_gen g, const char *k, const char *v)
{
    gen_key(g, k);
    yajl_gen_string(g, (const unsigned char *)v, strlen(v));
}

/* A number with `decimals` places (yajl_gen_double prints 17 digits). */
static void gen_fixed(yajl_gen g, const char *k, double v, int decimals)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%.*f", decimals, v);
    gen_key(g, k);
    yajl_gen_number(g, buf, (size_t)n);
}

/* One file's result as a line of JSON (yajl's generator). */
static void print_json(const asr_model *m, const char *file, double seconds, int segment,
                       bool final, const asr_result *r)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g)
        return;
    yajl_gen_map_open(g);
    gen_str(g, "file", file);
    gen_fixed(g, "seconds", seconds, 3);
    gen_key(g, "final");
    yajl_gen_bool(g, final);
    gen_key(g, "segment");
    yajl_gen_integer(g, segment);
    gen_key(g, "start_frame");
    yajl_gen_integer(g, r->start_frame);
    gen_key(g, "frames");
    yajl_gen_integer(g, r->n_frames);
    gen_key(g, "joint_runs");
    yajl_gen_integer(g, r->n_joint_runs);
    gen_str(g, "text", r->text);
    gen_key(g, "words");
    yajl_gen_array_open(g);
    for (int64_t i = 0; i < r->n_words; i++) {
        yajl_gen_map_open(g);
        gen_key(g, "word");
        yajl_gen_string(g, (const unsigned char *)r->text + r->words[i].text_off,
                        r->words[i].text_len);
        gen_fixed(g, "start", r->words[i].start, 3);
        gen_fixed(g, "end", r->words[i].end, 3);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    gen_key(g, "tokens");
    yajl_gen_array_open(g);
    for (int64_t i = 0; i < r->n_tokens; i++) {
        yajl_gen_map_open(g);
        gen_key(g, "id");
        yajl_gen_integer(g, r->tokens[i].id);
        gen_str(g, "piece", asr_model_piece(m, r->tokens[i].id));
        gen_key(g, "frame");
        yajl_gen_integer(g, r->tokens[i].frame);
        gen_fixed(g, "start", (double)r->tokens[i].frame * r->frame_seconds, 3);
        gen_key(g, "duration");
        yajl_gen_integer(g, r->tokens[i].duration);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
    const unsigned char *buf = NULL;
    size_t len = 0;
    if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok) {
        fwrite(buf, 1, len, stdout);
        putchar('\n');
    }
    yajl_gen_free(g);
}

/* A transcript: a JSON line, or "FILE: text" ("FILE [partial S s]: text"). */
static void print_result(const asr_model *m, const char *file, double seconds, int segment,
                         bool final, const asr_result *r, bool json)
{
    if (json)
        print_json(m, file, seconds, segment, final, r);
    else if (final)
        printf("%s: %s\n", file, r->text);
    else
        printf("%s [partial %.2f s]: %s\n", file, seconds, r->text);
    fflush(stdout);
}

/* Feeds the file's samples to a stream in pieces of feed_ms, decoding what
 * is ready after each, printing partial and final transcripts. */
static infd_status stream_file(asr_model *m, const char *file, const asr_audio *a,
                               const asr_stream_options *so, int feed_ms, bool endpoint, bool json,
                               infd_error *err)
{
    asr_stream *s = NULL;
    infd_status st = asr_stream_create(m, so, &s, err);
    int64_t piece = (int64_t)a->rate * feed_ms / 1000, shown = -1;
    int segment = 0;
    if (piece < 1)
        piece = 1;
    for (int64_t at = 0; st == INFD_STATUS_OK && !asr_stream_done(s);) {
        if (at < a->n) {
            int64_t k = a->n - at < piece ? a->n - at : piece;
            st = asr_stream_accept(s, a->rate, a->samples + at, k, err);
            at += k;
        } else {
            asr_stream_finish(s);
        }
        bool decoded = false;
        while (st == INFD_STATUS_OK && asr_stream_ready(s)) {
            st = asr_stream_decode(s, err);
            decoded = true;
        }
        if (st != INFD_STATUS_OK || !decoded)
            continue;
        asr_result r;
        st = asr_stream_result(s, &r, err);
        if (st != INFD_STATUS_OK)
            break;
        bool end = endpoint && asr_stream_endpoint(s) && r.n_tokens > 0;
        if (!asr_stream_done(s) && (r.n_tokens != shown || end))
            print_result(m, file, (double)at / a->rate, segment, end, &r, json);
        shown = r.n_tokens;
        if (end) {
            asr_stream_reset(s);
            segment++;
            shown = 0;
        }
        asr_result_fini(&r);
    }
    if (st == INFD_STATUS_OK) {
        asr_result r;
        st = asr_stream_result(s, &r, err);
        if (st == INFD_STATUS_OK && (segment == 0 || r.n_tokens > 0))
            print_result(m, file, (double)a->n / a->rate, segment, true, &r, json);
        if (st == INFD_STATUS_OK)
            asr_result_fini(&r);
    }
    asr_stream_destroy(s);
    return st;
}

typedef struct stream_args {
    bool on, endpoint;
    asr_stream_options o;
    int feed_ms;
} stream_args;

/* Writes the loaded model's contract to `out` (NULL: its contract path,
 * making the contracts/ folder). */
static int write_contract(const char *dir, const asr_model_options *o, const char *out)
{
    infd_error err = { 0 };
    asr_model *m = NULL;
    if (asr_model_load(dir, o, &m, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd asr: %s\n", err.msg);
        return INFD_EXIT_FAILURE;
    }
    const char *path = out ? out : asr_model_contract_path(m);
    char *json = asr_model_contract_json(m);
    int rc = INFD_EXIT_FAILURE;
    if (!out) { /* the contracts/ folder beside the model */
        char folder[4096];
        snprintf(folder, sizeof(folder), "%s", path);
        char *slash = strrchr(folder, '/');
        if (slash) {
            *slash = '\0';
            if (mkdir(folder, 0755) != 0 && errno != EEXIST)
                fprintf(stderr, "infd asr: %s: cannot make the folder: %s\n", folder,
                        strerror(errno));
        }
    }
    FILE *f = json ? fopen(path, "w") : NULL;
    if (!f) {
        fprintf(stderr, "infd asr: %s: cannot write: %s\n", path,
                json ? strerror(errno) : "out of memory");
    } else if (fputs(json, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "infd asr: %s: cannot write: %s\n", path, strerror(errno));
    } else {
        printf("%s: the contract of %s\n", path, dir);
        rc = INFD_EXIT_OK;
    }
    free(json);
    asr_model_destroy(m);
    return rc;
}

static int transcribe(const char *dir, char **files, int n_files, const asr_model_options *o,
                      const stream_args *sa, bool json)
{
    infd_error err = { 0 };
    asr_model *m = NULL;
    if (asr_model_load(dir, o, &m, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd asr: %s\n", err.msg);
        return INFD_EXIT_FAILURE;
    }
    int rc = INFD_EXIT_OK;
    for (int f = 0; f < n_files; f++) {
        asr_audio a = { 0 };
        asr_result r = { 0 };
        /* a stream takes the file's own rate and resamples as it goes */
        infd_status st =
            asr_audio_read_file(files[f], sa->on ? 0 : asr_model_sample_rate(m), &a, &err);
        if (st == INFD_STATUS_OK && sa->on &&
            stream_file(m, files[f], &a, &sa->o, sa->feed_ms, sa->endpoint, json, &err) !=
                INFD_STATUS_OK) {
            infd_error_prefix(&err, "%s", files[f]);
            st = err.code;
        } else if (st == INFD_STATUS_OK && !sa->on &&
                   asr_model_transcribe(m, a.samples, a.n, &r, &err) != INFD_STATUS_OK) {
            infd_error_prefix(&err, "%s", files[f]);
            st = err.code;
        }
        if (st != INFD_STATUS_OK) {
            fprintf(stderr, "infd asr: %s\n", err.msg);
            rc = INFD_EXIT_FAILURE;
            asr_audio_fini(&a);
            continue;
        }
        if (!sa->on)
            print_result(m, files[f], (double)a.n / a.rate, 0, true, &r, json);
        asr_result_fini(&r);
        asr_audio_fini(&a);
    }
    asr_model_destroy(m);
    return rc;
}

int infd_cli_asr(int argc, char **argv)
{
    const char *feat_path = NULL, *out_path = NULL, *replay = NULL;
    int n_mels = 128;
    bool normalize = true, json = false, write = false;
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    int n_pos = 0;
    asr_model_options o;
    asr_model_options_init(&o);
    infd_cli_common common;
    memset(&common, 0, sizeof(common));
    infd_plan_options_init(&common.plan);
    stream_args sa = { .feed_ms = 100 };
    asr_stream_options_init(&sa.o);
    if (!pos)
        return INFD_EXIT_FAILURE;
    int rc = INFD_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--features") == 0 && i + 1 < argc) {
            feat_path = argv[++i];
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            out_path = argv[++i];
        } else if (strcmp(argv[i], "--mels") == 0 && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (!end || *end || v < 1 || v > 512) {
                fprintf(stderr, "infd asr: --mels takes 1 to 512, not '%s'\n", argv[i]);
                goto out;
            }
            n_mels = (int)v;
        } else if (strcmp(argv[i], "--threads") == 0 || strcmp(argv[i], "--device") == 0 ||
                   strcmp(argv[i], "--precision") == 0) {
            /* the options run and bench take, parsed alike */
            if (infd_cli_parse_common(&common, argc, argv, &i, "asr") < 0)
                goto out;
        } else if (strcmp(argv[i], "--no-normalize") == 0) {
            normalize = false;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--stream") == 0) {
            sa.on = true;
        } else if (strcmp(argv[i], "--replay") == 0 && i + 1 < argc) {
            replay = argv[++i];
        } else if (strcmp(argv[i], "--write-contract") == 0) {
            write = true;
        } else if (strcmp(argv[i], "--contract") == 0 && i + 1 < argc) {
            o.contract = argv[++i];
        } else if (strcmp(argv[i], "--endpoint") == 0) {
            sa.endpoint = true;
        } else if (strcmp(argv[i], "--endpoint-rules") == 0 && i + 1 < argc) {
            sa.endpoint = true;
            char *end = NULL;
            const char *v = argv[++i];
            sa.o.rule1_s = strtod(v, &end);
            if (end && *end == ',')
                sa.o.rule2_s = strtod(end + 1, &end);
            if (end && *end == ',')
                sa.o.rule3_s = strtod(end + 1, &end);
            if (!end || *end || !(sa.o.rule1_s >= 0 && sa.o.rule2_s >= 0 && sa.o.rule3_s >= 0)) {
                fprintf(stderr,
                        "infd asr: --endpoint-rules takes three seconds, R1,R2,R3 (0: off), "
                        "not '%s'\n",
                        v);
                goto out;
            }
        } else if ((strcmp(argv[i], "--chunk-ms") == 0 || strcmp(argv[i], "--left-ms") == 0 ||
                    strcmp(argv[i], "--right-ms") == 0 || strcmp(argv[i], "--feed-ms") == 0) &&
                   i + 1 < argc) {
            const char *opt = argv[i];
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (!end || *end || v < 0 || v > 3600000 ||
                (v == 0 && strcmp(opt, "--left-ms") && strcmp(opt, "--right-ms"))) {
                fprintf(stderr, "infd asr: %s takes milliseconds, not '%s'\n", opt, argv[i]);
                goto out;
            }
            if (strcmp(opt, "--chunk-ms") == 0)
                sa.o.chunk_s = v / 1000.0;
            else if (strcmp(opt, "--left-ms") == 0)
                sa.o.left_s = v / 1000.0;
            else if (strcmp(opt, "--right-ms") == 0)
                sa.o.right_s = v / 1000.0;
            else
                sa.feed_ms = (int)v;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            rc = INFD_EXIT_OK;
            goto out;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "infd asr: unknown option '%s'\n", argv[i]);
            usage();
            goto out;
        } else {
            pos[n_pos++] = argv[i];
        }
    }
    o.device = common.plan.device;
    o.n_threads = common.plan.n_threads;
    o.precision = common.plan.precision;
    if (replay && !feat_path && n_pos <= 1) {
        infd_error err = { 0 };
        rc = INFD_EXIT_OK;
        if (asr_replay(replay, n_pos ? pos[0] : NULL, stdout, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd asr: replay: %s\n", err.msg);
            rc = INFD_EXIT_FAILURE;
        }
    } else if (write && !feat_path && n_pos == 1)
        rc = write_contract(pos[0], &o, out_path);
    else if (feat_path && n_pos == 0)
        rc = features(feat_path, out_path, n_mels, normalize);
    else if (!feat_path && n_pos >= 2)
        rc = transcribe(pos[0], pos + 1, n_pos - 1, &o, &sa, json);
    else
        usage();
out:
    free(pos);
    return rc;
}
