#!/usr/bin/env python3
"""`infd router` scaling and throughput per core (issue #23), meant for the
16-core GPU machine: an identity model with 4 KB tensors (FP32 [1024]) on
N CPU workers (`infd serve --cluster`, each pinned to its own cores), one
`infd router` pinned to ROUTER cores, and `infd perf --binary` clients over
HTTP pinned to the remaining cores. For each N: the throughput through the
router against the same workers reached directly (each client process
driving one worker), in one run. With the router on one core, its
throughput is the "per core" figure (goal >= 20,000 requests/s).

etcd (one member, Debian's etcd-server binary) holds the registrations.

Usage: python3 bench/router_scaling.py --infd INFD [--etcd ETCD]
         [--workers 1,2,4] [--router-cpus 0] [--worker-cpus 1-2,3-4,5-6,7-8]
         [--client-cpus 9-15] [--clients 4] [--concurrency 32]
         [--router-threads 1] [--measurement-ms 4000] [--worker-args "..."]
         [--json OUT]
"""

import argparse
import csv
import json
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from router import identity_model, ready  # noqa: E402
from serve_common import DEFAULT_INFD, free_port  # noqa: E402


def wait(url, proc, what, timeout=60):
    deadline = time.time() + timeout
    while not ready(url):
        if time.time() > deadline or proc.poll() is not None:
            sys.exit(f"{what} never became ready ({url})")
        time.sleep(0.1)


def pinned(cpus, cmd):
    return ["taskset", "-c", cpus] + cmd if cpus else cmd


def perf_many(infd, targets, cpus, conc, ms, tmp, tag):
    """One `infd perf` process per target (host:port), all at once; the
    summed throughput and the worst p50/p99."""
    procs = []
    for i, hp in enumerate(targets):
        path = tmp / f"{tag}-{i}.csv"
        cmd = pinned(cpus, [infd, "perf", "--model", "identity", "--url", hp, "--binary",
                            "--concurrency-range", f"{conc}:{conc}:1", "--measurement-ms",
                            str(ms), "--csv", str(path)])
        procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True), path))
    tput, p50, p99, each = 0.0, 0.0, 0.0, []
    for p, path in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"infd perf failed: {out}")
        with open(path, newline="") as f:
            row = next(csv.DictReader(f))
        if float(row["Errors"]) or float(row["Total Errors"]):
            sys.exit(f"infd perf saw errors: {out}")
        tput += float(row["Inferences/Second"])
        each.append(round(float(row["Inferences/Second"])))
        p50 = max(p50, float(row["p50 latency"]))
        p99 = max(p99, float(row["p99 latency"]))
    return {"throughput": tput, "p50_us": p50, "p99_us": p99, "per_client": each}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(DEFAULT_INFD))
    ap.add_argument("--etcd", default="etcd")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--router-cpus", default="0")
    ap.add_argument("--worker-cpus", default="1-2,3-4,5-6,7-8")
    ap.add_argument("--client-cpus", default="9-15")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--router-threads", type=int, default=1)
    ap.add_argument("--measurement-ms", type=int, default=4000)
    ap.add_argument("--worker-args", default="",
                    help="more `infd serve` options for the workers, space-separated")
    ap.add_argument("--json")
    args = ap.parse_args()
    worker_cpus = args.worker_cpus.split(",")
    counts = [int(n) for n in args.workers.split(",")]
    if max(counts) > len(worker_cpus):
        sys.exit("--worker-cpus names fewer core sets than workers")
    results = []
    with tempfile.TemporaryDirectory(prefix="infd-router-scaling-") as tmp:
        tmp = pathlib.Path(tmp)
        identity_model(tmp / "repo")
        cport, pport = free_port(), free_port()
        endpoint = f"http://127.0.0.1:{cport}"
        etcd = subprocess.Popen(
            [args.etcd, "--data-dir", str(tmp / "etcd"), "--listen-client-urls", endpoint,
             "--advertise-client-urls", endpoint, "--listen-peer-urls",
             f"http://127.0.0.1:{pport}", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs = []
        try:
            for n in counts:
                workers = []
                for i in range(n):
                    hp = free_port()
                    p = subprocess.Popen(pinned(worker_cpus[i], [
                        args.infd, "serve", "--model-repository", str(tmp / "repo"),
                        "--host", "127.0.0.1", "--http-port", str(hp), "--grpc-port", "-1",
                        "--metrics-port", "-1", "--raw-socket-dir", "off",
                        "--http-threads", "2", "--log-level", "warn",
                        "--cluster", endpoint, "--cluster-id", f"n{n}w{i}",
                        "--advertise", f"tcp://127.0.0.1:{free_port()}",
                        *args.worker_args.split()]),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    procs.append(p)
                    workers.append((p, f"127.0.0.1:{hp}"))
                    wait(f"http://127.0.0.1:{hp}/v2/health/ready", p, "a worker")
                rport = free_port()
                router = subprocess.Popen(pinned(args.router_cpus, [
                    args.infd, "router", "--etcd", endpoint, "--host", "127.0.0.1",
                    "--http-port", str(rport), "--grpc-port", "-1", "--metrics-port", "-1",
                    "--http-threads", str(args.router_threads), "--log-level", "warn"]),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(router)
                wait(f"http://127.0.0.1:{rport}/v2/models/identity/ready", router, "the router")
                time.sleep(1.0)  # every worker live at the router
                direct = perf_many(args.infd, [workers[i % n][1] for i in range(args.clients)],
                                   args.client_cpus, args.concurrency, args.measurement_ms, tmp,
                                   f"d{n}")
                routed = perf_many(args.infd, [f"127.0.0.1:{rport}"] * args.clients,
                                   args.client_cpus, args.concurrency, args.measurement_ms, tmp,
                                   f"r{n}")
                row = {"workers": n, "direct": direct, "router": routed}
                results.append(row)
                print(f"{n} worker(s): direct {direct['throughput']:9.0f}/s "
                      f"(p50 {direct['p50_us']:.0f} us), through the router "
                      f"{routed['throughput']:9.0f}/s (p50 {routed['p50_us']:.0f} us, "
                      f"p99 {routed['p99_us']:.0f} us), {routed['throughput'] / direct['throughput']:.2f}"
                      f" of direct; per client direct {direct['per_client']}, routed "
                      f"{routed['per_client']}", flush=True)
                for p in [router] + [w for w, _ in workers]:
                    p.terminate()
                    p.wait(timeout=30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            etcd.terminate()
            etcd.wait(timeout=30)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
