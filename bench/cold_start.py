#!/usr/bin/python3
"""Cold start of `infd serve` (issue #24): seconds from exec to the first 200
of GET /v2/health/ready, with ResNet-50 (the ONNX model scripts/setup.sh
caches at .cache/models/resnet50.onnx, 102 MB) as the only model, on the CPU.

    /usr/bin/python3 bench/cold_start.py [--runs 5] [--infd build/release/infd]
        [--model .cache/models/resnet50.onnx] [--drop-caches] [--json FILE]

`--drop-caches` empties the kernel's page cache before every run (needs root:
writes /proc/sys/vm/drop_caches), so the model file is read from disk as after
a reboot; without it the file is in memory after the first run. Goal: ready
within 2 s. Nothing here asserts on time: bench/RESULTS.md records the
numbers.
"""

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import time
import urllib.request

import serve_common as sc


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def one_run(infd, repo, tmp):
    port = sc.free_port()
    log = open(tmp / "serve.log", "wb")
    t0 = time.monotonic()
    p = subprocess.Popen([str(infd), "serve", "--model-repository", str(repo), "--host",
                          "127.0.0.1", "--http-port", str(port), "--grpc-port", "-1",
                          "--metrics-port", "-1", "--raw-socket-dir", str(tmp / "raw")],
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v2/health/ready"
    while True:
        if p.poll() is not None:
            raise SystemExit(f"infd serve exited with {p.returncode}: {tmp / 'serve.log'}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.005)
    ready_s = time.monotonic() - t0
    p.terminate()
    p.wait(timeout=30)
    log.close()
    text = (tmp / "serve.log").read_text(errors="replace")
    m = re.search(r"loaded in (\d+) ms", text)
    return ready_s, int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--model", default=str(sc.ROOT / ".cache" / "models" / "resnet50.onnx"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    with sc.tempdir("infd-cold-") as tmpd:
        tmp = pathlib.Path(tmpd)
        repo = tmp / "models"
        (repo / "resnet50" / "1").mkdir(parents=True)
        os.symlink(os.path.abspath(a.model), repo / "resnet50" / "1" / "model.onnx")
        runs = []
        for i in range(a.runs):
            if a.drop_caches:
                drop_caches()
            ready_s, load_ms = one_run(a.infd, repo, tmp)
            runs.append({"ready_s": ready_s, "load_ms": load_ms})
            print(f"run {i + 1}: ready in {ready_s:.3f} s (model loaded in {load_ms} ms)")
    med = statistics.median(r["ready_s"] for r in runs)
    sc.print_table(["page cache", "runs", "ready, median s", "min s", "max s", "goal"],
                   [["dropped before each run" if a.drop_caches else "warm after the first run",
                     len(runs), f"{med:.3f}", f"{min(r['ready_s'] for r in runs):.3f}",
                     f"{max(r['ready_s'] for r in runs):.3f}",
                     "met (<= 2 s)" if med <= 2.0 else "NOT met (<= 2 s)"]])
    sc.write_json(a.json, {"machine": sc.machine_facts(a.infd), "drop_caches": a.drop_caches,
                           "runs": runs, "median_ready_s": med})


if __name__ == "__main__":
    main()
