/*
 * job.h - the Redis job queue's job format (docs/REDIS.md): the fields of
 * one stream entry, checked, and its KServe v2 request decoded.
 *
 * A job is a Redis Stream entry, a list of field/value pairs:
 *   id          the client's job id, 1..128 bytes of [A-Za-z0-9._:-]; the
 *               result is stored under results:{id}
 *   model       optional: must name the stream's model when given
 *   version     optional: a model version > 0 (default: the highest READY)
 *   request     the KServe v2 inference request, JSON (as POST .../infer)
 *   header      or: the JSON header of Triton's binary-data extension ...
 *   binary      ... and the inputs' bytes, one after another, in the
 *               header's input order (each input's binary_data_size)
 *   priority    optional: 1 is highest (the model's priority levels)
 *   timeout_us  optional: the queue timeout, microseconds
 * Other fields are the client's own and are ignored.
 *
 * Pure functions, no I/O, for the frontend and the fuzz target.
 */
#ifndef INFD_FRONTENDS_REDISQ_JOB_H
#define INFD_FRONTENDS_REDISQ_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontends/http/kserve_json.h"
#include "infd/infd.h"

#define REDISQ_ID_BYTES 129 /* 128 and the NUL */

typedef struct redisq_fields {
    char id[REDISQ_ID_BYTES];
    const char *model; /* borrowed from the entry, NULL when absent */
    size_t model_n;
    int64_t version;  /* -1: absent */
    const char *json; /* "request" or "header" */
    size_t json_n;
    const char *binary; /* "binary", NULL when absent */
    size_t binary_n;
    int64_t priority;   /* -1: absent */
    int64_t timeout_us; /* -1: absent */
} redisq_fields;

/*
 * Reads the `n` field/value pairs of an entry (field i: f[i], fn[i] bytes;
 * its value: v[i], vn[i] bytes). INVALID_ARGUMENT naming the field when the
 * id is missing or malformed, a number is malformed, both or neither of
 * request and header are given, binary comes without header, or a field
 * repeats. `out` borrows the entry's bytes. When the id itself is fine but
 * something else is wrong, out->id holds it (so the error can be stored as
 * the job's result); otherwise out->id is "".
 */
infd_status redisq_fields_parse(const char *const *f, const size_t *fn, const char *const *v,
                                const size_t *vn, int n, redisq_fields *out, infd_error *err);

/*
 * Decodes the job's request into `r` (kserve_request_parse) and, with the
 * binary extension, points each binary input's data at its bytes in
 * fields->binary (which must outlive the use of `r`). INVALID_ARGUMENT when
 * the JSON is malformed, an input's binary_data_size comes without a binary
 * field, or the sizes do not add up to the binary field's length.
 */
infd_status redisq_job_decode(const redisq_fields *fields, kserve_request *r, infd_error *err);

/* The millisecond part of a stream entry ID ("1700000000000-0"), or -1. */
int64_t redisq_entry_ms(const char *entry_id, size_t n);

#endif /* INFD_FRONTENDS_REDISQ_JOB_H */
