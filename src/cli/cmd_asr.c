/*
 * cmd_asr.c - `infd asr`: speech recognition from the command line (issue
 * #21, being built).
 *
 *   infd asr MODEL_DIR FILE... [--device cpu|cuda] [--threads N] [--json]
 *   infd asr --features FILE [-o OUT.npy] [--mels N] [--no-normalize]
 *
 * MODEL_DIR FILE...: transcribes each sound file offline with the
 * Parakeet-TDT model in MODEL_DIR (the onnx-asr layout,
 * src/apps/asr/recognizer.h), printing "FILE: text", or with --json one
 * object per file with each token's piece, encoder frame, start time and
 * duration. Streaming (--stream) is not built yet.
 *
 * --features decodes FILE (WAV or any format libsndfile reads), mixes it to
 * mono, resamples it to 16 kHz (libsoxr) and computes Parakeet's log-mel
 * features (src/apps/asr/features.h), printing their shape and writing
 * them, [n_mels, frames] FP32, to OUT.npy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>

#include "apps/asr/audio.h"
#include "apps/asr/features.h"
#include "apps/asr/recognizer.h"
#include "cli/cli.h"
#include "cli/npy.h"
#include "core/alloc.h"

static void usage(void)
{
    fprintf(stderr, "usage: infd asr MODEL_DIR FILE... [--device cpu|cuda] [--threads N] [--json]\n"
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
static void print_json(const asr_model *m, const char *file, const asr_audio *a,
                       const asr_result *r)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g)
        return;
    yajl_gen_map_open(g);
    gen_str(g, "file", file);
    gen_fixed(g, "seconds", (double)a->n / a->rate, 3);
    gen_key(g, "frames");
    yajl_gen_integer(g, r->n_frames);
    gen_key(g, "joint_runs");
    yajl_gen_integer(g, r->n_joint_runs);
    gen_str(g, "text", r->text);
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

static int transcribe(const char *dir, char **files, int n_files, const asr_model_options *o,
                      bool json)
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
        infd_status st = asr_audio_read_file(files[f], asr_model_sample_rate(m), &a, &err);
        if (st == INFD_STATUS_OK &&
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
        if (json) {
            print_json(m, files[f], &a, &r);
        } else {
            printf("%s: %s\n", files[f], r.text);
        }
        asr_result_fini(&r);
        asr_audio_fini(&a);
    }
    asr_model_destroy(m);
    return rc;
}

int infd_cli_asr(int argc, char **argv)
{
    const char *feat_path = NULL, *out_path = NULL;
    int n_mels = 128;
    bool normalize = true, json = false;
    char **pos = calloc((size_t)argc + 1, sizeof(char *));
    int n_pos = 0;
    asr_model_options o;
    asr_model_options_init(&o);
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
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (!end || *end || v < 1 || v > 1024) {
                fprintf(stderr, "infd asr: --threads takes 1 to 1024, not '%s'\n", argv[i]);
                goto out;
            }
            o.n_threads = (int)v;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "cpu") == 0) {
                o.device = INFD_DEVICE_CPU;
            } else if (strcmp(argv[i], "cuda") == 0) {
                o.device = INFD_DEVICE_CUDA;
            } else {
                fprintf(stderr, "infd asr: --device takes cpu or cuda, not '%s'\n", argv[i]);
                goto out;
            }
        } else if (strcmp(argv[i], "--no-normalize") == 0) {
            normalize = false;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--stream") == 0) {
            fprintf(stderr, "infd asr: --stream is not built yet (being built in issue #21); "
                            "offline transcription works\n");
            rc = INFD_EXIT_NOT_BUILT;
            goto out;
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
    if (feat_path && n_pos == 0)
        rc = features(feat_path, out_path, n_mels, normalize);
    else if (!feat_path && n_pos >= 2)
        rc = transcribe(pos[0], pos + 1, n_pos - 1, &o, json);
    else
        usage();
out:
    free(pos);
    return rc;
}
