/*
 * draw.h - the faces drawn onto a frame: a green box around each face and a
 * red dot on each of its six key points, as the srt-face-server seed shows
 * them (its OpenCV drawing, in BGR: box (0, 255, 0), landmarks (0, 0, 255)).
 *
 * Frames are planar YUV 4:2:0 (what the H.264 decoder gives and the encoder
 * takes), drawn in place. Colours are converted once to BT.601 limited-range
 * YUV. Chroma has half the resolution, so lines are an even number of pixels
 * thick and start on even rows and columns: then no chroma sample mixes the
 * box with the picture. Shapes are clipped to the frame; coordinates may lie
 * outside it or be NaN (skipped). Nothing allocates.
 */
#ifndef INFD_APPS_VIDEO_DRAW_H
#define INFD_APPS_VIDEO_DRAW_H

#include <stdint.h>

#include "apps/video/detect.h"

/* A planar 4:2:0 picture: luma w x h, chroma (w+1)/2 x (h+1)/2. */
typedef struct video_yuv {
    uint8_t *y, *u, *v;
    int stride_y, stride_u, stride_v;
    int w, h;
} video_yuv;

/* Line thickness and dot radius for a frame: 2 px and 4 px at 640x640,
 * growing with the frame (even thickness, see above). */
int video_draw_thickness(int w, int h);
int video_draw_radius(int w, int h);

/* Draws `n` faces. */
void video_draw_faces(video_yuv *img, const video_face *faces, int n);

/* The same drawing as rectangles, for a GPU to fill: [x0, x1) x [y0, y1)
 * in luma pixels, even and clipped to the frame, with the colour's YUV.
 * video_draw_rects writes at most `max` and returns how many there are
 * (VIDEO_DRAW_MAX_RECTS hold any VIDEO_MAX_FACES faces). */
typedef struct video_rect {
    int16_t x0, y0, x1, y1;
    uint8_t y, u, v, pad;
} video_rect;

#define VIDEO_DRAW_MAX_RECTS (VIDEO_MAX_FACES * (4 + VIDEO_KEYPOINTS * 64))
int video_draw_rects(int w, int h, const video_face *faces, int n, video_rect *rects, int max);

/* The colours, as the decoded picture shows them in RGB (for tests). */
#define VIDEO_BOX_RGB      0x00ff00u
#define VIDEO_LANDMARK_RGB 0xff0000u

#endif /* INFD_APPS_VIDEO_DRAW_H */
