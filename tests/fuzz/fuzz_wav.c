/*
 * fuzz_wav.c - libFuzzer target for the speech front end's audio reader:
 * bytes decoded as a sound file by libsndfile (src/apps/asr/audio.h),
 * resampled to 16 kHz, then turned into log-mel features (of the first second).
 *
 * Every input must decode or fail with a message; what decodes must be
 * finite samples giving finite features (the reader refuses non-finite and
 * huge samples). Seeds are small WAVs from make_seeds.py
 * (build/fuzz/seeds-wav).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "apps/asr/audio.h"
#include "apps/asr/features.h"
#include "core/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static asr_features *f;
    infd_error err = { 0 };
    if (!f) {
        asr_feature_params p = asr_feature_params_nemo(80);
        if (asr_features_create(&p, &f, &err) != INFD_STATUS_OK)
            abort();
    }
    asr_audio a = { 0 };
    if (asr_audio_read_memory(data, size, "fuzz.wav", 16000, &a, &err) != INFD_STATUS_OK) {
        if (!err.msg[0])
            abort(); /* a failure says why */
        return 0;
    }
    for (int64_t i = 0; i < a.n; i++)
        if (!isfinite(a.samples[i]))
            abort(); /* the reader refuses non-finite samples */
    /* Features of the first second at most: every frame runs the same code,
     * and longer ones made the runs slow (features were 55% of the time
     * with a 30-s cap), too slow for the 10-M-execution runs. */
    int64_t n = a.n < 16000 ? a.n : 16000;
    int64_t frames = asr_features_frames(f, n);
    float *out = infd_malloc((size_t)(frames * 80) * sizeof(float));
    if (out) {
        asr_features_compute(f, a.samples, n, out, frames);
        for (int64_t i = 0; i < frames * 80; i++)
            if (!isfinite(out[i]))
                abort(); /* accepted audio gives finite features */
        infd_free(out);
    }
    asr_audio_fini(&a);
    return 0;
}
