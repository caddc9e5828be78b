/*
 * job.c - the Redis job queue's job format (see job.h).
 */
#include "frontends/redisq/job.h"

#include <inttypes.h>
#include <string.h>

static bool field_is(const char *f, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(f, name, n) == 0;
}

/* A decimal integer in [lo, hi], the whole value (at most 18 digits, so
 * it cannot overflow). */
static bool parse_int(const char *v, size_t n, int64_t lo, int64_t hi, int64_t *out)
{
    if (n == 0 || n > 18)
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x * 10 + (v[i] - '0');
    }
    if (x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

static bool id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

infd_status redisq_fields_parse(const char *const *f, const size_t *fn, const char *const *v,
                                const size_t *vn, int n, redisq_fields *out, infd_error *err)
{
    memset(out, 0, sizeof(*out));
    out->version = out->priority = out->timeout_us = -1;
    const char *id = NULL, *request = NULL, *header = NULL;
    size_t id_n = 0, request_n = 0, header_n = 0;
    bool seen_version = false, seen_priority = false, seen_timeout = false;
    const char *bad = NULL; /* the first malformed field */
    for (int i = 0; i < n; i++) {
        const char *name = f[i];
        size_t nn = fn[i];
        const char *again = NULL;
        if (field_is(name, nn, "id")) {
            again = id ? "id" : NULL;
            id = v[i];
            id_n = vn[i];
        } else if (field_is(name, nn, "model")) {
            again = out->model ? "model" : NULL;
            out->model = v[i];
            out->model_n = vn[i];
        } else if (field_is(name, nn, "version")) {
            again = seen_version ? "version" : NULL;
            seen_version = true;
            if (!parse_int(v[i], vn[i], 1, INT64_MAX, &out->version) && !bad)
                bad = "version (a model version, an integer > 0)";
        } else if (field_is(name, nn, "request")) {
            again = request ? "request" : NULL;
            request = v[i];
            request_n = vn[i];
        } else if (field_is(name, nn, "header")) {
            again = header ? "header" : NULL;
            header = v[i];
            header_n = vn[i];
        } else if (field_is(name, nn, "binary")) {
            again = out->binary ? "binary" : NULL;
            out->binary = v[i];
            out->binary_n = vn[i];
        } else if (field_is(name, nn, "priority")) {
            again = seen_priority ? "priority" : NULL;
            seen_priority = true;
            if (!parse_int(v[i], vn[i], 0, UINT32_MAX, &out->priority) && !bad)
                bad = "priority (an integer, 1 highest)";
        } else if (field_is(name, nn, "timeout_us")) {
            again = seen_timeout ? "timeout_us" : NULL;
            seen_timeout = true;
            if (!parse_int(v[i], vn[i], 0, INT64_MAX, &out->timeout_us) && !bad)
                bad = "timeout_us (microseconds, an integer >= 0)";
        }
        if (again)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "job: field '%s' is given twice", again);
    }
    if (!id)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "job: no 'id' field");
    bool id_ok = id_n >= 1 && id_n < REDISQ_ID_BYTES;
    for (size_t i = 0; id_ok && i < id_n; i++)
        id_ok = id_char(id[i]);
    if (!id_ok)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "job: 'id' must be 1 to %d characters of A-Z a-z 0-9 . _ : - "
                              "(got %zu bytes)",
                              REDISQ_ID_BYTES - 1, id_n);
    memcpy(out->id, id, id_n);
    out->id[id_n] = '\0';
    if (bad)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "job %s: malformed field %s",
                              out->id, bad);
    if (request && header)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "job %s: both 'request' and 'header' given (one or the other)",
                              out->id);
    if (!request && !header)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "job %s: no 'request' field (or 'header' with 'binary')", out->id);
    if (out->binary && !header)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "job %s: 'binary' needs 'header' (the binary extension's JSON), "
                              "not 'request'",
                              out->id);
    out->json = request ? request : header;
    out->json_n = request ? request_n : header_n;
    return INFD_STATUS_OK;
}

infd_status redisq_job_decode(const redisq_fields *fields, kserve_request *r, infd_error *err)
{
    infd_error perr;
    infd_error_clear(&perr);
    if (kserve_request_parse(r, fields->json, fields->json_n, &perr) != INFD_STATUS_OK)
        return infd_error_set(err, perr.code, "job %s: %s: %s", fields->id,
                              fields->binary ? "header" : "request", perr.msg);
    size_t off = 0;
    for (int i = 0; i < r->n_inputs; i++) {
        kserve_input *in = &r->inputs[i];
        if (in->binary_data_size < 0)
            continue;
        char label[KSERVE_NAME_BYTES + 16];
        if (!fields->binary)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "job %s: %s has binary_data_size but the job has no 'binary' "
                                  "field",
                                  fields->id, kserve_input_label(r, i, label, sizeof(label)));
        if ((uint64_t)in->binary_data_size > fields->binary_n - off)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "job %s: %s: binary_data_size %" PRId64
                                  " runs past the 'binary' field (%zu bytes, %zu used before it)",
                                  fields->id, kserve_input_label(r, i, label, sizeof(label)),
                                  in->binary_data_size, fields->binary_n, off);
        in->data = fields->binary + off;
        in->nbytes = (size_t)in->binary_data_size;
        off += (size_t)in->binary_data_size;
    }
    if (fields->binary && off != fields->binary_n)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "job %s: the inputs' binary_data_size add up to %zu bytes, the "
                              "'binary' field has %zu",
                              fields->id, off, fields->binary_n);
    return INFD_STATUS_OK;
}

int64_t redisq_entry_ms(const char *entry_id, size_t n)
{
    size_t i = 0;
    int64_t ms = 0;
    while (i < n && entry_id[i] >= '0' && entry_id[i] <= '9' && i < 18)
        ms = ms * 10 + (entry_id[i++] - '0');
    return i > 0 && (i == n || entry_id[i] == '-') ? ms : -1;
}
