/*
 * cmd_build.c - `infd build`: compile and tune a model into a plan file.
 *
 *   infd build MODEL.onnx -o MODEL.plan [--device cpu|cuda]
 *              [--precision fp32|tf32|bf16|fp16 | --fp16] [--max-batch N | --batch N]
 *              [--shape NAME=D0,D1,...] [--threads N]
 *
 * Builds the plan once per batch size (--max-batch N: the sizes a server
 * with max_batch_size N compiles, infd_plan_batch_sizes; --batch N: that
 * one; neither: batch 1), keeps every kernel's tuning record, and writes the
 * model, the options and the records to one file atomically. `infd run` and
 * `infd bench` load it without tuning (the server does not load plan files
 * yet).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "core/clock.h"

static void usage(void)
{
    fprintf(stderr, "usage: infd build MODEL.onnx -o MODEL.plan [--device cpu|cuda]\n"
                    "                  [--precision fp32|tf32|bf16|fp16 | --fp16] "
                    "[--max-batch N | --batch N]\n"
                    "                  [--shape NAME=D0,D1,...] [--threads N]\n");
}

static int exit_code(const infd_error *err)
{
    return err->code == INFD_STATUS_UNIMPLEMENTED ? INFD_EXIT_UNSUPPORTED : INFD_EXIT_FAILURE;
}

int infd_cli_build(int argc, char **argv)
{
    infd_cli_common c;
    const char *out_path = NULL;
    int64_t max_batch = 0;
    infd_plan_builder *b = NULL;
    infd_error err = { 0 };
    int rc = INFD_EXIT_FAILURE;

    memset(&c, 0, sizeof(c));
    infd_plan_options_init(&c.plan);
    for (int i = 1; i < argc; i++) {
        int r = infd_cli_parse_common(&c, argc, argv, &i, "build");
        if (r < 0)
            return INFD_EXIT_USAGE;
        if (r > 0)
            continue;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && val) {
            out_path = val;
            i++;
        } else if (strcmp(argv[i], "--max-batch") == 0) {
            char *end = NULL;
            long v = val ? strtol(val, &end, 10) : 0;
            if (!val || *end || v < 1 || v > 1 << 20) {
                fprintf(stderr, "infd build: --max-batch needs a positive number\n");
                return INFD_EXIT_USAGE;
            }
            max_batch = v;
            i++;
        } else if (strcmp(argv[i], "--fp16") == 0) {
            c.plan.precision = INFD_PRECISION_FP16;
        } else if (argv[i][0] == '-' || c.model) {
            fprintf(stderr, "infd build: unexpected argument '%s'\n", argv[i]);
            usage();
            return INFD_EXIT_USAGE;
        } else {
            c.model = argv[i];
        }
    }
    if (!c.model || !out_path) {
        if (c.model)
            fprintf(stderr, "infd build: give the plan file to write with -o FILE.plan\n");
        usage();
        return INFD_EXIT_USAGE;
    }
    if (max_batch && c.plan.batch) {
        fprintf(stderr, "infd build: give --max-batch or --batch, not both\n");
        return INFD_EXIT_USAGE;
    }
    int64_t batches[INFD_PLAN_FILE_MAX_BATCHES];
    int n_batches = 1;
    batches[0] = c.plan.batch ? c.plan.batch : 1;
    if (max_batch) {
        n_batches = infd_plan_batch_sizes(max_batch, batches, INFD_PLAN_FILE_MAX_BATCHES);
        if (n_batches > INFD_PLAN_FILE_MAX_BATCHES) {
            fprintf(stderr, "infd build: --max-batch %lld needs more than %d plans\n",
                    (long long)max_batch, INFD_PLAN_FILE_MAX_BATCHES);
            return INFD_EXIT_USAGE;
        }
    }

    uint64_t t0 = infd_clock_ns();
    if (infd_plan_builder_create(c.model, &c.plan, &b, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd build: %s\n", err.msg);
        rc = exit_code(&err);
        goto out;
    }
    const char *device = c.plan.device == INFD_DEVICE_CUDA ? "cuda" : "cpu";
    printf("building %s for %s, precision %s, %d batch size%s\n", c.model, device,
           infd_precision_name(c.plan.precision), n_batches, n_batches == 1 ? "" : "s");
    int records = 0;
    for (int k = 0; k < n_batches; k++) {
        infd_plan_stats st;
        if (infd_plan_builder_add(b, batches[k], &st, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd build: batch %lld: %s\n", (long long)batches[k], err.msg);
            rc = exit_code(&err);
            goto out;
        }
        records += st.n_tuned + st.n_from_cache;
        printf("  batch %-5lld %4d kernels, %4d tuning records, built in %.1f ms\n",
               (long long)batches[k], st.n_kernels, st.n_tuned + st.n_from_cache, st.compile_ms);
        fflush(stdout);
    }
    if (infd_plan_builder_write(b, out_path, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd build: %s\n", err.msg);
        goto out;
    }
    struct stat sb;
    long long bytes = stat(out_path, &sb) == 0 ? (long long)sb.st_size : -1;
    printf("wrote %s (%.1f MiB): %d batch size%s, %d tuning records, %.1f s\n", out_path,
           (double)bytes / 1048576.0, n_batches, n_batches == 1 ? "" : "s", records,
           (double)(infd_clock_ns() - t0) / 1e9);
    rc = INFD_EXIT_OK;
out:
    infd_plan_builder_destroy(b);
    return rc;
}
