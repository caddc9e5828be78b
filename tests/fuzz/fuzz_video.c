/*
 * fuzz_video.c - libFuzzer target for the video app's input readers: the
 * SRT stream ID parser (src/apps/video/ingest.h), which reads what a
 * caller sends in its handshake, and BlazeFace's output decoding and the
 * drawing that follows (detect.h, draw.h), fed arbitrary floats (NaN, inf,
 * huge boxes) as a broken or hostile model could give them.
 *
 * The first byte picks the reader: even, the rest is a stream ID; odd, the
 * rest is the detector's outputs (missing floats are zero), drawn onto a
 * small frame. Every input must be parsed or refused with a message, and
 * drawing must stay inside the frame (ASan checks). Seeds:
 * tests/fuzz/seeds-video.
 */
#include <stdlib.h>
#include <string.h>

#include "apps/video/detect.h"
#include "apps/video/draw.h"
#include "apps/video/ingest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_streamid(const uint8_t *data, size_t size)
{
    video_streamid s;
    infd_error err = { 0 };
    infd_status st = video_streamid_parse((const char *)data, size, "live", &s, &err);
    if (st == INFD_STATUS_OK) {
        size_t n = strlen(s.name);
        if (n == 0 || n > VIDEO_NAME_MAX)
            abort();
    } else if (st != INFD_STATUS_INVALID_ARGUMENT || !err.msg[0]) {
        abort();
    }
}

static void fuzz_decode(const uint8_t *data, size_t size)
{
    static float s16[512], b16[512 * 16], s8[384], b8[384 * 16];
    float *parts[4] = { s16, b16, s8, b8 };
    size_t lens[4] = { 512, 512 * 16, 384, 384 * 16 };
    for (int p = 0; p < 4; p++) {
        size_t bytes = lens[p] * sizeof(float);
        size_t take = size < bytes ? size : bytes;
        memset(parts[p], 0, bytes);
        memcpy(parts[p], data, take);
        data += take;
        size -= take;
    }
    static char scratch[1 << 20];
    static uint8_t y[96 * 64], u[48 * 32], v[48 * 32];
    video_face faces[VIDEO_MAX_FACES];
    video_detector_outputs o = { s16, b16, s8, b8 };
    video_detect_options opt = { 0.5f, 0.3f };
    video_letterbox lb = video_letterbox_make(96, 64, 128);
    int n = video_detect_decode(&o, &lb, &opt, scratch, faces, VIDEO_MAX_FACES);
    if (n < 0 || n > VIDEO_MAX_FACES)
        abort();
    video_yuv img = { y, u, v, 96, 48, 48, 96, 64 };
    video_draw_faces(&img, faces, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0)
        fuzz_streamid(data + 1, size - 1);
    else
        fuzz_decode(data + 1, size - 1);
    return 0;
}
