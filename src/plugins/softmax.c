/*
 * softmax.c - backend "softmax": a classifier's logits to probabilities
 * (docs/PIPELINES.md), the post-processing step before top-k.
 *
 *   input   LOGITS FP32 [C]  (after the batch dim when the model batches)
 *   output  PROBS  FP32 [C]  softmax over the classes
 *
 * Parameters: temperature (default 1; the logits are divided by it),
 * classes (C, declared in the model's metadata; default -1, any). With
 * the output's label_filename in config.pbtxt and the classification
 * extension in the request (`classification: K` / tritonclient's
 * class_count), an ensemble of a classifier and this step answers with the
 * K most probable labels: Triton's classification extension reports raw
 * values, so the probabilities come from here.
 */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "infd/plugin.h"
#include "plugins/plugins_internal.h"

typedef struct sm_state {
    float inv_temperature;
    int n_inst;
    float **scratch; /* per instance, grown to the largest request */
    size_t *cap;
} sm_state;

static void sm_unload(void *state)
{
    sm_state *s = state;
    if (!s)
        return;
    for (int i = 0; s->scratch && i < s->n_inst; i++)
        infd_free(s->scratch[i]);
    infd_free(s->scratch);
    infd_free(s->cap);
    infd_free(s);
}

static infd_status sm_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    *state = NULL;
    float temperature = 1.0f;
    int classes = -1;
    if (plugin_param_float(km, "temperature", &temperature, err) != INFD_STATUS_OK ||
        plugin_param_int(km, "classes", 1, 1 << 24, &classes, err) != INFD_STATUS_OK)
        return err->code;
    if (!(temperature > 0))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameter 'temperature' must be above 0");
    const int64_t dims[] = { classes };
    infd_status st = infd_kind_model_add_input(km, "LOGITS", INFD_DTYPE_FP32, 1, dims, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "PROBS", INFD_DTYPE_FP32, 1, dims, err);
    if (st != INFD_STATUS_OK)
        return st;
    sm_state *s = infd_calloc(1, sizeof(*s));
    int n = infd_kind_model_n_instances(km);
    if (s) {
        s->n_inst = n;
        s->scratch = infd_calloc((size_t)n, sizeof(float *));
        s->cap = infd_calloc((size_t)n, sizeof(size_t));
    }
    if (!s || !s->scratch || !s->cap) {
        sm_unload(s);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    s->inv_temperature = 1.0f / temperature;
    *state = s;
    return INFD_STATUS_OK;
}

static infd_status sm_run_batch(void *state, int instance, infd_batch *batch, infd_error *err)
{
    (void)err;
    sm_state *s = state;
    for (int k = 0; k < infd_batch_size(batch); k++) {
        infd_request *req = infd_batch_request(batch, k);
        infd_tensor in;
        infd_error e;
        infd_error_clear(&e);
        if (infd_request_input(req, 0, &in, &e) != INFD_STATUS_OK) {
            infd_request_fail(req, e.code, e.msg);
            continue;
        }
        size_t n = in.nbytes / sizeof(float);
        int64_t classes = in.shape.rank > 0 ? in.shape.dims[in.shape.rank - 1] : 1;
        if (classes < 1) {
            infd_request_fail(req, INFD_STATUS_INVALID_ARGUMENT,
                              "input 'LOGITS' has no classes (its last dim is 0)");
            continue;
        }
        /* Grows once to the largest request, then reused. */
        if (n > s->cap[instance]) {
            float *p = infd_malloc(n * sizeof(float));
            if (!p) {
                infd_request_fail(req, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
                continue;
            }
            infd_free(s->scratch[instance]);
            s->scratch[instance] = p;
            s->cap[instance] = n;
        }
        const float *x = in.data;
        float *y = s->scratch[instance];
        for (size_t row = 0; row < n / (size_t)classes; row++) {
            const float *a = x + row * (size_t)classes;
            float *b = y + row * (size_t)classes;
            float max = -INFINITY;
            for (int64_t c = 0; c < classes; c++)
                max = a[c] > max ? a[c] : max;
            double sum = 0;
            for (int64_t c = 0; c < classes; c++) {
                b[c] = expf((a[c] - max) * s->inv_temperature);
                sum += b[c];
            }
            float inv = (float)(1.0 / sum);
            for (int64_t c = 0; c < classes; c++)
                b[c] *= inv;
        }
        infd_tensor out = in;
        out.data = y;
        out.owns_data = false;
        if (infd_request_output_set(req, 0, &out, &e) != INFD_STATUS_OK)
            infd_request_fail(req, e.code, e.msg);
    }
    return INFD_STATUS_OK;
}

const infd_model_kind plugin_softmax_kind = {
    .name = "softmax",
    .platform = "infd_softmax",
    .load = sm_load,
    .unload = sm_unload,
    .run_batch = sm_run_batch,
};
