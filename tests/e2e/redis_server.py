"""A real redis-server for the end-to-end tests: Debian's, on a free
loopback port, with an append-only file so a restart keeps what it had
accepted. `redis_server` is the pytest fixture (import it into a test
module to use it)."""

import pathlib
import signal
import subprocess
import time

import pytest
import redis

from serving import free_port


class RedisServer:
    """One redis-server with an append-only file in `path`, restartable on
    the same port (what it accepted before a restart is still there)."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.log = open(self.path / "redis.log", "ab")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.path), "--appendonly", "yes", "--appendfsync", "everysec",
             "--save", "", "--daemonize", "no"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + 30
        last = None
        while True:
            try:
                if redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1).ping():
                    return
            except redis.exceptions.RedisError as e:
                last = e
            log = (self.path / "redis.log").read_text(errors="replace")
            assert self.proc.poll() is None, log
            assert time.time() < deadline, f"redis-server did not answer: {last}\n{log[-2000:]}"
            time.sleep(0.05)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # writes the AOF out and exits
            self.proc.wait(timeout=30)
        self.log.close()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)


@pytest.fixture
def redis_server(tmp_path):
    r = RedisServer(tmp_path / "redis")
    yield r
    r.stop()

