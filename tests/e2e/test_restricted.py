"""Access control with Triton's syntax (issue #24):
--http-restricted-api and --grpc-restricted-protocol <apis>:<key>=<value>,
and --metrics-restricted-api <key>=<value>. A request to a restricted API
group needs the header `<key>: <value>` (HTTP, metrics) or the metadata
`triton-grpc-protocol-<key>: <value>` (gRPC); without it: 403 or
PERMISSION_DENIED, naming the header and never the value. Other groups stay
open. Clients: requests, grpcio, and `infd perf -H`.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_restricted.py
"""

import subprocess

import numpy as np
import pytest
import requests

grpc = pytest.importorskip("grpc")

import repo as model_repo  # noqa: E402
from serving import Server  # noqa: E402
from test_grpc import CHANNEL_OPTIONS, add_sub_inputs, infer_request, outputs_of, pb  # noqa: E402,F401
from test_http import add_sub_body  # noqa: E402

TIMEOUT = 30
ADMIN = "s3cret-admin-value"
INFER = "infer-value-42"
METRICS = "metrics-value-7"


@pytest.fixture(scope="module")
def srv(infd_bin, tmp_path_factory):
    models = tmp_path_factory.mktemp("restricted") / "models"
    model_repo.add_sub(models)
    model_repo.identity(models, name="ident", dtype="FP32")
    s = Server(infd_bin, models, "--model-control-mode", "explicit", "--load-model", "*",
               "--http-restricted-api", f"model-repository,statistics,model-config:admin-key={ADMIN}",
               "--http-restricted-api", f"inference:infer-key={INFER}",
               "--grpc-restricted-protocol", f"model-repository,statistics:admin-key={ADMIN}",
               "--grpc-restricted-protocol", f"inference:infer-key={INFER}",
               "--metrics-restricted-api", f"metrics-key={METRICS}")
    yield s
    rc = s.stop()
    log = s.log()
    s.cleanup()
    assert rc == 0, f"infd serve exited with {rc}\n{log[-3000:]}"
    assert ADMIN not in log and INFER not in log and METRICS not in log


def refused(r, header):
    assert r.status_code == 403, (r.status_code, r.text)
    assert f"expecting header '{header}'" in r.text, r.text
    assert ADMIN not in r.text and INFER not in r.text and METRICS not in r.text


def test_http_groups(srv):
    u = srv.url
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    # Open groups: health, metadata.
    assert requests.get(u + "/v2/health/ready", timeout=TIMEOUT).status_code == 200
    assert requests.get(u + "/v2/models/add_sub/ready", timeout=TIMEOUT).status_code == 200
    assert requests.get(u + "/v2/models/add_sub", timeout=TIMEOUT).status_code == 200
    assert requests.get(u + "/v2", timeout=TIMEOUT).status_code == 200
    # inference: no header, a wrong value, a value one byte longer or shorter.
    for hdr in ({}, {"infer-key": "wrong"}, {"infer-key": INFER + "x"},
                {"infer-key": INFER[:-1]}, {"admin-key": ADMIN}):
        refused(requests.post(u + "/v2/models/add_sub/infer", json=add_sub_body(a, a),
                              headers=hdr, timeout=TIMEOUT), "infer-key")
    # The header's name is not case-sensitive (HTTP).
    for name in ("infer-key", "Infer-Key"):
        r = requests.post(u + "/v2/models/add_sub/infer", json=add_sub_body(a, a),
                          headers={name: INFER}, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
    # The versioned path is the same group.
    refused(requests.post(u + "/v2/models/add_sub/versions/1/infer", json=add_sub_body(a, a),
                          timeout=TIMEOUT), "infer-key")
    # statistics, model-config, model-repository need the admin key.
    for method, path in (("GET", "/v2/models/add_sub/stats"), ("GET", "/v2/models/stats"),
                         ("GET", "/v2/models/add_sub/config"),
                         ("POST", "/v2/repository/index"),
                         ("POST", "/v2/repository/models/ident/unload"),
                         ("POST", "/v2/repository/models/ident/load")):
        refused(requests.request(method, u + path, timeout=TIMEOUT), "admin-key")
        r = requests.request(method, u + path, headers={"admin-key": ADMIN}, timeout=TIMEOUT)
        assert r.status_code == 200, (path, r.text)
    # Shared memory is not restricted here (and not enabled): its own answer.
    assert requests.get(u + "/v2/systemsharedmemory/status", timeout=TIMEOUT).status_code != 403


def test_grpc_groups(pb, srv):
    with grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}", options=CHANNEL_OPTIONS) as ch:
        stub = pb.svc_grpc.GRPCInferenceServiceStub(ch)
        assert stub.ServerLive(pb.svc.ServerLiveRequest(), timeout=TIMEOUT).live
        assert stub.ModelMetadata(pb.svc.ModelMetadataRequest(name="add_sub"),
                                  timeout=TIMEOUT).name == "add_sub"
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        req = infer_request(pb, "add_sub", add_sub_inputs(a, a))
        for md in ((), (("triton-grpc-protocol-infer-key", "wrong"),),
                   (("infer-key", INFER),),
                   (("triton-grpc-protocol-admin-key", ADMIN),)):
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(req, metadata=md, timeout=TIMEOUT)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "triton-grpc-protocol-infer-key" in e.value.details()
            assert INFER not in e.value.details()
        ok = (("triton-grpc-protocol-infer-key", INFER),)
        out = stub.ModelInfer(req, metadata=ok, timeout=TIMEOUT)
        np.testing.assert_array_equal(outputs_of(out)["OUTPUT0"], 2 * a)
        # The stream is the same group: refused whole without the key.
        with pytest.raises(grpc.RpcError) as e:
            list(stub.ModelStreamInfer(iter([req]), timeout=TIMEOUT))
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        got = list(stub.ModelStreamInfer(iter([req]), metadata=ok, timeout=TIMEOUT))
        assert not got[0].error_message
        # statistics and repository
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub"), timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        stub.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub"), timeout=TIMEOUT,
                             metadata=(("triton-grpc-protocol-admin-key", ADMIN),))
        with pytest.raises(grpc.RpcError) as e:
            stub.RepositoryIndex(pb.svc.RepositoryIndexRequest(), timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # model-config is restricted on HTTP only in this server.
        stub.ModelConfig(pb.svc.ModelConfigRequest(name="add_sub"), timeout=TIMEOUT)


def test_metrics_restricted(srv):
    r = requests.get(srv.metrics_url, timeout=TIMEOUT)
    assert r.status_code == 403 and "expecting header 'metrics-key'" in r.text, r.text
    assert METRICS not in r.text
    r = requests.get(srv.metrics_url, headers={"metrics-key": METRICS}, timeout=TIMEOUT)
    assert r.status_code == 200 and "infd_inference_request_success" in r.text


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_sends_the_key(srv, infd_bin, protocol):
    port = srv.http_port if protocol == "http" else srv.grpc_port
    key = "infer-key" if protocol == "http" else "triton-grpc-protocol-infer-key"
    base = [str(infd_bin), "perf", "--model", "add_sub", "--url", f"127.0.0.1:{port}",
            "--protocol", protocol, "--request-count", "50", "--warmup-ms", "10"]
    r = subprocess.run(base + ["-H", f"{key}:{INFER}"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(base + ["--measurement-ms", "300"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr


@pytest.mark.parametrize("spec, needle", [
    ("inference", "expected <apis>:<key>=<value>"),
    ("inference:key", "expected <apis>:<key>=<value>"),
    ("everything:key=v", "unknown API 'everything'"),
    ("inference:bad key=v", "letters, digits"),
    ("inference:key=", "the value must be 1 to 255 bytes"),
])
def test_bad_rules_stop_the_start(serve, tmp_path, spec, needle):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    s = serve(models, "--http-restricted-api", spec, wait_ready=False)
    rc = s.wait()
    assert rc != 0
    s.expected_returncode = rc
    assert needle in s.log(), s.log()


def test_a_group_in_two_rules_is_refused_without_echoing_the_value(serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    s = serve(models, "--grpc-restricted-protocol", "inference:a=first-secret",
              "--grpc-restricted-protocol", "health,inference:b=second-secret", wait_ready=False)
    rc = s.wait()
    assert rc != 0
    s.expected_returncode = rc
    assert "'inference' is restricted twice" in s.log(), s.log()
    assert "secret" not in s.log()
