"""Shared pieces of the serving benchmarks (bench/serve_raw.py, serve_http.py,
serve_blazeface.py): start `infd serve` on free 127.0.0.1 ports with a
temporary repository, run `infd perf` and read its CSV, read the per-model
statistics, run wrk, pick the median of repeated runs, print tables.

Nothing here asserts on time: a benchmark prints numbers and ratios, and
RESULTS.md records them with the command that produced them.
"""

import csv
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import repo as model_repo  # noqa: E402,F401  (re-exported for the benchmarks)
from serving import free_port  # noqa: E402,F401  (distinct ports: see there)

DEFAULT_INFD = ROOT / "build" / "release" / "infd"
READY_TIMEOUT_S = 120.0


def http_get_json(url, timeout=10, context=None):
    """GET url as JSON (context: an ssl.SSLContext for https)."""
    with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
        return json.loads(r.read())


def wait_until(cond, proc, what, timeout=READY_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            sys.exit(f"{what} not ready after {timeout:.0f} s")
        time.sleep(0.05)


class Serve:
    """`infd serve` of `repo` on free ports of 127.0.0.1, raw sockets in a
    temporary folder, log in <tmp>/serve.log; ready when GET /v2/health/ready
    answers 200. Use as a context manager: SIGTERM and wait at the end."""

    def __init__(self, infd, repo, tmp, *extra, ready_timeout=READY_TIMEOUT_S, https_ca=None):
        self.http_port = free_port()
        self.host = "127.0.0.1"
        # https_ca: the server speaks HTTPS (its TLS options are in `extra`),
        # and this CA file signed its certificate.
        self._ssl = None
        if https_ca:
            import ssl
            self._ssl = ssl.create_default_context(cafile=str(https_ca))
        self.url = f"{'https' if https_ca else 'http'}://{self.host}:{self.http_port}"
        self.hostport = f"{self.host}:{self.http_port}"
        self.grpc_port = free_port()
        self.grpc_hostport = f"{self.host}:{self.grpc_port}"
        self.raw_dir = pathlib.Path(tmp) / "raw"
        self.log_path = pathlib.Path(tmp) / "serve.log"
        self.cmd = [str(infd), "serve", "--model-repository", str(repo), "--host", self.host,
                    "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                    "--metrics-port", "-1", "--raw-socket-dir", str(self.raw_dir),
                    "--raw-stats-every", "0", "--log-level", "warn"] + [str(a) for a in extra]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        wait_until(self._ready, self.proc, "infd serve", ready_timeout)

    def _ready(self):
        try:
            with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=2,
                                        context=self._ssl) as r:
                return r.status == 200
        except OSError:
            return False

    def raw_socket(self, model):
        return self.raw_dir / f"{model}.sock"

    def stats(self, model):
        """The model's entry of GET /v2/models/<model>/stats."""
        return http_get_json(f"{self.url}/v2/models/{model}/stats",
                             context=self._ssl)["model_stats"][0]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                print(f"warning: infd serve did not exit after SIGTERM (log {self.log_path})",
                      file=sys.stderr)
        self._log.close()
        if self.proc.returncode not in (0, -signal.SIGKILL):
            print(f"warning: infd serve exited with {self.proc.returncode}", file=sys.stderr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def stats_delta(before, after):
    """Per-request server-side split between two stats snapshots of a model:
    {"n": requests, "executions", "queue_us", "compute_input_us",
    "compute_infer_us", "compute_output_us", "request_us" (success.ns: the
    whole request inside the runtime), "batches": {batch_size: executions},
    "batch_compute_infer_us": {batch_size: mean engine time of one such
    execution}}. Other times are mean microseconds per request."""
    def d(key, field):
        return after["inference_stats"][key][field] - before["inference_stats"][key][field]
    n = d("success", "count")
    out = {"n": n, "executions": after["execution_count"] - before["execution_count"]}
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        out[key + "_us"] = d(key, "ns") / 1000.0 / n if n else 0.0
    out["request_us"] = d("success", "ns") / 1000.0 / n if n else 0.0
    prev = {b["batch_size"]: b["compute_infer"] for b in before.get("batch_stats", [])}
    batches, batch_us = {}, {}
    for b in after.get("batch_stats", []):
        p = prev.get(b["batch_size"], {"count": 0, "ns": 0})
        k = b["compute_infer"]["count"] - p["count"]
        if k:
            batches[b["batch_size"]] = k
            batch_us[b["batch_size"]] = (b["compute_infer"]["ns"] - p["ns"]) / 1000.0 / k
    out["batches"] = dict(sorted(batches.items()))
    out["batch_compute_infer_us"] = dict(sorted(batch_us.items()))
    return out


def run_perf(infd, args, csv_path):
    """Runs `infd perf ARGS --csv csv_path`; returns its CSV rows as dicts
    with numbers converted. Exits on failure or on errors in the window."""
    cmd = [str(infd), "perf"] + [str(a) for a in args] + ["--csv", str(csv_path)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"infd perf failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    rows = []
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append({k: float(v) for k, v in row.items()})
    for row in rows:
        if row["Errors"] or row["Total Errors"]:
            sys.exit(f"infd perf saw errors: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return rows


def perf_row(row):
    """infd perf CSV row -> the common result keys (µs, /s)."""
    return {"throughput": row["Inferences/Second"], "requests": int(row["Requests"]),
            "mean_us": row["Avg latency"], "p50_us": row["p50 latency"],
            "p90_us": row["p90 latency"], "p99_us": row["p99 latency"]}


# -- wrk ------------------------------------------------------------------------

WRK_POST_LUA = """-- POSTs the same binary KServe request for every call (bench/serve_http.py).
local f = assert(io.open("{body}", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "{json_len}"
"""

_UNITS_US = {"us": 1.0, "ms": 1000.0, "s": 1e6, "m": 60e6, "h": 3600e6}


def _to_us(text):
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m|h)", text.strip())
    if not m:
        raise ValueError(f"cannot read wrk's time {text!r}")
    return float(m.group(1)) * _UNITS_US[m.group(2)]


def parse_wrk(out):
    """wrk --latency output -> {"throughput", "requests", "mean_us",
    "p50_us", "p90_us", "p99_us", "errors"} (errors: non-2xx answers plus
    socket errors)."""
    res = {}
    m = re.search(r"^\s*Latency\s+(\S+)", out, re.M)
    res["mean_us"] = _to_us(m.group(1))
    for pct in ("50", "90", "99"):
        m = re.search(rf"^\s*{pct}%\s+(\S+)", out, re.M)
        res[f"p{pct}_us"] = _to_us(m.group(1))
    res["throughput"] = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    res["requests"] = int(re.search(r"(\d+) requests in", out).group(1))
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    res["errors"] = errors
    return res


def run_wrk(url, connections, duration_s, lua=None, threads=1):
    """wrk -tT -cC -dD --latency [-s lua] url; returns parse_wrk's dict.
    Exits when wrk is missing or fails."""
    wrk = shutil.which("wrk")
    if not wrk:
        sys.exit("wrk not found: apt-get install wrk (scripts/setup.sh installs it)")
    cmd = [wrk, f"-t{min(threads, connections)}", f"-c{connections}", f"-d{duration_s}s",
           "--latency"]
    if lua:
        cmd += ["-s", str(lua)]
    cmd.append(url)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"wrk failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    res = parse_wrk(r.stdout)
    if res["errors"]:
        sys.exit(f"wrk saw {res['errors']} errors: {' '.join(cmd)}\n{r.stdout}")
    return res


# -- repeats and output ----------------------------------------------------------

def median_run(runs, key):
    """The run whose `key(run)` is the median of the runs (the lower middle
    one for an even count)."""
    order = sorted(range(len(runs)), key=lambda i: key(runs[i]))
    return runs[order[(len(runs) - 1) // 2]]


def print_table(header, rows):
    """Markdown table (what RESULTS.md takes verbatim)."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")


def machine_facts(infd=DEFAULT_INFD):
    """CPU model, core count, OS, load averages, infd's git commit (of the
    binary, from `infd --version`)."""
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    osname = "?"
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    commit = "?"
    try:
        m = re.search(r"\(git ([0-9a-f]+)", subprocess.run(
            [str(infd), "--version"], capture_output=True, text=True).stdout)
        commit = m.group(1)[:7] if m else "?"
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "os": osname,
            "loadavg": os.getloadavg(), "commit": commit,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_json(path, obj):
    if path:
        pathlib.Path(path).write_text(json.dumps(obj, indent=2) + "\n")
        print(f"wrote {path}")


def tempdir(prefix):
    return tempfile.TemporaryDirectory(prefix=prefix)


def build_dir_of(infd):
    return pathlib.Path(infd).resolve().parent
