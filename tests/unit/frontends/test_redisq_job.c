/*
 * test_redisq_job.c - the Redis job queue's job format
 * (src/frontends/redisq/job.c): stream entry fields checked, with the error
 * messages, the request decoded, binary inputs placed, entry IDs' times.
 *
 * The decoders live in the frontends library; the test compiles their
 * sources in (test.h allows that) so it links against libinfd alone.
 */
#include "frontends/http/kserve_json.c"
#include "frontends/redisq/job.c"

#include "test.h"

static kserve_request req;

/* An entry from "field", "value", ... (NULL-terminated). */
typedef struct entry {
    const char *f[16], *v[16];
    size_t fn[16], vn[16];
    int n;
} entry;

static entry make(const char *const *kv)
{
    entry e = { .n = 0 };
    for (int i = 0; kv[2 * i]; i++) {
        e.f[i] = kv[2 * i];
        e.fn[i] = strlen(kv[2 * i]);
        e.v[i] = kv[2 * i + 1];
        e.vn[i] = strlen(kv[2 * i + 1]);
        e.n++;
    }
    return e;
}

static infd_status parse(const char *const *kv, redisq_fields *out, infd_error *err)
{
    entry e = make(kv);
    infd_error_clear(err);
    return redisq_fields_parse(e.f, e.fn, e.v, e.vn, e.n, out, err);
}

#define REQ                                                                                     \
    "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,2]}]," \
    "\"parameters\":{\"priority\":2}}"

static void test_json_job(void)
{
    redisq_fields f;
    infd_error err;
    const char *kv[] = {
        "id", "job-1", "request", REQ, "timeout_us", "500", "mine", "ignored", NULL
    };
    ASSERT_STATUS(parse(kv, &f, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(f.id, "job-1");
    ASSERT_EQ_I64(f.timeout_us, 500);
    ASSERT_EQ_I64(f.priority, -1);
    ASSERT_EQ_I64(f.version, -1);
    ASSERT_TRUE(f.model == NULL && f.binary == NULL);
    ASSERT_STATUS(redisq_job_decode(&f, &req, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(req.n_inputs, 1);
    ASSERT_EQ_I64(req.priority, 2);
    const float *x = req.inputs[0].data;
    ASSERT_TRUE(x[0] == 1.0f && x[1] == 2.0f);
}

static void test_binary_job(void)
{
    const char *hdr = "{\"inputs\":["
                      "{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[2],"
                      "\"parameters\":{\"binary_data_size\":8}},"
                      "{\"name\":\"B\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[7]},"
                      "{\"name\":\"C\",\"datatype\":\"UINT8\",\"shape\":[3],"
                      "\"parameters\":{\"binary_data_size\":3}}]}";
    static const uint8_t bin[11] = { 0, 0, 128, 63, 0, 0, 0, 64, 9, 8, 7 };
    const char *f[] = { "id", "header", "binary", "version" };
    const char *v[] = { "b:1", hdr, (const char *)bin, "3" };
    size_t fn[] = { 2, 6, 6, 7 }, vn[] = { 3, strlen(hdr), sizeof(bin), 1 };
    redisq_fields fields;
    infd_error err;
    infd_error_clear(&err);
    ASSERT_STATUS(redisq_fields_parse(f, fn, v, vn, 4, &fields, &err), INFD_STATUS_OK);
    ASSERT_EQ_I64(fields.version, 3);
    ASSERT_STATUS(redisq_job_decode(&fields, &req, &err), INFD_STATUS_OK);
    const float *a = req.inputs[0].data;
    ASSERT_TRUE(a[0] == 1.0f && a[1] == 2.0f);
    ASSERT_TRUE(req.inputs[2].data == bin + 8 && req.inputs[2].nbytes == 3);
    /* One byte short, one byte over. */
    vn[2] = sizeof(bin) - 1;
    ASSERT_STATUS(redisq_fields_parse(f, fn, v, vn, 4, &fields, &err), INFD_STATUS_OK);
    ASSERT_STATUS(redisq_job_decode(&fields, &req, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "input 'C': binary_data_size 3 runs past the 'binary' field");
    uint8_t more[12] = { 0 };
    v[2] = (const char *)more;
    vn[2] = sizeof(more);
    ASSERT_STATUS(redisq_fields_parse(f, fn, v, vn, 4, &fields, &err), INFD_STATUS_OK);
    ASSERT_STATUS(redisq_job_decode(&fields, &req, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "add up to 11 bytes, the 'binary' field has 12");
}

static void test_field_errors(void)
{
    redisq_fields f;
    infd_error err;
    static const struct {
        const char *kv[9];
        const char *msg;
        bool has_id;
    } cases[] = {
        { { "request", REQ, NULL }, "job: no 'id' field", false },
        { { "id", "", "request", REQ, NULL }, "'id' must be 1 to 128 characters", false },
        { { "id", "a b", "request", REQ, NULL }, "'id' must be", false },
        { { "id", "x", "id", "y", "request", REQ, NULL }, "field 'id' is given twice", false },
        { { "id", "x", NULL }, "job x: no 'request' field", true },
        { { "id", "x", "request", REQ, "header", REQ, NULL }, "both 'request' and 'header'", true },
        { { "id", "x", "request", REQ, "binary", "zz", NULL }, "'binary' needs 'header'", true },
        { { "id", "x", "request", REQ, "version", "0", NULL }, "malformed field version", true },
        { { "id", "x", "request", REQ, "priority", "-1", NULL }, "malformed field priority", true },
        { { "id", "x", "request", REQ, "timeout_us", "99999999999999999999", NULL },
          "malformed field timeout_us",
          true },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ASSERT_STATUS(parse(cases[i].kv, &f, &err), INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_STR_HAS(err.msg, cases[i].msg);
        ASSERT_TRUE((f.id[0] != 0) == cases[i].has_id);
    }
    /* A 128-byte id is fine, 129 is not. */
    char id[130];
    memset(id, 'a', 129);
    id[128] = '\0';
    const char *ok[] = { "id", id, "request", REQ, NULL };
    ASSERT_STATUS(parse(ok, &f, &err), INFD_STATUS_OK);
    id[128] = 'a';
    id[129] = '\0';
    ASSERT_STATUS(parse(ok, &f, &err), INFD_STATUS_INVALID_ARGUMENT);
    /* Bad JSON, and binary_data_size without a binary field. */
    const char *bad[] = { "id", "j", "request", "{\"inputs\":[", NULL };
    ASSERT_STATUS(parse(bad, &f, &err), INFD_STATUS_OK);
    ASSERT_STATUS(redisq_job_decode(&f, &req, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "job j: request: malformed JSON");
    const char *nobin[] = { "id", "j", "request",
                            "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],"
                            "\"parameters\":{\"binary_data_size\":4}}]}",
                            NULL };
    ASSERT_STATUS(parse(nobin, &f, &err), INFD_STATUS_OK);
    ASSERT_STATUS(redisq_job_decode(&f, &req, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "input 'A' has binary_data_size but the job has no 'binary' field");
}

static void test_entry_ms(void)
{
    ASSERT_EQ_I64(redisq_entry_ms("1700000000123-4", 15), 1700000000123);
    ASSERT_EQ_I64(redisq_entry_ms("17", 2), 17);
    ASSERT_EQ_I64(redisq_entry_ms("x-1", 3), -1);
    ASSERT_EQ_I64(redisq_entry_ms("", 0), -1);
    ASSERT_EQ_I64(redisq_entry_ms("99999999999999999999-0", 22), -1);
}

static void test_fini(void)
{
    kserve_request_fini(&req);
}

TEST_MAIN(test_json_job, test_binary_job, test_field_errors, test_entry_ms, test_fini)
