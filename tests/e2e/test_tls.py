"""TLS on the HTTP and gRPC frontends (issue #24), native, without a proxy:
HTTPS through libevent's OpenSSL bufferevents (--http-ssl-cert/-key, client
certificates with --http-ssl-client-ca) and gRPC core's SSL server
credentials with Triton's flags (--grpc-use-ssl, --grpc-use-ssl-mutual,
--grpc-server-cert, --grpc-server-key, --grpc-root-cert). The clients are
real ones: requests (urllib3 over Python's ssl), grpcio's secure channels
and `infd perf --ssl`. Certificates are made at test time with the openssl
tool: a CA, a server certificate for localhost and 127.0.0.1, and a client
certificate.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_tls.py
"""

import csv
import json
import socket
import ssl
import subprocess

import numpy as np
import pytest
import requests

grpc = pytest.importorskip("grpc")

import repo as model_repo  # noqa: E402
from pki import have_openssl, make_pki  # noqa: E402
from serving import Server  # noqa: E402
from test_grpc import CHANNEL_OPTIONS, add_sub_inputs, infer_request, outputs_of, pb  # noqa: E402,F401
from test_http import add_sub_body, binary_request  # noqa: E402

TIMEOUT = 30
BIG = 65536  # FP32 elements of the "big" identity model


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if not have_openssl():
        pytest.skip("the openssl tool is not installed (scripts/setup.sh installs it)")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    models = tmp_path_factory.mktemp("tls") / "models"
    model_repo.add_sub(models)
    model_repo.identity(models, name="big", dims=(BIG,))  # 256 KiB a request
    return models


def tls_args(pki, mutual):
    args = ["--http-ssl-cert", pki / "server.pem", "--http-ssl-key", pki / "server.key",
            "--grpc-use-ssl", "true", "--grpc-server-cert", pki / "server.pem",
            "--grpc-server-key", pki / "server.key"]
    if mutual:
        args += ["--http-ssl-client-ca", pki / "ca.pem", "--grpc-use-ssl-mutual", "true",
                 "--grpc-root-cert", pki / "ca.pem"]
    return args


def client_cert(pki):
    return (str(pki / "client.pem"), str(pki / "client.key"))


@pytest.fixture(scope="module", params=["tls", "mutual"])
def srv(request, infd_bin, repo, pki):
    mutual = request.param == "mutual"
    s = Server(infd_bin, repo, *tls_args(pki, mutual),
               https={"verify": str(pki / "ca.pem"), "cert": client_cert(pki) if mutual else None})
    s.mutual = mutual
    yield s
    rc = s.stop()
    s.cleanup()
    assert rc == 0, f"infd serve exited with {rc}\n{s.log_tail()}"


def https_infer(srv, pki, cert):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    r = requests.post(f"{srv.url}/v2/models/add_sub/infer", json=add_sub_body(a, a),
                      verify=str(pki / "ca.pem"), cert=cert, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == (2 * a).ravel().tolist()


def grpc_channel(srv, pki, with_cert):
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.pem").read_bytes(),
        private_key=(pki / "client.key").read_bytes() if with_cert else None,
        certificate_chain=(pki / "client.pem").read_bytes() if with_cert else None)
    return grpc.secure_channel(f"127.0.0.1:{srv.grpc_port}", creds, options=CHANNEL_OPTIONS)


def grpc_infer(pb, ch):
    stub = pb.svc_grpc.GRPCInferenceServiceStub(ch)
    assert stub.ServerLive(pb.svc.ServerLiveRequest(), timeout=TIMEOUT).live
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    resp = stub.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, a)), timeout=TIMEOUT)
    np.testing.assert_array_equal(outputs_of(resp)["OUTPUT0"], 2 * a)


def test_https_serves_and_refuses_what_is_not_tls(srv, pki):
    cert = client_cert(pki) if srv.mutual else None
    https_infer(srv, pki, cert)
    # Plain HTTP on the HTTPS port gets no HTTP answer (the server closes
    # after a failed handshake), and the server serves on.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{srv.http_port}/v2/health/ready", timeout=TIMEOUT)
    # A client that starts a handshake and vanishes, and one that sends
    # garbage bytes: neither holds the loop.
    for junk in (b"\x16\x03\x01\x00\xff\x01", b"GET / HTTP/1.1\r\n\r\n" * 4):
        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT) as s:
            s.sendall(junk)
    # A client that does not trust the server's CA is refused by itself.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{srv.url}/v2/health/ready", verify=True, cert=cert, timeout=TIMEOUT)
    https_infer(srv, pki, cert)
    # Metrics stay plain HTTP on their own port.
    assert requests.get(srv.metrics_url, timeout=TIMEOUT).status_code == 200


def raw_request(path, body, headers):
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + body


def read_answer(f):
    """(status line, body) of one HTTP/1.1 answer from a file over the socket."""
    status = f.readline()
    n = 0
    while True:
        line = f.readline()
        assert line, "connection closed before the answer's headers ended"
        if line in (b"\r\n", b"\n"):
            break
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    return status, f.read(n)


def test_https_receive_path(srv, pki):
    """The HTTPS receive path (read-ahead and tls_drain): large bodies, many
    requests in one burst of TLS records, a request trickled a few bytes at
    a time, and a client's close_notify all get what plain HTTP gets."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if srv.mutual:
        ctx.load_cert_chain(*client_cert(pki))
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((1, BIG)).astype(np.float32) for _ in range(6)]
    reqs = []
    for a in arrays:
        body, hdrs = binary_request([("INPUT0", "FP32", a)],
                                    outputs=[{"name": "OUTPUT0",
                                              "parameters": {"binary_data": True}}])
        reqs.append(raw_request("/v2/models/big/infer", body, hdrs))

    def check(f, a):
        status, body = read_answer(f)
        assert status.startswith(b"HTTP/1.1 200"), (status, body[:300])
        assert body[-a.nbytes:] == a.tobytes()

    raw = socket.create_connection(("127.0.0.1", srv.http_port), timeout=TIMEOUT)
    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
        f = s.makefile("rb")
        # One at a time, then six in one write (pipelined: 1.5 MB of records
        # that arrive while the server still answers the first).
        s.sendall(reqs[0])
        check(f, arrays[0])
        s.sendall(b"".join(reqs))
        for a in arrays:
            check(f, a)
        # Trickled: 7 bytes a TLS record, each its own write.
        small = raw_request("/v2/models/add_sub/infer",
                            json.dumps(add_sub_body(*(np.ones((1, 16), np.float32),) * 2)).encode(),
                            {"Content-Type": "application/json"})
        for i in range(0, len(small), 7):
            s.sendall(small[i:i + 7])
        status, body = read_answer(f)
        assert status.startswith(b"HTTP/1.1 200"), (status, body)
        assert json.loads(body)["outputs"][0]["data"] == [2.0] * 16
        # close_notify: the server ends the connection (its own close_notify
        # or the socket's end, then EOF), whatever was said before.
        s.sendall(reqs[1])
        check(f, arrays[1])
        try:
            plain = s.unwrap()  # sends close_notify, waits for the server's
            assert plain.recv(1) == b""
        except (ssl.SSLError, ConnectionResetError):
            pass  # the server closed the socket without its own close_notify
    https_infer(srv, pki, client_cert(pki) if srv.mutual else None)


def test_https_client_certificate(srv, pki):
    """With --http-ssl-client-ca a client without a certificate, or with one
    the CA did not sign, is refused in the handshake; without it, none is
    asked for."""
    if not srv.mutual:
        https_infer(srv, pki, None)
        return
    for cert in (None, (str(pki / "server.pem"), str(pki / "other.key"))):
        with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError,
                            ssl.SSLError, OSError)):
            requests.get(f"{srv.url}/v2/health/ready", verify=str(pki / "ca.pem"), cert=cert,
                         timeout=TIMEOUT)
    https_infer(srv, pki, client_cert(pki))


def test_grpc_tls(pb, srv, pki):
    with grpc_channel(srv, pki, with_cert=srv.mutual) as ch:
        grpc_infer(pb, ch)
    # Plaintext gRPC to the TLS port does not get through.
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}") as ch:
        with pytest.raises(grpc.RpcError) as e:
            pb.svc_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.svc.ServerLiveRequest(),
                                                                timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    if srv.mutual:
        # --grpc-use-ssl-mutual: no client certificate, no call.
        with grpc_channel(srv, pki, with_cert=False) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb.svc_grpc.GRPCInferenceServiceStub(ch).ServerLive(
                    pb.svc.ServerLiveRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc_channel(srv, pki, with_cert=srv.mutual) as ch:
        grpc_infer(pb, ch)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_speaks_tls(srv, pki, infd_bin, tmp_path, protocol):
    port = srv.http_port if protocol == "http" else srv.grpc_port
    out = tmp_path / "perf.csv"
    args = [str(infd_bin), "perf", "--model", "add_sub", "--url", f"127.0.0.1:{port}",
            "--protocol", protocol, "--ssl", "--ssl-ca", pki / "ca.pem", "--request-count", 100,
            "--warmup-ms", 20, "--csv", out]
    if srv.mutual:
        args += ["--ssl-cert", pki / "client.pem", "--ssl-key", pki / "client.key"]
    r = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert int(rows[0]["Requests"]) == 100 and int(rows[0]["Errors"]) == 0, rows
    # Without --ssl-ca the server's CA is not trusted: every request fails.
    bad = [a for a in args if a not in ("--ssl-ca", str(pki / "ca.pem"))]
    r = subprocess.run(list(map(str, bad)) + ["--measurement-ms", "300"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr


@pytest.mark.parametrize("case", ["missing_cert", "key_mismatch", "not_pem", "grpc_no_root",
                                  "grpc_no_key", "http_key_only"])
def test_bad_tls_options_stop_the_start(serve, repo, pki, tmp_path, case):
    """A TLS file that is missing, not PEM or a key that is not the
    certificate's stops the server at start with a message naming it."""
    junk = tmp_path / "junk.pem"
    junk.write_text("this is not a certificate\n")
    args, needle = {
        "missing_cert": (["--http-ssl-cert", tmp_path / "nope.pem", "--http-ssl-key",
                          pki / "server.key"], f"'{tmp_path / 'nope.pem'}': No such file"),
        "key_mismatch": (["--http-ssl-cert", pki / "server.pem", "--http-ssl-key",
                          pki / "other.key"], "key values mismatch"),
        "not_pem": (["--grpc-use-ssl", "true", "--grpc-server-cert", junk, "--grpc-server-key",
                     pki / "server.key"], f"TLS certificate '{junk}'"),
        "grpc_no_root": (["--grpc-use-ssl-mutual", "true", "--grpc-server-cert",
                          pki / "server.pem", "--grpc-server-key", pki / "server.key"],
                         "needs --grpc-root-cert"),
        "grpc_no_key": (["--grpc-use-ssl", "true", "--grpc-server-cert", pki / "server.pem"],
                        "TLS needs both a certificate and a key"),
        "http_key_only": (["--http-ssl-key", pki / "server.key"],
                          "TLS needs both a certificate and a key"),
    }[case]
    srv = serve(repo, *args, wait_ready=False)
    rc = srv.wait()
    assert rc != 0, srv.log()
    srv.expected_returncode = rc
    assert needle in srv.log(), srv.log()
