"""Embedded Python processors (backend "python", src/plugins/python.c): a
model.py written for Triton's Python backend, served by `infd serve` with
CPython in the process. It batches (execute gets several requests), gets
BYTES, can be an ensemble step, and its errors - an exception, a per-request
error, a wrong output, a model.py that does not import - are clear model or
request errors while the server keeps serving.
"""

import concurrent.futures
import os
import pathlib
import sys
import textwrap

import numpy as np
import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import infd.grpc as grpcclient  # noqa: E402
import infd.http as httpclient  # noqa: E402

# A Triton model.py, unchanged: scales X by the config's parameter, and
# reports how many requests its execute call got (batching seen from Python).
SCALE_PY = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.factor = float(self.config["parameters"]["factor"]["string_value"])
        out = pb_utils.get_output_config_by_name(self.config, "Y")
        self.out_dtype = pb_utils.triton_string_to_numpy(out["data_type"])
        self.instance = args["model_instance_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x.size and x.flat[0] < 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("X must not start negative",
                                               pb_utils.TritonError.INVALID_ARG)))
                continue
            y = (x * self.factor).astype(self.out_dtype)
            n = np.full((x.shape[0], 1), len(requests), np.int32)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("Y", y), pb_utils.Tensor("N", n)]))
        return responses

    def finalize(self):
        print("scale: finalize", flush=True)
'''

SCALE_CONFIG = '''
name: "scale"
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "factor" value { string_value: "3" } }
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
'''

# Strings in, strings out, and the model's inputs and outputs declared by
# auto_complete_config instead of config.pbtxt; a helper module beside it.
WORDS_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils
from helper import shout


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]})
        config.add_output({"name": "SHOUT", "data_type": "TYPE_STRING", "dims": [-1]})
        config.add_output({"name": "LEN", "data_type": "TYPE_INT64", "dims": [-1]})
        return config

    def execute(self, requests):
        out = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()
            shouted = np.array([shout(t) for t in text.flat], dtype=np.object_).reshape(text.shape)
            lens = np.array([len(t) for t in text.flat], np.int64).reshape(text.shape)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SHOUT", shouted),
                                                   pb_utils.Tensor("LEN", lens)]))
        return out
'''

BROKEN = {
    # model.py raises in execute: every request of the batch fails with it.
    "raises": ('''
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [1 / 0 for r in requests]
''', 'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
     'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'),
    # An output of the wrong datatype: the request fails, naming it.
    "wrong_dtype": ('''
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.zeros((1, 2), np.int8))])
                for r in requests]
''', 'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
     'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'),
    # A syntax error: the model is UNAVAILABLE with the file and line.
    "syntax": ("class TritonPythonModel:\n    def execute(self, requests)\n        pass\n",
               'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
               'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'),
    # initialize raises.
    "init_fails": ('''
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no weights for " + args["model_name"])
    def execute(self, requests):
        return []
''', 'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
     'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'),
    # No TritonPythonModel class.
    "no_class": ("x = 1\n", 'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'),
    # Keeps its input arrays: the server logs it once, and keeps serving.
    "keeps": ('''
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        self.kept = []
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            self.kept.append(x)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.copy())]))
        self.kept = self.kept[-2:]
        return out
''', 'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
     'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'),
}


# Under ASan, CPython and numpy (built without frame pointers) need the slow
# unwinder for the leak checker to see that an allocation was made by an
# import, which the infd binary's suppressions name (src/plugins/python.c).
# Other builds ignore the variable.
ASAN_ENV = dict(os.environ, ASAN_OPTIONS=":".join(filter(None, [
    os.environ.get("ASAN_OPTIONS"), "fast_unwind_on_malloc=0", "malloc_context_size=120"])))


@pytest.fixture
def serve_py(serve):
    return lambda root, *args: serve(root, *args, env=ASAN_ENV)


def write_model(root, name, model_py, config, files=None):
    d = pathlib.Path(root) / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "1" / "model.py").write_text(textwrap.dedent(model_py))
    for fname, text in (files or {}).items():
        (d / "1" / fname).write_text(text)
    (d / "config.pbtxt").write_text(config)
    return d


@pytest.fixture
def py_repo(tmp_path):
    root = tmp_path / "repo"
    write_model(root, "scale", SCALE_PY, SCALE_CONFIG)
    write_model(root, "words", WORDS_PY, 'name: "words"\nbackend: "python"\nmax_batch_size: 0\n',
                files={"helper.py": "def shout(b):\n    return b.upper() + b'!'\n"})
    for name, (py, io) in BROKEN.items():
        write_model(root, name, py,
                    f'name: "{name}"\nbackend: "python"\nmax_batch_size: 4\n' + io)
    return root


def infer(url, model, x):
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": list(x.shape),
                        "data": x.flatten().tolist()}]}
    return requests.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)


def test_python_model_serves_batches_and_reports_errors(serve_py, py_repo):
    srv = serve_py(py_repo)
    r = infer(srv.url, "scale", np.array([[1.0, 2.0, 4.0]], np.float32))
    assert r.status_code == 200, r.text
    outs = {o["name"]: o for o in r.json()["outputs"]}
    assert outs["Y"]["data"] == [3.0, 6.0, 12.0] and outs["Y"]["shape"] == [1, 3]
    md = requests.get(f"{srv.url}/v2/models/scale", timeout=10).json()
    assert md["platform"] == "python"
    assert [i["name"] for i in md["inputs"]] == ["X"]

    # Concurrent clients: the dynamic batcher hands execute several requests.
    c = httpclient.InferenceServerClient(f"{srv.host}:{srv.http_port}")

    def one(k):
        t = httpclient.InferInput("X", [1, 4], "FP32")
        x = np.full((1, 4), k, np.float32)
        t.set_data_from_numpy(x, binary_data=True)
        res = c.infer("scale", [t])
        assert np.array_equal(res.as_numpy("Y"), x * 3)
        return int(res.as_numpy("N")[0, 0])

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        seen = list(pool.map(one, range(1, 33)))
    assert max(seen) > 1, seen
    st = requests.get(f"{srv.url}/v2/models/scale/stats", timeout=10).json()["model_stats"][0]
    assert st["inference_count"] == 33 and st["execution_count"] < 33

    # A per-request error fails that request alone, with the model's message.
    r = infer(srv.url, "scale", np.array([[-1.0, 5.0]], np.float32))
    assert r.status_code == 400 and "X must not start negative" in r.json()["error"], r.text

    # Only the outputs asked for come back.
    r = requests.post(f"{srv.url}/v2/models/scale/infer", json={
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}],
        "outputs": [{"name": "Y"}]}, timeout=30)
    assert [o["name"] for o in r.json()["outputs"]] == ["Y"]

    # Broken model.py files: request errors and UNAVAILABLE models, clearly.
    r = infer(srv.url, "raises", np.ones((1, 2), np.float32))
    assert r.status_code == 500, r.text
    assert "ZeroDivisionError: division by zero (model.py, line 5, in" in r.json()["error"]
    r = infer(srv.url, "wrong_dtype", np.ones((1, 2), np.float32))
    assert r.status_code == 400 and "output 'Y' is FP32; execute gave int8" in r.json()["error"]
    index = {m["name"]: m for m in requests.post(f"{srv.url}/v2/repository/index", json={},
                                                 timeout=10).json()}
    reasons = {
        "syntax": "SyntaxError: expected ':'",
        "init_fails": "RuntimeError: no weights for init_fails (model.py, line 4, in initialize)",
        "no_class": "defines no class TritonPythonModel",
    }
    for name, why in reasons.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert why in index[name]["reason"], (name, index[name]["reason"])

    # A model that keeps its input arrays is logged, once, and still serves.
    for _ in range(3):
        r = infer(srv.url, "keeps", np.array([[7.0]], np.float32))
        assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [7.0]
    assert srv.log().count("keeps an input array after execute returned") == 1

    # ... and the others keep serving.
    assert infer(srv.url, "scale", np.ones((1, 1), np.float32)).status_code == 200


def test_python_model_bytes_auto_complete_and_grpc(serve_py, py_repo):
    srv = serve_py(py_repo)
    md = requests.get(f"{srv.url}/v2/models/words", timeout=10).json()
    assert [o["name"] for o in md["outputs"]] == ["SHOUT", "LEN"]
    assert md["inputs"][0]["datatype"] == "BYTES"
    r = requests.post(f"{srv.url}/v2/models/words/infer", json={"inputs": [
        {"name": "TEXT", "datatype": "BYTES", "shape": [3], "data": ["hi", "", "infd"]}]},
        timeout=30)
    assert r.status_code == 200, r.text
    outs = {o["name"]: o for o in r.json()["outputs"]}
    assert outs["SHOUT"]["data"] == ["HI!", "!", "INFD!"] and outs["LEN"]["data"] == [2, 0, 4]
    g = grpcclient.InferenceServerClient(f"{srv.host}:{srv.grpc_port}")
    t = grpcclient.InferInput("TEXT", [2], "BYTES")
    t.set_data_from_numpy(np.array([b"a\x00b", b"xyz"], dtype=np.object_))
    res = g.infer("words", [t])
    assert res.as_numpy("SHOUT").tolist() == [b"A\x00B!", b"XYZ!"]
    assert res.as_numpy("LEN").tolist() == [3, 3]


def test_python_step_in_an_ensemble(serve_py, py_repo):
    """A python model as both steps of an ensemble: scaled twice."""
    root = py_repo
    (root / "twice" / "1").mkdir(parents=True)
    (root / "twice" / "config.pbtxt").write_text('''
name: "twice"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "scale" model_version: -1
    input_map { key: "X" value: "IN" } output_map { key: "Y" value: "mid" } },
  { model_name: "scale" model_version: -1
    input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUT" } } ] }
''')
    srv = serve_py(root)
    x = np.array([[1.5, -0.5]], np.float32)
    r = requests.post(f"{srv.url}/v2/models/twice/infer", json={"inputs": [
        {"name": "IN", "datatype": "FP32", "shape": [1, 2], "data": x.flatten().tolist()}]},
        timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == (x * 9).flatten().tolist()


def test_python_model_finalize_runs_at_stop(serve_py, py_repo):
    srv = serve_py(py_repo)
    assert infer(srv.url, "scale", np.ones((1, 1), np.float32)).status_code == 200
    assert srv.stop() == 0
    # Two instances, each finalized.
    assert srv.log().count("scale: finalize") == 2
