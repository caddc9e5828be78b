/*
 * blazeface.c - backend "blazeface_decode": BlazeFace's outputs to faces
 * (docs/PIPELINES.md), the post-processing step of `face_detect`.
 *
 *   inputs  SCORES16 FP32 [512, 1]   BlazeFace front's outputs (or back's),
 *           BOXES16  FP32 [512, 16]  told apart by name here; the ensemble
 *           SCORES8  FP32 [384, 1]   maps Identity:0..3 onto them
 *           BOXES8   FP32 [384, 16]
 *           LETTERBOX FP32 [5]       image_decode's: ox, oy, scale, w, h
 *   output  FACES    FP32 [-1, 17]   per face: score, box x0 y0 x1 y1, then
 *                                    the six landmarks (x, y), in the
 *                                    original image's pixels, best first
 *
 * Parameters: size (the detector's input side, default 128), min_score
 * (0.5), iou (0.3), max_faces (16, at most 64). The decoding is MediaPipe's
 * (anchors, sigmoid, weighted NMS): the video app's detect.c, compiled into
 * this library too, so the live video app and this step give the same
 * faces. With batching, a request of several rows gets [rows, N, 17], N the
 * most faces of any row, and rows with fewer are padded with zeros (score 0).
 */
#include <string.h>

#include "apps/video/detect.h"
#include "core/alloc.h"
#include "infd/plugin.h"
#include "plugins/plugins_internal.h"

#define FACE_VALUES 17

/* Per instance, sized at load for max_batch_size rows. */
typedef struct bf_inst {
    void *scratch;
    video_face *faces; /* [rows][max_faces] */
    float *out;        /* [rows][max_faces][FACE_VALUES] */
} bf_inst;

typedef struct bf_state {
    bool batched;
    int rows; /* max_batch_size, or 1 */
    int size, max_faces;
    video_detect_options opt;
    int n_inst;
    bf_inst *inst;
} bf_state;

static void bf_unload(void *state)
{
    bf_state *s = state;
    if (!s)
        return;
    for (int i = 0; s->inst && i < s->n_inst; i++) {
        infd_free(s->inst[i].scratch);
        infd_free(s->inst[i].faces);
        infd_free(s->inst[i].out);
    }
    infd_free(s->inst);
    infd_free(s);
}

static infd_status bf_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    *state = NULL;
    int size = 128, max_faces = 16;
    video_detect_options opt = { 0.5f, 0.3f };
    if (plugin_param_int(km, "size", 16, 1024, &size, err) != INFD_STATUS_OK ||
        plugin_param_int(km, "max_faces", 1, VIDEO_MAX_FACES, &max_faces, err) != INFD_STATUS_OK ||
        plugin_param_float(km, "min_score", &opt.min_score, err) != INFD_STATUS_OK ||
        plugin_param_float(km, "iou", &opt.iou_threshold, err) != INFD_STATUS_OK)
        return err->code;
    if (!(opt.min_score > 0 && opt.min_score < 1) ||
        !(opt.iou_threshold > 0 && opt.iou_threshold < 1))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameters min_score and iou must be in (0, 1)");
    static const struct {
        const char *name;
        int64_t dims[2];
    } in[] = { { "SCORES16", { 512, 1 } },
               { "BOXES16", { 512, 16 } },
               { "SCORES8", { 384, 1 } },
               { "BOXES8", { 384, 16 } } };
    infd_status st = INFD_STATUS_OK;
    for (size_t i = 0; i < 4 && st == INFD_STATUS_OK; i++)
        st = infd_kind_model_add_input(km, in[i].name, INFD_DTYPE_FP32, 2, in[i].dims, err);
    int64_t five = 5, faces[2] = { -1, FACE_VALUES };
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_input(km, "LETTERBOX", INFD_DTYPE_FP32, 1, &five, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "FACES", INFD_DTYPE_FP32, 2, faces, err);
    if (st != INFD_STATUS_OK)
        return st;
    bf_state *s = infd_calloc(1, sizeof(*s));
    if (!s)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    s->batched = infd_kind_model_max_batch_size(km) > 0;
    s->size = size;
    s->max_faces = max_faces;
    s->opt = opt;
    s->n_inst = infd_kind_model_n_instances(km);
    s->inst = infd_calloc((size_t)s->n_inst, sizeof(bf_inst));
    s->rows = s->batched ? infd_kind_model_max_batch_size(km) : 1;
    size_t faces_n = (size_t)s->rows * (size_t)max_faces;
    for (int i = 0; s->inst && i < s->n_inst; i++)
        if (!(s->inst[i].scratch = infd_malloc(video_detect_scratch_bytes())) ||
            !(s->inst[i].faces = infd_malloc(faces_n * sizeof(video_face))) ||
            !(s->inst[i].out = infd_malloc(faces_n * FACE_VALUES * sizeof(float)))) {
            bf_unload(s);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    if (!s->inst) {
        bf_unload(s);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    *state = s;
    return INFD_STATUS_OK;
}

static infd_status bf_run_batch(void *state, int instance, infd_batch *batch, infd_error *err)
{
    bf_state *s = state;
    bf_inst *in = &s->inst[instance];
    for (int k = 0; k < infd_batch_size(batch); k++) {
        infd_request *req = infd_batch_request(batch, k);
        infd_tensor t[5];
        infd_status st = INFD_STATUS_OK;
        for (int i = 0; i < 5 && st == INFD_STATUS_OK; i++)
            st = infd_request_input(req, i, &t[i], err);
        if (st != INFD_STATUS_OK) {
            infd_request_fail(req, err->code, err->msg);
            continue;
        }
        int64_t rows = s->batched ? t[0].shape.dims[0] : 1;
        if (rows < 1 || rows > s->rows) {
            infd_request_fail(req, INFD_STATUS_INVALID_ARGUMENT, "blazeface_decode: bad batch");
            continue;
        }
        int most = 0, n[INFD_STATS_MAX_BATCH];
        for (int64_t r = 0; r < rows; r++) {
            const float *lbv = (const float *)t[4].data + 5 * r;
            video_letterbox lb = { .size = s->size,
                                   .w = (int)(lbv[3] * lbv[2] + 0.5f),
                                   .h = (int)(lbv[4] * lbv[2] + 0.5f),
                                   .ox = (int)lbv[0],
                                   .oy = (int)lbv[1],
                                   .scale = lbv[2] > 0 ? lbv[2] : 1.0 };
            video_detector_outputs o = { (const float *)t[0].data + 512 * r,
                                         (const float *)t[1].data + 512 * 16 * r,
                                         (const float *)t[2].data + 384 * r,
                                         (const float *)t[3].data + 384 * 16 * r };
            n[r] = video_detect_decode(&o, &lb, &s->opt, in->scratch,
                                       in->faces + (size_t)r * (size_t)s->max_faces, s->max_faces);
            if (n[r] > most)
                most = n[r];
        }
        memset(in->out, 0, (size_t)rows * (size_t)most * FACE_VALUES * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            for (int f = 0; f < n[r]; f++) {
                const video_face *vf = &in->faces[(size_t)r * (size_t)s->max_faces + (size_t)f];
                float *o = in->out + ((size_t)r * (size_t)most + (size_t)f) * FACE_VALUES;
                o[0] = vf->score;
                o[1] = vf->x0;
                o[2] = vf->y0;
                o[3] = vf->x1;
                o[4] = vf->y1;
                for (int p = 0; p < VIDEO_KEYPOINTS; p++) {
                    o[5 + 2 * p] = vf->kp[p][0];
                    o[6 + 2 * p] = vf->kp[p][1];
                }
            }
        infd_tensor out = { .dtype = INFD_DTYPE_FP32,
                            .shape = { 3, { rows, most, FACE_VALUES } },
                            .data = in->out,
                            .nbytes = (size_t)rows * (size_t)most * FACE_VALUES * sizeof(float) };
        if (!s->batched)
            out.shape = (infd_shape){ 2, { most, FACE_VALUES } };
        if (infd_request_output_set(req, 0, &out, err) != INFD_STATUS_OK)
            infd_request_fail(req, err->code, err->msg);
    }
    return INFD_STATUS_OK;
}

const infd_model_kind plugin_blazeface_decode_kind = {
    .name = "blazeface_decode",
    .platform = "infd_blazeface_decode",
    .load = bf_load,
    .unload = bf_unload,
    .run_batch = bf_run_batch,
};
