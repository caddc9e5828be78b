"""End-to-end tests of the HTTP/REST frontend (KServe v2 + Triton extensions)
against a real `infd serve`, with Python `requests` and with curl.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_http.py

Most tests share one server (module fixture `srv`) over a repository with
add_sub, a batching add_sub and one identity model per datatype. Tests that
need other flags (explicit model control, a small body limit, SIGTERM) start
their own. Bad-input tests check the message, then that the server still
answers. No assertion depends on timing; sleeps only order events.
"""

import concurrent.futures
import json
import re
import socket
import subprocess
import threading
import time

import numpy as np
import pytest
import requests

import repo as model_repo
from serving import Server

TIMEOUT = 60  # seconds a single HTTP call may take on a loaded 2-core box


# -- helpers -------------------------------------------------------------------


def bf16_bits(a):
    """float32 array -> bfloat16 bit patterns (round to nearest even)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def json_input(name, arr, dtype):
    return {"name": name, "shape": list(arr.shape), "datatype": dtype,
            "data": arr.flatten().tolist()}


def binary_request(inputs, outputs=None, **top):
    """(body, headers) of a binary-extension request; inputs: [(name, dtype, array)]."""
    hdr = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": d,
                       "parameters": {"binary_data_size": a.nbytes}} for n, d, a in inputs]}
    if outputs is not None:
        hdr["outputs"] = outputs
    hdr.update(top)
    text = json.dumps(hdr).encode()
    body = text + b"".join(a.tobytes() for _, _, a in inputs)
    return body, {"Inference-Header-Content-Length": str(len(text)),
                  "Content-Type": "application/octet-stream"}


def split_binary_response(r):
    """(json header, binary part) of a response."""
    n = int(r.headers.get("Inference-Header-Content-Length", len(r.content)))
    return json.loads(r.content[:n]), r.content[n:]


def binary_outputs(r):
    """{name: raw bytes} of a binary response's binary outputs, in order."""
    hdr, rest = split_binary_response(r)
    out, off = {}, 0
    for o in hdr["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is not None:
            out[o["name"]] = rest[off:off + size]
            off += size
    assert off == len(rest), (off, len(rest))
    return hdr, out


def infer(srv, model, body, expect=200, **kw):
    r = requests.post(f"{srv.url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT, **kw)
    assert r.status_code == expect, r.text
    return r.json()


def add_sub_body(a, b, **extra):
    body = {"inputs": [json_input("INPUT0", a, "FP32"), json_input("INPUT1", b, "FP32")]}
    body.update(extra)
    return body


def assert_alive(srv):
    r = requests.get(srv.url + "/v2/health/ready", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    out = infer(srv, "add_sub", add_sub_body(a, a))
    assert out["outputs"][0]["data"] == (2 * a).flatten().tolist()


def expect_error(srv, path, code, needle, method="post", **kw):
    r = getattr(requests, method)(srv.url + path, timeout=TIMEOUT, **kw)
    assert r.status_code == code, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    msg = r.json()["error"]
    assert needle in msg, msg
    return msg


def curl(*args, data_file=None):
    """Runs curl; returns (status code, body bytes, headers text)."""
    cmd = ["curl", "-sS", "-D", "-", "-o", "-", "--max-time", str(TIMEOUT)]
    if data_file is not None:
        cmd += ["--data-binary", f"@{data_file}"]
    r = subprocess.run(cmd + list(args), capture_output=True, timeout=TIMEOUT + 10)
    assert r.returncode == 0, r.stderr.decode()
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 100"):  # Expect: 100-continue
        head, _, body = body.partition(b"\r\n\r\n")
    code = int(head.split(b" ")[1])
    return code, body, head.decode()


def wait_until(what, fn, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def queue_depth(srv, model):
    """Requests waiting in `model`'s queue, from the metrics endpoint."""
    text = requests.get(srv.metrics_url, timeout=TIMEOUT).text
    m = re.search(r'^infd_inference_queue_depth\{[^}]*model="%s"[^}]*\} (\S+)$' % model, text,
                  re.M)
    return float(m.group(1)) if m else 0.0


# -- the shared server ----------------------------------------------------------


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    models = tmp_path_factory.mktemp("http") / "models"
    model_repo.add_sub(models)
    # A long queue delay so that concurrent requests meet in one batch.
    model_repo.add_sub(models, name="add_sub_batch", max_batch_size=8,
                       dynamic_batching={"max_queue_delay_microseconds": 100000})
    model_repo.add_sub(models, name="add_sub_nobatch", max_batch_size=0)
    # ResNet-50-sized rows (3x224x224 FP32, 602 KB): bodies that arrive in
    # many reads and are served from the pieces they landed in.
    model_repo.add_sub(models, name="add_sub_big", dims=(150528,), max_batch_size=4,
                       dynamic_batching={"max_queue_delay_microseconds": 200000})
    for dt in model_repo.IDENTITY_DTYPES:
        model_repo.identity(models, dtype=dt)
    return models


@pytest.fixture(scope="module")
def srv(infd_bin, repo):
    s = Server(infd_bin, repo)
    yield s
    rc = s.stop()
    s.cleanup()
    assert rc == 0, f"infd serve exited with {rc}"


# -- health and metadata -------------------------------------------------------


def test_server_metadata_and_health(srv):
    r = requests.get(srv.url + "/v2", timeout=TIMEOUT)
    assert r.status_code == 200
    meta = r.json()
    assert meta["name"] == "infd" and meta["version"]
    assert "binary_tensor_data" in meta["extensions"]
    assert "model_repository" in meta["extensions"]
    for path in ("/v2/health/live", "/v2/health/ready"):
        assert requests.get(srv.url + path, timeout=TIMEOUT).status_code == 200
    code, body, _ = curl(srv.url + "/v2")
    assert code == 200 and json.loads(body)["name"] == "infd"
    # HEAD: headers only, and the keep-alive connection stays in step.
    with requests.Session() as s:
        r = s.head(srv.url + "/v2/models/add_sub", timeout=TIMEOUT)
        assert r.status_code == 200 and r.content == b""
        assert s.get(srv.url + "/v2", timeout=TIMEOUT).json()["name"] == "infd"
    code, _, _ = curl(srv.url + "/v2/health/ready")
    assert code == 200


def test_model_metadata(srv):
    for path in ("/v2/models/add_sub", "/v2/models/add_sub/versions/1"):
        r = requests.get(srv.url + path, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        m = r.json()
        assert m["name"] == "add_sub" and m["versions"] == ["1"]
        assert m["platform"] == "onnxruntime_onnx"
        assert [i["name"] for i in m["inputs"]] == ["INPUT0", "INPUT1"]
        assert m["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
        assert m["outputs"][1] == {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 16]}
    m = requests.get(srv.url + "/v2/models/add_sub_nobatch", timeout=TIMEOUT).json()
    assert m["inputs"][0]["shape"] == [16], m  # no batch dim without batching
    code, body, _ = curl(srv.url + "/v2/models/identity_fp16")
    assert code == 200
    assert json.loads(body)["inputs"][0] == {"name": "INPUT0", "datatype": "FP16",
                                            "shape": [-1, 4]}


def test_model_ready_and_config(srv):
    assert requests.get(srv.url + "/v2/models/add_sub/ready", timeout=TIMEOUT).status_code == 200
    assert requests.get(srv.url + "/v2/models/add_sub/versions/1/ready",
                        timeout=TIMEOUT).status_code == 200
    r = requests.get(srv.url + "/v2/models/add_sub_batch/config", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    cfg = r.json()
    assert cfg["name"] == "add_sub_batch" and cfg["max_batch_size"] == 8
    assert "dynamic_batching" in cfg, cfg
    code, body, _ = curl(srv.url + "/v2/models/add_sub/versions/1/config")
    assert code == 200 and json.loads(body)["name"] == "add_sub"


def test_unknown_model_route_method_version(srv):
    expect_error(srv, "/v2/models/nope", 404, "nope", method="get")
    expect_error(srv, "/v2/models/nope/ready", 404, "nope", method="get")
    expect_error(srv, "/v2/models/nope/infer", 404, "nope", json={"inputs": []})
    expect_error(srv, "/v2/models/add_sub/versions/7", 404, "add_sub", method="get")
    expect_error(srv, "/v2/models/add_sub/versions/x/ready", 400, "invalid version", method="get")
    expect_error(srv, "/v2/nothing/here", 404, "no route", method="get")
    expect_error(srv, "/metrics", 404, "no route", method="get")
    expect_error(srv, "/v2/models/add_sub/frobnicate", 404, "no route", method="get")
    r = requests.get(srv.url + "/v2/models/add_sub/infer", timeout=TIMEOUT)
    assert r.status_code == 405 and r.headers["Allow"] == "POST", r.text
    assert "use POST" in r.json()["error"]
    r = requests.post(srv.url + "/v2/health/ready", timeout=TIMEOUT)
    assert r.status_code == 405 and "GET" in r.headers["Allow"]
    code, body, _ = curl("-X", "DELETE", srv.url + "/v2/models/add_sub")
    assert code == 405 and b"DELETE is not allowed" in body
    code, body, _ = curl(srv.url + "/v2/models/nope/config")
    assert code == 404 and b"nope" in body
    assert_alive(srv)


# -- inference: JSON and binary ---------------------------------------------


def test_infer_json(srv):
    a = np.arange(32, dtype=np.float32).reshape(2, 16) / 4
    b = np.full((2, 16), 0.5, np.float32)
    out = infer(srv, "add_sub", add_sub_body(a, b, id="req-7"))
    assert out["model_name"] == "add_sub" and out["model_version"] == "1"
    assert out["id"] == "req-7"
    o = {x["name"]: x for x in out["outputs"]}
    assert o["OUTPUT0"]["datatype"] == "FP32" and o["OUTPUT0"]["shape"] == [2, 16]
    assert np.array_equal(np.array(o["OUTPUT0"]["data"], np.float32).reshape(2, 16), a + b)
    assert np.array_equal(np.array(o["OUTPUT1"]["data"], np.float32).reshape(2, 16), a - b)
    # Only the requested output; nested data; inputs in any key order.
    body = {"outputs": [{"name": "OUTPUT1"}],
            "inputs": [{"data": a[:1].tolist(), "shape": [1, 16], "name": "INPUT0",
                        "datatype": "FP32"},
                       {"datatype": "FP32", "name": "INPUT1", "data": b[:1].tolist(),
                        "shape": [1, 16]}]}
    out = infer(srv, "add_sub", body)
    assert [x["name"] for x in out["outputs"]] == ["OUTPUT1"]
    assert out["outputs"][0]["data"] == (a[:1] - b[:1]).flatten().tolist()
    assert "id" not in out
    # A model without batching takes the full shape.
    v = np.arange(16, dtype=np.float32)
    out = infer(srv, "add_sub_nobatch", {"inputs": [json_input("INPUT0", v, "FP32"),
                                                    json_input("INPUT1", v, "FP32")]})
    assert out["outputs"][0]["shape"] == [16] and out["outputs"][0]["data"] == (2 * v).tolist()


def test_infer_binary_large_bodies(srv):
    # Two 602 KB binary inputs per row: each input's bytes sit in several
    # of the connection's read buffers and are gathered from there into
    # batches that concurrent requests share.
    rng = np.random.default_rng(7)

    def one(rows):
        a = rng.standard_normal((rows, 150528)).astype(np.float32)
        b = rng.standard_normal((rows, 150528)).astype(np.float32)
        body, hdrs = binary_request([("INPUT0", "FP32", a), ("INPUT1", "FP32", b)],
                                    parameters={"binary_data_output": True})
        return a, b, body, hdrs

    cases = [one(1) for _ in range(4)] + [one(2)]
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        replies = list(pool.map(lambda c: requests.post(
            srv.url + "/v2/models/add_sub_big/infer", data=c[2], headers=c[3], timeout=TIMEOUT),
            cases))
    for (a, b, _, _), r in zip(cases, replies):
        assert r.status_code == 200, r.text
        hdr, bins = binary_outputs(r)
        assert np.array_equal(np.frombuffer(bins["OUTPUT0"], np.float32).reshape(a.shape), a + b)
        assert np.array_equal(np.frombuffer(bins["OUTPUT1"], np.float32).reshape(a.shape), a - b)
    s = requests.get(srv.url + "/v2/models/add_sub_big/stats", timeout=TIMEOUT).json()
    s = s["model_stats"][0]
    assert s["inference_count"] == 6 and s["execution_count"] < len(cases), s


def test_infer_binary(srv):
    a = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    # All outputs binary.
    body, hdrs = binary_request([("INPUT0", "FP32", a), ("INPUT1", "FP32", b)],
                                parameters={"binary_data_output": True})
    r = requests.post(srv.url + "/v2/models/add_sub/infer", data=body, headers=hdrs,
                      timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/octet-stream"
    hdr, bins = binary_outputs(r)
    assert [o["name"] for o in hdr["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert all(o["parameters"]["binary_data_size"] == 3 * 16 * 4 for o in hdr["outputs"])
    assert np.array_equal(np.frombuffer(bins["OUTPUT0"], np.float32).reshape(3, 16), a + b)
    assert np.array_equal(np.frombuffer(bins["OUTPUT1"], np.float32).reshape(3, 16), a - b)
    # Mixed: OUTPUT1 binary, OUTPUT0 JSON, in request order.
    body, hdrs = binary_request([("INPUT0", "FP32", a), ("INPUT1", "FP32", b)],
                                outputs=[{"name": "OUTPUT1", "parameters": {"binary_data": True}},
                                         {"name": "OUTPUT0", "parameters": {"binary_data": False}}])
    r = requests.post(srv.url + "/v2/models/add_sub/infer", data=body, headers=hdrs,
                      timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    hdr, bins = binary_outputs(r)
    assert [o["name"] for o in hdr["outputs"]] == ["OUTPUT1", "OUTPUT0"]
    assert np.array_equal(np.frombuffer(bins["OUTPUT1"], np.float32).reshape(3, 16), a - b)
    assert np.array_equal(np.array(hdr["outputs"][1]["data"], np.float32).reshape(3, 16), a + b)
    # JSON inputs, binary outputs; and binary inputs, JSON outputs.
    r = requests.post(srv.url + "/v2/models/add_sub/infer", timeout=TIMEOUT,
                      json=add_sub_body(a, b, parameters={"binary_data_output": True}))
    hdr, bins = binary_outputs(r)
    assert np.array_equal(np.frombuffer(bins["OUTPUT0"], np.float32).reshape(3, 16), a + b)
    body, hdrs = binary_request([("INPUT0", "FP32", a), ("INPUT1", "FP32", b)])
    r = requests.post(srv.url + "/v2/models/add_sub/infer", data=body, headers=hdrs,
                      timeout=TIMEOUT)
    assert r.headers["Content-Type"] == "application/json"
    out = r.json()
    assert np.array_equal(np.array(out["outputs"][0]["data"], np.float32).reshape(3, 16), a + b)
    # One input binary, the other JSON.
    text = json.dumps({"inputs": [json_input("INPUT0", a, "FP32"),
                                  {"name": "INPUT1", "shape": [3, 16], "datatype": "FP32",
                                   "parameters": {"binary_data_size": b.nbytes}}]}).encode()
    r = requests.post(srv.url + "/v2/models/add_sub/infer", data=text + b.tobytes(),
                      headers={"Inference-Header-Content-Length": str(len(text))},
                      timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert np.array_equal(np.array(r.json()["outputs"][1]["data"], np.float32).reshape(3, 16),
                          a - b)


def test_infer_with_curl(srv, tmp_path):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), np.float32)
    f = tmp_path / "req.json"
    f.write_text(json.dumps(add_sub_body(a, b, id="curl-1")))
    code, body, head = curl("-H", "Content-Type: application/json",
                            srv.url + "/v2/models/add_sub/infer", data_file=f)
    assert code == 200, body
    out = json.loads(body)
    assert out["id"] == "curl-1" and out["outputs"][0]["data"] == (a + b).flatten().tolist()
    # Binary in, binary out.
    req, hdrs = binary_request([("INPUT0", "FP32", a), ("INPUT1", "FP32", b)],
                               parameters={"binary_data_output": True})
    f = tmp_path / "req.bin"
    f.write_bytes(req)
    code, body, head = curl("-H", f"Inference-Header-Content-Length: "
                                  f"{hdrs['Inference-Header-Content-Length']}",
                            "-H", "Content-Type: application/octet-stream",
                            srv.url + "/v2/models/add_sub/infer", data_file=f)
    assert code == 200, body
    n = int(re.search(r"Inference-Header-Content-Length: (\d+)", head, re.I).group(1))
    hdr = json.loads(body[:n])
    assert hdr["outputs"][0]["parameters"]["binary_data_size"] == 64
    assert np.array_equal(np.frombuffer(body[n:n + 64], np.float32), (a + b).flatten())
    assert np.array_equal(np.frombuffer(body[n + 64:], np.float32), (a - b).flatten())


# Values every datatype holds exactly (JSON and binary round trips).
DTYPE_VALUES = {
    "BOOL": [True, False, True, True, False, False, True, False],
    "UINT8": [0, 1, 127, 255, 3, 4, 5, 6],
    "UINT16": [0, 1, 65535, 300, 3, 4, 5, 6],
    "UINT32": [0, 1, 4294967295, 70000, 3, 4, 5, 6],
    "UINT64": [0, 1, 18446744073709551615, 2**40, 3, 4, 5, 6],
    "INT8": [-128, 127, 0, -1, 3, 4, 5, 6],
    "INT16": [-32768, 32767, 0, -1, 3, 4, 5, 6],
    "INT32": [-2147483648, 2147483647, 0, -1, 3, 4, 5, 6],
    "INT64": [-9223372036854775808, 9223372036854775807, 0, -1, 3, 4, 5, 6],
    "FP16": [0.5, -2.0, 65504.0, 0.0009765625, 3, 4, 5, 6],
    "BF16": [0.5, -2.0, 3.140625, 1e30, 3, 4, 5, 6],
    "FP32": [0.1, -2.5, 3.4e38, 1e-30, 3, 4, 5, 6],
    "FP64": [0.1, -2.5, 1e300, 5e-324, 3, 4, 5, 6],
}


def dtype_array(dt):
    vals = DTYPE_VALUES[dt]
    if dt == "BF16":
        return bf16_bits(np.array(vals, np.float32)).reshape(2, 4)
    return np.array(vals, dtype=model_repo.np_dtype(dt)).reshape(2, 4)


@pytest.mark.parametrize("dt", model_repo.IDENTITY_DTYPES)
def test_identity_every_datatype(srv, dt):
    model = f"identity_{dt.lower()}"
    arr = dtype_array(dt)
    # JSON in, JSON out.
    vals = DTYPE_VALUES[dt]
    out = infer(srv, model, {"inputs": [{"name": "INPUT0", "shape": [2, 4], "datatype": dt,
                                         "data": vals}]})
    o = out["outputs"][0]
    assert o["datatype"] == dt and o["shape"] == [2, 4]
    if dt in ("FP16", "BF16", "FP32"):
        # Written with 9 significant digits: reads back to the same float32.
        want = (bf16_to_f32(arr) if dt == "BF16" else arr).astype(np.float32).flatten()
        assert np.array_equal(np.array(o["data"], np.float32), want), o["data"]
    else:
        assert o["data"] == vals
    # Binary in, binary out: bytes come back unchanged.
    body, hdrs = binary_request([("INPUT0", dt, arr)], parameters={"binary_data_output": True})
    r = requests.post(f"{srv.url}/v2/models/{model}/infer", data=body, headers=hdrs,
                      timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    hdr, bins = binary_outputs(r)
    assert hdr["outputs"][0]["datatype"] == dt
    assert bins["OUTPUT0"] == arr.tobytes()


def test_bytes_datatype(srv):
    """No model in infd takes BYTES (the engine has no string tensors): the
    request decodes and the model refuses it with a clear error."""
    msg = expect_error(srv, "/v2/models/identity_fp32/infer", 400, "BYTES",
                       json={"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "BYTES",
                                         "data": ["a", "bc", "", "d\u00e9"]}]})
    assert "FP32" in msg, msg
    # Wrong JSON type inside BYTES data is the decoder's error.
    expect_error(srv, "/v2/models/identity_fp32/infer", 400, "expected a string for BYTES",
                 json={"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES",
                                   "data": [5]}]})
    assert_alive(srv)


# -- bad input --------------------------------------------------------------------


def test_bad_requests(srv):
    a = np.ones((1, 16), np.float32)
    url = "/v2/models/add_sub/infer"
    expect_error(srv, url, 400, "malformed JSON", data=b'{"inputs": [')
    expect_error(srv, url, 400, "malformed JSON", data=b'{"inputs": [}]}')
    expect_error(srv, url, 400, "empty request body", data=b"")
    expect_error(srv, url, 400, "must be a JSON object", data=b"[1, 2]")
    expect_error(srv, url, 400, "has no 'inputs'", json={"id": "x"})
    # Wrong shape: the element count, then the model's dims.
    body = add_sub_body(a, a)
    body["inputs"][0]["shape"] = [1, 15]
    expect_error(srv, url, 400, "input 'INPUT0': 'data' has more than the 15 elements", json=body)
    body = add_sub_body(np.ones((1, 8), np.float32), np.ones((1, 8), np.float32))
    expect_error(srv, url, 400, "INPUT0", json=body)
    body = add_sub_body(np.ones((9, 16), np.float32), np.ones((9, 16), np.float32))
    expect_error(srv, url, 400, "INPUT0", json=body)  # batch over max_batch_size
    # Wrong datatype.
    body = add_sub_body(a, a)
    body["inputs"][0]["datatype"] = "INT32"
    body["inputs"][0]["data"] = [1] * 16
    expect_error(srv, url, 400, "INT32", json=body)
    body["inputs"][0]["datatype"] = "FP8"
    expect_error(srv, url, 400, "unknown datatype 'FP8'", json=body)
    # Unknown input, missing input, unknown output.
    body = add_sub_body(a, a)
    body["inputs"][1]["name"] = "INPUT9"
    expect_error(srv, url, 400, "INPUT9", json=body)
    body = {"inputs": [json_input("INPUT0", a, "FP32")]}
    expect_error(srv, url, 400, "INPUT1", json=body)
    expect_error(srv, url, 400, "OUTPUT7",
                 json=add_sub_body(a, a, outputs=[{"name": "OUTPUT7"}]))
    # Element type and range.
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "UINT8",
                        "data": [1, 2, 256, 3]}]}
    expect_error(srv, "/v2/models/identity_uint8/infer", 400,
                 "input 'INPUT0': element 2: 256 is out of range for UINT8", json=body)
    body["inputs"][0]["data"] = [1, 2, "3", 4]
    expect_error(srv, "/v2/models/identity_uint8/infer", 400, "expected a number for UINT8",
                 json=body)
    body = add_sub_body(a, a)
    body["inputs"][0]["data"][3] = None
    expect_error(srv, url, 400, "element 3: expected a number for FP32, got null", json=body)
    # Too few elements.
    body = add_sub_body(a, a)
    body["inputs"][1]["data"] = body["inputs"][1]["data"][:10]
    expect_error(srv, url, 400, "input 'INPUT1': 'data' has 10 elements, shape [1,16] needs 16",
                 json=body)
    assert_alive(srv)


def test_bad_binary_requests(srv):
    a = np.ones((1, 16), np.float32)
    url = srv.url + "/v2/models/add_sub/infer"
    body, hdrs = binary_request([("INPUT0", "FP32", a), ("INPUT1", "FP32", a)])
    # Truncated binary data.
    r = requests.post(url, data=body[:-10], headers=hdrs, timeout=TIMEOUT)
    assert r.status_code == 400 and "input 'INPUT1': binary data truncated" in r.json()["error"]
    # Extra bytes after the tensors.
    r = requests.post(url, data=body + b"xyz", headers=hdrs, timeout=TIMEOUT)
    assert r.status_code == 400 and "binary_data_size add up to" in r.json()["error"], r.text
    # Header length past the body, and not a number.
    r = requests.post(url, data=body, timeout=TIMEOUT,
                      headers={"Inference-Header-Content-Length": str(len(body) + 1)})
    assert r.status_code == 400 and "Inference-Header-Content-Length" in r.json()["error"]
    r = requests.post(url, data=body, timeout=TIMEOUT,
                      headers={"Inference-Header-Content-Length": "12x"})
    assert r.status_code == 400 and "not a byte count" in r.json()["error"]
    # Binary inputs without the header: the binary part reads as JSON garbage.
    r = requests.post(url, data=body, timeout=TIMEOUT)
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"], r.text
    # binary_data_size that does not match the shape.
    text = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 60}}]}).encode()
    r = requests.post(url, data=text + bytes(60), timeout=TIMEOUT,
                      headers={"Inference-Header-Content-Length": str(len(text))})
    assert r.status_code == 400
    assert "binary_data_size is 60 bytes, shape [1,16] of FP32 needs 64" in r.json()["error"]
    assert_alive(srv)


# -- statistics and repository -----------------------------------------------------


def test_stats(srv):
    a = np.ones((2, 16), np.float32)
    for _ in range(3):
        infer(srv, "add_sub", add_sub_body(a, a))
    r = requests.get(srv.url + "/v2/models/add_sub/stats", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    st = r.json()["model_stats"]
    assert len(st) == 1 and st[0]["name"] == "add_sub" and st[0]["version"] == "1"
    s = st[0]
    assert s["inference_count"] >= 6 and s["execution_count"] >= 1
    assert s["last_inference"] > 0
    inf = s["inference_stats"]
    for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
        assert set(inf[k]) == {"count", "ns"}, inf
    assert inf["success"]["count"] >= 3 and inf["compute_infer"]["ns"] > 0
    assert any(b["batch_size"] == 2 and b["compute_infer"]["count"] >= 1
               for b in s["batch_stats"]), s["batch_stats"]
    r = requests.get(srv.url + "/v2/models/add_sub/versions/1/stats", timeout=TIMEOUT)
    assert r.json()["model_stats"][0]["name"] == "add_sub"
    r = requests.get(srv.url + "/v2/models/stats", timeout=TIMEOUT)
    names = {m["name"] for m in r.json()["model_stats"]}
    assert {"add_sub", "add_sub_batch", "identity_fp32"} <= names, names
    code, body, _ = curl(srv.url + "/v2/models/add_sub/stats")
    assert code == 200 and json.loads(body)["model_stats"][0]["name"] == "add_sub"
    expect_error(srv, "/v2/models/nope/stats", 404, "nope", method="get")


def test_repository_index(srv):
    r = requests.post(srv.url + "/v2/repository/index", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    rows = {x["name"]: x for x in r.json()}
    assert rows["add_sub"] == {"name": "add_sub", "version": "1", "state": "READY"}
    assert "identity_bf16" in rows
    r = requests.post(srv.url + "/v2/repository/index", json={"ready": True}, timeout=TIMEOUT)
    assert all(x["state"] == "READY" for x in r.json())
    code, body, _ = curl("-X", "POST", "-d", '{"ready": false}', srv.url + "/v2/repository/index")
    assert code == 200 and any(x["name"] == "add_sub" for x in json.loads(body))
    expect_error(srv, "/v2/repository/index", 400, "malformed JSON", data=b"{nope")
    expect_error(srv, "/v2/repository/index", 400, "'ready' must be a boolean",
                 json={"ready": 1})
    # Load/unload are refused outside explicit mode.
    expect_error(srv, "/v2/repository/models/add_sub/unload", 503, "explicit")
    assert_alive(srv)


# -- concurrency ---------------------------------------------------------------------


def test_batching_under_concurrency(srv):
    """Many concurrent single-row requests to a model with dynamic batching
    and a long queue delay form batches larger than 1 (batch_stats)."""
    n_threads, per_thread = 16, 4

    def client(t):
        s = requests.Session()
        for i in range(per_thread):
            a = np.full((1, 16), t * 100 + i, np.float32)
            b = np.arange(16, dtype=np.float32).reshape(1, 16)
            r = s.post(srv.url + "/v2/models/add_sub_batch/infer", json=add_sub_body(a, b),
                       timeout=TIMEOUT)
            assert r.status_code == 200, r.text
            o = r.json()["outputs"]
            assert o[0]["data"] == (a + b).flatten().tolist()  # each gets its own rows
            assert o[1]["data"] == (a - b).flatten().tolist()

    with concurrent.futures.ThreadPoolExecutor(n_threads) as ex:
        list(ex.map(client, range(n_threads)))
    st = requests.get(srv.url + "/v2/models/add_sub_batch/stats", timeout=TIMEOUT).json()
    s = st["model_stats"][0]
    assert s["inference_count"] == n_threads * per_thread
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in s["batch_stats"]}
    assert max(sizes) > 1, sizes
    assert sum(k * v for k, v in sizes.items()) == n_threads * per_thread, sizes
    assert s["execution_count"] < n_threads * per_thread


def test_many_connections_keepalive(srv):
    """64 idle keep-alive connections and a client stuck mid-body do not stop
    others from being served; a session reuses one connection."""
    idle = [socket.create_connection(("127.0.0.1", srv.http_port)) for _ in range(64)]
    slow = socket.create_connection(("127.0.0.1", srv.http_port))
    slow.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 1000\r\n\r\n{\"inputs\":")
    try:
        with requests.Session() as s:
            a = np.ones((1, 16), np.float32)
            for _ in range(5):
                r = s.post(srv.url + "/v2/models/add_sub/infer", json=add_sub_body(a, a),
                           timeout=TIMEOUT)
                assert r.status_code == 200
            assert r.headers.get("Connection", "").lower() != "close"
        # Raw keep-alive: two requests on one socket.
        c = socket.create_connection(("127.0.0.1", srv.http_port))
        c.settimeout(TIMEOUT)
        c.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while data.count(b"HTTP/1.1 200") < 2:
            chunk = c.recv(4096)
            assert chunk, data
            data += chunk
        c.close()
    finally:
        for c in idle:
            c.close()
        slow.close()
    assert_alive(srv)


def test_client_disconnects_mid_request(srv):
    """Clients that vanish while their inference is queued, or mid-body,
    do not hurt the requests of others."""
    a = np.ones((1, 16), np.float32)
    body = json.dumps(add_sub_body(a, a)).encode()
    req = (b"POST /v2/models/add_sub_batch/infer HTTP/1.1\r\nHost: x\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    # Gone while queued (add_sub_batch waits 100 ms for a batch): with
    # SO_LINGER 0 the close is a reset, so the reply's write fails.
    for _ in range(8):
        c = socket.create_connection(("127.0.0.1", srv.http_port))
        c.sendall(req)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()
    # Gone mid-body and mid-headers.
    for partial in (req[:len(req) - 20], req[:30]):
        c = socket.create_connection(("127.0.0.1", srv.http_port))
        c.sendall(partial)
        c.close()
    # Meanwhile others are served, concurrently and correctly.
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda i: infer(srv, "add_sub_batch",
                                           add_sub_body(a * i, a)), range(8)))
    for i, out in enumerate(outs):
        assert out["outputs"][0]["data"] == (a * i + a).flatten().tolist()
    assert_alive(srv)


# -- servers of their own -----------------------------------------------------------


def test_multiple_event_loops(serve, tmp_path):
    """--http-threads 3: loops share the port; every connection is served,
    batches still form across them, and the server stops cleanly."""
    models = tmp_path / "models"
    model_repo.add_sub(models, dynamic_batching={"max_queue_delay_microseconds": 50000})
    s = serve(models, "--http-threads", "3")

    def client(i):
        with requests.Session() as sess:  # a connection per client
            a = np.full((1, 16), i, np.float32)
            for _ in range(3):
                r = sess.post(s.url + "/v2/models/add_sub/versions/1/infer",
                              json=add_sub_body(a, a), timeout=TIMEOUT)
                assert r.status_code == 200, r.text
                assert r.json()["outputs"][0]["data"] == (2 * a).flatten().tolist()

    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        list(ex.map(client, range(12)))
    st = requests.get(s.url + "/v2/models/add_sub/stats", timeout=TIMEOUT).json()
    assert st["model_stats"][0]["inference_count"] == 36
    assert s.stop() == 0, s.log_tail()


def test_oversized_body_413(serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    s = serve(models, "--max-body-bytes", "4096")
    a = np.ones((1, 16), np.float32)
    infer(s, "add_sub", add_sub_body(a, a))  # small bodies pass
    big = np.ones((40, 16), np.float32)
    r = requests.post(s.url + "/v2/models/add_sub/infer", json=add_sub_body(big, big),
                      timeout=TIMEOUT)
    assert r.status_code == 413, r.text
    assert "4096" in r.json()["error"], r.text  # JSON, whoever refused it
    # The same with curl, and with a body just over the limit.
    f = tmp_path / "big.json"
    f.write_bytes(b"{" + b" " * 5000 + b"}")
    code, _, _ = curl("-H", "Content-Type: application/json", s.url + "/v2/models/add_sub/infer",
                      data_file=f)
    assert code == 413
    f.write_bytes(b"{" + b" " * 4095 + b"}")
    code, _, _ = curl(s.url + "/v2/models/add_sub/infer", data_file=f)
    assert code == 413
    assert_alive(s)


def test_queue_full_429_and_timeout_504(serve, tmp_path):
    """A full queue (max_queue_size) answers 429 (RESOURCE_EXHAUSTED); a request
    whose queue timeout passes answers 504; the server keeps serving."""
    models = tmp_path / "models"
    model_repo.add_sub(models, dynamic_batching={
        "max_queue_delay_microseconds": 1000000,
        "default_queue_policy": {"max_queue_size": 2, "allow_timeout_override": True}})
    s = serve(models)
    a = np.ones((1, 16), np.float32)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(lambda i: requests.post(s.url + "/v2/models/add_sub/infer",
                                                 json=add_sub_body(a, a), timeout=TIMEOUT),
                         range(8)))
    codes = sorted(r.status_code for r in rs)
    assert 200 in codes and 429 in codes, [(r.status_code, r.text) for r in rs]
    assert set(codes) <= {200, 429}, codes
    for r in rs:
        if r.status_code == 429:
            assert "queue" in r.json()["error"], r.text
    r = requests.post(s.url + "/v2/models/add_sub/infer", timeout=TIMEOUT,
                      json=add_sub_body(a, a, parameters={"timeout": 1000}))
    assert r.status_code == 504, r.text
    assert_alive(s)


def test_load_unload_while_serving(serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    model_repo.identity(models, dtype="INT32")
    s = serve(models, "--model-control-mode", "explicit", "--load-model", "identity_int32")
    a = np.ones((1, 16), np.float32)
    rows = {x["name"]: x for x in requests.post(s.url + "/v2/repository/index",
                                                 timeout=TIMEOUT).json()}
    assert rows["identity_int32"]["state"] == "READY"
    assert rows["add_sub"]["state"] != "READY"
    r = requests.post(s.url + "/v2/models/add_sub/infer", json=add_sub_body(a, a),
                      timeout=TIMEOUT)
    assert r.status_code in (404, 503) and "add_sub" in r.json()["error"], r.text

    # Load while another model keeps serving from other threads.
    stop = threading.Event()
    errors = []

    def background():
        v = np.arange(4, dtype=np.int32).reshape(1, 4)
        while not stop.is_set():
            r2 = requests.post(s.url + "/v2/models/identity_int32/infer", timeout=TIMEOUT,
                               json={"inputs": [json_input("INPUT0", v, "INT32")]})
            if r2.status_code != 200 or r2.json()["outputs"][0]["data"] != [0, 1, 2, 3]:
                errors.append(r2.text)

    t = threading.Thread(target=background)
    t.start()
    try:
        r = requests.post(s.url + "/v2/repository/models/add_sub/load", timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        out = infer(s, "add_sub", add_sub_body(a, a))
        assert out["outputs"][0]["data"] == (2 * a).flatten().tolist()
        code, _, _ = curl("-X", "POST", s.url + "/v2/repository/models/add_sub/unload")
        assert code == 200
        r = requests.post(s.url + "/v2/models/add_sub/infer", json=add_sub_body(a, a),
                          timeout=TIMEOUT)
        assert r.status_code in (404, 503), r.text
        r = requests.get(s.url + "/v2/models/add_sub/ready", timeout=TIMEOUT)
        assert r.status_code in (404, 503)
        code, _, _ = curl("-X", "POST", s.url + "/v2/repository/models/add_sub/load")
        assert code == 200
        assert requests.get(s.url + "/v2/models/add_sub/ready", timeout=TIMEOUT).status_code == 200
        expect_error(s, "/v2/repository/models/nope/load", 404, "nope")
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]
    assert_alive(s)


def test_sigterm_drains_in_flight(infd_bin, tmp_path):
    """SIGTERM while requests wait in the batcher's queue: they all complete
    with 200, then the server exits 0."""
    models = tmp_path / "models"
    # A batch forms after 2 s or 8 requests; we send 6 and stop the server.
    model_repo.add_sub(models, dynamic_batching={"max_queue_delay_microseconds": 2000000})
    s = Server(infd_bin, models)
    try:
        a = np.ones((1, 16), np.float32)
        n = 6
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            futs = [ex.submit(requests.post, s.url + "/v2/models/add_sub/infer",
                              json=add_sub_body(a * i, a), timeout=TIMEOUT) for i in range(n)]
            wait_until("requests queued", lambda: queue_depth(s, "add_sub") >= n)
            rc = s.stop()
            results = [f.result() for f in futs]
        assert rc == 0, s.log_tail()
        for i, r in enumerate(results):
            assert r.status_code == 200, r.text
            assert r.json()["outputs"][0]["data"] == (a * i + a).flatten().tolist()
    finally:
        if s.is_running():
            s.kill()
        s.cleanup()


@pytest.mark.parametrize("where", ["parameters_arrays", "parameters_objects", "data"])
def test_deeply_nested_json_is_rejected(srv, where):
    """Deep JSON (Triton's CVE class of unbounded nesting, issue #24) in an
    otherwise valid request: 100,000 levels inside a parameter the server
    skips, or arrays inside an input's data nested deeper than the largest
    rank, are a 400 saying so, and the server serves on. 64 levels in a
    parameter, and data nested as deep as its shape, are fine."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    body = json.dumps(add_sub_body(a, a))
    deep = 100000
    if where == "parameters_arrays":
        bad = body[:-1] + ', "parameters": {"p": ' + "[" * deep + "]" * deep + "}}"
        ok = body[:-1] + ', "parameters": {"p": ' + "[" * 60 + "]" * 60 + "}}"
        needle = "nested deeper than 64 levels"
    elif where == "parameters_objects":
        bad = body[:-1] + ', "parameters": {"p": ' + '{"a": ' * deep + "1" + "}" * deep + "}}"
        ok = body[:-1] + ', "parameters": {"p": ' + '{"a": ' * 60 + "1" + "}" * 60 + "}}"
        needle = "nested deeper than 64 levels"
    else:
        flat = "[" + ",".join(["1"] * 16) + "]"
        bad = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                      "data": json.loads("[" * 9 + flat + "]" * 9)},
                                     json_input("INPUT1", a, "FP32")]})
        ok = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                     "data": [json.loads(flat)]},
                                    json_input("INPUT1", a, "FP32")]})
        needle = "'data' nested deeper than 8 arrays"
    for text, code in ((bad, 400), (ok, 200)):
        r = requests.post(f"{srv.url}/v2/models/add_sub/infer", data=text,
                          headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
        assert r.status_code == code, (r.status_code, r.text[:300])
        if code == 400:
            assert needle in r.json()["error"], r.text[:300]
    assert_alive(srv)


def test_max_json_depth_flag(serve, repo):
    """--max-json-depth sets the limit: with 8, a request whose deepest value
    is 8 containers down (the request object, its parameters and 6 arrays)
    is served; one more is a 400 naming the limit."""
    s = serve(repo, "--max-json-depth", 8)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    body = json.dumps(add_sub_body(a, a))
    for nest, code in ((6, 200), (7, 400)):
        text = body[:-1] + ', "parameters": {"p": ' + "[" * nest + "]" * nest + "}}"
        r = requests.post(f"{s.url}/v2/models/add_sub/infer", data=text,
                          headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
        assert r.status_code == code, (nest, r.status_code, r.text[:300])
        if code == 400:
            assert "JSON nested deeper than 8 levels" in r.json()["error"], r.text
    assert_alive(s)
    bad = serve(repo, "--max-json-depth", 3, wait_ready=False)
    rc = bad.wait()
    assert rc != 0
    bad.expected_returncode = rc
    assert "--max-json-depth" in bad.log(), bad.log()
