"""Triton's system shared-memory extension (docs/HTTP.md, docs/GRPC.md):
regions of POSIX shared memory made by the test (Python's
multiprocessing.shared_memory), registered with `infd serve
--enable-shared-memory system`, inputs read from them and outputs written
into them, every result checked against numpy; and the errors: shared
memory off, an unregistered region, a span past the end, a size that
overflows, a name or key with '/..', a region unregistered while a request
uses it. Messages name a region, never its key."""

import concurrent.futures
import time
from multiprocessing import shared_memory

import numpy as np
import pytest
import requests

import repo
from test_grpc import pb  # noqa: F401  (the fixture: generated stubs)

grpc = pytest.importorskip("grpc")

SHM = "--enable-shared-memory"


@pytest.fixture
def shm():
    """shm(size) -> SharedMemory, unlinked at teardown."""
    made = []

    def make(size):
        m = shared_memory.SharedMemory(create=True, size=size)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()
        m.unlink()


def key_of(m):
    return "/" + m.name


def register(url, name, key, offset, size, kind="systemsharedmemory"):
    return requests.post(f"{url}/v2/{kind}/region/{name}/register",
                         json={"key": key, "offset": offset, "byte_size": size}, timeout=10)


def shm_infer(url, in_region, out_region, model="add_sub", in_offsets=(0, 64),
              out_offsets=(0, 64), size=64):
    body = {
        "inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 16],
                    "parameters": {"shared_memory_region": in_region,
                                   "shared_memory_offset": in_offsets[i],
                                   "shared_memory_byte_size": size}} for i in range(2)],
        "outputs": [{"name": f"OUTPUT{i}",
                     "parameters": {"shared_memory_region": out_region,
                                    "shared_memory_offset": out_offsets[i],
                                    "shared_memory_byte_size": size}} for i in range(2)]}
    return requests.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)


def views(m):
    """The object's first 256 bytes as 4 FP32 vectors of 16: a, b, sum, diff."""
    return [np.ndarray((16,), np.float32, m.buf, offset=64 * i) for i in range(4)]


def test_http_inputs_and_outputs_in_shared_memory(serve, tmp_path, shm):
    root = tmp_path / "repo"
    repo.add_sub(root)
    srv = serve(root, SHM, "system")
    m = shm(256)
    a, b, s, d = views(m)
    assert "system_shared_memory" in requests.get(f"{srv.url}/v2", timeout=5).json()["extensions"]
    assert register(srv.url, "in", key_of(m), 0, 128).status_code == 200
    assert register(srv.url, "out", key_of(m), 128, 128).status_code == 200
    rng = np.random.default_rng(3)
    for _ in range(5):
        a[:] = rng.normal(size=16)
        b[:] = rng.normal(size=16)
        s[:] = 0
        d[:] = 0
        r = shm_infer(srv.url, "in", "out")
        assert r.status_code == 200, r.text
        outs = {o["name"]: o for o in r.json()["outputs"]}
        for name in ("OUTPUT0", "OUTPUT1"):
            assert "data" not in outs[name]
            assert outs[name]["shape"] == [1, 16]
            assert outs[name]["parameters"] == {"shared_memory_region": "out",
                                                "shared_memory_byte_size": 64}
        assert np.array_equal(s, a + b) and np.array_equal(d, a - b)
    # Status: every region, one region; unregister one, then all.
    st = requests.get(f"{srv.url}/v2/systemsharedmemory/status", timeout=5).json()
    assert sorted((x["name"], x["key"], x["offset"], x["byte_size"]) for x in st) == [
        ("in", key_of(m), 0, 128), ("out", key_of(m), 128, 128)]
    one = requests.get(f"{srv.url}/v2/systemsharedmemory/region/out/status", timeout=5).json()
    assert [x["name"] for x in one] == ["out"]
    assert requests.post(f"{srv.url}/v2/systemsharedmemory/region/in/unregister",
                         timeout=5).status_code == 200
    r = requests.get(f"{srv.url}/v2/systemsharedmemory/region/in/status", timeout=5)
    assert r.status_code == 400 and "'in'" in r.json()["error"]
    assert requests.post(f"{srv.url}/v2/systemsharedmemory/unregister", timeout=5).status_code == 200
    assert requests.get(f"{srv.url}/v2/systemsharedmemory/status", timeout=5).json() == []
    # Inputs in shared memory, outputs in the response as usual.
    assert register(srv.url, "in", key_of(m), 0, 128).status_code == 200
    body = {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 16],
                        "parameters": {"shared_memory_region": "in",
                                       "shared_memory_offset": 64 * i,
                                       "shared_memory_byte_size": 64}} for i in range(2)]}
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text
    outs = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert np.allclose(outs["OUTPUT0"], a + b) and np.allclose(outs["OUTPUT1"], a - b)


def test_shared_memory_errors_are_clear_and_never_name_the_key(serve, tmp_path, shm):
    root = tmp_path / "repo"
    repo.add_sub(root)
    m = shm(256)
    key = key_of(m)
    # Off by default.
    off = serve(root)
    r = register(off.url, "in", key, 0, 128)
    assert r.status_code == 400 and "--enable-shared-memory system" in r.json()["error"]
    r = shm_infer(off.url, "in", "out")
    assert r.status_code == 400 and "off" in r.json()["error"]
    assert "system_shared_memory" not in requests.get(f"{off.url}/v2", timeout=5).json()[
        "extensions"]
    srv = serve(root, SHM, "system")
    assert register(srv.url, "in", key, 0, 128).status_code == 200
    assert register(srv.url, "small", key, 0, 32).status_code == 200
    cases = [
        # (response, what the message must say)
        (register(srv.url, "in", key, 0, 128), "registered already"),
        (register(srv.url, "past", key, 200, 100), "past the end"),
        (register(srv.url, "big", key, 2**61, 2**61), "past the end"),
        (register(srv.url, "wrap", key, 2**63 - 1, 2**63 - 1), "must not overflow"),
        (register(srv.url, "zero", key, 0, 0), "byte_size must be at least 1"),
        (register(srv.url, "neg", key, -1, 8), "non-negative"),
        (register(srv.url, "a%2F..", key, 0, 8), "without '/'"),
        (register(srv.url, "dots", "/..", 0, 8), "POSIX shared memory name"),
        (register(srv.url, "trav", "/../../etc/passwd", 0, 8), "POSIX shared memory name"),
        (register(srv.url, "nope", "/infd-test-no-such-object", 0, 8), "cannot open"),
        (shm_infer(srv.url, "ghost", "in"), "no shared memory region 'ghost'"),
        (shm_infer(srv.url, "in", "in", in_offsets=(0, 100)), "does not fit"),
        (shm_infer(srv.url, "in", "in", in_offsets=(0, 2**63 - 1)), "does not fit"),
        (shm_infer(srv.url, "in", "small"), "does not fit"),
        (shm_infer(srv.url, "in", "in", size=60), "shared_memory_byte_size is 60 bytes"),
    ]
    for r, why in cases:
        assert r.status_code == 400, (r.status_code, r.text, why)
        msg = r.json()["error"]
        assert why in msg, (msg, why)
        assert key not in msg and m.name not in msg, msg
    # An output span too small for the result.
    r = shm_infer(srv.url, "in", "small", out_offsets=(0, 0), size=64)
    assert r.status_code == 400
    # The server still serves.
    a = np.ones(16, np.float32)
    body = {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 16],
                        "data": a.tolist()} for i in range(2)]}
    assert requests.post(f"{srv.url}/v2/models/add_sub/infer", json=body,
                         timeout=10).status_code == 200


def test_a_region_unregistered_while_in_use_stays_until_the_request_ends(serve, tmp_path, shm):
    """The request waits in the batcher (a 2 s queue delay) while its
    regions are unregistered: it still reads and writes them, the
    unregister does not wait for it, and the name is free for a new
    registration at once."""
    root = tmp_path / "repo"
    repo.add_sub(root, dynamic_batching={"max_queue_delay_microseconds": 2000000,
                                         "preferred_batch_size": [8]})
    srv = serve(root, SHM, "system")
    m = shm(256)
    a, b, s, d = views(m)
    a[:] = np.arange(16)
    b[:] = 2
    assert register(srv.url, "in", key_of(m), 0, 128).status_code == 200
    assert register(srv.url, "out", key_of(m), 128, 128).status_code == 200
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(shm_infer, srv.url, "in", "out")
        time.sleep(0.2)
        assert requests.post(f"{srv.url}/v2/systemsharedmemory/unregister",
                             timeout=5).status_code == 200
        assert register(srv.url, "in", key_of(m), 0, 128).status_code == 200  # the name is free
        assert not fut.done()  # still queued: the unregister did not wait for it
        r = fut.result(timeout=30)
    assert r.status_code == 200, r.text
    assert np.array_equal(s, a + b) and np.array_equal(d, a - b)
    r = shm_infer(srv.url, "in", "out")
    assert r.status_code == 400 and "'out'" in r.json()["error"]


def grpc_shm_request(pb, in_region, out_region, offsets=(0, 64), raw_inputs=()):
    """add_sub with INPUTi in `in_region` at offsets[i] (or raw when i is in
    raw_inputs: values 1..16) and OUTPUTi in `out_region` at 64 * i."""
    req = pb.svc.ModelInferRequest(model_name="add_sub")
    for i in range(2):
        t = req.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
        if i in raw_inputs:
            req.raw_input_contents.append(np.arange(1, 17, dtype=np.float32).tobytes())
        else:
            t.parameters["shared_memory_region"].string_param = in_region
            t.parameters["shared_memory_offset"].int64_param = offsets[i]
            t.parameters["shared_memory_byte_size"].int64_param = 64
        o = req.outputs.add(name=f"OUTPUT{i}")
        if out_region:
            o.parameters["shared_memory_region"].string_param = out_region
            o.parameters["shared_memory_offset"].int64_param = 64 * i
            o.parameters["shared_memory_byte_size"].int64_param = 64
    return req


def test_grpc_inputs_and_outputs_in_shared_memory(serve, tmp_path, shm, pb):
    root = tmp_path / "repo"
    repo.add_sub(root)
    srv = serve(root, SHM, "system")
    st = pb.svc_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(
        f"{srv.host}:{srv.grpc_port}"))
    assert "system_shared_memory" in st.ServerMetadata(
        pb.svc.ServerMetadataRequest(), timeout=10).extensions
    m = shm(256)
    a, b, s, d = views(m)
    for name, offset in (("in", 0), ("out", 128)):
        st.SystemSharedMemoryRegister(pb.svc.SystemSharedMemoryRegisterRequest(
            name=name, key=key_of(m), offset=offset, byte_size=128), timeout=10)
    status = st.SystemSharedMemoryStatus(pb.svc.SystemSharedMemoryStatusRequest(), timeout=10)
    assert set(status.regions) == {"in", "out"}
    assert (status.regions["out"].key, status.regions["out"].offset,
            status.regions["out"].byte_size) == (key_of(m), 128, 128)
    rng = np.random.default_rng(5)
    for _ in range(5):
        a[:] = rng.normal(size=16)
        b[:] = rng.normal(size=16)
        s[:] = 0
        d[:] = 0
        resp = st.ModelInfer(grpc_shm_request(pb, "in", "out"), timeout=30)
        assert [o.name for o in resp.outputs] == ["OUTPUT0", "OUTPUT1"]
        assert all(len(c) == 0 for c in resp.raw_output_contents)
        assert np.array_equal(s, a + b) and np.array_equal(d, a - b)
    # INPUT1 raw in the message, INPUT0 in the region, outputs in the reply.
    resp = st.ModelInfer(grpc_shm_request(pb, "in", None, raw_inputs=(1,)), timeout=30)
    got = {o.name: np.frombuffer(c, np.float32) for o, c in
           zip(resp.outputs, resp.raw_output_contents)}
    one_to_16 = np.arange(1, 17, dtype=np.float32)
    assert np.array_equal(got["OUTPUT0"], a + one_to_16)
    assert np.array_equal(got["OUTPUT1"], a - one_to_16)
    # Errors: INVALID_ARGUMENT, the region named, the key never.
    for req, why in ((grpc_shm_request(pb, "ghost", "out"), "'ghost'"),
                     (grpc_shm_request(pb, "in", "out", offsets=(0, 100)), "does not fit")):
        with pytest.raises(grpc.RpcError) as e:
            st.ModelInfer(req, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert why in e.value.details() and key_of(m) not in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        st.SystemSharedMemoryRegister(pb.svc.SystemSharedMemoryRegisterRequest(
            name="past", key=key_of(m), offset=200, byte_size=100), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "past the end" in e.value.details() and key_of(m) not in e.value.details()
    st.SystemSharedMemoryUnregister(pb.svc.SystemSharedMemoryUnregisterRequest(name="in"),
                                    timeout=10)
    assert set(st.SystemSharedMemoryStatus(pb.svc.SystemSharedMemoryStatusRequest(),
                                           timeout=10).regions) == {"out"}
    st.SystemSharedMemoryUnregister(pb.svc.SystemSharedMemoryUnregisterRequest(), timeout=10)
    assert not st.SystemSharedMemoryStatus(pb.svc.SystemSharedMemoryStatusRequest(),
                                           timeout=10).regions


def test_raw_framed_inputs_and_outputs_in_shared_memory(serve, tmp_path, shm):
    """The raw protocol's framed mode with FLAG_SHM (docs/RAW_PROTOCOL.md): inputs read
    from a region, one output written into a region and one sent inline; bad
    references are answered with the region named and the connection kept."""
    from raw_client import RawClient
    from test_raw import wait_socket
    root = tmp_path / "repo"
    repo.add_sub(root)
    srv = serve(root, SHM, "system")
    m = shm(256)
    a, b, s, d = views(m)
    assert register(srv.url, "r", key_of(m), 0, 256).status_code == 200
    rng = np.random.default_rng(8)
    with RawClient.unix(wait_socket(srv.raw_dir / "add_sub.framed.sock")) as c:
        for rid in range(1, 4):
            a[:] = rng.normal(size=16)
            b[:] = rng.normal(size=16)
            s[:] = 0
            shape = np.zeros((1, 16), np.float32)  # only the shape and dtype travel
            status, msg, outs = c.framed(
                {"INPUT0": shape, "INPUT1": shape}, outputs=("OUTPUT0", "OUTPUT1"),
                request_id=rid, shm_inputs={"INPUT0": ("r", 0), "INPUT1": ("r", 64)},
                shm_outputs={"OUTPUT0": ("r", 128, 64)})
            assert status == "OK", msg
            assert outs["OUTPUT0"] == ("FP32", (1, 16), 64)
            assert np.array_equal(s, a + b)
            assert np.allclose(outs["OUTPUT1"].ravel(), a - b)
        # Inputs inline and in a region mixed, every output inline.
        x = rng.normal(size=(1, 16)).astype(np.float32)
        status, msg, outs = c.framed({"INPUT0": x, "INPUT1": shape}, request_id=9,
                                     shm_inputs={"INPUT1": ("r", 64)})
        assert status == "OK", msg
        assert np.allclose(outs["OUTPUT0"].ravel(), x.ravel() + b)
        # Bad references: each answered, the connection kept.
        for kw, want in [
            (dict(shm_inputs={"INPUT0": ("nope", 0), "INPUT1": ("r", 64)}),
             "input 'INPUT0': no shared memory region 'nope'"),
            (dict(shm_inputs={"INPUT0": ("r", 200), "INPUT1": ("r", 64)}),
             "offset 200 + byte_size 64 does not fit"),
            (dict(shm_inputs={"INPUT0": ("r", 0), "INPUT1": ("r", 64)},
                  shm_outputs={"OUTPUT0": ("r", 250, 64)}),
             "output 'OUTPUT0'"),
        ]:
            status, msg, _ = c.framed({"INPUT0": shape, "INPUT1": shape},
                                      outputs=("OUTPUT0",), request_id=5, **kw)
            assert status == "INVALID_ARGUMENT" and want in msg, (kw, msg)
        status, msg, outs = c.framed({"INPUT0": x, "INPUT1": x}, request_id=6)
        assert status == "OK" and np.allclose(outs["OUTPUT0"], 2 * x), msg
    # A truncated reference loses nothing either.
    with RawClient.unix(srv.raw_dir / "add_sub.framed.sock") as c:
        req = bytearray(RawClient.encode({"INPUT0": shape, "INPUT1": shape},
                                         shm_inputs={"INPUT0": ("r", 0), "INPUT1": ("r", 64)}))
        from raw_client import HEADER
        head = list(HEADER.unpack_from(req))
        head[7] -= 9  # the last input's offset and region cut off the descriptors
        cut = HEADER.pack(*head) + req[HEADER.size:HEADER.size + head[7]]
        c.sock.sendall(cut)
        _, status, msg, _, _ = c.read_response()
        assert status == "INVALID_ARGUMENT" and "input 1" in msg, msg
        status, msg, outs = c.framed({"INPUT0": x, "INPUT1": x}, request_id=7)
        assert status == "OK", msg
