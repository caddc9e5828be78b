"""Triton's classification extension (src/runtime/classify.c) and the
built-in `softmax` processor: an output asked for with a class count comes
back as its top values per row, "value:index:label" BYTES, labels from the
output's label_filename, over HTTP JSON, HTTP binary (the Python client's
class_count), gRPC and the Redis queue; a classifier -> softmax ensemble
answers with its most probable labels. Bad requests and label files get
clear errors, and the server keeps serving.
"""

import json
import pathlib
import sys
import time

import numpy as np
import pytest
import requests
from onnx import TensorProto, helper, save
from redis_server import redis_server  # noqa: F401  (the fixture)

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import infd.grpc as grpcclient  # noqa: E402
import infd.http as httpclient  # noqa: E402

LABELS = ["cat", "dog", "fox", "owl", "eel", "yak", "gnu"]
C = len(LABELS)
W = np.random.default_rng(7).normal(size=(4, C)).astype(np.float32)


def classifier(root, name="clf", labels="labels.txt", extra=""):
    """X [4] -> MatMul W -> LOGITS [7], batching up to 8; labels beside."""
    d = pathlib.Path(root) / name
    (d / "1").mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["LOGITS"])], name,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("LOGITS", TensorProto.FLOAT, ["N", C])],
        initializer=[helper.make_tensor("W", TensorProto.FLOAT, W.shape, W.tobytes(), raw=True)])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         str(d / "1" / "model.onnx"))
    label_line = f' label_filename: "{labels}"' if labels else ""
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f'output [ {{ name: "LOGITS" data_type: TYPE_FP32 dims: [ {C} ]{label_line} }} ]\n'
        + extra)
    return d


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    d = classifier(root)
    (d / "labels.txt").write_text("\n".join(LABELS) + "\n")
    # The probabilities: classifier -> softmax, labels on the ensemble's output.
    (root / "probs" / "1").mkdir(parents=True)
    (root / "probs" / "config.pbtxt").write_text(
        'name: "probs"\nbackend: "softmax"\nmax_batch_size: 8\n'
        'dynamic_batching { }\n')
    (root / "classify" / "1").mkdir(parents=True)
    (root / "classify" / "labels.txt").write_text("\n".join(LABELS[:5]) + "\n")  # 5 of 7 named
    (root / "classify" / "config.pbtxt").write_text(f'''
name: "classify"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "P" data_type: TYPE_FP32 dims: [ {C} ] label_filename: "labels.txt" }} ]
ensemble_scheduling {{ step [
  {{ model_name: "clf" model_version: -1
    input_map {{ key: "X" value: "X" }} output_map {{ key: "LOGITS" value: "logits" }} }},
  {{ model_name: "probs" model_version: -1
    input_map {{ key: "LOGITS" value: "logits" }} output_map {{ key: "PROBS" value: "P" }} }} ] }}
''')
    # Broken label files: missing, and a path instead of a file name.
    classifier(root, "no_labels", labels="missing.txt")
    classifier(root, "bad_labels", labels="../labels.txt")
    return root


def expected(values, k, labels):
    """Triton's strings for one row: the k largest, ties to the lower index."""
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    return [f"{values[i]:f}:{i}" + (f":{labels[i]}" if i < len(labels) else "")
            for i in order]


def parse(s):
    value, index, *label = s.split(":")
    return float(value), int(index), label[0] if label else None


def test_classification_on_every_frontend(serve, repo):
    srv = serve(repo)
    x = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    logits = x @ W

    # HTTP JSON: the output's parameters ask for 3 classes.
    r = requests.post(f"{srv.url}/v2/models/clf/infer", json={
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [3, 4],
                    "data": x.flatten().tolist()}],
        "outputs": [{"name": "LOGITS", "parameters": {"classification": 3}}]}, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["datatype"] == "BYTES" and out["shape"] == [3, 3]
    got = np.array(out["data"]).reshape(3, 3)
    for row in range(3):
        want = expected(logits[row].tolist(), 3, LABELS)
        # Values are printed from float32: compare the ranking and labels
        # exactly, the values to float32 precision.
        for g, w in zip(got[row], want):
            gv, gi, gl = parse(g)
            wv, wi, wl = parse(w)
            assert (gi, gl) == (wi, wl) and abs(gv - wv) < 1e-5, (g, w)

    # More classes than there are: all of them, best first.
    r = requests.post(f"{srv.url}/v2/models/clf/infer", json={
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4],
                    "data": x[0].tolist()}],
        "outputs": [{"name": "LOGITS", "parameters": {"classification": 50}}]}, timeout=30)
    assert r.json()["outputs"][0]["shape"] == [1, C]

    # HTTP binary, through the Python client's class_count.
    c = httpclient.InferenceServerClient(f"{srv.host}:{srv.http_port}")
    t = httpclient.InferInput("X", [3, 4], "FP32")
    t.set_data_from_numpy(x, binary_data=True)
    res = c.infer("clf", [t], outputs=[httpclient.InferRequestedOutput("LOGITS", class_count=2)])
    top = res.as_numpy("LOGITS")
    assert top.shape == (3, 2)
    assert [parse(s.decode())[1] for s in top[:, 0]] == np.argmax(logits, 1).tolist()

    # gRPC.
    g = grpcclient.InferenceServerClient(f"{srv.host}:{srv.grpc_port}")
    t = grpcclient.InferInput("X", [3, 4], "FP32")
    t.set_data_from_numpy(x)
    res = g.infer("clf", [t], outputs=[grpcclient.InferRequestedOutput("LOGITS", class_count=1)])
    top = res.as_numpy("LOGITS")
    assert top.shape == (3, 1)
    assert [parse(s.decode())[2] for s in top[:, 0]] == [LABELS[i] for i in
                                                          np.argmax(logits, 1)]

    # Without the parameter the output is the tensor itself.
    res = c.infer("clf", [t_http(x)])
    assert np.allclose(res.as_numpy("LOGITS"), logits, atol=1e-5)


def t_http(x):
    t = httpclient.InferInput("X", list(x.shape), "FP32")
    t.set_data_from_numpy(x, binary_data=True)
    return t


def test_softmax_ensemble_gives_the_most_probable_labels(serve, repo):
    srv = serve(repo)
    x = np.random.default_rng(5).normal(size=(2, 4)).astype(np.float32)
    logits = (x @ W).astype(np.float64)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    c = httpclient.InferenceServerClient(f"{srv.host}:{srv.http_port}")
    # The probabilities themselves.
    res = c.infer("classify", [t_http(x)])
    p = res.as_numpy("P")
    assert np.allclose(p, probs, atol=1e-6) and np.allclose(p.sum(1), 1, atol=1e-6)
    # Top 7 with labels: the ensemble's label file names 5 of the 7 classes.
    res = c.infer("classify", [t_http(x)],
                  outputs=[httpclient.InferRequestedOutput("P", class_count=C)])
    top = res.as_numpy("P")
    for row in range(2):
        parsed = [parse(s.decode()) for s in top[row]]
        assert [i for _, i, _ in parsed] == np.argsort(-probs[row], kind="stable").tolist()
        for v, i, label in parsed:
            assert abs(v - probs[row, i]) < 1e-5
            assert label == (LABELS[i] if i < 5 else None)


def test_classification_errors_and_label_files(serve, repo):
    srv = serve(repo)
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    for cls, why in ((0, "must be 1 to 1000000, got 0"), (-2, "non-negative integer"),
                     ("3", "must be an integer, got a string")):
        r = requests.post(f"{srv.url}/v2/models/clf/infer", json=dict(body, outputs=[
            {"name": "LOGITS", "parameters": {"classification": cls}}]), timeout=30)
        assert r.status_code == 400 and why in r.json()["error"], (cls, r.text)
    index = {m["name"]: m for m in requests.post(f"{srv.url}/v2/repository/index", json={},
                                                 timeout=10).json()}
    assert index["no_labels"]["state"] == "UNAVAILABLE"
    assert "missing.txt" in index["no_labels"]["reason"]
    assert index["bad_labels"]["state"] == "UNAVAILABLE"
    assert "must be a file name in the model folder" in index["bad_labels"]["reason"]
    # gRPC: a classification parameter that is not an integer.
    g = grpcclient.InferenceServerClient(f"{srv.host}:{srv.grpc_port}")
    t = grpcclient.InferInput("X", [1, 4], "FP32")
    t.set_data_from_numpy(np.ones((1, 4), np.float32))
    bad = grpcclient.InferRequestedOutput("LOGITS", class_count=2000000)
    with pytest.raises(Exception, match="classification"):
        g.infer("clf", [t], outputs=[bad])
    # The server keeps serving.
    assert requests.post(f"{srv.url}/v2/models/clf/infer", json=body,
                         timeout=30).status_code == 200


def test_classification_through_the_redis_queue(serve, repo, redis_server):
    srv = serve(repo, "--redis", redis_server.url)
    c = redis_server.client()
    x = np.arange(4, dtype=np.float32)
    c.xadd("infd:jobs:clf", {"id": "cls-1", "request": json.dumps({
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": x.tolist()}],
        "outputs": [{"name": "LOGITS", "parameters": {"classification": 2}}]})})
    deadline = time.time() + 30
    while (raw := c.get("results:cls-1")) is None:
        assert time.time() < deadline and srv.is_running()
        time.sleep(0.02)
    res = json.loads(raw.partition(b"\n")[0])
    assert res["status"] == "ok", res
    out = res["outputs"][0]
    assert out["datatype"] == "BYTES" and out["shape"] == [1, 2]
    assert [parse(s)[1] for s in out["data"]] == np.argsort(-(x @ W), kind="stable")[:2].tolist()
