/*
 * test_plan_file.c - plan files (src/graph/planfile.c): build, write, load,
 * refuse.
 *
 * The CPU backend writes no tuning records, so the record path is tested
 * with hand-made files (infd_planfile_encode) whose records the CPU
 * kernels ignore, and the reader with every truncation and many byte
 * flips (this runs under ASan + UBSan in CI: a crash or an overread fails
 * it).
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/strbuf.h"
#include "graph/backend.h"
#include "graph/planfile.h"
#include "infd/engine.h"
#include "onnx_model.h"
#include "test.h"

static char dir[256], onnx_path[512], plan_path[512];

/* A model with a symbolic batch: OUT0 = A + B, OUT1 = A - B, [batch, 16]. */
static void setup(void)
{
    static const onnx_model_spec spec = {
        .graph_name = "addsub",
        .rows = 0,
        .width = 16,
        .inputs = { "A", "B" },
        .outputs = { "OUT0", "OUT1" },
        .nodes = { { "Add", "add0", { "A", "B" }, "OUT0" },
                   { "Sub", "sub0", { "A", "B" }, "OUT1" } },
    };
    if (dir[0])
        return;
    snprintf(dir, sizeof(dir), "/tmp/infd_test_plan_file_%d", (int)getpid());
    mkdir(dir, 0755);
    if (!onnx_model_add(dir, "m", &spec, NULL))
        abort();
    snprintf(onnx_path, sizeof(onnx_path), "%s/m/1/model.onnx", dir);
    snprintf(plan_path, sizeof(plan_path), "%s/m.plan", dir);
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc((size_t)sz + 1);
    if (d && fread(d, 1, (size_t)sz, f) != (size_t)sz) {
        free(d);
        d = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return d;
}

/* Builds plan_path for --max-batch 5 (1, 2, 4, 5). */
static infd_status build_plan_file(infd_error *err)
{
    infd_plan_builder *b = NULL;
    int64_t sizes[8];
    int n = infd_plan_batch_sizes(5, sizes, 8);
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.n_threads = 1;
    infd_status st = infd_plan_builder_create(onnx_path, &o, &b, err);
    for (int i = 0; i < n && st == INFD_STATUS_OK; i++) {
        infd_plan_stats stats;
        st = infd_plan_builder_add(b, sizes[i], &stats, err);
        if (st == INFD_STATUS_OK && (stats.n_tuned != 0 || stats.n_kernels != 2))
            st = INFD_STATUS_INTERNAL;
    }
    if (st == INFD_STATUS_OK)
        st = infd_plan_builder_write(b, plan_path, err);
    infd_plan_builder_destroy(b);
    return st;
}

/* Runs `plan` on inputs filled from `seed`; outputs into out0/out1. */
static infd_status run_plan(infd_plan *plan, int64_t batch, float *out0, float *out1,
                            infd_error *err)
{
    static float a[64 * 16], b[64 * 16];
    for (int i = 0; i < batch * 16; i++) {
        a[i] = (float)i * 0.25f - 3.0f;
        b[i] = (float)(i % 7) * 1.5f;
    }
    infd_tensor in[2], out[2];
    int64_t dims[2] = { batch, 16 };
    size_t nb = (size_t)batch * 16 * sizeof(float);
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    for (int i = 0; i < 2; i++) {
        infd_shape_init(&in[i].shape, 2, dims, NULL);
        in[i].dtype = INFD_DTYPE_FP32;
        in[i].nbytes = nb;
        out[i].nbytes = nb;
    }
    in[0].data = a;
    in[1].data = b;
    out[0].data = out0;
    out[1].data = out1;
    infd_context *ctx = NULL;
    infd_status st = infd_context_create(plan, &ctx, err);
    if (st == INFD_STATUS_OK)
        st = infd_plan_run(plan, ctx, in, 2, out, 2, err);
    infd_context_destroy(ctx);
    return st;
}

static void test_batch_sizes(void)
{
    int64_t s[8];
    ASSERT_EQ_INT(infd_plan_batch_sizes(1, s, 8), 1);
    ASSERT_EQ_I64(s[0], 1);
    ASSERT_EQ_INT(infd_plan_batch_sizes(8, s, 8), 4);
    ASSERT_EQ_I64(s[3], 8);
    ASSERT_EQ_INT(infd_plan_batch_sizes(6, s, 8), 4);
    ASSERT_EQ_I64(s[2], 4);
    ASSERT_EQ_I64(s[3], 6);
    ASSERT_EQ_INT(infd_plan_batch_sizes(0, s, 8), 0);
    ASSERT_EQ_INT(infd_plan_batch_sizes(1000, s, 2), 11); /* 1..512, then 1000 */
}

/* The plan file runs bit-identically to the ONNX model, for every batch. */
static void test_same_outputs(void)
{
    infd_error err = { 0 };
    setup();
    ASSERT_STATUS(build_plan_file(&err), INFD_STATUS_OK);
    ASSERT_TRUE(infd_plan_file_is(plan_path));
    ASSERT_FALSE(infd_plan_file_is(onnx_path));
    static const int64_t batches[] = { 1, 2, 4, 5 };
    for (int k = 0; k < 4; k++) {
        static float o0[2][64 * 16], o1[2][64 * 16];
        infd_plan_options o;
        infd_plan_options_init(&o);
        o.batch = batches[k];
        o.n_threads = 1;
        infd_plan *from_onnx = NULL, *from_plan = NULL;
        ASSERT_STATUS(infd_plan_create(onnx_path, &o, &from_onnx, &err), INFD_STATUS_OK);
        ASSERT_STATUS(infd_plan_create(plan_path, &o, &from_plan, &err), INFD_STATUS_OK);
        ASSERT_STATUS(run_plan(from_onnx, batches[k], o0[0], o1[0], &err), INFD_STATUS_OK);
        ASSERT_STATUS(run_plan(from_plan, batches[k], o0[1], o1[1], &err), INFD_STATUS_OK);
        size_t nb = (size_t)batches[k] * 16 * sizeof(float);
        ASSERT_TRUE(memcmp(o0[0], o0[1], nb) == 0);
        ASSERT_TRUE(memcmp(o1[0], o1[1], nb) == 0);
        infd_plan_stats stats;
        infd_plan_get_stats(from_plan, &stats);
        ASSERT_EQ_INT(stats.n_tuned, 0);
        ASSERT_EQ_INT(stats.n_from_cache, 0);
        infd_tensor_info info;
        ASSERT_STATUS(infd_plan_input(from_plan, 0, &info), INFD_STATUS_OK);
        ASSERT_EQ_I64(info.shape.dims[0], batches[k]);
        infd_plan_destroy(from_onnx);
        infd_plan_destroy(from_plan);
    }
    /* Batch 0 (the default) is the smallest built. */
    infd_plan *p = NULL;
    ASSERT_STATUS(infd_plan_create(plan_path, NULL, &p, &err), INFD_STATUS_OK);
    infd_tensor_info info;
    infd_plan_input(p, 0, &info);
    ASSERT_EQ_I64(info.shape.dims[0], 1);
    infd_plan_destroy(p);
    /* No temporary file is left behind. */
    DIR *d = opendir(dir);
    ASSERT_TRUE(d != NULL);
    struct dirent *e;
    int tmp = 0;
    while ((e = readdir(d)))
        tmp += strstr(e->d_name, ".tmp") != NULL;
    closedir(d);
    ASSERT_EQ_INT(tmp, 0);
}

static void test_info(void)
{
    infd_error err = { 0 };
    infd_plan_file_info info;
    setup();
    ASSERT_STATUS(build_plan_file(&err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_file_read_info(plan_path, &info, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(info.infd_version, infd_version());
    ASSERT_STR_EQ(info.backend, "cpu");
    ASSERT_STR_EQ(info.model_name, "model.onnx");
    ASSERT_EQ_INT(info.n_batches, 4);
    ASSERT_EQ_I64(info.batches[3], 5);
    ASSERT_EQ_INT(info.n_kernels, 2);
    ASSERT_EQ_INT(info.n_records, 0);
    ASSERT_EQ_INT((int)info.device_kind, (int)INFD_DEVICE_CPU);
    size_t n;
    uint8_t *model = read_all(onnx_path, &n);
    ASSERT_TRUE(model != NULL);
    ASSERT_EQ_U64(info.model_bytes, n);
    ASSERT_EQ_U64(info.model_hash, infd_planfile_hash(model, n));
    free(model);
    ASSERT_STATUS(infd_plan_file_read_info(onnx_path, &info, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "magic");
}

static void test_wrong_options(void)
{
    infd_error err = { 0 };
    infd_plan *p = NULL;
    infd_plan_options o;
    setup();
    ASSERT_STATUS(build_plan_file(&err), INFD_STATUS_OK);
    infd_plan_options_init(&o);
    o.batch = 3;
    ASSERT_STATUS(infd_plan_create(plan_path, &o, &p, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(p == NULL);
    ASSERT_STR_HAS(err.msg, "built for batch sizes 1, 2, 4, 5, not 3");
    ASSERT_STR_HAS(err.msg, plan_path);
    o.batch = 1;
    o.device = INFD_DEVICE_CUDA;
    ASSERT_STATUS(infd_plan_create(plan_path, &o, &p, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "built for device cpu; asked for cuda");
    o.device = INFD_DEVICE_CPU;
    o.precision = INFD_PRECISION_BF16;
    ASSERT_STATUS(infd_plan_create(plan_path, &o, &p, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "built with precision fp32");
    o.precision = INFD_PRECISION_TF32;
    ASSERT_STATUS(infd_plan_create(plan_path, &o, &p, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "built with precision fp32; asked for tf32: rebuild it with infd "
                            "build --precision tf32");
}

/* Replaces the first occurrence of `from` in the file's bytes by `to`
 * (same length) and loads the result from memory. */
static infd_status load_patched(const char *from, const char *to, infd_error *err)
{
    size_t n;
    uint8_t *d = read_all(plan_path, &n);
    infd_plan *p = NULL;
    if (!d)
        return INFD_STATUS_IO;
    size_t k = strlen(from);
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(d + i, from, k) == 0) {
            memcpy(d + i, to, k);
            break;
        }
    }
    infd_status st = infd_plan_create_from_memory(d, n, "patched.plan", NULL, &p, err);
    infd_plan_destroy(p);
    free(d);
    return st;
}

static void test_other_version_refused(void)
{
    infd_error err = { 0 };
    char other[64];
    setup();
    ASSERT_STATUS(build_plan_file(&err), INFD_STATUS_OK);
    /* Same length, another version: refused by name, not as corrupt. */
    snprintf(other, sizeof(other), "%s", infd_version());
    other[0] = other[0] == '9' ? '8' : '9';
    ASSERT_STATUS(load_patched(infd_version(), other, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "patched.plan: built for '");
    ASSERT_STR_HAS(err.msg, other);
    ASSERT_STR_HAS(err.msg, "rebuild it with infd build");
    /* Another format version. */
    ASSERT_STATUS(load_patched("INFDPLAN\x02", "INFDPLAN\x07", &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "plan file format 7");
    /* A damaged model byte: the checksum. */
    ASSERT_STATUS(load_patched("addsub", "addsuB", &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "checksum");
}

/* Records of the model's plan, tagged like a build would (bytes: 0xAB...). */
static int model_records(infd_plan_record *recs, int cap, uint8_t *fake, uint32_t fake_n)
{
    size_t n;
    uint8_t *model = read_all(onnx_path, &n);
    infd_plan *p = NULL;
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.n_threads = 1;
    if (!model || infd_plan_create_from_memory(model, n, "m", &o, &p, NULL) != INFD_STATUS_OK) {
        free(model);
        return -1;
    }
    int k = infd_plan_n_records(p);
    static char names[8][2][32];
    for (int s = 0; s < k && s < cap; s++) {
        infd_plan_record r;
        infd_plan_record_at(p, s, &r);
        snprintf(names[s][0], sizeof(names[s][0]), "%s", r.node);
        snprintf(names[s][1], sizeof(names[s][1]), "%s", r.op_type);
        recs[s].node = names[s][0];
        recs[s].op_type = names[s][1];
        recs[s].bytes = fake;
        recs[s].n_bytes = fake_n;
    }
    infd_plan_destroy(p);
    free(model);
    return k;
}

/* A hand-made file: the model, batch 1 with `recs`, device `device`,
 * library versions `libs`, precision `precision` (an infd_precision, or
 * any number, for the reader's checks). */
static uint8_t *make_file_prec(const char *device, const char *libs, uint32_t precision,
                               infd_plan_record *recs, int n_recs, size_t *n)
{
    size_t mn;
    uint8_t *model = read_all(onnx_path, &mn);
    infd_planfile_batch batch = { .batch = 1, .n_records = n_recs, .records = recs };
    infd_planfile pf = {
        .infd_version = infd_version(),
        .infd_git = "test",
        .backend = "cpu",
        .device = device,
        .libs = libs,
        .device_kind = INFD_DEVICE_CPU,
        .precision = precision,
        .model_name = "model.onnx",
        .model_hash = infd_planfile_hash(model, mn),
        .model = model,
        .model_bytes = mn,
        .n_batches = 1,
        .batches = &batch,
    };
    infd_strbuf b = { 0 };
    infd_planfile_encode(&pf, &b);
    free(model);
    return (uint8_t *)infd_strbuf_take(&b, n);
}

static uint8_t *make_file_libs(const char *device, const char *libs, infd_plan_record *recs,
                               int n_recs, size_t *n)
{
    return make_file_prec(device, libs, INFD_PRECISION_FP32, recs, n_recs, n);
}

/* As make_file_libs with this process's CPU library versions (none). */
static uint8_t *make_file(const char *device, infd_plan_record *recs, int n_recs, size_t *n)
{
    return make_file_libs(device, "", recs, n_recs, n);
}

static void test_records(void)
{
    infd_error err = { 0 };
    infd_plan_record recs[8];
    uint8_t fake[INFD_KERNEL_TUNING_MAX];
    char here[256];
    size_t n;
    infd_plan *p = NULL;
    setup();
    memset(fake, 0xab, sizeof(fake));
    int k = model_records(recs, 8, fake, 12);
    ASSERT_EQ_INT(k, 2);
    ASSERT_STR_EQ(recs[0].node, "add0");
    ASSERT_STR_EQ(recs[1].op_type, "Sub");
    infd_engine_device_describe(INFD_DEVICE_CPU, 0, here, sizeof(here), NULL);

    /* Records a CPU kernel does not use pass through compile: it tunes
     * nothing and keeps none, and the plan runs. */
    uint8_t *d = make_file(here, recs, k, &n);
    ASSERT_TRUE(d != NULL);
    ASSERT_STATUS(infd_plan_create_from_memory(d, n, "rec.plan", NULL, &p, &err), INFD_STATUS_OK);
    infd_plan_stats stats;
    infd_plan_get_stats(p, &stats);
    ASSERT_EQ_INT(stats.n_from_cache, 0);
    ASSERT_EQ_INT(stats.n_tuned, 0);
    static float o0[16], o1[16];
    ASSERT_STATUS(run_plan(p, 1, o0, o1, &err), INFD_STATUS_OK);
    infd_plan_destroy(p);
    p = NULL;
    infd_free(d);

    /* A plan holding records is tied to its device. */
    d = make_file("Fake GPU 9000, sm_99", recs, k, &n);
    ASSERT_STATUS(infd_plan_create_from_memory(d, n, "dev.plan", NULL, &p, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "dev.plan: built for 'Fake GPU 9000, sm_99' with infd ");
    ASSERT_STR_HAS(err.msg, "this process has '");
    ASSERT_STR_HAS(err.msg, "rebuild it with infd build");
    infd_free(d);

    /* A plan holding records is tied to the library versions too: one
     * built where cuDNN was loaded cannot run where it is not (the CPU
     * process has none), nor where another version is. */
    d = make_file_libs(here, "cuDNN 9.13.0, cuBLASLt 13.1.0, CUDA runtime 13.0", recs, k, &n);
    ASSERT_STATUS(infd_plan_create_from_memory(d, n, "libs.plan", NULL, &p, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "libs.plan: built with cuDNN 9.13.0; this process has no cuDNN: "
                            "rebuild it with infd build");
    ASSERT_TRUE(p == NULL);
    infd_free(d);

    /* A record for another node. */
    recs[1].node = "mul7";
    d = make_file(here, recs, k, &n);
    ASSERT_STATUS(infd_plan_create_from_memory(d, n, "node.plan", NULL, &p, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "tuning record 1 is for node 'mul7' (Sub) but kernel 1 is node "
                            "'sub0' (Sub)");
    infd_free(d);
    recs[1].node = "sub0";

    /* Fewer records than kernels. */
    d = make_file(here, recs, 1, &n);
    ASSERT_STATUS(infd_plan_create_from_memory(d, n, "few.plan", NULL, &p, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "more kernels than the file's 1 tuning records");
    infd_free(d);
    ASSERT_TRUE(p == NULL);
}

/* TF32 is a CUDA precision: a CPU plan asked for it is refused (as FP16
 * is) rather than run as FP32; plan files carry it like the others. */
static void test_tf32_precision(void)
{
    infd_error err = { 0 };
    infd_plan *p = NULL;
    infd_plan_options o;
    size_t n;
    setup();
    infd_plan_options_init(&o);
    o.precision = INFD_PRECISION_TF32;
    ASSERT_STATUS(infd_plan_create(onnx_path, &o, &p, &err), INFD_STATUS_UNIMPLEMENTED);
    ASSERT_STR_HAS(err.msg, "precision tf32 is implemented on the CUDA backend only");
    ASSERT_TRUE(p == NULL);
    o.precision = (infd_precision)4;
    ASSERT_STATUS(infd_plan_create(onnx_path, &o, &p, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "unknown precision 4");

    /* A TF32 file decodes (and says so); loading it for the CPU compiles
     * with its precision, so the CPU refuses it the same way. */
    uint8_t *d = make_file_prec("cpu", "", INFD_PRECISION_TF32, NULL, 0, &n);
    infd_planfile pf;
    ASSERT_STATUS(infd_planfile_decode(d, n, "tf32.plan", true, &pf, &err), INFD_STATUS_OK);
    ASSERT_EQ_INT((int)pf.precision, INFD_PRECISION_TF32);
    infd_planfile_fini(&pf);
    ASSERT_STATUS(infd_plan_create_from_memory(d, n, "tf32.plan", NULL, &p, &err),
                  INFD_STATUS_UNIMPLEMENTED);
    ASSERT_STR_HAS(err.msg, "precision tf32 is implemented on the CUDA backend only");
    infd_free(d);
    /* A precision past TF32 is unknown to the reader. */
    d = make_file_prec("cpu", "", INFD_PRECISION_TF32 + 1, NULL, 0, &n);
    ASSERT_STATUS(infd_planfile_decode(d, n, "p4.plan", true, &pf, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "the precision is unknown");
    infd_free(d);
}

/* The library version lists: the first difference, named. */
static void test_libs_differ(void)
{
    static const char *here = "cuDNN 9.10.2, cuBLASLt 13.1.0, CUDA runtime 13.0";
    char was[INFD_PLANFILE_LIBS_MAX], is[INFD_PLANFILE_LIBS_MAX];
    ASSERT_FALSE(infd_planfile_libs_differ(here, here, was, is, sizeof(was)));
    ASSERT_FALSE(infd_planfile_libs_differ("", "", was, is, sizeof(was)));
    ASSERT_TRUE(infd_planfile_libs_differ("cuDNN 9.13.0, cuBLASLt 13.1.0, CUDA runtime 13.0", here,
                                          was, is, sizeof(was)));
    ASSERT_STR_EQ(was, "cuDNN 9.13.0");
    ASSERT_STR_EQ(is, "cuDNN 9.10.2");
    ASSERT_TRUE(infd_planfile_libs_differ("cuDNN 9.10.2, cuBLASLt 13.1.0, CUDA runtime 12.9", here,
                                          was, is, sizeof(was)));
    ASSERT_STR_EQ(was, "CUDA runtime 12.9");
    ASSERT_STR_EQ(is, "CUDA runtime 13.0");
    /* A library one side lacks. */
    ASSERT_TRUE(
        infd_planfile_libs_differ("cuDNN 9.10.2, CUDA runtime 13.0", here, was, is, sizeof(was)));
    ASSERT_STR_EQ(was, "no cuBLASLt");
    ASSERT_STR_EQ(is, "cuBLASLt 13.1.0");
    ASSERT_TRUE(
        infd_planfile_libs_differ(here, "cuDNN 9.10.2, CUDA runtime 13.0", was, is, sizeof(was)));
    ASSERT_STR_EQ(was, "cuBLASLt 13.1.0");
    ASSERT_STR_EQ(is, "no cuBLASLt");
    /* A plan written before infd recorded them. */
    ASSERT_TRUE(infd_planfile_libs_differ("", here, was, is, sizeof(was)));
    ASSERT_STR_EQ(was, "no library versions recorded");
    ASSERT_STR_EQ(is, here);
    /* The same entries in another order or spacing: both lists, whole. */
    ASSERT_TRUE(infd_planfile_libs_differ("cuBLASLt 13.1.0,cuDNN 9.10.2, CUDA runtime 13.0", here,
                                          was, is, sizeof(was)));
    ASSERT_STR_EQ(was, "'cuBLASLt 13.1.0,cuDNN 9.10.2, CUDA runtime 13.0'");
    /* Odd lists (a file's bytes) are compared without overreading. */
    ASSERT_TRUE(infd_planfile_libs_differ(",, ,x", here, was, is, sizeof(was)));
    ASSERT_STR_EQ(was, "x");
    ASSERT_STR_EQ(is, "no x");
    char tiny_was[4], tiny_is[4];
    ASSERT_TRUE(infd_planfile_libs_differ("x 1", here, tiny_was, tiny_is, sizeof(tiny_was)));
    ASSERT_STR_EQ(tiny_was, "x 1");
    ASSERT_STR_EQ(tiny_is, "no ");
}

/* This process's library versions: none on the CPU; on CUDA (in builds
 * with the backend; no GPU needed) "NAME VERSION" entries as the plan
 * file records them. */
static void test_devices_libs(void)
{
    char libs[INFD_PLANFILE_LIBS_MAX];
    infd_devices_libs(INFD_DEVICE_CPU, libs, sizeof(libs));
    ASSERT_STR_EQ(libs, "");
#ifdef INFD_HAVE_CUDA
    infd_devices_libs(INFD_DEVICE_CUDA, libs, sizeof(libs));
    ASSERT_STR_HAS(libs, "cuDNN 9.");
    ASSERT_STR_HAS(libs, ", cuBLASLt ");
    ASSERT_STR_HAS(libs, ", CUDA runtime ");
    ASSERT_TRUE(strstr(libs, "-1") == NULL);
#else
    infd_devices_libs(INFD_DEVICE_CUDA, libs, sizeof(libs));
    ASSERT_STR_EQ(libs, "");
#endif
}

/* The codec alone: every field survives a round trip. */
static void test_codec(void)
{
    infd_error err = { 0 };
    static const uint8_t model[100] = { 1, 2, 3 };
    int64_t vals[3] = { 1, -1, 7 };
    infd_input_shape shapes[2] = { { .name = "x" }, { .name = "y" } };
    int64_t dx[4] = { 1, 3, 224, 224 };
    infd_shape_init(&shapes[0].shape, 4, dx, NULL);
    infd_shape_init(&shapes[1].shape, 0, NULL, NULL);
    infd_input_value values[1] = { { .name = "shape" } };
    int64_t d3 = 3;
    infd_shape_init(&values[0].value.shape, 1, &d3, NULL);
    values[0].value.dtype = INFD_DTYPE_INT64;
    values[0].value.data = vals;
    values[0].value.nbytes = sizeof(vals);
    uint8_t rb[5] = { 9, 8, 7, 6, 5 };
    infd_plan_record recs[2] = { { "conv", "Conv", rb, 5 }, { "", "Relu", NULL, 0 } };
    infd_planfile_batch batches[2] = { { 1, 2, recs }, { 8, 1, recs } };
    infd_planfile pf = {
        .infd_version = "1.2.3",
        .infd_git = "abc",
        .backend = "cuda",
        .device = "GPU",
        .libs = "cudnn 9",
        .device_kind = INFD_DEVICE_CUDA,
        .precision = INFD_PRECISION_FP16,
        .n_shapes = 2,
        .shapes = shapes,
        .n_values = 1,
        .values = values,
        .model_name = "m.onnx",
        .model_hash = 42,
        .model = model,
        .model_bytes = sizeof(model),
        .n_batches = 2,
        .batches = batches,
    };
    infd_strbuf b = { 0 };
    infd_planfile_encode(&pf, &b);
    ASSERT_FALSE(b.oom);
    infd_planfile q;
    ASSERT_STATUS(infd_planfile_decode(b.data, b.len, "c.plan", true, &q, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(q.infd_version, "1.2.3");
    ASSERT_STR_EQ(q.libs, "cudnn 9");
    ASSERT_EQ_INT((int)q.device_kind, INFD_DEVICE_CUDA);
    ASSERT_EQ_INT((int)q.precision, INFD_PRECISION_FP16);
    ASSERT_EQ_INT(q.n_shapes, 2);
    ASSERT_STR_EQ(q.shapes[1].name, "y");
    ASSERT_EQ_INT(q.shapes[0].shape.rank, 4);
    ASSERT_EQ_I64(q.shapes[0].shape.dims[3], 224);
    ASSERT_EQ_INT(q.shapes[1].shape.rank, 0);
    ASSERT_EQ_INT(q.n_values, 1);
    ASSERT_EQ_U64(q.values[0].value.nbytes, sizeof(vals));
    ASSERT_TRUE(memcmp(q.values[0].value.data, vals, sizeof(vals)) == 0);
    ASSERT_EQ_U64(q.model_hash, 42);
    ASSERT_EQ_U64((uintptr_t)(q.model - (const uint8_t *)b.data) % 64, 0);
    ASSERT_TRUE(memcmp(q.model, model, sizeof(model)) == 0);
    ASSERT_EQ_INT(q.n_batches, 2);
    ASSERT_EQ_I64(q.batches[1].batch, 8);
    ASSERT_EQ_INT(q.batches[1].n_records, 1);
    ASSERT_STR_EQ(q.batches[0].records[0].node, "conv");
    ASSERT_EQ_U64(q.batches[0].records[0].n_bytes, 5);
    ASSERT_TRUE(memcmp(q.batches[0].records[0].bytes, rb, 5) == 0);
    ASSERT_STR_EQ(q.batches[0].records[1].node, "");
    ASSERT_EQ_U64(q.batches[0].records[1].n_bytes, 0);
    infd_planfile_fini(&q);

    /* Every truncation, with the size field patched to match so the reader
     * goes past the header: an error naming a byte offset, never a crash. */
    uint8_t *t = malloc(b.len);
    for (size_t n = 0; n < b.len; n++) {
        memcpy(t, b.data, n);
        if (n >= 24)
            for (int i = 0; i < 8; i++)
                t[16 + i] = (uint8_t)((uint64_t)n >> (8 * i));
        infd_error_clear(&err);
        ASSERT_STATUS(infd_planfile_decode(t, n, "t.plan", false, &q, &err),
                      INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_STR_HAS(err.msg, "t.plan: ");
        if (n >= 8)
            ASSERT_STR_HAS(err.msg, "byte offset");
    }
    /* Every byte flipped: decoding without the checksum fails cleanly or
     * succeeds; with it, always fails. */
    for (size_t i = 0; i < b.len; i++) {
        memcpy(t, b.data, b.len);
        t[i] ^= 0x80;
        infd_status st = infd_planfile_decode(t, b.len, "f.plan", false, &q, &err);
        infd_planfile_fini(&q);
        ASSERT_TRUE(st == INFD_STATUS_OK || st == INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_STATUS(infd_planfile_decode(t, b.len, "f.plan", true, &q, &err),
                      INFD_STATUS_INVALID_ARGUMENT);
    }
    /* Hostile counts ask for nothing the file cannot back. */
    memcpy(t, b.data, b.len);
    size_t at = 24;
    for (int s = 0; s < 5; s++) /* the five fingerprint strings */
        at += 4 + (size_t)(t[at] | t[at + 1] << 8) + 1;
    at += 8; /* device kind, precision */
    memset(t + at, 0xff, 4);
    ASSERT_STATUS(infd_planfile_decode(t, b.len, "h.plan", false, &q, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "the input shapes' count is larger than the file allows");
    free(t);
    infd_strbuf_fini(&b);
}

/* The whole load path on a real file cut at every offset (header) and at
 * many offsets of the body, with and without the size patched. */
static void test_truncated_loads(void)
{
    infd_error err = { 0 };
    size_t n;
    setup();
    ASSERT_STATUS(build_plan_file(&err), INFD_STATUS_OK);
    uint8_t *d = read_all(plan_path, &n);
    ASSERT_TRUE(d != NULL);
    uint8_t *t = malloc(n);
    for (size_t len = 0; len < n; len += len < 256 ? 1 : 7) {
        for (int patch = 0; patch < 2; patch++) {
            infd_plan *p = NULL;
            memcpy(t, d, len);
            if (patch && len >= 24)
                for (int i = 0; i < 8; i++)
                    t[16 + i] = (uint8_t)((uint64_t)len >> (8 * i));
            infd_error_clear(&err);
            infd_status st =
                infd_plan_create_from_memory(t, len ? len : 1, "cut.plan", NULL, &p, &err);
            ASSERT_TRUE(st != INFD_STATUS_OK);
            ASSERT_TRUE(p == NULL);
            ASSERT_TRUE(err.msg[0] != '\0');
        }
    }
    /* And through a file on disk. */
    char cut[600];
    snprintf(cut, sizeof(cut), "%s/cut.plan", dir);
    FILE *f = fopen(cut, "wb");
    fwrite(d, 1, n / 2, f);
    fclose(f);
    infd_plan *p = NULL;
    ASSERT_STATUS(infd_plan_create(cut, NULL, &p, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "cut.plan: corrupt or truncated plan file: its header says");
    free(t);
    free(d);
    unlink(cut);
}

/* Every allocation of the load path failing in turn: a clean error. */
static void test_load_oom(void)
{
    infd_error err = { 0 };
    setup();
    ASSERT_STATUS(build_plan_file(&err), INFD_STATUS_OK);
    for (int64_t k = 1; k < 10000; k++) {
        infd_plan *p = NULL;
        infd_plan_options o;
        infd_plan_options_init(&o);
        o.n_threads = 1;
        infd_alloc_fail_after(k);
        infd_status st = infd_plan_create(plan_path, &o, &p, &err);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        infd_plan_destroy(p);
        if (!fired) {
            ASSERT_STATUS(st, INFD_STATUS_OK);
            return;
        }
        ASSERT_TRUE(st != INFD_STATUS_OK);
        ASSERT_TRUE(err.msg[0] != '\0');
    }
    TEST_FAIL_("the load never succeeded");
}

static void test_builder_errors(void)
{
    infd_error err = { 0 };
    infd_plan_builder *b = NULL;
    char missing[600];
    setup();
    snprintf(missing, sizeof(missing), "%s/none.onnx", dir);
    ASSERT_STATUS(infd_plan_builder_create(missing, NULL, &b, &err), INFD_STATUS_NOT_FOUND);
    ASSERT_STR_HAS(err.msg, "none.onnx");
    ASSERT_STATUS(build_plan_file(&err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_builder_create(plan_path, NULL, &b, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "already a plan file");
    ASSERT_STATUS(infd_plan_builder_create(onnx_path, NULL, &b, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_builder_write(b, plan_path, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infd_plan_builder_add(b, 0, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infd_plan_builder_add(b, 2, NULL, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_plan_builder_add(b, 2, NULL, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "already built");
    char nodir[600];
    snprintf(nodir, sizeof(nodir), "%s/no/such/dir.plan", dir);
    ASSERT_STATUS(infd_plan_builder_write(b, nodir, &err), INFD_STATUS_IO);
    infd_plan_builder_destroy(b);
}

static void test_cleanup(void)
{
    char cmd[600];
    setup();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ASSERT_EQ_INT(system(cmd), 0);
}

TEST_MAIN(test_batch_sizes, test_same_outputs, test_info, test_wrong_options,
          test_other_version_refused, test_records, test_libs_differ, test_devices_libs,
          test_tf32_precision, test_codec, test_truncated_loads, test_load_oom, test_builder_errors,
          test_cleanup)
