/*
 * detect.h - BlazeFace on a frame: the letterbox that makes the detector's
 * input, and the decoding of its outputs into faces (MediaPipe's short-range
 * face detector recipe, shared/reference/streaming.md §7).
 *
 * The detector is an ordinary served model (the default repository's
 * `blazeface`, or BlazeFace back at 256x256): one NHWC FP32 input [S, S, 3]
 * in [-1, 1], and four outputs told apart by their shapes, scores [512, 1]
 * and [384, 1] and regressors [512, 16] and [384, 16] (16x16 cells with 2
 * anchors each, then 8x8 cells with 6). Anchors are fixed-size, centred on
 * their cells; a regressor row is the box centre offset, its width and
 * height, then 6 key points (x, y), all in input pixels. Scores go through a
 * sigmoid after clipping to +-100; overlapping candidates (IoU above a
 * threshold) merge by MediaPipe's weighted NMS: the score-weighted mean of
 * their boxes and key points, with the best score.
 *
 * Pure computation on caller buffers: nothing here allocates, locks or logs,
 * so the frame loop can call it for every frame.
 */
#ifndef INFD_APPS_VIDEO_DETECT_H
#define INFD_APPS_VIDEO_DETECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VIDEO_ANCHORS    896 /* 16*16*2 + 8*8*6 */
#define VIDEO_ANCHORS_16 512
#define VIDEO_KEYPOINTS  6 /* right eye, left eye, nose tip, mouth, right ear, left ear */
#define VIDEO_REGRESSORS 16
#define VIDEO_MAX_FACES  64 /* kept per frame, best first */

/* One face in frame pixels: the box's corners and the key points. */
typedef struct video_face {
    float score;
    float x0, y0, x1, y1;
    float kp[VIDEO_KEYPOINTS][2];
} video_face;

/* Where a frame of w x h sits in the S x S input: scaled by `scale` (the
 * longer side fills S) and offset by (ox, oy) input pixels. */
typedef struct video_letterbox {
    int size;     /* S */
    int w, h;     /* the scaled frame, inside S x S */
    int ox, oy;   /* its top-left corner in the input */
    double scale; /* input pixels per frame pixel */
} video_letterbox;

/* The letterbox of a frame_w x frame_h frame in a size x size input. */
video_letterbox video_letterbox_make(int frame_w, int frame_h, int size);

/* Fills the S x S x 3 input from an RGB24 image of lb->w x lb->h
 * (`stride` bytes a row): x / 127.5 - 1 inside, -1 (black) in the border,
 * as MediaPipe's ImageToTensorCalculator with BORDER_ZERO gives. */
void video_letterbox_fill(const video_letterbox *lb, const uint8_t *rgb, int stride, float *input);

typedef struct video_detect_options {
    float min_score;     /* after the sigmoid; 0.5 (MediaPipe's) */
    float iou_threshold; /* weighted NMS merges above it; 0.3 */
} video_detect_options;

/* BlazeFace's outputs for one image: the 16x16 grid's scores (512) and
 * regressors (512 x 16), and the 8x8 grid's (384, 384 x 16). */
typedef struct video_detector_outputs {
    const float *scores16, *boxes16;
    const float *scores8, *boxes8;
} video_detector_outputs;

/* Decodes the outputs into at most `max` faces in frame pixels, best score
 * first, and returns how many. `scratch` holds video_detect_scratch_bytes(),
 * aligned for floats. */
int video_detect_decode(const video_detector_outputs *o, const video_letterbox *lb,
                        const video_detect_options *opt, void *scratch, video_face *faces, int max);

/* Bytes of the scratch video_detect_decode needs. */
size_t video_detect_scratch_bytes(void);

#endif /* INFD_APPS_VIDEO_DETECT_H */
