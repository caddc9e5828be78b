#!/usr/bin/python3
"""Hostile slow clients against `infd serve` (issue #24): Debian's
slowhttptest opens 1,000 connections in slow-header (Slowloris), slow-body
(R-U-Dead-Yet) and slow-read mode, and meanwhile a well-behaved client
(`infd perf`, HTTP binary, add_sub, concurrency 1) measures its latency.
The goal: the service stays available and the well-behaved client's p99
stays within 2x of its baseline (measured before each attack, on the same
server).

    /usr/bin/python3 bench/slow_clients.py [--infd build/release/infd]
        [--connections 1000] [--seconds 3] [--json FILE]

slowhttptest runs on its own (started here, stopped by PID), with its file
limit raised for the connections; it reports how many connections it held
open. Nothing here asserts on time: bench/RESULTS.md records the numbers.
"""

import argparse
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

import serve_common as sc

MODES = {
    # name: slowhttptest options
    "slow headers (-H)": ["-H", "-i", "5", "-t", "GET"],
    "slow body (-B)": ["-B", "-i", "5", "-s", "1048576", "-t", "POST"],
    "slow read (-X)": ["-X", "-w", "1", "-y", "2", "-n", "5", "-z", "1", "-k", "10"],
}


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(max(hard, 8192), 65536) if hard != resource.RLIM_INFINITY else 65536
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def perf(infd, srv, seconds, tmp):
    args = ["--model", "add_sub", "--url", srv.hostport, "--binary", "--concurrency-range", 1,
            "--measurement-ms", int(seconds * 1000), "--warmup-ms", 200]
    return sc.perf_row(sc.run_perf(infd, args, tmp / "perf.csv")[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="an option for infd serve (repeatable), e.g. "
                         "--serve-arg=--http-header-timeout-secs --serve-arg=3")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not shutil.which("slowhttptest"):
        sys.exit("slowhttptest is missing (Debian: apt-get install slowhttptest)")
    raise_nofile()  # the server inherits it too
    rows, out = [], []
    with sc.tempdir("infd-slow-") as tmp:
        tmp = pathlib.Path(tmp)
        repo = tmp / "models"
        sc.model_repo.add_sub(repo)
        with sc.Serve(a.infd, repo, tmp, *a.serve_arg) as srv:
            for mode, opts in MODES.items():
                base = perf(a.infd, srv, a.seconds, tmp)
                path = "/v2/models/stats" if "-X" in opts else "/v2/health/ready"
                cmd = ["slowhttptest", *opts, "-c", str(a.connections), "-r", "500",
                       "-l", "60", "-p", "3", "-u", f"{srv.url}{path}"]
                log = open(tmp / "slow.log", "w")
                slow = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        preexec_fn=raise_nofile)
                time.sleep(max(4.0, a.connections / 500 + 2))  # until they are all open
                under = perf(a.infd, srv, a.seconds, tmp)
                alive = srv._ready()
                slow.send_signal(signal.SIGINT)
                try:
                    slow.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    slow.kill()
                    slow.wait()
                log.close()
                text = re.sub(r"\x1b\[[0-9;]*m", "", (tmp / "slow.log").read_text(errors="replace"))
                conn = re.findall(r"connected:\s+(\d+)", text)
                held = max((int(c) for c in conn), default=-1)
                closed = max((int(c) for c in re.findall(r"closed:\s+(\d+)", text)), default=-1)
                ratio = under["p99_us"] / base["p99_us"] if base["p99_us"] else float("nan")
                rows.append([mode, held, closed, f"{base['p99_us']:.0f}", f"{under['p99_us']:.0f}",
                             f"{ratio:.2f}", f"{base['throughput']:.0f}",
                             f"{under['throughput']:.0f}", "yes" if alive else "NO"])
                out.append({"mode": mode, "command": cmd, "connected_max": held,
                            "closed_max": closed,
                            "baseline": base, "under_attack": under, "p99_ratio": ratio,
                            "ready_during": alive})
                time.sleep(2)
    print(f"{a.connections} slow connections (infd serve {' '.join(a.serve_arg) or 'defaults'}); "
          f"infd perf add_sub HTTP binary, concurrency 1, "
          f"{a.seconds} s")
    sc.print_table(["mode", "slow connections held", "closed by the server (most)", "p99 µs before", "p99 µs during",
                    "ratio", "req/s before", "req/s during", "ready during"], rows)
    sc.write_json(a.json, {"rows": out, "machine": sc.machine_facts(a.infd)})


if __name__ == "__main__":
    main()
