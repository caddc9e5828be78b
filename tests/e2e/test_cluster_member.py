"""A worker's membership in etcd (`infd serve --cluster ... --advertise ...`,
src/cluster/member.c) against a real 3-member etcd cluster: it registers
under a lease with its address, ports and models; the value follows model
loads and unloads; SIGTERM revokes the lease at once; SIGKILL leaves the key
to expire with it; losing the etcd leader, or all of etcd for a while, or
etcd's whole state, never stops the worker, which registers again.
"""

import json
import shutil
import signal
import time

import numpy as np
import pytest
import requests

import repo
from etcd_cluster import etcd_cluster  # noqa: F401  (the fixture)
from serving import free_port

DEADLINE_S = 30  # bounds a broken registration's wait, never a goal


@pytest.fixture
def add_sub_repo(tmp_path):
    root = tmp_path / "repo"
    repo.add_sub(root)
    return root


def worker(serve, root, etcd, wid, *extra, ttl=5):
    return serve(root, "--cluster", etcd.endpoints, "--advertise",
                 f"tcp://127.0.0.1:{free_port()}", "--cluster-id", wid, "--cluster-ttl", ttl,
                 *extra)


def wait_for(what, pred, deadline_s=DEADLINE_S, every=0.05):
    deadline = time.time() + deadline_s
    while True:
        v = pred()
        if v:
            return v
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def infer_ok(srv):
    a = np.arange(16, dtype=np.float32)
    body = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a.tolist()},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": a.tolist()}]}
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", json=body, timeout=10)
    return r.status_code == 200 and r.json()["outputs"][0]["data"] == (a + a).tolist()


def test_worker_registers_and_follows_its_models(serve, add_sub_repo, etcd_cluster):
    key = "/infd/workers/w1"
    srv = worker(serve, add_sub_repo, etcd_cluster, "w1", "--model-control-mode", "explicit",
                 "--load-model", "add_sub")
    v = wait_for("the key", lambda: etcd_cluster.get(key))
    assert v["id"] == "w1" and v["address"].startswith("tcp://127.0.0.1:")
    assert v["http_port"] == srv.http_port and v["grpc_port"] == srv.grpc_port
    models = {(x["name"], x["version"], x["state"]): x for x in v["models"]}
    assert ("add_sub", 1, "READY") in models
    config = json.loads(models[("add_sub", 1, "READY")]["config"])  # what a router serves
    assert config["name"] == "add_sub" and [i["name"] for i in config["input"]] == [
        "INPUT0", "INPUT1"]
    assert etcd_cluster.lease_of(key) > 0
    assert "cluster: registered as /infd/workers/w1" in srv.log()
    # Unloading shows in the value within about a second.
    r = requests.post(f"{srv.url}/v2/repository/models/add_sub/unload", json={}, timeout=30)
    assert r.status_code == 200, r.text
    wait_for("the unload in etcd", lambda: not any(
        m["state"] == "READY" for m in etcd_cluster.get(key)["models"]))
    r = requests.post(f"{srv.url}/v2/repository/models/add_sub/load", json={}, timeout=30)
    assert r.status_code == 200, r.text
    wait_for("the load in etcd", lambda: any(
        (x["name"], x["state"]) == ("add_sub", "READY") for x in etcd_cluster.get(key)["models"]))
    # SIGTERM: the lease is revoked before the server drains; the key is gone
    # as soon as the process has exited.
    assert srv.stop() == 0
    assert etcd_cluster.get(key) is None
    assert "cluster: left (lease" in srv.log()


def test_sigkill_leaves_the_key_to_expire_with_its_lease(serve, add_sub_repo, etcd_cluster):
    key = "/infd/workers/w2"
    srv = worker(serve, add_sub_repo, etcd_cluster, "w2", ttl=2)
    wait_for("the key", lambda: etcd_cluster.get(key))
    srv.kill()
    t0 = time.time()
    assert etcd_cluster.get(key) is not None  # no one said goodbye
    wait_for("the key's expiry", lambda: etcd_cluster.get(key) is None, deadline_s=10)
    assert time.time() - t0 <= 2 + 1.5  # TTL + 1 s, and etcd's own rounding


def test_losing_the_etcd_leader_stops_nothing(serve, add_sub_repo, etcd_cluster):
    key = "/infd/workers/w3"
    srv = worker(serve, add_sub_repo, etcd_cluster, "w3", ttl=2)
    wait_for("the key", lambda: etcd_cluster.get(key))
    lease = etcd_cluster.lease_of(key)
    leader = etcd_cluster.leader()
    leader.stop(signal.SIGKILL)
    wait_for("a new leader", lambda: etcd_cluster.leader())
    # Two TTLs later the lease is still kept alive by the other members.
    deadline = time.time() + 4
    while time.time() < deadline:
        assert srv.is_running() and infer_ok(srv)
        time.sleep(0.2)
    assert etcd_cluster.lease_of(key) == lease
    assert srv.is_running()


def test_etcd_away_then_back_empty_the_worker_registers_again(serve, add_sub_repo,
                                                               etcd_cluster):
    """All of etcd stops for longer than the TTL, and comes back with no
    state at all (a new cluster on the same addresses): the worker's lease is
    unknown there, so it grants a new one and puts its key again."""
    key = "/infd/workers/w4"
    srv = worker(serve, add_sub_repo, etcd_cluster, "w4", ttl=2)
    wait_for("the key", lambda: etcd_cluster.get(key))
    old = etcd_cluster.lease_of(key)
    for m in etcd_cluster.members:
        m.stop()
        shutil.rmtree(m.path)
    time.sleep(3)
    assert srv.is_running() and infer_ok(srv)
    for m in etcd_cluster.members:
        m.start(etcd_cluster.initial)
    etcd_cluster.wait_healthy()
    v = wait_for("the key again", lambda: etcd_cluster.get(key))
    assert v["id"] == "w4" and etcd_cluster.lease_of(key) not in (0, old)
    log = srv.log()
    assert "serving on, trying again" in log
    assert "registered as /infd/workers/w4" in log.split("serving on, trying again", 1)[1]
    assert srv.is_running()


def test_cluster_options_are_checked(serve, add_sub_repo, etcd_cluster, infd_bin):
    import subprocess
    cases = [
        (["--cluster", etcd_cluster.endpoints], "--cluster and --advertise go together"),
        (["--cluster", etcd_cluster.endpoints, "--advertise", "127.0.0.1:7000"],
         "expected tcp://HOST:PORT"),
        (["--cluster", "ftp://x", "--advertise", "tcp://127.0.0.1:7000"],
         "expected http://HOST:PORT"),
        (["--cluster", etcd_cluster.endpoints, "--advertise", "tcp://127.0.0.1:7000",
          "--cluster-id", "a/b"], "--cluster-id 'a/b'"),
    ]
    for args, why in cases:
        p = subprocess.run([str(infd_bin), "serve", "--model-repository", str(add_sub_repo),
                            "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1",
                            "--raw-socket-dir", "off", *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and why in p.stderr, (args, p.returncode, p.stderr)


def test_the_value_is_json_a_router_can_read(serve, add_sub_repo, etcd_cluster):
    srv = worker(serve, add_sub_repo, etcd_cluster, "w5")
    raw = wait_for("the key", lambda: etcd_cluster.get_prefix("/infd/workers/"))
    v = json.loads(raw["/infd/workers/w5"])
    assert set(v) >= {"id", "address", "http_port", "grpc_port", "infd_version",
                      "started_at_ms", "models"}
    assert srv.stop() == 0
