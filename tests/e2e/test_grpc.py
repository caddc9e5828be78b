"""End-to-end tests of the gRPC frontend (KServe v2 `inference.GRPCInferenceService`
and `grpc.health.v1.Health`) against a real `infd serve`, with Debian's grpcio.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_grpc.py

The Python stubs are generated at test time from our proto/ files with
protoc and grpc_python_plugin (Debian protobuf-compiler, protobuf-compiler-grpc),
so the tests check the protocol as a Triton or KServe client compiles it.
Most tests share one server (module fixture `srv`); tests that need other
flags start their own. Outputs are compared with the HTTP endpoint's answer
to the same request, or with values computed here. No assertion depends on
timing.
"""

import concurrent.futures
import csv
import importlib
import json
import pathlib
import queue
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

grpc = pytest.importorskip("grpc")

import repo as model_repo  # noqa: E402
from serving import Server  # noqa: E402

TIMEOUT = 60  # seconds one call may take on a loaded 2-core box
MAX_MSG = 64 << 20
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MSG),
                   ("grpc.max_send_message_length", MAX_MSG)]


# -- stubs ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """The generated modules: pb.svc (grpc_service_pb2), pb.svc_grpc, pb.health,
    pb.health_grpc, pb.config (model_config_pb2)."""
    plugin = shutil.which("grpc_python_plugin")
    if not shutil.which("protoc") or not plugin:
        pytest.skip("protoc / grpc_python_plugin not installed (protobuf-compiler, "
                    "protobuf-compiler-grpc)")
    out = tmp_path_factory.mktemp("grpc_stubs")
    proto = pathlib.Path(__file__).resolve().parents[2] / "proto"
    subprocess.run(["protoc", f"--python_out={out}", f"--grpc_python_out={out}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", f"-I{proto}",
                    str(proto / "grpc_service.proto"), str(proto / "model_config.proto"),
                    str(proto / "health.proto")], check=True)
    sys.path.insert(0, str(out))

    class Modules:
        svc = importlib.import_module("grpc_service_pb2")
        svc_grpc = importlib.import_module("grpc_service_pb2_grpc")
        health = importlib.import_module("health_pb2")
        health_grpc = importlib.import_module("health_pb2_grpc")
        config = importlib.import_module("model_config_pb2")
    return Modules


def channel(server):
    return grpc.insecure_channel(f"{server.host}:{server.grpc_port}", options=CHANNEL_OPTIONS)


def stub(pb, server):
    return pb.svc_grpc.GRPCInferenceServiceStub(channel(server))


# -- helpers -------------------------------------------------------------------


def bf16_bits(a):
    """float32 array -> bfloat16 bit patterns (round to nearest even)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def infer_request(pb, model, inputs, raw=True, outputs=None, rid="", version="", params=None):
    """A ModelInferRequest; inputs: [(name, datatype, array)]. raw=False puts
    the values in each input's typed `contents`."""
    r = pb.svc.ModelInferRequest(model_name=model, model_version=version, id=rid)
    for name, dt, a in inputs:
        t = r.inputs.add(name=name, datatype=dt, shape=list(a.shape))
        if raw:
            r.raw_input_contents.append(np.ascontiguousarray(a).tobytes())
        else:
            field = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
                     "INT32": "int_contents", "UINT8": "uint_contents",
                     "UINT16": "uint_contents", "UINT32": "uint_contents",
                     "INT64": "int64_contents", "UINT64": "uint64_contents",
                     "FP32": "fp32_contents", "FP64": "fp64_contents"}[dt]
            getattr(t.contents, field).extend(a.ravel().tolist())
    for o in outputs or []:
        r.outputs.add(name=o)
    for k, v in (params or {}).items():
        if isinstance(v, bool):
            r.parameters[k].bool_param = v
        elif isinstance(v, int):
            r.parameters[k].int64_param = v
        else:
            r.parameters[k].string_param = v
    return r


def outputs_of(resp, np_types=None):
    """{name: np.ndarray} of a ModelInferResponse's raw outputs."""
    assert len(resp.raw_output_contents) == len(resp.outputs)
    out = {}
    for o, raw in zip(resp.outputs, resp.raw_output_contents):
        dt = (np_types or {}).get(o.name) or model_repo.np_dtype(o.datatype) or np.uint16
        out[o.name] = np.frombuffer(raw, dtype=dt).reshape(list(o.shape))
    return out


def add_sub_inputs(a, b):
    return [("INPUT0", "FP32", a), ("INPUT1", "FP32", b)]


def http_binary_infer(server, model, inputs):
    """The HTTP endpoint's binary outputs for the same inputs: {name: bytes}."""
    hdr = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": d,
                       "parameters": {"binary_data_size": a.nbytes}} for n, d, a in inputs],
           "parameters": {"binary_data_output": True}}
    text = json.dumps(hdr).encode()
    body = text + b"".join(np.ascontiguousarray(a).tobytes() for _, _, a in inputs)
    r = requests.post(f"{server.url}/v2/models/{model}/infer", data=body, timeout=TIMEOUT,
                      headers={"Inference-Header-Content-Length": str(len(text))})
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    meta, rest, off, out = json.loads(r.content[:n]), r.content[n:], 0, {}
    for o in meta["outputs"]:
        size = o["parameters"]["binary_data_size"]
        out[o["name"]] = (o, rest[off:off + size])
        off += size
    return out


def expect_rpc_error(fn, code, needle=None):
    with pytest.raises(grpc.RpcError) as e:
        fn()
    assert e.value.code() == code, (e.value.code(), e.value.details())
    if needle:
        assert needle in (e.value.details() or ""), e.value.details()
    return e.value.details()


def assert_alive(pb, server):
    st = stub(pb, server)
    assert st.ServerLive(pb.svc.ServerLiveRequest(), timeout=TIMEOUT).live
    a = np.ones((1, 16), np.float32)
    r = st.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, a)), timeout=TIMEOUT)
    assert np.array_equal(outputs_of(r)["OUTPUT0"], 2 * a)


def queue_depth(server, model):
    """Requests waiting in `model`'s queue, from the metrics endpoint."""
    text = requests.get(server.metrics_url, timeout=TIMEOUT).text
    m = re.search(r'^infd_inference_queue_depth\{[^}]*model="%s"[^}]*\} (\S+)$' % model, text,
                  re.M)
    return float(m.group(1)) if m else 0.0


def wait_until(what, fn, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# -- the shared server ------------------------------------------------------------


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    models = tmp_path_factory.mktemp("grpc") / "models"
    model_repo.add_sub(models)
    model_repo.add_sub(models, name="add_sub_batch", max_batch_size=8,
                       dynamic_batching={"max_queue_delay_microseconds": 20000})
    model_repo.add_sub(models, name="add_sub_nobatch", max_batch_size=0)
    # A batch of one waits up to 2 s for company: a short deadline expires
    # while the request is queued.
    model_repo.add_sub(models, name="add_sub_slow", max_batch_size=8,
                       dynamic_batching={"max_queue_delay_microseconds": 2000000})
    for dt in model_repo.IDENTITY_DTYPES:
        model_repo.identity(models, dtype=dt)
    # One 1x3x640x640 FP32 tensor (4.9 MB): above gRPC's default 4 MB limit.
    model_repo.identity(models, name="identity_big", dtype="FP32", dims=(3, 640, 640),
                        max_batch_size=1)
    return models


@pytest.fixture(scope="module")
def srv(infd_bin, repo):
    s = Server(infd_bin, repo)
    yield s
    rc = s.stop()
    s.cleanup()
    assert rc == 0, f"infd serve exited with {rc}"


# -- health and metadata -------------------------------------------------------------


def test_health_and_server_metadata(pb, srv):
    st = stub(pb, srv)
    assert st.ServerLive(pb.svc.ServerLiveRequest(), timeout=TIMEOUT).live is True
    assert st.ServerReady(pb.svc.ServerReadyRequest(), timeout=TIMEOUT).ready is True
    md = st.ServerMetadata(pb.svc.ServerMetadataRequest(), timeout=TIMEOUT)
    http = requests.get(srv.url + "/v2", timeout=TIMEOUT).json()
    assert md.name == http["name"] and md.version == http["version"]
    assert list(md.extensions) == http["extensions"]

    health = pb.health_grpc.HealthStub(channel(srv))
    serving = pb.health.HealthCheckResponse.SERVING
    for service in ("", "inference.GRPCInferenceService"):
        r = health.Check(pb.health.HealthCheckRequest(service=service), timeout=TIMEOUT)
        assert r.status == serving
    expect_rpc_error(lambda: health.Check(pb.health.HealthCheckRequest(service="nope"),
                                          timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND, "nope")
    expect_rpc_error(lambda: list(health.Watch(pb.health.HealthCheckRequest(), timeout=TIMEOUT)),
                     grpc.StatusCode.UNIMPLEMENTED)


def test_model_metadata_matches_http(pb, srv):
    st = stub(pb, srv)
    for model in ("add_sub", "add_sub_nobatch", "identity_bf16"):
        md = st.ModelMetadata(pb.svc.ModelMetadataRequest(name=model), timeout=TIMEOUT)
        http = requests.get(f"{srv.url}/v2/models/{model}", timeout=TIMEOUT).json()
        assert md.name == http["name"] and md.platform == http["platform"]
        assert list(md.versions) == http["versions"]
        for got, want in ((md.inputs, http["inputs"]), (md.outputs, http["outputs"])):
            assert [(t.name, t.datatype, list(t.shape)) for t in got] == \
                [(t["name"], t["datatype"], t["shape"]) for t in want]
    md = st.ModelMetadata(pb.svc.ModelMetadataRequest(name="add_sub", version="1"),
                          timeout=TIMEOUT)
    assert list(md.inputs[0].shape) == [-1, 16]
    expect_rpc_error(lambda: st.ModelMetadata(pb.svc.ModelMetadataRequest(name="nope"),
                                              timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND, "nope")
    expect_rpc_error(lambda: st.ModelMetadata(pb.svc.ModelMetadataRequest(name="add_sub",
                                                                          version="7"),
                                              timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND)
    expect_rpc_error(lambda: st.ModelMetadata(pb.svc.ModelMetadataRequest(name="add_sub",
                                                                          version="x"),
                                              timeout=TIMEOUT),
                     grpc.StatusCode.INVALID_ARGUMENT, "version")


def test_model_ready_and_config(pb, srv):
    from google.protobuf import json_format
    st = stub(pb, srv)
    assert st.ModelReady(pb.svc.ModelReadyRequest(name="add_sub"), timeout=TIMEOUT).ready
    assert st.ModelReady(pb.svc.ModelReadyRequest(name="add_sub", version="1"),
                         timeout=TIMEOUT).ready
    # As Triton: an unknown model is not ready (not an error).
    assert not st.ModelReady(pb.svc.ModelReadyRequest(name="nope"), timeout=TIMEOUT).ready
    for model in ("add_sub", "add_sub_batch", "identity_int8"):
        cfg = st.ModelConfig(pb.svc.ModelConfigRequest(name=model), timeout=TIMEOUT).config
        http = requests.get(f"{srv.url}/v2/models/{model}/config", timeout=TIMEOUT).json()
        got = json_format.MessageToDict(cfg, preserving_proto_field_name=True)
        assert cfg.name == model
        for key in ("name", "max_batch_size", "backend", "platform"):
            assert got.get(key) == http.get(key), key
        assert [i.name for i in cfg.input] == [i["name"] for i in http["input"]]
        assert [list(i.dims) for i in cfg.input] == \
            [[int(d) for d in i["dims"]] for i in http["input"]]
        assert [i.name for i in cfg.output] == [o["name"] for o in http["output"]]
        assert cfg.HasField("dynamic_batching") == ("dynamic_batching" in http)
    cfg = st.ModelConfig(pb.svc.ModelConfigRequest(name="add_sub_batch"), timeout=TIMEOUT).config
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 20000
    assert cfg.input[0].data_type == pb.config.TYPE_FP32
    expect_rpc_error(lambda: st.ModelConfig(pb.svc.ModelConfigRequest(name="nope"),
                                            timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND)


# -- inference -------------------------------------------------------------------------


def test_infer_add_sub(pb, srv):
    st = stub(pb, srv)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 16)).astype(np.float32)
    b = rng.standard_normal((3, 16)).astype(np.float32)
    r = st.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, b), rid="q-1"),
                      timeout=TIMEOUT)
    assert (r.model_name, r.model_version, r.id) == ("add_sub", "1", "q-1")
    assert [(o.name, o.datatype, list(o.shape)) for o in r.outputs] == \
        [("OUTPUT0", "FP32", [3, 16]), ("OUTPUT1", "FP32", [3, 16])]
    out = outputs_of(r)
    assert np.array_equal(out["OUTPUT0"], a + b) and np.array_equal(out["OUTPUT1"], a - b)
    http = http_binary_infer(srv, "add_sub", add_sub_inputs(a, b))
    for raw, o in zip(r.raw_output_contents, r.outputs):
        assert raw == http[o.name][1]
    # Typed contents in: the same outputs (always raw, as Triton answers).
    r2 = st.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, b), raw=False),
                       timeout=TIMEOUT)
    assert list(r2.raw_output_contents) == list(r.raw_output_contents)
    # One output asked for; a non-batching model; an explicit version.
    r3 = st.ModelInfer(infer_request(pb, "add_sub_nobatch",
                                     add_sub_inputs(a[0].copy(), b[0].copy()),
                                     outputs=["OUTPUT1"], version="1"), timeout=TIMEOUT)
    assert [o.name for o in r3.outputs] == ["OUTPUT1"] and list(r3.outputs[0].shape) == [16]
    assert np.array_equal(outputs_of(r3)["OUTPUT1"], a[0] - b[0])


def test_infer_blazeface_matches_http(pb, srv, serve, tmp_path, cache_dir):
    if not model_repo.blazeface_source(cache_dir).is_file():
        pytest.skip("BlazeFace is not in the npm cache (scripts/fetch_npm.sh)")
    models = tmp_path / "models"
    model_repo.add_sub(models)
    model_repo.blazeface(models, cache_dir)
    s = serve(models)
    st = stub(pb, s)
    rng = np.random.default_rng(7)
    for batch in (1, 3):
        img = rng.uniform(-1, 1, (batch, 128, 128, 3)).astype(np.float32)
        inputs = [("input:0", "FP32", img)]
        r = st.ModelInfer(infer_request(pb, "blazeface", inputs), timeout=TIMEOUT)
        http = http_binary_infer(s, "blazeface", inputs)
        assert [o.name for o in r.outputs] == list(http)
        for o, raw in zip(r.outputs, r.raw_output_contents):
            meta, want = http[o.name]
            assert list(o.shape) == meta["shape"] and o.datatype == meta["datatype"]
            got = np.frombuffer(raw, np.float32)
            assert np.allclose(got, np.frombuffer(want, np.float32), rtol=1e-5, atol=1e-5)
        scores = outputs_of(r)["Identity:0"]
        assert scores.shape == (batch, 512, 1) and np.isfinite(scores).all()


DTYPE_VALUES = {
    "BOOL": [True, False, True, True, False, False, True, False],
    "UINT8": [0, 1, 127, 255, 3, 4, 5, 6],
    "UINT16": [0, 1, 65535, 300, 3, 4, 5, 6],
    "UINT32": [0, 1, 4294967295, 70000, 3, 4, 5, 6],
    "UINT64": [0, 1, 18446744073709551615, 2 ** 40, 3, 4, 5, 6],
    "INT8": [-128, 127, 0, -1, 3, 4, 5, 6],
    "INT16": [-32768, 32767, 0, -1, 3, 4, 5, 6],
    "INT32": [-2147483648, 2147483647, 0, -1, 3, 4, 5, 6],
    "INT64": [-(2 ** 63), 2 ** 63 - 1, 0, -1, 3, 4, 5, 6],
    "FP16": [0.5, -2.0, 65504.0, 1e-3, 3, 4, 5, 6],
    "BF16": [0.5, -2.0, 3.0e38, 1e-3, 3, 4, 5, 6],
    "FP32": [0.1, -2.5, 3.4e38, 1e-45, 3, 4, 5, 6],
    "FP64": [0.1, -2.5, 1e300, 5e-324, 3, 4, 5, 6],
}


def dtype_array(dt):
    vals = DTYPE_VALUES[dt]
    if dt == "BF16":
        return bf16_bits(np.array(vals, np.float32)).reshape(2, 4)
    return np.array(vals, dtype=model_repo.np_dtype(dt)).reshape(2, 4)


@pytest.mark.parametrize("dt", model_repo.IDENTITY_DTYPES)
def test_identity_every_datatype(pb, srv, dt):
    st = stub(pb, srv)
    model = f"identity_{dt.lower()}"
    arr = dtype_array(dt)
    raw = st.ModelInfer(infer_request(pb, model, [("INPUT0", dt, arr)]), timeout=TIMEOUT)
    assert raw.outputs[0].datatype == dt and list(raw.outputs[0].shape) == [2, 4]
    assert raw.raw_output_contents[0] == arr.tobytes()
    if dt in ("FP16", "BF16"):
        # No typed field exists for 16-bit floats: raw only.
        bad = infer_request(pb, model, [("INPUT0", dt, arr)])
        del bad.raw_input_contents[:]
        bad.inputs[0].contents.fp32_contents.extend([1.0] * 8)
        expect_rpc_error(lambda: st.ModelInfer(bad, timeout=TIMEOUT),
                         grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents")
        return
    typed = st.ModelInfer(infer_request(pb, model, [("INPUT0", dt, arr)], raw=False),
                          timeout=TIMEOUT)
    assert typed.raw_output_contents[0] == arr.tobytes()


def test_typed_contents_errors(pb, srv):
    st = stub(pb, srv)
    # Out of range for the datatype.
    r = infer_request(pb, "identity_uint8", [("INPUT0", "UINT8", np.zeros((1, 4), np.uint8))],
                      raw=False)
    r.inputs[0].contents.uint_contents[2] = 300
    expect_rpc_error(lambda: st.ModelInfer(r, timeout=TIMEOUT),
                     grpc.StatusCode.INVALID_ARGUMENT, "out of range for UINT8")
    # Element count vs shape.
    r = infer_request(pb, "identity_int32", [("INPUT0", "INT32", np.zeros((1, 4), np.int32))],
                      raw=False)
    r.inputs[0].contents.int_contents.append(5)
    expect_rpc_error(lambda: st.ModelInfer(r, timeout=TIMEOUT),
                     grpc.StatusCode.INVALID_ARGUMENT, "int_contents has 5 elements")
    # Values in another type's field.
    r = infer_request(pb, "identity_int32", [("INPUT0", "INT32", np.zeros((1, 4), np.int32))],
                      raw=False)
    r.inputs[0].contents.ClearField("int_contents")
    r.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4])
    expect_rpc_error(lambda: st.ModelInfer(r, timeout=TIMEOUT),
                     grpc.StatusCode.INVALID_ARGUMENT, "int_contents")
    assert_alive(pb, srv)


def test_infer_errors(pb, srv):
    st = stub(pb, srv)
    a = np.ones((1, 16), np.float32)
    expect_rpc_error(lambda: st.ModelInfer(infer_request(pb, "nope", add_sub_inputs(a, a)),
                                           timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND, "nope")
    bad = np.ones((1, 15), np.float32)
    msg = expect_rpc_error(lambda: st.ModelInfer(infer_request(pb, "add_sub",
                                                               add_sub_inputs(a, bad)),
                                                 timeout=TIMEOUT),
                           grpc.StatusCode.INVALID_ARGUMENT, "INPUT1")
    assert "15" in msg or "60" in msg, msg
    cases = [
        (infer_request(pb, "add_sub", [("INPUT0", "FP32", a)]), "INPUT1"),
        (infer_request(pb, "add_sub", add_sub_inputs(a, a), outputs=["NOPE"]), "NOPE"),
        (infer_request(pb, "add_sub", [("INPUT0", "FP32", a), ("INPUT1", "FP3", a)]), "FP3"),
        (infer_request(pb, "add_sub", [("INPUT0", "FP32", a), ("INPUT1", "INT32",
                                                               a.view(np.int32))]), "INPUT1"),
        (infer_request(pb, "add_sub", add_sub_inputs(a, a), version="0"), "version"),
        (infer_request(pb, "add_sub", add_sub_inputs(a, a), params={"priority": "high"}),
         "priority"),
        (infer_request(pb, "add_sub", add_sub_inputs(np.ones((9, 16), np.float32),
                                                     np.ones((9, 16), np.float32))), "9"),
    ]
    for req, needle in cases:
        expect_rpc_error(lambda: st.ModelInfer(req, timeout=TIMEOUT),
                         grpc.StatusCode.INVALID_ARGUMENT, needle)
    # Raw contents: one per input.
    req = infer_request(pb, "add_sub", add_sub_inputs(a, a))
    del req.raw_input_contents[1]
    expect_rpc_error(lambda: st.ModelInfer(req, timeout=TIMEOUT),
                     grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents")
    # Not a ModelInferRequest at all.
    raw_call = channel(srv).unary_unary("/inference.GRPCInferenceService/ModelInfer")
    expect_rpc_error(lambda: raw_call(b"\x0f\xff\xff", timeout=TIMEOUT),
                     grpc.StatusCode.INVALID_ARGUMENT, "malformed")
    unknown = channel(srv).unary_unary("/inference.GRPCInferenceService/Trace")
    expect_rpc_error(lambda: unknown(b"", timeout=TIMEOUT), grpc.StatusCode.UNIMPLEMENTED)
    assert_alive(pb, srv)


def test_deadline_expires_in_queue(pb, srv):
    """A deadline shorter than the batcher's wait: the call ends with
    DEADLINE_EXCEEDED and the request is never executed."""
    st = stub(pb, srv)
    a = np.ones((1, 16), np.float32)

    def stats():
        r = st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub_slow"),
                               timeout=TIMEOUT)
        return r.model_stats[0]

    before = stats()
    expect_rpc_error(lambda: st.ModelInfer(infer_request(pb, "add_sub_slow",
                                                         add_sub_inputs(a, a)), timeout=0.2),
                     grpc.StatusCode.DEADLINE_EXCEEDED)
    # The runtime drops it from the queue at its timeout (the deadline).
    wait_until("the expired request to be counted",
               lambda: stats().inference_stats.fail.count == before.inference_stats.fail.count + 1)
    after = stats()
    assert after.execution_count == before.execution_count
    assert after.inference_count == before.inference_count
    # A request parameter timeout (microseconds) works the same way.
    msg = expect_rpc_error(lambda: st.ModelInfer(infer_request(pb, "add_sub_slow",
                                                               add_sub_inputs(a, a),
                                                               params={"timeout": 1000}),
                                                 timeout=TIMEOUT),
                           grpc.StatusCode.DEADLINE_EXCEEDED)
    assert msg
    assert stats().execution_count == before.execution_count


def test_large_tensor_default_limit(pb, srv):
    """A 1x3x640x640 FP32 tensor (4.9 MB) fits the default 64 MiB limit."""
    st = stub(pb, srv)
    x = np.random.default_rng(3).standard_normal((1, 3, 640, 640)).astype(np.float32)
    r = st.ModelInfer(infer_request(pb, "identity_big", [("INPUT0", "FP32", x)]), timeout=TIMEOUT)
    assert r.raw_output_contents[0] == x.tobytes()


def test_large_tensors_are_not_copied(pb, serve, tmp_path):
    """4.9 MB tensors over unary calls and a stream: gRPC core hands each
    message over in many slices, and the frontend reads the raw input from
    them where they lie and writes the output in place (no pinned pool: a
    CPU model). A build with assertions counts every payload byte copied and
    the server logs the count at exit: none of 64 KiB or more. A release
    build has no counter."""
    models = tmp_path / "models"
    model_repo.identity(models, name="identity_big", dtype="FP32", dims=(3, 640, 640),
                        max_batch_size=4)
    s = serve(models)
    st = stub(pb, s)
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((rows, 3, 640, 640)).astype(np.float32) for rows in (1, 2, 1)]
    for x in xs:
        r = st.ModelInfer(infer_request(pb, "identity_big", [("INPUT0", "FP32", x)]),
                          timeout=TIMEOUT)
        assert r.raw_output_contents[0] == x.tobytes()
    got = list(st.ModelStreamInfer(iter([infer_request(pb, "identity_big",
                                                       [("INPUT0", "FP32", x)]) for x in xs]),
                                   timeout=TIMEOUT))
    assert [g.error_message for g in got] == [""] * 3
    assert [g.infer_response.raw_output_contents[0] for g in got] == [x.tobytes() for x in xs]
    assert s.stop() == 0
    m = re.search(r"payload bytes copied: \d+ \((\d+) in copies of 65536 bytes or more\)",
                  s.log())
    if m is None:
        pytest.skip("a release build counts no copies (the ASan run of make test does)")
    assert int(m.group(1)) == 0, s.log()[-3000:]


def test_compressed_messages_and_threads(pb, serve, tmp_path):
    """Gzip-compressed requests (the server decompresses, then reads raw
    inputs from one buffer) and several completion-queue threads."""
    models = tmp_path / "models"
    model_repo.add_sub(models)
    s = serve(models, "--grpc-threads", 3)
    ch = grpc.insecure_channel(f"{s.host}:{s.grpc_port}", options=CHANNEL_OPTIONS,
                               compression=grpc.Compression.Gzip)
    st = pb.svc_grpc.GRPCInferenceServiceStub(ch)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    r = st.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, a)), timeout=TIMEOUT)
    assert np.array_equal(outputs_of(r)["OUTPUT0"], 2 * a)

    def one(i):
        x = np.full((1, 16), i, np.float32)
        rr = stub(pb, s).ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(x, x)),
                                    timeout=TIMEOUT)
        return np.array_equal(outputs_of(rr)["OUTPUT0"], 2 * x)

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(one, range(64)))


def test_grpc_port_in_use(pb, serve, tmp_path):
    """A gRPC port that is taken (by another infd too) stops the server with
    a message naming the address."""
    models = tmp_path / "models"
    model_repo.add_sub(models)
    first = serve(models)
    srv = serve(models, "--grpc-port", first.grpc_port, wait_ready=False)
    rc = srv.wait()
    assert rc != 0, srv.log()
    srv.expected_returncode = rc
    assert f"cannot listen on 127.0.0.1:{first.grpc_port}" in srv.log(), srv.log()
    assert_alive(pb, first)


def test_message_over_limit(pb, serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    model_repo.identity(models, name="identity_big", dtype="FP32", dims=(3, 640, 640),
                        max_batch_size=1)
    s = serve(models, "--grpc-max-message-bytes", str(1 << 20))
    st = stub(pb, s)
    x = np.zeros((1, 3, 640, 640), np.float32)
    expect_rpc_error(lambda: st.ModelInfer(infer_request(pb, "identity_big",
                                                         [("INPUT0", "FP32", x)]),
                                           timeout=TIMEOUT),
                     grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert_alive(pb, s)


# -- streaming -----------------------------------------------------------------------


def test_stream_100_interleaved(pb, srv):
    """100 requests on one stream over three models and batch sizes 1..4;
    responses come back as they complete, each matched by its id."""
    st = stub(pb, srv)
    rng = np.random.default_rng(5)
    want, reqs = {}, []
    for i in range(100):
        rid = f"s{i}"
        kind = i % 3
        rows = 1 + (i * 7) % 4
        if kind == 2:
            x = rng.integers(-1000, 1000, (rows, 4)).astype(np.int32)
            reqs.append(infer_request(pb, "identity_int32", [("INPUT0", "INT32", x)], rid=rid,
                                      raw=i % 2 == 0))
            want[rid] = ("identity_int32", {"OUTPUT0": x})
        else:
            model = "add_sub" if kind == 0 else "add_sub_batch"
            a = rng.standard_normal((rows, 16)).astype(np.float32)
            b = rng.standard_normal((rows, 16)).astype(np.float32)
            reqs.append(infer_request(pb, model, add_sub_inputs(a, b), rid=rid))
            want[rid] = (model, {"OUTPUT0": a + b, "OUTPUT1": a - b})
    got = {}
    for resp in st.ModelStreamInfer(iter(reqs), timeout=TIMEOUT):
        assert resp.error_message == "", resp.error_message
        r = resp.infer_response
        assert r.id not in got, r.id
        got[r.id] = r
    assert set(got) == set(want)
    for rid, (model, outs) in want.items():
        r = got[rid]
        assert r.model_name == model and r.model_version == "1"
        out = outputs_of(r)
        assert set(out) == set(outs)
        for name, x in outs.items():
            assert np.array_equal(out[name], x), (rid, name)


def test_stream_burst(pb, srv):
    """1000 requests sent as fast as the client can: past STREAM_MAX_PENDING
    (256) in flight the server pauses reading the stream and resumes as
    responses go out; every request is answered once."""
    st = stub(pb, srv)
    reqs = []
    for i in range(1000):
        a = np.full((1, 16), i, np.float32)
        reqs.append(infer_request(pb, "add_sub_batch", add_sub_inputs(a, a), rid=str(i)))
    seen = set()
    for resp in st.ModelStreamInfer(iter(reqs), timeout=TIMEOUT):
        assert resp.error_message == "", resp.error_message
        i = int(resp.infer_response.id)
        assert i not in seen
        seen.add(i)
        assert outputs_of(resp.infer_response)["OUTPUT0"][0, 0] == 2 * i
    assert seen == set(range(1000))


def test_stream_errors_keep_the_stream(pb, srv):
    st = stub(pb, srv)
    a = np.ones((1, 16), np.float32)
    reqs = [
        infer_request(pb, "add_sub", add_sub_inputs(a, a), rid="ok1"),
        infer_request(pb, "nope", add_sub_inputs(a, a), rid="bad-model"),
        infer_request(pb, "add_sub", add_sub_inputs(a, np.ones((1, 3), np.float32)),
                      rid="bad-shape"),
        infer_request(pb, "add_sub", add_sub_inputs(a, 2 * a), rid="ok2"),
    ]
    resps = {r.infer_response.id: r for r in st.ModelStreamInfer(iter(reqs), timeout=TIMEOUT)}
    assert set(resps) == {"ok1", "bad-model", "bad-shape", "ok2"}
    assert "nope" in resps["bad-model"].error_message
    assert "INPUT1" in resps["bad-shape"].error_message
    assert resps["bad-shape"].infer_response.model_name == "add_sub"
    assert resps["ok1"].error_message == "" and resps["ok2"].error_message == ""
    assert np.array_equal(outputs_of(resps["ok2"].infer_response)["OUTPUT0"], 3 * a)


def test_stream_interactive(pb, srv):
    """Send one request, read its response, send the next: the stream answers
    each as it completes without waiting for the client to finish."""
    st = stub(pb, srv)
    q = queue.Queue()
    it = st.ModelStreamInfer(iter(q.get, None), timeout=TIMEOUT)
    for i in range(5):
        a = np.full((1, 16), i, np.float32)
        q.put(infer_request(pb, "add_sub", add_sub_inputs(a, a), rid=str(i)))
        r = next(it)
        assert r.infer_response.id == str(i)
        assert np.array_equal(outputs_of(r.infer_response)["OUTPUT0"], 2 * a)
    q.put(None)
    assert list(it) == []


def test_grpc_and_http_batch_together(pb, srv):
    """gRPC and HTTP requests for one model meet in one batch: 4 + 4 rows
    fill add_sub_slow's max_batch_size 8, which runs them at once."""
    st = stub(pb, srv)

    def executions():
        r = st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub_slow"),
                               timeout=TIMEOUT)
        return r.model_stats[0].execution_count

    before = executions()
    xs = [np.full((1, 16), i, np.float32) for i in range(8)]
    futs = [st.ModelInfer.future(infer_request(pb, "add_sub_slow", add_sub_inputs(x, x)),
                                 timeout=TIMEOUT) for x in xs[:4]]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        http = list(ex.map(lambda x: http_binary_infer(srv, "add_sub_slow",
                                                       add_sub_inputs(x, x)), xs[4:]))
    for x, f in zip(xs[:4], futs):
        assert np.array_equal(outputs_of(f.result())["OUTPUT0"], 2 * x)
    for x, h in zip(xs[4:], http):
        assert np.frombuffer(h["OUTPUT0"][1], np.float32).tolist() == (2 * x).ravel().tolist()
    assert executions() == before + 1


def test_clients_cancel_with_requests_in_flight(pb, srv):
    """A stream and a unary call cancelled while their requests wait in the
    queue: the requests still complete inside the server, their answers go
    nowhere, and the server carries on."""
    st = stub(pb, srv)
    a = np.ones((1, 16), np.float32)

    def successes():
        r = st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub_slow"),
                               timeout=TIMEOUT)
        return r.model_stats[0].inference_stats.success.count

    before = successes()
    q = queue.Queue()
    call = st.ModelStreamInfer(iter(q.get, None), timeout=TIMEOUT)
    for i in range(5):
        q.put(infer_request(pb, "add_sub_slow", add_sub_inputs(a, a), rid=str(i)))
    fut = st.ModelInfer.future(infer_request(pb, "add_sub_slow", add_sub_inputs(a, a)),
                               timeout=TIMEOUT)
    wait_until("the requests to be queued", lambda: queue_depth(srv, "add_sub_slow") >= 6)
    call.cancel()
    fut.cancel()
    q.put(None)
    wait_until("the cancelled requests to complete", lambda: successes() >= before + 6)
    assert_alive(pb, srv)


def test_many_concurrent_streams(pb, srv):
    """Hundreds of streams open at once on one channel, each with requests in
    flight: no thread per call on the server."""
    import grpc.aio  # noqa: F401
    import asyncio

    n_streams = 300

    async def main():
        async with grpc.aio.insecure_channel(f"{srv.host}:{srv.grpc_port}",
                                             options=CHANNEL_OPTIONS) as ch:
            st = pb.svc_grpc.GRPCInferenceServiceStub(ch)
            calls = [st.ModelStreamInfer(timeout=TIMEOUT) for _ in range(n_streams)]
            for i, call in enumerate(calls):
                a = np.full((1, 16), i, np.float32)
                await call.write(infer_request(pb, "add_sub_batch", add_sub_inputs(a, a),
                                               rid=str(i)))
            results = []
            for i, call in enumerate(calls):
                r = await call.read()
                results.append((i, r))
                await call.done_writing()
                assert await call.read() == grpc.aio.EOF
            return results

    for i, r in asyncio.run(main()):
        assert r.error_message == "" and r.infer_response.id == str(i)
        assert np.array_equal(outputs_of(r.infer_response)["OUTPUT0"],
                              np.full((1, 16), 2 * i, np.float32))


# -- statistics and repository -------------------------------------------------------------


def test_statistics_and_index(pb, srv):
    st = stub(pb, srv)
    a = np.ones((2, 16), np.float32)
    st.ModelInfer(infer_request(pb, "add_sub_nobatch", add_sub_inputs(a[0], a[0])),
                  timeout=TIMEOUT)
    r = st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub_nobatch"),
                           timeout=TIMEOUT)
    http = requests.get(f"{srv.url}/v2/models/add_sub_nobatch/stats", timeout=TIMEOUT).json()
    assert len(r.model_stats) == 1
    ms, hs = r.model_stats[0], http["model_stats"][0]
    assert (ms.name, ms.version) == (hs["name"], hs["version"])
    assert ms.inference_count == hs["inference_count"] >= 1
    assert ms.execution_count == hs["execution_count"] >= 1
    assert ms.inference_stats.success.count == hs["inference_stats"]["success"]["count"]
    assert [b.batch_size for b in ms.batch_stats] == [b["batch_size"] for b in hs["batch_stats"]]
    every = st.ModelStatistics(pb.svc.ModelStatisticsRequest(), timeout=TIMEOUT)
    assert {m.name for m in every.model_stats} >= {"add_sub", "add_sub_nobatch", "identity_fp32"}
    one = st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub", version="1"),
                             timeout=TIMEOUT)
    assert [(m.name, m.version) for m in one.model_stats] == [("add_sub", "1")]
    expect_rpc_error(lambda: st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="nope"),
                                                timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND)

    idx = st.RepositoryIndex(pb.svc.RepositoryIndexRequest(), timeout=TIMEOUT)
    http = requests.post(f"{srv.url}/v2/repository/index", timeout=TIMEOUT).json()
    assert [(m.name, m.version, m.state) for m in idx.models] == \
        [(m["name"], m.get("version", ""), m["state"]) for m in http]
    ready = st.RepositoryIndex(pb.svc.RepositoryIndexRequest(ready=True), timeout=TIMEOUT)
    assert all(m.state == "READY" for m in ready.models)
    # Load/unload need explicit model control.
    expect_rpc_error(lambda: st.RepositoryModelLoad(
        pb.svc.RepositoryModelLoadRequest(model_name="add_sub"), timeout=TIMEOUT),
        grpc.StatusCode.UNAVAILABLE)


def test_queue_full_resource_exhausted(pb, serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models, dynamic_batching={
        "max_queue_delay_microseconds": 1000000,
        "default_queue_policy": {"max_queue_size": 2}})
    s = serve(models)
    st = stub(pb, s)
    a = np.ones((1, 16), np.float32)

    def one(_):
        try:
            st.ModelInfer(infer_request(pb, "add_sub", add_sub_inputs(a, a)), timeout=TIMEOUT)
            return "OK", ""
        except grpc.RpcError as e:
            return e.code().name, e.details()

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(8)))
    codes = {c for c, _ in results}
    assert "OK" in codes and "RESOURCE_EXHAUSTED" in codes, results
    assert codes <= {"OK", "RESOURCE_EXHAUSTED"}, results
    assert all("queue" in d for c, d in results if c != "OK"), results


def test_load_unload_explicit(pb, serve, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models)
    model_repo.identity(models, dtype="INT32")
    s = serve(models, "--model-control-mode", "explicit", "--load-model", "identity_int32")
    st = stub(pb, s)
    a = np.ones((1, 16), np.float32)
    rows = {m.name: m for m in st.RepositoryIndex(pb.svc.RepositoryIndexRequest(),
                                                  timeout=TIMEOUT).models}
    assert rows["identity_int32"].state == "READY" and rows["add_sub"].state != "READY"
    req = infer_request(pb, "add_sub", add_sub_inputs(a, a))
    with pytest.raises(grpc.RpcError) as e:
        st.ModelInfer(req, timeout=TIMEOUT)
    assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
    assert not st.ModelReady(pb.svc.ModelReadyRequest(name="add_sub"), timeout=TIMEOUT).ready

    st.RepositoryModelLoad(pb.svc.RepositoryModelLoadRequest(model_name="add_sub"),
                           timeout=TIMEOUT)
    assert st.ModelReady(pb.svc.ModelReadyRequest(name="add_sub"), timeout=TIMEOUT).ready
    assert np.array_equal(outputs_of(st.ModelInfer(req, timeout=TIMEOUT))["OUTPUT0"], 2 * a)
    st.RepositoryModelUnload(pb.svc.RepositoryModelUnloadRequest(model_name="add_sub"),
                             timeout=TIMEOUT)
    assert not st.ModelReady(pb.svc.ModelReadyRequest(name="add_sub"), timeout=TIMEOUT).ready
    with pytest.raises(grpc.RpcError) as e:
        st.ModelInfer(req, timeout=TIMEOUT)
    assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
    expect_rpc_error(lambda: st.RepositoryModelLoad(
        pb.svc.RepositoryModelLoadRequest(model_name="nope"), timeout=TIMEOUT),
        grpc.StatusCode.NOT_FOUND, "nope")
    expect_rpc_error(lambda: st.RepositoryModelLoad(
        pb.svc.RepositoryModelLoadRequest(model_name=""), timeout=TIMEOUT),
        grpc.StatusCode.INVALID_ARGUMENT)
    st.RepositoryModelLoad(pb.svc.RepositoryModelLoadRequest(model_name="add_sub"),
                           timeout=TIMEOUT)
    assert np.array_equal(outputs_of(st.ModelInfer(req, timeout=TIMEOUT))["OUTPUT0"], 2 * a)


def test_sigterm_with_open_stream(pb, serve, tmp_path):
    """An idle stream does not keep the server from stopping: SIGTERM ends
    it (the client sees the stream end) and infd exits 0."""
    models = tmp_path / "models"
    model_repo.add_sub(models)
    s = serve(models)
    st = stub(pb, s)
    q = queue.Queue()
    it = st.ModelStreamInfer(iter(q.get, None), timeout=TIMEOUT)
    a = np.ones((1, 16), np.float32)
    q.put(infer_request(pb, "add_sub", add_sub_inputs(a, a), rid="x"))
    assert next(it).infer_response.id == "x"
    s.proc.send_signal(signal.SIGTERM)
    ended = threading.Event()

    def drain():
        try:
            for _ in it:
                pass
        except grpc.RpcError:
            pass
        ended.set()

    t = threading.Thread(target=drain)
    t.start()
    assert s.wait(timeout=30) == 0
    q.put(None)
    t.join(timeout=TIMEOUT)
    assert ended.is_set()


# -- infd perf --protocol grpc ---------------------------------------------------------


def run_perf(infd_bin, *args):
    return subprocess.run([str(infd_bin), "perf", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def perf_rows(stdout):
    """(concurrency, requests, errors) of each table row."""
    table = [ln.split() for ln in stdout.splitlines() if ln.strip()[:1].isdigit()]
    return [(int(t[0]), int(t[1]), int(t[2])) for t in table]


@pytest.mark.parametrize("mode", ["unary", "streaming", "unary over 3 channels"])
def test_perf_grpc_counts_add_up(pb, serve, infd_bin, tmp_path, mode):
    models = tmp_path / "models"
    model_repo.add_sub(models, dynamic_batching={"max_queue_delay_microseconds": 200})
    s = serve(models)
    st = stub(pb, s)

    def successes():
        r = st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub"), timeout=TIMEOUT)
        return r.model_stats[0].inference_stats.success.count

    before = successes()
    out = tmp_path / "perf.csv"
    extra = {"streaming": ["--streaming"], "unary over 3 channels": ["--grpc-channels", 3]}
    r = run_perf(infd_bin, "--protocol", "grpc", *extra.get(mode, []),
                 "--url", f"127.0.0.1:{s.grpc_port}", "--model", "add_sub", "--batch-size", 2,
                 "--concurrency-range", "1:3:2", "--request-count", 100, "--warmup-ms", 50,
                 "--csv", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"grpc ({mode.split()[0]})" in r.stdout, r.stdout
    assert perf_rows(r.stdout) == [(1, 100, 0), (3, 100, 0)], r.stdout
    rows = list(csv.DictReader(open(out, newline="")))
    total = sum(int(row["Total Requests"]) for row in rows)
    assert all(int(row["Total Errors"]) == 0 for row in rows), rows
    # Every request perf sent, warmup included, reached the server and succeeded.
    assert successes() - before == total


def test_perf_grpc_rpc_live(pb, serve, infd_bin, tmp_path):
    """--rpc live: unary ServerLive calls (bench/serve_grpc.py's baseline),
    no inference reaches the model; only with unary gRPC."""
    models = tmp_path / "models"
    model_repo.add_sub(models)
    s = serve(models)
    st = stub(pb, s)

    def successes():
        r = st.ModelStatistics(pb.svc.ModelStatisticsRequest(name="add_sub"), timeout=TIMEOUT)
        return r.model_stats[0].inference_stats.success.count

    before = successes()
    url = f"127.0.0.1:{s.grpc_port}"
    r = run_perf(infd_bin, "--protocol", "grpc", "--rpc", "live", "--url", url,
                 "--model", "add_sub", "--concurrency-range", "1:2", "--request-count", 100,
                 "--warmup-ms", 50)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "grpc (unary ServerLive)" in r.stdout, r.stdout
    assert perf_rows(r.stdout) == [(1, 100, 0), (2, 100, 0)], r.stdout
    assert successes() == before
    for bad in (["--streaming"], ["--protocol", "http"], ["--rpc", "ready"]):
        args = ["--protocol", "grpc", "--rpc", "live", "--url", url, "--model", "add_sub"] + bad
        assert run_perf(infd_bin, *args).returncode == 2, bad


def test_perf_grpc_errors(pb, serve, infd_bin, tmp_path):
    models = tmp_path / "models"
    model_repo.add_sub(models, max_batch_size=0)
    s = serve(models)
    url = f"127.0.0.1:{s.grpc_port}"
    # An unknown model fails at the ModelMetadata call.
    r = run_perf(infd_bin, "--protocol", "grpc", "--url", url, "--model", "nope",
                 "--request-count", 5)
    assert r.returncode == 1 and "nope" in r.stderr, r.stderr
    # A batch the model does not take, and options of other protocols.
    r = run_perf(infd_bin, "--protocol", "grpc", "--url", url, "--model", "add_sub",
                 "--batch-size", 2)
    assert r.returncode == 1 and "does not batch" in r.stderr, r.stderr
    r = run_perf(infd_bin, "--protocol", "grpc", "--url", url, "--model", "add_sub", "--binary")
    assert r.returncode == 2
    r = run_perf(infd_bin, "--streaming", "--url", url, "--model", "add_sub")
    assert r.returncode == 2
    r = run_perf(infd_bin, "--grpc-channels", 2, "--url", url, "--model", "add_sub")
    assert r.returncode == 2 and "--grpc-channels is a gRPC option" in r.stderr, r.stderr
    r = run_perf(infd_bin, "--protocol", "grpc", "--grpc-channels", 0, "--url", url,
                 "--model", "add_sub")
    assert r.returncode == 2 and "--grpc-channels" in r.stderr, r.stderr
