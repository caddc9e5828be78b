"""End-to-end tests of `infd perf` against a real `infd serve`: HTTP (JSON and
binary) and the raw protocol (headerless and framed), CSV columns, counts.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_perf.py
"""

import csv
import subprocess

import pytest
import requests

import repo as model_repo
from serving import free_port
from test_raw import wait_for

COLUMNS = ["Concurrency", "Batch Size", "Inferences/Second", "Requests", "Errors", "Window ms",
           "Avg latency", "p50 latency", "p90 latency", "p95 latency", "p99 latency",
           "Total Requests", "Total Errors"]
RUN_TIMEOUT_S = 300  # bounds a hung run; never asserted on


@pytest.fixture
def models(tmp_path):
    repo = tmp_path / "models"
    model_repo.add_sub(repo, dynamic_batching={"max_queue_delay_microseconds": 200})
    model_repo.identity(repo, name="ident", dtype="FP32")
    return repo


def perf(infd_bin, *args):
    return subprocess.run([str(infd_bin), "perf", *map(str, args)], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == COLUMNS, rows[0]
    return [dict(zip(COLUMNS, r)) for r in rows[1:]]


def success_count(srv, model):
    """Successful requests of `model` from the server's statistics (Triton's form)."""
    r = requests.get(f"{srv.url}/v2/models/{model}/stats", timeout=30)
    assert r.status_code == 200, r.text
    return sum(int(s["inference_stats"]["success"]["count"]) for s in r.json()["model_stats"])


@pytest.mark.parametrize("mode", ["json", "binary", "raw-framed", "raw-headerless", "raw-tcp"])
def test_perf_counts_add_up(serve, models, infd_bin, tmp_path, mode):
    tcp_port = free_port()
    srv = serve(models, "--raw-tcp-port", f"ident={tcp_port}")
    model = "ident" if mode in ("raw-headerless", "raw-tcp") else "add_sub"
    hostport = f"127.0.0.1:{srv.http_port}"
    if mode in ("json", "binary"):
        target = ["--url", hostport] + (["--binary"] if mode == "binary" else [])
    elif mode == "raw-tcp":
        wait_for((srv.raw_dir / "ident.sock").exists, "the raw sockets")
        target = ["--protocol", "raw", "--url", f"127.0.0.1:{tcp_port}", "--metadata-url",
                  hostport]
    else:
        sock = srv.raw_dir / (f"{model}.framed.sock" if mode == "raw-framed" else f"{model}.sock")
        wait_for(sock.exists, str(sock))
        target = ["--unix", sock, "--metadata-url", hostport]
        target += ["--framed"] if mode == "raw-framed" else []
    out = tmp_path / "perf.csv"
    before = success_count(srv, model)
    r = perf(infd_bin, "--model", model, *target, "--concurrency-range", "1:3:2",
             "--request-count", 150, "--warmup-ms", 50, "--csv", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_csv(out)
    assert [int(row["Concurrency"]) for row in rows] == [1, 3]
    for row in rows:
        assert int(row["Requests"]) == 150 and int(row["Errors"]) == 0, row
        assert int(row["Total Errors"]) == 0, row
        assert int(row["Total Requests"]) >= 150, row
        assert float(row["Inferences/Second"]) > 0, row
        lat = [float(row[k]) for k in ("p50 latency", "p90 latency", "p95 latency",
                                       "p99 latency")]
        assert 0 < lat[0] <= lat[1] <= lat[2] <= lat[3], row
        assert float(row["Avg latency"]) > 0
    # Every request perf sent, warmup included, reached the server and succeeded.
    assert success_count(srv, model) - before == sum(int(row["Total Requests"]) for row in rows)
    # The same numbers on stdout: one table row per step.
    table = [ln.split() for ln in r.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert [(int(t[0]), int(t[1]), int(t[2])) for t in table] == [(1, 150, 0), (3, 150, 0)]


def test_perf_time_window_and_batch(serve, models, infd_bin, tmp_path):
    srv = serve(models)
    out = tmp_path / "perf.csv"
    r = perf(infd_bin, "--model", "add_sub", "--url", f"127.0.0.1:{srv.http_port}", "--binary",
             "--batch-size", 4, "--measurement-ms", 300, "--warmup-ms", 0, "--concurrency-range",
             2, "--input-data", "zero", "--csv", out)
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = read_csv(out)
    assert row["Batch Size"] == "4" and row["Concurrency"] == "2"
    assert int(row["Requests"]) > 0 and int(row["Errors"]) == 0
    # Inferences count batch rows: 4 per request over the window.
    expect = int(row["Requests"]) * 4 * 1000.0 / float(row["Window ms"])
    assert abs(float(row["Inferences/Second"]) - expect) <= 0.01 * expect + 0.1, row


@pytest.mark.parametrize("protocol", ["http", "grpc", "raw"])
def test_perf_request_rate_is_open_loop(serve, models, infd_bin, tmp_path, protocol):
    """--request-rate sends on a schedule, not when answers come back: at
    200/s over a 1 s window about 200 requests are answered (a sanity bound
    on the schedule, not a speed goal), every one of them reached the server,
    and a rate no set of connections could carry is reported as late."""
    srv = serve(models)
    hostport = f"127.0.0.1:{srv.http_port}"
    target = {"http": ["--url", hostport, "--binary"],
              "grpc": ["--url", f"127.0.0.1:{srv.grpc_port}", "--protocol", "grpc"],
              "raw": ["--unix", srv.raw_dir / "add_sub.framed.sock", "--framed",
                      "--metadata-url", hostport]}[protocol]
    if protocol == "raw":
        wait_for((srv.raw_dir / "add_sub.framed.sock").exists, "the raw socket")
    out = tmp_path / "perf.csv"
    before = success_count(srv, "add_sub")
    r = perf(infd_bin, "--model", "add_sub", *target, "--request-rate", 200,
             "--concurrency-range", 4, "--measurement-ms", 1000, "--warmup-ms", 100, "--csv", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "request rate: 200.0/s" in r.stdout
    (row,) = read_csv(out)
    assert 100 <= int(row["Requests"]) <= 300 and int(row["Errors"]) == 0, row
    assert success_count(srv, "add_sub") - before == int(row["Total Requests"])
    r = perf(infd_bin, "--model", "add_sub", *target, "--request-rate", 1000000,
             "--concurrency-range", 1, "--measurement-ms", 300, "--warmup-ms", 0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "came due with all 1 connections busy" in r.stderr, r.stderr
    r = perf(infd_bin, "--model", "add_sub", *target, "--request-rate", "0")
    assert r.returncode == 2 and "--request-rate" in r.stderr, r.stderr


def test_perf_all_failing_exits_nonzero(serve, models, infd_bin):
    srv = serve(models)
    wait_for((srv.raw_dir / "add_sub.framed.sock").exists, "the raw socket")
    # add_sub needs INPUT1 as well: every framed request is answered with an error.
    r = perf(infd_bin, "--model", "add_sub", "--unix", srv.raw_dir / "add_sub.framed.sock",
             "--framed", "--shape", "1,16", "--dtype", "FP32", "--input-name", "INPUT0",
             "--request-count", 20, "--warmup-ms", 0)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "INPUT1" in r.stderr and "no request succeeded" in r.stderr, r.stderr
    # An unknown model fails at the metadata request.
    r = perf(infd_bin, "--model", "nope", "--url", f"127.0.0.1:{srv.http_port}",
             "--request-count", 5)
    assert r.returncode == 1 and "/v2/models/nope" in r.stderr, r.stderr
    # Usage errors.
    r = perf(infd_bin, "--model", "add_sub")
    assert r.returncode == 2
    r = perf(infd_bin, "--model", "add_sub", "--url", "x:1", "--concurrency-range", "4:2")
    assert r.returncode == 2


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_shared_memory(serve, models, infd_bin, protocol):
    """--shared-memory system: every request's tensors in one registered
    region; the server counts them, and the region is gone afterwards."""
    srv = serve(models, "--enable-shared-memory", "system")
    port = srv.http_port if protocol == "http" else srv.grpc_port
    r = perf(infd_bin, "--model", "add_sub", "--url", f"127.0.0.1:{port}", "--protocol",
             protocol, "--shared-memory", "system", "--request-count", 50, "--warmup-ms", 0,
             "--concurrency-range", 2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "shared memory" in r.stdout
    assert success_count(srv, "add_sub") >= 50
    assert requests.get(f"{srv.url}/v2/systemsharedmemory/status", timeout=10).json() == []
    # A server without the extension: a clear error before any request.
    off = serve(models)
    port = off.http_port if protocol == "http" else off.grpc_port
    r = perf(infd_bin, "--model", "add_sub", "--url", f"127.0.0.1:{port}", "--protocol",
             protocol, "--shared-memory", "system", "--request-count", 5)
    assert r.returncode == 1 and "--enable-shared-memory system" in r.stderr, r.stderr
