#!/usr/bin/python3
"""Benchmark (a) of issue #4: the raw protocol's headerless round trip through
`infd serve` against a bare Unix-socket echo of the same bytes.

    /usr/bin/python3 bench/serve_raw.py [--infd build/release/infd]
        [--echo build/release/bench_echo_server] [--shape 1,3,224,224]
        [--concurrency 1,4] [--requests 5000] [--repeat 3] [--threads N] [--json FILE]

Serves an FP32 Identity model of --shape (max_batch_size 0, no dynamic
batching: the headerless socket takes exactly the input's bytes) from a
temporary repository, starts bench_echo_server (bench/echo_server.c: one
epoll thread, store and forward, the shape of infd's raw frontend) on a
Unix socket with the same message size, and drives both with the same
client, `infd perf --unix ... --shape ... --output-bytes ...` (headerless),
--requests answered requests per run. Each concurrency level runs infd then
the echo, --repeat times; the table shows the run whose mean-latency ratio
is the median. Goal of issue #4: infd / echo <= 1.2x.

Also prints infd's own per-request split for that run (GET
/v2/models/<m>/stats deltas: queue, compute_input, compute_infer,
compute_output, whole request inside the runtime). Build the release preset
first: `ninja -C build/release infd bench_echo_server`.
"""

import argparse
import pathlib
import subprocess
import sys

import serve_common as sc

MODEL = "img"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--echo", default=None,
                    help="bench_echo_server binary (default: next to --infd)")
    ap.add_argument("--shape", default="1,3,224,224", help="FP32 input (and output) shape")
    ap.add_argument("--concurrency", default="1,4", help="comma-separated levels")
    ap.add_argument("--requests", type=int, default=5000, help="answered requests per run")
    ap.add_argument("--warmup-ms", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="infd serve --threads (engine threads per instance; 0: infd's default)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    echo_bin = pathlib.Path(args.echo or sc.build_dir_of(args.infd) / "bench_echo_server")
    if not echo_bin.is_file():
        sys.exit(f"{echo_bin} not found: ninja -C {echo_bin.parent} bench_echo_server")
    dims = tuple(int(d) for d in args.shape.split(","))
    nbytes = 4
    for d in dims:
        nbytes *= d
    levels = [int(c) for c in args.concurrency.split(",")]
    facts = sc.machine_facts(args.infd)
    serve_extra = ["--threads", args.threads] if args.threads else []
    print(f"# serve_raw: FP32 [{args.shape}] identity, {nbytes} bytes each way, "
          f"{args.requests} requests per run, engine threads {args.threads or 'default'}, "
          f"median of {args.repeat} runs")
    print(f"# {facts['cpu']}, {facts['cores']} cores, {facts['os']}, commit {facts['commit']}, "
          f"load {facts['loadavg'][0]:.2f}")

    results = []
    with sc.tempdir("infd-bench-raw-") as tmp:
        tmp = pathlib.Path(tmp)
        sc.model_repo.identity(tmp / "models", name=MODEL, dtype="FP32", dims=dims,
                               max_batch_size=0)
        echo_sock = tmp / "echo.sock"
        echo = subprocess.Popen([str(echo_bin), str(echo_sock), str(nbytes)],
                                stdin=subprocess.DEVNULL)
        try:
            with sc.Serve(args.infd, tmp / "models", tmp, *serve_extra) as srv:
                sc.wait_until(echo_sock.exists, echo, "bench_echo_server")
                sc.wait_until(srv.raw_socket(MODEL).exists, srv.proc, "the raw socket")
                for c in levels:
                    common = ["--shape", args.shape, "--dtype", "FP32", "--output-bytes", nbytes,
                              "--concurrency-range", c, "--request-count", args.requests,
                              "--warmup-ms", args.warmup_ms]
                    runs = []
                    for rep in range(args.repeat):
                        before = srv.stats(MODEL)
                        infd = sc.perf_row(sc.run_perf(
                            args.infd, ["--model", MODEL, "--unix", srv.raw_socket(MODEL)] + common,
                            tmp / "infd.csv")[0])
                        split = sc.stats_delta(before, srv.stats(MODEL))
                        echo_r = sc.perf_row(sc.run_perf(
                            args.infd, ["--model", "echo", "--unix", echo_sock] + common,
                            tmp / "echo.csv")[0])
                        run = {"concurrency": c, "infd": infd, "echo": echo_r,
                               "infd_server": split,
                               "ratio_mean": infd["mean_us"] / echo_r["mean_us"],
                               "ratio_p50": infd["p50_us"] / echo_r["p50_us"],
                               "ratio_p99": infd["p99_us"] / echo_r["p99_us"]}
                        print(f"  c={c} run {rep + 1}: infd mean {infd['mean_us']:.1f} us, "
                              f"echo mean {echo_r['mean_us']:.1f} us, "
                              f"ratio {run['ratio_mean']:.2f}x", flush=True)
                        runs.append(run)
                    best = sc.median_run(runs, lambda r: r["ratio_mean"])
                    best["runs_ratio_mean"] = [r["ratio_mean"] for r in runs]
                    results.append(best)
        finally:
            echo.terminate()
            echo.wait()

    print()
    sc.print_table(
        ["conc.", "infd mean µs", "infd p50 µs", "infd p99 µs", "echo mean µs", "echo p50 µs",
         "echo p99 µs", "infd/echo mean", "infd/echo p50", "infd/echo p99", "infd req/s",
         "echo req/s"],
        [[r["concurrency"], f"{r['infd']['mean_us']:.1f}", f"{r['infd']['p50_us']:.1f}",
          f"{r['infd']['p99_us']:.1f}", f"{r['echo']['mean_us']:.1f}",
          f"{r['echo']['p50_us']:.1f}", f"{r['echo']['p99_us']:.1f}",
          f"{r['ratio_mean']:.2f}", f"{r['ratio_p50']:.2f}", f"{r['ratio_p99']:.2f}",
          f"{r['infd']['throughput']:.0f}", f"{r['echo']['throughput']:.0f}"] for r in results])
    print()
    print("infd's own per-request split (stats endpoint, same runs):")
    sc.print_table(
        ["conc.", "queue µs", "compute_input µs", "compute_infer µs", "compute_output µs",
         "in runtime µs", "round trip µs"],
        [[r["concurrency"], f"{r['infd_server']['queue_us']:.1f}",
          f"{r['infd_server']['compute_input_us']:.1f}",
          f"{r['infd_server']['compute_infer_us']:.1f}",
          f"{r['infd_server']['compute_output_us']:.1f}",
          f"{r['infd_server']['request_us']:.1f}", f"{r['infd']['mean_us']:.1f}"]
         for r in results])
    print()
    for r in results:
        verdict = "met" if r["ratio_mean"] <= 1.2 else "NOT met"
        print(f"concurrency {r['concurrency']}: infd/echo mean {r['ratio_mean']:.2f}x "
              f"(runs: {', '.join(f'{x:.2f}' for x in r['runs_ratio_mean'])}), "
              f"goal <= 1.2x {verdict}")
    sc.write_json(args.json, {"benchmark": "serve_raw", "shape": dims, "bytes": nbytes,
                              "requests": args.requests, "repeat": args.repeat,
                              "threads": args.threads,
                              "machine": facts, "results": results})


if __name__ == "__main__":
    main()
