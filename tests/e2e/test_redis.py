"""The Redis job queue (`infd serve --redis`, src/frontends/redisq): a real
redis-server (Debian's) started here on a free loopback port, jobs submitted
and results read with redis-py (Debian python3-redis), workers killed with
SIGKILL, Redis itself restarted. docs/REDIS.md describes the job format.
"""

import json
import os
import pathlib
import socket
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
import redis
from onnx import TensorProto, helper

import repo
from redis_server import redis_server  # noqa: F401  (the fixture)

DEADLINE_S = 120  # bounds how long a broken queue can hang a test, never a goal


@pytest.fixture
def add_sub_repo(tmp_path):
    root = tmp_path / "repo"
    repo.add_sub(root, dynamic_batching={"max_queue_delay_microseconds": 1000})
    return root


def add_sub_request(a, b, binary_outputs=False):
    body = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a.tolist()},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": b.tolist()}]}
    if binary_outputs:
        body["parameters"] = {"binary_data_output": True}
    return json.dumps(body)


def add_sub_binary_job(job_id, a, b):
    header = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
         "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16],
         "parameters": {"binary_data_size": 64}}],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": {"binary_data": True}}]}
    return {"id": job_id, "header": json.dumps(header),
            "binary": a.astype(np.float32).tobytes() + b.astype(np.float32).tobytes()}


def split_result(raw):
    """The result's JSON and, with binary outputs, the bytes after its newline."""
    head, _, tail = raw.partition(b"\n")
    return json.loads(head), tail


def wait_results(client, ids, deadline_s=DEADLINE_S, what="results"):
    """{id: raw value} once every results:{id} exists."""
    deadline = time.time() + deadline_s
    pending = list(ids)
    while pending:
        values = client.mget([f"results:{i}" for i in pending])
        pending = [i for i, v in zip(pending, values) if v is None]
        if pending:
            assert time.time() < deadline, f"{len(pending)} of {len(ids)} {what} missing"
            time.sleep(0.05)
    found = {}
    for k in range(0, len(ids), 1000):
        chunk = ids[k:k + 1000]
        found.update(zip(chunk, client.mget([f"results:{i}" for i in chunk])))
    return found


def wait_all_acked(client, stream, deadline_s=DEADLINE_S):
    """Every entry of the stream acknowledged. A job's XACK follows its SET
    in one pipeline, but another client can read between the two, so a
    result may be visible a moment before its entry leaves the pending
    list."""
    deadline = time.time() + deadline_s
    while (n := client.xpending(stream, "infd")["pending"]) != 0:
        assert time.time() < deadline, f"{n} entries of {stream} never acknowledged"
        time.sleep(0.02)


def wait_metrics(srv, want, deadline_s=DEADLINE_S):
    """The metrics once every family in `want` has its value: infd counts a
    job when Redis answers its XACK, a moment after the result shows."""
    deadline = time.time() + deadline_s
    while True:
        m = metrics(srv)
        if all(m.get(k) == v for k, v in want.items()):
            return m
        assert time.time() < deadline, {k: m.get(k) for k in want}
        time.sleep(0.02)


def metrics(srv):
    import requests
    text = requests.get(srv.metrics_url, timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith("infd_redis"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def serve_redis(serve, root, redis_server, *extra, **kw):
    return serve(root, "--redis", redis_server.url, *extra, **kw)


# ---------------------------------------------------------------------------


def test_10000_jobs_all_results_present_and_correct(serve, add_sub_repo, redis_server):
    srv = serve_redis(serve, add_sub_repo, redis_server)
    c = redis_server.client()
    rng = np.random.default_rng(1)
    n = 10000
    inputs = {}
    pipe = c.pipeline(transaction=False)
    for k in range(n):
        a = rng.integers(-100, 100, 16).astype(np.float32)
        b = rng.integers(-100, 100, 16).astype(np.float32)
        job_id = f"j{k}"
        inputs[job_id] = (a, b)
        if k % 10 == 0:
            pipe.xadd("infd:jobs:add_sub", add_sub_binary_job(job_id, a, b))
        else:
            pipe.xadd("infd:jobs:add_sub", {"id": job_id, "request": add_sub_request(a, b)})
        if k % 1000 == 999:
            pipe.execute()
    pipe.execute()
    results = wait_results(c, list(inputs))
    for job_id, raw in results.items():
        a, b = inputs[job_id]
        res, tail = split_result(raw)
        assert res["status"] == "ok", res
        assert res["id"] == job_id and res["model"] == "add_sub" and res["model_version"] == "1"
        assert res["submitted_at"] <= res["started_at"] <= res["finished_at"]
        outs = {o["name"]: o for o in res["outputs"]}
        np.testing.assert_array_equal(np.array(outs["OUTPUT0"]["data"], np.float32), a + b)
        if "data" in outs["OUTPUT1"]:
            np.testing.assert_array_equal(np.array(outs["OUTPUT1"]["data"], np.float32), a - b)
        else:
            assert outs["OUTPUT1"]["parameters"]["binary_data_size"] == 64
            np.testing.assert_array_equal(np.frombuffer(tail, np.float32), a - b)
    # Every job acknowledged; nothing left pending or dead.
    wait_all_acked(c, "infd:jobs:add_sub")
    assert c.xlen("infd:dead:add_sub") == 0
    wait_metrics(srv, {'infd_redis_jobs_completed_total{model="add_sub"}': n,
                       "infd_redis_connected": 1})
    # Jobs batched with each other: fewer engine runs than jobs.
    import requests
    stats = requests.get(srv.url + "/v2/models/add_sub/stats", timeout=10).json()
    st = stats["model_stats"][0]
    assert st["inference_count"] == n
    assert st["execution_count"] < n


def test_consumer_names_and_two_workers_share_the_stream(serve, add_sub_repo, redis_server):
    a = serve_redis(serve, add_sub_repo, redis_server)
    b = serve_redis(serve, add_sub_repo, redis_server)
    c = redis_server.client()
    rng = np.random.default_rng(2)
    ids = []
    pipe = c.pipeline(transaction=False)
    for k in range(2000):
        x = rng.random(16).astype(np.float32)
        ids.append(f"s{k}")
        pipe.xadd("infd:jobs:add_sub", {"id": ids[-1], "request": add_sub_request(x, x)})
    pipe.execute()
    results = wait_results(c, ids)
    workers = {split_result(v)[0]["worker"] for v in results.values()}
    host = socket.gethostname()
    consumers = {x["name"].decode() for x in c.xinfo_consumers("infd:jobs:add_sub", "infd")}
    assert {f"{host}-{a.proc.pid}-0", f"{host}-{b.proc.pid}-0"} <= consumers
    assert workers <= consumers


def test_publish_lets_a_client_wait(serve, add_sub_repo, redis_server):
    serve_redis(serve, add_sub_repo, redis_server, "--redis-publish")
    c = redis_server.client()
    sub = c.pubsub()
    sub.subscribe("infd:done:add_sub")
    assert sub.get_message(timeout=10)["type"] == "subscribe"
    x = np.arange(16, dtype=np.float32)
    c.xadd("infd:jobs:add_sub", {"id": "p1", "request": add_sub_request(x, x)})
    deadline = time.time() + DEADLINE_S
    msg = None
    while msg is None or msg["type"] != "message":
        assert time.time() < deadline
        msg = sub.get_message(timeout=1)
    assert msg["data"] == b"p1"
    res, _ = split_result(c.get("results:p1"))  # written before the PUBLISH
    assert res["status"] == "ok"


def test_malformed_and_oversized_jobs_get_clear_error_results(serve, add_sub_repo,
                                                              redis_server):
    srv = serve_redis(serve, add_sub_repo, redis_server, "--redis-max-job-bytes", "100000")
    c = redis_server.client()
    x = np.ones(16, np.float32)
    good = add_sub_request(x, x)
    big = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}],
        "padding": "x" * 200000})
    cases = {
        "bad-json": ({"request": "{\"inputs\": ["}, "malformed JSON"),
        "no-request": ({"something": "else"}, "no 'request' field"),
        "both": ({"request": good, "header": good}, "both 'request' and 'header'"),
        "bad-input": ({"request": good.replace("INPUT1", "NOPE")}, "NOPE"),
        "bad-shape": ({"request": json.dumps({"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 8], "data": [1.0] * 8},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 8], "data": [1.0] * 8}]})},
            "INPUT0"),
        "too-big-batch": ({"request": json.dumps({"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [9, 16], "data": [1.0] * 144},
            {"name": "INPUT1", "datatype": "FP32", "shape": [9, 16], "data": [1.0] * 144}]})},
            "batch"),
        "binary-short": ({"header": json.dumps({"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
             "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16],
             "parameters": {"binary_data_size": 64}}]}), "binary": b"\0" * 100},
            "runs past the 'binary' field"),
        "binary-no-field": ({"request": json.dumps({"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
             "parameters": {"binary_data_size": 64}}]})}, "no 'binary' field"),
        "bad-version": ({"request": good, "version": "x1"}, "version"),
        "missing-version": ({"request": good, "version": "7"}, "7"),
        "wrong-model": ({"request": good, "model": "other"}, "not this stream's"),
        "oversized": ({"request": big}, "more than --redis-max-job-bytes 100000"),
    }
    for job_id, (fields, _) in cases.items():
        c.xadd("infd:jobs:add_sub", {"id": job_id, **fields})
    # A job without a usable id cannot have a result: it goes to the dead
    # letters at once, with the reason.
    c.xadd("infd:jobs:add_sub", {"id": "has space", "request": good})
    c.xadd("infd:jobs:add_sub", {"request": good})
    c.xadd("infd:jobs:add_sub", {"id": "after", "request": good})
    results = wait_results(c, list(cases) + ["after"])
    for job_id, (_, expect) in cases.items():
        res, _ = split_result(results[job_id])
        assert res["status"] == "error", (job_id, res)
        assert expect in res["error"], (job_id, res["error"])
        assert res["id"] == job_id
    assert split_result(results["after"])[0]["status"] == "ok"  # still serving
    dead = c.xrange("infd:dead:add_sub")
    assert len(dead) == 2
    errors = sorted(e[1][b"infd_error"].decode() for e in dead)
    assert "no 'id' field" in errors[0] or "no 'id' field" in errors[1]
    assert any("'id' must be" in e for e in errors)
    # Malformed jobs are acknowledged, never retried.
    wait_all_acked(c, "infd:jobs:add_sub")
    wait_metrics(srv, {'infd_redis_jobs_failed_total{model="add_sub"}': len(cases),
                       'infd_redis_jobs_dead_lettered_total{model="add_sub"}': 2})


def test_bad_redis_options_are_named(infd_bin, add_sub_repo):
    for args, expect in [(["--redis", "http://x"], "does not start with redis://"),
                         (["--redis", "redis://h:99999"], "port"),
                         (["--redis", "redis://127.0.0.1:1", "--redis-prefix", "a b"],
                          "prefix and group")]:
        r = subprocess.run([str(infd_bin), "serve", "--model-repository", str(add_sub_repo),
                            "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1",
                            "--raw-socket-dir", "off", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and expect in r.stderr, (args, r.stderr)


def test_redis_with_a_password_and_an_acl_user(serve, add_sub_repo, redis_server):
    """A Redis that requires AUTH: the default user's password in the URL,
    an ACL user with a %-encoded password, and the password from
    INFD_REDIS_PASSWORD (kept out of the process list). A wrong password is
    refused by Redis: the server says so without the password, keeps
    serving HTTP, and takes no job."""
    from serving import env_with
    admin = redis_server.client()
    # The ACL user may run only what docs/REDIS.md lists, on the prefix's keys.
    admin.execute_command("ACL", "SETUSER", "worker", "on", ">w@rker pass", "~infd:*",
                          "~results:*", "&infd:done:*", "+@stream", "+hset", "+hget", "+hdel",
                          "+set", "+publish", "+client|id", "+client|unblock", "+select")
    admin.config_set("requirepass", "s3cret-default")
    c = redis.Redis(host="127.0.0.1", port=redis_server.port, password="s3cret-default",
                    socket_timeout=10)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=10).xlen("x")
    hp = f"127.0.0.1:{redis_server.port}"
    wrong = serve(add_sub_repo, "--redis", f"redis://:not-the-password@{hp}")
    x = np.arange(16, dtype=np.float32)
    for name, args, env in [
            ("default", ["--redis", f"redis://:s3cret-default@{hp}"], None),
            ("acl", ["--redis", f"redis://worker:w%40rker%20pass@{hp}/0", "--redis-publish"],
             None),
            ("env", ["--redis", f"redis://{hp}"], env_with(INFD_REDIS_PASSWORD="s3cret-default")),
            ("acl-env", ["--redis", f"redis://worker@{hp}"],
             env_with(INFD_REDIS_PASSWORD="w@rker pass"))]:
        srv = serve(add_sub_repo, *args, env=env)
        c.xadd("infd:jobs:add_sub", {"id": name, "request": add_sub_request(x, x)})
        res, _ = split_result(wait_results(c, [name])[name])
        assert res["status"] == "ok", (name, res)
        wait_metrics(srv, {"infd_redis_connected": 1})
        srv.stop()
        assert "NOPERM" not in srv.log() and "rror" not in srv.log(), srv.log_tail()
    # Every job went to the servers that could log in; the wrong one took none.
    wait_all_acked(c, "infd:jobs:add_sub")
    deadline = time.time() + DEADLINE_S
    while "AUTH refused" not in wrong.log():
        assert wrong.proc.poll() is None and time.time() < deadline, wrong.log_tail()
        time.sleep(0.05)
    log = wrong.log()
    assert "WRONGPASS" in log and "not-the-password" not in log, log[-2000:]
    m = metrics(wrong)
    assert m["infd_redis_connected"] == 0
    assert m.get('infd_redis_jobs_completed_total{model="add_sub"}', 0) == 0
    import requests
    assert requests.get(wrong.url + "/v2/health/ready", timeout=10).status_code == 200


def test_redis_url_errors_never_show_the_password(infd_bin, add_sub_repo):
    for url, expect in [("redis://u:topsecret@h:99999", "port"),
                        ("http://u:topsecret@127.0.0.1", "does not start with redis://"),
                        ("redis://u:topsecret@[::1", "no ']'"),
                        ("redis://u:top%zzsecret@127.0.0.1", "%-encoded"),
                        ("redis://:topsecret@", "no host")]:
        r = subprocess.run([str(infd_bin), "serve", "--model-repository", str(add_sub_repo),
                            "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1",
                            "--raw-socket-dir", "off", "--redis", url],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and expect in r.stderr, (url, r.stderr)
        assert "topsecret" not in r.stderr and "***" in r.stderr, (url, r.stderr)
    r = subprocess.run([str(infd_bin), "serve", "--model-repository", str(add_sub_repo),
                        "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1",
                        "--raw-socket-dir", "off", "--redis", "redis://worker@127.0.0.1"],
                       capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "INFD_REDIS_PASSWORD"})
    assert r.returncode != 0 and "names user 'worker' but no password" in r.stderr, r.stderr


def slow_model(root):
    """X [1, 1] -> Expand to 2048 x 2048 -> six 2048^3 MatMuls -> mean: about
    100 GFLOP, a second or more on two cores, so a kill lands mid-job."""
    n = 2048
    w = np.full((n, n), 1.0 / n, np.float32)
    nodes = [helper.make_node("Reshape", ["X", "one"], ["x1"]),
             helper.make_node("Expand", ["x1", "big"], ["m0"])]
    for i in range(6):
        nodes.append(helper.make_node("MatMul", [f"m{i}", "W"], [f"m{i + 1}"]))
    nodes.append(helper.make_node("ReduceMean", ["m6"], ["r"], keepdims=0))
    nodes.append(helper.make_node("Reshape", ["r", "out_shape"], ["Y"]))
    graph = helper.make_graph(
        nodes, "slow",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1])],
        initializer=[helper.make_tensor("W", TensorProto.FLOAT, [n, n], w.tobytes(), raw=True),
                     helper.make_tensor("one", TensorProto.INT64, [2], [1, 1]),
                     helper.make_tensor("big", TensorProto.INT64, [2], [n, n]),
                     helper.make_tensor("out_shape", TensorProto.INT64, [2], [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    d = pathlib.Path(root) / "slow"
    (d / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text(
        'name: "slow"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n')


def tcp_ports(pid, remote_port):
    """The local ports of a process's TCP connections to remote_port (/proc)."""
    inodes = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[9] in inodes and int(f[2].rsplit(":", 1)[1], 16) == remote_port:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def wait_for(cond, what, deadline_s=DEADLINE_S):
    deadline = time.time() + deadline_s
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def wait_pending_on(c, stream, consumer, deadline_s=DEADLINE_S):
    deadline = time.time() + deadline_s
    while True:
        try:
            rows = c.xpending_range(stream, "infd", "-", "+", 10, consumername=consumer)
        except redis.exceptions.ResponseError:  # NOGROUP: the worker has not made it yet
            rows = []
        if rows:
            return rows
        assert time.time() < deadline, f"no job pending on {consumer}"
        time.sleep(0.02)


def test_poison_job_reaches_the_dead_letters_after_3_deliveries(serve, tmp_path, redis_server):
    """A job that takes its worker down every time: killed three times while
    running it, the fourth worker moves it to infd:dead:slow instead of
    running it again."""
    root = tmp_path / "repo"
    slow_model(root)
    c = redis_server.client()
    c.xadd("infd:jobs:slow", {"id": "poison", "request": json.dumps(
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]})})
    host = socket.gethostname()
    for delivery in (1, 2, 3):
        srv = serve_redis(serve, root, redis_server, "--redis-claim-idle-ms", "300")
        rows = wait_pending_on(c, "infd:jobs:slow", f"{host}-{srv.proc.pid}-0")
        assert rows[0]["times_delivered"] == delivery
        srv.kill()
    srv = serve_redis(serve, root, redis_server, "--redis-claim-idle-ms", "300")
    res, _ = split_result(wait_results(c, ["poison"])["poison"])
    assert res["status"] == "error" and res["code"] == "DEAD_LETTERED"
    assert "delivered 4 times" in res["error"]
    dead = c.xrange("infd:dead:slow")
    assert len(dead) == 1
    fields = dead[0][1]
    assert fields[b"id"] == b"poison" and fields[b"infd_deliveries"] == b"4"
    assert b"request" in fields  # the job itself, for a look later
    wait_all_acked(c, "infd:jobs:slow")
    wait_metrics(srv, {'infd_redis_jobs_dead_lettered_total{model="slow"}': 1})


class Producer(threading.Thread):
    """Submits `n` add_sub jobs at a steady pace, riding out Redis restarts;
    with until_stopped, goes on past n until `stopped` is set (so that jobs still flow
    however long a loaded machine takes over what the test does meanwhile)."""

    def __init__(self, port, n, prefix, rate=2000, until_stopped=False):
        super().__init__(daemon=True)
        self.port, self.n, self.prefix, self.rate = port, n, prefix, rate
        self.stopped = threading.Event()
        if not until_stopped:
            self.stopped.set()
        self.ids = []
        self.inputs = {}
        self.error = None

    def run(self):
        try:
            c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
            rng = np.random.default_rng(3)
            k = 0
            t0 = time.time()
            while k < self.n or not self.stopped.is_set():
                job_id = f"{self.prefix}{k}"
                a = rng.integers(-50, 50, 16).astype(np.float32)
                b = rng.integers(-50, 50, 16).astype(np.float32)
                while True:
                    try:
                        c.xadd("infd:jobs:add_sub",
                               {"id": job_id, "request": add_sub_request(a, b)})
                        break
                    except redis.exceptions.ConnectionError:
                        # Redis restarting: the same job again (the lost reply's
                        # XADD may have landed too: a duplicate of the same data).
                        time.sleep(0.05)
                self.ids.append(job_id)
                self.inputs[job_id] = (a, b)
                k += 1
                ahead = k / self.rate - (time.time() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        except Exception as e:  # reported by the test
            self.error = e


def check_add_sub(results, inputs):
    for job_id, raw in results.items():
        res, _ = split_result(raw)
        assert res["status"] == "ok", res
        a, b = inputs[job_id]
        outs = {o["name"]: o for o in res["outputs"]}
        np.testing.assert_array_equal(np.array(outs["OUTPUT0"]["data"], np.float32), a + b)


def test_worker_killed_five_times_loses_no_job(serve, add_sub_repo, redis_server):
    # Claims wait 2 s: long enough that a live worker stalled by a loaded
    # machine keeps its jobs (a claim from it would be a rerun the kills did
    # not cause), short enough to keep the test quick.
    args = ("--redis-claim-idle-ms", "2000")
    steady = serve_redis(serve, add_sub_repo, redis_server, *args)
    c = redis_server.client()
    producer = Producer(redis_server.port, 8000, "k", until_stopped=True)
    producer.start()
    host = socket.gethostname()
    in_flight_at_kills = 0
    seen = {}
    for kill in range(5):
        victim = serve_redis(serve, add_sub_repo, redis_server, *args)
        consumer = f"{host}-{victim.proc.pid}-0"
        wait_pending_on(c, "infd:jobs:add_sub", consumer)
        ports = tcp_ports(victim.proc.pid, redis_server.port)
        victim.kill()
        # Until Redis has seen the victim's sockets close, a read it had
        # blocked can still be answered, adding to what the dead consumer holds.
        wait_for(lambda: not any(int(x["addr"].rsplit(":", 1)[1]) in ports
                                 for x in c.client_list()),
                 "Redis to see the victim's connections close")
        # What the dead consumer held when it died: the most that can run twice.
        in_flight_at_kills += len(c.xpending_range("infd:jobs:add_sub", "infd", "-", "+",
                                                   100000, consumername=consumer))
        # Results written so far, to check later that none is overwritten.
        ids = list(producer.ids)
        for i, v in zip(ids, c.mget([f"results:{i}" for i in ids]) if ids else []):
            if v is not None:
                seen[i] = v
    producer.stopped.set()
    producer.join(timeout=DEADLINE_S)
    assert producer.error is None, producer.error
    assert len(producer.ids) >= 8000
    results = wait_results(c, producer.ids)
    assert len(results) == len(producer.ids)
    check_add_sub(results, producer.inputs)
    for i, v in seen.items():
        assert results[i] == v, f"result of {i} was overwritten"
    reruns = sum(split_result(v)[0]["deliveries"] > 1 for v in results.values())
    assert reruns <= in_flight_at_kills, (reruns, in_flight_at_kills)
    wait_all_acked(c, "infd:jobs:add_sub")
    assert c.xlen("infd:dead:add_sub") == 0
    assert metrics(steady)['infd_redis_jobs_claimed_total{model="add_sub"}'] > 0


def test_redis_restarted_mid_load_the_run_completes(serve, add_sub_repo, redis_server):
    srv = serve_redis(serve, add_sub_repo, redis_server)
    c = redis_server.client()
    producer = Producer(redis_server.port, 6000, "r")
    producer.start()
    while len(producer.ids) < 2000:
        assert producer.is_alive()
        time.sleep(0.01)
    redis_server.stop()
    time.sleep(1.0)  # Redis is away: infd keeps serving and retries
    assert srv.is_running()
    redis_server.start()
    producer.join(timeout=DEADLINE_S)
    assert producer.error is None, producer.error
    c = redis_server.client()
    results = wait_results(c, producer.ids)
    check_add_sub(results, producer.inputs)
    wait_all_acked(c, "infd:jobs:add_sub")
    m = metrics(srv)
    assert m["infd_redis_disconnects_total"] >= 1 and m["infd_redis_connected"] == 1
    assert "redis: command connection to" in srv.log() and "lost" in srv.log()


def test_sigterm_finishes_and_writes_the_jobs_it_read(serve, tmp_path, redis_server):
    root = tmp_path / "repo"
    slow_model(root)
    c = redis_server.client()
    srv = serve_redis(serve, root, redis_server)
    c.xadd("infd:jobs:slow", {"id": "last", "request": json.dumps(
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]})})
    wait_pending_on(c, "infd:jobs:slow", f"{socket.gethostname()}-{srv.proc.pid}-0")
    assert srv.stop() == 0
    res, _ = split_result(c.get("results:last"))
    assert res["status"] == "ok"
    assert abs(res["outputs"][0]["data"][0] - 2.0) < 1e-3
    wait_all_acked(c, "infd:jobs:slow")
