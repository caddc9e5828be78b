/*
 * draw.c - boxes and dots on planar 4:2:0 frames (draw.h).
 *
 * Every shape is a set of axis-aligned rectangles (a box is four, a dot is
 * one per row pair), filled at even coordinates so each 2x2 luma block maps
 * to exactly one chroma sample.
 */
#include "apps/video/draw.h"

#include <math.h>

typedef struct yuv_colour {
    uint8_t y, u, v;
} yuv_colour;

/* BT.601 limited range, the coefficients H.264 streams use by default. */
static yuv_colour rgb_to_yuv(uint32_t rgb)
{
    double r = (rgb >> 16) & 255, g = (rgb >> 8) & 255, b = rgb & 255;
    yuv_colour c;
    c.y = (uint8_t)lround(16 + 0.257 * r + 0.504 * g + 0.098 * b);
    c.u = (uint8_t)lround(128 - 0.148 * r - 0.291 * g + 0.439 * b);
    c.v = (uint8_t)lround(128 + 0.439 * r - 0.368 * g - 0.071 * b);
    return c;
}

int video_draw_thickness(int w, int h)
{
    int longer = w > h ? w : h;
    int t = longer / 320;
    t += t & 1;
    return t < 2 ? 2 : t;
}

int video_draw_radius(int w, int h)
{
    int longer = w > h ? w : h;
    int r = longer / 160;
    return r < 3 ? 3 : r > 64 ? 64 : r; /* VIDEO_DRAW_MAX_RECTS: 64 row pairs a dot */
}

/* Where shapes go: straight into a picture, or into a rectangle list. */
typedef struct canvas {
    int w, h;
    video_yuv *img;    /* or NULL */
    video_rect *rects; /* when img is NULL */
    int n_rects, max_rects;
} canvas;

/* Fills [x0, x1) x [y0, y1), rounded out to even bounds and clipped. */
static void fill(canvas *cv, int x0, int y0, int x1, int y1, yuv_colour c)
{
    x0 &= ~1;
    y0 &= ~1;
    x1 += x1 & 1;
    y1 += y1 & 1;
    if (x0 < 0)
        x0 = 0;
    if (y0 < 0)
        y0 = 0;
    if (x1 > cv->w)
        x1 = cv->w;
    if (y1 > cv->h)
        y1 = cv->h;
    if (x0 >= x1 || y0 >= y1)
        return;
    if (!cv->img) {
        if (cv->n_rects < cv->max_rects)
            cv->rects[cv->n_rects] = (video_rect){
                (int16_t)x0, (int16_t)y0, (int16_t)x1, (int16_t)y1, c.y, c.u, c.v, 0
            };
        cv->n_rects++;
        return;
    }
    video_yuv *img = cv->img;
    for (int y = y0; y < y1; y++) {
        uint8_t *row = img->y + (size_t)y * img->stride_y;
        for (int x = x0; x < x1; x++)
            row[x] = c.y;
    }
    for (int y = y0 / 2; y < (y1 + 1) / 2; y++) {
        uint8_t *u = img->u + (size_t)y * img->stride_u;
        uint8_t *v = img->v + (size_t)y * img->stride_v;
        for (int x = x0 / 2; x < (x1 + 1) / 2; x++) {
            u[x] = c.u;
            v[x] = c.v;
        }
    }
}

/* A coordinate as an int, clamped far enough out that arithmetic on it
 * cannot overflow; false for NaN. */
static int to_int(float f, int *out)
{
    if (isnan(f))
        return 0;
    if (f < -100000.0f)
        f = -100000.0f;
    if (f > 100000.0f)
        f = 100000.0f;
    *out = (int)lroundf(f);
    return 1;
}

static void box(canvas *img, const video_face *f, int t, yuv_colour c)
{
    int x0, y0, x1, y1;
    if (!to_int(f->x0, &x0) || !to_int(f->y0, &y0) || !to_int(f->x1, &x1) || !to_int(f->y1, &y1))
        return;
    fill(img, x0 - t / 2, y0 - t / 2, x1 + t / 2, y0 + t / 2, c); /* top */
    fill(img, x0 - t / 2, y1 - t / 2, x1 + t / 2, y1 + t / 2, c); /* bottom */
    fill(img, x0 - t / 2, y0 - t / 2, x0 + t / 2, y1 + t / 2, c); /* left */
    fill(img, x1 - t / 2, y0 - t / 2, x1 + t / 2, y1 + t / 2, c); /* right */
}

/* A filled disc of radius r, one row pair at a time. */
static void dot(canvas *img, float fx, float fy, int r, yuv_colour c)
{
    int cx, cy;
    if (!to_int(fx, &cx) || !to_int(fy, &cy))
        return;
    for (int dy = -r; dy < r; dy += 2) {
        double yc = dy + 1.0; /* the row pair's middle */
        double half = sqrt(fmax(0.0, (double)r * r - yc * yc));
        int hw = (int)lround(half);
        if (hw > 0)
            fill(img, cx - hw, cy + dy, cx + hw, cy + dy + 2, c);
    }
}

static void draw(canvas *cv, const video_face *faces, int n)
{
    yuv_colour green = rgb_to_yuv(VIDEO_BOX_RGB), red = rgb_to_yuv(VIDEO_LANDMARK_RGB);
    int t = video_draw_thickness(cv->w, cv->h), r = video_draw_radius(cv->w, cv->h);
    for (int i = 0; i < n; i++) {
        box(cv, &faces[i], t, green);
        for (int k = 0; k < VIDEO_KEYPOINTS; k++)
            dot(cv, faces[i].kp[k][0], faces[i].kp[k][1], r, red);
    }
}

void video_draw_faces(video_yuv *img, const video_face *faces, int n)
{
    canvas cv = { .w = img->w, .h = img->h, .img = img };
    draw(&cv, faces, n);
}

int video_draw_rects(int w, int h, const video_face *faces, int n, video_rect *rects, int max)
{
    canvas cv = { .w = w, .h = h, .rects = rects, .max_rects = max };
    draw(&cv, faces, n);
    return cv.n_rects < max ? cv.n_rects : max;
}
