"""`infd router` (src/cluster/router.c) in front of `infd serve` workers, all
found through a real 3-member etcd cluster, on loopback: requests through
the router's HTTP and gRPC give the workers' answers, the metadata is the
workers', errors are the same as from a server, a worker that joins
becomes routable, and a SIGKILLed worker under load costs no failed
request (its calls go once more to another worker).
"""

import concurrent.futures
import pathlib
import sys
import threading
import time

import numpy as np
import pytest
import requests

import repo
from etcd_cluster import etcd_cluster  # noqa: F401  (the fixture)
from serving import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import infd.grpc as grpcclient  # noqa: E402
import infd.http as httpclient  # noqa: E402

DEADLINE_S = 30  # bounds a broken cluster's wait, never a goal


@pytest.fixture
def cluster(serve, tmp_path, etcd_cluster, infd_bin):
    root = tmp_path / "repo"
    repo.add_sub(root, dynamic_batching={"max_queue_delay_microseconds": 500})

    def worker(wid):
        return serve(root, "--cluster", etcd_cluster.endpoints, "--advertise",
                     f"tcp://127.0.0.1:{free_port()}", "--cluster-id", wid)

    workers = [worker("w1"), worker("w2")]
    router = start_router(infd_bin, etcd_cluster, tmp_path)
    yield router, workers, worker
    rc = router.stop()
    assert rc == 0, f"infd router exited with {rc}:\n" + router.log()[-4000:]


def start_router(infd_bin, etcd, tmp_path):
    import subprocess
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    log = open(tmp_path / "router.log", "wb")
    proc = subprocess.Popen(
        [str(infd_bin), "router", "--etcd", etcd.endpoints, "--host", "127.0.0.1",
         "--http-port", str(http), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return RouterProc(proc, http, grpc_port, metrics, tmp_path / "router.log")


class RouterProc:
    def __init__(self, proc, http, grpc_port, metrics, log):
        self.proc, self.http_port, self.grpc_port, self.log_path = proc, http, grpc_port, log
        self.url = f"http://127.0.0.1:{http}"
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"

    def metrics(self):
        """{series: value} of the router's scrape."""
        out = {}
        for line in requests.get(self.metrics_url, timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def log(self):
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            return self.proc.wait(timeout=30)
        return self.proc.returncode


def body(a, b):
    return {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a.tolist()},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": b.tolist()}]}


def wait_routable(router, model="add_sub"):
    deadline = time.time() + DEADLINE_S
    while True:
        try:
            r = requests.get(f"{router.url}/v2/models/{model}/ready", timeout=2)
            if r.status_code == 200:
                a = np.ones(16, np.float32)
                if requests.post(f"{router.url}/v2/models/{model}/infer", json=body(a, a),
                                 timeout=5).status_code == 200:
                    return
        except requests.RequestException:
            pass
        assert router.proc.poll() is None, router.log()[-3000:]
        assert time.time() < deadline, "the router never served the model:\n" + router.log()[-3000:]
        time.sleep(0.05)


def test_requests_through_the_router(cluster):
    router, workers, _ = cluster
    wait_routable(router)
    rng = np.random.default_rng(1)
    a = rng.normal(size=16).astype(np.float32)
    b = rng.normal(size=16).astype(np.float32)
    r = requests.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, b), timeout=10)
    assert r.status_code == 200, r.text
    outs = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert np.allclose(outs["OUTPUT0"], a + b) and np.allclose(outs["OUTPUT1"], a - b)
    # The same metadata as a worker's.
    mine = requests.get(f"{router.url}/v2/models/add_sub", timeout=5).json()
    theirs = requests.get(f"{workers[0].url}/v2/models/add_sub", timeout=5).json()
    assert mine["inputs"] == theirs["inputs"] and mine["outputs"] == theirs["outputs"]
    assert requests.get(f"{router.url}/v2", timeout=5).json()["name"] == "infd-router"
    # Binary HTTP and gRPC through the Python client.
    c = httpclient.InferenceServerClient(f"127.0.0.1:{router.http_port}")
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{router.grpc_port}")
    for mod, client in ((httpclient, c), (grpcclient, g)):
        x = [mod.InferInput("INPUT0", [1, 16], "FP32"), mod.InferInput("INPUT1", [1, 16], "FP32")]
        x[0].set_data_from_numpy(a[None])
        x[1].set_data_from_numpy(b[None])
        res = client.infer("add_sub", x)
        assert np.allclose(res.as_numpy("OUTPUT0"), (a + b)[None])
    # Both workers get work.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: requests.post(f"{router.url}/v2/models/add_sub/infer",
                                              json=body(a, b), timeout=10), range(200)))
    served = [requests.get(f"{w.url}/v2/models/add_sub/stats", timeout=5).json()
              ["model_stats"][0]["inference_count"] for w in workers]
    assert all(n > 10 for n in served), served
    # The router's own families: requests and latency per worker.
    m = router.metrics()
    sent = sum(m.get(f'infd_router_requests_total{{worker="{w}"}}', 0) for w in ("w1", "w2"))
    assert sent >= 200, m
    assert m['infd_router_worker_up{worker="w1"}'] == 1
    assert m['infd_router_request_duration_seconds_count{worker="w1"}'] == m[
        'infd_router_request_duration_seconds_bucket{worker="w1",le="+Inf"}']


def test_bad_input_gets_the_servers_errors(cluster):
    router, workers, _ = cluster
    wait_routable(router)
    bad = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                       "data": [1.0] * 16}]}
    mine = requests.post(f"{router.url}/v2/models/add_sub/infer", json=bad, timeout=10)
    theirs = requests.post(f"{workers[0].url}/v2/models/add_sub/infer", json=bad, timeout=10)
    assert mine.status_code == theirs.status_code == 400
    assert "INPUT1" in mine.json()["error"]
    r = requests.post(f"{router.url}/v2/models/nope/infer", json=bad, timeout=10)
    assert r.status_code in (400, 404)


def test_a_killed_worker_costs_no_request(cluster):
    router, workers, worker = cluster
    wait_routable(router)
    stop = threading.Event()
    failures, count = [], [0]
    a = np.arange(16, dtype=np.float32)

    def load():
        s = requests.Session()
        while not stop.is_set():
            try:
                r = s.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, a), timeout=2)
                if r.status_code != 200:
                    failures.append(r.text)
            except requests.RequestException as e:
                failures.append(str(e))
            count[0] += 1
            time.sleep(0.005)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    workers[0].kill()
    time.sleep(2.0)
    # A new worker joins and gets requests.
    w3 = worker("w3")
    deadline = time.time() + DEADLINE_S
    while requests.get(f"{w3.url}/v2/models/add_sub/stats", timeout=5).json()[
            "model_stats"][0]["inference_count"] == 0:
        assert time.time() < deadline, "the new worker got no request"
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    assert count[0] > 100
    assert failures == [], failures[:5]
    assert "missed 3 heartbeats" in router.log() or "left etcd" in router.log()
    m = router.metrics()
    assert (m.get('infd_router_heartbeats_missed_total{worker="w1"}', 0) >= 1
            or m["infd_router_evictions_total"] >= 1), m
