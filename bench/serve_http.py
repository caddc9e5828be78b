#!/usr/bin/python3
"""Benchmark (b) of issue #4: HTTP binary small-tensor inference through
`infd serve` (add_sub, 1x16 FP32, Triton's binary tensor extension), driven
by `infd perf` and by wrk, next to wrk against GET /v2/health/live.

    /usr/bin/python3 bench/serve_http.py [--infd build/release/infd]
        [--concurrency 1,2,4,8,16,32,64] [--seconds 3] [--c1-seconds 10]
        [--repeat 3] [--threads N] [--http-threads 1] [--delay-us -1] [--json FILE]

Serves Triton's add_sub model (INPUT0 + INPUT1, INPUT0 - INPUT1, FP32 [1,16],
max_batch_size 8) from a temporary repository. By default without a dynamic
batcher, like Triton's `simple` model: a batcher with a queue delay would
hold every lone request for that delay, which is the batcher's price, not
the server's (--delay-us N adds `dynamic_batching` with that delay).

1. Added cost at concurrency 1: `wrk -t1 -c1 -d<c1-seconds>s --latency`
   POSTing the same binary request infd perf sends (a Lua script sets the
   body and Inference-Header-Content-Length) to /v2/models/add_sub/infer,
   and the same wrk against GET /v2/health/live, the bare-HTTP baseline of
   the same server. infd's added cost per request = infer latency - health
   latency (mean and p50). Issue #4's goal: < 20 us (Triton adds about 60).
   Also infd's own split per request from GET /v2/models/add_sub/stats
   (queue, compute) over the infer run.
2. Sweep: at each concurrency, `infd perf --protocol http --binary` (one
   thread, C keep-alive connections), wrk infer and wrk health/live (-t1 -cC),
   --seconds each: throughput, p50 and p99.

Every measurement runs --repeat times; the tables show the median run (of
the added cost at concurrency 1, of the throughput per tool in the sweep).
"""

import argparse
import json
import pathlib
import urllib.request

import numpy as np

import serve_common as sc

MODEL = "add_sub"


def binary_body(rng):
    """The request infd perf --binary sends for add_sub at batch 1: JSON
    header (inputs with binary_data_size, binary_data_output) + 2 x 64 bytes."""
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        inputs.append(f'{{"name":"{name}","shape":[1,16],"datatype":"FP32",'
                      f'"parameters":{{"binary_data_size":64}}}}')
    header = ('{"inputs":[' + ",".join(inputs) + '],'
              '"parameters":{"binary_data_output":true}}').encode()
    data = rng.standard_normal(32).astype("<f4").tobytes()
    return header, header + data


def check_body(url, header, body):
    """One POST of the body; exits unless the answer is 200 with 2 outputs."""
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header))})
    with urllib.request.urlopen(req, timeout=10) as r:
        ans = r.read()
        n = int(r.headers["Inference-Header-Content-Length"])
    meta = json.loads(ans[:n])
    if len(meta["outputs"]) != 2 or len(ans) != n + 128:
        raise SystemExit(f"unexpected answer to the wrk body: {meta}")


def fmt(x, digits=1):
    return f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--seconds", type=int, default=3, help="window per sweep measurement")
    ap.add_argument("--c1-seconds", type=int, default=10, help="window of the added-cost runs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="infd serve --threads (engine threads per instance; 0: infd's default)")
    ap.add_argument("--http-threads", type=int, default=1)
    ap.add_argument("--delay-us", type=int, default=-1,
                    help="dynamic batching with this max_queue_delay_microseconds (-1: none)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    facts = sc.machine_facts(args.infd)
    serve_extra = ["--threads", args.threads] if args.threads else []
    print(f"# serve_http: add_sub FP32 [1,16] binary, http threads {args.http_threads}, "
          f"engine threads {args.threads or 'default'}, "
          f"dynamic batching {'off' if args.delay_us < 0 else f'{args.delay_us} us'}, "
          f"median of {args.repeat} runs")
    print(f"# {facts['cpu']}, {facts['cores']} cores, {facts['os']}, commit {facts['commit']}, "
          f"load {facts['loadavg'][0]:.2f}")

    out = {"benchmark": "serve_http", "machine": facts, "repeat": args.repeat,
           "http_threads": args.http_threads, "threads": args.threads,
           "delay_us": args.delay_us}
    with sc.tempdir("infd-bench-http-") as tmp:
        tmp = pathlib.Path(tmp)
        db = None if args.delay_us < 0 else {"max_queue_delay_microseconds": args.delay_us}
        sc.model_repo.add_sub(tmp / "models", dynamic_batching=db)
        header, body = binary_body(np.random.default_rng(1))
        (tmp / "body.bin").write_bytes(body)
        lua = tmp / "infer.lua"
        lua.write_text(sc.WRK_POST_LUA.format(body=tmp / "body.bin", json_len=len(header)))
        with sc.Serve(args.infd, tmp / "models", tmp, "--http-threads", args.http_threads,
                      *serve_extra) as srv:
            infer_url = f"{srv.url}/v2/models/{MODEL}/infer"
            live_url = f"{srv.url}/v2/health/live"
            check_body(infer_url, header, body)
            perf_args = ["--model", MODEL, "--url", srv.hostport, "--protocol", "http",
                         "--binary", "--warmup-ms", 500]

            # 1. Added cost at concurrency 1.
            runs = []
            for rep in range(args.repeat):
                health = sc.run_wrk(live_url, 1, args.c1_seconds)
                before = srv.stats(MODEL)
                infer = sc.run_wrk(infer_url, 1, args.c1_seconds, lua=lua)
                split = sc.stats_delta(before, srv.stats(MODEL))
                perf = sc.perf_row(sc.run_perf(
                    args.infd, perf_args + ["--concurrency-range", 1,
                                            "--measurement-ms", args.c1_seconds * 1000],
                    tmp / "perf.csv")[0])
                run = {"wrk_health": health, "wrk_infer": infer, "infd_perf": perf,
                       "infd_server": split,
                       "added_mean_us": infer["mean_us"] - health["mean_us"],
                       "added_p50_us": infer["p50_us"] - health["p50_us"]}
                print(f"  c=1 run {rep + 1}: health {health['mean_us']:.1f} us, infer "
                      f"{infer['mean_us']:.1f} us, added {run['added_mean_us']:.1f} us, "
                      f"infd perf {perf['mean_us']:.1f} us", flush=True)
                runs.append(run)
            c1 = sc.median_run(runs, lambda r: r["added_mean_us"])
            c1["runs_added_mean_us"] = [r["added_mean_us"] for r in runs]
            out["c1"] = c1

            # 2. Sweep.
            sweep = []
            for c in levels:
                per = {"perf": [], "infer": [], "health": [], "split": []}
                for rep in range(args.repeat):
                    before = srv.stats(MODEL)
                    per["perf"].append(sc.perf_row(sc.run_perf(
                        args.infd, perf_args + ["--concurrency-range", c,
                                                "--measurement-ms", args.seconds * 1000],
                        tmp / "perf.csv")[0]))
                    per["split"].append(sc.stats_delta(before, srv.stats(MODEL)))
                    per["infer"].append(sc.run_wrk(infer_url, c, args.seconds, lua=lua))
                    per["health"].append(sc.run_wrk(live_url, c, args.seconds))
                    print(f"  c={c} run {rep + 1}: infd perf {per['perf'][-1]['throughput']:.0f}/s"
                          f", wrk infer {per['infer'][-1]['throughput']:.0f}/s, wrk health "
                          f"{per['health'][-1]['throughput']:.0f}/s", flush=True)
                i_perf = per["perf"].index(sc.median_run(per["perf"], lambda r: r["throughput"]))
                sweep.append({
                    "concurrency": c, "infd_perf": per["perf"][i_perf],
                    "infd_server": per["split"][i_perf],
                    "wrk_infer": sc.median_run(per["infer"], lambda r: r["throughput"]),
                    "wrk_health": sc.median_run(per["health"], lambda r: r["throughput"])})
            out["sweep"] = sweep

    print()
    print("Added cost at concurrency 1 (wrk -t1 -c1, median run):")
    h, i, p, s = c1["wrk_health"], c1["wrk_infer"], c1["infd_perf"], c1["infd_server"]
    sc.print_table(
        ["client", "endpoint", "req/s", "mean µs", "p50 µs", "p99 µs"],
        [["wrk", "GET /v2/health/live", fmt(h["throughput"], 0), fmt(h["mean_us"]),
          fmt(h["p50_us"]), fmt(h["p99_us"])],
         ["wrk", "POST .../add_sub/infer (binary)", fmt(i["throughput"], 0), fmt(i["mean_us"]),
          fmt(i["p50_us"]), fmt(i["p99_us"])],
         ["infd perf", "POST .../add_sub/infer (binary)", fmt(p["throughput"], 0),
          fmt(p["mean_us"]), fmt(p["p50_us"]), fmt(p["p99_us"])]])
    print()
    print(f"infd adds {c1['added_mean_us']:.1f} us (mean; p50: {c1['added_p50_us']:.1f} us) per "
          f"request over bare HTTP (runs: "
          f"{', '.join(f'{x:.1f}' for x in c1['runs_added_mean_us'])}); goal < 20 us "
          f"{'met' if c1['added_mean_us'] < 20 else 'NOT met'}")
    print(f"infd's own split per request (stats): queue {s['queue_us']:.1f} us, compute_input "
          f"{s['compute_input_us']:.1f}, compute_infer {s['compute_infer_us']:.1f}, "
          f"compute_output {s['compute_output_us']:.1f}; whole request in the runtime "
          f"{s['request_us']:.1f} us")
    print()
    print("Sweep (median run per tool):")
    sc.print_table(
        ["conc.", "infd perf req/s", "infd perf p50 µs", "infd perf p99 µs", "wrk infer req/s",
         "wrk infer p50 µs", "wrk infer p99 µs", "wrk live req/s", "wrk live p99 µs",
         "queue µs", "compute µs", "batches (size: n)"],
        [[r["concurrency"], fmt(r["infd_perf"]["throughput"], 0), fmt(r["infd_perf"]["p50_us"]),
          fmt(r["infd_perf"]["p99_us"]), fmt(r["wrk_infer"]["throughput"], 0),
          fmt(r["wrk_infer"]["p50_us"]), fmt(r["wrk_infer"]["p99_us"]),
          fmt(r["wrk_health"]["throughput"], 0), fmt(r["wrk_health"]["p99_us"]),
          fmt(r["infd_server"]["queue_us"]),
          fmt(r["infd_server"]["compute_input_us"] + r["infd_server"]["compute_infer_us"]
              + r["infd_server"]["compute_output_us"]),
          " ".join(f"{k}:{v}" for k, v in r["infd_server"]["batches"].items())]
         for r in sweep])
    sc.write_json(args.json, out)


if __name__ == "__main__":
    main()
