"""`infd router` (src/cluster/router.c) in front of `infd serve` workers, all
found through a real 3-member etcd cluster (Debian etcd-server), on
loopback, every process started and stopped by PID:

- two routers and three workers serving add_sub and BlazeFace: HTTP and
  gRPC through either router give the workers' answers and metadata;
- bad input gets a server's errors; rate limits and overload get 429 /
  RESOURCE_EXHAUSTED;
- repository load and unload through a router reach every worker;
- failures under steady load (about 200 requests/s, a 2 s deadline) cost no
  request: a SIGKILLed worker, a SIGSTOPped one (and its return after
  SIGCONT), a new worker, a rolling restart, the etcd leader killed;
- a fake worker that speaks garbage does not hurt a router;
- tensors of 64 KiB and more cross a router without a copy of their bytes
  (counted in a build with assertions: the ASan run of make test).
"""

import concurrent.futures
import json
import pathlib
import re
import shutil
import signal
import subprocess
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
LOAD_DEADLINE_S = 2  # each request of the steady load


@pytest.fixture
def make_cluster(serve, tmp_path, etcd_cluster, infd_bin):
    """make_cluster(n_workers, n_routers, router_args, worker_args, blazeface)
    -> Cluster. Workers are w1..wN; routers must exit 0 at teardown."""
    made = []

    def make(n_workers=2, n_routers=1, router_args=(), worker_args=(), blazeface=False,
             sequences=False):
        root = tmp_path / "repo"
        if not root.exists():
            repo.add_sub(root, dynamic_batching={"max_queue_delay_microseconds": 500})
            repo.identity(root, name="identity")
            repo.identity(root, name="identity_big", dims=(65536,))  # 256 KiB a row
            if sequences:
                from test_sequence import CONTROLS, accumulator
                accumulator(root / "acc" / "1" / "model.onnx", 8)
                repo.write_config(root / "acc", "max_batch_size: 8\nsequence_batching {\n"
                                  "  oldest { max_candidate_sequences: 8 "
                                  "max_queue_delay_microseconds: 1000 }\n" + CONTROLS + "}\n")
            if blazeface:
                src = ROOT / "models" / "blazeface"
                if not (src / "1" / "model.onnx").is_file():
                    pytest.fail("models/blazeface/1/model.onnx is missing: run scripts/setup.sh")
                shutil.copytree(src, root / "blazeface")
        c = Cluster(serve, root, etcd_cluster, infd_bin, tmp_path, worker_args)
        for i in range(n_workers):
            c.add_worker(f"w{i + 1}")
        for i in range(n_routers):
            c.routers.append(start_router(infd_bin, etcd_cluster, tmp_path, f"r{i + 1}",
                                          *router_args))
        made.append(c)
        return c

    yield make
    for c in made:
        for r in c.routers:
            rc = r.stop()
            assert rc == 0, f"infd router exited with {rc}:\n" + r.log()[-4000:]


class Cluster:
    def __init__(self, serve, root, etcd, infd_bin, tmp_path, worker_args):
        self.serve, self.root, self.etcd = serve, root, etcd
        self.worker_args = list(worker_args)
        self.workers, self.routers = {}, []

    def add_worker(self, wid):
        w = self.serve(self.root, "--cluster", self.etcd.endpoints, "--advertise",
                       f"tcp://127.0.0.1:{free_port()}", "--cluster-id", wid, *self.worker_args)
        self.workers[wid] = w
        return w

    def served(self, wid, model="add_sub"):
        r = requests.get(f"{self.workers[wid].url}/v2/models/{model}/stats", timeout=5)
        return r.json()["model_stats"][0]["inference_count"] if r.status_code == 200 else 0


def start_router(infd_bin, etcd, tmp_path, name, *args):
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    path = tmp_path / f"router-{name}.log"
    log = open(path, "wb")
    proc = subprocess.Popen(
        [str(infd_bin), "router", "--etcd", etcd.endpoints, "--host", "127.0.0.1",
         "--http-port", str(http), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics),
         *[str(a) for a in args]],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return RouterProc(proc, http, grpc_port, metrics, path)


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
            if requests.get(f"{router.url}/v2/models/{model}/ready",
                            timeout=2).status_code == 200:
                if model != "add_sub":
                    return
                a = np.ones(16, np.float32)
                if requests.post(f"{router.url}/v2/models/{model}/infer", json=body(a, a),
                                 timeout=5).status_code == 200:
                    return
        except requests.RequestException:
            pass
        assert router.proc.poll() is None, router.log()[-3000:]
        assert time.time() < deadline, "the router never served the model:\n" + router.log()[-3000:]
        time.sleep(0.05)


def wait_for(what, cond, deadline_s=DEADLINE_S, step=0.05):
    deadline = time.time() + deadline_s
    while not cond():
        assert time.time() < deadline, what
        time.sleep(step)


class SteadyLoad:
    """About 200 requests/s through the routers (round robin over them),
    each with a 2 s deadline; every answer checked."""

    def __init__(self, routers, threads=2, pause_s=0.008):
        self.routers, self.stop_ev = routers, threading.Event()
        self.failures, self.count = [], 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i, pause_s))
                        for i in range(threads)]

    def _run(self, i, pause_s):
        s = requests.Session()
        rng = np.random.default_rng(i)
        n = 0
        while not self.stop_ev.is_set():
            router = self.routers[(i + n) % len(self.routers)]
            n += 1
            a = rng.normal(size=16).astype(np.float32)
            b = rng.normal(size=16).astype(np.float32)
            try:
                r = s.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, b),
                           timeout=LOAD_DEADLINE_S)
                if r.status_code != 200:
                    self.failures.append(f"{r.status_code} {r.text}")
                else:
                    outs = {o["name"]: o["data"] for o in r.json()["outputs"]}
                    if not np.allclose(outs["OUTPUT0"], a + b, atol=1e-5):
                        self.failures.append("wrong answer")
            except requests.RequestException as e:
                self.failures.append(str(e))
            with self.lock:
                self.count += 1
            time.sleep(pause_s)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        for t in self.threads:
            t.join()


# ---------------------------------------------------------------------------


def test_two_routers_three_workers_http_and_grpc(make_cluster):
    c = make_cluster(n_workers=3, n_routers=2, blazeface=True)
    rng = np.random.default_rng(1)
    a = rng.normal(size=16).astype(np.float32)
    b = rng.normal(size=16).astype(np.float32)
    img = rng.uniform(-1, 1, size=(1, 128, 128, 3)).astype(np.float32)
    # The worker's own answer for BlazeFace, straight from it.
    w1 = httpclient.InferenceServerClient(f"127.0.0.1:{c.workers['w1'].http_port}")
    x = httpclient.InferInput("input:0", [1, 128, 128, 3], "FP32")
    x.set_data_from_numpy(img)
    want = w1.infer("blazeface", [x]).as_numpy("Identity:0")
    for router in c.routers:
        wait_routable(router)
        wait_routable(router, "blazeface")
        wait_routable(router, "identity_big")
        r = requests.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, b), timeout=10)
        assert r.status_code == 200, r.text
        outs = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert np.allclose(outs["OUTPUT0"], a + b) and np.allclose(outs["OUTPUT1"], a - b)
        # The same metadata as a worker's; the server metadata says router.
        mine = requests.get(f"{router.url}/v2/models/add_sub", timeout=5).json()
        theirs = requests.get(f"{c.workers['w2'].url}/v2/models/add_sub", timeout=5).json()
        assert mine["inputs"] == theirs["inputs"] and mine["outputs"] == theirs["outputs"]
        assert requests.get(f"{router.url}/v2", timeout=5).json()["name"] == "infd-router"
        # Binary HTTP and gRPC through the Python client, both models.
        h = httpclient.InferenceServerClient(f"127.0.0.1:{router.http_port}")
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{router.grpc_port}")
        for mod, client in ((httpclient, h), (grpcclient, g)):
            x = [mod.InferInput("INPUT0", [1, 16], "FP32"),
                 mod.InferInput("INPUT1", [1, 16], "FP32")]
            x[0].set_data_from_numpy(a[None])
            x[1].set_data_from_numpy(b[None])
            res = client.infer("add_sub", x)
            assert np.allclose(res.as_numpy("OUTPUT0"), (a + b)[None])
            assert np.allclose(res.as_numpy("OUTPUT1"), (a - b)[None])
            f = mod.InferInput("input:0", [1, 128, 128, 3], "FP32")
            f.set_data_from_numpy(img)
            got = client.infer("blazeface", [f]).as_numpy("Identity:0")
            assert got.shape == want.shape and np.allclose(got, want, atol=1e-4)
            # Tensors of 512 KiB: lent frames out, pieces in (HTTP).
            big = rng.normal(size=(2, 65536)).astype(np.float32)
            q = mod.InferInput("INPUT0", [2, 65536], "FP32")
            q.set_data_from_numpy(big)
            assert np.array_equal(client.infer("identity_big", [q]).as_numpy("OUTPUT0"), big)
    # Every worker gets work (the power of two choices spreads it).
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: requests.post(
            f"{c.routers[i % 2].url}/v2/models/add_sub/infer", json=body(a, b), timeout=10),
            range(300)))
    served = [c.served(w) for w in ("w1", "w2", "w3")]
    assert all(n > 10 for n in served), served
    # The router's families: requests and latency per worker.
    m = c.routers[0].metrics()
    sent = sum(m.get(f'infd_router_requests_total{{worker="{w}"}}', 0) for w in c.workers)
    assert sent >= 150, m
    assert m['infd_router_worker_up{worker="w1"}'] == 1
    assert 'infd_router_worker_queue_depth{worker="w2"}' in m
    assert m['infd_router_request_duration_seconds_count{worker="w1"}'] == m[
        'infd_router_request_duration_seconds_bucket{worker="w1",le="+Inf"}']


def test_bad_input_gets_the_servers_errors(make_cluster):
    c = make_cluster(n_workers=1)
    router, worker = c.routers[0], c.workers["w1"]
    wait_routable(router)
    one = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}]
    cases = [
        ("add_sub", {"inputs": one}),  # an input missing
        ("add_sub", {"inputs": one + [{"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
                                        "data": [1] * 16}]}),  # a wrong dtype
        ("add_sub", {"inputs": one + [{"name": "INPUT1", "datatype": "FP32", "shape": [1, 7],
                                        "data": [1.0] * 7}]}),  # a wrong shape
        ("add_sub", {"inputs": one + [{"name": "NOPE", "datatype": "FP32", "shape": [1, 16],
                                        "data": [1.0] * 16}]}),  # an unknown input
        ("nope", {"inputs": one}),  # an unknown model
    ]
    for model, req in cases:
        mine = requests.post(f"{router.url}/v2/models/{model}/infer", json=req, timeout=10)
        theirs = requests.post(f"{worker.url}/v2/models/{model}/infer", json=req, timeout=10)
        assert mine.status_code == theirs.status_code, (model, req, mine.text, theirs.text)
        assert mine.status_code in (400, 404)
        assert mine.json()["error"] == theirs.json()["error"], (mine.text, theirs.text)
    r = requests.post(f"{router.url}/v2/models/add_sub/infer", data=b"{not json", timeout=10)
    assert r.status_code == 400
    assert router.proc.poll() is None


def test_rate_limits_and_overload_answer_at_once(make_cluster):
    # Slow refills, so a slow machine (ASan) still drains the buckets.
    c = make_cluster(n_workers=1, router_args=(
        "--rate-limit", "model:identity=1:5", "--rate-limit", "client:gold=1000:1000",
        "--rate-limit", "client:*=2:10"))
    router = c.routers[0]
    wait_routable(router)
    wait_routable(router, "identity")
    x = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                     "data": [1.0, 2.0, 3.0, 4.0]}]}
    s = requests.Session()

    def most(burst, rate, t0):
        """What a bucket can let through since t0 (a full one then)."""
        return burst + rate * (time.time() - t0) + 1

    # The model's bucket: 5 at once, then 429 with the reason.
    t0 = time.time()
    codes = [s.post(f"{router.url}/v2/models/identity/infer", json=x,
                    headers={"infd-client": "gold"}, timeout=10) for _ in range(12)]
    ok = [r.status_code for r in codes].count(200)
    assert 1 <= ok <= most(5, 1, t0), [(r.status_code, r.text) for r in codes]
    refused = [r for r in codes if r.status_code == 429]
    assert refused, [(r.status_code, r.text) for r in codes]
    assert "model 'identity' is over its rate limit" in refused[0].json()["error"]
    # Each other client has a bucket of 10 of its own; "gold" has 1000.
    a = np.ones(16, np.float32)
    t0 = time.time()
    anon = [s.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, a), timeout=10)
            .status_code for _ in range(40)]
    assert anon.count(200) <= most(10, 2, t0) and 429 in anon, anon
    gold = [s.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, a),
                   headers={"infd-client": "gold"}, timeout=10).status_code for _ in range(40)]
    assert gold == [200] * 40
    # gRPC: RESOURCE_EXHAUSTED, keyed by the metadata of the same name.
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{router.grpc_port}")
    gi = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
          grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    for t in gi:
        t.set_data_from_numpy(a[None])
    codes = []
    for _ in range(30):
        try:
            g.infer("add_sub", gi, headers={"infd-client": "someone"})
            codes.append("OK")
        except grpcclient.InferenceServerException as e:
            codes.append(e.status())
    assert "OK" in codes and any("RESOURCE_EXHAUSTED" in str(x) for x in codes), codes
    m = router.metrics()
    assert m['infd_router_rejected_total{reason="rate_limit"}'] >= 10


def test_overload_is_refused_not_queued(make_cluster):
    c = make_cluster(n_workers=1, router_args=("--max-inflight", "2"))
    router = c.routers[0]
    wait_routable(router)
    a = np.ones(16, np.float32)

    def one(_):
        return requests.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, a),
                             timeout=10)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        rs = list(pool.map(one, range(400)))
    codes = [r.status_code for r in rs]
    assert set(codes) <= {200, 429}, set(codes)
    assert 200 in codes and 429 in codes
    assert "in flight already" in next(r for r in rs if r.status_code == 429).json()["error"]
    assert router.metrics()['infd_router_rejected_total{reason="overload"}'] >= 1


def test_repository_load_and_unload_reach_every_worker(make_cluster):
    c = make_cluster(n_workers=2, worker_args=("--model-control-mode", "explicit",
                                               "--load-model", "add_sub"))
    router = c.routers[0]
    wait_routable(router)
    for wid in c.workers:  # the request goes to the workers live at the time
        wait_for(f"{wid} is not live", lambda: router.metrics().get(
            f'infd_router_worker_up{{worker="{wid}"}}', 0) == 1)
    assert requests.get(f"{router.url}/v2/models/identity/ready", timeout=5).status_code != 200
    r = requests.post(f"{router.url}/v2/repository/models/identity/load", timeout=60)
    assert r.status_code == 200, r.text
    for w in c.workers.values():
        assert requests.get(f"{w.url}/v2/models/identity/ready", timeout=5).status_code == 200
    x = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                     "data": [1.0, 2.0, 3.0, 4.0]}]}
    r = requests.post(f"{router.url}/v2/models/identity/infer", json=x, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0]
    # Unload: gone from the workers and from the router, and it stays gone.
    r = requests.post(f"{router.url}/v2/repository/models/identity/unload", timeout=60)
    assert r.status_code == 200, r.text
    for w in c.workers.values():
        assert requests.get(f"{w.url}/v2/models/identity/ready", timeout=5).status_code != 200
    assert requests.get(f"{router.url}/v2/models/identity/ready", timeout=5).status_code != 200
    time.sleep(1.5)
    assert requests.get(f"{router.url}/v2/models/identity/ready", timeout=5).status_code != 200
    # A model no worker has: the workers' error. The answers come fast, and
    # one that came while the router was still sending to the other worker
    # used to be dropped (the caller then timed out): ask many times.
    with requests.Session() as s:
        for _ in range(50):
            r = s.post(f"{router.url}/v2/repository/models/nope/load", timeout=10)
            assert r.status_code in (400, 404), r.text
            assert "nope" in r.json()["error"]
    # Names from the network never become paths: refused before any worker is asked.
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{router.grpc_port}")
    for bad in ("../escape", ".hidden", "a/b"):
        with pytest.raises(grpcclient.InferenceServerException) as e:
            g.load_model(bad)
        assert "not a model name" in str(e.value), str(e.value)
    assert not (pathlib.Path("/tmp") / "escape").exists()
    # add_sub still routes.
    wait_routable(router)


def test_a_killed_worker_costs_no_request(make_cluster, etcd_cluster):
    c = make_cluster(n_workers=3, n_routers=2)
    for r in c.routers:
        wait_routable(r)
    with SteadyLoad(c.routers) as load:
        time.sleep(1.0)
        c.workers["w1"].kill()
        t_kill = time.time()
        # Both routers stop choosing it within 1 s (3 heartbeats of 250 ms,
        # seen by a 50 ms tick; the poll adds its own step).
        for router in c.routers:
            wait_for("the router still takes w1 for live", lambda: router.metrics().get(
                'infd_router_worker_up{worker="w1"}', 0) == 0, deadline_s=5, step=0.02)
        took = time.time() - t_kill
        # Its key is gone within the lease's TTL (5 s) + 1 s.
        wait_for("w1's key outlived its lease",
                 lambda: etcd_cluster.get("/infd/workers/w1") is None, deadline_s=10)
        gone = time.time() - t_kill
        time.sleep(0.5)
    assert load.count > 300
    assert load.failures == [], load.failures[:5]
    assert took <= 1.3, f"a router took {took:.2f} s to drop the killed worker"
    assert gone <= 6.5, f"the key went after {gone:.2f} s"
    m = c.routers[0].metrics()
    assert (m.get('infd_router_heartbeats_missed_total{worker="w1"}', 0) >= 1
            or m["infd_router_evictions_total"] >= 1), m


def test_a_stopped_worker_is_dropped_then_rejoins(make_cluster):
    c = make_cluster(n_workers=2)
    router = c.routers[0]
    wait_routable(router)
    w1 = c.workers["w1"]
    with SteadyLoad([router]) as load:
        time.sleep(0.5)
        w1.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for("w1 was not dropped", lambda: router.metrics().get(
                'infd_router_worker_up{worker="w1"}', 1) == 0, deadline_s=10)
            time.sleep(0.5)
        finally:
            w1.proc.send_signal(signal.SIGCONT)
        before = c.served("w1")
        wait_for("w1 did not rejoin", lambda: router.metrics().get(
            'infd_router_worker_up{worker="w1"}', 0) == 1, deadline_s=10)
        wait_for("w1 got no request after SIGCONT", lambda: c.served("w1") > before + 5)
    assert load.failures == [], load.failures[:5]
    assert "missed 3 heartbeats" in router.log()


def test_a_new_worker_is_routable_within_a_second(make_cluster, etcd_cluster):
    c = make_cluster(n_workers=1)
    router = c.routers[0]
    wait_routable(router)
    with SteadyLoad([router]) as load:
        c.add_worker("w2")  # returns when w2 is ready; it registers at once
        wait_for("w2 never registered",
                 lambda: etcd_cluster.get("/infd/workers/w2") is not None, step=0.01)
        t_key = time.time()
        wait_for("the router never sent w2 a request", lambda: router.metrics().get(
            'infd_router_requests_total{worker="w2"}', 0) > 0, step=0.02)
        took = time.time() - t_key
    assert load.failures == [], load.failures[:5]
    assert took <= 1.0, f"w2 was routable {took:.2f} s after its key appeared"


def test_a_rolling_restart_costs_no_request(make_cluster):
    c = make_cluster(n_workers=3, n_routers=2)
    for r in c.routers:
        wait_routable(r)
    with SteadyLoad(c.routers) as load:
        for wid in ("w1", "w2", "w3"):
            time.sleep(0.5)
            assert c.workers[wid].stop() == 0
            c.add_worker(wid)
            for r in c.routers:
                wait_for(f"{wid} did not come back", lambda: r.metrics().get(
                    f'infd_router_worker_up{{worker="{wid}"}}', 0) == 1)
        time.sleep(0.5)
    assert load.count > 200
    assert load.failures == [], load.failures[:5]


def test_losing_the_etcd_leader_stops_nothing(make_cluster, etcd_cluster):
    c = make_cluster(n_workers=2)
    router = c.routers[0]
    wait_routable(router)
    procs = [w.proc for w in c.workers.values()] + [router.proc]
    pids = [p.pid for p in procs]
    with SteadyLoad([router]) as load:
        time.sleep(0.5)
        leader = etcd_cluster.leader()
        assert leader is not None
        leader.stop(signal.SIGKILL)
        wait_for("no new etcd leader", lambda: etcd_cluster.leader() is not None)
        time.sleep(2.0)
        # The view still follows etcd: a new worker is found.
        c.add_worker("w3")
        wait_for("w3 was not found after the leader changed", lambda: router.metrics().get(
            'infd_router_requests_total{worker="w3"}', 0) > 0)
    assert load.failures == [], load.failures[:5]
    assert all(p.poll() is None for p in procs) and [p.pid for p in procs] == pids
    # The workers' keys are (still, or again) there under live leases.
    for wid in ("w1", "w2", "w3"):
        assert etcd_cluster.get(f"/infd/workers/{wid}") is not None


def test_a_fake_worker_that_speaks_garbage_does_not_hurt(make_cluster, etcd_cluster):
    zmq = pytest.importorskip("zmq")  # python3-zmq, installed by scripts/setup.sh
    c = make_cluster(n_workers=1)
    router = c.routers[0]
    wait_routable(router)
    # A ROUTER socket posing as a worker: it answers every message with junk,
    # a header from the future, frames that match no call and a RESULT for a
    # call it never got.
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    import json
    real = etcd_cluster.get("/infd/workers/w1")
    fake = dict(real, id="fake", address=f"tcp://127.0.0.1:{port}")
    etcd_cluster.put("/infd/workers/fake", json.dumps(fake))
    etcd_cluster.put("/infd/workers/junk", "{not json")
    stop = threading.Event()

    def babble():
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while not stop.is_set():
            if not poller.poll(50):
                continue
            frames = sock.recv_multipart()
            ident = frames[0]
            for junk in ([b"\xff\xfe garbage"], [b"\x08\x07\x10\x03"], [b""],
                         [b"\x08\x01\x10\x02\x18\x99\x01", b"stray frame"],
                         [b"\x08\x01\x10\x03\x50\x05" + b"\x00" * 3] * 2):
                try:
                    sock.send_multipart([ident] + junk, zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass

    t = threading.Thread(target=babble)
    t.start()
    try:
        a = np.ones(16, np.float32)
        ok = 0
        deadline = time.time() + 5
        while time.time() < deadline:
            r = requests.post(f"{router.url}/v2/models/add_sub/infer", json=body(a, a),
                              timeout=LOAD_DEADLINE_S + 3)
            ok += r.status_code == 200
            assert r.status_code in (200, 503), r.text
        assert ok > 20
        assert router.proc.poll() is None
        assert "not a worker's value" in router.log()
    finally:
        stop.set()
        t.join()
        sock.close()
        ctx.term()


def test_sequences_stay_on_one_worker(make_cluster):
    c = make_cluster(n_workers=2, sequences=True)
    router = c.routers[0]
    wait_routable(router, "acc")
    for wid in c.workers:
        wait_for(f"{wid} is not live", lambda: router.metrics().get(
            f'infd_router_worker_up{{worker="{wid}"}}', 0) == 1)

    def step(seq, values, start=False, end=False):
        body = {"parameters": {"sequence_id": seq, "sequence_start": start, "sequence_end": end},
                "inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 4],
                            "data": [float(v) for v in values]}]}
        return requests.post(f"{router.url}/v2/models/acc/infer", json=body, timeout=10)

    # Ten sequences interleaved, numeric and string ids: each accumulates
    # its own inputs, so every step of one went to the worker with its state.
    ids = list(range(101, 106)) + [f"s-{i}" for i in range(5)]
    sums = {i: np.zeros(4) for i in ids}
    for k in range(6):
        for n, i in enumerate(ids):
            v = np.arange(4) + n + k
            r = step(i, v, start=k == 0, end=k == 5)
            assert r.status_code == 200, r.text
            sums[i] += v
            got = {o["name"]: o["data"] for o in r.json()["outputs"]}["OUTPUT"]
            assert np.allclose(got, sums[i]), (i, k, got, sums[i])
    # Both workers held some of them.
    held = [c.served(w, "acc") for w in ("w1", "w2")]
    assert all(n > 0 for n in held), held
    # A worker that dies takes its sequences' state: their next step is a
    # clear 503, never an answer from a fresh state elsewhere.
    seq = 777
    assert step(seq, [1, 1, 1, 1], start=True).status_code == 200
    before = {w: c.served(w, "acc") for w in c.workers}
    assert step(seq, [1, 1, 1, 1]).status_code == 200
    holder = next(w for w in c.workers if c.served(w, "acc") > before[w])
    c.workers[holder].kill()
    wait_for("the dead worker is still routed to", lambda: router.metrics().get(
        f'infd_router_worker_up{{worker="{holder}"}}', 0) == 0)
    r = step(seq, [1, 1, 1, 1])
    assert r.status_code == 503 and "sequence 777" in r.json()["error"], r.text
    # Starting it again works, on the worker that is left.
    r = step(seq, [2, 2, 2, 2], start=True)
    assert r.status_code == 200, r.text
    assert {o["name"]: o["data"] for o in r.json()["outputs"]}["OUTPUT"] == [2, 2, 2, 2]


def test_large_tensors_cross_the_router_without_a_copy(make_cluster):
    """HTTP binary requests with 256 KiB rows: the router sends the body's
    pieces as they lie and lends the worker's output frames to the reply. A
    build with assertions counts every payload byte copied and the router
    logs the count at exit: none of 64 KiB or more (the warm-up's small
    tensors are copied). A release build has no counter."""
    c = make_cluster(n_workers=1)
    router = c.routers[0]
    wait_routable(router)  # the worker is live
    wait_routable(router, "identity_big")
    rng = np.random.default_rng(7)
    for rows in (1, 2, 1, 3) * 4 + (8,):
        x = rng.standard_normal((rows, 65536)).astype(np.float32)
        head = json.dumps({
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [rows, 65536],
                        "parameters": {"binary_data_size": x.nbytes}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
        r = requests.post(f"{router.url}/v2/models/identity_big/infer", data=head + x.tobytes(),
                          headers={"Inference-Header-Content-Length": str(len(head)),
                                   "Content-Type": "application/octet-stream"}, timeout=30)
        assert r.status_code == 200, r.text[:500]
        n = int(r.headers["Inference-Header-Content-Length"])
        meta = json.loads(r.content[:n])
        assert meta["outputs"][0]["shape"] == [rows, 65536]
        got = np.frombuffer(r.content[n:], dtype=np.float32).reshape(rows, 65536)
        np.testing.assert_array_equal(got, x)
    assert router.stop() == 0
    m = re.search(r"payload bytes copied: \d+ \((\d+) in copies of 65536 bytes or more\)",
                  router.log())
    if m is None:
        pytest.skip("a release build counts no copies (the ASan run of make test does)")
    assert int(m.group(1)) == 0, router.log()[-3000:]
