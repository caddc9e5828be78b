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

/* The colours, as the decoded picture shows them in RGB (for tests). */
#define VIDEO_BOX_RGB      0x00ff00u
#define VIDEO_LANDMARK_RGB 0xff0000u

#endif /* INFD_APPS_VIDEO_DRAW_H */
