#!/usr/bin/env python3
"""infd's CUDA backend against PyTorch on the same GPU, side by side in one run.

Run on the GPU machine (python3 there has torch + torchvision):

    python3 bench/cuda_vs_torch.py --infd build/gpu/infd --batches 1,8,32,128,256

For each model (torchvision ResNet-50 and MobileNetV2, random weights: speed
does not depend on them) it exports the ONNX file here (opset 17, dynamic
batch, torch.onnx.export with dynamo=False), then for each batch size:

- PyTorch FP16 channels_last, eager, and the same forward captured once in
  a CUDA graph and replayed (torch.cuda.CUDAGraph): input already on the
  GPU, timed with CUDA events over --iters runs after warm-up.
- infd: `infd bench MODEL --device cuda --precision fp16 --batch B --json`,
  which times infd_plan_run: FP32 input copied from host memory to the GPU,
  the plan (a CUDA graph replay after the second run), the output copied
  back, one sync. So infd's number includes the host<->device copies that
  PyTorch's does not (about 0.6 MB per image in at ~25 GB/s).
- infd again with `--pinned-io --contexts 2`: inputs written straight into
  the contexts' page-locked buffers (as a frontend receiving into them
  does) and two contexts on two streams, so one's copies overlap the
  other's kernels: the throughput a server with two instances gets.
- infd a third time adding `--device-input`: the inputs stay in device
  memory (a device-to-device copy per run, no host copy), as PyTorch's
  input does; the outputs still go to host memory. The "dev/torch" column
  compares this one with PyTorch's best.

Prints one row per (model, batch): images/s for each side and infd /
best-PyTorch; --json writes the rows too. `--compile max-autotune
--compile-batches 128` also times torch.compile(mode=...) of the FP16
model at those batch sizes (minutes of autotuning each), which then counts
among PyTorch's variants.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def time_ms(fn, iters):
    """ms per call of fn() over `iters` calls, by CUDA events (the caller
    warms up first)."""
    import torch

    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(iters):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / iters


def captured(fn, warmup=2):
    """fn() captured once in a torch.cuda.CUDAGraph (after `warmup` runs on
    a side stream, as capture needs): a callable that replays it and
    returns what fn returned at capture (its outputs, rewritten in place by
    every replay). Call it inside torch.inference_mode() where fn needs it."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static = fn()

    def replay():
        g.replay()
        return static
    return replay


def eager_and_graph_ms(run, x, iters, warmup):
    """(eager ms, CUDA graph ms) per run(x): eagerly, then captured once in
    a torch.cuda.CUDAGraph and replayed."""
    import torch

    with torch.inference_mode():
        for _ in range(warmup):
            run(x)
        torch.cuda.synchronize()
        eager_ms = time_ms(lambda: run(x), iters)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                run(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            run(x)
        for _ in range(warmup):
            g.replay()
        torch.cuda.synchronize()
        graph_ms = time_ms(g.replay, iters)
        del g
    return eager_ms, graph_ms


def compile_ms(m, x, mode, iters):
    """(ms per run, build seconds) of torch.compile(m, mode=mode) on x."""
    import torch

    t0 = time.time()
    cf = torch.compile(m, mode=mode, dynamic=False)
    with torch.inference_mode():
        for _ in range(3):
            cf(x)
        torch.cuda.synchronize()
        built = time.time() - t0
        ms = time_ms(lambda: cf(x), iters)
    return ms, built


def torch_rows(name, batches, iters, warmup, compile_mode=None, compile_batches=()):
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    m = getattr(torchvision.models, name)(weights=None).eval().half().cuda()
    m = m.to(memory_format=torch.channels_last)
    rows = {}
    for b in batches:
        x = torch.randn(b, 3, 224, 224, device="cuda").half().to(
            memory_format=torch.channels_last)
        eager_ms, graph_ms = eager_and_graph_ms(m, x, iters, warmup)
        rows[b] = {"torch_eager_ms": eager_ms, "torch_graph_ms": graph_ms}
        if compile_mode and b in compile_batches:
            ms, built = compile_ms(m, x, compile_mode, iters)
            rows[b].update({"torch_compile_ms": ms, "torch_compile_build_s": built})
        torch.cuda.empty_cache()
    return rows


def export(name, path):
    import torch
    import torchvision

    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    torch.onnx.export(m, torch.randn(1, 3, 224, 224), path, input_names=["input"],
                      output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      dynamo=False, opset_version=17)


def infd_row(infd, model, b, iters, warmup, precision, contexts=2):
    row = {}
    pinned = ["--pinned-io", "--contexts", str(contexts)]
    for key, extra in (("infd", []), ("infd2", pinned), ("infd_dev", pinned + ["--device-input"])):
        r = subprocess.run([infd, "bench", model, "--device", "cuda", "--precision", precision,
                            "--batch", str(b), "--iterations", str(iters), "--warmup",
                            str(warmup), "--json", *extra],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            row["error"] = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
            return row
        j = json.loads(r.stdout)
        row.update({f"{key}_ms": j["p50_ms"], f"{key}_img_s": j["throughput_per_s"],
                    f"{key}_load_ms": j["load_ms"]})
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--batches", default="1,8,32,128,256")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--dir", default="/tmp/infd_bench")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--compile", metavar="MODE", help="also torch.compile(mode=MODE)")
    ap.add_argument("--contexts", type=int, default=2,
                    help="contexts of the pinned-I/O infd column (default 2)")
    ap.add_argument("--compile-batches", default="128",
                    help="batch sizes --compile runs at (default 128)")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    os.makedirs(a.dir, exist_ok=True)
    out = []
    print(f"{'model':<13} {'batch':>5} {'torch eager':>12} {'torch graph':>12} {'infd':>12} "
          f"{'infd 2ctx':>10} {'best/torch':>10} {'infd dev':>10} {'dev/torch':>10}  "
          f"(images/s; infd p50 ms, 1 context)", flush=True)
    for name in a.models.split(","):
        path = os.path.join(a.dir, f"{name}.onnx")
        if not os.path.exists(path):
            t0 = time.time()
            export(name, path)
            print(f"# exported {path} in {time.time() - t0:.1f} s", flush=True)
        trows = torch_rows(name, batches, a.iters, a.warmup, a.compile,
                           [int(b) for b in a.compile_batches.split(",")])
        for b in batches:
            row = {"model": name, "batch": b, **trows[b],
                   **infd_row(a.infd, path, b, a.iters, a.warmup, a.precision, a.contexts)}
            te = b * 1000.0 / row["torch_eager_ms"]
            tg = b * 1000.0 / row["torch_graph_ms"]
            row["torch_eager_img_s"], row["torch_graph_img_s"] = te, tg
            best = max(te, tg)
            if "torch_compile_ms" in row:
                row["torch_compile_img_s"] = b * 1000.0 / row["torch_compile_ms"]
                best = max(best, row["torch_compile_img_s"])
                print(f"# {name} batch {b}: torch.compile {a.compile} "
                      f"{row['torch_compile_img_s']:.0f} img/s ({row['torch_compile_ms']:.2f} ms; "
                      f"built in {row['torch_compile_build_s']:.0f} s)", flush=True)
            if "infd_dev_img_s" in row:
                ratio = max(row["infd_img_s"], row["infd2_img_s"]) / best
                row["ratio_vs_best_torch"] = ratio
                row["dev_ratio_vs_best_torch"] = row["infd_dev_img_s"] / best
                print(f"{name:<13} {b:>5} {te:>12.0f} {tg:>12.0f} {row['infd_img_s']:>12.0f} "
                      f"{row['infd2_img_s']:>10.0f} {ratio:>10.2f} "
                      f"{row['infd_dev_img_s']:>10.0f} {row['dev_ratio_vs_best_torch']:>10.2f}  "
                      f"(infd p50 {row['infd_ms']:.3f} ms)", flush=True)
            else:
                print(f"{name:<13} {b:>5} {te:>12.0f} {tg:>12.0f} {'error':>12}  "
                      f"{row['error']}", flush=True)
            out.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
