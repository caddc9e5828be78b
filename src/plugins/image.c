/*
 * image.c - backend "image_decode": encoded images (BYTES) to a model's
 * input tensor (docs/PIPELINES.md): decode, resize (letterbox or center
 * crop), normalize, layout and channel order.
 *
 *   input  IMAGE      BYTES [1]          one JPEG or PNG per batch row
 *   output PIXELS     FP32 or UINT8      [H, W, 3] (layout NHWC) or
 *                                        [3, H, W] (NCHW); each value
 *                                        (x * scale + offset - mean[c]) /
 *                                        std[c], x the 0..255 pixel, 0 in
 *                                        the letterbox's border (black)
 *   output LETTERBOX  FP32 [5]           ox, oy, scale, width, height: where
 *                                        the image sits (input pixels = image
 *                                        pixels * scale + (ox, oy))
 *
 * Parameters (config.pbtxt's string values):
 *   size (S: W = H = S, default 128), or width and height;
 *   resize: "letterbox" (default: the whole image, scaled to fit, centred)
 *     or "crop" (scaled to cover W x H, centred, the rest cut; with
 *     crop_fraction f in [0.25, 1] the image is scaled 1/f more first, as
 *     ImageNet's resize-256-crop-224 is f = 0.875);
 *   scale (default 1/127.5), offset (default -1): BlazeFace's input;
 *   mean, std: one value or three ("0.485,0.456,0.406"), default 0 and 1;
 *   layout: "NHWC" (default) or "NCHW"; channel_order: "RGB" (default) or
 *   "BGR"; dtype: "FP32" (default) or "UINT8" (the resized pixels as they
 *   are: scale, offset, mean and std cannot be given).
 * The defaults make BlazeFace's input exactly as the video app does
 * (src/apps/video/detect.c's letterbox, compiled into this library too).
 * JPEG is decoded by libjpeg-turbo, PNG by libspng, both to RGB8; the
 * resize is libswscale's bilinear. An image that is neither format,
 * corrupt, or larger than 16384 x 16384 fails its request with a message
 * naming the row; the others in the batch go on.
 *
 * Each instance keeps its decoders and buffers; they grow to the largest
 * image seen and are reused, so steady state allocates nothing.
 */
#include <errno.h>
#include <libswscale/swscale.h>
#include <math.h>
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
    uint8_t *small; /* the image at its scaled size */
    size_t small_cap;
    void *pixels; /* the request's rows: B x H x W x 3 values */
    size_t pixels_cap;
    float lb[INFD_STATS_MAX_BATCH][5];
} img_inst;

typedef struct img_state {
    bool batched; /* max_batch_size > 0: IMAGE is [B, 1], the outputs [B, ...] */
    int width, height;
    bool crop;           /* resize "crop"; else letterbox */
    float crop_fraction; /* crop: the share of the covering scale's image kept */
    float scale, offset;
    bool nchw, bgr, u8;
    bool detector;     /* BlazeFace's defaults: detect.c's letterbox fill as it is */
    float lut[3][256]; /* per output channel: the value of each 0..255 pixel */
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
    for (int i = 0; s->inst && i < s->n_inst; i++) {
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

/* A parameter that is one of `choices` ("A|B"), case-sensitive; *out is
 * its index, left alone when the parameter is absent. */
static infd_status param_choice(const infd_kind_model *km, const char *key, const char *a,
                                const char *b, int *out, infd_error *err)
{
    const char *v = infd_kind_model_parameter(km, key);
    if (!v)
        return INFD_STATUS_OK;
    if (strcmp(v, a) == 0 || strcmp(v, b) == 0) {
        *out = strcmp(v, b) == 0;
        return INFD_STATUS_OK;
    }
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "parameter '%s' is '%.40s': \"%s\" or \"%s\"", key, v, a, b);
}

/* mean / std: one number for every channel, or three. */
static infd_status param_triple(const infd_kind_model *km, const char *key, float out[3],
                                infd_error *err)
{
    const char *v = infd_kind_model_parameter(km, key);
    if (!v)
        return INFD_STATUS_OK;
    float f[3];
    int n = 0;
    const char *p = v;
    while (n < 3) {
        char *end;
        errno = 0;
        f[n] = strtof(p, &end);
        if (end == p || errno || !isfinite(f[n]))
            break;
        n++;
        while (*end == ' ')
            end++;
        if (*end != ',') {
            p = end;
            break;
        }
        p = end + 1;
    }
    if (*p || (n != 1 && n != 3))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameter '%s' is '%.60s': one number or three, comma-separated",
                              key, v);
    for (int c = 0; c < 3; c++)
        out[c] = f[n == 1 ? 0 : c];
    return INFD_STATUS_OK;
}

static infd_status img_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    *state = NULL;
    int size = 128, width = 0, height = 0, crop = 0, nchw = 0, bgr = 0, u8 = 0;
    float scale = 1.0f / 127.5f, offset = -1.0f, crop_fraction = 1.0f;
    float mean[3] = { 0, 0, 0 }, std[3] = { 1, 1, 1 };
    if (plugin_param_int(km, "size", 8, 4096, &size, err) != INFD_STATUS_OK ||
        plugin_param_int(km, "width", 8, 4096, &width, err) != INFD_STATUS_OK ||
        plugin_param_int(km, "height", 8, 4096, &height, err) != INFD_STATUS_OK ||
        plugin_param_float(km, "scale", &scale, err) != INFD_STATUS_OK ||
        plugin_param_float(km, "offset", &offset, err) != INFD_STATUS_OK ||
        plugin_param_float(km, "crop_fraction", &crop_fraction, err) != INFD_STATUS_OK ||
        param_triple(km, "mean", mean, err) != INFD_STATUS_OK ||
        param_triple(km, "std", std, err) != INFD_STATUS_OK ||
        param_choice(km, "resize", "letterbox", "crop", &crop, err) != INFD_STATUS_OK ||
        param_choice(km, "layout", "NHWC", "NCHW", &nchw, err) != INFD_STATUS_OK ||
        param_choice(km, "channel_order", "RGB", "BGR", &bgr, err) != INFD_STATUS_OK ||
        param_choice(km, "dtype", "FP32", "UINT8", &u8, err) != INFD_STATUS_OK)
        return err->code;
    if ((width == 0) != (height == 0))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameters 'width' and 'height' go together (or 'size' alone)");
    if (width == 0)
        width = height = size;
    if (!(crop_fraction >= 0.25f && crop_fraction <= 1.0f))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameter 'crop_fraction' must be in [0.25, 1]");
    if (crop_fraction != 1.0f && !crop)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameter 'crop_fraction' needs resize \"crop\"");
    for (int c = 0; c < 3; c++)
        if (std[c] == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "parameter 'std' must not be 0");
    static const char *const fp_only[] = { "scale", "offset", "mean", "std" };
    for (size_t k = 0; u8 && k < sizeof(fp_only) / sizeof(fp_only[0]); k++)
        if (infd_kind_model_parameter(km, fp_only[k]))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "parameter '%s' is for dtype FP32; UINT8 gives the pixels as "
                                  "they are",
                                  fp_only[k]);
    int64_t one = 1, five = 5;
    int64_t px[3] = { height, width, 3 };
    if (nchw) {
        px[0] = 3;
        px[1] = height;
        px[2] = width;
    }
    infd_status st = infd_kind_model_add_input(km, "IMAGE", INFD_DTYPE_BYTES, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "PIXELS", u8 ? INFD_DTYPE_UINT8 : INFD_DTYPE_FP32, 3,
                                        px, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "LETTERBOX", INFD_DTYPE_FP32, 1, &five, err);
    if (st != INFD_STATUS_OK)
        return st;
    img_state *s = infd_calloc(1, sizeof(*s));
    if (!s)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    s->batched = infd_kind_model_max_batch_size(km) > 0;
    s->width = width;
    s->height = height;
    s->crop = crop;
    s->crop_fraction = crop_fraction;
    s->scale = scale;
    s->offset = offset;
    s->nchw = nchw;
    s->bgr = bgr;
    s->u8 = u8;
    s->detector = !crop && !nchw && !bgr && !u8 && width == height && scale == 1.0f / 127.5f &&
                  offset == -1.0f && mean[0] == 0 && mean[1] == 0 && mean[2] == 0 && std[0] == 1 &&
                  std[1] == 1 && std[2] == 1;
    /* mean and std are in the output's channel order (BGR's for "BGR"). */
    for (int c = 0; c < 3; c++)
        for (int x = 0; x < 256; x++)
            s->lut[c][x] = ((float)x * scale + offset - mean[c]) / std[c];
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

/* Where a w x h image goes in the W x H output: scaled by lb->scale to
 * lb->w x lb->h, its corner at (lb->ox, lb->oy) (negative when cropped). */
static video_letterbox place(const img_state *s, int w, int h)
{
    if (s->detector)
        return video_letterbox_make(w, h, s->width);
    video_letterbox lb = { .size = s->width };
    double sx = (double)s->width / w, sy = (double)s->height / h;
    lb.scale = s->crop ? (sx > sy ? sx : sy) / s->crop_fraction : sx < sy ? sx : sy;
    lb.w = (int)lround(w * lb.scale);
    lb.h = (int)lround(h * lb.scale);
    lb.w = lb.w < 1 ? 1 : lb.w;
    lb.h = lb.h < 1 ? 1 : lb.h;
    if (!s->crop) {
        lb.w = lb.w > s->width ? s->width : lb.w;
        lb.h = lb.h > s->height ? s->height : lb.h;
    }
    lb.ox = (s->width - lb.w) / 2;
    lb.oy = (s->height - lb.h) / 2;
    return lb;
}

/* The scaled image (lb->w x lb->h RGB24) into one output row, through the
 * channel's table: layout, channel order, normalisation, border. */
static void fill(const img_state *s, const video_letterbox *lb, const uint8_t *rgb, void *out)
{
    int W = s->width, H = s->height;
    size_t plane = (size_t)W * (size_t)H;
    for (int y = 0; y < H; y++) {
        int sy = y - lb->oy;
        bool row_in = sy >= 0 && sy < lb->h;
        for (int x = 0; x < W; x++) {
            int sx = x - lb->ox;
            const uint8_t *p = row_in && sx >= 0 && sx < lb->w
                                   ? rgb + ((size_t)sy * (size_t)lb->w + (size_t)sx) * 3
                                   : NULL;
            size_t at = (size_t)y * (size_t)W + (size_t)x;
            for (int c = 0; c < 3; c++) {
                uint8_t v = p ? p[s->bgr ? 2 - c : c] : 0;
                size_t o = s->nchw ? (size_t)c * plane + at : at * 3 + (size_t)c;
                if (s->u8)
                    ((uint8_t *)out)[o] = v;
                else
                    ((float *)out)[o] = s->lut[c][v];
            }
        }
    }
}

/* One row: decode, resize, place and normalise into `out`. */
static infd_status one_image(img_state *s, img_inst *in, const uint8_t *data, size_t n, void *out,
                             float lbv[5], char *msg, size_t msg_n)
{
    int w = 0, h = 0;
    infd_status st = decode(in, data, n, &w, &h, msg, msg_n);
    if (st != INFD_STATUS_OK)
        return st;
    video_letterbox lb = place(s, w, h);
    if ((double)lb.w * lb.h > 64.0 * 1024 * 1024) {
        snprintf(msg, msg_n, "a %d x %d image scaled to %d x %d to cover %d x %d: too large", w, h,
                 lb.w, lb.h, s->width, s->height);
        return INFD_STATUS_INVALID_ARGUMENT;
    }
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
    if (s->detector)
        video_letterbox_fill(&lb, in->small, stride, out); /* the video app's, as it is */
    else
        fill(s, &lb, in->small, out);
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
    size_t row = (size_t)s->width * (size_t)s->height * 3; /* values */
    size_t value = s->u8 ? 1 : sizeof(float);
    for (int k = 0; k < infd_batch_size(batch); k++) {
        infd_request *req = infd_batch_request(batch, k);
        infd_tensor t;
        if (infd_request_input(req, 0, &t, err) != INFD_STATUS_OK) {
            infd_request_fail(req, err->code, err->msg);
            continue;
        }
        int64_t rows = s->batched ? t.shape.dims[0] : 1;
        if (rows < 1 || rows > INFD_STATS_MAX_BATCH ||
            !grow((void **)&in->pixels, &in->pixels_cap, (size_t)rows * row * value)) {
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
            st = one_image(s, in, p + off, len, (char *)in->pixels + (size_t)r * row * value,
                           in->lb[r], why, sizeof(why));
            if (st != INFD_STATUS_OK)
                snprintf(msg, sizeof(msg), "image_decode: IMAGE row %lld: %s", (long long)r, why);
            off += len;
        }
        if (st != INFD_STATUS_OK) {
            infd_request_fail(req, st, msg);
            continue;
        }
        int64_t d0 = s->nchw ? 3 : s->height, d1 = s->nchw ? s->height : s->width,
                d2 = s->nchw ? s->width : 3;
        infd_tensor px = { .dtype = s->u8 ? INFD_DTYPE_UINT8 : INFD_DTYPE_FP32,
                           .shape = { 4, { rows, d0, d1, d2 } },
                           .data = in->pixels,
                           .nbytes = (size_t)rows * row * value };
        infd_tensor lb = { .dtype = INFD_DTYPE_FP32,
                           .shape = { 2, { rows, 5 } },
                           .data = in->lb,
                           .nbytes = (size_t)rows * 5 * sizeof(float) };
        if (!s->batched) { /* no batch dim: [S, S, 3] and [5] */
            px.shape = (infd_shape){ 3, { d0, d1, d2 } };
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
