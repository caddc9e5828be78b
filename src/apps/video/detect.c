/*
 * detect.c - BlazeFace's letterbox and decoding (detect.h).
 *
 * The anchor layout and decoding constants are MediaPipe's short-range face
 * detector (face_detection_short_range_common.pbtxt: SsdAnchorsCalculator
 * with fixed anchor sizes, TensorsToDetectionsCalculator, and the
 * NonMaxSuppressionCalculator's WEIGHTED algorithm), as summarised in
 * shared/reference/streaming.md §7. The back model at 256x256 has strides
 * twice as long and so the same two grids; box and key point offsets are in
 * input pixels, so they scale by the input size either way.
 */
#include "apps/video/detect.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A candidate: the anchor's decoded box and key points, in the input's
 * normalised [0, 1] coordinates, and its score. */
typedef struct candidate {
    float score;
    float x0, y0, x1, y1;
    float kp[VIDEO_KEYPOINTS][2];
} candidate;

size_t video_detect_scratch_bytes(void)
{
    /* the candidates, then two index arrays (the order, and the sort's) */
    return VIDEO_ANCHORS * (sizeof(candidate) + 2 * sizeof(int16_t));
}

video_letterbox video_letterbox_make(int frame_w, int frame_h, int size)
{
    video_letterbox lb = { .size = size };
    int longer = frame_w > frame_h ? frame_w : frame_h;
    if (longer <= 0)
        longer = 1;
    lb.scale = (double)size / longer;
    lb.w = (int)lround(frame_w * lb.scale);
    lb.h = (int)lround(frame_h * lb.scale);
    lb.w = lb.w < 1 ? 1 : lb.w > size ? size : lb.w;
    lb.h = lb.h < 1 ? 1 : lb.h > size ? size : lb.h;
    lb.ox = (size - lb.w) / 2;
    lb.oy = (size - lb.h) / 2;
    return lb;
}

void video_letterbox_fill(const video_letterbox *lb, const uint8_t *rgb, int stride, float *input)
{
    int s = lb->size;
    for (int i = 0; i < s * s * 3; i++)
        input[i] = -1.0f;
    for (int y = 0; y < lb->h; y++) {
        const uint8_t *src = rgb + (size_t)y * stride;
        float *dst = input + ((size_t)(y + lb->oy) * s + lb->ox) * 3;
        for (int x = 0; x < lb->w * 3; x++)
            dst[x] = src[x] * (1.0f / 127.5f) - 1.0f;
    }
}

static float sigmoid_clipped(float raw)
{
    if (raw > 100.0f)
        raw = 100.0f;
    else if (raw < -100.0f)
        raw = -100.0f;
    return 1.0f / (1.0f + expf(-raw));
}

/* Candidates of one grid (cells x cells, `per_cell` anchors each) above the
 * threshold, appended at c[n]; returns the new count. */
static int gather(const float *scores, const float *regs, int cells, int per_cell, float inv_size,
                  float min_score, candidate *c, int n)
{
    for (int i = 0; i < cells * cells * per_cell; i++) {
        float score = sigmoid_clipped(scores[i]);
        if (!(score >= min_score))
            continue;
        int cell = i / per_cell;
        float ax = ((float)(cell % cells) + 0.5f) / (float)cells;
        float ay = ((float)(cell / cells) + 0.5f) / (float)cells;
        const float *r = regs + (size_t)i * VIDEO_REGRESSORS;
        float cx = ax + r[0] * inv_size, cy = ay + r[1] * inv_size;
        float w = r[2] * inv_size, h = r[3] * inv_size;
        candidate *d = &c[n++];
        d->score = score;
        d->x0 = cx - w / 2;
        d->y0 = cy - h / 2;
        d->x1 = cx + w / 2;
        d->y1 = cy + h / 2;
        for (int k = 0; k < VIDEO_KEYPOINTS; k++) {
            d->kp[k][0] = ax + r[4 + 2 * k] * inv_size;
            d->kp[k][1] = ay + r[5 + 2 * k] * inv_size;
        }
    }
    return n;
}

static float iou(const candidate *a, const candidate *b)
{
    float ix = fminf(a->x1, b->x1) - fmaxf(a->x0, b->x0);
    float iy = fminf(a->y1, b->y1) - fmaxf(a->y0, b->y0);
    if (ix <= 0 || iy <= 0)
        return 0;
    float inter = ix * iy;
    float uni = (a->x1 - a->x0) * (a->y1 - a->y0) + (b->x1 - b->x0) * (b->y1 - b->y0) - inter;
    return uni > 0 ? inter / uni : 0;
}

/* The order of c[0..n) by score, best first: indices in ix or tmp (n
 * more), whichever it returns. A stable bottom-up merge sort: ties keep
 * anchor order, so results are reproducible, and nothing is allocated.
 * BlazeFace gives about 8 candidates on one face, but a low threshold or
 * an untrained model passes up to all 896 anchors; the candidates stay in
 * place and only their indices move. */
static int16_t *sort_by_score(const candidate *c, int16_t *ix, int16_t *tmp, int n)
{
    for (int i = 0; i < n; i++)
        ix[i] = (int16_t)i;
    int16_t *src = ix, *dst = tmp;
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = n - lo > w ? lo + w : n;
            int hi = n - mid > w ? mid + w : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = c[src[j]].score > c[src[i]].score ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        int16_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* Normalised input coordinates -> frame pixels. */
static void to_frame(const video_letterbox *lb, float nx, float ny, float *fx, float *fy)
{
    *fx = (float)((nx * lb->size - lb->ox) / lb->scale);
    *fy = (float)((ny * lb->size - lb->oy) / lb->scale);
}

int video_detect_decode(const video_detector_outputs *o, const video_letterbox *lb,
                        const video_detect_options *opt, void *scratch, video_face *faces, int max)
{
    candidate *c = scratch;
    float inv = 1.0f / (float)lb->size;
    int n = gather(o->scores16, o->boxes16, 16, 2, inv, opt->min_score, c, 0);
    n = gather(o->scores8, o->boxes8, 8, 6, inv, opt->min_score, c, n);
    int16_t *ix = (int16_t *)(c + VIDEO_ANCHORS);
    ix = sort_by_score(c, ix, ix + VIDEO_ANCHORS, n);

    /* Weighted NMS: the best remaining candidate gathers every remaining
     * one that overlaps it by more than the threshold (itself included);
     * the face is their score-weighted mean with the best one's score. The
     * rest stay, in order, for the next round. */
    int out = 0;
    while (n > 0 && out < max) {
        const candidate *top = &c[ix[0]];
        float wsum = 0, box[4] = { 0 }, kp[VIDEO_KEYPOINTS][2] = { { 0 } };
        int kept = 0;
        for (int i = 0; i < n; i++) {
            const candidate *d = &c[ix[i]];
            if (i > 0 && !(iou(top, d) > opt->iou_threshold)) {
                ix[kept++] = ix[i];
                continue;
            }
            float w = d->score;
            wsum += w;
            box[0] += w * d->x0;
            box[1] += w * d->y0;
            box[2] += w * d->x1;
            box[3] += w * d->y1;
            for (int k = 0; k < VIDEO_KEYPOINTS; k++) {
                kp[k][0] += w * d->kp[k][0];
                kp[k][1] += w * d->kp[k][1];
            }
        }
        n = kept;
        video_face *f = &faces[out++];
        f->score = top->score;
        to_frame(lb, box[0] / wsum, box[1] / wsum, &f->x0, &f->y0);
        to_frame(lb, box[2] / wsum, box[3] / wsum, &f->x1, &f->y1);
        for (int k = 0; k < VIDEO_KEYPOINTS; k++)
            to_frame(lb, kp[k][0] / wsum, kp[k][1] / wsum, &f->kp[k][0], &f->kp[k][1]);
    }
    return out;
}
