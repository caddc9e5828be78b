#!/usr/bin/python3
"""Writes a small seed corpus for fuzz_onnx_loader and fuzz_plan: valid models
that use initializers (raw and typed), symbolic dims, attributes of every kind,
tensor attributes, and a Constant node; and Triton config.pbtxt files for
fuzz_pbtxt in a separate folder (libFuzzer reads corpus folders recursively,
so the two kinds must not nest); sound files for fuzz_wav and .npy files
for fuzz_npy likewise. Run: /usr/bin/python3 make_seeds.py DIR [PBTXT_DIR
[WAV_DIR [NPY_DIR]]], each defaulting to DIR-pbtxt, DIR-wav, DIR-npy."""

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


PBTXT_SEEDS = {
    "simple.pbtxt": """name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
""",
    "densenet.pbtxt": """name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size : 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
    reshape { shape: [ 1, 3, 224, 224 ] }
  }
]
output [
  {
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    reshape { shape: [ 1, 1000, 1, 1 ] }
    label_filename: "densenet_labels.txt"
  }
]
""",
    "batching.pbtxt": """# dynamic batching with queue policies
name: 'batched'
backend: "onnxruntime"
max_batch_size: 16;
version_policy: { specific: { versions: [1, 3] } }
input < name: "y", data_type: 11, dims: -1 dims: 0x10 >
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 50000
                         allow_timeout_override: t max_queue_size: 16 }
  priority_queue_policy { key: 1 value: { timeout_action: DELAY } }
}
instance_group [ { count: 2 kind: KIND_CPU }, { count: 1, kind: KIND_GPU, gpus: [ 0, 1 ] } ]
parameters { key: "k" value { string_value: "v\\n\\x41\\u00e9" 'w' } }
model_warmup [{ name: "w" batch_size: 1
  inputs { key: "y" value { data_type: TYPE_FP32 dims: 16 zero_data: true } } }]
optimization { priority: PRIORITY_MAX graph { level: -1 } }
""",
    "sequence.pbtxt": """sequence_batching {
  max_sequence_idle_microseconds: 18446744073709551615
  oldest { max_candidate_sequences: 4 preferred_batch_size: [2] }
  control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START
    fp32_false_true: [ 0, 1.5e1, -inf, nan, .5f ] bool_false_true: [ True, f ] }] }]
  state { input_name: "a" output_name: "b" data_type: TYPE_FP16 dims: [ 1 ] }
}
version_policy { latest { num_versions: 2 } }
""",
}


def write_pbtxt_seeds(out):
    os.makedirs(out, exist_ok=True)
    for name, text in PBTXT_SEEDS.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)



def write_wav_seeds(out):
    """Small sound files for fuzz_wav: PCM 16-bit mono and stereo, 8-bit,
    24-bit, 32-bit float, an empty data chunk, a header announcing more
    data than follows, and sample rates at and past the reader's bounds."""
    import struct

    os.makedirs(out, exist_ok=True)

    def wav(fmt, channels, rate, bits, data, data_len=None):
        block = channels * bits // 8
        n = len(data) if data_len is None else data_len
        return (b"RIFF" + struct.pack("<I", 36 + n) + b"WAVE" + b"fmt " +
                struct.pack("<IHHIIHH", 16, fmt, channels, rate, rate * block, block, bits) +
                b"data" + struct.pack("<I", n) + data)

    tone16 = b"".join(struct.pack("<h", (i * 2731) % 20000 - 10000) for i in range(400))
    seeds = {
        "mono16k.wav": wav(1, 1, 16000, 16, tone16),
        "stereo8k.wav": wav(1, 2, 8000, 16, tone16),
        "u8.wav": wav(1, 1, 11025, 8, bytes((i * 37) % 256 for i in range(300))),
        "s24.wav": wav(1, 1, 48000, 24, bytes((i * 11) % 256 for i in range(600))),
        "f32.wav": wav(3, 1, 22050, 32, b"".join(struct.pack("<f", (i % 50) / 60.0 - 0.4)
                                                 for i in range(200))),
        "empty.wav": wav(1, 1, 16000, 16, b""),
        "short_data.wav": wav(1, 1, 16000, 16, tone16[:100], data_len=800),
        # rates at the bounds the reader accepts (4 kHz and 1 MHz) and past them
        "rate4k.wav": wav(1, 1, 4000, 16, tone16),
        "rate1M.wav": wav(1, 1, 1000000, 16, tone16),
        "rate1.wav": wav(1, 1, 1, 16, tone16),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


def write_npy_seeds(out):
    """Small .npy files for fuzz_npy, written by NumPy itself: float32 2x3,
    int64, a bool scalar, an empty float16 array, a Fortran-ordered uint8
    array (which the reader refuses) and a format 2.0 file."""
    import io

    os.makedirs(out, exist_ok=True)
    arrays = {
        "f32_2x3.npy": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i64.npy": np.array([1, -2, 3], dtype=np.int64),
        "bool_scalar.npy": np.array(True),
        "f16_empty.npy": np.zeros((0, 4), np.float16),
        "u8_fortran.npy": np.asfortranarray(np.ones((2, 2), np.uint8)),
    }
    for name, a in arrays.items():
        np.save(os.path.join(out, name), a)
    b = io.BytesIO()
    np.lib.format.write_array(b, np.ones((3,), np.float64), version=(2, 0))
    with open(os.path.join(out, "f64_v2.npy"), "wb") as f:
        f.write(b.getvalue())


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "seeds"
    main(out)
    write_pbtxt_seeds(sys.argv[2] if len(sys.argv) > 2 else out.rstrip("/") + "-pbtxt")
    write_wav_seeds(sys.argv[3] if len(sys.argv) > 3 else out.rstrip("/") + "-wav")
    write_npy_seeds(sys.argv[4] if len(sys.argv) > 4 else out.rstrip("/") + "-npy")
