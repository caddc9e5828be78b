/*
 * gpu_none.c - gpu.h in a build without CUDA: every frame is decoded and
 * drawn on the CPU. (Compiled only when nvcc is absent; see CMakeLists.txt.)
 */
#include "apps/video/gpu.h"

infd_status video_gpu_device(void **hw_device, infd_error *err)
{
    *hw_device = NULL;
    return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "this infd was built without CUDA");
}

infd_status video_gpu_create(const void *hw_device, video_gpu **out, infd_error *err)
{
    (void)hw_device;
    *out = NULL;
    return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "this infd was built without CUDA");
}

void video_gpu_destroy(video_gpu *g)
{
    (void)g;
}

infd_status video_gpu_resize(video_gpu *g, int w, int h, const video_letterbox *lb,
                             video_nv12 *host, float **dev_input, infd_error *err)
{
    (void)g, (void)w, (void)h, (void)lb, (void)host, (void)dev_input;
    return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "this infd was built without CUDA");
}

infd_status video_gpu_preprocess(video_gpu *g, const video_nv12 *src, const video_letterbox *lb,
                                 infd_error *err)
{
    (void)g, (void)src, (void)lb;
    return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "this infd was built without CUDA");
}

infd_status video_gpu_draw(video_gpu *g, const video_nv12 *src, const video_rect *rects, int n,
                           infd_error *err)
{
    (void)g, (void)src, (void)rects, (void)n;
    return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "this infd was built without CUDA");
}
