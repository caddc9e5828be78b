/*
 * test_pbtxt.c - config.pbtxt parsing (runtime/pbtxt.c) and JSON/text
 * writing (runtime/pbjson.c, infd_pbtxt_write) on real Triton configs, every
 * error class with its exact message, round trips through the wire format,
 * and allocation failure at every step.
 */
#include <float.h>
#include <math.h>

#include "core/alloc.h"
#include "core/common.h"
#include "model_config.pb-c.h"
#include "onnx.pb-c.h"
#include "runtime/pbjson.h"
#include "runtime/pbtxt.h"
#include "test.h"

#define CFG_DESC (&inference__model_config__descriptor)

/* Triton's qa/L0 "simple" add/sub model, as its docs write it. */
static const char k_simple[] = "name: \"simple\"\n"
                               "platform: \"onnxruntime_onnx\"\n"
                               "max_batch_size: 8\n"
                               "input [\n"
                               "  {\n"
                               "    name: \"INPUT0\"\n"
                               "    data_type: TYPE_INT32\n"
                               "    dims: [ 16 ]\n"
                               "  },\n"
                               "  {\n"
                               "    name: \"INPUT1\"\n"
                               "    data_type: TYPE_INT32\n"
                               "    dims: [ 16 ]\n"
                               "  }\n"
                               "]\n"
                               "output [\n"
                               "  {\n"
                               "    name: \"OUTPUT0\"\n"
                               "    data_type: TYPE_INT32\n"
                               "    dims: [ 16 ]\n"
                               "  },\n"
                               "  {\n"
                               "    name: \"OUTPUT1\"\n"
                               "    data_type: TYPE_INT32\n"
                               "    dims: [ 16 ]\n"
                               "  }\n"
                               "]\n";

/* Triton's quickstart densenet_onnx. */
static const char k_densenet[] = "name: \"densenet_onnx\"\n"
                                 "platform: \"onnxruntime_onnx\"\n"
                                 "max_batch_size : 0\n"
                                 "input [\n"
                                 "  {\n"
                                 "    name: \"data_0\"\n"
                                 "    data_type: TYPE_FP32\n"
                                 "    format: FORMAT_NCHW\n"
                                 "    dims: [ 3, 224, 224 ]\n"
                                 "    reshape { shape: [ 1, 3, 224, 224 ] }\n"
                                 "  }\n"
                                 "]\n"
                                 "output [\n"
                                 "  {\n"
                                 "    name: \"fc6_1\"\n"
                                 "    data_type: TYPE_FP32\n"
                                 "    dims: [ 1000 ]\n"
                                 "    reshape { shape: [ 1, 1000, 1, 1 ] }\n"
                                 "    label_filename: \"densenet_labels.txt\"\n"
                                 "  }\n"
                                 "]\n";

/* Everything the scheduler reads, in the mixed styles real configs use. */
static const char k_full[] =
    "# A config that sets every block the server acts on.\n"
    "name: 'full'  # single quotes\n"
    "backend: \"onnxruntime\"\n"
    "max_batch_size: 16;\n"
    "version_policy: { specific: { versions: [1, 3] } }\n"
    "input { name: \"x\" data_type: TYPE_FP32 dims: [ -1, 3 ] allow_ragged_batch: true }\n"
    "input < name: \"y\", data_type: 11, dims: 4 dims: 0x10 >\n"
    "output [{ name: \"z\" data_type: TYPE_FP32 dims: [ -1 ] }]\n"
    "dynamic_batching {\n"
    "  preferred_batch_size: [ 4, 8 ]\n"
    "  max_queue_delay_microseconds: 100\n"
    "  preserve_ordering: True\n"
    "  priority_levels: 2\n"
    "  default_priority_level: 1\n"
    "  default_queue_policy {\n"
    "    timeout_action: REJECT\n"
    "    default_timeout_microseconds: 50000\n"
    "    allow_timeout_override: t\n"
    "    max_queue_size: 16\n"
    "  }\n"
    "  priority_queue_policy {\n"
    "    key: 1\n"
    "    value: { timeout_action: DELAY default_timeout_microseconds: 1000 }\n"
    "  }\n"
    "  priority_queue_policy [ { key: 2 value { max_queue_size: 4 } } ]\n"
    "}\n"
    "instance_group [\n"
    "  { count: 2 kind: KIND_CPU },\n"
    "  { name: \"gpu\", count: 1, kind: KIND_GPU, gpus: [ 0, 1 ] }\n"
    "]\n"
    "parameters { key: \"intra_op_thread_count\" value { string_value: \"1\" } }\n"
    "parameters: { key: 'greeting', value: < string_value: \"hel\" 'lo\\n\\t\\\"\\x41\\101\\u00e9' "
    "> }\n"
    "model_warmup [{\n"
    "  name: \"warm\"\n"
    "  batch_size: 1\n"
    "  count: 2\n"
    "  inputs { key: \"x\" value { data_type: TYPE_FP32 dims: [ 1, 3 ] zero_data: true } }\n"
    "  inputs { key: \"y\" value { data_type: TYPE_FP32 dims: 4 random_data: true } }\n"
    "  inputs { key: \"w\" value { data_type: TYPE_FP32 dims: 4 input_data_file: \"raw\" } }\n"
    "}]\n"
    "optimization { priority: PRIORITY_MAX graph { level: -1 } }\n";

static Inference__ModelConfig *parse_cfg(const char *text, infd_error *err)
{
    ProtobufCMessage *m = NULL;
    if (infd_pbtxt_parse(text, strlen(text), CFG_DESC, "config.pbtxt", &m, err) != INFD_STATUS_OK)
        return NULL;
    return (Inference__ModelConfig *)m;
}

/* The error message parsing `text` into a ModelConfig gives ("" on
 * success), in a static buffer. */
static const char *cfg_error(const char *text)
{
    static infd_error err;
    ProtobufCMessage *m = NULL;
    infd_error_clear(&err);
    if (infd_pbtxt_parse(text, strlen(text), CFG_DESC, "config.pbtxt", &m, &err) ==
        INFD_STATUS_OK) {
        infd_pbtxt_free(m);
        return "";
    }
    if (m != NULL || err.code != INFD_STATUS_INVALID_ARGUMENT)
        return "bad failure contract";
    return err.msg;
}

static char *to_json(const ProtobufCMessage *m)
{
    char *s = NULL;
    size_t n = 0;
    if (infd_pbjson_write(m, &s, &n, NULL) != INFD_STATUS_OK)
        return NULL;
    if (strlen(s) != n) {
        infd_free(s);
        return NULL;
    }
    return s;
}

/* Packs `m` into a new buffer; *n receives its size. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *n)
{
    *n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = infd_malloc(*n + 1);
    if (buf)
        protobuf_c_message_pack(m, buf);
    return buf;
}

/* True when `a` and `b` pack to the same bytes. */
static int same_wire(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
    size_t na, nb;
    uint8_t *pa = pack(a, &na), *pb = pack(b, &nb);
    int same = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    infd_free(pa);
    infd_free(pb);
    return same;
}

/* ------------------------------------------------------------------------- */

static void test_simple(void)
{
    infd_error err = { 0 };
    Inference__ModelConfig *c = parse_cfg(k_simple, &err);
    ASSERT_STR_EQ(err.msg, "");
    ASSERT_TRUE(c != NULL);
    ASSERT_STR_EQ(c->name, "simple");
    ASSERT_STR_EQ(c->platform, "onnxruntime_onnx");
    ASSERT_STR_EQ(c->backend, "");
    ASSERT_EQ_INT(c->max_batch_size, 8);
    ASSERT_EQ_U64(c->n_input, 2);
    ASSERT_EQ_U64(c->n_output, 2);
    ASSERT_STR_EQ(c->input[1]->name, "INPUT1");
    ASSERT_EQ_INT(c->input[1]->data_type, INFERENCE__DATA_TYPE__TYPE_INT32);
    ASSERT_EQ_U64(c->input[1]->n_dims, 1);
    ASSERT_EQ_I64(c->input[1]->dims[0], 16);
    ASSERT_STR_EQ(c->output[0]->name, "OUTPUT0");
    ASSERT_TRUE(c->version_policy == NULL);
    ASSERT_EQ_INT(c->scheduling_choice_case, INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE__NOT_SET);

    char *json = to_json(&c->base);
    ASSERT_STR_EQ(
        json,
        "{\"name\":\"simple\",\"platform\":\"onnxruntime_onnx\",\"max_batch_size\":8,"
        "\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_INT32\",\"format\":\"FORMAT_NONE\","
        "\"dims\":[\"16\"],\"is_shape_tensor\":false,\"allow_ragged_batch\":false,\"optional\":"
        "false},"
        "{\"name\":\"INPUT1\",\"data_type\":\"TYPE_INT32\",\"format\":\"FORMAT_NONE\","
        "\"dims\":[\"16\"],\"is_shape_tensor\":false,\"allow_ragged_batch\":false,\"optional\":"
        "false}],"
        "\"output\":[{\"name\":\"OUTPUT0\",\"data_type\":\"TYPE_INT32\",\"dims\":[\"16\"],"
        "\"label_filename\":\"\",\"is_shape_tensor\":false},"
        "{\"name\":\"OUTPUT1\",\"data_type\":\"TYPE_INT32\",\"dims\":[\"16\"],"
        "\"label_filename\":\"\",\"is_shape_tensor\":false}],"
        "\"instance_group\":[],\"default_model_filename\":\"\",\"cc_model_filenames\":{},"
        "\"metric_tags\":{},\"parameters\":{},\"model_warmup\":[],\"backend\":\"\",\"runtime\":"
        "\"\"}");
    infd_free(json);
    infd_pbtxt_free(&c->base);
}

static void test_densenet(void)
{
    infd_error err = { 0 };
    Inference__ModelConfig *c = parse_cfg(k_densenet, &err);
    ASSERT_STR_EQ(err.msg, "");
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ_INT(c->max_batch_size, 0);
    Inference__ModelInput *in = c->input[0];
    ASSERT_EQ_INT(in->format, INFERENCE__MODEL_INPUT__FORMAT__FORMAT_NCHW);
    ASSERT_EQ_U64(in->n_dims, 3);
    ASSERT_EQ_I64(in->dims[2], 224);
    ASSERT_TRUE(in->reshape != NULL);
    ASSERT_EQ_U64(in->reshape->n_shape, 4);
    ASSERT_EQ_I64(in->reshape->shape[3], 224);
    ASSERT_STR_EQ(c->output[0]->label_filename, "densenet_labels.txt");
    ASSERT_EQ_I64(c->output[0]->reshape->shape[1], 1000);

    char *json = to_json(&c->output[0]->base);
    ASSERT_STR_EQ(
        json, "{\"name\":\"fc6_1\",\"data_type\":\"TYPE_FP32\",\"dims\":[\"1000\"],"
              "\"label_filename\":\"densenet_labels.txt\","
              "\"reshape\":{\"shape\":[\"1\",\"1000\",\"1\",\"1\"]},\"is_shape_tensor\":false}");
    infd_free(json);
    infd_pbtxt_free(&c->base);
}

static void test_full_config(void)
{
    infd_error err = { 0 };
    Inference__ModelConfig *c = parse_cfg(k_full, &err);
    ASSERT_STR_EQ(err.msg, "");
    ASSERT_TRUE(c != NULL);
    ASSERT_STR_EQ(c->name, "full");
    ASSERT_STR_EQ(c->backend, "onnxruntime");
    ASSERT_EQ_INT(c->max_batch_size, 16);

    ASSERT_EQ_INT(c->version_policy->policy_choice_case,
                  INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC);
    ASSERT_EQ_U64(c->version_policy->specific->n_versions, 2);
    ASSERT_EQ_I64(c->version_policy->specific->versions[1], 3);

    ASSERT_EQ_U64(c->n_input, 2);
    ASSERT_EQ_I64(c->input[0]->dims[0], -1);
    ASSERT_TRUE(c->input[0]->allow_ragged_batch);
    ASSERT_EQ_INT(c->input[1]->data_type, INFERENCE__DATA_TYPE__TYPE_FP32);
    ASSERT_EQ_U64(c->input[1]->n_dims, 2);
    ASSERT_EQ_I64(c->input[1]->dims[1], 16);

    ASSERT_EQ_INT(c->scheduling_choice_case,
                  INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING);
    Inference__ModelDynamicBatching *db = c->dynamic_batching;
    ASSERT_EQ_U64(db->n_preferred_batch_size, 2);
    ASSERT_EQ_INT(db->preferred_batch_size[1], 8);
    ASSERT_EQ_U64(db->max_queue_delay_microseconds, 100);
    ASSERT_TRUE(db->preserve_ordering);
    ASSERT_EQ_U64(db->priority_levels, 2);
    ASSERT_EQ_U64(db->default_priority_level, 1);
    ASSERT_EQ_U64(db->default_queue_policy->default_timeout_microseconds, 50000);
    ASSERT_TRUE(db->default_queue_policy->allow_timeout_override);
    ASSERT_EQ_U64(db->default_queue_policy->max_queue_size, 16);
    ASSERT_EQ_U64(db->n_priority_queue_policy, 2);
    ASSERT_EQ_U64(db->priority_queue_policy[0]->key, 1);
    ASSERT_EQ_INT(db->priority_queue_policy[0]->value->timeout_action,
                  INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__DELAY);
    ASSERT_EQ_U64(db->priority_queue_policy[1]->key, 2);
    ASSERT_EQ_U64(db->priority_queue_policy[1]->value->max_queue_size, 4);

    ASSERT_EQ_U64(c->n_instance_group, 2);
    ASSERT_EQ_INT(c->instance_group[0]->count, 2);
    ASSERT_EQ_INT(c->instance_group[0]->kind, INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU);
    ASSERT_EQ_U64(c->instance_group[1]->n_gpus, 2);
    ASSERT_EQ_INT(c->instance_group[1]->gpus[1], 1);

    ASSERT_EQ_U64(c->n_parameters, 2);
    ASSERT_STR_EQ(c->parameters[0]->key, "intra_op_thread_count");
    ASSERT_STR_EQ(c->parameters[0]->value->string_value, "1");
    ASSERT_STR_EQ(c->parameters[1]->value->string_value, "hello\n\t\"AA\xc3\xa9");

    ASSERT_EQ_U64(c->n_model_warmup, 1);
    Inference__ModelWarmup *w = c->model_warmup[0];
    ASSERT_EQ_U64(w->batch_size, 1);
    ASSERT_EQ_U64(w->count, 2);
    ASSERT_EQ_U64(w->n_inputs, 3);
    ASSERT_EQ_INT(w->inputs[0]->value->input_data_type_case,
                  INFERENCE__MODEL_WARMUP__INPUT__INPUT_DATA_TYPE_ZERO_DATA);
    ASSERT_TRUE(w->inputs[0]->value->zero_data);
    ASSERT_EQ_INT(w->inputs[1]->value->input_data_type_case,
                  INFERENCE__MODEL_WARMUP__INPUT__INPUT_DATA_TYPE_RANDOM_DATA);
    ASSERT_STR_EQ(w->inputs[2]->value->input_data_file, "raw");

    ASSERT_EQ_INT(c->optimization->priority,
                  INFERENCE__MODEL_OPTIMIZATION_POLICY__MODEL_PRIORITY__PRIORITY_MAX);
    ASSERT_EQ_INT(c->optimization->graph->level, -1);

    char *json = to_json(&c->dynamic_batching->base);
    ASSERT_STR_EQ(
        json,
        "{\"preferred_batch_size\":[4,8],\"max_queue_delay_microseconds\":\"100\","
        "\"preserve_ordering\":true,\"priority_levels\":\"2\",\"default_priority_level\":\"1\","
        "\"default_queue_policy\":{\"timeout_action\":\"REJECT\","
        "\"default_timeout_microseconds\":\"50000\",\"allow_timeout_override\":true,"
        "\"max_queue_size\":16},"
        "\"priority_queue_policy\":{\"1\":{\"timeout_action\":\"DELAY\","
        "\"default_timeout_microseconds\":\"1000\",\"allow_timeout_override\":false,"
        "\"max_queue_size\":0},"
        "\"2\":{\"timeout_action\":\"REJECT\",\"default_timeout_microseconds\":\"0\","
        "\"allow_timeout_override\":false,\"max_queue_size\":4}}}");
    infd_free(json);
    json = to_json(&c->model_warmup[0]->base);
    ASSERT_STR_EQ(
        json, "{\"name\":\"warm\",\"batch_size\":1,\"inputs\":{"
              "\"x\":{\"data_type\":\"TYPE_FP32\",\"dims\":[\"1\",\"3\"],\"zero_data\":true},"
              "\"y\":{\"data_type\":\"TYPE_FP32\",\"dims\":[\"4\"],\"random_data\":true},"
              "\"w\":{\"data_type\":\"TYPE_FP32\",\"dims\":[\"4\"],\"input_data_file\":\"raw\"}},"
              "\"count\":2}");
    infd_free(json);
    json = to_json(&c->base);
    ASSERT_STR_HAS(json, "\"version_policy\":{\"specific\":{\"versions\":[\"1\",\"3\"]}}");
    ASSERT_STR_HAS(json, "\"parameters\":{\"intra_op_thread_count\":{\"string_value\":\"1\"},"
                         "\"greeting\":{\"string_value\":\"hello\\n\\t\\\"AA\xc3\xa9\"}}");
    ASSERT_STR_HAS(json, "\"optimization\":{\"graph\":{\"level\":-1},\"priority\":\"PRIORITY_MAX\","
                         "\"gather_kernel_buffer_threshold\":0,\"eager_batching\":false}");
    ASSERT_FALSE(strstr(json, "sequence_batching") != NULL);
    infd_free(json);
    infd_pbtxt_free(&c->base);
}

/* Triton's config endpoint form: 64-bit integers as numbers, map keys as
 * strings. */
static void test_json_int64_as_number(void)
{
    Inference__ModelConfig *c = parse_cfg(k_full, NULL);
    ASSERT_TRUE(c != NULL);
    char *json = NULL;
    size_t n = 0;
    ASSERT_STATUS(infd_pbjson_write_flags(&c->base, INFD_PBJSON_INT64_AS_NUMBER, &json, &n, NULL),
                  INFD_STATUS_OK);
    ASSERT_EQ_U64(n, strlen(json));
    ASSERT_STR_HAS(json, "\"version_policy\":{\"specific\":{\"versions\":[1,3]}}");
    ASSERT_STR_HAS(json, "\"dims\":[-1,3]");
    ASSERT_STR_HAS(json, "\"max_queue_delay_microseconds\":100,");
    ASSERT_STR_HAS(json, "\"priority_levels\":2,\"default_priority_level\":1,");
    ASSERT_STR_HAS(json, "\"priority_queue_policy\":{\"1\":{\"timeout_action\":\"DELAY\","
                         "\"default_timeout_microseconds\":1000,");
    ASSERT_STR_HAS(json, "\"inputs\":{\"x\":{\"data_type\":\"TYPE_FP32\",\"dims\":[1,3],");
    ASSERT_FALSE(strchr(json, '\n') != NULL);
    infd_free(json);
    infd_pbtxt_free(&c->base);

    c = parse_cfg("sequence_batching { max_sequence_idle_microseconds: 18446744073709551615 }",
                  NULL);
    ASSERT_TRUE(c != NULL);
    ASSERT_STATUS(infd_pbjson_write_flags(&c->base, INFD_PBJSON_INT64_AS_NUMBER, &json, NULL, NULL),
                  INFD_STATUS_OK);
    ASSERT_STR_HAS(json, "\"max_sequence_idle_microseconds\":18446744073709551615,");
    infd_free(json);
    infd_pbtxt_free(&c->base);
}

static void test_version_policy_latest_and_all(void)
{
    Inference__ModelConfig *c = parse_cfg("version_policy: { latest: { num_versions: 2 } }", NULL);
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ_INT(c->version_policy->policy_choice_case,
                  INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST);
    ASSERT_EQ_U64(c->version_policy->latest->num_versions, 2);
    char *json = to_json(&c->version_policy->base);
    ASSERT_STR_EQ(json, "{\"latest\":{\"num_versions\":2}}");
    infd_free(json);
    infd_pbtxt_free(&c->base);

    c = parse_cfg("version_policy { all {} }", NULL);
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ_INT(c->version_policy->policy_choice_case,
                  INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL);
    json = to_json(&c->version_policy->base);
    ASSERT_STR_EQ(json, "{\"all\":{}}");
    infd_free(json);
    infd_pbtxt_free(&c->base);
}

/* Scalars of every kind and the lexical corners of the grammar. */
static void test_grammar(void)
{
    static const char text[] =
        "sequence_batching {\n"
        "  max_sequence_idle_microseconds: 18446744073709551615  # UINT64_MAX\n"
        "  direct { max_queue_delay_microseconds: 0x7f minimum_slot_utilization: .5f }\n"
        "  control_input [{\n"
        "    name: \"START\"\n"
        "    control [{\n"
        "      kind: CONTROL_SEQUENCE_START\n"
        "      int32_false_true: [ 0, -2147483648, 2147483647, 010, -0x10 ]\n"
        "      fp32_false_true: [ 0, 1.5e1, -inf, 1F, 2.5E-1, Infinity, -1e39, 3 ]\n"
        "      fp32_false_true: nan\n"
        "      bool_false_true: [ true, False, t, f, 1, 0, True, false ]\n"
        "      data_type: 8;\n"
        "    }]\n"
        "  }]\n"
        "  state { input_name: \"\" \"\" output_name: \"a\" 'b'\n"
        "          \"c\" dims: [] }\n"
        "}";
    infd_error err = { 0 };
    Inference__ModelConfig *c = parse_cfg(text, &err);
    ASSERT_STR_EQ(err.msg, "");
    ASSERT_TRUE(c != NULL);
    Inference__ModelSequenceBatching *sb = c->sequence_batching;
    ASSERT_EQ_INT(c->scheduling_choice_case,
                  INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_SEQUENCE_BATCHING);
    ASSERT_EQ_U64(sb->max_sequence_idle_microseconds, UINT64_MAX);
    ASSERT_EQ_INT(sb->strategy_choice_case,
                  INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_DIRECT);
    ASSERT_EQ_U64(sb->direct->max_queue_delay_microseconds, 127);
    ASSERT_TRUE(sb->direct->minimum_slot_utilization == 0.5f);
    Inference__ModelSequenceBatching__Control *ctl = sb->control_input[0]->control[0];
    ASSERT_EQ_U64(ctl->n_int32_false_true, 5);
    ASSERT_EQ_INT(ctl->int32_false_true[1], INT32_MIN);
    ASSERT_EQ_INT(ctl->int32_false_true[2], INT32_MAX);
    ASSERT_EQ_INT(ctl->int32_false_true[3], 8);
    ASSERT_EQ_INT(ctl->int32_false_true[4], -16);
    ASSERT_EQ_U64(ctl->n_fp32_false_true, 9);
    ASSERT_TRUE(ctl->fp32_false_true[1] == 15.0f);
    ASSERT_TRUE(isinf(ctl->fp32_false_true[2]) && ctl->fp32_false_true[2] < 0);
    ASSERT_TRUE(ctl->fp32_false_true[3] == 1.0f);
    ASSERT_TRUE(ctl->fp32_false_true[4] == 0.25f);
    ASSERT_TRUE(isinf(ctl->fp32_false_true[5]) && ctl->fp32_false_true[5] > 0);
    ASSERT_TRUE(isinf(ctl->fp32_false_true[6]) && ctl->fp32_false_true[6] < 0); /* below -FLT_MAX */
    ASSERT_TRUE(ctl->fp32_false_true[7] == 3.0f);
    ASSERT_TRUE(isnan(ctl->fp32_false_true[8]));
    ASSERT_EQ_U64(ctl->n_bool_false_true, 8);
    static const int bools[8] = { 1, 0, 1, 0, 1, 0, 1, 0 };
    for (int i = 0; i < 8; i++)
        ASSERT_EQ_INT(ctl->bool_false_true[i], bools[i]);
    ASSERT_EQ_INT(ctl->data_type, INFERENCE__DATA_TYPE__TYPE_INT32);
    ASSERT_STR_EQ(sb->state[0]->input_name, "");
    ASSERT_STR_EQ(sb->state[0]->output_name, "abc");
    ASSERT_EQ_U64(sb->state[0]->n_dims, 0);

    char *json = to_json(&ctl->base);
    ASSERT_STR_EQ(
        json,
        "{\"kind\":\"CONTROL_SEQUENCE_START\",\"int32_false_true\":[0,-2147483648,2147483647,8,-16]"
        ","
        "\"fp32_false_true\":[0,15,\"-Infinity\",1,0.25,\"Infinity\",\"-Infinity\",3,\"NaN\"],"
        "\"data_type\":\"TYPE_INT32\","
        "\"bool_false_true\":[true,false,true,false,true,false,true,false]}");
    infd_free(json);
    infd_pbtxt_free(&c->base);

    /* Empty text, comments only, a byte order mark: all an empty message. */
    c = parse_cfg("", NULL);
    ASSERT_TRUE(c != NULL);
    infd_pbtxt_free(&c->base);
    c = parse_cfg("# nothing\n   # here\n", NULL);
    ASSERT_TRUE(c != NULL);
    infd_pbtxt_free(&c->base);
    c = parse_cfg("\xef\xbb\xbfname: \"bom\"", NULL);
    ASSERT_TRUE(c != NULL);
    ASSERT_STR_EQ(c->name, "bom");
    infd_pbtxt_free(&c->base);
}

/* Each error class with its exact message. */
static void test_errors(void)
{
    /* Unknown field, with a suggestion when one is close. */
    ASSERT_STR_EQ(
        cfg_error(
            "name: \"a\"\ninput [\n  { name: \"x\" },\n  { name: \"y\"\n    dimz: [ 1 ] }\n]"),
        "config.pbtxt:5:5: input[1]: ModelInput has no field \"dimz\" (did you mean \"dims\"?)");
    ASSERT_STR_EQ(cfg_error("bogus_field: 1"),
                  "config.pbtxt:1:1: ModelConfig has no field \"bogus_field\"");
    ASSERT_STR_EQ(
        cfg_error("version_policy { latest { versions: 1 } }"),
        "config.pbtxt:1:27: version_policy.latest: ModelVersionPolicy.Latest has no field "
        "\"versions\"");
    /* Integer ranges. */
    ASSERT_STR_EQ(
        cfg_error("max_batch_size: 2147483648"),
        "config.pbtxt:1:17: max_batch_size: expected an int32, found 2147483648 (out of range)");
    ASSERT_STR_EQ(
        cfg_error("max_batch_size: -2147483649"),
        "config.pbtxt:1:17: max_batch_size: expected an int32, found -2147483649 (out of range)");
    ASSERT_STR_EQ(
        cfg_error("dynamic_batching { max_queue_delay_microseconds: -1 }"),
        "config.pbtxt:1:50: dynamic_batching.max_queue_delay_microseconds: expected a uint64, "
        "found -1 (negative)");
    ASSERT_STR_EQ(
        cfg_error("model_warmup { batch_size: 4294967296 }"),
        "config.pbtxt:1:28: model_warmup[0].batch_size: expected a uint32, found 4294967296 (out "
        "of range)");
    ASSERT_STR_EQ(
        cfg_error("input { dims: 99999999999999999999 }"),
        "config.pbtxt:1:15: input[0].dims: expected an int64, found 99999999999999999999 (not a "
        "valid integer or out of range)");
    ASSERT_STR_EQ(
        cfg_error("input { dims: 09 }"),
        "config.pbtxt:1:15: input[0].dims: expected an int64, found 09 (not a valid integer or "
        "out of range)");
    /* Wrong kinds of value. */
    ASSERT_STR_EQ(cfg_error("max_batch_size: \"8\""),
                  "config.pbtxt:1:17: max_batch_size: expected an int32, found \"8\"");
    ASSERT_STR_EQ(cfg_error("max_batch_size: 1.5"),
                  "config.pbtxt:1:17: max_batch_size: expected an int32, found 1.5");
    ASSERT_STR_EQ(cfg_error("name: 5"),
                  "config.pbtxt:1:7: name: expected a quoted string, found 5");
    ASSERT_STR_EQ(
        cfg_error("input { allow_ragged_batch: 2 }"),
        "config.pbtxt:1:29: input[0].allow_ragged_batch: expected a bool (true or false), found 2");
    ASSERT_STR_EQ(
        cfg_error("input { reshape: 5 }"),
        "config.pbtxt:1:18: input[0].reshape: expected '{' to open a ModelTensorReshape, found 5");
    ASSERT_STR_EQ(
        cfg_error("input { data_type: TYPE_FLOAT32 }"),
        "config.pbtxt:1:20: input[0].data_type: expected a DataType value (TYPE_INVALID, "
        "TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, "
        "TYPE_INT32, TYPE_INT64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_STRING, TYPE_BF16), "
        "found TYPE_FLOAT32");
    ASSERT_STR_EQ(
        cfg_error("instance_group { kind: 7 }"),
        "config.pbtxt:1:24: instance_group[0].kind: expected a Kind value (KIND_AUTO, KIND_GPU, "
        "KIND_CPU, KIND_MODEL), found 7");
    /* Duplicates and oneofs. */
    ASSERT_STR_EQ(cfg_error("name: \"a\"\nname: \"b\""),
                  "config.pbtxt:2:1: name: field given twice (first at 1:1)");
    ASSERT_STR_EQ(cfg_error("dynamic_batching { }\n  sequence_batching { }"),
                  "config.pbtxt:2:3: sequence_batching: only one of a oneof may be set, and "
                  "\"dynamic_batching\" already is (at 1:1)");
    ASSERT_STR_EQ(
        cfg_error("model_warmup { inputs { key: \"a\" value { zero_data: true random_data: "
                  "false } } }"),
        "config.pbtxt:1:58: model_warmup[0].inputs[0].value.random_data: only one of a oneof "
        "may be set, and \"zero_data\" already is (at 1:42)");
    ASSERT_STR_EQ(cfg_error("version_policy { latest {} latest {} }"),
                  "config.pbtxt:1:28: version_policy.latest: field given twice (first at 1:18)");
    ASSERT_STR_EQ(cfg_error("parameters { key: \"a\" value { } }\nparameters { key: \"a\" }"),
                  "config.pbtxt:2:12: parameters[1]: duplicate map key \"a\" (entry 0 has it too)");
    ASSERT_STR_EQ(
        cfg_error("dynamic_batching { priority_queue_policy { key: 3 } "
                  "priority_queue_policy { key: 3 } }"),
        "config.pbtxt:1:75: dynamic_batching.priority_queue_policy[1]: duplicate map key 3 "
        "(entry 0 has it too)");
    /* Syntax. */
    ASSERT_STR_EQ(cfg_error("name \"x\""),
                  "config.pbtxt:1:6: name: expected ':' after the field name, found \"x\"");
    ASSERT_STR_EQ(
        cfg_error("max_batch_size: [ 1 ]"),
        "config.pbtxt:1:17: max_batch_size: field is not repeated, so a list '[' is not allowed");
    ASSERT_STR_EQ(cfg_error("input { dims: [ 1, ] }"),
                  "config.pbtxt:1:20: input[0].dims: expected an int64, found ']'");
    ASSERT_STR_EQ(cfg_error("input { dims: [ 1 2 ] }"),
                  "config.pbtxt:1:19: input[0].dims: expected ',' or ']' in list, found 2");
    ASSERT_STR_EQ(
        cfg_error("input {\n  name: \"a\"\n"),
        "config.pbtxt:3:1: input[0]: expected a field name or '}' closing the '{' at 1:7, found "
        "end of file");
    ASSERT_STR_EQ(cfg_error("input < name: \"a\" }"),
                  "config.pbtxt:1:19: input[0]: expected a field name or '>', found '}'");
    ASSERT_STR_EQ(cfg_error("}"), "config.pbtxt:1:1: expected a field name, found '}'");
    ASSERT_STR_EQ(cfg_error("[ext.field]: 1"),
                  "config.pbtxt:1:1: extension and Any fields ('[') are not supported");
    ASSERT_STR_EQ(cfg_error("name: \"abc"),
                  "config.pbtxt:1:7: string not closed before the end of the file");
    ASSERT_STR_EQ(cfg_error("name: 'abc\n'"),
                  "config.pbtxt:1:7: string not closed before the end of the line");
    ASSERT_STR_EQ(cfg_error("name: \"a\\qb\""),
                  "config.pbtxt:1:9: name: unknown escape \\q in string");
    ASSERT_STR_EQ(cfg_error("name: \"\\x\""),
                  "config.pbtxt:1:8: name: \\x escape without hex digits");
    ASSERT_STR_EQ(cfg_error("name: \"\\u12\""),
                  "config.pbtxt:1:8: name: \\u escape needs 4 hex digits");
    ASSERT_STR_EQ(cfg_error("name: \"\\ud800\""),
                  "config.pbtxt:1:8: name: \\u escape U+D800 is not a Unicode scalar value");
    ASSERT_STR_EQ(cfg_error("name: \"\\777\""),
                  "config.pbtxt:1:8: name: octal escape \\777 is above \\377");
    ASSERT_STR_EQ(
        cfg_error("name: \"a\\xff\""),
        "config.pbtxt:1:7: name: string is not valid UTF-8 (byte 0xff at offset 1); use a bytes "
        "field for binary data");
    ASSERT_STR_EQ(cfg_error("name: \"a\\0\""),
                  "config.pbtxt:1:7: name: string contains a NUL byte");
    ASSERT_STR_EQ(cfg_error("max_batch_size: 12abc"), "config.pbtxt:1:17: malformed number 12abc");
    ASSERT_STR_EQ(cfg_error("max_batch_size: 1.2.3"), "config.pbtxt:1:17: malformed number 1.2.3");
    ASSERT_STR_EQ(cfg_error("name: @"), "config.pbtxt:1:7: unexpected character '@'");

    /* A NUL byte inside the text (not NUL-terminated input). */
    static const char nul[] = "name: \"a\"\n\0";
    ProtobufCMessage *m = NULL;
    infd_error err = { 0 };
    ASSERT_STATUS(infd_pbtxt_parse(nul, sizeof(nul) - 1, CFG_DESC, "c", &m, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_EQ(err.msg, "c:2:1: unexpected byte 0x00");
    ASSERT_TRUE(m == NULL);

    /* Too large. */
    size_t big = INFD_PBTXT_MAX_BYTES + 1;
    char *text = infd_malloc(big);
    ASSERT_TRUE(text != NULL);
    memset(text, ' ', big);
    ASSERT_STATUS(infd_pbtxt_parse(text, big, CFG_DESC, NULL, &m, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    infd_free(text);
    ASSERT_STR_EQ(err.msg, "<text>: 1048577 bytes, more than the 1048576 a text message may have");
}

/* Nesting beyond INFD_PBTXT_MAX_DEPTH, through a recursive proto2 type
 * (GraphProto -> NodeProto -> AttributeProto -> GraphProto). */
static void test_depth_limit(void)
{
    char text[4096];
    size_t o = 0;
    infd_error err = { 0 };
    ProtobufCMessage *m = NULL;
    /* 21 levels of node/attribute/g = 63 messages below the root: fits. */
    for (int levels = 21; levels <= 22; levels++) {
        o = 0;
        for (int i = 0; i < levels; i++)
            o += (size_t)snprintf(text + o, sizeof(text) - o, "node { attribute { g { ");
        for (int i = 0; i < levels; i++)
            o += (size_t)snprintf(text + o, sizeof(text) - o, "} } } ");
        infd_status st =
            infd_pbtxt_parse(text, o, &onnx__graph_proto__descriptor, "g.pbtxt", &m, &err);
        if (levels == 21) {
            ASSERT_STATUS(st, INFD_STATUS_OK);
            char *back = NULL;
            ASSERT_STATUS(infd_pbtxt_write(m, &back, NULL, NULL), INFD_STATUS_OK);
            infd_free(back);
            infd_pbtxt_free(m);
        } else {
            ASSERT_STATUS(st, INFD_STATUS_INVALID_ARGUMENT);
            ASSERT_STR_HAS(err.msg, "g.pbtxt:1:501: node[0].attribute[0].g.node[0]");
            ASSERT_STR_HAS(err.msg, ": messages nested deeper than 64 levels");
        }
    }
}

/* proto2 (has_ flags, optional strings, bytes, oneof of scalars) through a
 * type with every shape: onnx's ModelProto. */
static void test_proto2(void)
{
    static const char text[] =
        "ir_version: 8\n"
        "producer_name: \"infd\"\n"
        "opset_import { domain: \"\" version: 17 }\n"
        "graph {\n"
        "  name: \"g\"\n"
        "  node { op_type: \"Relu\" input: [\"x\"] output: \"y\"\n"
        "         attribute { name: \"s\" s: \"\\000\\377bin\" type: STRING }\n"
        "         attribute { name: \"f\" f: 0.1 floats: [1, 2.5] } }\n"
        "  input { name: \"x\" type { tensor_type { elem_type: 1 shape {\n"
        "    dim { dim_param: \"N\" } dim { dim_value: 3 } } } } }\n"
        "}\n";
    infd_error err = { 0 };
    ProtobufCMessage *m = NULL;
    ASSERT_STATUS(
        infd_pbtxt_parse(text, strlen(text), &onnx__model_proto__descriptor, "m", &m, &err),
        INFD_STATUS_OK);
    Onnx__ModelProto *mp = (Onnx__ModelProto *)m;
    ASSERT_TRUE(mp->has_ir_version);
    ASSERT_EQ_I64(mp->ir_version, 8);
    ASSERT_FALSE(mp->has_model_version);
    ASSERT_TRUE(mp->domain == NULL);
    ASSERT_STR_EQ(mp->producer_name, "infd");
    ASSERT_TRUE(mp->opset_import[0]->has_version);
    Onnx__AttributeProto *a = mp->graph->node[0]->attribute[0];
    ASSERT_TRUE(a->has_s);
    ASSERT_EQ_U64(a->s.len, 5);
    ASSERT_TRUE(memcmp(a->s.data, "\0\377bin", 5) == 0);
    ASSERT_TRUE(a->has_type);
    ASSERT_TRUE(mp->graph->node[0]->attribute[1]->f == 0.1f);
    Onnx__TensorShapeProto *shape = mp->graph->input[0]->type->tensor_type->shape;
    ASSERT_EQ_INT(shape->dim[0]->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
    ASSERT_STR_EQ(shape->dim[0]->dim_param, "N");
    ASSERT_EQ_INT(shape->dim[1]->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE);
    ASSERT_EQ_I64(shape->dim[1]->dim_value, 3);

    /* Wire round trip: pack, unpack with our allocator, pack again. */
    size_t n;
    uint8_t *wire = pack(m, &n);
    ProtobufCMessage *u =
        protobuf_c_message_unpack(&onnx__model_proto__descriptor, infd_pbtxt_allocator(), n, wire);
    infd_free(wire);
    ASSERT_TRUE(u != NULL);
    ASSERT_TRUE(same_wire(m, u));
    infd_pbtxt_free(u);

    /* Text round trip. */
    char *back = NULL;
    ASSERT_STATUS(infd_pbtxt_write(m, &back, NULL, &err), INFD_STATUS_OK);
    ASSERT_STR_HAS(back, "s: \"\\000\\377bin\"\n");
    ASSERT_STR_HAS(back, "      f: 0.1\n");
    ProtobufCMessage *m2 = NULL;
    ASSERT_STATUS(
        infd_pbtxt_parse(back, strlen(back), &onnx__model_proto__descriptor, "m", &m2, &err),
        INFD_STATUS_OK);
    ASSERT_TRUE(same_wire(m, m2));
    infd_free(back);
    infd_pbtxt_free(m2);

    /* JSON: proto2 optional fields appear only when set; bytes are base64. */
    char *json = to_json(&mp->graph->node[0]->attribute[0]->base);
    ASSERT_STR_EQ(json,
                  "{\"name\":\"s\",\"s\":\"AP9iaW4=\",\"floats\":[],\"ints\":[],\"strings\":[],"
                  "\"tensors\":[],\"graphs\":[],\"type\":\"STRING\"}");
    infd_free(json);
    infd_pbtxt_free(m);
}

/* text -> message -> pack -> unpack equals; text -> message -> text ->
 * message equals, for every config above. */
static void test_round_trips(void)
{
    const char *texts[] = { k_simple, k_densenet, k_full };
    for (size_t i = 0; i < INFD_ARRAY_SIZE(texts); i++) {
        Inference__ModelConfig *c = parse_cfg(texts[i], NULL);
        ASSERT_TRUE(c != NULL);
        size_t n;
        uint8_t *wire = pack(&c->base, &n);
        ASSERT_TRUE(wire != NULL);
        Inference__ModelConfig *u =
            inference__model_config__unpack(infd_pbtxt_allocator(), n, wire);
        infd_free(wire);
        ASSERT_TRUE(u != NULL);
        ASSERT_TRUE(same_wire(&c->base, &u->base));
        char *j1 = to_json(&c->base), *j2 = to_json(&u->base);
        ASSERT_STR_EQ(j1, j2);
        infd_free(j2);

        char *text = NULL;
        size_t tn = 0;
        ASSERT_STATUS(infd_pbtxt_write(&c->base, &text, &tn, NULL), INFD_STATUS_OK);
        ASSERT_EQ_U64(tn, strlen(text));
        Inference__ModelConfig *t = parse_cfg(text, NULL);
        ASSERT_TRUE(t != NULL);
        ASSERT_TRUE(same_wire(&c->base, &t->base));
        char *j3 = to_json(&t->base);
        ASSERT_STR_EQ(j1, j3);
        infd_free(j1);
        infd_free(j3);
        infd_free(text);
        infd_pbtxt_free(&t->base);
        infd_pbtxt_free(&u->base);
        infd_pbtxt_free(&c->base);
    }

    /* The printed form itself. */
    Inference__ModelConfig *c = parse_cfg(k_densenet, NULL);
    ASSERT_TRUE(c != NULL);
    char *text = NULL;
    ASSERT_STATUS(infd_pbtxt_write(&c->base, &text, NULL, NULL), INFD_STATUS_OK);
    ASSERT_STR_EQ(text, "name: \"densenet_onnx\"\n"
                        "platform: \"onnxruntime_onnx\"\n"
                        "input {\n"
                        "  name: \"data_0\"\n"
                        "  data_type: TYPE_FP32\n"
                        "  format: FORMAT_NCHW\n"
                        "  dims: 3\n"
                        "  dims: 224\n"
                        "  dims: 224\n"
                        "  reshape {\n"
                        "    shape: 1\n"
                        "    shape: 3\n"
                        "    shape: 224\n"
                        "    shape: 224\n"
                        "  }\n"
                        "}\n"
                        "output {\n"
                        "  name: \"fc6_1\"\n"
                        "  data_type: TYPE_FP32\n"
                        "  dims: 1000\n"
                        "  label_filename: \"densenet_labels.txt\"\n"
                        "  reshape {\n"
                        "    shape: 1\n"
                        "    shape: 1000\n"
                        "    shape: 1\n"
                        "    shape: 1\n"
                        "  }\n"
                        "}\n");
    infd_free(text);
    infd_pbtxt_free(&c->base);
}

static void test_real_format(void)
{
    char buf[32];
    infd_pbtxt_format_real(0.1f, 1, buf);
    ASSERT_STR_EQ(buf, "0.1");
    infd_pbtxt_format_real(0.1, 0, buf);
    ASSERT_STR_EQ(buf, "0.1");
    infd_pbtxt_format_real(1.0 / 3.0, 0, buf);
    ASSERT_STR_EQ(buf, "0.3333333333333333");
    infd_pbtxt_format_real(FLT_MAX, 1, buf);
    ASSERT_STR_EQ(buf, "3.4028235e+38");
    infd_pbtxt_format_real(-0.0, 0, buf);
    ASSERT_STR_EQ(buf, "-0");
    infd_pbtxt_format_real(-INFINITY, 1, buf);
    ASSERT_STR_EQ(buf, "-inf");
}

/* Every prefix and a few thousand byte mutations of a real config: each
 * parses or fails with a message; whatever parses also writes. */
static void test_hostile_text(void)
{
    size_t n = strlen(k_full);
    char *text = infd_malloc(n);
    ASSERT_TRUE(text != NULL);
    uint64_t rng = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n + 3000; i++) {
        size_t len = n;
        memcpy(text, k_full, n);
        if (i <= n) {
            len = i;
        } else {
            for (int k = 0; k < 3; k++) {
                rng = rng * 6364136223846793005u + 1442695040888963407u;
                size_t at = (size_t)(rng >> 33) % n;
                text[at] = (char)(rng >> 17);
            }
        }
        ProtobufCMessage *m = NULL;
        infd_error err = { 0 };
        infd_status st = infd_pbtxt_parse(text, len, CFG_DESC, "h", &m, &err);
        if (st != INFD_STATUS_OK) {
            ASSERT_TRUE(m == NULL);
            ASSERT_TRUE(strncmp(err.msg, "h:", 2) == 0);
            continue;
        }
        char *out = NULL;
        if (infd_pbjson_write(m, &out, NULL, &err) == INFD_STATUS_OK)
            infd_free(out);
        ASSERT_STATUS(infd_pbtxt_write(m, &out, NULL, &err), INFD_STATUS_OK);
        infd_free(out);
        infd_pbtxt_free(m);
    }
    infd_free(text);
}

static int64_t live_allocs(void)
{
    infd_alloc_stats s = infd_alloc_get_stats();
    return (int64_t)(s.n_allocs - s.n_frees);
}

/* Failing the n-th allocation for n = 1, 2, ... until the call succeeds:
 * each failure is a clean OUT_OF_MEMORY that leaks nothing. */
static void test_fault_injection(void)
{
    int parse_steps = 0, json_steps = 0, text_steps = 0;
    for (int64_t n = 1;; n++) {
        int64_t before = live_allocs();
        ProtobufCMessage *m = NULL;
        infd_error err = { 0 };
        infd_alloc_fail_after(n);
        infd_status st =
            infd_pbtxt_parse(k_full, strlen(k_full), CFG_DESC, "config.pbtxt", &m, &err);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (!fired) {
            ASSERT_STATUS(st, INFD_STATUS_OK);
            infd_pbtxt_free(m);
            ASSERT_EQ_I64(live_allocs(), before);
            break;
        }
        ASSERT_STATUS(st, INFD_STATUS_OUT_OF_MEMORY);
        ASSERT_TRUE(m == NULL);
        ASSERT_STR_HAS(err.msg, "out of memory");
        ASSERT_TRUE(strncmp(err.msg, "config.pbtxt:", 13) == 0);
        ASSERT_EQ_I64(live_allocs(), before);
        parse_steps++;
    }
    ASSERT_TRUE(parse_steps > 50);

    ProtobufCMessage *m = NULL;
    ASSERT_STATUS(infd_pbtxt_parse(k_full, strlen(k_full), CFG_DESC, NULL, &m, NULL),
                  INFD_STATUS_OK);
    for (int which = 0; which < 2; which++) {
        for (int64_t n = 1;; n++) {
            int64_t before = live_allocs();
            char *out = NULL;
            infd_error err = { 0 };
            infd_alloc_fail_after(n);
            infd_status st = which ? infd_pbtxt_write(m, &out, NULL, &err)
                                   : infd_pbjson_write(m, &out, NULL, &err);
            int fired = infd_alloc_injected_fired();
            infd_alloc_fail_after(0);
            if (!fired) {
                ASSERT_STATUS(st, INFD_STATUS_OK);
                infd_free(out);
                ASSERT_EQ_I64(live_allocs(), before);
                break;
            }
            ASSERT_STATUS(st, INFD_STATUS_OUT_OF_MEMORY);
            ASSERT_TRUE(out == NULL);
            ASSERT_EQ_I64(live_allocs(), before);
            *(which ? &text_steps : &json_steps) += 1;
        }
    }
    ASSERT_TRUE(json_steps > 0 && text_steps > 0);
    infd_pbtxt_free(m);
}

TEST_MAIN(test_simple, test_densenet, test_full_config, test_json_int64_as_number,
          test_version_policy_latest_and_all, test_grammar, test_errors, test_depth_limit,
          test_proto2, test_round_trips, test_real_format, test_hostile_text, test_fault_injection)
