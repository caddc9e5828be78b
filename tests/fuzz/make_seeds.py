#!/usr/bin/python3
"""Writes a small seed corpus for fuzz_onnx_loader: valid models that use
initializers (raw and typed), symbolic dims, attributes of every kind, tensor
attributes, and a Constant node. Run: /usr/bin/python3 make_seeds.py DIR"""

import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def save(model, path):
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def main(out):
    os.makedirs(out, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    b = helper.make_tensor("b", TensorProto.FLOAT, [4], [0.1, 0.2, 0.3, 0.4])
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                            strides=[1, 1], auto_pad="NOTSET")
    clip = helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="clip")
    lo = helper.make_node("Constant", [], ["lo"], value=helper.make_tensor("v", 1, [], [0.0]))
    hi = helper.make_node("Constant", [], ["hi"], value_float=6.0)
    g = helper.make_graph([lo, hi, conv, clip], "seed_conv", [x], [y], [w, b])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
         os.path.join(out, "conv.onnx"))

    a = helper.make_tensor_value_info("a", TensorProto.INT64, [2, 3])
    r = helper.make_tensor_value_info("r", TensorProto.INT64, None)
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 2])
    nodes = [helper.make_node("Reshape", ["a", "shape"], ["t"]),
             helper.make_node("Transpose", ["t"], ["r"], perm=[1, 0]),
             helper.make_node("Identity", ["r"], ["unused"], tags=["p", "q"], f=[1.5, 2.5])]
    g = helper.make_graph(nodes, "seed_shape", [a], [r], [shape])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
         os.path.join(out, "reshape.onnx"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seeds")
