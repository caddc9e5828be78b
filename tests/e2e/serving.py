"""Start and stop a real `infd serve` for the end-to-end tests.

    from serving import Server, free_port

    def test_x(serve, tmp_path):          # `serve` is the fixture in conftest.py
        repo.add_sub(tmp_path / "repo")
        srv = serve(tmp_path / "repo", "--model-control-mode", "explicit")
        requests.get(srv.url + "/v2/health/ready")

A Server binds every port on 127.0.0.1 (free ports picked here), puts the raw
sockets in a temporary folder, writes the server's stdout and stderr to a log
file and waits until GET /v2/health/ready answers 200. Tests never assert on
time: the only timeouts here bound how long a broken server can hang a test.
"""

import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time

import requests

READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.05
STOP_TIMEOUT_S = 30.0
LOG_TAIL_CHARS = 4000


_handed_out = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)
    and that this process has not handed out before: two picks in a row can
    get the same port back once the first probe is closed, and a server given
    it for both HTTP and gRPC then fails to listen (seen in CI)."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no port that was not handed out before after 1000 tries")


class Server:
    """One `infd serve` subprocess.

    infd_bin, repo: paths; extra_args: appended to the command line after the
    port/host/raw options (an option given there wins where infd takes the last
    value). log_dir: where serve.log goes (default: a new temporary folder).
    wait_ready=False skips the readiness wait (for tests of startup failures;
    call wait_ready() or wait() yourself).
    """

    def __init__(self, infd_bin, repo, *extra_args, log_dir=None, wait_ready=True, env=None,
                 https=None):
        self.infd_bin = str(infd_bin)
        self.repo = None if repo is None else pathlib.Path(repo)
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        self.host = "127.0.0.1"
        # https: {"verify": CA file, "cert": (cert, key) or None} when the
        # server speaks HTTPS (its TLS options are in extra_args).
        self.https = https
        self.url = f"{'https' if https else 'http'}://{self.host}:{self.http_port}"
        self.metrics_url = f"http://{self.host}:{self.metrics_port}/metrics"
        self._tmp = tempfile.TemporaryDirectory(prefix="infd-serve-")
        tmp = pathlib.Path(self._tmp.name)
        self.raw_dir = tmp / "raw"
        self.raw_dir.mkdir()
        self.log_path = pathlib.Path(log_dir or tmp) / "serve.log"
        self.killed = False
        self.returncode = None
        # The exit code the `serve` fixture expects at teardown; a test of a
        # failing start sets it to what infd should return.
        self.expected_returncode = 0
        cmd = [self.infd_bin, "serve"]
        if self.repo is not None:
            cmd += ["--model-repository", str(self.repo)]
        cmd += ["--host", self.host,
                "--http-port", str(self.http_port),
                "--grpc-port", str(self.grpc_port),
                "--metrics-port", str(self.metrics_port),
                "--raw-socket-dir", str(self.raw_dir)]
        cmd += [str(a) for a in extra_args]
        self.cmd = cmd
        self._logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        if wait_ready:
            try:
                self.wait_ready()
            except BaseException:
                self.kill()
                self.cleanup()
                raise

    # -- state -----------------------------------------------------------------

    def log(self) -> str:
        """Everything the server wrote so far (stdout and stderr interleaved);
        readable after stop() too, until the fixture's teardown."""
        if not self._logf.closed:
            self._logf.flush()
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n=LOG_TAIL_CHARS) -> str:
        return self.log()[-n:]

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def is_ready(self) -> bool:
        try:
            tls = {"verify": self.https["verify"], "cert": self.https.get("cert")} \
                if self.https else {}
            return requests.get(self.url + "/v2/health/ready", timeout=5,
                                **tls).status_code == 200
        except requests.RequestException:
            return False

    def wait_ready(self, timeout=READY_TIMEOUT_S):
        """Polls /v2/health/ready until 200; raises with the log tail when the
        server exits or does not get ready within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise RuntimeError(f"infd serve exited with {rc} before it was ready\n"
                                   f"command: {' '.join(self.cmd)}\n--- log tail ---\n"
                                   f"{self.log_tail()}")
            if self.is_ready():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"infd serve not ready after {timeout:.0f} s\n"
                                   f"command: {' '.join(self.cmd)}\n--- log tail ---\n"
                                   f"{self.log_tail()}")
            time.sleep(READY_POLL_S)

    def raw_socket(self, model: str) -> pathlib.Path:
        """Path of model's raw Unix socket in this server's --raw-socket-dir."""
        return self.raw_dir / f"{model}.sock"

    # -- ending ----------------------------------------------------------------

    def wait(self, timeout=STOP_TIMEOUT_S) -> int:
        """Waits for the process to exit by itself; returns its exit code."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        finally:
            self._close()
        return self.returncode

    def stop(self, timeout=STOP_TIMEOUT_S) -> int:
        """SIGTERM, then waits up to `timeout` s; returns the exit code.
        A server that does not exit in time is killed and RuntimeError raised."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"infd serve did not exit {timeout:.0f} s after SIGTERM\n"
                               f"--- log tail ---\n{self.log_tail()}")
        self._close()
        return self.returncode

    def kill(self):
        """SIGKILL; the fixture then does not check the exit code."""
        self.killed = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.returncode = self.proc.wait()
        self._close()

    def _close(self):
        if not self._logf.closed:
            self._logf.close()

    def cleanup(self):
        """Removes the temporary folder (the log goes with it unless log_dir)."""
        self._close()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()
        self.cleanup()


def stop_all(servers):
    """Stops every server the test did not kill; returns a list of problems
    (exit code not 0, or no exit after SIGTERM), each with the log tail.
    Removes the servers' temporary folders. Used by the `serve` fixture."""
    problems = []
    for srv in servers:
        if srv.killed:
            srv.cleanup()
            continue
        try:
            rc = srv.stop() if srv.returncode is None else srv.returncode
            if rc != srv.expected_returncode:
                problems.append(f"infd serve exited with {rc} "
                                f"(expected {srv.expected_returncode})\n"
                                f"--- log tail ---\n{srv.log_tail()}")
        except RuntimeError as e:
            problems.append(str(e))
        srv.cleanup()
    return problems


def env_with(**kv):
    """os.environ plus kv (values str()), for Server(env=...)."""
    env = dict(os.environ)
    env.update({k: str(v) for k, v in kv.items()})
    return env
