#!/usr/bin/python3
"""Stores an exported model's weights in FP16, to halve its files (the
default model must fit in 8 MB), while it still computes in FP32.

    python3 tools/train_asr/fp16.py MODEL_DIR [--out DIR] [--min-elements 1024]

Each FP32 initializer of the networks (encoder-model.onnx and
decoder_joint-model.onnx, or sherpa-onnx's encoder.onnx, decoder.onnx and
joiner.onnx, with their metadata kept) with
at least --min-elements values becomes an FP16 initializer followed by a
Cast to FP32 under the original name, so every node still reads FP32
(infd folds the Casts when it loads the model: the weights are FP32 in
memory, rounded once to FP16 precision). Smaller tensors (biases, norms)
stay FP32. Writes the files to --out (default: in place) with the other
files of the layout copied beside them, and prints the sizes.
"""

import argparse
import os
import shutil

import numpy as np
import onnx
from onnx import helper, numpy_helper

NETWORKS = ("encoder-model.onnx", "decoder_joint-model.onnx", "encoder.onnx", "decoder.onnx",
            "joiner.onnx")


def to_fp16(model, min_elements):
    g = model.graph
    kept, casts, n = [], [], 0
    for init in g.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and np.prod(init.dims) >= min_elements:
            w = numpy_helper.to_array(init)
            if np.abs(w).max() >= 65504:
                kept.append(init)  # would overflow FP16
                continue
            half = numpy_helper.from_array(w.astype(np.float16), init.name + "__fp16")
            kept.append(half)
            casts.append(helper.make_node("Cast", [half.name], [init.name],
                                          to=onnx.TensorProto.FLOAT,
                                          name=init.name + "__cast"))
            n += 1
        else:
            kept.append(init)
    del g.initializer[:]
    g.initializer.extend(kept)
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--out")
    ap.add_argument("--min-elements", type=int, default=1024)
    a = ap.parse_args()
    out = a.out or a.model
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(a.model):
        if name not in NETWORKS and os.path.isfile(os.path.join(a.model, name)) and out != a.model:
            shutil.copy(os.path.join(a.model, name), os.path.join(out, name))
    total = 0
    for name in [n for n in NETWORKS if os.path.exists(os.path.join(a.model, n))]:
        m = onnx.load(os.path.join(a.model, name))
        n = to_fp16(m, a.min_elements)
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, name))
        size = os.path.getsize(os.path.join(out, name))
        total += size
        print(f"fp16: {name}: {n} weights in FP16, {size / 1e6:.2f} MB")
    print(f"fp16: the networks take {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
