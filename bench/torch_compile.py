#!/usr/bin/env python3
"""PyTorch's torch.compile variant of the bench peers, on its own.

    python3 bench/torch_compile.py [--mode reduce-overhead] resnet50:128 mobilenet_v2:32 blazeface:128

Each MODEL:BATCH is timed eager, in a CUDA graph and as
torch.compile(mode=MODE, dynamic=False), with the same models, inputs and
timing as bench/cuda_vs_torch.py (torchvision models, FP16 channels_last)
and bench/onnx_vs_torch.py (BlazeFace's ONNX graph in torch operations),
without the infd rows those print: the quick way to PyTorch's best variant
(bench/RESULTS.md, "Memory-bound kernels, and PyTorch's torch.compile").
Needs torch, torchvision and (for BlazeFace) onnx, and a GPU.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cuda_vs_torch as cvt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="reduce-overhead")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--blazeface", default="models/blazeface/1/model.onnx")
    ap.add_argument("specs", nargs="+", metavar="MODEL:BATCH")
    a = ap.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    for spec in a.specs:
        name, b = spec.split(":")
        b = int(b)
        if name == "blazeface":
            import onnx_vs_torch as ovt

            nodes, weights, inp, outs = ovt.read_onnx(a.blazeface)
            m = ovt.TorchGraph(nodes, weights, inp, outs, torch.float16).__call__
            x = (torch.rand(b, 128, 128, 3, device="cuda") * 2 - 1).half()
        else:
            import torchvision

            m = getattr(torchvision.models, name)(weights=None).eval().half().cuda()
            m = m.to(memory_format=torch.channels_last)
            x = torch.randn(b, 3, 224, 224, device="cuda").half().to(
                memory_format=torch.channels_last)
        eager_ms, graph_ms = cvt.eager_and_graph_ms(m, x, a.iters, 10)
        ms, built = cvt.compile_ms(m, x, a.mode, a.iters)
        print(f"{name} b{b}: eager {b * 1000 / eager_ms:.0f}, CUDA graph "
              f"{b * 1000 / graph_ms:.0f}, torch.compile {a.mode} {b * 1000 / ms:.0f} img/s "
              f"({ms:.3f} ms, built in {built:.0f} s)", flush=True)
        torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
