#!/usr/bin/env python3
"""Jobs per second through the Redis job queue (`infd serve --redis`),
against the same model over HTTP with binary tensors in the same run.

For each model (add_sub, BlazeFace front):
  1. a fresh redis-server on a free port (no persistence, or --aof for
     appendonly everysec) and `infd serve --redis` on the default models;
  2. backlog: N jobs are put in the model's stream (pipelined XADD) before
     infd starts; their drain rate is N over the window from the first
     job's started_at to the last one's finished_at (the results' own
     timestamps);
  3. live: N more jobs are submitted while infd runs, timed from the first
     XADD to the moment `infd_redis_jobs_completed_total` (metrics port)
     reaches 2N; every result is then read back and checked OK;
  4. batch fill, over the live run: inference_count / execution_count
     against max_batch_size;
  5. then `infd perf --binary` over HTTP at the same concurrency as the
     queue's in-flight cap (64), on the same server.

Usage: python3 bench/redis_queue.py [--jobs 20000] [--blazeface-jobs 3000] [--aof]
Nothing here asserts on time; RESULTS.md records the numbers.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import redis

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_common import DEFAULT_INFD, ROOT, Serve, free_port, run_perf, perf_row  # noqa: E402


def start_redis(tmp, aof):
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp),
            "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", "everysec"] if aof else ["--appendonly", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    c = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):
        try:
            c.ping()
            return proc, port
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    sys.exit("redis-server did not start")


def completed(metrics_url, model):
    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f'infd_redis_jobs_completed_total{{model="{model}"}}'):
                return int(float(line.rsplit(" ", 1)[1]))
    return 0


def jobs_add_sub(n, rng, tag):
    for k in range(n):
        a = rng.random(16, dtype=np.float32)
        b = rng.random(16, dtype=np.float32)
        header = {"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
             "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16],
             "parameters": {"binary_data_size": 64}}]}
        yield {"id": f"{tag}{k}", "header": json.dumps(header), "binary": a.tobytes() + b.tobytes()}


def jobs_blazeface(n, rng, tag):
    header = json.dumps({"inputs": [{"name": "input:0", "datatype": "FP32",
                                     "shape": [1, 128, 128, 3],
                                     "parameters": {"binary_data_size": 128 * 128 * 3 * 4}}],
                         "parameters": {"binary_data_output": True}})
    img = (rng.random((128, 128, 3), dtype=np.float32) * 2 - 1).tobytes()
    for k in range(n):
        yield {"id": f"{tag}{k}", "header": header, "binary": img}


def submit(c, model, jobs):
    pipe = c.pipeline(transaction=False)
    ids = []
    for k, job in enumerate(jobs):
        pipe.xadd(f"infd:jobs:{model}", job)
        ids.append(job["id"])
        if k % 500 == 499:
            pipe.execute()
    pipe.execute()
    return ids


def results(c, ids):
    out = []
    for k in range(0, len(ids), 1000):
        for v in c.mget([f"results:{i}" for i in ids[k:k + 1000]]):
            out.append(None if v is None else json.loads(v.partition(b"\n")[0]))
    return out


def run_model(args, model, n, jobs, tmp):
    """Backlog: n jobs queued before infd starts, drained (the window from
    the first job's start to the last one's finish, from the results'
    timestamps). Live: n more jobs submitted while infd runs (wall time
    from the first XADD to the last result). Then HTTP binary."""
    rproc, rport = start_redis(tmp, args.aof)
    metrics_port = free_port()
    c = redis.Redis(host="127.0.0.1", port=rport)
    rng = np.random.default_rng(0)
    backlog = submit(c, model, jobs(n, rng, "b"))
    try:
        with Serve(args.infd, ROOT / "models", tmp, "--redis", f"redis://127.0.0.1:{rport}",
                   "--redis-models", model, "--metrics-port", metrics_port) as srv:
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            while completed(metrics_url, model) < n:
                time.sleep(0.01)
            res = results(c, backlog)
            ok_b = sum(r is not None and r["status"] == "ok" for r in res)
            window_ms = max(r["finished_at"] for r in res) - min(r["started_at"] for r in res)
            before = srv.stats(model)
            t0 = time.perf_counter()
            live = submit(c, model, jobs(n, rng, "l"))
            t_sent = time.perf_counter()
            while completed(metrics_url, model) < 2 * n:
                time.sleep(0.01)
            t1 = time.perf_counter()
            after = srv.stats(model)
            ok_l = sum(r is not None and r["status"] == "ok" for r in results(c, live))
            rows = after["inference_count"] - before["inference_count"]
            execs = after["execution_count"] - before["execution_count"]
            max_batch = 8  # both models' config.pbtxt
            perf = perf_row(run_perf(args.infd, [
                "--model", model, "--url", srv.hostport, "--binary",
                "--concurrency-range", "64:64:1", "--measurement-ms", "5000"],
                pathlib.Path(tmp) / "perf.csv")[0])
    finally:
        rproc.terminate()
        rproc.wait()
    return {"model": model, "jobs": n, "ok": ok_b + ok_l,
            "backlog_jobs_per_s": n / (window_ms / 1000.0) if window_ms > 0 else 0.0,
            "live_seconds": t1 - t0, "live_jobs_per_s": n / (t1 - t0),
            "submit_seconds": t_sent - t0,
            "mean_batch": rows / execs if execs else 0.0,
            "batch_fill": rows / execs / max_batch if execs else 0.0,
            "http_binary_per_s": perf["throughput"], "http_p50_us": perf["p50_us"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(DEFAULT_INFD))
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--blazeface-jobs", type=int, default=3000)
    ap.add_argument("--aof", action="store_true", help="Redis with appendonly everysec")
    ap.add_argument("--json")
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="infd-redisq-") as tmp:
        for model, n, jobs in (("add_sub", args.jobs, jobs_add_sub),
                               ("blazeface", args.blazeface_jobs, jobs_blazeface)):
            d = pathlib.Path(tmp) / model
            d.mkdir()
            r = run_model(args, model, n, jobs, d)
            out.append(r)
            print(f"{model}: 2 x {r['jobs']} jobs, {r['ok']} OK results; backlog drained at "
                  f"{r['backlog_jobs_per_s']:.0f} jobs/s; live: {r['live_seconds']:.2f} s = "
                  f"{r['live_jobs_per_s']:.0f} jobs/s (submitting took "
                  f"{r['submit_seconds']:.2f} s), "
                  f"mean batch {r['mean_batch']:.2f} = {100 * r['batch_fill']:.0f}% of max; "
                  f"HTTP binary at concurrency 64: {r['http_binary_per_s']:.0f} infer/s "
                  f"(p50 {r['http_p50_us']:.0f} us)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
