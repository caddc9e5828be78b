/*
 * fuzz_redisq_job.c - libFuzzer target for the Redis job queue's job
 * decoder (src/frontends/redisq/job.c): a stream entry's field/value pairs,
 * checked, then its KServe request decoded and its binary inputs placed.
 * Any bytes must decode or fail with a message, never crash or read out of
 * bounds.
 *
 * Input: the entry's fields and values one after another, each ended by a
 * NUL byte (field, value, field, value, ...). The decoders' sources are
 * compiled in, so the target links against libinfd alone (yajl comes with
 * it).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "frontends/http/kserve_json.c"
#include "frontends/redisq/job.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kserve_request req;
    const char *part[64];
    size_t len[64];
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && n < 64; i++) {
        if (i == size || data[i] == 0) {
            part[n] = (const char *)data + start;
            len[n++] = i - start;
            start = i + 1;
        }
    }
    const char *f[32], *v[32];
    size_t fn[32], vn[32];
    int pairs = n / 2;
    for (int i = 0; i < pairs; i++) {
        f[i] = part[2 * i];
        fn[i] = len[2 * i];
        v[i] = part[2 * i + 1];
        vn[i] = len[2 * i + 1];
    }
    redisq_fields fields;
    infd_error err = { 0 };
    if (redisq_fields_parse(f, fn, v, vn, pairs, &fields, &err) == INFD_STATUS_OK &&
        redisq_job_decode(&fields, &req, &err) == INFD_STATUS_OK) {
        /* Touch every placed byte so a bad length shows up under ASan. */
        volatile uint8_t sink = 0;
        for (int i = 0; i < req.n_inputs; i++) {
            const uint8_t *p = req.inputs[i].data;
            for (size_t k = 0; p && k < req.inputs[i].nbytes; k++)
                sink ^= p[k];
        }
        (void)sink;
    }
    (void)redisq_entry_ms((const char *)data, size);
    return 0;
}
