"""The Python client and binding (clients/python, package `infd`): every call
of infd.http, infd.grpc, infd.raw, infd.queue and infd.embedded against a
real `infd serve` (or libinfd.so in this process), used from the source
tree with PYTHONPATH and installed with pip.
"""

import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

import repo
from redis_server import redis_server  # noqa: F401  (the fixture)

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
sys.path.insert(0, str(CLIENT))

import infd.embedded as embedded  # noqa: E402
import infd.http as httpclient  # noqa: E402
import infd.raw as rawclient  # noqa: E402
from infd.utils import (InferenceServerException, deserialize_bytes_tensor,  # noqa: E402
                        np_to_triton_dtype, serialize_byte_tensor, triton_to_np_dtype)


@pytest.fixture
def model_repo(tmp_path):
    root = tmp_path / "repo"
    repo.add_sub(root)
    repo.identity(root, name="ident", dtype="INT32", dims=(4,))
    return root


@pytest.fixture
def server(serve, model_repo):
    return serve(model_repo, "--model-control-mode", "explicit", "--load-model", "add_sub",
                 "--load-model", "ident")


def ab(batch=1):
    rng = np.random.default_rng(batch)
    return (rng.integers(-9, 9, (batch, 16)).astype(np.float32),
            rng.integers(-9, 9, (batch, 16)).astype(np.float32))


# -- utils ---------------------------------------------------------------------


def test_utils_dtypes_and_bytes():
    assert np_to_triton_dtype(np.float32) == "FP32" and np_to_triton_dtype(np.object_) == "BYTES"
    assert triton_to_np_dtype("INT64") == np.int64 and triton_to_np_dtype("BF16") is None
    arr = np.array([b"ab", "c\u00e9", b""], dtype=np.object_)
    enc = serialize_byte_tensor(arr).item()
    assert enc == b"\x02\0\0\0ab\x03\0\0\0c\xc3\xa9\0\0\0\0"
    assert list(deserialize_bytes_tensor(enc)) == [b"ab", "c\u00e9".encode(), b""]
    with pytest.raises(InferenceServerException, match="runs past the end"):
        deserialize_bytes_tensor(b"\x09\0\0\0ab")


# -- HTTP ------------------------------------------------------------------------


def http_inputs(a, b, binary=True):
    x = httpclient.InferInput("INPUT0", list(a.shape), "FP32").set_data_from_numpy(a, binary)
    y = httpclient.InferInput("INPUT1", list(b.shape), "FP32").set_data_from_numpy(b, binary)
    return [x, y]


def test_http_every_call(server):
    url = f"{server.host}:{server.http_port}"
    with httpclient.InferenceServerClient(url, concurrency=4) as c:
        assert c.is_server_live() and c.is_server_ready()
        assert c.is_model_ready("add_sub") and c.is_model_ready("add_sub", "1")
        assert not c.is_model_ready("nope")
        assert c.get_server_metadata()["name"]
        md = c.get_model_metadata("add_sub")
        assert [i["name"] for i in md["inputs"]] == ["INPUT0", "INPUT1"]
        assert c.get_model_config("add_sub")["max_batch_size"] == 8
        names = {m["name"] for m in c.get_model_repository_index()}
        assert {"add_sub", "ident"} <= names

        a, b = ab(3)
        # Binary both ways (tritonclient's defaults), then JSON both ways.
        r = c.infer("add_sub", http_inputs(a, b))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        r = c.infer("add_sub", http_inputs(a, b, binary=False), request_id="r7",
                    outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)])
        assert r.get_response()["id"] == "r7"
        assert r.get_output("OUTPUT0") is None and r.as_numpy("OUTPUT0") is None
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        assert "data" in r.get_output("OUTPUT1")

        futures = [c.async_infer("add_sub", http_inputs(*ab(k + 1))) for k in range(8)]
        for k, f in enumerate(futures):
            a, b = ab(k + 1)
            np.testing.assert_array_equal(f.get_result().as_numpy("OUTPUT0"), a + b)

        stats = c.get_inference_statistics("add_sub")["model_stats"][0]
        assert stats["name"] == "add_sub" and stats["inference_count"] >= 2 * 3 + 36
        assert c.get_inference_statistics()["model_stats"]

        c.unload_model("ident")
        assert not c.is_model_ready("ident")
        c.load_model("ident")
        assert c.is_model_ready("ident")
        x = np.arange(8, dtype=np.int32).reshape(2, 4)
        i = httpclient.InferInput("INPUT0", [2, 4], "INT32").set_data_from_numpy(x)
        np.testing.assert_array_equal(c.infer("ident", [i]).as_numpy("OUTPUT0"), x)

        # Errors carry the server's message and status.
        bad = httpclient.InferInput("NOPE", [1, 16], "FP32").set_data_from_numpy(a[:1])
        with pytest.raises(InferenceServerException) as e:
            c.infer("add_sub", [bad, http_inputs(a[:1], b[:1])[1]])
        assert e.value.status() == "400" and "NOPE" in e.value.message()
        with pytest.raises(InferenceServerException) as e:
            c.get_model_metadata("nope")
        assert e.value.status() == "404"
        with pytest.raises(InferenceServerException, match="expected"):
            httpclient.InferInput("INPUT0", [1, 16], "FP32").set_data_from_numpy(a)


# -- gRPC ------------------------------------------------------------------------


def test_grpc_every_call(server):
    grpcclient = pytest.importorskip("infd.grpc")
    url = f"{server.host}:{server.grpc_port}"
    with grpcclient.InferenceServerClient(url) as c:
        assert c.is_server_live() and c.is_server_ready()
        assert c.is_model_ready("add_sub") and not c.is_model_ready("nope")
        assert c.get_server_metadata().name
        md = c.get_model_metadata("add_sub", as_json=True)
        assert [i["name"] for i in md["inputs"]] == ["INPUT0", "INPUT1"]
        assert c.get_model_config("add_sub").config.max_batch_size == 8
        assert {m.name for m in c.get_model_repository_index().models} >= {"add_sub", "ident"}

        def inputs(a, b):
            return [grpcclient.InferInput("INPUT0", list(a.shape), "FP32").set_data_from_numpy(a),
                    grpcclient.InferInput("INPUT1", list(b.shape), "FP32").set_data_from_numpy(b)]

        a, b = ab(2)
        r = c.infer("add_sub", inputs(a, b), request_id="g1",
                    outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
        assert r.get_response().id == "g1"
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        assert r.as_numpy("OUTPUT1") is None

        got = []
        done = threading.Event()
        f = c.async_infer("add_sub", inputs(a, b), callback=lambda res, err: (got.append(
            (res, err)), done.set()))
        np.testing.assert_array_equal(f.get_result().as_numpy("OUTPUT1"), a - b)
        assert done.wait(30) and got[0][1] is None

        results = []
        lock = threading.Lock()

        def on_result(res, err):
            with lock:
                results.append((res, err))

        c.start_stream(on_result)
        for k in range(5):
            c.async_stream_infer("add_sub", inputs(*ab(k + 1)), request_id=f"s{k}")
        c.async_stream_infer("nope", inputs(a, b), request_id="bad")
        c.stop_stream()
        oks = {res.get_response().id: res for res, err in results if err is None}
        assert set(oks) == {f"s{k}" for k in range(5)}
        assert sum(err is not None for _, err in results) == 1
        a3, b3 = ab(3)
        np.testing.assert_array_equal(oks["s2"].as_numpy("OUTPUT0"), a3 + b3)

        stats = c.get_inference_statistics("add_sub", as_json=True)
        assert stats["model_stats"][0]["name"] == "add_sub"
        c.unload_model("ident")
        assert not c.is_model_ready("ident")
        c.load_model("ident")
        assert c.is_model_ready("ident")
        with pytest.raises(InferenceServerException) as e:
            c.infer("nope", inputs(a, b))
        assert "NOT_FOUND" in e.value.status() or "UNAVAILABLE" in e.value.status()


# -- raw -------------------------------------------------------------------------


def test_raw_framed_and_headerless(server):
    a, b = ab(4)
    with rawclient.RawClient(unix=server.raw_socket("add_sub").with_suffix(".framed.sock")) as c:
        out = c.infer({"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        out = c.infer({"INPUT0": a, "INPUT1": b}, outputs=["OUTPUT1"])
        assert list(out) == ["OUTPUT1"]
        with pytest.raises(InferenceServerException) as e:
            c.infer({"INPUT0": a})
        assert e.value.status() == "INVALID_ARGUMENT" and "INPUT1" in e.value.message()
        np.testing.assert_array_equal(c.infer({"INPUT0": a, "INPUT1": b})["OUTPUT1"], a - b)
    x = np.array([[1, -2, 3, 2 ** 31 - 1]], dtype=np.int32)
    with rawclient.HeaderlessClient(unix=server.raw_socket("ident")) as c:
        assert c.infer(x, output_bytes=16) == x.tobytes()


# -- Redis queue -------------------------------------------------------------------


def test_queue_submit_wait_poll(serve, model_repo, redis_server):  # noqa: F811
    queue = pytest.importorskip("infd.queue")
    serve(model_repo, "--redis", redis_server.url, "--redis-claim-idle-ms", "1000")
    q = queue.QueueClient(redis_server.url)
    a, b = ab(2)
    job = q.submit("add_sub", http_inputs(a, b))
    r = q.wait(job, timeout=60)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    meta = q.raw_result(job)
    assert meta["status"] == "ok" and meta["deliveries"] == 1
    # JSON inputs, a requested JSON output, and infer() in one call.
    r = q.infer("add_sub", http_inputs(a, b, binary=False), timeout=60,
                outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert q.result("never-submitted") is None
    # An error result raises with its message; the job id is the caller's.
    bad = httpclient.InferInput("NOPE", [2, 16], "FP32").set_data_from_numpy(a)
    job = q.submit("add_sub", [bad], job_id="my-job-1")
    assert job == "my-job-1"
    with pytest.raises(InferenceServerException) as e:
        q.wait(job, timeout=60)
    assert e.value.status() == "INVALID_ARGUMENT" and "NOPE" in e.value.message()
    with pytest.raises(InferenceServerException, match="no result after"):
        q.wait("never-submitted", timeout=0.05)
    assert q.dead_letters("add_sub") == []


# -- embedded (libinfd.so in this process) ---------------------------------------------


def test_embedded_every_call(model_repo):
    with embedded.Server(model_repo, control_mode="explicit", startup_models=["add_sub"],
                         n_threads=1) as srv:
        assert srv.is_live() and srv.is_ready() and srv.version()
        rows = {r["name"]: r for r in srv.repository_index()}
        assert rows["add_sub"]["state"] == "READY" and rows["ident"]["state"] == "UNKNOWN"
        a, b = ab(5)
        out = srv.infer("add_sub", {"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)
        out = srv.infer("add_sub", {"INPUT0": a, "INPUT1": b}, outputs=["OUTPUT1"])
        assert list(out) == ["OUTPUT1"]
        with srv.model("add_sub") as m:
            assert m.name == "add_sub" and m.version == 1 and m.max_batch_size == 8
            assert m.inputs()[0] == {"name": "INPUT0", "datatype": "FP32", "dims": [16]}
            assert m.metadata()["outputs"][1]["name"] == "OUTPUT1"
            assert m.config()["name"] == "add_sub"
        assert not srv.is_model_ready("ident")
        srv.load_model("ident")
        x = np.arange(12, dtype=np.int32).reshape(3, 4)
        np.testing.assert_array_equal(srv.infer("ident", {"INPUT0": x})["OUTPUT0"], x)
        srv.unload_model("ident")
        assert not srv.is_model_ready("ident")
        with pytest.raises(InferenceServerException) as e:
            srv.infer("add_sub", {"INPUT0": a})
        assert e.value.status() == "INVALID_ARGUMENT" and "INPUT1" in e.value.message()
        with pytest.raises(InferenceServerException) as e:
            srv.infer("add_sub", {"INPUT0": a.astype(np.float64), "INPUT1": b})
        assert "INPUT0" in e.value.message()
        with pytest.raises(InferenceServerException) as e:
            srv.model("nope")
        assert e.value.status() == "NOT_FOUND"
    with pytest.raises(InferenceServerException) as e:
        embedded.Server(model_repo / "missing")
    assert e.value.status() == "NOT_FOUND"


def test_embedded_inputs_are_read_in_place_and_outputs_written_into_numpy(model_repo):
    """Zero copy: the engine reads the caller's array (a view of a bigger
    buffer, no copy made) and writes the outputs into the arrays returned."""
    with embedded.Server(model_repo, n_threads=1) as srv:
        big = np.zeros((4, 16), np.float32)
        a = big[1:3]                       # C-contiguous view: passed as it is
        a[:] = 2.0
        b = np.ones((2, 16), np.float32)
        out = srv.infer("add_sub", {"INPUT0": a, "INPUT1": b})
        assert out["OUTPUT0"].flags.owndata  # a numpy array the engine wrote into
        np.testing.assert_array_equal(out["OUTPUT0"], np.full((2, 16), 3.0, np.float32))


# -- installing ----------------------------------------------------------------------


def test_pip_install_and_import(server, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-deps", "--no-index", "--target", str(target), str(CLIENT)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import numpy as np, infd, infd.http as h, infd.grpc as g\n"
            "import infd.utils.shared_memory, infd.utils.cuda_shared_memory\n"
            "assert infd.__file__.startswith(%r), infd.__file__\n"
            "c = h.InferenceServerClient('%s:%d')\n"
            "a = np.ones((1, 16), np.float32)\n"
            "ins = [h.InferInput(n, [1, 16], 'FP32').set_data_from_numpy(a) "
            "for n in ('INPUT0', 'INPUT1')]\n"
            "print(c.infer('add_sub', ins).as_numpy('OUTPUT0').sum())\n"
            "print(g.InferenceServerClient('%s:%d').is_server_ready())\n"
            % (str(target), server.host, server.http_port, server.host, server.grpc_port))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(target)}, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["32.0", "True"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_system_shared_memory_helpers(serve, model_repo, protocol):
    """infd.utils.shared_memory and the clients' shared-memory calls, as
    tritonclient's: inputs and outputs in a region, results read back."""
    import infd.utils.shared_memory as shm
    mod = httpclient if protocol == "http" else pytest.importorskip("infd.grpc")
    srv = serve(model_repo, "--enable-shared-memory", "system")
    url = f"127.0.0.1:{srv.http_port if protocol == 'http' else srv.grpc_port}"
    key = f"/infd-client-test-{os.getpid()}-{protocol}"
    h = shm.create_shared_memory_region("io", key, 256)
    try:
        assert key in shm.mapped_shared_memory_regions()
        a = np.arange(16, dtype=np.float32)[None]
        b = np.full((1, 16), 3, np.float32)
        shm.set_shared_memory_region(h, [a, b])
        with mod.InferenceServerClient(url) as c:
            c.register_system_shared_memory("io", key, 256)
            status = c.get_system_shared_memory_status()
            if protocol == "http":
                assert [(r["name"], r["key"], r["byte_size"]) for r in status] == [
                    ("io", key, 256)]
            else:
                assert status.regions["io"].key == key
            x = [mod.InferInput("INPUT0", [1, 16], "FP32").set_shared_memory("io", 64),
                 mod.InferInput("INPUT1", [1, 16], "FP32").set_shared_memory("io", 64, 64)]
            o = [mod.InferRequestedOutput("OUTPUT0").set_shared_memory("io", 64, 128),
                 mod.InferRequestedOutput("OUTPUT1").set_shared_memory("io", 64, 192)]
            res = c.infer("add_sub", x, outputs=o)
            assert res.as_numpy("OUTPUT0") is None  # in the region
            np.testing.assert_array_equal(shm.get_contents_as_numpy(h, "FP32", [1, 16], 128),
                                          a + b)
            np.testing.assert_array_equal(shm.get_contents_as_numpy(h, np.float32, [1, 16],
                                                                    192), a - b)
            # One input in the region, one in the request; outputs in the reply.
            x[1] = mod.InferInput("INPUT1", [1, 16], "FP32").set_data_from_numpy(b * 2)
            res = c.infer("add_sub", x)
            np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + 2 * b)
            with pytest.raises(InferenceServerException, match="'nope'"):
                c.infer("add_sub", [mod.InferInput("INPUT0", [1, 16], "FP32")
                                    .set_shared_memory("nope", 64), x[1]])
            c.unregister_system_shared_memory()
            status = c.get_system_shared_memory_status()
            assert (status == []) if protocol == "http" else not status.regions
    finally:
        shm.destroy_shared_memory_region(h)
    assert key not in shm.mapped_shared_memory_regions()
    assert not os.path.exists("/dev/shm" + key)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_shared_memory_calls(serve, model_repo, protocol):
    """The clients' CUDA shared-memory calls everywhere: the status, and a
    register the server refuses (no GPU here, or a handle of zeros the driver
    rejects) with the region named."""
    import base64
    import infd.utils.cuda_shared_memory  # noqa: F401  (imports without a GPU)
    mod = httpclient if protocol == "http" else pytest.importorskip("infd.grpc")
    srv = serve(model_repo, "--enable-shared-memory", "cuda")
    url = f"127.0.0.1:{srv.http_port if protocol == 'http' else srv.grpc_port}"
    with mod.InferenceServerClient(url) as c:
        status = c.get_cuda_shared_memory_status()
        assert (status == []) if protocol == "http" else not status.regions
        with pytest.raises(InferenceServerException, match="region 'c' on CUDA device 0"):
            c.register_cuda_shared_memory("c", base64.b64encode(bytes(64)), 0, 64)
        with pytest.raises(InferenceServerException, match="no CUDA shared memory region 'c'"):
            c.unregister_cuda_shared_memory("c")
        c.unregister_cuda_shared_memory()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_shared_memory_helpers(serve, tmp_path, infd_bin, protocol):
    """infd.utils.cuda_shared_memory, as tritonclient's, with a GPU: device
    memory allocated and exported by the helpers, inputs and outputs of a
    KIND_GPU model in it, results read back. Skips without a GPU."""
    from test_cuda import cuda_state
    from test_serve_gpu import add_sub as gpu_add_sub, group_text
    usable, line = cuda_state(infd_bin)
    if not usable:
        pytest.skip(f"no usable CUDA device (infd --version: cuda backend: {line})")
    import infd.utils.cuda_shared_memory as cudashm
    mod = httpclient if protocol == "http" else pytest.importorskip("infd.grpc")
    root = tmp_path / "repo"
    gpu_add_sub(root, "add_sub_gpu", group_text("KIND_GPU"))
    srv = serve(root, "--enable-shared-memory", "cuda")
    url = f"127.0.0.1:{srv.http_port if protocol == 'http' else srv.grpc_port}"
    try:
        h = cudashm.create_shared_memory_region("io", 256, 0)
    except cudashm.CudaSharedMemoryException as e:
        pytest.skip(f"no CUDA runtime for the helpers: {e}")
    try:
        assert "io" in cudashm.allocated_shared_memory_regions()
        a = np.arange(16, dtype=np.float32)[None]
        b = np.full((1, 16), 3, np.float32)
        cudashm.set_shared_memory_region(h, [a, b])
        with mod.InferenceServerClient(url) as c:
            c.register_cuda_shared_memory("io", cudashm.get_raw_handle(h), 0, 256)
            x = [mod.InferInput("INPUT0", [1, 16], "FP32").set_shared_memory("io", 64),
                 mod.InferInput("INPUT1", [1, 16], "FP32").set_shared_memory("io", 64, 64)]
            o = [mod.InferRequestedOutput("OUTPUT0").set_shared_memory("io", 64, 128),
                 mod.InferRequestedOutput("OUTPUT1").set_shared_memory("io", 64, 192)]
            res = c.infer("add_sub_gpu", x, outputs=o)
            assert res.as_numpy("OUTPUT0") is None  # in the region
            np.testing.assert_array_equal(cudashm.get_contents_as_numpy(h, "FP32", [1, 16], 128),
                                          a + b)
            np.testing.assert_array_equal(cudashm.get_contents_as_numpy(h, "FP32", [1, 16], 192),
                                          a - b)
            c.unregister_cuda_shared_memory("io")
    finally:
        cudashm.destroy_shared_memory_region(h)
    assert "io" not in cudashm.allocated_shared_memory_regions()
