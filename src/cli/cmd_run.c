/*
 * cmd_run.c - `infd run`: compile a model, run it once, print and write its
 * outputs.
 *
 *   infd run MODEL.onnx|MODEL.plan [--input NAME=FILE.npy]... [--output-dir DIR]
 *            [--batch N] [--shape NAME=D0,D1,...] [--threads N] [--seed S]
 *            [--precision fp32|tf32|bf16|fp16] [--device cpu|cuda]
 *
 * Inputs not given are filled with deterministic random values (seeded) and
 * written to DIR/input_<name>.npy, so another runtime can be fed the same.
 *
 * --bind NAME builds the plan with input NAME's given value baked in (a
 * shape input: a Reshape target or Resize scales fed as an input). When a
 * plan cannot be built because a given input decides shapes, run binds the
 * small given inputs (up to 4096 elements) and tries once more, saying so.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/npy.h"
#include "core/alloc.h"

#define MAX_INPUTS 64

typedef struct given_input {
    char name[256];
    const char *path;
    infd_tensor tensor;
    bool bind; /* --bind: bake the value into the plan */
} given_input;

/* Binds the given inputs marked `bind` (or, with `small`, every given input
 * of at most 4096 elements) into the plan options. Returns how many. */
static int collect_binds(given_input *given, int n_given, bool small, infd_input_value *out)
{
    int n = 0;
    for (int k = 0; k < n_given; k++) {
        if (given[k].bind || (small && infd_tensor_numel(&given[k].tensor) <= 4096)) {
            given[k].bind = true;
            out[n].name = given[k].name;
            out[n].value = given[k].tensor;
            n++;
        }
    }
    return n;
}

static void usage(void)
{
    fprintf(stderr, "usage: infd run MODEL.onnx [--input NAME=FILE.npy]... [--output-dir DIR]\n"
                    "                [--batch N] [--shape NAME=D0,D1,...] [--threads N] "
                    "[--seed S] [--bind NAME]\n"
                    "                [--precision fp32|tf32|bf16|fp16] [--device cpu|cuda]\n");
}

/* "Identity:0" -> "Identity_0": names as tools/ort_ref.js writes them. */
static void sanitize(const char *name, char *out, size_t n)
{
    size_t i = 0;
    for (; name[i] && i + 1 < n; i++) {
        char ch = name[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        out[i] = ok ? ch : '_';
    }
    out[i] = '\0';
}

static double element(const infd_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case INFD_DTYPE_FP32:
        return ((const float *)t->data)[i];
    case INFD_DTYPE_FP64:
        return ((const double *)t->data)[i];
    case INFD_DTYPE_FP16:
        return infd_fp16_to_fp32(((const uint16_t *)t->data)[i]);
    case INFD_DTYPE_BF16:
        return infd_bf16_to_fp32(((const uint16_t *)t->data)[i]);
    case INFD_DTYPE_INT64:
        return (double)((const int64_t *)t->data)[i];
    case INFD_DTYPE_INT32:
        return ((const int32_t *)t->data)[i];
    case INFD_DTYPE_INT16:
        return ((const int16_t *)t->data)[i];
    case INFD_DTYPE_INT8:
        return ((const int8_t *)t->data)[i];
    case INFD_DTYPE_UINT8:
    case INFD_DTYPE_BOOL:
        return ((const uint8_t *)t->data)[i];
    case INFD_DTYPE_UINT16:
        return ((const uint16_t *)t->data)[i];
    case INFD_DTYPE_UINT32:
        return ((const uint32_t *)t->data)[i];
    case INFD_DTYPE_UINT64:
        return (double)((const uint64_t *)t->data)[i];
    default:
        return 0;
    }
}

static void print_tensor(const char *kind, const infd_tensor_info *info, const infd_tensor *t)
{
    char shape[128];
    double sum = 0, abs_sum = 0;
    int64_t n = infd_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = element(t, i);
        sum += v;
        abs_sum += fabs(v);
    }
    printf("%s %s: %s %s sum=%.6g abs_sum=%.6g first=[", kind, info->name,
           infd_dtype_name(info->dtype), infd_shape_format(&info->shape, shape, sizeof(shape)), sum,
           abs_sum);
    for (int64_t i = 0; i < n && i < 5; i++)
        printf("%s%.6g", i ? ", " : "", element(t, i));
    printf("%s]\n", n > 5 ? ", ..." : "");
}

static int write_npy(const char *dir, const char *prefix, const char *name, const infd_tensor *t)
{
    char clean[256], path[1024];
    infd_error err = { 0 };
    sanitize(name, clean, sizeof(clean));
    snprintf(path, sizeof(path), "%s/%s%s.npy", dir, prefix, clean);
    if (infd_npy_write(path, t, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd run: %s\n", err.msg);
        return -1;
    }
    return 0;
}

int infd_cli_run(int argc, char **argv)
{
    infd_cli_common c;
    given_input *given = NULL;
    int n_given = 0;
    const char *out_dir = NULL;
    uint64_t seed = 1;
    const char *bind_names[MAX_INPUTS];
    int n_binds = 0;
    infd_input_value binds[MAX_INPUTS];
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_tensor *ins = NULL, *outs = NULL;
    infd_error err = { 0 };
    int rc = INFD_EXIT_FAILURE;

    memset(&c, 0, sizeof(c));
    infd_plan_options_init(&c.plan);
    given = infd_calloc(MAX_INPUTS, sizeof(*given));
    if (!given)
        return INFD_EXIT_FAILURE;
    for (int i = 1; i < argc; i++) {
        int r = infd_cli_parse_common(&c, argc, argv, &i, "run");
        if (r < 0) {
            rc = INFD_EXIT_USAGE;
            goto out;
        }
        if (r > 0)
            continue;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--input") == 0 && val) {
            const char *eq = strchr(val, '=');
            if (!eq || eq == val || n_given >= MAX_INPUTS ||
                (size_t)(eq - val) >= sizeof(given[0].name)) {
                fprintf(stderr, "infd run: --input needs NAME=FILE.npy\n");
                rc = INFD_EXIT_USAGE;
                goto out;
            }
            memcpy(given[n_given].name, val, (size_t)(eq - val));
            given[n_given].path = eq + 1;
            n_given++;
            i++;
        } else if (strcmp(argv[i], "--output-dir") == 0 && val) {
            out_dir = val;
            i++;
        } else if (strcmp(argv[i], "--seed") == 0 && val) {
            seed = strtoull(val, NULL, 10);
            i++;
        } else if (strcmp(argv[i], "--bind") == 0 && val) {
            if (n_binds >= MAX_INPUTS) {
                rc = INFD_EXIT_USAGE;
                goto out;
            }
            bind_names[n_binds++] = val;
            i++;
        } else if (argv[i][0] == '-' || c.model) {
            fprintf(stderr, "infd run: unexpected argument '%s'\n", argv[i]);
            usage();
            rc = INFD_EXIT_USAGE;
            goto out;
        } else {
            c.model = argv[i];
        }
    }
    if (!c.model) {
        usage();
        rc = INFD_EXIT_USAGE;
        goto out;
    }
    if (infd_cli_use_plan_file(&c, "run") != 0)
        goto out;
    /* Given inputs fix their shapes. */
    for (int k = 0; k < n_given; k++) {
        if (infd_npy_read(given[k].path, &given[k].tensor, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd run: %s\n", err.msg);
            goto out;
        }
        if (c.plan.n_shapes < INFD_CLI_MAX_SHAPES) {
            c.shapes[c.plan.n_shapes].name = given[k].name;
            c.shapes[c.plan.n_shapes].shape = given[k].tensor.shape;
            c.plan.shapes = c.shapes;
            c.plan.n_shapes++;
        }
    }
    for (int b = 0; b < n_binds; b++) {
        int found = 0;
        for (int k = 0; k < n_given; k++) {
            if (strcmp(given[k].name, bind_names[b]) == 0) {
                given[k].bind = true;
                found = 1;
            }
        }
        if (!found) {
            fprintf(stderr, "infd run: --bind %s: give its value with --input %s=FILE.npy\n",
                    bind_names[b], bind_names[b]);
            rc = INFD_EXIT_USAGE;
            goto out;
        }
    }
    c.plan.values = binds;
    c.plan.n_values = collect_binds(given, n_given, false, binds);
    if (out_dir && mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "infd run: cannot create %s\n", out_dir);
        goto out;
    }
    if (infd_plan_create(c.model, &c.plan, &plan, &err) != INFD_STATUS_OK &&
        err.code == INFD_STATUS_UNIMPLEMENTED && strstr(err.msg, "decides the output shape") &&
        n_binds == 0 && n_given > 0) {
        c.plan.n_values = collect_binds(given, n_given, true, binds);
        fprintf(stderr, "infd run: note: binding the given inputs of up to 4096 elements to "
                        "their values, as some decide shapes\n");
        infd_error_clear(&err);
        infd_plan_create(c.model, &c.plan, &plan, &err);
    }
    if (!plan || infd_context_create(plan, &ctx, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd run: %s\n", err.msg);
        if (err.code == INFD_STATUS_UNIMPLEMENTED)
            rc = INFD_EXIT_UNSUPPORTED;
        goto out;
    }
    int n_in = infd_plan_n_inputs(plan), n_out = infd_plan_n_outputs(plan);
    ins = infd_calloc((size_t)n_in + 1, sizeof(*ins));
    outs = infd_calloc((size_t)n_out + 1, sizeof(*outs));
    if (!ins || !outs)
        goto out;
    for (int i = 0; i < n_in; i++) {
        infd_tensor_info info;
        infd_plan_input(plan, i, &info);
        const given_input *gi = NULL;
        for (int k = 0; k < n_given; k++) {
            if (strcmp(given[k].name, info.name) == 0)
                gi = &given[k];
        }
        if (gi) {
            ins[i] = gi->tensor;
            ins[i].owns_data = false;
            /* NumPy has no bfloat16: BF16 travels as uint16 bits. */
            if (info.dtype == INFD_DTYPE_BF16 && ins[i].dtype == INFD_DTYPE_UINT16)
                ins[i].dtype = INFD_DTYPE_BF16;
            if (ins[i].dtype != info.dtype) {
                fprintf(stderr, "infd run: input '%s' must be %s, %s holds %s\n", info.name,
                        infd_dtype_name(info.dtype), gi->path, infd_dtype_name(ins[i].dtype));
                goto out;
            }
        } else {
            if (infd_tensor_alloc(&ins[i], info.dtype, &info.shape, &err) != INFD_STATUS_OK) {
                fprintf(stderr, "infd run: %s\n", err.msg);
                goto out;
            }
            infd_cli_fill_random(&ins[i], seed + (uint64_t)i);
            if (out_dir && write_npy(out_dir, "input_", info.name, &ins[i]) != 0)
                goto out;
        }
        print_tensor("input", &info, &ins[i]);
    }
    for (int i = 0; i < n_out; i++) {
        infd_tensor_info info;
        infd_plan_output(plan, i, &info);
        if (infd_tensor_alloc(&outs[i], info.dtype, &info.shape, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd run: %s\n", err.msg);
            goto out;
        }
    }
    if (infd_plan_run(plan, ctx, ins, n_in, outs, n_out, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd run: %s\n", err.msg);
        goto out;
    }
    for (int i = 0; i < n_out; i++) {
        infd_tensor_info info;
        infd_plan_output(plan, i, &info);
        print_tensor("output", &info, &outs[i]);
        if (out_dir && write_npy(out_dir, "", info.name, &outs[i]) != 0)
            goto out;
    }
    rc = INFD_EXIT_OK;
out:
    if (ins) {
        for (int i = 0; plan && i < infd_plan_n_inputs(plan); i++)
            infd_tensor_fini(&ins[i]);
    }
    if (outs) {
        for (int i = 0; plan && i < infd_plan_n_outputs(plan); i++)
            infd_tensor_fini(&outs[i]);
    }
    infd_free(ins);
    infd_free(outs);
    for (int k = 0; k < n_given; k++)
        infd_tensor_fini(&given[k].tensor);
    infd_free(given);
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
    return rc;
}
