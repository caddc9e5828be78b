#!/usr/bin/python3
"""Benchmark (a) of issue #4: the raw protocol's round trip through `infd serve`
against a bare Unix-socket echo of the same bytes.

    /usr/bin/python3 bench/raw_vs_echo.py [--infd build/release/infd] [--shape 1,3,224,224]
                                          [--measurement-ms 5000] [--concurrency 1]

Serves an Identity model of the given FP32 shape (batch dim first, served at
max_batch_size 8) from a temporary repository, compiles bench/raw_echo.c,
and runs `infd perf` in headerless mode against both sockets with the same
settings. Prints both perf tables and the ratios of the latencies (goal of
issue #4: raw round trip <= 1.2x the echo). Use a release build: the
ratio of a debug build says little.
"""

import argparse
import csv
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import repo as model_repo  # noqa: E402
from serving import free_port  # noqa: E402


def run_perf(infd, sock, shape, nbytes, args, csv_path):
    cmd = [str(infd), "perf", "--model", "img", "--unix", str(sock), "--shape", shape,
           "--dtype", "FP32", "--output-bytes", str(nbytes), "--measurement-ms",
           str(args.measurement_ms), "--warmup-ms", "500", "--concurrency-range",
           str(args.concurrency), "--csv", str(csv_path)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        sys.exit(f"infd perf failed: {r.stderr}")
    with open(csv_path, newline="") as f:
        return next(csv.DictReader(f))


def wait_path(path, proc, what):
    deadline = time.monotonic() + 60
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"{what} did not come up")
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--infd", default=str(ROOT / "build" / "release" / "infd"))
    ap.add_argument("--shape", default="1,3,224,224")
    ap.add_argument("--measurement-ms", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args()
    dims = [int(d) for d in args.shape.split(",")]
    nbytes = 4
    for d in dims:
        nbytes *= d

    with tempfile.TemporaryDirectory(prefix="infd-raw-bench-") as tmp:
        tmp = pathlib.Path(tmp)
        model_repo.identity(tmp / "models", name="img", dtype="FP32", dims=tuple(dims[1:]))
        echo_bin = tmp / "raw_echo"
        subprocess.run(["cc", "-O2", "-o", str(echo_bin), str(ROOT / "bench" / "raw_echo.c"),
                        "-lpthread"], check=True)
        raw_dir = tmp / "raw"
        serve = subprocess.Popen([args.infd, "serve", "--model-repository", str(tmp / "models"),
                                  "--host", "127.0.0.1", "--http-port", str(free_port()),
                                  "--metrics-port", "-1", "--raw-socket-dir", str(raw_dir),
                                  "--raw-stats-every", "0"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        echo = subprocess.Popen([str(echo_bin), str(tmp / "echo.sock"), str(nbytes)])
        try:
            wait_path(raw_dir / "img.sock", serve, "infd serve")
            wait_path(tmp / "echo.sock", echo, "raw_echo")
            print(f"== infd serve, raw headerless, FP32 [{args.shape}] ({nbytes} bytes each way)")
            infd = run_perf(args.infd, raw_dir / "img.sock", args.shape, nbytes, args,
                            tmp / "infd.csv")
            print("== bare Unix-socket echo of the same bytes")
            base = run_perf(args.infd, tmp / "echo.sock", args.shape, nbytes, args,
                            tmp / "echo.csv")
        finally:
            serve.terminate()
            echo.terminate()
            serve.wait()
            echo.wait()
    print("== ratio infd / echo (goal <= 1.2)")
    for k in ("Avg latency", "p50 latency", "p99 latency"):
        print(f"{k:12s} {float(infd[k]):9.1f} us / {float(base[k]):9.1f} us = "
              f"{float(infd[k]) / float(base[k]):.2f}x")
    print(f"{'throughput':12s} {float(infd['Inferences/Second']):9.1f} / "
          f"{float(base['Inferences/Second']):9.1f} infer/s")


if __name__ == "__main__":
    main()
