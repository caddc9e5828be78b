"""Memory of a served model (issue #28).

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_memory.py
"""

import numpy as np
import pytest
import requests

import repo as model_repo

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


def test_resnet50_plans_share_weights(serve, tmp_path, cache_dir):
    """ResNet-50 served with max_batch_size 8 compiles 4 plans (batch 1, 2,
    4, 8) that hold one copy of the weights: the server reports weights of
    about the model's size (oneDNN's Winograd layouts of the 3x3 convolutions
    are larger than the plain weights, so up to 1.3x), and its resident memory
    is within 1.5x of those weights plus the arenas it reports. Each plan
    holding its own copy, as before, would be 4 copies (VmRSS 895 MB with
    3 plans)."""
    onnx_path = cache_dir / "models" / "resnet50.onnx"
    if not onnx_path.exists():
        pytest.skip(f"{onnx_path} missing: run scripts/setup.sh")
    models = tmp_path / "models"
    (models / "resnet50" / "1").mkdir(parents=True)
    (models / "resnet50" / "1" / "model.onnx").symlink_to(onnx_path)
    for data in onnx_path.parent.glob("resnet50.onnx?*"):  # external data, when exported so
        (models / "resnet50" / "1" / data.name).symlink_to(data)
    (models / "resnet50" / "config.pbtxt").write_text(
        "max_batch_size: 8\ndynamic_batching { }\n"
        "instance_group { count: 1 kind: KIND_CPU }\n")
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
