/*
 * test_asr_stream.c - streams of the speech recognizer through its C ABI
 * (include/infd/asr.h) on the tiny random-weight Parakeet-TDT model that
 * scripts/gen_asr_models.py makes: the steady-state loop allocates nothing
 * over 100 chunks, configs and audio are checked, zero-length chunks and
 * other rates are taken, endpoints and resets. Token-for-token agreement
 * with a reference pipeline is tests/e2e/test_asr_stream.py's.
 */
#include <math.h>

#include "count_malloc.h"
#include "infd/asr.h"
#include "test.h"

static uint64_t rng = 777;

static float noise(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}

/* Speech-like test audio: a wobbling tone in noise. */
static void audio(float *x, int64_t n, int64_t at)
{
    for (int64_t i = 0; i < n; i++) {
        double t = (double)(at + i);
        x[i] = (float)(0.1 * sin(t * 0.05) * sin(t * 0.0007) + 0.02 * noise());
    }
}

static bool model_dir(char *dir, size_t n)
{
    if (!test_cached_model_("models/asr/tiny-tdt/encoder-model.onnx", dir, n))
        return false;
    *strrchr(dir, '/') = '\0';
    return true;
}

/* The cache-aware variant (mode b). */
static bool streaming_dir(char *dir, size_t n)
{
    if (!test_cached_model_("models/asr/tiny-tdt-streaming/encoder.onnx", dir, n))
        return false;
    *strrchr(dir, '/') = '\0';
    return true;
}

static infd_asr_recognizer *recognizer(const char *dir, int chunk_ms, int left_ms, int right_ms)
{
    infd_asr_config c;
    infd_asr_config_init(&c);
    c.model_dir = dir;
    c.num_threads = 1;
    c.chunk_ms = chunk_ms;
    c.left_ms = left_ms;
    c.right_ms = right_ms;
    infd_asr_recognizer *r = NULL;
    infd_error err = { 0 };
    if (infd_asr_recognizer_create(&c, &r, &err) != INFD_STATUS_OK)
        printf("    %s\n", err.msg);
    return r;
}

/* 160 ms chunks with 2 s before and 320 ms after (or, cache-aware, the
 * model's own 160 ms chunks): after the windows have reached their full
 * length, 100 chunks of accept + decode allocate nothing anywhere in the
 * process. */
static void steady_state(const char *dir)
{
#if COUNT_MALLOC
    infd_asr_recognizer *r = recognizer(dir, 160, 2000, 320);
    infd_asr_stream *s = NULL;
    infd_error err = { 0 };
    ASSERT_TRUE(r != NULL);
    ASSERT_STATUS(infd_asr_stream_create(r, &s, &err), INFD_STATUS_OK);
    static float x[2560];
    int64_t at = 0;
    long before = 0;
    int chunks = 0;
    for (int k = 0; k < 140; k++) {
        if (k == 40)
            before = count_malloc_n();
        audio(x, 2560, at);
        at += 2560;
        ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 2560, &err), INFD_STATUS_OK);
        while (infd_asr_is_ready(r, s)) {
            ASSERT_STATUS(infd_asr_decode(r, s, &err), INFD_STATUS_OK);
            chunks += k >= 40;
        }
    }
    long after = count_malloc_n();
    infd_asr_result *res = NULL;
    ASSERT_STATUS(infd_asr_get_result(r, s, &res, &err), INFD_STATUS_OK);
    printf("    %d chunks in the counted loop, %ld allocations; %d tokens so far\n", chunks,
           after - before, res->count);
    ASSERT_EQ_INT(chunks, 100);
    ASSERT_EQ_I64(after - before, 0);
    ASSERT_TRUE(res->count > 0);
    ASSERT_FALSE(res->is_final);
    infd_asr_result_destroy(res);
    infd_asr_stream_destroy(s);
    infd_asr_recognizer_destroy(r);
#else
    (void)dir;
    printf("    skipped: malloc is interposed by the sanitizer in this build\n");
#endif
}

static void test_steady_state_allocates_nothing(void)
{
    char dir[2200];
    if (model_dir(dir, sizeof(dir)))
        steady_state(dir);
    if (streaming_dir(dir, sizeof(dir)))
        steady_state(dir);
}

static void test_config_errors_name_the_setting(void)
{
    char dir[2200];
    if (!model_dir(dir, sizeof(dir)))
        return;
    infd_asr_config c;
    infd_asr_recognizer *r = NULL;
    infd_error err = { 0 };
    infd_asr_config_init(&c);
    ASSERT_STATUS(infd_asr_recognizer_create(&c, &r, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "model_dir is not set");
    c.model_dir = dir;
    c.device = "tpu";
    ASSERT_STATUS(infd_asr_recognizer_create(&c, &r, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "device is 'tpu'; expected cpu, cuda or cuda:N");
    c.device = "cpu";
    c.chunk_ms = 100;
    ASSERT_STATUS(infd_asr_recognizer_create(&c, &r, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "the chunk is 0.1 s; it must be a whole number of encoder frames");
    c.chunk_ms = 2000;
    c.left_ms = 40000;
    ASSERT_STATUS(infd_asr_recognizer_create(&c, &r, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "is longer than the 40.0 s encoded at once");
    c.left_ms = -80;
    ASSERT_STATUS(infd_asr_recognizer_create(&c, &r, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "none may be negative");
    c.left_ms = 10000;
    c.model_dir = "/nonexistent";
    ASSERT_STATUS(infd_asr_recognizer_create(&c, &r, &err), INFD_STATUS_NOT_FOUND);
    ASSERT_STR_HAS(err.msg, "not a Parakeet-TDT model directory");
    ASSERT_TRUE(r == NULL);
}

/* Bad audio is refused, naming what is wrong, and the stream goes on. */
static void test_bad_audio_is_refused_and_the_stream_goes_on(void)
{
    char dir[2200];
    if (!model_dir(dir, sizeof(dir)))
        return;
    infd_asr_recognizer *r = recognizer(dir, 160, 800, 160);
    infd_asr_stream *s = NULL;
    infd_error err = { 0 };
    ASSERT_TRUE(r != NULL);
    ASSERT_STATUS(infd_asr_stream_create(r, &s, &err), INFD_STATUS_OK);
    float x[1600];
    audio(x, 1600, 0);
    ASSERT_STATUS(infd_asr_accept_waveform(s, 0, x, 1600, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "a sample rate of 0 Hz");
    /* a few Hz would resample each sample to thousands */
    ASSERT_STATUS(infd_asr_accept_waveform(s, 3999, x, 1600, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "a sample rate of 3999 Hz; it must be in [4000, 1000000]");
    ASSERT_STATUS(infd_asr_accept_waveform(s, 1000001, x, 1600, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    for (int i = 0; i < 1000; i++) /* zero-length chunks */
        ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 0, &err), INFD_STATUS_OK);
    ASSERT_FALSE(infd_asr_is_ready(r, s));
    ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 1600, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_asr_accept_waveform(s, 8000, x, 1600, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "the sample rate changed from 16000 to 8000 Hz");
    x[7] = NAN;
    ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 1600, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "sample 7 of the chunk is nan");
    x[7] = 5000.0f;
    ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 1600, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "sample 7 of the chunk is 5000");
    audio(x, 1600, 1600);
    ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 1600, &err), INFD_STATUS_OK);
    while (infd_asr_is_ready(r, s))
        ASSERT_STATUS(infd_asr_decode(r, s, &err), INFD_STATUS_OK);
    infd_asr_input_finished(s);
    ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 1600, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "audio after the input finished");
    while (infd_asr_is_ready(r, s))
        ASSERT_STATUS(infd_asr_decode(r, s, &err), INFD_STATUS_OK);
    infd_asr_result *res = NULL;
    ASSERT_STATUS(infd_asr_get_result(r, s, &res, &err), INFD_STATUS_OK);
    ASSERT_TRUE(res->is_final);
    /* 0.2 s taken: 2.5 encoder frames, the last cut short */
    ASSERT_STR_HAS(res->json, "\"is_final\":true");
    infd_asr_result_destroy(res);
    infd_asr_stream_destroy(s);
    /* a stream with no audio at all ends empty */
    ASSERT_STATUS(infd_asr_stream_create(r, &s, &err), INFD_STATUS_OK);
    infd_asr_input_finished(s);
    ASSERT_FALSE(infd_asr_is_ready(r, s));
    ASSERT_STATUS(infd_asr_get_result(r, s, &res, &err), INFD_STATUS_OK);
    ASSERT_TRUE(res->is_final && res->count == 0 && res->text[0] == '\0');
    infd_asr_result_destroy(res);
    infd_asr_stream_destroy(s);
    infd_asr_recognizer_destroy(r);
}

/* Audio at 8 kHz is resampled as it comes: 3 s of it decode to 3 s of
 * encoder frames (37 or 38 of 80 ms). */
static void test_other_rates_are_resampled(void)
{
    char dir[2200];
    if (!model_dir(dir, sizeof(dir)))
        return;
    infd_asr_recognizer *r = recognizer(dir, 480, 1600, 480);
    infd_asr_stream *s = NULL;
    infd_error err = { 0 };
    ASSERT_TRUE(r != NULL);
    ASSERT_STATUS(infd_asr_stream_create(r, &s, &err), INFD_STATUS_OK);
    float x[300];
    for (int k = 0; k < 80; k++) { /* 80 x 300 samples at 8 kHz: 3 s */
        audio(x, 300, k * 300);
        ASSERT_STATUS(infd_asr_accept_waveform(s, 8000, x, 300, &err), INFD_STATUS_OK);
        while (infd_asr_is_ready(r, s))
            ASSERT_STATUS(infd_asr_decode(r, s, &err), INFD_STATUS_OK);
    }
    infd_asr_input_finished(s);
    while (infd_asr_is_ready(r, s))
        ASSERT_STATUS(infd_asr_decode(r, s, &err), INFD_STATUS_OK);
    infd_asr_result *res = NULL;
    ASSERT_STATUS(infd_asr_get_result(r, s, &res, &err), INFD_STATUS_OK);
    ASSERT_TRUE(res->is_final);
    float last = res->count ? res->timestamps[res->count - 1] : 0;
    printf("    %d tokens, the last at %.2f s: %s\n", res->count, (double)last, res->text);
    ASSERT_TRUE(res->count > 0 && last <= 3.0f);
    infd_asr_result_destroy(res);
    infd_asr_stream_destroy(s);
    infd_asr_recognizer_destroy(r);
}

/* An endpoint comes within 4 s of silence; after a reset the next segment
 * starts empty where the last one ended, and one of the rules ends it on
 * speech-like audio too. */
static void test_endpoints_and_reset(void)
{
    char dir[2200];
    if (!model_dir(dir, sizeof(dir)))
        return;
    infd_asr_config c;
    infd_asr_config_init(&c);
    c.model_dir = dir;
    c.num_threads = 1;
    c.chunk_ms = 400;
    c.left_ms = 2000;
    c.right_ms = 400;
    c.rule3_min_utterance_length = 4.0f;
    infd_asr_recognizer *r = NULL;
    infd_asr_stream *s = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_asr_recognizer_create(&c, &r, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_asr_stream_create(r, &s, &err), INFD_STATUS_OK);
    /* digital silence: rule 1 ends the segment at 2.4 s if the model emits
     * nothing on it; the tiny random one does emit tokens there, and then
     * rule 2 (1.2 s after the last) or rule 3 (4 s) ends it */
    static float z[6400];
    int64_t fed = 0;
    while (!infd_asr_is_endpoint(r, s) && fed < 16000 * 6) {
        ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, z, 6400, &err), INFD_STATUS_OK);
        fed += 6400;
        while (infd_asr_is_ready(r, s))
            ASSERT_STATUS(infd_asr_decode(r, s, &err), INFD_STATUS_OK);
    }
    ASSERT_TRUE(infd_asr_is_endpoint(r, s));
    infd_asr_result *res = NULL;
    ASSERT_STATUS(infd_asr_get_result(r, s, &res, &err), INFD_STATUS_OK);
    printf("    endpoint after %.1f s fed: segment 0 has %d tokens\n", fed / 16000.0, res->count);
    ASSERT_TRUE(fed <= 16000 * 4 + 6400);
    float seg1_start = 0;
    infd_asr_result_destroy(res);
    infd_asr_reset(r, s);
    ASSERT_FALSE(infd_asr_is_endpoint(r, s));
    ASSERT_STATUS(infd_asr_get_result(r, s, &res, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(res->count, 0);
    ASSERT_EQ_INT(res->segment, 1);
    seg1_start = res->start_time;
    ASSERT_TRUE(seg1_start > 2.0f);
    infd_asr_result_destroy(res);
    /* speech-like audio: rule 2 or rule 3 (4 s) ends segment 1 */
    float x[6400];
    int64_t at = fed;
    while (!infd_asr_is_endpoint(r, s) && at - fed < 16000 * 8) {
        audio(x, 6400, at);
        at += 6400;
        ASSERT_STATUS(infd_asr_accept_waveform(s, 16000, x, 6400, &err), INFD_STATUS_OK);
        while (infd_asr_is_ready(r, s))
            ASSERT_STATUS(infd_asr_decode(r, s, &err), INFD_STATUS_OK);
    }
    ASSERT_TRUE(infd_asr_is_endpoint(r, s));
    ASSERT_STATUS(infd_asr_get_result(r, s, &res, &err), INFD_STATUS_OK);
    printf("    segment 1 from %.2f s: %d tokens, %d words\n", (double)res->start_time, res->count,
           res->n_words);
    ASSERT_TRUE(res->count > 0 && res->n_words > 0);
    ASSERT_TRUE(res->timestamps[0] >= seg1_start);
    ASSERT_TRUE(res->words[0].start >= seg1_start && res->words[0].end > res->words[0].start);
    infd_asr_result_destroy(res);
    infd_asr_stream_destroy(s);
    infd_asr_recognizer_destroy(r);
}

TEST_MAIN(test_steady_state_allocates_nothing, test_config_errors_name_the_setting,
          test_bad_audio_is_refused_and_the_stream_goes_on, test_other_rates_are_resampled,
          test_endpoints_and_reset)
