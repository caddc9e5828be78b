#!/usr/bin/env python3
"""infd's CUDA backend against PyTorch on an ONNX model that has no PyTorch
original (BlazeFace, a TFLite export), side by side in one run.

Run on the GPU machine (python3 there has torch):

    python3 bench/onnx_vs_torch.py --infd build/gpu/infd \\
        --model models/blazeface/1/model.onnx --batches 1,8,32,128

PyTorch runs the ONNX graph itself: each node becomes the torch operation
that does the same (Conv -> torch.nn.functional.conv2d, MaxPool ->
max_pool2d, Concat -> torch.cat, ...), with the weights as CUDA tensors in
FP16 and the activations channels_last, as one would write the model by
hand; shape arithmetic (Shape, Slice, ConstantOfShape) is done in Python
once per input shape. It is timed eagerly and captured in a CUDA graph
(torch.cuda.CUDAGraph), input already on the GPU, CUDA events over --iters
runs after warm-up; its FP32 output is checked against its FP16 output
so a wrong translation shows. infd: `infd bench MODEL --device cuda
--precision fp16 --batch B --json` (FP32 input from host memory, one
context, p50), then `--pinned-io --contexts 2` (throughput of two
contexts), then that with `--device-input` (inputs kept in device memory,
as torch's are: "dev/torch"), as bench/cuda_vs_torch.py.

The graph is read with the `onnx` package. Where python3 lacks it (the GPU
machine may), `--export-npz FILE` on a machine that has it writes the
graph and weights to FILE, and `--npz FILE` reads them instead; the npz
holds the model's weights, so it is not committed.
"""

import argparse
import json
import subprocess
import sys

import numpy as np

from cuda_vs_torch import compile_ms, eager_and_graph_ms, infd_row  # same folder

OPS = {"Conv", "Relu", "Add", "Concat", "MaxPool", "Transpose", "Reshape", "Shape", "Slice",
       "ConstantOfShape", "Clip", "Mul", "Sigmoid", "Pad"}


def read_onnx(path):
    """(nodes, weights, input name, output names) from an ONNX file."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(path)
    g = m.graph
    weights = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    nodes = []
    for n in g.node:
        attrs = {}
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, onnx.TensorProto):
                v = numpy_helper.to_array(v).tolist()
            elif isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, (list, tuple)):
                v = list(v)
            attrs[a.name] = v
        nodes.append({"op": n.op_type, "in": list(n.input), "out": list(n.output),
                      "attrs": attrs})
    inputs = [i.name for i in g.input if i.name not in weights]
    return nodes, weights, inputs[0], [o.name for o in g.output]


def write_npz(path, model):
    nodes, weights, inp, outs = read_onnx(model)
    arrays = {f"w{i}": a for i, a in enumerate(weights.values())}
    meta = {"nodes": nodes, "weights": list(weights), "input": inp, "outputs": outs}
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)


def read_npz(path):
    z = np.load(path)
    meta = json.loads(bytes(z["meta"]).decode())
    weights = {name: z[f"w{i}"] for i, name in enumerate(meta["weights"])}
    return meta["nodes"], weights, meta["input"], meta["outputs"]


class TorchGraph:
    """Runs the ONNX nodes with torch operations on CUDA tensors."""

    def __init__(self, nodes, weights, inp, outs, dtype):
        import torch

        bad = sorted({n["op"] for n in nodes} - OPS)
        if bad:
            raise SystemExit(f"ops without a torch translation here: {', '.join(bad)}")
        self.torch = torch
        self.nodes, self.inp, self.outs, self.dtype = nodes, inp, outs, dtype
        self.consts = {}
        for k, a in weights.items():
            if a.dtype.kind == "f":
                self.consts[k] = torch.from_numpy(np.ascontiguousarray(a)).to("cuda", dtype)
            else:
                self.consts[k] = [int(x) for x in a.reshape(-1)]  # shape arithmetic

    def __call__(self, x):
        torch = self.torch
        F = torch.nn.functional
        v = dict(self.consts)
        v[self.inp] = x
        for n in self.nodes:
            a, op, ins = n["attrs"], n["op"], [v.get(i) if i else None for i in n["in"]]
            if op == "Conv":
                w, b = ins[1], ins[2] if len(ins) > 2 else None
                p = a.get("pads", [0, 0, 0, 0])
                t = ins[0]
                if p[0] != p[2] or p[1] != p[3]:  # asymmetric: pad first
                    t = F.pad(t, (p[1], p[3], p[0], p[2]))
                    p = [0, 0]
                y = F.conv2d(t, w, b, a.get("strides", [1, 1]), (p[0], p[1]),
                             a.get("dilations", [1, 1]), a.get("group", 1))
            elif op == "Relu":
                y = torch.relu(ins[0])
            elif op == "Clip":
                y = torch.clamp(ins[0], float(a.get("min", -np.inf)), float(a.get("max", np.inf)))
            elif op == "Sigmoid":
                y = torch.sigmoid(ins[0])
            elif op == "Add":
                y = ins[0] + ins[1]
            elif op == "Mul":
                y = ins[0] * ins[1]
            elif op == "MaxPool":
                p = a.get("pads", [0, 0, 0, 0])
                y = F.max_pool2d(ins[0], a["kernel_shape"], a.get("strides"), (p[0], p[1]))
            elif op == "Transpose":
                y = ins[0].permute(*a["perm"])
            elif op == "Reshape":
                shape = ins[1]
                y = ins[0].reshape([s if s != 0 else ins[0].shape[i] for i, s in enumerate(shape)])
            elif op == "Shape":
                y = list(ins[0].shape)
            elif op == "Slice":
                starts, ends = ins[1], ins[2]
                axes = ins[3] if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
                if isinstance(ins[0], list):
                    assert axes == [0]
                    y = ins[0][starts[0]:min(ends[0], len(ins[0]))]
                else:
                    idx = [slice(None)] * ins[0].dim()
                    for s, e, ax in zip(starts, ends, axes):
                        idx[ax] = slice(s, min(e, ins[0].shape[ax]))
                    y = ins[0][tuple(idx)]
            elif op == "ConstantOfShape":
                val = a.get("value", [0.0])
                y = torch.full([int(s) for s in ins[0]], float(np.ravel(val)[0]), device="cuda",
                               dtype=self.dtype)
                if y.dim() == 4:
                    y = y.contiguous(memory_format=torch.channels_last)
            elif op == "Concat":
                if all(isinstance(t, list) for t in ins):
                    y = [s for t in ins for s in t]
                else:
                    y = torch.cat(ins, a["axis"])
            elif op == "Pad":
                p = ins[1]
                half = len(p) // 2
                flat = []
                for d in reversed(range(half)):
                    flat += [p[d], p[d + half]]
                y = F.pad(ins[0], flat)
            v[n["out"][0]] = y
        return [v[o] for o in self.outs]


def check_against_infd(infd, model, graph32, inp, outs):
    """Max |torch - infd| / max |infd| over the outputs, FP32 on both, infd
    on the CPU (`infd run`): a wrong translation of a node shows here."""
    import os
    import re
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as d:
        x = np.random.default_rng(7).uniform(-1, 1, (2, 128, 128, 3)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        r = subprocess.run([infd, "run", model, "--device", "cpu", "--input", f"{inp}={d}/x.npy",
                            "--output-dir", d], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise SystemExit(f"infd run failed: {r.stderr.strip()[-500:]}")
        with torch.inference_mode():
            got = graph32(torch.from_numpy(x).cuda())
        worst = 0.0
        for name, t in zip(outs, got):
            want = np.load(os.path.join(d, re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"))
            t = t.float().cpu().numpy().reshape(want.shape)
            worst = max(worst, float(np.abs(t - want).max() / max(np.abs(want).max(), 1e-6)))
        return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd")
    ap.add_argument("--model", required=True, help="the ONNX file (infd reads it)")
    ap.add_argument("--npz", help="graph and weights from --export-npz (no onnx package)")
    ap.add_argument("--export-npz", help="write the graph and weights here, then stop")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--compile", metavar="MODE",
                    help="also time torch.compile(mode=MODE) of the FP16 graph, e.g. "
                         "max-autotune (minutes of autotuning per batch size)")
    a = ap.parse_args()
    if a.export_npz:
        write_npz(a.export_npz, a.model)
        return 0
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # FP32 means FP32 for the check below
    graph = read_npz(a.npz) if a.npz else read_onnx(a.model)
    nodes, weights, inp, outs = graph
    g16 = TorchGraph(nodes, weights, inp, outs, torch.float16)
    g32 = TorchGraph(nodes, weights, inp, outs, torch.float32)
    err = check_against_infd(a.infd, a.model, g32, inp, outs)
    print(f"# torch FP32 translation vs infd CPU FP32: max |diff| / max |infd| = {err:.1e}")
    if err > 1e-3:
        raise SystemExit("the torch translation does not match the model")
    print(f"{'batch':>5} {'torch eager':>12} {'torch graph':>12} {'infd':>12} {'infd 2ctx':>10} "
          f"{'best/torch':>10} {'infd dev':>10} {'dev/torch':>10}  "
          f"(images/s; infd p50 ms, 1 context)", flush=True)
    for b in [int(x) for x in a.batches.split(",")]:
        x32 = torch.rand(b, 128, 128, 3, device="cuda") * 2 - 1
        x16 = x32.half()
        with torch.inference_mode():
            r32, r16 = g32(x32), g16(x16)
        err = max(float((p.float() - q).abs().max() / q.abs().max().clamp(min=1e-6))
                  for p, q in zip(r16, r32))
        eager_ms, graph_ms = eager_and_graph_ms(g16, x16, a.iters, a.warmup)
        best = min(eager_ms, graph_ms)
        extra = ""
        if a.compile:
            ms, built = compile_ms(g16.__call__, x16, a.compile, a.iters)
            best = min(best, ms)
            extra = f"; torch.compile {a.compile} {b * 1000.0 / ms:.0f} img/s ({ms:.3f} ms, " \
                    f"built in {built:.0f} s)"
        row = infd_row(a.infd, a.model, b, a.iters, a.warmup, "fp16")
        if "error" in row:
            raise SystemExit(f"infd bench failed: {row['error']}")
        te, tg = b * 1000.0 / eager_ms, b * 1000.0 / graph_ms
        ratio = max(row["infd_img_s"], row["infd2_img_s"]) / (b * 1000.0 / best)
        dev = row["infd_dev_img_s"] / (b * 1000.0 / best)
        print(f"{b:>5} {te:>12.0f} {tg:>12.0f} {row['infd_img_s']:>12.0f} "
              f"{row['infd2_img_s']:>10.0f} {ratio:>10.2f} {row['infd_dev_img_s']:>10.0f} "
              f"{dev:>10.2f}  (infd p50 {row['infd_ms']:.3f} ms; "
              f"torch graph {graph_ms:.3f} ms; torch fp16 vs fp32 {err:.1e}{extra})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
