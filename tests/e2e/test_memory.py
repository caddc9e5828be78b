"""Memory of a served model (issue #28).

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_memory.py
"""

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
