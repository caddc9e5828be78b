"""The gRPC frontend from Node.js: @grpc/grpc-js with @grpc/proto-loader
loading proto/grpc_service.proto at run time (tests/e2e/grpc_client.js), the
way a Node client of Triton or KServe talks to a server.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_grpc_node.py
Needs node and the npm cache (scripts/fetch_npm.sh); skips without them.
"""

import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import repo as model_repo

CLIENT = pathlib.Path(__file__).resolve().parent / "grpc_client.js"


@pytest.fixture
def node_client(repo_root):
    node = shutil.which("node")
    cache = pathlib.Path(os.environ.get("INFD_CACHE") or repo_root / ".cache")
    if not node:
        pytest.skip("node not installed")
    if not (cache / "npm" / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.skip("@grpc/grpc-js not in the npm cache: run scripts/fetch_npm.sh")
    return node


def test_node_grpc_client(node_client, serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    model_repo.add_sub(models, name="add_sub_slow", max_batch_size=8,
                       dynamic_batching={"max_queue_delay_microseconds": 2000000})
    model_repo.identity(models, dtype="INT32")
    s = serve(models)
    p = subprocess.run([node_client, str(CLIENT), f"{s.host}:{s.grpc_port}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)

    assert r["live"]["value"]["live"] is True and r["ready"]["value"]["ready"] is True
    assert r["server_metadata"]["value"]["name"] == "infd"
    md = r["model_metadata"]["value"]
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["inputs"]] == \
        [("INPUT0", "FP32", ["-1", "16"]), ("INPUT1", "FP32", ["-1", "16"])]
    assert r["model_ready"]["value"]["ready"] is True
    cfg = r["config"]["value"]["config"]
    assert cfg["name"] == "add_sub" and cfg["max_batch_size"] == 8
    assert [i["name"] for i in cfg["input"]] == ["INPUT0", "INPUT1"]
    assert {m["name"] for m in r["index"]["value"]["models"]} == \
        {"add_sub", "add_sub_slow", "identity_int32"}
    assert r["health"]["value"]["status"] == "SERVING"

    a = np.arange(16, dtype=np.float32)
    b = 0.5 * np.arange(16, dtype=np.float32)
    inf = r["infer"]
    assert inf["id"] == "n1" and inf["model_version"] == "1"
    assert inf["outputs"]["OUTPUT0"]["shape"] == [1, 16]
    assert inf["outputs"]["OUTPUT0"]["data"] == (a + b).tolist()
    assert inf["outputs"]["OUTPUT1"]["data"] == (a - b).tolist()
    assert r["typed"]["OUTPUT0"]["data"] == [-7, 0, 7, 2147483647]

    # Status codes as numbers (grpc.status): 3 INVALID_ARGUMENT, 4
    # DEADLINE_EXCEEDED, 5 NOT_FOUND.
    assert r["unknown_model"]["code"] == 5 and "nope" in r["unknown_model"]["details"]
    assert r["bad_shape"]["code"] == 3 and "INPUT1" in r["bad_shape"]["details"]
    assert r["deadline"]["code"] == 4
    st = r["stats"]["value"]["model_stats"][0]
    assert st["name"] == "add_sub" and int(st["inference_stats"]["success"]["count"]) >= 1

    stream = r["stream"]
    assert "stream_error" not in stream, stream
    assert sorted(stream) == sorted(f"s{i}" for i in range(100))
    for i in range(100):
        got = stream[f"s{i}"]
        rows = 1 + i % 3
        if i % 10 == 9:
            assert "nope" in got["error"], got
        elif i % 2 == 0:
            x = np.arange(16 * rows, dtype=np.float32) + i
            assert got["OUTPUT0"]["shape"] == [rows, 16]
            assert got["OUTPUT0"]["data"] == (2 * x).tolist() and got["OUTPUT1"]["data"] == \
                [0.0] * (16 * rows), i
        else:
            assert got["OUTPUT0"]["data"] == [k * i for k in range(4 * rows)], i
