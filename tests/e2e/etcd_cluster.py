"""A real etcd cluster for the end-to-end tests: Debian's etcd-server, three
members on free loopback ports, each with its own data folder, started and
stopped by PID. `etcd_cluster` is the pytest fixture (import it into a test
module to use it). The client talks to etcd's JSON gateway with requests,
as infd does with libevent."""

import base64
import json
import pathlib
import shutil
import signal
import subprocess
import time

import pytest
import requests

from serving import free_port


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def unb64(s):
    return base64.b64decode(s) if s else b""


class EtcdMember:
    def __init__(self, name, path, client_port, peer_port):
        self.name = name
        self.path = pathlib.Path(path)
        self.client_port = client_port
        self.peer_port = peer_port
        self.proc = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self):
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, initial_cluster, state="new"):
        self.path.mkdir(parents=True, exist_ok=True)
        self.log = open(self.path.parent / f"{self.name}.log", "ab")
        self.proc = subprocess.Popen(
            ["etcd", "--name", self.name, "--data-dir", str(self.path),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
             "--initial-cluster", initial_cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "infd-test",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--log-level", "warn"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        if self.running():
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        if self.proc:
            self.log.close()

    def status(self):
        r = requests.post(f"{self.url}/v3/maintenance/status", json={}, timeout=2)
        r.raise_for_status()
        return r.json()


class EtcdCluster:
    """Three members; `endpoints` is what infd's --cluster takes."""

    def __init__(self, path, n=3):
        self.path = pathlib.Path(path)
        self.members = [EtcdMember(f"m{i}", self.path / f"m{i}", free_port(), free_port())
                        for i in range(n)]
        self.initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            m.start(self.initial)
        self.wait_healthy()

    @property
    def endpoints(self):
        return ",".join(m.url for m in self.members)

    def live(self):
        return [m for m in self.members if m.running()]

    def wait_healthy(self, deadline_s=30):
        deadline = time.time() + deadline_s
        last = None
        while time.time() < deadline:
            try:
                if self.leader() is not None:
                    self.put("/infd-test/ping", "1")
                    return
            except (requests.RequestException, KeyError, ValueError) as e:
                last = e
            for m in self.members:
                if m.proc and m.proc.poll() is not None:
                    log = (self.path / f"{m.name}.log").read_text(errors="replace")
                    raise AssertionError(f"etcd {m.name} exited: {log[-2000:]}")
            time.sleep(0.1)
        raise AssertionError(f"the etcd cluster has no leader: {last}")

    def leader(self):
        """The member that leads now (None when none answers with one)."""
        for m in self.live():
            try:
                st = m.status()
            except requests.RequestException:
                continue
            if st.get("leader") and st["leader"] == st["header"]["member_id"]:
                return m
        return None

    def _post(self, path, body):
        last = None
        for m in self.live():
            try:
                r = requests.post(f"{m.url}{path}", json=body, timeout=5)
                if r.status_code == 200:
                    return r.json()
                last = r.text
            except requests.RequestException as e:
                last = e
        raise AssertionError(f"etcd {path}: {last}")

    def put(self, key, value, lease=0):
        return self._post("/v3/kv/put", {"key": b64(key), "value": b64(value),
                                         "lease": str(lease)})

    def get_prefix(self, prefix):
        """{key: value} of every key under prefix."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self._post("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)})
        return {unb64(kv["key"]).decode(): unb64(kv.get("value", "")).decode()
                for kv in r.get("kvs", [])}

    def get(self, key):
        r = self._post("/v3/kv/range", {"key": b64(key)})
        kvs = r.get("kvs", [])
        return json.loads(unb64(kvs[0].get("value", ""))) if kvs else None

    def lease_of(self, key):
        r = self._post("/v3/kv/range", {"key": b64(key)})
        kvs = r.get("kvs", [])
        return int(kvs[0].get("lease", "0")) if kvs else None

    def compact(self):
        rev = int(self._post("/v3/kv/range", {"key": b64("/")})["header"]["revision"])
        self._post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def stop(self):
        for m in self.members:
            m.stop()
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture
def etcd_cluster(tmp_path):
    if shutil.which("etcd") is None:
        pytest.fail("etcd is missing: run scripts/setup.sh (Debian etcd-server)")
    c = EtcdCluster(tmp_path / "etcd")
    yield c
    c.stop()
