/*
 * cmd_bench.c - `infd bench`: engine-only latency and throughput.
 *
 *   infd bench MODEL.onnx|MODEL.plan [--batch N] [--threads N] [--iterations N]
 *              [--warmup N] [--shape NAME=D0,D1,...] [--precision fp32|tf32|bf16|fp16] [--device
 * cpu|cuda]
 *              [--json] [--profile] [--contexts N] [--pinned-io] [--device-input]
 *
 * Compiles the plan (the load time printed is file to ready plan), runs
 * `warmup` untimed iterations, then `iterations` timed ones on random
 * inputs, and prints latency percentiles from the histogram, throughput in
 * samples per second (batch x runs / time) and the process's peak RSS.
 *
 * --contexts N runs N contexts of the plan at once, one thread each, every
 * one doing `iterations` runs (a server's N instances; on a GPU each has
 * its own stream, so one context's copies overlap another's kernels);
 * throughput counts all of them. --pinned-io feeds a device plan through
 * the contexts' own page-locked buffers (infd_context_input_buffer), as a
 * frontend that receives into them does: no copy through caller memory.
 * --device-input keeps each context's inputs in device memory
 * (infd_engine_device_alloc, filled once) and runs from there
 * (infd_context_set_device_input): a device-to-device copy per run, no
 * host copy, as a client whose data is already on the GPU (Triton's CUDA
 * shared memory) or PyTorch's rows in bench/ get.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/histogram.h"

static void usage(void)
{
    fprintf(stderr, "usage: infd bench MODEL.onnx [--batch N] [--threads N] [--iterations N]\n"
                    "                  [--warmup N] [--shape NAME=D0,D1,...] "
                    "[--precision fp32|tf32|bf16|fp16] [--device cpu|cuda]\n"
                    "                  [--json] [--profile] [--contexts N] [--pinned-io]\n"
                    "                  [--device-input]\n");
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

/* One context and the thread that runs it. */
typedef struct bench_worker {
    infd_plan *plan;
    infd_context *ctx;
    infd_tensor *ins, *outs;         /* owned (random inputs, output space) */
    infd_tensor *run_ins, *run_outs; /* what runs pass: these, or the pinned buffers */
    void **dev_in;                   /* --device-input: per input, its device copy or NULL */
    infd_device_kind kind;           /* the plan's device */
    int index;
    long warmup, iterations;
    bool profile;      /* per-kernel profile of the timed runs */
    infd_histogram *h; /* shared; recording is lock-free */
    pthread_barrier_t *ready;
    uint64_t start_ns, end_ns;
    infd_status st;
    infd_error err;
    pthread_t thread;
} bench_worker;

/* Allocates the worker's tensors (random inputs seeded like a single-context
 * bench) and, with `pinned`, points the runs at the context's buffers; with
 * `device_input`, copies the inputs to device memory for the runs. */
static infd_status worker_init(bench_worker *w, bool pinned, bool device_input, infd_error *err)
{
    int n_in = infd_plan_n_inputs(w->plan), n_out = infd_plan_n_outputs(w->plan);
    w->ins = infd_calloc((size_t)n_in + 1, sizeof(*w->ins));
    w->outs = infd_calloc((size_t)n_out + 1, sizeof(*w->outs));
    w->run_ins = infd_calloc((size_t)n_in + 1, sizeof(*w->run_ins));
    w->run_outs = infd_calloc((size_t)n_out + 1, sizeof(*w->run_outs));
    w->dev_in = infd_calloc((size_t)n_in + 1, sizeof(*w->dev_in));
    if (!w->ins || !w->outs || !w->run_ins || !w->run_outs || !w->dev_in)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < n_in; i++) {
        infd_tensor_info info;
        infd_plan_input(w->plan, i, &info);
        if (infd_tensor_alloc(&w->ins[i], info.dtype, &info.shape, err) != INFD_STATUS_OK)
            return err->code;
        infd_cli_fill_random(&w->ins[i], (uint64_t)i + 1);
        w->run_ins[i] = w->ins[i];
        w->run_ins[i].owns_data = false;
        void *buf = pinned || device_input ? infd_context_input_buffer(w->ctx, i) : NULL;
        if (buf && device_input) {
            w->dev_in[i] = infd_engine_device_alloc(w->kind, w->index, info.nbytes, err);
            if (!w->dev_in[i] ||
                infd_engine_device_copy(w->kind, w->index, w->dev_in[i], w->ins[i].data,
                                        info.nbytes, true, err) != INFD_STATUS_OK)
                return err->code;
        } else if (buf) {
            memcpy(buf, w->ins[i].data, info.nbytes);
            w->run_ins[i].data = buf;
        }
    }
    if (device_input && n_in > 0 && !w->dev_in[0])
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "--device-input needs a plan on a GPU (--device cuda)");
    for (int i = 0; i < n_out; i++) {
        infd_tensor_info info;
        infd_plan_output(w->plan, i, &info);
        if (infd_tensor_alloc(&w->outs[i], info.dtype, &info.shape, err) != INFD_STATUS_OK)
            return err->code;
        w->run_outs[i] = w->outs[i];
        w->run_outs[i].owns_data = false;
        void *buf = pinned ? infd_context_output_buffer(w->ctx, i) : NULL;
        if (buf)
            w->run_outs[i].data = buf;
    }
    return INFD_STATUS_OK;
}

static void worker_fini(bench_worker *w)
{
    for (int i = 0; w->ins && i < infd_plan_n_inputs(w->plan); i++)
        infd_tensor_fini(&w->ins[i]);
    for (int i = 0; w->outs && i < infd_plan_n_outputs(w->plan); i++)
        infd_tensor_fini(&w->outs[i]);
    for (int i = 0; w->dev_in && i < infd_plan_n_inputs(w->plan); i++)
        infd_engine_device_free(w->kind, w->index, w->dev_in[i]);
    infd_free(w->dev_in);
    infd_free(w->ins);
    infd_free(w->outs);
    infd_free(w->run_ins);
    infd_free(w->run_outs);
    infd_context_destroy(w->ctx);
}

/* One run, its inputs from device memory with --device-input. */
static infd_status worker_run(bench_worker *w, int n_in, int n_out)
{
    for (int i = 0; i < n_in; i++) {
        if (w->dev_in[i] &&
            infd_context_set_device_input(w->ctx, i, w->dev_in[i], &w->err) != INFD_STATUS_OK)
            return w->err.code;
    }
    return infd_plan_run(w->plan, w->ctx, w->run_ins, n_in, w->run_outs, n_out, &w->err);
}

/* Warm-up, then (after every worker is warm) the timed runs. */
static void *worker_main(void *arg)
{
    bench_worker *w = arg;
    int n_in = infd_plan_n_inputs(w->plan), n_out = infd_plan_n_outputs(w->plan);
    for (long i = 0; i < w->warmup && w->st == INFD_STATUS_OK; i++)
        w->st = worker_run(w, n_in, n_out);
    infd_context_set_profiling(w->ctx, w->profile);
    pthread_barrier_wait(w->ready);
    w->start_ns = infd_clock_ns();
    for (long i = 0; i < w->iterations && w->st == INFD_STATUS_OK; i++) {
        uint64_t t = infd_clock_ns();
        w->st = worker_run(w, n_in, n_out);
        infd_histogram_record(w->h, infd_clock_ns() - t);
    }
    w->end_ns = infd_clock_ns();
    return NULL;
}

int infd_cli_bench(int argc, char **argv)
{
    infd_cli_common c;
    long iterations = 100, warmup = 10, n_ctx = 1;
    int json = 0, profile = 0, pinned = 0, device_input = 0;
    infd_plan *plan = NULL;
    bench_worker *ws = NULL;
    infd_histogram *h = NULL;
    pthread_barrier_t ready;
    bool barrier = false;
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
        if ((strcmp(argv[i], "--iterations") == 0 || strcmp(argv[i], "--warmup") == 0 ||
             strcmp(argv[i], "--contexts") == 0) &&
            val) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 0 || (argv[i][2] != 'w' && v < 1) || (argv[i][2] == 'c' && v > 64)) {
                fprintf(stderr, "infd bench: %s needs a number%s\n", argv[i],
                        argv[i][2] == 'c' ? " from 1 to 64" : "");
                return INFD_EXIT_USAGE;
            }
            if (argv[i][2] == 'i')
                iterations = v;
            else if (argv[i][2] == 'w')
                warmup = v;
            else
                n_ctx = v;
            i++;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--profile") == 0) {
            profile = 1;
        } else if (strcmp(argv[i], "--pinned-io") == 0) {
            pinned = 1;
        } else if (strcmp(argv[i], "--device-input") == 0) {
            device_input = 1;
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
    c.plan.max_contexts = (int)n_ctx;
    ws = infd_calloc((size_t)n_ctx, sizeof(*ws));
    h = infd_histogram_create();
    if (!ws || !h || pthread_barrier_init(&ready, NULL, (unsigned)n_ctx) != 0) {
        fprintf(stderr, "infd bench: out of memory\n");
        goto out;
    }
    barrier = true;
    uint64_t t0 = infd_clock_ns();
    if (infd_plan_create(c.model, &c.plan, &plan, &err) != INFD_STATUS_OK ||
        infd_context_create(plan, &ws[0].ctx, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd bench: %s\n", err.msg);
        goto out;
    }
    double load_ms = (double)(infd_clock_ns() - t0) / 1e6;
    for (long w = 0; w < n_ctx; w++) {
        ws[w].plan = plan;
        ws[w].warmup = warmup;
        ws[w].iterations = iterations;
        ws[w].h = h;
        ws[w].ready = &ready;
        ws[w].kind = c.plan.device;
        ws[w].index = c.plan.device_index;
        if ((w > 0 && infd_context_create(plan, &ws[w].ctx, &err) != INFD_STATUS_OK) ||
            worker_init(&ws[w], pinned, device_input, &err) != INFD_STATUS_OK)
            goto fail_msg;
    }
    int64_t batch = 1;
    {
        infd_tensor_info info;
        if (infd_plan_n_inputs(plan) > 0 && infd_plan_input(plan, 0, &info) == INFD_STATUS_OK &&
            info.shape.rank > 0)
            batch = info.shape.dims[0];
    }
    ws[0].profile = profile;
    int started = 0;
    for (long w = 1; w < n_ctx; w++) {
        if (pthread_create(&ws[w].thread, NULL, worker_main, &ws[w]) != 0)
            break;
        started++;
    }
    if (started != n_ctx - 1) { /* the barrier would never open */
        fprintf(stderr, "infd bench: cannot start %ld threads\n", n_ctx - 1);
        _exit(INFD_EXIT_FAILURE);
    }
    worker_main(&ws[0]);
    for (long w = 1; w < n_ctx; w++)
        pthread_join(ws[w].thread, NULL);
    uint64_t start = UINT64_MAX, end = 0;
    for (long w = 0; w < n_ctx; w++) {
        if (ws[w].st != INFD_STATUS_OK) {
            err = ws[w].err;
            goto fail_msg;
        }
        start = ws[w].start_ns < start ? ws[w].start_ns : start;
        end = ws[w].end_ns > end ? ws[w].end_ns : end;
    }
    double total_s = (double)(end - start) / 1e9;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mib = (double)ru.ru_maxrss / 1024.0;
    double p50 = (double)infd_histogram_quantile(h, 0.50) / 1e6;
    double p90 = (double)infd_histogram_quantile(h, 0.90) / 1e6;
    double p99 = (double)infd_histogram_quantile(h, 0.99) / 1e6;
    double tput = (double)batch * (double)iterations * (double)n_ctx / total_s;
    infd_plan_stats stats;
    infd_plan_get_stats(plan, &stats);
    int threads = c.plan.n_threads;
    const char *device = c.plan.device == INFD_DEVICE_CUDA ? "cuda" : "cpu";
    if (json) {
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"batch\": %lld, \"threads\": %d, "
               "\"precision\": \"%s\", \"iterations\": %ld, "
               "\"load_ms\": %.2f, \"p50_ms\": %.4f, \"p90_ms\": %.4f, \"p99_ms\": %.4f, "
               "\"throughput_per_s\": %.2f, \"peak_rss_mib\": %.1f, \"kernels\": %d, "
               "\"opaque_values\": %d, \"image_kernels\": %d, \"tuned\": %d, "
               "\"from_cache\": %d, \"contexts\": %ld, \"pinned_io\": %s, "
               "\"device_input\": %s}\n",
               c.model, device, (long long)batch, threads, infd_precision_name(c.plan.precision),
               iterations, load_ms, p50, p90, p99, tput, rss_mib, stats.n_kernels, stats.n_opaque,
               stats.n_image_kernels, stats.n_tuned, stats.n_from_cache, n_ctx,
               pinned ? "true" : "false", device_input ? "true" : "false");
    } else {
        printf("model       %s\n", c.model);
        printf("plan        %d nodes -> %d kernels (%d folded, %d fused), %d blocked values, "
               "arena %.1f MiB, weights %.1f MiB\n",
               stats.n_nodes_model, stats.n_kernels, stats.n_folded, stats.n_fused, stats.n_opaque,
               (double)stats.arena_bytes / 1048576.0, (double)stats.weight_bytes / 1048576.0);
        if (stats.n_image_kernels)
            printf("            the first %d kernels run image by image\n", stats.n_image_kernels);
        printf("load        %.1f ms (file to ready plan and context; %d kernels tuned, %d "
               "from the plan file)\n",
               load_ms, stats.n_tuned, stats.n_from_cache);
        printf("batch       %lld, device %s, threads %d, precision %s, %ld iterations after %ld "
               "warm-up, %ld context%s%s%s\n",
               (long long)batch, device, threads, infd_precision_name(c.plan.precision), iterations,
               warmup, n_ctx, n_ctx == 1 ? "" : "s (one thread each)", pinned ? ", pinned I/O" : "",
               device_input ? ", inputs in device memory" : "");
        printf("latency     p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n", p50, p90, p99);
        printf("throughput  %.1f samples/s\n", tput);
        printf("peak RSS    %.1f MiB\n", rss_mib);
        {
            infd_weights_stats wst; /* what the plan holds, in the form its kernels read */
            infd_weights_get_stats(infd_plan_weights(plan), &wst);
            double held = (double)(wst.host_bytes + wst.device_bytes) / 1048576.0;
            printf("memory      weights %.1f MiB as the kernels read them (host %.1f, device "
                   "%.1f), peak RSS %.2fx that\n",
                   held, (double)wst.host_bytes / 1048576.0, (double)wst.device_bytes / 1048576.0,
                   held > 0 ? rss_mib / held : 0.0);
        }
    }
    if (profile)
        print_profile(ws[0].ctx, (double)(ws[0].end_ns - ws[0].start_ns));
    rc = INFD_EXIT_OK;
    goto out;
fail_msg:
    fprintf(stderr, "infd bench: %s\n", err.msg);
out:
    for (long w = 0; ws && w < n_ctx; w++)
        if (ws[w].plan)
            worker_fini(&ws[w]);
    if (ws && ws[0].ctx && !ws[0].plan) /* created, never initialised */
        infd_context_destroy(ws[0].ctx);
    infd_free(ws);
    if (barrier)
        pthread_barrier_destroy(&ready);
    infd_histogram_destroy(h);
    infd_plan_destroy(plan);
    return rc;
}
