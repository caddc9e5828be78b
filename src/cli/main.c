/*
 * main.c - the `infd` command: dispatches to subcommands.
 *
 * Subcommands are listed once, in `commands` below, with a one-line summary
 * and the issue that builds them; `infd --help` prints that table, and a
 * subcommand that is not built yet says so and exits with status 3 so that
 * scripts cannot mistake it for success.
 */
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "infd/engine.h"
#include "infd/infd.h"

enum {
    EXIT_OK = INFD_EXIT_OK,
    EXIT_USAGE = INFD_EXIT_USAGE,
    EXIT_NOT_BUILT = INFD_EXIT_NOT_BUILT,
};

typedef struct command {
    const char *name;
    const char *usage;
    const char *summary;
    int (*main)(int argc, char **argv); /* NULL: not built yet */
    const char *issue;                  /* where it is being built, when main is NULL */
} command;

static const command commands[] = {
    { "serve",
      "serve [--model-repository models] [--http-port 8000 --grpc-port 8001 --metrics-port "
      "8002] [--model-control-mode none|poll|explicit] [--help]",
      "serve a model repository over KServe v2 HTTP and gRPC, raw sockets and Prometheus metrics",
      infd_cli_serve, NULL },
    { "run",
      "run MODEL.onnx|MODEL.plan [--input NAME=FILE.npy ...] [--output-dir DIR] [--batch N] "
      "[--shape NAME=D0,D1,..] [--threads N] [--precision fp32|tf32|bf16|fp16] [--device cpu|cuda]",
      "run a model once and print or write its outputs", infd_cli_run, NULL },
    { "bench",
      "bench MODEL.onnx|MODEL.plan [--batch N] [--threads N] [--iterations N] [--shape ..] "
      "[--precision fp32|tf32|bf16|fp16] [--device cpu|cuda] [--json]",
      "measure a model's latency and throughput in the engine", infd_cli_bench, NULL },
    { "build",
      "build MODEL.onnx -o MODEL.plan [--device cpu|cuda] "
      "[--precision fp32|tf32|bf16|fp16 | --fp16] "
      "[--max-batch N | --batch N] [--shape NAME=D0,D1,..] [--threads N]",
      "compile and tune a model into a plan file (run, bench and serve load it)", infd_cli_build,
      NULL },
    { "perf",
      "perf --model NAME (--url HOST:PORT | --unix PATH) [--protocol http|raw|grpc] "
      "[--streaming] [--binary] [--framed] [--concurrency-range 1:64:2] "
      "[--request-count N | --measurement-ms MS] "
      "[--batch-size N] [--input-data zero|random] [--csv FILE] (--help for more)",
      "load-generate against a running server and report latency/throughput", infd_cli_perf, NULL },
    { "asr",
      "asr MODEL_DIR FILE... [--stream [--chunk-ms N]] [--device cpu|cuda] [--json] | "
      "asr --features FILE",
      "transcribe speech with a Parakeet-TDT model, offline or streaming", infd_cli_asr, NULL },
    { "video",
      "video [--listen srt://:9000] [--model blazeface|DIR] [--device cpu|cuda] [--passphrase P] "
      "[--latency-ms N]",
      "live face detection: H.264 over SRT in, boxes drawn, H.264 over SRT out", infd_cli_video,
      NULL },
    { "router",
      "router --etcd URL[,URL...] [--http-port 8000 --grpc-port 8001 --metrics-port 8002]",
      "spread requests over infd workers registered in etcd", infd_cli_router, NULL },
};

static void print_version(FILE *out)
{
    infd_error err = { 0 };
    fprintf(out, "infd %s (git %s)\n", infd_version(), infd_version_git());

    char cpu[256];
    infd_engine_device_describe(INFD_DEVICE_CPU, 0, cpu, sizeof(cpu), NULL);
    fprintf(out, "cpu backend: %s\n", cpu);

    if (!infd_engine_has_backend(INFD_DEVICE_CUDA)) {
        fprintf(out, "cuda backend: not built (nvcc was not found at configure time)\n");
        return;
    }
    int n = infd_engine_device_count(INFD_DEVICE_CUDA, &err);
    if (n == 0) {
        fprintf(out, "cuda backend: built; no usable GPU (%s)\n", err.msg);
        return;
    }
    fprintf(out, "cuda backend: built; %d GPU%s\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        char desc[256];
        if (infd_engine_device_describe(INFD_DEVICE_CUDA, i, desc, sizeof(desc), &err) ==
            INFD_STATUS_OK)
            fprintf(out, "  gpu %d: %s\n", i, desc);
        else
            fprintf(out, "  gpu %d: %s\n", i, err.msg);
    }
}

static void print_help(FILE *out)
{
    fprintf(out,
            "infd %s - inference server and engine for ONNX models\n"
            "\n"
            "usage: infd <command> [options]\n"
            "       infd --version | --help\n"
            "\n"
            "commands:\n",
            infd_version());
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        const command *c = &commands[i];
        fprintf(out, "  %-8s %s%s\n", c->name, c->summary, c->main ? "" : " [not built yet]");
    }
    fprintf(out, "\nusage of each command:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  infd %s\n", commands[i].usage);
    fprintf(out, "\nprecision (--precision of run, bench and build):\n"
                 "  fp32  FP32 throughout (the default); on CUDA strict FP32, no TF32\n"
                 "  tf32  CUDA only: tensors stay FP32, convolutions and matmuls run on TF32\n"
                 "        tensor cores (10-bit mantissa inputs, FP32 accumulation)\n"
                 "  bf16  CPU (AVX512-BF16 or AMX) and CUDA: BF16 multiplies, FP32 accumulation\n"
                 "  fp16  CUDA only: FP16 on tensor cores, FP32 accumulation\n");
    fprintf(out, "\nenvironment:\n"
                 "  INFD_LOG_LEVEL  error, warn, info (default), debug or trace\n"
                 "\nexit status: 0 ok, 1 failure, 2 usage error, 3 command not built yet,\n"
                 "             4 the model needs an operator infd does not support\n");
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

int main(int argc, char **argv)
{
#ifdef M_MMAP_THRESHOLD
    /* Blocks of 256 KiB and more come from mmap and go back to the kernel
     * when freed. glibc's default threshold is dynamic: the first free of a
     * large block raises it up to 32 MiB, after which the weights a model
     * load makes and frees (a plan's folded constants, the model as loaded)
     * stay in the heap. Served ResNet-50 with 3 plans: VmRSS 319 MB
     * with the dynamic threshold, 196 MB with this one. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
    if (argc < 2) {
        print_help(stderr);
        return EXIT_USAGE;
    }
    const char *arg = argv[1];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0 || strcmp(arg, "help") == 0) {
        print_help(stdout);
        return EXIT_OK;
    }
    if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0 || strcmp(arg, "version") == 0) {
        print_version(stdout);
        return EXIT_OK;
    }
    const command *c = find_command(arg);
    if (!c) {
        fprintf(stderr, "infd: unknown command '%s' (see 'infd --help')\n", arg);
        return EXIT_USAGE;
    }
    if (!c->main) {
        fprintf(stderr,
                "infd %s: not built yet (being built in issue %s)\n"
                "usage: infd %s\n",
                c->name, c->issue, c->usage);
        return EXIT_NOT_BUILT;
    }
    return c->main(argc - 1, argv + 1);
}
