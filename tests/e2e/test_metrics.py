"""End-to-end tests of the metrics frontend (GET /metrics on --metrics-port).

They drive a real `infd serve`: inferences through the KServe v2 HTTP/JSON
API, then the Prometheus text is scraped with `requests` and parsed here, and
finally a real Prometheus (Debian's `prometheus`) scrapes the server and its
query API must return our series.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_metrics.py
"""

import math
import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest
import requests

import repo as model_repo
from serving import free_port

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4"
# Bounds how long the tests wait for Prometheus (never asserted on).
PROMETHEUS_WAIT_S = 90

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')

MODEL_COUNTERS = [
    "infd_inference_request_success", "infd_inference_request_failure", "infd_inference_count",
    "infd_inference_exec_count", "infd_inference_request_duration_us",
    "infd_inference_queue_duration_us", "infd_inference_compute_input_duration_us",
    "infd_inference_compute_infer_duration_us", "infd_inference_compute_output_duration_us",
]
MODEL_GAUGES = ["infd_inference_pending_request_count", "infd_inference_queue_depth"]
PROCESS_METRICS = ["process_resident_memory_bytes", "process_cpu_seconds_total",
                   "process_start_time_seconds", "process_open_fds"]


# -- Prometheus text format ------------------------------------------------------


def parse_labels(text):
    labels, pos = {}, 0
    while pos < len(text):
        m = LABEL_RE.match(text, pos)
        assert m, f"malformed labels at {pos}: {text!r}"
        value = re.sub(r'\\(.)', lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        assert m.group(1) not in labels, f"label {m.group(1)} twice in {text!r}"
        labels[m.group(1)] = value
        pos = m.end()
    return labels


def parse_metrics(text):
    """Parses the text format strictly enough to catch what Prometheus
    rejects: {family: {"type", "help", "samples": [(name, labels, value)]}}.
    Checks one HELP and TYPE per family, before its samples, and every
    family's samples in one block."""
    assert text.endswith("\n"), "the last line must end with a line feed"
    families, current, closed = {}, None, set()
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, name, rest = line[2:6], *line[7:].split(" ", 1)
            fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
            key = "type" if kind == "TYPE" else "help"
            assert fam[key] is None, f"second # {kind} for {name}"
            assert not fam["samples"], f"# {kind} {name} after its samples"
            fam[key] = rest
            if current and current != name:
                closed.add(current)
            assert name not in closed, f"family {name} split in two blocks"
            current = name
            continue
        assert not line.startswith("#"), f"unexpected comment: {line!r}"
        m = SAMPLE_RE.match(line)
        assert m, f"malformed sample line: {line!r}"
        name, labels, value = m.group(1), parse_labels(m.group(3) or ""), float(m.group(4))
        fam_name = name
        if current and name != current and name.startswith(current) and \
                name[len(current):] in ("_bucket", "_sum", "_count"):
            fam_name = current
        assert fam_name == current, f"sample {name} outside its family block ({current})"
        families[fam_name]["samples"].append((name, labels, value))
    for name, fam in families.items():
        assert fam["type"] in ("counter", "gauge", "histogram", "summary", "untyped"), (name, fam)
        assert fam["help"], f"{name} has no HELP"
    return families


def value(families, name, **labels):
    """The value of the one sample `name` whose labels include `labels`."""
    fam = families[re.sub(r"_(bucket|sum|count)$", "", name)
                   if name not in families else name]
    hits = [v for n, lab, v in fam["samples"]
            if n == name and all(lab.get(k) == str(w) for k, w in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} samples in {fam['samples']}"
    return hits[0]


def scrape(srv):
    r = requests.get(srv.metrics_url, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith(TEXT_CONTENT_TYPE), r.headers
    return parse_metrics(r.text)


# -- Inference through KServe v2 HTTP/JSON ------------------------------------------


def infer_add_sub(srv, batch, model="add_sub", expect=200):
    a = [float(i) for i in range(16 * batch)]
    b = [1.0] * (16 * batch)
    body = {"inputs": [
        {"name": "INPUT0", "shape": [batch, 16], "datatype": "FP32", "data": a},
        {"name": "INPUT1", "shape": [batch, 16], "datatype": "FP32", "data": b}]}
    r = requests.post(f"{srv.url}/v2/models/{model}/infer", json=body, timeout=60)
    assert r.status_code == expect, r.text
    if expect == 200:
        outs = {o["name"]: o for o in r.json()["outputs"]}
        assert outs["OUTPUT0"]["data"] == [x + 1.0 for x in a]
    return r


# -- Tests ------------------------------------------------------------------------


def test_metrics_endpoint(serve, add_sub_repo):
    srv = serve(add_sub_repo)
    fams = scrape(srv)
    for name in MODEL_COUNTERS:
        assert fams[name]["type"] == "counter", name
        assert value(fams, name, model="add_sub", version=1) == 0, name
    for name in MODEL_GAUGES:
        assert fams[name]["type"] == "gauge", name
        assert value(fams, name, model="add_sub", version=1) == 0, name
    assert fams["infd_inference_request_latency_us"]["type"] == "histogram"
    for name in PROCESS_METRICS:
        assert name in fams, name
    assert value(fams, "process_resident_memory_bytes") > 1 << 20
    assert value(fams, "process_open_fds") >= 3
    assert abs(value(fams, "process_start_time_seconds") - time.time()) < 24 * 3600

    # HEAD answers like GET, without a body; other paths 404; other methods 405.
    r = requests.head(srv.metrics_url, timeout=30)
    assert r.status_code == 200 and not r.content
    for path in ["/", "/metrics/", "/metric", "/v2/health/ready"]:
        r = requests.get(f"http://127.0.0.1:{srv.metrics_port}{path}", timeout=30)
        assert r.status_code == 404, (path, r.status_code)
    for method in ["POST", "PUT", "DELETE"]:
        r = requests.request(method, srv.metrics_url, data=b"x", timeout=30)
        assert r.status_code == 405, (method, r.status_code)
        assert "GET" in r.headers.get("Allow", ""), r.headers
    # A query string does not change the page; keep-alive serves repeated scrapes.
    with requests.Session() as s:
        for _ in range(5):
            r = s.get(srv.metrics_url + "?x=1", timeout=30)
            assert r.status_code == 200 and "infd_inference_count{" in r.text
    assert srv.is_ready()


def test_metrics_count_inferences(serve, add_sub_repo):
    srv = serve(add_sub_repo)
    batches = [1, 2, 3, 1, 4, 2, 1, 8, 1, 1]
    for bs in batches:
        infer_add_sub(srv, bs)
    # An input of the wrong shape is refused before the model sees it.
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", timeout=30, json={"inputs": [
        {"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]},
        {"name": "INPUT1", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]})
    assert r.status_code == 400, r.text

    fams = scrape(srv)
    lab = {"model": "add_sub", "version": 1}
    assert value(fams, "infd_inference_request_success", **lab) == len(batches)
    assert value(fams, "infd_inference_count", **lab) == sum(batches)
    n_exec = value(fams, "infd_inference_exec_count", **lab)
    assert 1 <= n_exec <= len(batches)
    assert value(fams, "infd_inference_pending_request_count", **lab) == 0
    assert value(fams, "infd_inference_queue_depth", **lab) == 0
    assert value(fams, "infd_inference_request_duration_us", **lab) > 0
    assert value(fams, "infd_inference_compute_infer_duration_us", **lab) > 0

    # Latency histogram: cumulative buckets ending in +Inf == _count == requests.
    buckets = [(float(lab_["le"]), v) for n, lab_, v in
               fams["infd_inference_request_latency_us"]["samples"]
               if n.endswith("_bucket") and lab_["model"] == "add_sub"]
    assert buckets[-1][0] == math.inf
    assert [b for b, _ in buckets] == sorted(b for b, _ in buckets)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert buckets[-1][1] == len(batches)
    assert value(fams, "infd_inference_request_latency_us_count", **lab) == len(batches)
    assert value(fams, "infd_inference_request_latency_us_sum", **lab) > 0

    # Batch sizes: executions add up to exec_count, their rows to inference_count.
    by_size = {int(lab_["batch_size"]): v for _, lab_, v in
               fams["infd_inference_batch_exec_count"]["samples"] if lab_["model"] == "add_sub"}
    assert sum(by_size.values()) == n_exec
    assert sum(bs * n for bs, n in by_size.items()) == sum(batches)
    assert all(1 <= bs <= 8 for bs in by_size)


def test_metrics_show_dynamic_batches(serve, tmp_path):
    """Concurrent single-row requests are batched by the dynamic batcher; the
    batch-size distribution shows executions of more than one row."""
    models = tmp_path / "models"
    model_repo.add_sub(models, dynamic_batching={"max_queue_delay_microseconds": 200000})
    srv = serve(models)
    n_clients, total = 8, 0
    lab = {"model": "add_sub", "version": 1}
    for _round in range(20):  # scheduling is not ours to control: retry
        barrier = threading.Barrier(n_clients)
        errors = []

        def client():
            try:
                barrier.wait(timeout=30)
                infer_add_sub(srv, 1)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=client) for _ in range(n_clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        total += n_clients
        fams = scrape(srv)
        sizes = {int(lab_["batch_size"]) for _, lab_, v in
                 fams["infd_inference_batch_exec_count"]["samples"] if v > 0}
        if max(sizes) > 1:
            break
    assert max(sizes) > 1, f"no batch of more than one row after {total} requests: {sizes}"
    assert value(fams, "infd_inference_request_success", **lab) == total
    assert value(fams, "infd_inference_count", **lab) == total
    assert value(fams, "infd_inference_exec_count", **lab) < total


def test_metrics_follow_model_versions(serve, tmp_path):
    """Each READY version has its own series; an unloaded model's go away."""
    models = tmp_path / "models"
    model_repo.add_sub(models, version=1)
    model_repo.add_sub(models, version=2,
                       config=model_repo.add_sub_config() + "version_policy: { all { } }\n")
    model_repo.identity(models, "ident", "INT32")
    srv = serve(models, "--model-control-mode", "explicit", "--load-model", "add_sub",
                "--load-model", "ident")
    fams = scrape(srv)
    for v in (1, 2):
        assert value(fams, "infd_inference_request_success", model="add_sub", version=v) == 0
    r = requests.post(f"{srv.url}/v2/repository/models/ident/unload", timeout=60)
    assert r.status_code == 200, r.text
    fams = scrape(srv)
    assert not [s for s in fams["infd_inference_request_success"]["samples"]
                if s[1]["model"] == "ident"]


def test_metrics_port_in_use(serve, add_sub_repo):
    """A metrics port that cannot be bound stops the server with a message
    naming the address and the reason."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        srv = serve(add_sub_repo, "--metrics-port", port, wait_ready=False)
        rc = srv.wait()
    assert rc != 0, srv.log()
    srv.expected_returncode = rc
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in srv.log(), srv.log()


# -- Prometheus -------------------------------------------------------------------


def wait_for(what, fn, timeout=PROMETHEUS_WAIT_S, proc=None, log=None):
    """Calls fn() until it returns a truthy value; raises after `timeout` s."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode} waiting for {what}\n"
                               f"{log.read_text()[-3000:] if log else ''}")
        try:
            got = fn()
            if got:
                return got
        except (requests.RequestException, KeyError, IndexError, ValueError) as e:
            last = e
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})\n"
                         f"{log.read_text()[-3000:] if log else ''}")


@pytest.fixture
def prometheus_bin():
    exe = shutil.which("prometheus", path="/usr/bin:/usr/local/bin:" + os.environ.get("PATH", ""))
    if exe is None:
        pytest.skip("prometheus not installed (Debian package `prometheus`; scripts/setup.sh)")
    return exe


def test_prometheus_scrapes_metrics(serve, add_sub_repo, prometheus_bin, tmp_path):
    srv = serve(add_sub_repo)
    for bs in (1, 2, 3):
        infer_add_sub(srv, bs)

    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: infd\n"
        "    scrape_interval: 1s\n"
        "    scrape_timeout: 1s\n"
        "    metrics_path: /metrics\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{srv.metrics_port}']\n")
    log = tmp_path / "prometheus.log"
    api = f"http://127.0.0.1:{port}/api/v1"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            [prometheus_bin, f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        def target_up():
            targets = requests.get(f"{api}/targets", timeout=10).json()["data"]["activeTargets"]
            ours = [t for t in targets if t["scrapeUrl"] == srv.metrics_url]
            if not ours:
                return None  # service discovery has not run yet
            if ours[0]["health"] == "down":
                raise AssertionError(f"prometheus cannot scrape infd: {ours[0]['lastError']}")
            return ours[0]["health"] == "up"

        wait_for("the infd target to be up", target_up, proc=proc, log=log)

        def query(q):
            r = requests.get(f"{api}/query", params={"query": q}, timeout=10).json()
            assert r["status"] == "success", r
            return r["data"]["result"]

        def success_series():
            res = query('infd_inference_request_success{model="add_sub"}')
            return res if res and float(res[0]["value"][1]) == 3 else None

        res = wait_for("infd_inference_request_success in Prometheus", success_series,
                       proc=proc, log=log)
        assert res[0]["metric"]["version"] == "1"
        assert res[0]["metric"]["job"] == "infd"
        # Histograms and process metrics parse too: Prometheus can take a
        # quantile of our buckets.
        assert query('infd_inference_count{model="add_sub"}')[0]["value"][1] == "6"
        q = query('histogram_quantile(0.5, infd_inference_request_latency_us_bucket'
                  '{model="add_sub"})')
        assert q and float(q[0]["value"][1]) > 0, q
        assert float(query("process_resident_memory_bytes")[0]["value"][1]) > 0
        # Prometheus reports no sample it had to drop for a format error.
        assert float(query('scrape_samples_scraped{job="infd"}')[0]["value"][1]) > 20
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
