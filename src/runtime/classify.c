/*
 * classify.c - Triton's classification extension: an output asked for with
 * a class count comes back as its top values per batch row, as BYTES
 * "value:index[:label]" strings, labels from the output's label_filename.
 * It applies to every model (ONNX, processors, ensembles) and reaches the
 * network through the frontends' `classification` output parameter.
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------------------- */
/* Labels                                                                    */
/* ------------------------------------------------------------------------- */

infd_status rt_labels_load(infd_model *m, const char *version_dir, const char *cfile,
                           infd_error *err)
{
    const Inference__ModelConfig *c = m->config;
    for (size_t k = 0; k < c->n_output; k++) {
        const char *file = c->output[k]->label_filename;
        if (!file || !file[0])
            continue;
        int j = infd_model_output_index(m, c->output[k]->name);
        if (j < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: output '%s' has a label_filename but the model has no "
                                  "such output",
                                  cfile, c->output[k]->name);
        if (strchr(file, '/') || strcmp(file, "..") == 0 || strcmp(file, ".") == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: output '%s': label_filename '%s' must be a file name in "
                                  "the model folder",
                                  cfile, c->output[k]->name, file);
        /* The model folder is the version folder's parent. */
        const char *slash = strrchr(version_dir, '/');
        size_t dir_len = slash ? (size_t)(slash - version_dir) : 1;
        size_t plen = dir_len + strlen(file) + 2;
        char *path = infd_malloc(plen);
        if (!path)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        snprintf(path, plen, "%.*s/%s", (int)dir_len, slash ? version_dir : ".", file);
        char *text = NULL;
        size_t n = 0;
        infd_status st = rt_read_file(path, &text, &n, err);
        infd_free(path);
        if (st != INFD_STATUS_OK)
            return st;
        int lines = 0;
        for (size_t i = 0; i < n; i++)
            lines += text[i] == '\n';
        lines += n > 0 && text[n - 1] != '\n';
        char **lv = infd_malloc(sizeof(char *) * (size_t)(lines > 0 ? lines : 1));
        if (!lv) {
            infd_free(text);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        int at = 0;
        for (char *p = text; p < text + n && at < lines;) {
            char *e = memchr(p, '\n', (size_t)(text + n - p));
            if (!e)
                e = text + n;
            if (e > p && e[-1] == '\r')
                e[-1] = '\0';
            *e = '\0';
            lv[at++] = p;
            p = e + 1;
        }
        m->label_text[j] = text;
        m->labels[j] = lv;
        m->n_labels[j] = at;
    }
    return INFD_STATUS_OK;
}

void rt_labels_free(infd_model *m)
{
    for (int j = 0; j < INFD_MAX_MODEL_IO; j++) {
        infd_free(m->label_text[j]);
        infd_free(m->labels[j]);
        m->label_text[j] = NULL;
        m->labels[j] = NULL;
        m->n_labels[j] = 0;
    }
}

/* ------------------------------------------------------------------------- */
/* Requests                                                                  */
/* ------------------------------------------------------------------------- */

infd_status infd_request_add_output_classification(infd_request *req, const char *name,
                                                   int class_count, infd_error *err)
{
    const infd_model *m = req->model;
    int j = infd_model_output_index(m, name);
    if (j < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "model '%s' has no output '%s'",
                              m->name, name ? name : "(null)");
    if (class_count < 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "output '%s': classification asks for %d classes; at least 1", name,
                              class_count);
    if (m->out[j].dtype == INFD_DTYPE_BYTES || m->out[j].dtype == INFD_DTYPE_BOOL)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "output '%s' is %s: the classification extension ranks numbers", name,
                              infd_dtype_name(m->out[j].dtype));
    infd_status st = infd_request_add_output(req, name, err);
    if (st != INFD_STATUS_OK)
        return st;
    req->cls[j] = class_count;
    req->any_cls = true;
    return INFD_STATUS_OK;
}

static double element(const infd_tensor *t, size_t i)
{
    const void *d = t->data;
    switch (t->dtype) {
    case INFD_DTYPE_UINT8:
        return ((const uint8_t *)d)[i];
    case INFD_DTYPE_UINT16:
        return ((const uint16_t *)d)[i];
    case INFD_DTYPE_UINT32:
        return ((const uint32_t *)d)[i];
    case INFD_DTYPE_UINT64:
        return (double)((const uint64_t *)d)[i];
    case INFD_DTYPE_INT8:
        return ((const int8_t *)d)[i];
    case INFD_DTYPE_INT16:
        return ((const int16_t *)d)[i];
    case INFD_DTYPE_INT32:
        return ((const int32_t *)d)[i];
    case INFD_DTYPE_INT64:
        return (double)((const int64_t *)d)[i];
    case INFD_DTYPE_FP16:
        return infd_fp16_to_fp32(((const uint16_t *)d)[i]);
    case INFD_DTYPE_BF16:
        return infd_bf16_to_fp32(((const uint16_t *)d)[i]);
    case INFD_DTYPE_FP32:
        return ((const float *)d)[i];
    case INFD_DTYPE_FP64:
        return ((const double *)d)[i];
    default:
        return 0;
    }
}

/* Whether value a (index ia) ranks before b (index ib): larger first, NaN
 * last, the lower index first among equals. */
static bool before(double a, size_t ia, double b, size_t ib)
{
    if (a != a)
        return false;
    if (b != b)
        return true;
    return a > b || (a == b && ia < ib);
}

static bool grow(infd_request *r, size_t need)
{
    if (need <= r->cls_cap)
        return true;
    size_t want = r->cls_cap ? r->cls_cap : 4096;
    while (want < need)
        want *= 2;
    void *p = infd_malloc(want);
    if (!p)
        return false;
    infd_free(r->cls_buf);
    r->cls_buf = p;
    r->cls_cap = want;
    return true;
}

infd_status rt_classify(infd_request *r, infd_error *err)
{
    const infd_model *m = r->model;
    /* Pass 1: the bytes every classified output needs (the element with
     * the longest label bounds each string). */
    size_t need = 0;
    for (int k = 0; k < r->n_out; k++) {
        int j = r->out_index[k];
        if (!r->cls[j])
            continue;
        const infd_tensor *t = &r->out[k];
        int64_t numel = infd_tensor_numel(t);
        int64_t rows = m->max_batch > 0 && t->shape.rank > 0 ? t->shape.dims[0] : 1;
        int64_t per = rows > 0 ? numel / rows : 0;
        int64_t keep = per < r->cls[j] ? per : r->cls[j];
        size_t longest = 0;
        for (int l = 0; l < m->n_labels[j]; l++) {
            size_t len = strlen(m->labels[j][l]);
            longest = len > longest ? len : longest;
        }
        /* "%f" of a double is at most 317 digits and a sign; the index 20. */
        need += (size_t)(rows * keep) * (4 + 330 + 1 + 20 + 1 + longest) +
                sizeof(size_t) * (size_t)keep + 8;
    }
    if (!grow(r, need))
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "out of memory for the classification of %zu bytes", need);
    char *out = r->cls_buf;
    for (int k = 0; k < r->n_out; k++) {
        int j = r->out_index[k];
        if (!r->cls[j])
            continue;
        infd_tensor *t = &r->out[k];
        bool batched = m->max_batch > 0 && t->shape.rank > 0;
        int64_t numel = infd_tensor_numel(t);
        int64_t rows = batched ? t->shape.dims[0] : 1;
        int64_t per = rows > 0 ? numel / rows : 0;
        int64_t keep = per < r->cls[j] ? per : r->cls[j];
        char *start = out;
        /* The top indices of a row, kept sorted by insertion: k is small
         * next to the classes (Triton's clients ask for 1 to 10). */
        out = (char *)(((uintptr_t)out + 7) & ~(uintptr_t)7);
        start = out;
        size_t *top = (size_t *)out;
        char *text = out + sizeof(size_t) * (size_t)keep;
        char *w = text;
        for (int64_t row = 0; row < rows; row++) {
            size_t base = (size_t)(row * per), have = 0;
            for (size_t i = 0; i < (size_t)per; i++) {
                double v = element(t, base + i);
                if (have == (size_t)keep &&
                    !before(v, i, element(t, base + top[have - 1]), top[have - 1]))
                    continue;
                size_t at = have < (size_t)keep ? have++ : have - 1;
                while (at > 0 && before(v, i, element(t, base + top[at - 1]), top[at - 1])) {
                    top[at] = top[at - 1];
                    at--;
                }
                top[at] = i;
            }
            for (size_t q = 0; q < have; q++) {
                size_t i = top[q];
                char *len = w;
                w += 4;
                int n = i < (size_t)m->n_labels[j]
                            ? sprintf(w, "%f:%zu:%s", element(t, base + i), i, m->labels[j][i])
                            : sprintf(w, "%f:%zu", element(t, base + i), i);
                uint32_t u = (uint32_t)n;
                memcpy(len, &u, 4); /* little-endian hosts only (infd.h) */
                w += n;
            }
        }
        /* The strings move to the front, over the index scratch. */
        size_t bytes = (size_t)(w - text);
        memmove(start, text, bytes);
        t->dtype = INFD_DTYPE_BYTES;
        t->shape.rank = batched ? 2 : 1;
        if (batched) {
            t->shape.dims[0] = rows;
            t->shape.dims[1] = keep;
        } else {
            t->shape.dims[0] = keep;
        }
        t->data = start;
        t->nbytes = bytes;
        t->owns_data = false;
        out = start + bytes;
    }
    return INFD_STATUS_OK;
}
