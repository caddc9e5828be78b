/*
 * image.c - backend "image_decode": encoded images (BYTES) to a detector's
 * input (docs/PIPELINES.md).
 *
 *   input  IMAGE      BYTES [1]          one JPEG or PNG per batch row
 *   output PIXELS     FP32 [S, S, 3]     RGB, letterboxed into S x S, each
 *                                        value x * scale + offset, the
 *                                        border `offset` (black)
 *   output LETTERBOX  FP32 [5]           ox, oy, scale, width, height: where
 *                                        the image sits (input pixels = image
 *                                        pixels * scale + (ox, oy))
 *
 * Parameters: size (S, default 128), scale (default 1/127.5), offset
 * (default -1): BlazeFace's input. JPEG is decoded by libjpeg-turbo, PNG by
 * libspng, both to RGB8; the resize is libswscale's bilinear, then the
 * letterbox and the normalisation as the video app makes its detector input
 * (src/apps/video/detect.c, compiled into this library too). An image that
 * is neither format, corrupt, or larger than 16384 x 16384 fails its
 * request with a message naming the row; the others in the batch go on.
 *
 * Each instance keeps its decoders and buffers; they grow to the largest
 * image seen and are reused, so steady state allocates nothing.
 */
#include <libswscale/swscale.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "apps/video/detect.h"
#include "core/alloc.h"
#include "infd/plugin.h"
#include "plugins/plugins_internal.h"

#define MAX_SIDE 16384

typedef struct img_inst {
    tjhandle tj;
    struct SwsContext *sws;
    uint8_t *rgb; /* the decoded image */
    size_t rgb_cap;
    uint8_t *small; /* the image at the letterbox size */
    size_t small_cap;
    float *pixels; /* the request's rows: B x S x S x 3 */
    size_t pixels_cap;
    float lb[INFD_STATS_MAX_BATCH][5];
} img_inst;

typedef struct img_state {
    bool batched; /* max_batch_size > 0: IMAGE is [B, 1], the outputs [B, ...] */
    int size;
    float scale, offset;
    int n_inst;
    img_inst *inst;
} img_state;

static bool grow(void **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    void *p = infd_realloc(*buf, n);
    if (!p)
        return false;
    *buf = p;
    *cap = n;
    return true;
}

static void img_unload(void *state)
{
    img_state *s = state;
    if (!s)
        return;
    for (int i = 0; i < s->n_inst; i++) {
        if (s->inst[i].tj)
            tjDestroy(s->inst[i].tj);
        sws_freeContext(s->inst[i].sws);
        infd_free(s->inst[i].rgb);
        infd_free(s->inst[i].small);
        infd_free(s->inst[i].pixels);
    }
    infd_free(s->inst);
    infd_free(s);
}

static infd_status img_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    *state = NULL;
    int size = 128;
    float scale = 1.0f / 127.5f, offset = -1.0f;
    if (plugin_param_int(km, "size", 8, 4096, &size, err) != INFD_STATUS_OK ||
        plugin_param_float(km, "scale", &scale, err) != INFD_STATUS_OK ||
        plugin_param_float(km, "offset", &offset, err) != INFD_STATUS_OK)
        return err->code;
    int64_t one = 1, px[3] = { size, size, 3 }, five = 5;
    infd_status st = infd_kind_model_add_input(km, "IMAGE", INFD_DTYPE_BYTES, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "PIXELS", INFD_DTYPE_FP32, 3, px, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "LETTERBOX", INFD_DTYPE_FP32, 1, &five, err);
    if (st != INFD_STATUS_OK)
        return st;
    img_state *s = infd_calloc(1, sizeof(*s));
    if (!s)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    s->batched = infd_kind_model_max_batch_size(km) > 0;
    s->size = size;
    s->scale = scale;
    s->offset = offset;
    s->n_inst = infd_kind_model_n_instances(km);
    s->inst = infd_calloc((size_t)s->n_inst, sizeof(img_inst));
    if (!s->inst) {
        img_unload(s);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; i < s->n_inst; i++)
        if (!(s->inst[i].tj = tjInitDecompress())) {
            img_unload(s);
            return infd_error_set(err, INFD_STATUS_INTERNAL, "libjpeg-turbo: %s",
                                  tjGetErrorStr2(NULL));
        }
    *state = s;
    return INFD_STATUS_OK;
}

/* Decodes one JPEG or PNG into in->rgb; its size in *w, *h. */
static infd_status decode(img_inst *in, const uint8_t *data, size_t n, int *w, int *h, char *msg,
                          size_t msg_n)
{
    static const uint8_t png_magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    if (n >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
        int subsamp, cs;
        if (n > (size_t)0x7fffffff ||
            tjDecompressHeader3(in->tj, data, (unsigned long)n, w, h, &subsamp, &cs) != 0) {
            snprintf(msg, msg_n, "corrupt JPEG: %s", tjGetErrorStr2(in->tj));
            return INFD_STATUS_INVALID_ARGUMENT;
        }
        if (*w < 1 || *h < 1) {
            snprintf(msg, msg_n, "corrupt JPEG: the header gives %d x %d pixels", *w, *h);
            return INFD_STATUS_INVALID_ARGUMENT;
        }
        if (*w > MAX_SIDE || *h > MAX_SIDE) {
            snprintf(msg, msg_n, "JPEG of %d x %d: at most %d on a side", *w, *h, MAX_SIDE);
            return INFD_STATUS_INVALID_ARGUMENT;
        }
        if (!grow((void **)&in->rgb, &in->rgb_cap, (size_t)*w * (size_t)*h * 3)) {
            snprintf(msg, msg_n, "out of memory for a %d x %d image", *w, *h);
            return INFD_STATUS_OUT_OF_MEMORY;
        }
        if (tjDecompress2(in->tj, data, (unsigned long)n, in->rgb, *w, 0, *h, TJPF_RGB, 0) != 0 &&
            tjGetErrorCode(in->tj) != TJERR_WARNING) {
            snprintf(msg, msg_n, "corrupt JPEG: %s", tjGetErrorStr2(in->tj));
            return INFD_STATUS_INVALID_ARGUMENT;
        }
        return INFD_STATUS_OK;
    }
    if (n >= 8 && memcmp(data, png_magic, 8) == 0) {
        spng_ctx *ctx = spng_ctx_new(0);
        if (!ctx) {
            snprintf(msg, msg_n, "out of memory for a PNG decoder");
            return INFD_STATUS_OUT_OF_MEMORY;
        }
        struct spng_ihdr ihdr;
        size_t bytes = 0;
        int rc = spng_set_image_limits(ctx, MAX_SIDE, MAX_SIDE);
        if (!rc)
            rc = spng_set_chunk_limits(ctx, 1u << 24, 1u << 26);
        if (!rc)
            rc = spng_set_png_buffer(ctx, data, n);
        if (!rc)
            rc = spng_get_ihdr(ctx, &ihdr);
        if (!rc)
            rc = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &bytes);
        infd_status st = INFD_STATUS_OK;
        if (rc) {
            snprintf(msg, msg_n, "corrupt PNG: %s", spng_strerror(rc));
            st = INFD_STATUS_INVALID_ARGUMENT;
        } else if (!grow((void **)&in->rgb, &in->rgb_cap, bytes)) {
            snprintf(msg, msg_n, "out of memory for a %u x %u image", ihdr.width, ihdr.height);
            st = INFD_STATUS_OUT_OF_MEMORY;
        } else if ((rc = spng_decode_image(ctx, in->rgb, bytes, SPNG_FMT_RGB8, SPNG_DECODE_TRNS))) {
            snprintf(msg, msg_n, "corrupt PNG: %s", spng_strerror(rc));
            st = INFD_STATUS_INVALID_ARGUMENT;
        } else {
            *w = (int)ihdr.width;
            *h = (int)ihdr.height;
        }
        spng_ctx_free(ctx);
        return st;
    }
    snprintf(msg, msg_n, "not a JPEG or PNG (%zu bytes%s%02x %02x %02x %02x)", n,
             n >= 4 ? ", starting " : "", n >= 4 ? data[0] : 0, n >= 4 ? data[1] : 0,
             n >= 4 ? data[2] : 0, n >= 4 ? data[3] : 0);
    return INFD_STATUS_INVALID_ARGUMENT;
}

/* One row: decode, resize, letterbox and normalise into `out`. */
static infd_status one_image(img_state *s, img_inst *in, const uint8_t *data, size_t n, float *out,
                             float lbv[5], char *msg, size_t msg_n)
{
    int w = 0, h = 0;
    infd_status st = decode(in, data, n, &w, &h, msg, msg_n);
    if (st != INFD_STATUS_OK)
        return st;
    video_letterbox lb = video_letterbox_make(w, h, s->size);
    int stride = lb.w * 3;
    if (!grow((void **)&in->small, &in->small_cap, (size_t)stride * (size_t)lb.h)) {
        snprintf(msg, msg_n, "out of memory");
        return INFD_STATUS_OUT_OF_MEMORY;
    }
    in->sws = sws_getCachedContext(in->sws, w, h, AV_PIX_FMT_RGB24, lb.w, lb.h, AV_PIX_FMT_RGB24,
                                   SWS_BILINEAR, NULL, NULL, NULL);
    if (!in->sws) {
        snprintf(msg, msg_n, "libswscale cannot scale %d x %d to %d x %d", w, h, lb.w, lb.h);
        return INFD_STATUS_INTERNAL;
    }
    const uint8_t *src[4] = { in->rgb, NULL, NULL, NULL };
    int src_stride[4] = { w * 3, 0, 0, 0 };
    uint8_t *dst[4] = { in->small, NULL, NULL, NULL };
    int dst_stride[4] = { stride, 0, 0, 0 };
    sws_scale(in->sws, src, src_stride, 0, h, dst, dst_stride);
    /* detect.c's letterbox gives x / 127.5 - 1 and -1 outside; other
     * scales and offsets are applied on top of it. */
    video_letterbox_fill(&lb, in->small, stride, out);
    if (s->scale != 1.0f / 127.5f || s->offset != -1.0f) {
        size_t m = (size_t)s->size * (size_t)s->size * 3;
        for (size_t i = 0; i < m; i++)
            out[i] = ((out[i] + 1.0f) * 127.5f) * s->scale + s->offset;
    }
    lbv[0] = (float)lb.ox;
    lbv[1] = (float)lb.oy;
    lbv[2] = (float)lb.scale;
    lbv[3] = (float)w;
    lbv[4] = (float)h;
    return INFD_STATUS_OK;
}

static infd_status img_run_batch(void *state, int instance, infd_batch *batch, infd_error *err)
{
    img_state *s = state;
    img_inst *in = &s->inst[instance];
    size_t row = (size_t)s->size * (size_t)s->size * 3;
    for (int k = 0; k < infd_batch_size(batch); k++) {
        infd_request *req = infd_batch_request(batch, k);
        infd_tensor t;
        if (infd_request_input(req, 0, &t, err) != INFD_STATUS_OK) {
            infd_request_fail(req, err->code, err->msg);
            continue;
        }
        int64_t rows = s->batched ? t.shape.dims[0] : 1;
        if (rows < 1 || rows > INFD_STATS_MAX_BATCH ||
            !grow((void **)&in->pixels, &in->pixels_cap, (size_t)rows * row * sizeof(float))) {
            infd_request_fail(req, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the images");
            continue;
        }
        const uint8_t *p = t.data;
        size_t off = 0;
        infd_status st = INFD_STATUS_OK;
        char msg[384] = "";
        for (int64_t r = 0; r < rows && st == INFD_STATUS_OK; r++) {
            uint32_t len = 0;
            if (off + 4 <= t.nbytes)
                len = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                      (uint32_t)p[off + 3] << 24;
            off += 4;
            char why[320];
            st = one_image(s, in, p + off, len, in->pixels + (size_t)r * row, in->lb[r], why,
                           sizeof(why));
            if (st != INFD_STATUS_OK)
                snprintf(msg, sizeof(msg), "image_decode: IMAGE row %lld: %s", (long long)r, why);
            off += len;
        }
        if (st != INFD_STATUS_OK) {
            infd_request_fail(req, st, msg);
            continue;
        }
        infd_tensor px = { .dtype = INFD_DTYPE_FP32,
                           .shape = { 4, { rows, s->size, s->size, 3 } },
                           .data = in->pixels,
                           .nbytes = (size_t)rows * row * sizeof(float) };
        infd_tensor lb = { .dtype = INFD_DTYPE_FP32,
                           .shape = { 2, { rows, 5 } },
                           .data = in->lb,
                           .nbytes = (size_t)rows * 5 * sizeof(float) };
        if (!s->batched) { /* no batch dim: [S, S, 3] and [5] */
            px.shape = (infd_shape){ 3, { s->size, s->size, 3 } };
            lb.shape = (infd_shape){ 1, { 5 } };
        }
        if (infd_request_output_set(req, 0, &px, err) != INFD_STATUS_OK ||
            infd_request_output_set(req, 1, &lb, err) != INFD_STATUS_OK)
            infd_request_fail(req, err->code, err->msg);
    }
    return INFD_STATUS_OK;
}

const infd_model_kind plugin_image_decode_kind = {
    .name = "image_decode",
    .platform = "infd_image_decode",
    .load = img_load,
    .unload = img_unload,
    .run_batch = img_run_batch,
};
