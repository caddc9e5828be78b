#!/usr/bin/env python3
"""How much of the input copy a device plan leaves exposed, and what the
run order changes (bench/RESULTS.md, "GPU, from host memory").

Run on the GPU machine (python3 there has torch + torchvision):

    python3 bench/cuda_host_input.py --infd build/gpu/infd --batches 8,32,128,256

For each model (torchvision ResNet-50 and MobileNetV2 exported as in
bench/cuda_vs_torch.py) and batch size it builds an FP16 plan file once
(`infd build`, so the runs below load it without tuning), then, for each
variant N:W of --variants, runs `infd bench PLAN --pinned-io --contexts N`
with INFD_CUDA_ORDER=W (at most W runs computing at once; 0 leaves the
runs of the contexts to overlap as the GPU schedules them; "auto" leaves
the variable unset: half the runs in flight, rounded up) twice: with the
FP32 input in the contexts' page-locked buffers (copied to the GPU every
run, as a server's is) and with `--device-input` (a device-to-device copy
instead). "exposed" is the host-input time per batch minus the
device-input time per batch: the part of the copy no kernel hides.
It also measures the pinned host-to-device copy rate once (torch), the
ceiling of the host-input rate: images/s <= rate / (4 * 3 * 224 * 224).
With --compile MODE it times PyTorch first, as bench/cuda_vs_torch.py
does (FP16 channels_last, input on the GPU: eager, CUDA graph and
torch.compile(mode=MODE) at every batch), and prints each infd row against
PyTorch's best.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_vs_torch import export, torch_rows  # noqa: E402


def h2d_gb_s():
    import torch

    n = 256 << 20
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        dst.copy_(src, non_blocking=True)
    e1.record()
    torch.cuda.synchronize()
    return 10 * n / (e0.elapsed_time(e1) / 1000) / 1e9


def build(infd, model, b, plan):
    cmd = [infd, "build", model, "--device", "cuda", "--precision", "fp16", "--batch", str(b),
           "-o", plan]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {r.stderr.strip()[-500:]}")


def bench(infd, plan, b, ctx, width, device_input, iters, warmup):
    env = dict(os.environ)
    env.pop("INFD_CUDA_ORDER", None)
    if width != "auto":
        env["INFD_CUDA_ORDER"] = width
    cmd = [infd, "bench", plan, "--batch", str(b), "--iterations", str(iters), "--warmup",
           str(warmup), "--json", "--pinned-io", "--contexts", str(ctx)] + \
        (["--device-input"] if device_input else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)["throughput_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--batches", default="8,32,128,256")
    ap.add_argument("--variants", default="2:0,2:auto,4:0,4:auto",
                    help="CONTEXTS:ORDER_WIDTH pairs, width a number or auto "
                         "(default 2:0,2:auto,4:0,4:auto)")
    ap.add_argument("--compile", metavar="MODE", help="also time PyTorch, with torch.compile(MODE)")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--dir", default="/tmp/infd_bench")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rate = h2d_gb_s()
    print(f"# pinned host-to-device copy: {rate:.1f} GB/s "
          f"(at most {rate * 1e9 / (4 * 3 * 224 * 224):.0f} FP32 224x224 images/s)", flush=True)
    print(f"{'model':<13} {'batch':>5} {'ctx':>3} {'width':>5} {'host img/s':>11} "
          f"{'dev img/s':>10} {'host/dev':>8} {'exposed ms':>10} {'host/torch':>10}", flush=True)
    rows = []
    for name in a.models.split(","):
        path = os.path.join(a.dir, f"{name}.onnx")
        if not os.path.exists(path):
            export(name, path)
        batches = [int(x) for x in a.batches.split(",")]
        best = {}
        if a.compile:
            for b, t in torch_rows(name, batches, a.iters, a.warmup, a.compile, batches).items():
                best[b] = max(b * 1000.0 / t[k] for k in t if k.endswith("_ms"))
                print(f"# {name} batch {b}: PyTorch " + ", ".join(
                    f"{k[:-3]} {b * 1000.0 / t[k]:.0f}" for k in t if k.endswith("_ms")) +
                    " images/s", flush=True)
        for b in batches:
            plan = os.path.join(a.dir, f"{name}_b{b}.plan")
            build(a.infd, path, b, plan)
            for v in a.variants.split(","):
                ctx, width = v.split(":")
                ctx = int(ctx)
                host = bench(a.infd, plan, b, ctx, width, False, a.iters, a.warmup)
                dev = bench(a.infd, plan, b, ctx, width, True, a.iters, a.warmup)
                exposed = (b / host - b / dev) * 1000
                vs = host / best[b] if b in best else float("nan")
                rows.append({"model": name, "batch": b, "contexts": ctx, "order_width": width,
                             "host_img_s": host, "dev_img_s": dev, "exposed_ms": exposed,
                             "best_torch_img_s": best.get(b)})
                print(f"{name:<13} {b:>5} {ctx:>3} {width:>5} {host:>11.0f} {dev:>10.0f} "
                      f"{host / dev:>8.2f} {exposed:>10.3f} {vs:>10.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"h2d_gb_s": rate, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
