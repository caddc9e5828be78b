/*
 * test_kserve_json.c - the KServe v2 inference-header decoder
 * (src/frontends/http/kserve_json.c): typed decoding of every datatype,
 * deferred "data", binary-data parameters, the error messages, and that a
 * reused request decodes without allocating.
 *
 * The decoder lives in the frontends library; the test compiles its source
 * in (test.h allows that) so it links against libinfd alone.
 */
#include "frontends/http/kserve_json.c"

#include "test.h"

static kserve_request req;

static infd_status parse(const char *json, infd_error *err)
{
    infd_error_clear(err);
    return kserve_request_parse(&req, json, strlen(json), err);
}

static void test_fp32_nested(void)
{
    infd_error err;
    const char *j = "{\"id\":\"r1\",\"inputs\":[{\"name\":\"INPUT0\",\"shape\":[2,2],"
                    "\"datatype\":\"FP32\",\"data\":[[1,2.5],[-3e2,0.25]]}],"
                    "\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}],"
                    "\"parameters\":{\"binary_data_output\":false,\"timeout\":1500}}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(req.id, "r1");
    ASSERT_EQ_INT(req.n_inputs, 1);
    ASSERT_STR_EQ(req.inputs[0].name, "INPUT0");
    ASSERT_EQ_INT(req.inputs[0].rank, 2);
    ASSERT_EQ_U64(req.inputs[0].nbytes, 16);
    const float *f = req.inputs[0].data;
    ASSERT_TRUE(f[0] == 1.0f && f[1] == 2.5f && f[2] == -300.0f && f[3] == 0.25f);
    ASSERT_EQ_INT(req.n_outputs, 1);
    ASSERT_STR_EQ(req.outputs[0].name, "OUTPUT0");
    ASSERT_EQ_INT(req.outputs[0].binary_data, 1);
    ASSERT_EQ_INT(req.binary_data_output, 0);
    ASSERT_EQ_I64(req.timeout_us, 1500);
    ASSERT_EQ_I64(req.priority, -1);
}

static void test_deferred_data(void)
{
    infd_error err;
    /* "data" first, with nesting and an unknown key after it. */
    const char *j = "{\"inputs\":[{\"data\":[[1,2,3],[4,5,6]],\"name\":\"X\",\"extra\":{\"a\":[1]},"
                    "\"datatype\":\"INT16\",\"shape\":[2,3]},"
                    "{\"name\":\"Y\",\"data\":[true,false],\"shape\":[2],\"datatype\":\"BOOL\"}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(req.n_inputs, 2);
    const int16_t *x = req.inputs[0].data;
    ASSERT_EQ_U64(req.inputs[0].nbytes, 12);
    for (int i = 0; i < 6; i++)
        ASSERT_EQ_INT(x[i], i + 1);
    const uint8_t *y = req.inputs[1].data;
    ASSERT_TRUE(y[0] == 1 && y[1] == 0);
}

static void test_every_dtype(void)
{
    infd_error err;
    const char *j =
        "{\"inputs\":["
        "{\"name\":\"u8\",\"datatype\":\"UINT8\",\"shape\":[2],\"data\":[0,255]},"
        "{\"name\":\"u16\",\"datatype\":\"UINT16\",\"shape\":[1],\"data\":[65535]},"
        "{\"name\":\"u32\",\"datatype\":\"UINT32\",\"shape\":[1],\"data\":[4294967295]},"
        "{\"name\":\"u64\",\"datatype\":\"UINT64\",\"shape\":[1],\"data\":[18446744073709551615]},"
        "{\"name\":\"i8\",\"datatype\":\"INT8\",\"shape\":[2],\"data\":[-128,127]},"
        "{\"name\":\"i32\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[-2147483648]},"
        "{\"name\":\"i64\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[-9223372036854775808]},"
        "{\"name\":\"h\",\"datatype\":\"FP16\",\"shape\":[2],\"data\":[1.5,-65504]},"
        "{\"name\":\"bf\",\"datatype\":\"BF16\",\"shape\":[1],\"data\":[3.0]},"
        "{\"name\":\"d\",\"datatype\":\"FP64\",\"shape\":[1],\"data\":[0.1]},"
        "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],\"data\":[\"ab\",\"\\u00e9\"]}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(req.n_inputs, 11);
    const uint8_t *u8 = req.inputs[0].data;
    ASSERT_TRUE(u8[0] == 0 && u8[1] == 255);
    ASSERT_EQ_U64(*(const uint16_t *)req.inputs[1].data, 65535);
    ASSERT_EQ_U64(*(const uint32_t *)req.inputs[2].data, 4294967295u);
    ASSERT_EQ_U64(*(const uint64_t *)req.inputs[3].data, UINT64_MAX);
    const int8_t *i8 = req.inputs[4].data;
    ASSERT_TRUE(i8[0] == -128 && i8[1] == 127);
    ASSERT_EQ_I64(*(const int32_t *)req.inputs[5].data, INT32_MIN);
    ASSERT_EQ_I64(*(const int64_t *)req.inputs[6].data, INT64_MIN);
    const uint16_t *h = req.inputs[7].data;
    ASSERT_TRUE(infd_fp16_to_fp32(h[0]) == 1.5f && infd_fp16_to_fp32(h[1]) == -65504.0f);
    ASSERT_TRUE(infd_bf16_to_fp32(*(const uint16_t *)req.inputs[8].data) == 3.0f);
    ASSERT_TRUE(*(const double *)req.inputs[9].data == 0.1);
    /* BYTES: 4-byte LE length then the bytes; \u00e9 is 2 bytes of UTF-8. */
    ASSERT_EQ_U64(req.inputs[10].nbytes, 4 + 2 + 4 + 2);
    const uint8_t *s = req.inputs[10].data;
    ASSERT_TRUE(s[0] == 2 && s[1] == 0 && s[4] == 'a' && s[5] == 'b' && s[6] == 2);
    ASSERT_TRUE(s[10] == 0xc3 && s[11] == 0xa9);
}

static void test_binary_input(void)
{
    infd_error err;
    const char *j = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1,4],"
                    "\"parameters\":{\"binary_data_size\":16,\"other\":[1,{\"x\":2}]}}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_OK);
    ASSERT_EQ_I64(req.inputs[0].binary_data_size, 16);
    ASSERT_EQ_U64(req.inputs[0].nbytes, 16);
    ASSERT_TRUE(req.inputs[0].data == NULL);

    j = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1,4],"
        "\"parameters\":{\"binary_data_size\":12}}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg,
                   "input 'A': binary_data_size is 12 bytes, shape [1,4] of FP32 needs 16");

    j = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
        "\"parameters\":{\"binary_data_size\":4}}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "both 'data' and parameter 'binary_data_size'");
}

static void expect_error(const char *json, const char *needle)
{
    infd_error err;
    ASSERT_STATUS(parse(json, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, needle);
}

static void test_errors(void)
{
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[1,2,3]}]}",
        "input 'A': 'data' has 3 elements, shape [2,2] needs 4");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,2,3]}]}",
        "input 'A': 'data' has more than the 2 elements of its shape");
    expect_error(
        "{\"inputs\":[{\"data\":[1,2,3],\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[2]}]}",
        "input 'A': 'data' has more than the 2 elements");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"UINT8\",\"shape\":[1],\"data\":[300]}]}",
        "input 'A': element 0: 300 is out of range for UINT8");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"INT8\",\"shape\":[2],\"data\":[1,-129]}]}",
        "element 1: -129 is out of range for INT8");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"UINT32\",\"shape\":[1],\"data\":[-1]}]}",
        "-1 is out of range for UINT32");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1.5]}]}",
        "1.5 is not an integer");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP16\",\"shape\":[1],\"data\":[70000]}]}",
        "70000 is out of range for FP16");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[\"x\"]}]}",
        "input 'A': element 0: expected a number for FP32, got a string");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"BOOL\",\"shape\":[1],\"data\":[1]}]}",
                 "expected true or false for BOOL, got a number");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP33\",\"shape\":[1],\"data\":[1]}]}",
                 "input 'A': unknown datatype 'FP33'");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"data\":[1]}]}",
                 "input 'A' has no 'datatype'");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"data\":[1]}]}",
                 "input 'A' has no 'shape'");
    expect_error("{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}",
                 "input #0 has no 'name'");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1]}]}",
                 "input 'A' has neither 'data' nor parameter 'binary_data_size'");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[-1],\"data\":[1]}]}",
        "must be a non-negative integer");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1000000000],"
                 "\"data\":[1]}]}",
                 "more than 'data' can hold");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[{}]}]}",
        "not objects");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":1}]}",
                 "'data' must be an array, got a number");
    expect_error("{\"inputs\":[{\"name\":\"A\",", "malformed JSON");
    expect_error("{\"inputs\":[}", "malformed JSON at byte");
    expect_error("[1,2]", "the request must be a JSON object");
    expect_error("{\"outputs\":[]}", "the request has no 'inputs'");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
                 "\"outputs\":[{\"name\":\"B\",\"parameters\":{\"classification\":0}}]}",
                 "parameter 'classification' must be 1 to 1000000, got 0");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
                 "\"outputs\":[{\"name\":\"B\",\"parameters\":{\"classification\":\"3\"}}]}",
                 "output parameter 'classification' must be an integer, got a string");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]} x",
        "malformed JSON");
}

/* parameters.classification: Triton's extension, per output. */
static void test_classification(void)
{
    infd_error err;
    const char *j = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],"
                    "\"data\":[1]}],\"outputs\":[{\"name\":\"B\",\"parameters\":"
                    "{\"classification\":3,\"binary_data\":false}},{\"name\":\"C\"}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT(req.n_outputs, 2);
    ASSERT_EQ_INT(req.outputs[0].class_count, 3);
    ASSERT_EQ_INT(req.outputs[1].class_count, 0);
    ASSERT_EQ_INT(kserve_output_class_count(&req, "B"), 3);
    ASSERT_EQ_INT(kserve_output_class_count(&req, "C"), 0);
}

/* Triton's shared-memory parameters, on inputs and outputs. */
static void test_shared_memory(void)
{
    infd_error err;
    const char *j =
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1,4],"
        "\"parameters\":{\"shared_memory_region\":\"r1\",\"shared_memory_byte_size\":16,"
        "\"shared_memory_offset\":32}}],\"outputs\":[{\"name\":\"B\",\"parameters\":"
        "{\"shared_memory_region\":\"r2\",\"shared_memory_byte_size\":8}},{\"name\":\"C\"}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(req.inputs[0].shm_region, "r1");
    ASSERT_EQ_I64(req.inputs[0].shm_offset, 32);
    ASSERT_EQ_U64(req.inputs[0].nbytes, 16);
    ASSERT_EQ_I64(req.inputs[0].binary_data_size, -1);
    ASSERT_TRUE(req.inputs[0].data == NULL);
    const kserve_output *o = kserve_output_shm(&req, "B");
    ASSERT_TRUE(o != NULL && o->shm_byte_size == 8 && o->shm_offset == 0);
    ASSERT_STR_EQ(o->shm_region, "r2");
    ASSERT_TRUE(kserve_output_shm(&req, "C") == NULL);
    /* The offset defaults to 0; reparsing resets every field. */
    j = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}";
    ASSERT_STATUS(parse(j, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(req.inputs[0].shm_region, "");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1,4],"
                 "\"parameters\":{\"shared_memory_region\":\"r\"}}]}",
                 "input 'A': parameters 'shared_memory_region' and 'shared_memory_byte_size' go "
                 "together");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1,4],"
        "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":12}}]}",
        "input 'A': shared_memory_byte_size is 12 bytes, shape [1,4] of FP32 needs 16");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
                 "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4}}]}",
                 "input 'A' is in shared memory region 'r': it has no 'data'");
    expect_error(
        "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],"
        "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":-4}}]}",
        "parameter 'shared_memory_byte_size' must be a non-negative integer");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],"
                 "\"parameters\":{\"shared_memory_region\":7,\"shared_memory_byte_size\":4}}]}",
                 "parameter 'shared_memory_region' must be a string");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
                 "\"outputs\":[{\"name\":\"B\",\"parameters\":{\"shared_memory_offset\":4}}]}",
                 "output 'B': parameters 'shared_memory_region' and 'shared_memory_byte_size' go "
                 "together");
    expect_error("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
                 "\"outputs\":[{\"name\":\"B\",\"parameters\":{\"shared_memory_region\":\"r\","
                 "\"shared_memory_byte_size\":4,\"classification\":2}}]}",
                 "a classification cannot go to shared memory");
}

/* A request object reused for the same shape of request allocates nothing. */
static void test_reuse_no_alloc(void)
{
    infd_error err;
    char j[4096];
    int n = snprintf(j, sizeof(j),
                     "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
                     "\"data\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},"
                     "{\"data\":[\"abc\"],\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[1]}]}");
    ASSERT_STATUS(kserve_request_parse(&req, j, (size_t)n, &err), INFD_STATUS_OK);
    infd_alloc_stats before = infd_alloc_get_stats();
    for (int i = 0; i < 100; i++)
        ASSERT_STATUS(kserve_request_parse(&req, j, (size_t)n, &err), INFD_STATUS_OK);
    infd_alloc_stats after = infd_alloc_get_stats();
    ASSERT_EQ_U64(after.n_allocs - before.n_allocs, 0);
    ASSERT_EQ_U64(req.inputs[1].nbytes, 7);
}

static void test_fini(void)
{
    kserve_request_fini(&req);
    kserve_request_fini(&req); /* zeroed: no-op */
    ASSERT_TRUE(req._arena == NULL);
}

TEST_MAIN(test_fp32_nested, test_deferred_data, test_every_dtype, test_binary_input, test_errors,
          test_classification, test_shared_memory, test_reuse_no_alloc, test_fini)
