#!/usr/bin/python3
"""Memory and start-up of infd against ONNX Runtime, side by side (issue #28).

For each model, `--rounds` times in turn:
- `infd bench MODEL --batch 1 --threads 1 --json`: the process's peak RSS
  (wait4) and its load (file to ready plan and context, "load_ms");
- ONNX Runtime through tools/ort_ref.js (onnxruntime-node, graph
  optimizations "all", 1 thread) on the same model and input: peak RSS of
  the node process and the session's creation ("session_ms");
- `infd serve` of a repository holding the model with max_batch_size 4
  (3 plans: batch 1, 2, 4; BlazeFace: the default repository's, max 8, 4
  plans): wall time from exec to GET /v2/health/ready answering 200, VmRSS
  once ready, VmHWM (its peak), and the memory the server reports;
- the served model's peer: ONNX Runtime as above, run at the served
  model's largest batch (the server's warmup runs every plan, the largest
  included, so its peak holds that batch's activations): its peak RSS.
Prints a Markdown table of the medians. ORT's figures include node's own
runtime (about 45 MiB RSS), as infd's include its libraries; both are
measured the same way.

  /usr/bin/python3 bench/memory_vs_ort.py [--models resnet50,...] [--rounds 3]
"""

import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from engine_vs_ort import CACHE, MODELS, REPO, measure

SERVE_DIMS = {  # dims after the batch for the served config; None: the model's own
    "resnet50": None, "mobilenetv2": None, "ocr_det640": [3, 640, 640],
}
# The served model's input at its largest batch, for its ORT peer.
SERVE_PEER = {
    "resnet50": ("input", [4, 3, 224, 224]),
    "mobilenetv2": ("input", [4, 3, 224, 224]),
    "ocr_det640": ("x", [4, 3, 640, 640]),
    "blazeface128": ("input:0", [8, 128, 128, 3]),  # models/blazeface: max_batch_size 8
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def serve_once(infd, repo):
    """(seconds to ready, VmRSS MiB, VmHWM MiB, log) of one `infd serve`."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    log = tempfile.NamedTemporaryFile(prefix="infd-serve-", suffix=".log", delete=False)
    t0 = time.monotonic()
    p = subprocess.Popen([infd, "serve", "--model-repository", repo, "--http-port", str(http),
                          "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                          "--raw-socket-dir", "off", "--host", "127.0.0.1"],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"infd serve exited {p.returncode}: {open(log.name).read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready",
                                            timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > 120:
                raise RuntimeError("not ready after 120 s")
            time.sleep(0.005)
        ready = time.monotonic() - t0
        rss, hwm = status_kib(p.pid, "VmRSS") / 1024, status_kib(p.pid, "VmHWM") / 1024
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
    text = open(log.name).read()
    os.unlink(log.name)
    return ready, rss, hwm, text


def serve_repo(name, path, tmp):
    if name.startswith("blazeface"):
        src = REPO / "models/blazeface"
        if not (src / "1/model.onnx").exists():
            return None
        dst = tmp / "repo" / "blazeface"
        shutil.copytree(src, dst)
        return tmp / "repo"
    if name not in SERVE_DIMS:
        return None
    d = tmp / "repo" / name
    (d / "1").mkdir(parents=True)
    (d / "1/model.onnx").symlink_to(path)
    config = "max_batch_size: 4\ndynamic_batching { }\ninstance_group { count: 1 kind: KIND_CPU }\n"
    dims = SERVE_DIMS[name]
    if dims:
        _, input_name, _, _ = MODELS[name]
        config += (f'input [ {{ name: "{input_name}" data_type: TYPE_FP32 '
                   f'dims: [ {", ".join(map(str, dims))} ] }} ]\n')
    (d / "config.pbtxt").write_text(config)
    return tmp / "repo"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenetv2,blazeface128,ocr_det640")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--infd", default=str(REPO / "build/release/infd"))
    args = ap.parse_args()
    print("| model | infd bench peak RSS MiB | ORT peak RSS MiB | infd load ms | ORT session ms "
          "| serve ready s | serve VmRSS MiB | serve VmHWM MiB | ORT at the served max batch, "
          "peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        path, input_name, shape, _ = MODELS[name]
        if not path.exists():
            print(f"| {name} | missing: run scripts/setup.sh | | | | | | | |")
            continue
        ours = [args.infd, "bench", path, "--batch", 1, "--threads", 1, "--warmup", 1,
                "--iterations", 3, "--json"]
        ref = ["node", REPO / "tools/ort_ref.js", path, "--threads", 1, "--opt", "all",
               "--warmup", 1, "--bench-iterations", 3]
        if shape:
            ours += ["--shape", f"{input_name}={','.join(map(str, shape))}"]
            ref += ["--shape", f"{input_name}={','.join(map(str, shape))}"]
        rows = []
        with tempfile.TemporaryDirectory(prefix="infd-mem-") as tmp:
            repo = serve_repo(name, path, pathlib.Path(tmp))
            peer = None
            if repo and name in SERVE_PEER:
                peer_input, peer_shape = SERVE_PEER[name]
                peer_path = (REPO / "models/blazeface/1/model.onnx"
                             if name.startswith("blazeface") else path)
                peer = ["node", REPO / "tools/ort_ref.js", peer_path, "--threads", 1, "--opt",
                        "all", "--warmup", 1, "--bench-iterations", 1, "--shape",
                        f"{peer_input}={','.join(map(str, peer_shape))}"]
            for _ in range(args.rounds):
                a, rss_a = measure(ours)
                b, rss_b = measure(ref)
                s = serve_once(args.infd, str(repo)) if repo else (float("nan"),) * 3 + ("",)
                rss_p = measure(peer)[1] if peer else float("nan")
                rows.append((rss_a, rss_b, a["load_ms"], b["session_ms"], s[0], s[1], s[2],
                             rss_p))
        med = [statistics.median(r[i] for r in rows) for i in range(8)]
        print(f"| {name} | {med[0]:.0f} | {med[1]:.0f} | {med[2]:.0f} | {med[3]:.0f} | "
              f"{med[4]:.2f} | {med[5]:.0f} | {med[6]:.0f} | {med[7]:.0f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
