/*
 * test_features.c - NeMo log-mel features (src/apps/asr/features.h): frame
 * counts, padding, normalisation, where a tone lands, parameter checks and
 * no allocation per call. tests/e2e/test_asr_features.py compares the
 * values with a numpy implementation of the recipe to 1e-4.
 */
#include "apps/asr/features.h"
#include "count_malloc.h"
#include "test.h"

static uint64_t rng = 12345;

static float noise(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}

static void test_frames_padding_and_normalisation(void)
{
    asr_feature_params p = asr_feature_params_nemo(128);
    asr_features *f = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_OK);
    int64_t n = 16000 + 37;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.3f * noise();
    int64_t frames = asr_features_frames(f, n);
    ASSERT_EQ_I64(frames, 101);
    ASSERT_EQ_I64(asr_features_valid_frames(f, n), 100);
    int64_t stride = frames + 3;
    float *out = malloc((size_t)(128 * stride) * sizeof(float));
    for (int64_t i = 0; i < 128 * stride; i++)
        out[i] = 42.0f;
    ASSERT_EQ_I64(asr_features_compute(f, x, n, out, stride), 100);
    double worst_mean = 0, worst_sd = 0;
    for (int m = 0; m < 128; m++) {
        const float *row = out + m * stride;
        double mean = 0, var = 0;
        for (int t = 0; t < 100; t++)
            mean += row[t];
        mean /= 100;
        for (int t = 0; t < 100; t++)
            var += (row[t] - mean) * (row[t] - mean);
        double sd = sqrt(var / 99);
        worst_mean = fmax(worst_mean, fabs(mean));
        worst_sd = fmax(worst_sd, fabs(sd - 1.0));
        ASSERT_TRUE(row[100] == 0.0f);  /* the padding frame */
        ASSERT_TRUE(row[101] == 42.0f); /* past the frames: untouched */
    }
    ASSERT_LE_DBL(worst_mean, 1e-5);
    ASSERT_LE_DBL(worst_sd, 1e-3); /* std + 1e-5 in the denominator */
    free(x);
    free(out);
    asr_features_destroy(f);
}

static void test_tone_lands_in_its_band(void)
{
    /* A 1 kHz tone, unnormalised: the largest log-mel is the filter whose
     * centre is nearest 1 kHz (Slaney: linear below 1 kHz, 200/3 Hz a mel;
     * 128 filters over 0..8 kHz, 1 kHz is mel 15 of 45.25). */
    asr_feature_params p = asr_feature_params_nemo(128);
    p.normalize = ASR_NORM_NONE;
    p.preemph = 0.0f;
    asr_features *f = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_OK);
    int64_t n = 8000;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.5f * (float)sin(2 * M_PI * 1000.0 * (double)i / 16000.0);
    int64_t frames = asr_features_frames(f, n);
    float *out = malloc((size_t)(128 * frames) * sizeof(float));
    asr_features_compute(f, x, n, out, frames);
    int best = -1;
    float best_v = -1e30f;
    for (int m = 0; m < 128; m++)
        if (out[m * frames + 25] > best_v) {
            best_v = out[m * frames + 25];
            best = m;
        }
    /* centre of filter m: mel (m + 1) * 45.2456 / 129; 15 mels -> m = 41.8 */
    ASSERT_TRUE(best == 41 || best == 42);
    /* The padding frame is 0 without normalisation too. */
    ASSERT_TRUE(out[0 * frames + frames - 1] == 0.0f);
    free(x);
    free(out);
    asr_features_destroy(f);
}

static void test_short_inputs(void)
{
    asr_feature_params p = asr_feature_params_nemo(80);
    asr_features *f = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_OK);
    float x[200];
    for (int i = 0; i < 200; i++)
        x[i] = noise();
    float out[80 * 2];
    /* 200 samples: 2 frames, 1 valid, normalised with std 0: (x - x) / 1e-5 = 0. */
    ASSERT_EQ_I64(asr_features_compute(f, x, 200, out, 2), 1);
    for (int m = 0; m < 80; m++) {
        ASSERT_TRUE(out[m * 2] == 0.0f);
        ASSERT_TRUE(out[m * 2 + 1] == 0.0f);
    }
    /* 100 samples: 1 frame, none valid: all padding. */
    ASSERT_EQ_I64(asr_features_compute(f, x, 100, out, 1), 0);
    for (int m = 0; m < 80; m++)
        ASSERT_TRUE(out[m] == 0.0f);
    /* No samples: one frame of padding. */
    ASSERT_EQ_I64(asr_features_frames(f, 0), 1);
    ASSERT_EQ_I64(asr_features_compute(f, x, 0, out, 1), 0);
    asr_features_destroy(f);
}

static void test_bad_parameters(void)
{
    infd_error err = { 0 };
    asr_features *f = NULL;
    asr_feature_params p = asr_feature_params_nemo(128);
    p.n_fft = 500;
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "n_fft is 500");
    p = asr_feature_params_nemo(128);
    p.win_length = 600;
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "win_length is 600");
    p = asr_feature_params_nemo(0);
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "n_mels is 0");
    p = asr_feature_params_nemo(128);
    p.sample_rate = 0;
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "sample_rate is 0");
    p = asr_feature_params_nemo(128);
    p.f_max = 9000;
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "mel range");
    ASSERT_TRUE(f == NULL);
    asr_features_destroy(NULL);
}

static void test_compute_allocates_nothing(void)
{
#if COUNT_MALLOC
    asr_feature_params p = asr_feature_params_nemo(128);
    asr_features *f = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_OK);
    static float x[32000], out[128 * 201];
    for (int i = 0; i < 32000; i++)
        x[i] = noise();
    asr_features_compute(f, x, 32000, out, 201);
    long before = count_malloc_n();
    for (int k = 0; k < 100; k++)
        asr_features_compute(f, x, 32000 - 160 * (k % 7), out, 201);
    long after = count_malloc_n();
    asr_features_destroy(f);
    ASSERT_EQ_I64(after - before, 0);
    void *probe = malloc(16); /* the counter counts */
    ASSERT_TRUE(count_malloc_n() == after + 1);
    free(probe);
#else
    printf("    skipped: malloc is interposed by the sanitizer in this build\n");
#endif
}

/* What the recognizer's window_features relies on: a window's features
 * assembled from the whole signal's raw frames where a frame's samples
 * (and the one before them) lie inside the window, the window's own frames
 * at its edges, then asr_features_normalize, are asr_features_compute's
 * over the window alone, to the bit. Windows start on hops, as chunks
 * do; several lengths, the last one cut short. */
static void test_window_from_shared_frames(void)
{
    asr_feature_params p = asr_feature_params_nemo(128);
    asr_features *f = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(asr_features_create(&p, &f, &err), INFD_STATUS_OK);
    int64_t n = 5 * 16000 + 77;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.5f * noise();
    int64_t max_frames = n / 160 + 1;
    float *raw = malloc((size_t)(128 * max_frames) * sizeof(float)); /* frame-major */
    for (int64_t t = 0; t < max_frames - 1; t++) /* every frame of whole samples */
        asr_features_compute_range(f, x, 0, -1, t, 1, raw + t * 128, 1);
    const int64_t starts[] = { 0, 160 * 16, 160 * 160, 160 * 300 };
    const int64_t lens[] = { 19200, 30720, 16000 + 800, n - 160 * 300 };
    float *want = malloc((size_t)(128 * max_frames) * sizeof(float));
    float *got = malloc((size_t)(128 * max_frames) * sizeof(float));
    for (int w = 0; w < 4; w++) {
        int64_t ws = starts[w], len = lens[w];
        int64_t frames = asr_features_frames(f, len), valid = asr_features_valid_frames(f, len);
        asr_features_compute(f, x + ws, len, want, frames);
        int64_t shared = 0;
        for (int64_t t = 0; t < valid; t++) {
            if (asr_features_first_sample(f, t) >= 0 && asr_features_end_sample(f, t) <= len) {
                for (int m = 0; m < 128; m++)
                    got[m * frames + t] = raw[(ws / 160 + t) * 128 + m];
                shared++;
            } else {
                asr_features_compute_range(f, x + ws, 0, len, t, 1, got + t, frames);
            }
        }
        asr_features_normalize(f, got, frames, frames, valid);
        ASSERT_TRUE(shared >= valid - 4);
        for (int64_t i = 0; i < 128 * frames; i++)
            if (memcmp(&want[i], &got[i], sizeof(float)) != 0)
                TEST_FAIL_("window %d: mel %lld frame %lld: %.9g, compute gives %.9g", w,
                           (long long)(i / frames), (long long)(i % frames), (double)got[i],
                           (double)want[i]);
    }
    free(x);
    free(raw);
    free(want);
    free(got);
    asr_features_destroy(f);
}

TEST_MAIN(test_frames_padding_and_normalisation, test_tone_lands_in_its_band, test_short_inputs,
          test_bad_parameters, test_compute_allocates_nothing, test_window_from_shared_frames)
