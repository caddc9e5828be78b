/*
 * cmd_bench.c - `infd bench`: engine-only latency and throughput.
 *
 *   infd bench MODEL.onnx|MODEL.plan [--batch N] [--threads N] [--iterations N]
 *              [--warmup N] [--shape NAME=D0,D1,...] [--precision fp32|bf16|fp16] [--device
 * cpu|cuda]
 *              [--json] [--profile]
 *
 * Compiles the plan (the load time printed is file to ready plan), runs
 * `warmup` untimed iterations, then `iterations` timed ones on random
 * inputs, and prints latency percentiles from the histogram, throughput in
 * samples per second (batch x runs / time) and the process's peak RSS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/histogram.h"

static void usage(void)
{
    fprintf(stderr, "usage: infd bench MODEL.onnx [--batch N] [--threads N] [--iterations N]\n"
                    "                  [--warmup N] [--shape NAME=D0,D1,...] "
                    "[--precision fp32|bf16|fp16] [--device cpu|cuda]\n"
                    "                  [--json] [--profile]\n");
}

/* Time per op type, then the ten slowest kernels, as shares of the run. */
static void print_profile(const infd_context *ctx, double total_ns)
{
    int n = infd_context_n_steps(ctx);
    const char *ops[256];
    double op_ns[256];
    int op_count[256], n_ops = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        infd_step_profile sp;
        infd_context_step_profile(ctx, i, &sp);
        sum += (double)sp.total_ns;
        int k = 0;
        while (k < n_ops && strcmp(ops[k], sp.op_type) != 0)
            k++;
        if (k == n_ops && n_ops < 256) {
            ops[n_ops] = sp.op_type;
            op_ns[n_ops] = 0;
            op_count[n_ops++] = 0;
        }
        if (k < n_ops) {
            op_ns[k] += (double)sp.total_ns;
            op_count[k]++;
        }
    }
    printf("profile     kernels %.1f%% of the timed loop\n", 100.0 * sum / total_ns);
    for (int done = 0; done < n_ops; done++) { /* op types, slowest first */
        int best = -1;
        for (int k = 0; k < n_ops; k++) {
            if (op_count[k] >= 0 && (best < 0 || op_ns[k] > op_ns[best]))
                best = k;
        }
        printf("  %-22s x%-4d %6.1f%%\n", ops[best], op_count[best], 100.0 * op_ns[best] / sum);
        op_count[best] = -1;
    }
    printf("slowest kernels:\n");
    uint64_t last = UINT64_MAX;
    for (int shown = 0; shown < 10 && shown < n; shown++) {
        infd_step_profile best = { 0 };
        for (int i = 0; i < n; i++) {
            infd_step_profile sp;
            infd_context_step_profile(ctx, i, &sp);
            if (sp.total_ns < last && sp.total_ns > best.total_ns)
                best = sp;
        }
        if (!best.node)
            break;
        last = best.total_ns;
        printf("  %6.1f%%  %-12s %-28s %s\n", 100.0 * (double)best.total_ns / sum, best.op_type,
               best.node, best.kernel);
    }
}

int infd_cli_bench(int argc, char **argv)
{
    infd_cli_common c;
    long iterations = 100, warmup = 10;
    int json = 0, profile = 0;
    infd_plan *plan = NULL;
    infd_context *ctx = NULL;
    infd_tensor *ins = NULL, *outs = NULL;
    infd_histogram *h = NULL;
    infd_error err = { 0 };
    int rc = INFD_EXIT_FAILURE;

    memset(&c, 0, sizeof(c));
    infd_plan_options_init(&c.plan);
    c.plan.max_contexts = 1;
    for (int i = 1; i < argc; i++) {
        int r = infd_cli_parse_common(&c, argc, argv, &i, "bench");
        if (r < 0)
            return INFD_EXIT_USAGE;
        if (r > 0)
            continue;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if ((strcmp(argv[i], "--iterations") == 0 || strcmp(argv[i], "--warmup") == 0) && val) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 0 || (argv[i][2] == 'i' && v < 1)) {
                fprintf(stderr, "infd bench: %s needs a number\n", argv[i]);
                return INFD_EXIT_USAGE;
            }
            if (argv[i][2] == 'i')
                iterations = v;
            else
                warmup = v;
            i++;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--profile") == 0) {
            profile = 1;
        } else if (argv[i][0] == '-' || c.model) {
            fprintf(stderr, "infd bench: unexpected argument '%s'\n", argv[i]);
            usage();
            return INFD_EXIT_USAGE;
        } else {
            c.model = argv[i];
        }
    }
    if (!c.model) {
        usage();
        return INFD_EXIT_USAGE;
    }
    if (infd_cli_use_plan_file(&c, "bench") != 0)
        return INFD_EXIT_FAILURE;
    uint64_t t0 = infd_clock_ns();
    if (infd_plan_create(c.model, &c.plan, &plan, &err) != INFD_STATUS_OK ||
        infd_context_create(plan, &ctx, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd bench: %s\n", err.msg);
        goto out;
    }
    double load_ms = (double)(infd_clock_ns() - t0) / 1e6;
    int n_in = infd_plan_n_inputs(plan), n_out = infd_plan_n_outputs(plan);
    ins = infd_calloc((size_t)n_in + 1, sizeof(*ins));
    outs = infd_calloc((size_t)n_out + 1, sizeof(*outs));
    h = infd_histogram_create();
    if (!ins || !outs || !h)
        goto out;
    int64_t batch = 1;
    for (int i = 0; i < n_in; i++) {
        infd_tensor_info info;
        infd_plan_input(plan, i, &info);
        if (i == 0 && info.shape.rank > 0)
            batch = info.shape.dims[0];
        if (infd_tensor_alloc(&ins[i], info.dtype, &info.shape, &err) != INFD_STATUS_OK)
            goto fail_msg;
        infd_cli_fill_random(&ins[i], (uint64_t)i + 1);
    }
    for (int i = 0; i < n_out; i++) {
        infd_tensor_info info;
        infd_plan_output(plan, i, &info);
        if (infd_tensor_alloc(&outs[i], info.dtype, &info.shape, &err) != INFD_STATUS_OK)
            goto fail_msg;
    }
    for (long i = 0; i < warmup; i++) {
        if (infd_plan_run(plan, ctx, ins, n_in, outs, n_out, &err) != INFD_STATUS_OK)
            goto fail_msg;
    }
    infd_context_set_profiling(ctx, profile);
    uint64_t start = infd_clock_ns();
    for (long i = 0; i < iterations; i++) {
        uint64_t t = infd_clock_ns();
        if (infd_plan_run(plan, ctx, ins, n_in, outs, n_out, &err) != INFD_STATUS_OK)
            goto fail_msg;
        infd_histogram_record(h, infd_clock_ns() - t);
    }
    double total_s = (double)(infd_clock_ns() - start) / 1e9;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mib = (double)ru.ru_maxrss / 1024.0;
    double p50 = (double)infd_histogram_quantile(h, 0.50) / 1e6;
    double p90 = (double)infd_histogram_quantile(h, 0.90) / 1e6;
    double p99 = (double)infd_histogram_quantile(h, 0.99) / 1e6;
    double tput = (double)batch * (double)iterations / total_s;
    infd_plan_stats stats;
    infd_plan_get_stats(plan, &stats);
    int threads = c.plan.n_threads;
    const char *device = c.plan.device == INFD_DEVICE_CUDA ? "cuda" : "cpu";
    if (json) {
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"batch\": %lld, \"threads\": %d, "
               "\"precision\": \"%s\", \"iterations\": %ld, "
               "\"load_ms\": %.2f, \"p50_ms\": %.4f, \"p90_ms\": %.4f, \"p99_ms\": %.4f, "
               "\"throughput_per_s\": %.2f, \"peak_rss_mib\": %.1f, \"kernels\": %d, "
               "\"tuned\": %d, \"from_cache\": %d}\n",
               c.model, device, (long long)batch, threads,
               infd_cli_precision_name(c.plan.precision), iterations, load_ms, p50, p90, p99, tput,
               rss_mib, stats.n_kernels, stats.n_tuned, stats.n_from_cache);
    } else {
        printf("model       %s\n", c.model);
        printf("plan        %d nodes -> %d kernels (%d folded, %d fused), %d blocked values, "
               "arena %.1f MiB, weights %.1f MiB\n",
               stats.n_nodes_model, stats.n_kernels, stats.n_folded, stats.n_fused, stats.n_opaque,
               (double)stats.arena_bytes / 1048576.0, (double)stats.weight_bytes / 1048576.0);
        printf("load        %.1f ms (file to ready plan and context; %d kernels tuned, %d "
               "from the plan file)\n",
               load_ms, stats.n_tuned, stats.n_from_cache);
        printf("batch       %lld, device %s, threads %d, precision %s, %ld iterations after %ld "
               "warm-up\n",
               (long long)batch, device, threads, infd_cli_precision_name(c.plan.precision),
               iterations, warmup);
        printf("latency     p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n", p50, p90, p99);
        printf("throughput  %.1f samples/s\n", tput);
        printf("peak RSS    %.1f MiB\n", rss_mib);
    }
    if (profile)
        print_profile(ctx, total_s * 1e9);
    rc = INFD_EXIT_OK;
    goto out;
fail_msg:
    fprintf(stderr, "infd bench: %s\n", err.msg);
out:
    for (int i = 0; ins && plan && i < infd_plan_n_inputs(plan); i++)
        infd_tensor_fini(&ins[i]);
    for (int i = 0; outs && plan && i < infd_plan_n_outputs(plan); i++)
        infd_tensor_fini(&outs[i]);
    infd_free(ins);
    infd_free(outs);
    infd_histogram_destroy(h);
    infd_context_destroy(ctx);
    infd_plan_destroy(plan);
    return rc;
}
