#!/usr/bin/python3
"""Benchmark (c) of issue #4: BlazeFace through `infd serve` over HTTP
(binary tensors) with dynamic batching, against the engine alone
(`infd bench` at the same batch) on the same ONNX file.

    /usr/bin/python3 bench/serve_blazeface.py [--infd build/release/infd]
        [--model-dir models/blazeface] [--concurrency 16,32] [--seconds 5]
        [--batch 8] [--iterations 2000] [--threads T] [--repeat 3] [--json FILE]

Copies the default repository's BlazeFace (config.pbtxt: max_batch_size 8,
dynamic batching with preferred sizes 4 and 8, 500 us queue delay, one
instance; 1/model.onnx from scripts/gen_repository.py) into a temporary
repository, serves it with --threads engine threads (default: infd serve's
own default for one instance, (cores - 1), at least 1), and drives it with
`infd perf --protocol http --binary` (one 1x128x128x3 image per request,
random data) at each concurrency for --seconds. The engine-only peer is
`infd bench <model.onnx> --batch 8 --threads T --iterations N`: images/s at
the batch the server forms when it is full. Ratio = served images/s /
engine images/s; issue #4's goal: >= 0.9.

The stats endpoint's deltas over each served run give the batches actually
formed (batch_stats: executions per batch size), the engine time of one
batch of 8 inside the server (to compare with infd bench's), and queue and
compute per request. Each measurement runs --repeat times; the table shows
the run with the median images/s.
"""

import argparse
import json
import pathlib
import os
import shutil
import subprocess
import sys

import serve_common as sc

MODEL = "blazeface"


def engine_bench(infd, onnx_path, batch, threads, iterations):
    cmd = [str(infd), "bench", str(onnx_path), "--batch", str(batch), "--threads", str(threads),
           "--iterations", str(iterations), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"infd bench failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    return {"throughput": res["throughput_per_s"], "p50_ms": res["p50_ms"],
            "p99_ms": res["p99_ms"], "command": " ".join(cmd)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--model-dir", default=str(sc.ROOT / "models" / MODEL),
                    help="model folder with config.pbtxt and 1/model.onnx")
    ap.add_argument("--concurrency", default="16,32")
    ap.add_argument("--seconds", type=int, default=5, help="window per served run")
    ap.add_argument("--batch", type=int, default=8, help="infd bench's batch")
    ap.add_argument("--iterations", type=int, default=2000, help="infd bench's runs")
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 1) - 1),
                    help="engine threads, both sides (default: infd serve's default for one "
                         "instance, cores - 1)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    model_dir = pathlib.Path(args.model_dir)
    onnx_path = model_dir / "1" / "model.onnx"
    if not onnx_path.is_file():
        sys.exit(f"{onnx_path} not found: scripts/setup.sh generates it")
    levels = [int(c) for c in args.concurrency.split(",")]
    facts = sc.machine_facts(args.infd)
    print(f"# serve_blazeface: {onnx_path}, engine threads {args.threads}, "
          f"median of {args.repeat} runs")
    print(f"# {facts['cpu']}, {facts['cores']} cores, {facts['os']}, commit {facts['commit']}, "
          f"load {facts['loadavg'][0]:.2f}")

    runs = []
    for rep in range(args.repeat):
        runs.append(engine_bench(args.infd, onnx_path, args.batch, args.threads,
                                 args.iterations))
        print(f"  engine run {rep + 1}: {runs[-1]['throughput']:.1f} images/s", flush=True)
    engine = sc.median_run(runs, lambda r: r["throughput"])

    served = []
    with sc.tempdir("infd-bench-blazeface-") as tmp:
        tmp = pathlib.Path(tmp)
        dst = tmp / "models" / MODEL
        (dst / "1").mkdir(parents=True)
        shutil.copyfile(model_dir / "config.pbtxt", dst / "config.pbtxt")
        shutil.copyfile(onnx_path, dst / "1" / "model.onnx")
        with sc.Serve(args.infd, tmp / "models", tmp, "--threads", args.threads) as srv:
            for c in levels:
                runs = []
                for rep in range(args.repeat):
                    before = srv.stats(MODEL)
                    perf = sc.perf_row(sc.run_perf(
                        args.infd, ["--model", MODEL, "--url", srv.hostport, "--protocol", "http",
                                    "--binary", "--concurrency-range", c, "--measurement-ms",
                                    args.seconds * 1000, "--warmup-ms", 1000],
                        tmp / "perf.csv")[0])
                    split = sc.stats_delta(before, srv.stats(MODEL))
                    runs.append({"concurrency": c, "infd_perf": perf, "infd_server": split,
                                 "ratio": perf["throughput"] / engine["throughput"]})
                    print(f"  c={c} run {rep + 1}: {perf['throughput']:.1f} images/s "
                          f"({runs[-1]['ratio']:.2f}x engine), batches {split['batches']}",
                          flush=True)
                best = sc.median_run(runs, lambda r: r["infd_perf"]["throughput"])
                best["runs_ratio"] = [r["ratio"] for r in runs]
                served.append(best)

    print()
    print(f"Engine alone: infd bench --batch {args.batch} --threads {args.threads}: "
          f"{engine['throughput']:.1f} images/s, p50 {engine['p50_ms'] * 1000:.0f} us per batch")
    print()

    def batches_text(b):
        total = sum(b.values()) or 1
        return ", ".join(f"{k}: {v} ({100.0 * v / total:.0f}%)" for k, v in b.items())

    sc.print_table(
        ["conc.", "served images/s", "engine images/s", "served/engine", "p50 µs", "p99 µs",
         "batches formed (size: executions)", "b8 compute µs (serve)", "b8 p50 µs (bench)",
         "queue µs/req", "compute µs/req"],
        [[r["concurrency"], f"{r['infd_perf']['throughput']:.1f}", f"{engine['throughput']:.1f}",
          f"{r['ratio']:.2f}", f"{r['infd_perf']['p50_us']:.0f}",
          f"{r['infd_perf']['p99_us']:.0f}", batches_text(r["infd_server"]["batches"]),
          f"{r['infd_server']['batch_compute_infer_us'].get(args.batch, 0.0):.0f}",
          f"{engine['p50_ms'] * 1000:.0f}", f"{r['infd_server']['queue_us']:.0f}",
          f"{r['infd_server']['compute_input_us'] + r['infd_server']['compute_infer_us'] + r['infd_server']['compute_output_us']:.0f}"]
         for r in served])
    print()
    for r in served:
        print(f"concurrency {r['concurrency']}: served/engine {r['ratio']:.2f} (runs: "
              f"{', '.join(f'{x:.2f}' for x in r['runs_ratio'])}), goal >= 0.90 "
              f"{'met' if r['ratio'] >= 0.9 else 'NOT met'}")
    sc.write_json(args.json, {"benchmark": "serve_blazeface", "machine": facts,
                              "repeat": args.repeat, "threads": args.threads,
                              "engine": engine, "served": served})


if __name__ == "__main__":
    main()
