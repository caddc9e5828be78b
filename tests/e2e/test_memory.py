"""Memory of a served model (issue #28).

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_memory.py
"""

import shutil
import subprocess

import numpy as np
import pytest
import requests

import repo as model_repo
from test_cuda import cuda_state

CUDA_LIBRARIES = ("libcudnn", "libcublas", "libcudart", "libcufft", "libnvrtc")


def mapped_files(pid):
    """The files process `pid` maps (the path column of /proc/PID/maps)."""
    with open(f"/proc/{pid}/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}


def test_cpu_process_maps_no_cuda_library(serve, tmp_path):
    """A CPU-only server, having served requests, maps no CUDA library: the
    CUDA backend loads cuDNN and cuBLASLt only when a GPU is first used
    (src/backends/cuda/cuda_libs.h), so a CPU process does not pay for them."""
    models = tmp_path / "models"
    model_repo.add_sub(models)
    srv = serve(models)
    body = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1] * 16}]}
    r = requests.post(srv.url + "/v2/models/add_sub/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    files = mapped_files(srv.proc.pid)
    assert any("infd" in f for f in files), sorted(files)  # the maps were read
    cuda = sorted(f for f in files if any(lib in f for lib in CUDA_LIBRARIES))
    assert cuda == [], cuda


def onnx_weight_bytes(path):
    """Bytes of the model's initializers, as ONNX stores them."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(path))
    return sum(numpy_helper.to_array(t).nbytes for t in m.graph.initializer)


def vm_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def resnet50_repo(tmp_path, cache_dir, config):
    """<tmp>/models/resnet50 linking the cached ONNX file, with `config`."""
    onnx_path = cache_dir / "models" / "resnet50.onnx"
    if not onnx_path.exists():
        pytest.skip(f"{onnx_path} missing: run scripts/setup.sh")
    models = tmp_path / "models"
    (models / "resnet50" / "1").mkdir(parents=True)
    (models / "resnet50" / "1" / "model.onnx").symlink_to(onnx_path)
    for data in onnx_path.parent.glob("resnet50.onnx?*"):  # external data, when exported so
        (models / "resnet50" / "1" / data.name).symlink_to(data)
    (models / "resnet50" / "config.pbtxt").write_text(config)
    return models, onnx_path


def test_resnet50_plans_share_weights(serve, tmp_path, cache_dir):
    """ResNet-50 served with max_batch_size 8 compiles 4 plans (batch 1, 2,
    4, 8) that hold one copy of the weights: the server reports weights of
    about the model's size (oneDNN's Winograd layouts of the 3x3 convolutions
    are larger than the plain weights, so up to 1.3x), and its resident memory
    is within 1.5x of those weights plus the arenas it reports. Each plan
    holding its own copy, as before, would be 4 copies (VmRSS 895 MB with
    3 plans)."""
    models, onnx_path = resnet50_repo(
        tmp_path, cache_dir,
        "max_batch_size: 8\ndynamic_batching { }\ninstance_group { count: 1 kind: KIND_CPU }\n")
    srv = serve(models)
    r = requests.get(srv.url + "/v2/models/resnet50/stats", timeout=30)
    assert r.status_code == 200, r.text
    mem = r.json()["model_stats"][0]["memory_usage"]
    assert [(m["type"], m["id"]) for m in mem] == [("CPU", 0)], mem
    metrics = requests.get(srv.metrics_url, timeout=30).text
    weight = arena = None
    for line in metrics.splitlines():
        if line.startswith('infd_model_weight_bytes{model="resnet50"'):
            weight = int(line.split()[-1])
        if line.startswith('infd_model_arena_bytes{model="resnet50"'):
            arena = int(line.split()[-1])
        if line.startswith('infd_model_memory_bytes{model="resnet50",version="1",type="CPU"'):
            assert int(line.split()[-1]) == mem[0]["byte_size"], line
    assert weight is not None and arena is not None, metrics
    assert mem[0]["byte_size"] == weight + arena
    model = onnx_weight_bytes(onnx_path)
    assert model <= weight <= 1.3 * model, (weight, model)
    rss = vm_rss_bytes(srv.proc.pid)
    assert rss <= 1.5 * weight + arena, (rss, weight, arena)
    assert "one copy for 4 plan(s)" in srv.log(), srv.log_tail()
    # Every batch size still answers, with the same result for one image.
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    outs = []
    for rows in (1, 3, 8):
        body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [rows, 3, 224, 224],
                            "data": np.repeat(x, rows, axis=0).ravel().tolist()}]}
        r = requests.post(srv.url + "/v2/models/resnet50/infer", json=body, timeout=120)
        assert r.status_code == 200, r.text
        outs.append(np.array(r.json()["outputs"][0]["data"], dtype=np.float32).reshape(rows, -1))
    for o in outs[1:]:
        np.testing.assert_allclose(o, np.repeat(outs[0][:1], o.shape[0], axis=0),
                                   rtol=1e-3, atol=1e-3)


@pytest.fixture
def gpu(infd_bin):
    usable, line = cuda_state(infd_bin)
    if not usable:
        pytest.skip(f"no usable CUDA device (infd --version: cuda backend: {line})")
    return line


def gpu_used_bytes():
    """Device memory in use on GPU 0, all processes (NVML's figure, which
    cudaMemGetInfo's total - free also gives)."""
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                        "-i", "0"], capture_output=True, text=True, timeout=60, check=True)
    return int(r.stdout.split()[0]) << 20


def served_gpu_memory(serve, tmp_path, cache_dir, count):
    """(device bytes the server added, its GPU memory_usage entry, its arena
    bytes) for ResNet-50 FP16 with `count` KIND_GPU instances on GPU 0 and
    max_batch_size 8 (4 plans), once ready and after one request."""
    models, _ = resnet50_repo(
        tmp_path / f"x{count}", cache_dir,
        "max_batch_size: 8\ndynamic_batching { }\n"
        f"instance_group {{ count: {count} kind: KIND_GPU gpus: [ 0 ] }}\n"
        'parameters { key: "precision" value: { string_value: "fp16" } }\n')
    before = gpu_used_bytes()
    srv = serve(models, wait_ready=False)
    srv.wait_ready(timeout=300)  # a cold GPU machine tunes cuDNN for a while
    x = np.zeros((8, 3, 224, 224), dtype=np.float32)
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                        "data": x.ravel().tolist()}]}
    r = requests.post(srv.url + "/v2/models/resnet50/infer", json=body, timeout=120)
    assert r.status_code == 200, r.text
    used = gpu_used_bytes() - before
    stats = requests.get(srv.url + "/v2/models/resnet50/stats", timeout=30).json()
    gpu_mem = [m for m in stats["model_stats"][0]["memory_usage"] if m["type"] == "GPU"]
    assert len(gpu_mem) == 1, stats
    arena = None
    for line in requests.get(srv.metrics_url, timeout=30).text.splitlines():
        if line.startswith('infd_model_arena_bytes{model="resnet50"'):
            arena = int(line.split()[-1])
    assert arena is not None
    assert srv.stop() == 0, srv.log_tail()
    return used, gpu_mem[0]["byte_size"], arena


def test_gpu_instances_share_device_weights(gpu, serve, tmp_path, cache_dir):
    """On a GPU: ResNet-50 FP16 with 4 KIND_GPU instances (4 plans each)
    holds one set of device weights. The server reports the same device
    weight bytes with 4 instances as with 1. Each of the 3 more instances
    adds to the device memory in use (NVML, before and after) its arenas
    and its 4 streams' cuDNN and cuBLASLt handles and graphs (about 42 MiB
    on the H200), and no weights: less than 1.5x the weights (52.7 MiB)
    beyond its arenas, where a copy of the weights per instance, as before
    they were shared, would be the weights plus the handles (95 MiB)."""
    if not shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi not found: the device memory in use cannot be read")
    used1, gpu1, arena1 = served_gpu_memory(serve, tmp_path, cache_dir, 1)
    used4, gpu4, arena4 = served_gpu_memory(serve, tmp_path, cache_dir, 4)
    weights1, weights4 = gpu1 - arena1, gpu4 - arena4
    per_instance = (used4 - used1 - (arena4 - arena1)) / 3
    print(f"device weights {weights1} / {weights4} B, arenas {arena1} / {arena4} B, "
          f"device memory added {used1} / {used4} B (1 / 4 instances): "
          f"{per_instance / 2**20:.1f} MiB per more instance beyond its arenas")
    assert weights1 == weights4 > 0
    assert arena4 > arena1
    assert per_instance < 1.5 * weights1, (used1, used4, arena1, arena4, weights1)
