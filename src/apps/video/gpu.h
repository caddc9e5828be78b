/*
 * gpu.h - the video app's CUDA stages, for frames NVDEC decoded into
 * device memory (FFmpeg's CUDA hwaccel, NV12): the letterbox into the
 * detector's input, and the drawing, on the frame where it lies. The
 * detector's input stays on the device (infd_request_add_input_device: a
 * model on GPUs copies it device to device, any other gets a host copy).
 * One copy crosses to the host: the finished frame for the encoder, into a
 * page-locked buffer.
 *
 * The decoder's frames live in the FFmpeg device's CUDA context (the
 * primary one, video_gpu_device); every call makes it current (and
 * restores the caller's). Work runs on one CUDA stream per object, a
 * blocking one, so it is ordered after the decoder's copies on the
 * context's default stream.
 *
 * Built without CUDA, video_gpu_create fails with UNIMPLEMENTED and the
 * app decodes on the CPU.
 */
#ifndef INFD_APPS_VIDEO_GPU_H
#define INFD_APPS_VIDEO_GPU_H

#include <stdint.h>

#include "apps/video/detect.h"
#include "apps/video/draw.h"
#include "infd/infd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct video_gpu video_gpu;

/* An FFmpeg CUDA device (an AVBufferRef of an AVHWDeviceContext; unref it
 * with av_buffer_unref) for NVDEC, in the CUDA runtime's primary context:
 * FFmpeg's own device would make a context of its own (the primary one it
 * refuses when the engine has made it current with other flags), and its
 * blocking-sync flag costs each wait a thread wake-up. UNAVAILABLE without
 * a usable GPU. */
infd_status video_gpu_device(void **hw_device, infd_error *err);

/* For the frames of FFmpeg CUDA device `hw_device` (from
 * video_gpu_device). UNAVAILABLE when CUDA cannot be used. */

/* An NV12 picture: luma w x h, interleaved chroma (w+1)/2 pairs x (h+1)/2. */
typedef struct video_nv12 {
    uint8_t *y, *uv;
    int pitch_y, pitch_uv;
    int w, h;
} video_nv12;

infd_status video_gpu_create(const void *hw_device, video_gpu **out, infd_error *err);
void video_gpu_destroy(video_gpu *g);

/* Sizes the buffers for w x h frames and an S x S input (lb->size); gives
 * the page-locked host frame the encoder reads (NV12) in *host and the
 * device input video_gpu_preprocess fills (S x S x 3 floats, on CUDA
 * device 0, video_gpu_device's) in *dev_input. */
infd_status video_gpu_resize(video_gpu *g, int w, int h, const video_letterbox *lb,
                             video_nv12 *host, float **dev_input, infd_error *err);

/* The detector's input from device frame `src` into the device input of
 * video_gpu_resize: each input pixel the mean of its footprint, BT.601
 * limited range to RGB, x / 127.5 - 1, -1 in the border. Waits for it, so
 * that any stream may read the input after. */
infd_status video_gpu_preprocess(video_gpu *g, const video_nv12 *src, const video_letterbox *lb,
                                 infd_error *err);

/* Copies device frame `src` to the stream's own device frame, fills the
 * rectangles there, and downloads the result to the host frame of
 * video_gpu_resize. Waits for the download. */
infd_status video_gpu_draw(video_gpu *g, const video_nv12 *src, const video_rect *rects, int n,
                           infd_error *err);

#ifdef __cplusplus
}
#endif

#endif /* INFD_APPS_VIDEO_GPU_H */
