/*
 * test_video.c - the video app's pure stages: stream IDs (ingest.h),
 * BlazeFace's letterbox and decoding (detect.h) on hand-made outputs, and
 * the drawing (draw.h) read back pixel by pixel. The frame loop's part of
 * them allocates nothing: counted over 1000 frames.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apps/video/detect.h"
#include "apps/video/draw.h"
#include "apps/video/ingest.h"
#include "count_malloc.h"
#include "test.h"

static void test_stream_ids(void)
{
    video_streamid s;
    infd_error err = { 0 };
    ASSERT_STATUS(video_streamid_parse(NULL, 0, "live", &s, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(s.name, "live");
    ASSERT_EQ_INT(s.role, VIDEO_ROLE_UNSAID);

    const char *pub = "#!::r=cam-1,m=publish";
    ASSERT_STATUS(video_streamid_parse(pub, strlen(pub), "live", &s, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(s.name, "cam-1");
    ASSERT_EQ_INT(s.role, VIDEO_ROLE_PUBLISH);

    const char *view = "#!::m=request,u=ann,r=live/cam.2,x-foo=bar";
    ASSERT_STATUS(video_streamid_parse(view, strlen(view), "live", &s, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(s.name, "live/cam.2");
    ASSERT_EQ_INT(s.role, VIDEO_ROLE_VIEW);

    const char *mode_only = "#!::m=request";
    ASSERT_STATUS(video_streamid_parse(mode_only, strlen(mode_only), "dflt", &s, &err),
                  INFD_STATUS_OK);
    ASSERT_STR_EQ(s.name, "dflt");

    /* A plain ID names the stream; its role comes from what it does. */
    ASSERT_STATUS(video_streamid_parse("studio", 6, "live", &s, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(s.name, "studio");
    ASSERT_EQ_INT(s.role, VIDEO_ROLE_UNSAID);

    /* Not NUL-terminated: only n bytes are read. */
    ASSERT_STATUS(video_streamid_parse("cam7XXXX", 4, "live", &s, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(s.name, "cam7");

    static const struct {
        const char *sid, *says;
    } bad[] = {
        { "#!::m=bogus", "mode 'bogus'" },
        { "#!::r=a b", "byte 1 (0x20)" },
        { "#!::r=x,r=y", "r= given twice" },
        { "#!::m=publish,m=request", "m= given twice" },
        { "#!::r", "expected key=value" },
        { "#!::=x", "expected key=value" },
        { "#!::r=", "empty stream name" },
        { "#!::r=ok,", "ends with ','" },
        { "bad\\name", "0x5c" },
        { "#!::r=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
          "at most 64" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        infd_error_clear(&err);
        ASSERT_STATUS(video_streamid_parse(bad[i].sid, strlen(bad[i].sid), "live", &s, &err),
                      INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_STR_HAS(err.msg, "stream id");
        ASSERT_STR_HAS(err.msg, bad[i].says);
    }
}

static void test_letterbox(void)
{
    video_letterbox sq = video_letterbox_make(640, 640, 128);
    ASSERT_EQ_INT(sq.w, 128);
    ASSERT_EQ_INT(sq.h, 128);
    ASSERT_EQ_INT(sq.ox, 0);
    ASSERT_EQ_INT(sq.oy, 0);
    video_letterbox wide = video_letterbox_make(1280, 720, 128);
    ASSERT_EQ_INT(wide.w, 128);
    ASSERT_EQ_INT(wide.h, 72);
    ASSERT_EQ_INT(wide.oy, 28);
    ASSERT_LE_DBL(fabs(wide.scale - 0.1), 1e-12);

    /* The border is -1, the picture x / 127.5 - 1. */
    uint8_t rgb[72 * 128 * 3];
    memset(rgb, 255, sizeof(rgb));
    float *in = malloc(128 * 128 * 3 * sizeof(float));
    video_letterbox_fill(&wide, rgb, 128 * 3, in);
    ASSERT_LE_DBL(fabs(in[0] + 1.0f), 1e-6);                        /* row 0: border */
    ASSERT_LE_DBL(fabs(in[(28 * 128) * 3] - 1.0f), 1e-6);           /* row 28: picture */
    ASSERT_LE_DBL(fabs(in[(99 * 128 + 127) * 3 + 2] - 1.0f), 1e-6); /* row 99: picture */
    ASSERT_LE_DBL(fabs(in[(100 * 128) * 3] + 1.0f), 1e-6);          /* row 100: border */
    free(in);
}

/* Outputs with every score at -10 (sigmoid ~0) and zero regressors. */
typedef struct outputs {
    float s16[512], b16[512 * 16], s8[384], b8[384 * 16];
} outputs;

static void outputs_init(outputs *o)
{
    for (int i = 0; i < 512; i++)
        o->s16[i] = -10;
    for (int i = 0; i < 384; i++)
        o->s8[i] = -10;
    memset(o->b16, 0, sizeof(o->b16));
    memset(o->b8, 0, sizeof(o->b8));
}

/* Anchor `i` of the 16x16 grid says: a face w x h input pixels, centred
 * (dx, dy) from the anchor, key points at the centre, with logit `logit`. */
static void say16(outputs *o, int i, float logit, float dx, float dy, float w, float h)
{
    o->s16[i] = logit;
    float *r = o->b16 + i * 16;
    r[0] = dx, r[1] = dy, r[2] = w, r[3] = h;
    for (int k = 0; k < 6; k++)
        r[4 + 2 * k] = dx, r[5 + 2 * k] = dy;
}

static int decode(const outputs *o, const video_letterbox *lb, video_face *faces)
{
    static char scratch[1 << 20];
    video_detector_outputs v = { o->s16, o->b16, o->s8, o->b8 };
    video_detect_options opt = { 0.5f, 0.3f };
    return video_detect_decode(&v, lb, &opt, scratch, faces, VIDEO_MAX_FACES);
}

static void test_decode_one_face(void)
{
    static outputs o;
    outputs_init(&o);
    /* Anchor 2*(5*16+6) = cell (6, 5): centre ((6.5)/16, (5.5)/16). */
    say16(&o, 2 * (5 * 16 + 6), 3.0f, 4.0f, -2.0f, 32.0f, 40.0f);
    video_letterbox lb = video_letterbox_make(640, 640, 128);
    video_face f[VIDEO_MAX_FACES];
    ASSERT_EQ_INT(decode(&o, &lb, f), 1);
    float cx = (6.5f / 16 + 4.0f / 128) * 640, cy = (5.5f / 16 - 2.0f / 128) * 640;
    ASSERT_LE_DBL(fabs(f[0].x0 - (cx - 80)), 1e-3);
    ASSERT_LE_DBL(fabs(f[0].x1 - (cx + 80)), 1e-3);
    ASSERT_LE_DBL(fabs(f[0].y0 - (cy - 100)), 1e-3);
    ASSERT_LE_DBL(fabs(f[0].y1 - (cy + 100)), 1e-3);
    ASSERT_LE_DBL(fabs(f[0].kp[3][0] - cx), 1e-3);
    ASSERT_LE_DBL(fabs(f[0].score - 1 / (1 + expf(-3.0f))), 1e-6);

    /* The same on a 1280x720 frame: the letterbox offset comes off. */
    video_letterbox wide = video_letterbox_make(1280, 720, 128);
    ASSERT_EQ_INT(decode(&o, &wide, f), 1);
    ASSERT_LE_DBL(fabs(f[0].x0 - (cx - 80) * 2), 1e-2);
    ASSERT_LE_DBL(fabs(f[0].y0 - ((cy - 100) / 640 * 128 - 28) * 10), 1e-2);
}

static void test_weighted_nms(void)
{
    static outputs o;
    outputs_init(&o);
    /* Two overlapping boxes (IoU > 0.3) merge into their score-weighted
     * mean with the best score; a third far away stays its own face. A
     * fourth below the threshold is ignored. */
    say16(&o, 2 * (5 * 16 + 6), 2.0f, 0, 0, 32, 32);
    say16(&o, 2 * (5 * 16 + 6) + 1, 1.0f, 2, 0, 32, 32);
    say16(&o, 2 * (12 * 16 + 12), 1.5f, 0, 0, 16, 16);
    say16(&o, 2 * (1 * 16 + 1), -0.5f, 0, 0, 16, 16);
    video_letterbox lb = video_letterbox_make(128, 128, 128);
    video_face f[VIDEO_MAX_FACES];
    ASSERT_EQ_INT(decode(&o, &lb, f), 2);
    float s1 = 1 / (1 + expf(-2.0f)), s2 = 1 / (1 + expf(-1.0f));
    ASSERT_LE_DBL(fabs(f[0].score - s1), 1e-6);
    float ax = 6.5f / 16 * 128;
    float want_x0 = (s1 * (ax - 16) + s2 * (ax + 2 - 16)) / (s1 + s2);
    ASSERT_LE_DBL(fabs(f[0].x0 - want_x0), 1e-3);
    ASSERT_LE_DBL(fabs(f[1].x0 - (12.5f / 16 * 128 - 8)), 1e-3);

    /* Saturated logits clip at 100 instead of overflowing. */
    outputs_init(&o);
    say16(&o, 0, 1e30f, 0, 0, 8, 8);
    ASSERT_EQ_INT(decode(&o, &lb, f), 1);
    ASSERT_LE_DBL(fabs(f[0].score - 1.0f), 1e-6);
    /* NaN scores are no face. */
    o.s16[0] = NAN;
    ASSERT_EQ_INT(decode(&o, &lb, f), 0);
}

/* Every anchor above the threshold (a low threshold or an untrained model):
 * the faces come out best first, and equal scores keep anchor order. Each
 * anchor's box is 1 pixel, apart from every other's, so none merge. */
static void test_every_anchor_passes(void)
{
    static outputs o;
    outputs_init(&o);
    for (int i = 0; i < 896; i++) {
        int per = i < 512 ? 2 : 6, a = i < 512 ? i : i - 512;
        float *r = (i < 512 ? o.b16 : o.b8) + a * 16;
        r[0] = 2.0f * (float)(a % per) + (i < 512 ? 0.0f : 1.0f);
        r[2] = r[3] = 1.0f;
        /* distinct logits in (0, 9), in an order unlike the anchors' */
        float logit = 0.01f * (float)((i * 389) % 896 + 1);
        if (i < 512)
            o.s16[a] = logit;
        else
            o.s8[a] = logit;
    }
    video_letterbox lb = video_letterbox_make(128, 128, 128);
    video_face f[VIDEO_MAX_FACES];
    ASSERT_EQ_INT(decode(&o, &lb, f), VIDEO_MAX_FACES);
    ASSERT_LE_DBL(fabs(f[0].score - 1 / (1 + expf(-8.96f))), 1e-6);
    for (int k = 1; k < VIDEO_MAX_FACES; k++)
        ASSERT_TRUE(f[k].score < f[k - 1].score);

    /* All scores equal (logit 0 is a score of 0.5, the threshold): anchor
     * order, the 16x16 grid's cell (0, 0) first, its second anchor next. */
    for (int i = 0; i < 512; i++)
        o.s16[i] = 0;
    for (int i = 0; i < 384; i++)
        o.s8[i] = 0;
    ASSERT_EQ_INT(decode(&o, &lb, f), VIDEO_MAX_FACES);
    ASSERT_LE_DBL(fabs(f[0].x0 - 3.5f), 1e-3);
    ASSERT_LE_DBL(fabs(f[1].x0 - 5.5f), 1e-3);
    ASSERT_LE_DBL(fabs(f[2].x0 - 11.5f), 1e-3);
}

/* A 4:2:0 picture in one buffer, grey. */
typedef struct picture {
    uint8_t y[64 * 48], u[32 * 24], v[32 * 24];
    video_yuv img;
} picture;

static void picture_init(picture *p)
{
    memset(p->y, 128, sizeof(p->y));
    memset(p->u, 128, sizeof(p->u));
    memset(p->v, 128, sizeof(p->v));
    p->img = (video_yuv){ p->y, p->u, p->v, 64, 32, 32, 64, 48 };
}

static void test_draw(void)
{
    static picture p;
    picture_init(&p);
    video_face f = { .score = 0.9f, .x0 = 10, .y0 = 8, .x1 = 40, .y1 = 30 };
    for (int k = 0; k < 6; k++)
        f.kp[k][0] = 24, f.kp[k][1] = 20;
    video_draw_faces(&p.img, &f, 1);
    /* Green in BT.601 limited range: Y 145, U 54, V 34; red: 82, 90, 240. */
    ASSERT_EQ_INT(p.y[8 * 64 + 20], 145); /* top edge */
    ASSERT_EQ_INT(p.u[4 * 32 + 10], 54);
    ASSERT_EQ_INT(p.v[4 * 32 + 10], 34);
    ASSERT_EQ_INT(p.y[20 * 64 + 40], 145); /* right edge */
    ASSERT_EQ_INT(p.y[20 * 64 + 24], 82);  /* the dot */
    ASSERT_EQ_INT(p.v[10 * 32 + 12], 240);
    ASSERT_EQ_INT(p.y[20 * 64 + 15], 128); /* inside the box, off the dot */
    ASSERT_EQ_INT(p.y[2 * 64 + 2], 128);   /* outside */
    /* Thickness 2, starting on even rows: row 10 is untouched. */
    ASSERT_EQ_INT(p.y[10 * 64 + 20], 128);

    /* Off the frame, huge or NaN: clipped or skipped, never out of bounds
     * (ASan checks the writes). */
    picture_init(&p);
    video_face odd[3] = {
        { .x0 = -50, .y0 = -50, .x1 = 500, .y1 = 500 },
        { .x0 = NAN, .y0 = 0, .x1 = 10, .y1 = 10 },
        { .x0 = -1e30f, .y0 = 1e30f, .x1 = INFINITY, .y1 = -INFINITY },
    };
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 6; k++)
            odd[i].kp[k][0] = i == 1 ? NAN : 1e9f, odd[i].kp[k][1] = -3;
    video_draw_faces(&p.img, odd, 3);
    ASSERT_EQ_INT(p.y[20 * 64 + 20], 128);
}

static void test_frames_allocate_nothing(void)
{
#if COUNT_MALLOC
    static outputs o;
    static picture p;
    outputs_init(&o);
    say16(&o, 2 * (5 * 16 + 6), 3.0f, 4.0f, -2.0f, 32.0f, 40.0f);
    video_letterbox lb = video_letterbox_make(64, 48, 128);
    video_face f[VIDEO_MAX_FACES];
    picture_init(&p);
    long before = count_malloc_n();
    for (int i = 0; i < 1000; i++) {
        int n = decode(&o, &lb, f);
        video_draw_faces(&p.img, f, n);
    }
    ASSERT_EQ_I64(count_malloc_n() - before, 0);
#else
    printf("    skipped: the sanitizer build counts allocations its own way\n");
#endif
}

TEST_MAIN(test_stream_ids, test_letterbox, test_decode_one_face, test_weighted_nms,
          test_every_anchor_passes, test_draw, test_frames_allocate_nothing)
