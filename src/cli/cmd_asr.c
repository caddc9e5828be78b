/*
 * cmd_asr.c - `infd asr`: speech recognition from the command line (issue
 * #21, being built).
 *
 *   infd asr --features FILE [-o OUT.npy] [--mels N] [--no-normalize]
 *
 * Built so far: the front end. --features decodes FILE (WAV or any format
 * libsndfile reads), mixes it to mono, resamples it to 16 kHz (libsoxr)
 * and computes Parakeet's log-mel features (src/apps/asr/features.h),
 * printing their shape and writing them, [n_mels, frames] FP32, to OUT.npy.
 * Transcription (`infd asr MODEL_DIR FILE.wav...`) is not built yet: it
 * says so and exits with status 3.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/asr/audio.h"
#include "apps/asr/features.h"
#include "cli/cli.h"
#include "cli/npy.h"
#include "core/alloc.h"

static void usage(void)
{
    fprintf(stderr, "usage: infd asr --features FILE [-o OUT.npy] [--mels N] [--no-normalize]\n"
                    "       infd asr MODEL_DIR FILE.wav...   (not built yet: issue #21)\n");
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

int infd_cli_asr(int argc, char **argv)
{
    const char *feat_path = NULL, *out_path = NULL;
    int n_mels = 128;
    bool normalize = true;
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
                return INFD_EXIT_USAGE;
            }
            n_mels = (int)v;
        } else if (strcmp(argv[i], "--no-normalize") == 0) {
            normalize = false;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            return INFD_EXIT_OK;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "infd asr: unknown option '%s'\n", argv[i]);
            usage();
            return INFD_EXIT_USAGE;
        } else if (!feat_path) {
            fprintf(stderr, "infd asr: transcription (MODEL_DIR FILE.wav...) is not built yet "
                            "(being built in issue #21); --features FILE works\n");
            return INFD_EXIT_NOT_BUILT;
        }
    }
    if (!feat_path) {
        usage();
        return INFD_EXIT_USAGE;
    }
    return features(feat_path, out_path, n_mels, normalize);
}
