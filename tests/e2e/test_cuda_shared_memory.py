"""Triton's CUDA shared-memory extension (docs/HTTP.md, docs/GRPC.md).

Everywhere (CI has no GPU): the HTTP and gRPC surface. With CUDA shared
memory off, every call says how to turn it on; with it on and no usable
device, a register names the reason and the server keeps serving; malformed
registrations (no handle, a handle of the wrong size, a bad device id, a
zero size) are refused with what was wrong; `/v2` lists the extension; and
`--enable-shared-memory` refuses a kind it does not know.

With a usable CUDA device (the H200 machine): the test process allocates
device memory through the CUDA runtime (ctypes on libcudart), exports it
with cudaIpcGetMemHandle and registers it, over HTTP and gRPC. add_sub on a
KIND_GPU instance reads its inputs from the region on the device (device to
device) and a KIND_CPU copy reads them through a copy to the host; outputs
are written into the region; everything is read back with cudaMemcpy and
checked against numpy. 16 clients mixing CUDA shared-memory requests with
ordinary binary ones batch together and each gets its own answer. A
byte_size past the exported allocation is refused. Without a device these
skip, saying why.
"""

import base64
import concurrent.futures
import ctypes

import subprocess

import numpy as np
import pytest
import requests

import repo

from test_serve_gpu import add_sub, cuda, gpu, group_text  # noqa: F401 (fixtures)

try:  # the gRPC tests need grpcio; the others run without it
    import grpc
    from test_grpc import pb  # noqa: F401
except (ImportError, pytest.skip.Exception):
    grpc = None

    @pytest.fixture
    def pb():
        pytest.skip("grpcio is not installed")

SHM = "--enable-shared-memory"
HANDLE_BYTES = 64


def register(url, name, handle, device, size):
    body = {"raw_handle": {"b64": base64.b64encode(handle).decode()}, "device_id": device,
            "byte_size": size}
    return requests.post(f"{url}/v2/cudasharedmemory/region/{name}/register", json=body,
                         timeout=30)


def grpc_stub(pb, srv):
    ch = grpc.insecure_channel(f"{srv.host}:{srv.grpc_port}")
    return pb.svc_grpc.GRPCInferenceServiceStub(ch)


# -- everywhere ----------------------------------------------------------------------


def test_cuda_shared_memory_off_says_how_to_turn_it_on(serve, tmp_path):
    root = tmp_path / "repo"
    repo.add_sub(root)
    srv = serve(root, SHM, "system")
    r = requests.get(f"{srv.url}/v2/cudasharedmemory/status", timeout=5)
    assert r.status_code == 400 and "--enable-shared-memory cuda" in r.json()["error"], r.text
    r = register(srv.url, "c", b"\0" * HANDLE_BYTES, 0, 64)
    assert r.status_code == 400 and "--enable-shared-memory cuda" in r.json()["error"], r.text
    ext = requests.get(f"{srv.url}/v2", timeout=5).json()["extensions"]
    assert "system_shared_memory" in ext and "cuda_shared_memory" not in ext


def test_bad_registrations_are_refused_and_the_server_serves(serve, tmp_path, cuda):  # noqa: F811
    root = tmp_path / "repo"
    repo.add_sub(root)
    srv = serve(root, SHM, "system,cuda")
    ext = requests.get(f"{srv.url}/v2", timeout=5).json()["extensions"]
    assert "system_shared_memory" in ext and "cuda_shared_memory" in ext
    assert requests.get(f"{srv.url}/v2/cudasharedmemory/status", timeout=5).json() == []
    url = f"{srv.url}/v2/cudasharedmemory/region/c/register"
    for body, want in [
        ({"device_id": 0, "byte_size": 64}, "'raw_handle' must be"),
        ({"raw_handle": {"b64": base64.b64encode(b"x" * 10).decode()}, "device_id": 0,
          "byte_size": 64}, "64-byte cudaIpcMemHandle_t"),
        ({"raw_handle": {"b64": "!" * 88}, "device_id": 0, "byte_size": 64}, "'raw_handle'"),
        ({"raw_handle": {"b64": base64.b64encode(b"\0" * 64).decode()}, "device_id": -1,
          "byte_size": 64}, "'device_id' must be a non-negative integer"),
        ({"raw_handle": {"b64": base64.b64encode(b"\0" * 64).decode()}, "device_id": 0},
         "'byte_size' is missing"),
        ({"raw_handle": {"b64": base64.b64encode(b"\0" * 64).decode()}, "device_id": 0,
          "byte_size": 0}, "byte_size 0"),
    ]:
        r = requests.post(url, json=body, timeout=10)
        assert r.status_code == 400 and want in r.json()["error"], (body, r.text)
    r = requests.post(url, data=b"not json", timeout=10)
    assert r.status_code == 400 and "'raw_handle', 'device_id'" in r.json()["error"]
    # A zero handle on device 0: no device here (the reason is said), or
    # the driver refuses the handle on a GPU machine.
    r = register(srv.url, "c", b"\0" * HANDLE_BYTES, 0, 64)
    assert r.status_code == 400, r.text
    msg = r.json()["error"]
    assert msg.startswith("region 'c' on CUDA device 0: "), msg
    usable, _ = cuda
    if not usable:
        assert "no device" in msg or "device backend" in msg, msg
    # A region that is not registered, as an input.
    body = {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 16],
                        "parameters": {"shared_memory_region": "c",
                                       "shared_memory_byte_size": 64}} for i in range(2)]}
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", json=body, timeout=10)
    assert r.status_code == 400 and "no shared memory region 'c'" in r.json()["error"], r.text
    r = requests.post(f"{srv.url}/v2/cudasharedmemory/region/c/unregister", timeout=10)
    assert r.status_code == 400 and "no CUDA shared memory region 'c'" in r.json()["error"]
    assert requests.post(f"{srv.url}/v2/cudasharedmemory/unregister", timeout=10).ok
    # Still serving.
    a = np.ones((1, 16), np.float32)
    body = {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 16],
                        "data": a.ravel().tolist()} for i in range(2)]}
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text


def test_grpc_cuda_shared_memory_surface(serve, tmp_path, pb, cuda):  # noqa: F811
    root = tmp_path / "repo"
    repo.add_sub(root)
    off = serve(root)
    st = grpc_stub(pb, off)
    with pytest.raises(grpc.RpcError) as e:
        st.CudaSharedMemoryStatus(pb.svc.CudaSharedMemoryStatusRequest(), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "--enable-shared-memory cuda" in e.value.details()
    srv = serve(root, SHM, "cuda")
    st = grpc_stub(pb, srv)
    assert len(st.CudaSharedMemoryStatus(pb.svc.CudaSharedMemoryStatusRequest(),
                                         timeout=10).regions) == 0
    md = st.ServerMetadata(pb.svc.ServerMetadataRequest(), timeout=10)
    assert "cuda_shared_memory" in md.extensions and "system_shared_memory" not in md.extensions
    for kw, want in [(dict(raw_handle=b"x" * 10, device_id=0, byte_size=64), "64 bytes"),
                     (dict(raw_handle=b"\0" * 64, device_id=-3, byte_size=64), "device_id -3"),
                     (dict(raw_handle=b"\0" * 64, device_id=0, byte_size=0), "byte_size 0")]:
        with pytest.raises(grpc.RpcError) as e:
            st.CudaSharedMemoryRegister(pb.svc.CudaSharedMemoryRegisterRequest(name="c", **kw),
                                        timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert want in e.value.details(), e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        st.CudaSharedMemoryRegister(pb.svc.CudaSharedMemoryRegisterRequest(
            name="c", raw_handle=b"\0" * 64, device_id=0, byte_size=64), timeout=10)
    usable, _ = cuda
    want = grpc.StatusCode.INVALID_ARGUMENT if usable else grpc.StatusCode.UNAVAILABLE
    assert e.value.code() == want and "region 'c' on CUDA device 0" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        st.CudaSharedMemoryUnregister(pb.svc.CudaSharedMemoryUnregisterRequest(name="c"),
                                      timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_unknown_shared_memory_kind_is_a_usage_error(infd_bin):
    r = subprocess.run([str(infd_bin), "serve", "--enable-shared-memory", "system,gpu"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "'gpu' is not a kind infd has ('system', 'cuda')" in r.stderr


# -- with a GPU ----------------------------------------------------------------------


class Cuda:
    """The CUDA runtime through ctypes: device memory this process owns."""

    def __init__(self):
        self.lib = None
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if self.lib is None:
            pytest.skip("no libcudart in the library path to allocate device memory with")

    def check(self, rc, what):
        assert rc == 0, f"{what}: cudaError {rc}"

    def malloc(self, n):
        p = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), "cudaMalloc")
        return p.value

    def free(self, p):
        self.lib.cudaFree(ctypes.c_void_p(p))

    def put(self, dev, array, offset=0):
        a = np.ascontiguousarray(array)
        self.check(self.lib.cudaMemcpy(ctypes.c_void_p(dev + offset),
                                       a.ctypes.data_as(ctypes.c_void_p),
                                       ctypes.c_size_t(a.nbytes), 1), "cudaMemcpy H2D")

    def get(self, dev, offset, shape, dtype=np.float32):
        a = np.empty(shape, dtype)
        self.check(self.lib.cudaMemcpy(a.ctypes.data_as(ctypes.c_void_p),
                                       ctypes.c_void_p(dev + offset),
                                       ctypes.c_size_t(a.nbytes), 2), "cudaMemcpy D2H")
        return a

    def handle(self, dev):
        h = ctypes.create_string_buffer(HANDLE_BYTES)
        self.check(self.lib.cudaIpcGetMemHandle(h, ctypes.c_void_p(dev)), "cudaIpcGetMemHandle")
        return h.raw


def shm_body(region, in_off, out_off, outputs=True):
    body = {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 16],
                        "parameters": {"shared_memory_region": region,
                                       "shared_memory_offset": in_off + 64 * i,
                                       "shared_memory_byte_size": 64}} for i in range(2)]}
    if outputs:
        body["outputs"] = [{"name": f"OUTPUT{i}",
                            "parameters": {"shared_memory_region": region,
                                           "shared_memory_offset": out_off + 64 * i,
                                           "shared_memory_byte_size": 64}} for i in range(2)]
    return body


SLOT = 256  # per client: a, b, then OUTPUT0, OUTPUT1 (64 bytes each)


def test_gpu_and_cpu_models_read_and_write_cuda_shared_memory(serve, tmp_path, gpu):  # noqa: F811
    cu = Cuda()
    root = tmp_path / "repo"
    add_sub(root, "add_sub_gpu", group_text("KIND_GPU"))
    add_sub(root, "add_sub_cpu", group_text("KIND_CPU"))
    srv = serve(root, SHM, "system,cuda")
    n = 16
    dev = cu.malloc(n * SLOT)
    try:
        # Past the allocation first (the server then closes the handle).
        r = register(srv.url, "too_big", cu.handle(dev), 0, 1 << 30)
        assert r.status_code == 400 and "more than the" in r.json()["error"], r.text
        r = register(srv.url, "c", cu.handle(dev), 0, n * SLOT)
        assert r.status_code == 200, r.text
        st = requests.get(f"{srv.url}/v2/cudasharedmemory/status", timeout=5).json()
        assert st == [{"name": "c", "device_id": 0, "byte_size": n * SLOT}]
        rng = np.random.default_rng(5)
        for model in ("add_sub_gpu", "add_sub_cpu"):
            for outputs in (True, False):
                a = rng.normal(size=16).astype(np.float32)
                b = rng.normal(size=16).astype(np.float32)
                cu.put(dev, np.concatenate([a, b, np.zeros(32, np.float32)]))
                r = requests.post(f"{srv.url}/v2/models/{model}/infer",
                                  json=shm_body("c", 0, 128, outputs), timeout=60)
                assert r.status_code == 200, r.text
                if outputs:
                    got = cu.get(dev, 128, (2, 16))
                    assert np.array_equal(got[0], a + b) and np.array_equal(got[1], a - b), model
                    outs = {o["name"]: o for o in r.json()["outputs"]}
                    assert outs["OUTPUT0"]["parameters"] == {"shared_memory_region": "c",
                                                             "shared_memory_byte_size": 64}
                else:
                    outs = {o["name"]: o["data"] for o in r.json()["outputs"]}
                    assert np.allclose(outs["OUTPUT0"], a + b), model
                    assert np.allclose(outs["OUTPUT1"], a - b), model

        # 16 clients on the GPU model: half in CUDA shared memory, half
        # ordinary JSON, batched together; each answer is its own.
        xs = [(rng.normal(size=16).astype(np.float32), rng.normal(size=16).astype(np.float32))
              for _ in range(n)]
        for i, (a, b) in enumerate(xs):
            cu.put(dev, np.concatenate([a, b]), i * SLOT)

        def one(i):
            a, b = xs[i]
            for _ in range(10):
                if i % 2 == 0:
                    r = requests.post(f"{srv.url}/v2/models/add_sub_gpu/infer",
                                      json=shm_body("c", i * SLOT, i * SLOT + 128), timeout=60)
                    assert r.status_code == 200, r.text
                    got = cu.get(dev, i * SLOT + 128, (2, 16))
                    if not (np.array_equal(got[0], a + b) and np.array_equal(got[1], a - b)):
                        return False
                else:
                    body = {"inputs": [{"name": f"INPUT{k}", "datatype": "FP32", "shape": [1, 16],
                                        "data": x.tolist()} for k, x in enumerate((a, b))]}
                    r = requests.post(f"{srv.url}/v2/models/add_sub_gpu/infer", json=body,
                                      timeout=60)
                    assert r.status_code == 200, r.text
                    outs = {o["name"]: o["data"] for o in r.json()["outputs"]}
                    if not np.allclose(outs["OUTPUT0"], a + b):
                        return False
            return True

        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            assert all(ex.map(one, range(n)))
        assert requests.post(f"{srv.url}/v2/cudasharedmemory/region/c/unregister",
                             timeout=10).ok
        assert requests.get(f"{srv.url}/v2/cudasharedmemory/status", timeout=5).json() == []
    finally:
        cu.free(dev)


def test_grpc_inputs_and_outputs_in_cuda_shared_memory(serve, tmp_path, pb, gpu):  # noqa: F811
    cu = Cuda()
    root = tmp_path / "repo"
    add_sub(root, "add_sub_gpu", group_text("KIND_GPU"))
    srv = serve(root, SHM, "cuda")
    st = grpc_stub(pb, srv)
    dev = cu.malloc(SLOT)
    try:
        st.CudaSharedMemoryRegister(pb.svc.CudaSharedMemoryRegisterRequest(
            name="g", raw_handle=cu.handle(dev), device_id=0, byte_size=SLOT), timeout=30)
        regions = st.CudaSharedMemoryStatus(pb.svc.CudaSharedMemoryStatusRequest(),
                                            timeout=10).regions
        assert regions["g"].device_id == 0 and regions["g"].byte_size == SLOT
        a = np.arange(16, dtype=np.float32)
        b = np.full(16, 3, np.float32)
        cu.put(dev, np.concatenate([a, b, np.zeros(32, np.float32)]))
        req = pb.svc.ModelInferRequest(model_name="add_sub_gpu")
        for i in range(2):
            t = req.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
            t.parameters["shared_memory_region"].string_param = "g"
            t.parameters["shared_memory_offset"].int64_param = 64 * i
            t.parameters["shared_memory_byte_size"].int64_param = 64
            o = req.outputs.add(name=f"OUTPUT{i}")
            o.parameters["shared_memory_region"].string_param = "g"
            o.parameters["shared_memory_offset"].int64_param = 128 + 64 * i
            o.parameters["shared_memory_byte_size"].int64_param = 64
        r = st.ModelInfer(req, timeout=60)
        assert list(r.raw_output_contents) in ([], [b"", b""])
        got = cu.get(dev, 128, (2, 16))
        assert np.array_equal(got[0], a + b) and np.array_equal(got[1], a - b)
        st.CudaSharedMemoryUnregister(pb.svc.CudaSharedMemoryUnregisterRequest(), timeout=10)
    finally:
        cu.free(dev)
