"""Hardening (issue #24):
- the raw sockets' file mode and group, the HTTP connection timeout, the
  graceful stop (--exit-grace-secs, --exit-timeout-secs);
- regression tests for Triton's CVE classes that apply to infd
  (../shared/reference/reliability-and-ecosystem.md, §1.3): traversal in
  model names through the repository API, huge chunk counts in chunked
  encoding, shapes and binary_data_size that overflow, gRPC messages past
  the limit once decompressed;
- hostile clients: gRPC streams that never read their responses, clients
  that vanish mid-response and mid-stream (mid-request: test_http.py,
  test_raw.py).
Each gets the protocol's error, never a crash, and the server serves on.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_hardening.py
"""

import concurrent.futures
import gzip
import json
import os
import signal
import socket
import stat
import time

import numpy as np
import pytest
import requests

import repo as model_repo
from test_http import add_sub_body, assert_alive

grpc = pytest.importorskip("grpc")
from test_grpc import CHANNEL_OPTIONS, add_sub_inputs, infer_request, outputs_of, pb  # noqa: E402,F401

TIMEOUT = 30


@pytest.fixture
def models(add_sub_repo):
    return add_sub_repo


def test_raw_socket_mode_and_group(serve, models):
    gid = os.getgroups()[-1] if os.getgroups() else os.getgid()
    srv = serve(models, "--raw-socket-mode", "0600", "--raw-socket-group", str(gid))
    path = srv.raw_dir / "add_sub.framed.sock"  # two inputs: framed only
    deadline = time.monotonic() + TIMEOUT
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert st.st_gid == gid
    # Bad values stop the start.
    for args in (("--raw-socket-mode", "0999"), ("--raw-socket-mode", "rw"),
                 ("--raw-socket-group", "no-such-group-xyz")):
        bad = serve(models, *args, wait_ready=False)
        rc = bad.wait()
        assert rc != 0, bad.log()
        bad.expected_returncode = rc
        assert f"bad value for {args[0]}" in bad.log(), bad.log()


def test_http_timeout_closes_silent_connections(serve, models):
    """--http-timeout-secs: a client that stops in the middle of its headers,
    or one that stays idle after a request, is disconnected after that long;
    others are served meanwhile."""
    srv = serve(models, "--http-timeout-secs", 1)
    half = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
    half.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Le")
    idle = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
    idle.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200")
    assert_alive(srv)
    t0 = time.monotonic()
    for s in (half, idle):
        s.settimeout(TIMEOUT)
        while s.recv(4096):  # until the server closes it
            pass
        s.close()
    # Closed by the server's timeout (1 s, libevent checks it about once a
    # second), not by the client's (30 s).
    assert time.monotonic() - t0 < 10
    assert_alive(srv)


def chunked(body, size):
    out = bytearray()
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return bytes(out + b"0\r\n\r\n")


def http_exchange(port, raw):
    """Sends `raw` and reads until the server closes; a server that answers
    and closes before the client has sent everything (413) may cut the send
    short, and the answer may then be lost to the reset: b"" is returned."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        got = bytearray()
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except (BrokenPipeError, ConnectionResetError):
            try:
                got += s.recv(65536)
            except OSError:
                pass
        return bytes(got)


def test_huge_chunk_counts(serve, models):
    """Triton's CVE-2025-23310/23311 class: a body of very many tiny chunks.
    infd pulls the body through libevent's evbuffer (no stack arrays sized by
    the count): one-byte chunks of a valid request are answered 200; 2 MiB
    of one-byte chunks (2 million chunks) over a 1 MiB --max-body-bytes are
    refused (413, or the connection closed at the limit); the server serves
    on."""
    srv = serve(models, "--max-body-bytes", 1 << 20)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    body = json.dumps(add_sub_body(a, a)).encode()
    head = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    got = http_exchange(srv.http_port, head + chunked(body, 1))
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    assert b'"OUTPUT0"' in got
    big = head + chunked(b"[" + b" " * (2 << 20) + b"]", 1)
    got = http_exchange(srv.http_port, big)
    assert got.startswith(b"HTTP/1.1 413") or got == b"", got[:300]
    assert_alive(srv)


def one_request(sock, path=b"/v2/health/ready"):
    """A GET on an open socket; the answer's head and body (one read each
    way suffices for these small answers on loopback)."""
    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got:
        b = sock.recv(65536)
        assert b, got
        got += b
    head, _, body = got.partition(b"\r\n\r\n")
    n = int(next((l.split(b":")[1] for l in head.split(b"\r\n")
                  if l.lower().startswith(b"content-length:")), b"0"))
    while len(body) < n:
        body += sock.recv(65536)
    return head, body


def test_connection_limits_total_and_per_client(serve, models):
    """--http-max-connections and --http-max-connections-per-client: a
    connection over a limit is answered 429 (its address has too many) or
    503 (the server has too many), in JSON, then closed; closed connections
    are given back within the second; the server serves on."""
    # Four loops: a connection's place must come back whichever loop holds
    # it (the failure CI saw on a machine with more cores than this one).
    srv = serve(models, "--http-max-connections", 5, "--http-max-connections-per-client", 2,
                "--http-threads", 4)

    def connect(src):
        s = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT,
                                     source_address=(src, 0))
        return s

    time.sleep(1.5)  # the readiness checks' connections are counted out
    a = [connect("127.0.0.2") for _ in range(2)]
    b = [connect("127.0.0.3") for _ in range(2)]
    for s in a + b:
        assert one_request(s)[0].startswith(b"HTTP/1.1 200")
    third = connect("127.0.0.2")
    head, body = one_request(third)
    assert head.startswith(b"HTTP/1.1 429 Too Many Requests"), head
    assert b"Connection: close" in head
    assert "--http-max-connections-per-client" in json.loads(body)["error"]
    assert third.recv(1) == b""  # closed after the answer
    c = connect("127.0.0.4")  # the fifth open one
    assert one_request(c)[0].startswith(b"HTTP/1.1 200")
    fifth = connect("127.0.0.5")
    head, body = one_request(fifth)
    assert head.startswith(b"HTTP/1.1 503"), head
    assert "--http-max-connections" in json.loads(body)["error"]
    for s in a + b + [third, c, fifth]:
        s.close()
    deadline = time.monotonic() + 5
    while True:  # the closed ones are counted out by the next sweep (1 s)
        with connect("127.0.0.2") as s:
            if one_request(s)[0].startswith(b"HTTP/1.1 200"):
                break
        assert time.monotonic() < deadline, "closed connections were not given back"
        time.sleep(0.3)
    # A client that opens and closes connections fast (one request each)
    # gets its place back as each closes, and every request its answer.
    for i in range(300):
        with connect("127.0.0.6") as s:
            head, _ = one_request(s)
            assert head.startswith(b"HTTP/1.1 200"), (i, head)
    # The same for connections that never make a request (closed at once, or
    # sending bytes libevent refuses): no close callback tells the guard; the
    # reuse of their fd number, or at the limit their closed socket or the
    # client's hang-up, does.
    for i in range(300):
        with connect("127.0.0.7") as s:
            if i % 2:
                s.sendall(b"NOT HTTP\r\n\r\n")
                s.recv(65536)
    with connect("127.0.0.7") as s:
        assert one_request(s)[0].startswith(b"HTTP/1.1 200")
    assert_alive(srv)


def test_stop_with_connections_open_exits_0(serve, models):
    """SIGTERM while keep-alive connections that made requests, one half-sent
    request and one silent connection are open (each guarded, counted, with
    its close callback): the server closes them all and exits 0."""
    srv = serve(models, "--http-max-connections-per-client", 16)
    socks = [socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
             for _ in range(6)]
    for s in socks[:4]:
        assert one_request(s)[0].startswith(b"HTTP/1.1 200")
    socks[4].sendall(b"GET /v2/hea")
    assert srv.stop() == 0, srv.log_tail()
    for s in socks:
        s.close()


def test_header_deadline_ends_slowloris_not_slow_uploads(serve, models):
    """--http-header-timeout-secs: a client that trickles its headers is
    answered 408 and closed once the deadline passes, though it never goes
    silent long enough for --http-timeout-secs; a slow but steady upload (1 s
    more per KiB) and a connection that sends nothing both carry on."""
    srv = serve(models, "--http-header-timeout-secs", 2)
    idle = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
    slow = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
    a = np.ones((1, 16), np.float32)
    body = json.dumps(add_sub_body(a, a)).encode()
    body = body[:-1] + b" " * (8000 - len(body)) + b"}"  # 8 KB: 2 + 8 s allowed
    slow.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    loris = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
    loris.sendall(b"GET /v2/health/ready HTTP/1.1\r\n")
    t0 = time.monotonic()
    got = b""
    sent = 0
    while time.monotonic() - t0 < 8:
        loris.sendall(b"X-a: b\r\n")
        piece = body[sent:sent + 600]  # 1.2 KB/s: over the 1 KiB/s the deadline grows by
        slow.sendall(piece)
        sent += len(piece)
        loris.settimeout(0.5)
        try:
            got = loris.recv(65536)
            break
        except socket.timeout:
            pass
    took = time.monotonic() - t0
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert "--http-header-timeout-secs" in json.loads(got.partition(b"\r\n\r\n")[2])["error"]
    assert 1.5 < took < 6, took
    slow.sendall(body[sent:])
    slow.settimeout(TIMEOUT)
    head = slow.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    assert one_request(idle)[0].startswith(b"HTTP/1.1 200")  # silent, then served
    for s in (idle, slow, loris):
        s.close()
    assert_alive(srv)


def test_libevent_error_answers_are_kserve_json(serve, models):
    """The errors libevent answers itself (a body over --max-body-bytes while
    it reads it, a request line or headers it cannot parse, headers over its
    limit, a method it does not know, an Expect it does not know) come as
    KServe's JSON error with the same status, not libevent's HTML page."""
    srv = serve(models, "--max-body-bytes", 4096)
    cases = [
        (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 6000\r\n"
         b"Content-Type: application/json\r\n\r\n" + b" " * 6000, 413, "--max-body-bytes"),
        (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n" + chunked(b" " * 6000, 100), 413, "4096 bytes"),
        (b"GET\r\n\r\n", 400, "malformed HTTP request"),
        (b"GET /v2 HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 400, "headers over"),
        (b"BREW /v2 HTTP/1.1\r\nHost: x\r\n\r\n", 501, "Not Implemented"),
        (b"POST /v2 HTTP/1.1\r\nHost: x\r\nExpect: tea\r\nContent-Length: 2\r\n\r\n{}",
         417, "Expectation Failed"),
    ]
    seen = []
    for raw, code, words in cases:
        got = http_exchange(srv.http_port, raw)
        if got == b"" and code == 413:
            continue  # the answer was lost to the reset of a send cut short (see above)
        seen.append(code)
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d " % code), got[:300]
        assert b"Content-Type: application/json" in head, head
        assert b"text/html" not in head and b"<HTML>" not in body, got[:300]
        err = json.loads(body)["error"]
        assert words in err, err
    assert 413 in seen and len(seen) >= 5, seen
    assert_alive(srv)


@pytest.mark.parametrize("name", ["..%2F..%2Fetc", "..", ".hidden", "a%2Fb", "a%00b",
                                  "%2Ftmp%2Fx", "x" * 300])
def test_model_names_never_reach_the_file_system(serve, models, tmp_path, name):
    """Triton's CVE-2023-31036 class (traversal through the model-load API):
    a name with a separator, a leading dot, '..', a NUL or over the length
    limit is refused before any path is built, and the error does not echo a
    path of the server's file system."""
    srv = serve(models, "--model-control-mode", "explicit")
    (tmp_path / "etc").mkdir(exist_ok=True)
    model_repo.add_sub(tmp_path, name="escape")
    for action in ("load", "unload"):
        r = requests.post(f"{srv.url}/v2/repository/models/{name}/{action}", timeout=TIMEOUT)
        assert r.status_code in (400, 404), (r.status_code, r.text)
        assert str(models) not in r.text and str(tmp_path) not in r.text, r.text
    r = requests.post(f"{srv.url}/v2/repository/index", json={}, timeout=TIMEOUT)
    assert [m["name"] for m in r.json()] == ["add_sub"], r.text
    assert requests.post(f"{srv.url}/v2/repository/models/add_sub/load",
                         timeout=TIMEOUT).status_code == 200
    assert_alive(srv)


def test_sigterm_grace_not_ready_at_once(serve, models):
    """--exit-grace-secs: on SIGTERM readiness is 503 at once, while
    liveness and inference go on for the grace period; then the server
    drains and exits 0."""
    srv = serve(models, "--exit-grace-secs", 2)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    deadline = t0 + TIMEOUT
    while requests.get(srv.url + "/v2/health/ready", timeout=TIMEOUT).status_code == 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert time.monotonic() - t0 < 1.0
    assert requests.get(srv.url + "/v2/health/live", timeout=TIMEOUT).status_code == 200
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", json=add_sub_body(a, a),
                      timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert srv.wait() == 0, srv.log()
    assert time.monotonic() - t0 >= 1.9
    assert "serving 2 s more before draining" in srv.log()


SLOW_PY = '''
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(60)
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
'''


def test_sigterm_exit_timeout_bounds_the_drain(serve, tmp_path):
    """--exit-timeout-secs: a request that will not finish (a Python model
    sleeping a minute) holds the stop at most that long; then the server
    says so and exits 0."""
    root = tmp_path / "models"
    d = root / "slow"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(SLOW_PY)
    (d / "config.pbtxt").write_text(
        'name: "slow"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    srv = serve(root, "--exit-timeout-secs", 2)
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(requests.post, f"{srv.url}/v2/models/slow/infer", json=body,
                        timeout=120)
        time.sleep(1.0)  # the request reaches execute() (nothing here times it)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.wait()
        took = time.monotonic() - t0
        with pytest.raises(requests.RequestException):
            fut.result()
    assert rc == 0, srv.log()
    assert 1.5 <= took < 15, took
    assert "did not finish within 2 s" in srv.log(), srv.log()


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def closed_within(sock, seconds):
    """Reads until the server closes; the seconds that took, or None."""
    sock.settimeout(seconds)
    t0 = time.monotonic()
    try:
        while sock.recv(65536):
            pass
        return time.monotonic() - t0
    except socket.timeout:
        return None


def test_grpc_handshake_and_idle_timeouts(pb, serve, models):
    """--grpc-handshake-timeout-secs closes a connection that never finishes
    HTTP/2's preface (gRPC's slowloris); one that did stays. With
    --grpc-idle-timeout-secs an idle connection gets GOAWAY and is closed,
    and a client's channel simply reconnects for its next call."""
    srv = serve(models, "--grpc-handshake-timeout-secs", 2)
    silent = socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=TIMEOUT)
    done = socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=TIMEOUT)
    done.sendall(H2_PREFACE)
    took = closed_within(silent, 10)
    assert took is not None and took < 8, took
    assert closed_within(done, 1.5) is None  # past the handshake: still open
    silent.close()
    done.close()
    assert srv.stop() == 0

    srv = serve(models, "--grpc-idle-timeout-secs", 2)
    idle = socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=TIMEOUT)
    idle.sendall(H2_PREFACE)
    took = closed_within(idle, 10)
    assert took is not None and took < 8, took
    idle.close()
    a = np.ones((1, 16), np.float32)
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS) as ch:
        stub = pb.svc_grpc.GRPCInferenceServiceStub(ch)
        stub.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, a)), timeout=TIMEOUT)
        time.sleep(3)  # GOAWAY meanwhile
        stub.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, a)), timeout=TIMEOUT)


def test_grpc_limit_holds_after_decompression(pb, serve, models):
    """--grpc-max-message-bytes holds for the decompressed message: 8 MiB of
    zeros gzip to a few KiB, and are RESOURCE_EXHAUSTED against a 1 MiB
    limit (a decompression bomb is refused, not inflated); the server
    serves on."""
    srv = serve(models, "--grpc-max-message-bytes", 1 << 20)
    req = pb.svc.ModelInferRequest(model_name="add_sub")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    req.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    req.raw_input_contents.append(bytes(8 << 20))
    req.raw_input_contents.append(bytes(64))
    assert len(gzip.compress(req.SerializeToString())) < 64 << 10
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS,
                               compression=grpc.Compression.Gzip) as ch:
        stub = pb.svc_grpc.GRPCInferenceServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req, timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        ok = stub.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, a)),
                             timeout=TIMEOUT)
        np.testing.assert_array_equal(outputs_of(ok)["OUTPUT0"], 2 * a)
    assert_alive(srv)


OVERFLOWING_SHAPES = [[1 << 32, 1 << 32], [-1, 16], [1 << 62, 4], [3037000500, 3037000500],
                      [1, 1 << 61], [0, (1 << 63) - 1]]


@pytest.mark.parametrize("shape", OVERFLOWING_SHAPES)
def test_overflowing_shapes_and_sizes_http(serve, models, shape):
    """Triton's integer-overflow class (CVE-2024-53880, CVE-2026-24173):
    shapes whose element count or byte size overflows 64 bits, negative
    dims, and binary_data_size values that overflow or lie, in JSON and
    binary requests, are 400s; the server serves on."""
    srv = serve(models)
    url = f"{srv.url}/v2/models/add_sub/infer"
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    body = add_sub_body(a, a)
    body["inputs"][0]["shape"] = shape
    r = requests.post(url, json=body, timeout=TIMEOUT)
    assert r.status_code == 400, (shape, r.status_code, r.text)
    for size in ((1 << 63) - 1, (1 << 64) - 1, -64, 1 << 40, 63):
        hdr = {"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32",
                           "parameters": {"binary_data_size": size}},
                          {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32",
                           "parameters": {"binary_data_size": 64}}]}
        text = json.dumps(hdr).encode()
        r = requests.post(url, data=text + bytes(128), timeout=TIMEOUT,
                          headers={"Inference-Header-Content-Length": str(len(text)),
                                   "Content-Type": "application/octet-stream"})
        assert r.status_code == 400, (shape, size, r.status_code, r.text)
    assert_alive(srv)


@pytest.mark.parametrize("shape", OVERFLOWING_SHAPES)
def test_overflowing_shapes_grpc(pb, serve, models, shape):
    srv = serve(models)
    req = pb.svc.ModelInferRequest(model_name="add_sub")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=shape)
    req.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    req.raw_input_contents.append(bytes(64))
    req.raw_input_contents.append(bytes(64))
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS) as ch:
        stub = pb.svc_grpc.GRPCInferenceServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req, timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (shape, e.value)
    assert_alive(srv)


def test_grpc_stream_that_never_reads(pb, serve, tmp_path):
    """A ModelStreamInfer client that sends requests of 512 KiB answered by
    512 KiB and never reads a response: HTTP/2 flow control stops the
    server's writes, the server stops reading the stream at its pending
    limit (so the sender is held up too, long before its 2,000 requests),
    and other clients are served meanwhile; cancelling it frees the
    server."""
    root = tmp_path / "models"
    model_repo.add_sub(root, dims=(65536,))
    srv = serve(root)
    a = np.ones((1, 65536), np.float32)
    req = infer_request(pb, "add_sub", add_sub_inputs(a, a))
    sent = [0]

    def requests_forever():
        for _ in range(2000):
            sent[0] += 1
            yield req

    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS) as ch:
        call = pb.svc_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer(requests_forever())
        deadline = time.monotonic() + TIMEOUT
        last = -1
        while sent[0] != last:  # until the sender is held up by flow control
            last = sent[0]
            time.sleep(1.0)
            assert time.monotonic() < deadline
        assert sent[0] < 2000, "the server read every request of a stream never read"
        with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}",
                                   options=CHANNEL_OPTIONS) as other:
            stub = pb.svc_grpc.GRPCInferenceServiceStub(other)
            for _ in range(10):
                out = stub.ModelInfer(req, timeout=TIMEOUT)
                np.testing.assert_array_equal(outputs_of(out)["OUTPUT0"], 2 * a)
        call.cancel()
    assert requests.get(srv.url + "/v2/health/ready", timeout=TIMEOUT).status_code == 200
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS) as ch:
        out = pb.svc_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=TIMEOUT)
        np.testing.assert_array_equal(outputs_of(out)["OUTPUT0"], 2 * a)


def test_clients_vanish_mid_response_and_mid_stream(pb, serve, tmp_path):
    """HTTP clients that read the first bytes of a 1 MB answer and reset the
    connection, and gRPC streams whose channel closes with requests in
    flight, ten times each: the server serves on, and serves others
    meanwhile."""
    root = tmp_path / "models"
    model_repo.add_sub(root, dims=(65536,))
    srv = serve(root)
    a = np.ones((1, 65536), np.float32)
    body = json.dumps(add_sub_body(a, a)).encode()
    head = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    req = infer_request(pb, "add_sub", add_sub_inputs(a, a))
    for _ in range(10):
        c = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
        c.sendall(head + body)
        assert c.recv(100).startswith(b"HTTP/1.1 200")
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()
        ch = grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS)
        call = pb.svc_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer(iter([req] * 8))
        next(call)  # one answer read, the rest in flight
        ch.close()
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", data=body, timeout=TIMEOUT,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"][:2] == [2.0, 2.0]
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS) as ch:
        got = list(pb.svc_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer(iter([req] * 4)))
        assert len(got) == 4 and not any(g.error_message for g in got)
