"""Processor plugins (backend "plugin", include/infd/plugin.h): a shared
library named by config.pbtxt, served as a model like any other (batched,
with statistics), BYTES tensors through it over HTTP, gRPC and the Python
client, and bad plugins refused with clear messages while the server keeps
serving. The plugins are tests/plugins/*.c, built into
build/<preset>/plugins/.
"""

import concurrent.futures
import json
import pathlib
import shutil
import sys

import numpy as np
import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import infd.http as httpclient  # noqa: E402


@pytest.fixture
def plugins(infd_bin):
    d = pathlib.Path(infd_bin).resolve().parent / "plugins"
    lib = d / "libinfd_test_plugin.so"
    if not lib.exists():
        pytest.fail(f"{lib} is missing: build the tests (cmake --build --preset release)")
    return d


def plugin_model(root, name, library, op=None, factor=None, max_batch=8, delay_us=20000,
                 extra=""):
    d = pathlib.Path(root) / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    params = f'parameters {{ key: "library" value {{ string_value: "{library}" }} }}\n'
    if op:
        params += f'parameters {{ key: "op" value {{ string_value: "{op}" }} }}\n'
    if factor is not None:
        params += f'parameters {{ key: "factor" value {{ string_value: "{factor}" }} }}\n'
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "plugin"\nmax_batch_size: {max_batch}\n' + params +
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n" + extra)
    return d


def make_plugin_repo(root, plugins):
    lib = plugins / "libinfd_test_plugin.so"
    plugin_model(root, "scale", str(lib), "scale", factor=3)
    # A relative library path: found in the model folder.
    d = plugin_model(root, "upper", "libinfd_test_plugin.so", "upper")
    shutil.copy(lib, d / "libinfd_test_plugin.so")
    plugin_model(root, "no_lib", "libmissing.so", "scale")
    plugin_model(root, "no_symbol", str(plugins / "libinfd_no_symbol.so"), "scale")
    plugin_model(root, "bad_op", str(lib), "frobnicate")
    plugin_model(root, "no_param", "", None)
    (root / "not_a_lib").mkdir()
    return root


@pytest.fixture
def plugin_repo(tmp_path, plugins):
    return make_plugin_repo(tmp_path / "repo", plugins)


def infer_scale(url, x, model="scale"):
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": list(x.shape),
                        "data": x.flatten().tolist()}]}
    return requests.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)


def test_plugin_models_serve_batch_and_fail_clearly(serve, plugin_repo):
    srv = serve(plugin_repo)
    r = infer_scale(srv.url, np.array([[1.0, 2.0, 4.0]], np.float32))
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["name"] == "Y" and out["shape"] == [1, 3] and out["data"] == [3.0, 6.0, 12.0]
    md = requests.get(f"{srv.url}/v2/models/scale", timeout=10).json()
    assert md["platform"] == "infd_plugin"
    assert md["inputs"][0]["name"] == "X" and md["outputs"][0]["name"] == "Y"

    # Concurrent requests batch together (the batcher waits 20 ms for more).
    xs = [np.full((1, 4), k, np.float32) for k in range(1, 17)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        rs = list(pool.map(lambda x: infer_scale(srv.url, x), xs))
    for x, r in zip(xs, rs):
        assert r.status_code == 200 and r.json()["outputs"][0]["data"] == (x * 3).flatten().tolist()
    st = requests.get(f"{srv.url}/v2/models/scale/stats", timeout=10).json()["model_stats"][0]
    assert st["inference_count"] == 17
    assert st["execution_count"] < 17
    assert max(b["batch_size"] for b in st["batch_stats"]) > 1

    # A request the plugin refuses fails alone, with the plugin's message.
    r = infer_scale(srv.url, np.array([[-1.0, 5.0]], np.float32))
    assert r.status_code == 400 and "refuses an X that starts with -1" in r.json()["error"]
    assert infer_scale(srv.url, np.array([[5.0]], np.float32)).status_code == 200

    # Models whose plugin cannot be used are UNAVAILABLE with the reason.
    index = {m["name"]: m for m in requests.post(f"{srv.url}/v2/repository/index", json={},
                                                 timeout=10).json()}
    reasons = {
        "no_lib": "plugin library 'libmissing.so' not found",
        "no_symbol": "has no infd_plugin_kind()",
        "bad_op": "unknown op 'frobnicate'",
        "no_param": 'needs parameters { key: "library"',
    }
    for name, why in reasons.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert why in index[name]["reason"], (name, index[name]["reason"])
    assert "plugin 'test_plugin'" in index["bad_op"]["reason"]
    r = infer_scale(srv.url, np.ones((1, 2), np.float32), model="no_symbol")
    assert r.status_code in (400, 503) and "no_symbol" in r.json()["error"]
    # ... and the others keep serving.
    assert infer_scale(srv.url, np.ones((1, 2), np.float32)).status_code == 200


def test_bytes_tensors_through_a_plugin_on_every_frontend(serve, plugin_repo):
    srv = serve(plugin_repo)
    words = ["hello", "infd", "", "Déjà vu"]
    # HTTP JSON: BYTES elements are strings.
    r = requests.post(f"{srv.url}/v2/models/upper/infer", json={"inputs": [
        {"name": "TEXT", "datatype": "BYTES", "shape": [1, 4], "data": words}]}, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["datatype"] == "BYTES" and out["shape"] == [1, 4]
    assert out["data"] == ["HELLO", "INFD", "", "DéJà VU"]  # ASCII letters only (C toupper)
    # HTTP binary extension, through the Python client.
    c = httpclient.InferenceServerClient(f"{srv.host}:{srv.http_port}")
    t = httpclient.InferInput("TEXT", [2, 2], "BYTES")
    t.set_data_from_numpy(np.array([[b"ab", b"c"], [b"", b"xyz"]], dtype=np.object_))
    res = c.infer("upper", [t])
    assert res.as_numpy("UPPER").tolist() == [[b"AB", b"C"], [b"", b"XYZ"]]
    # gRPC.
    grpcclient = pytest.importorskip("infd.grpc")
    g = grpcclient.InferenceServerClient(f"{srv.host}:{srv.grpc_port}")
    t = grpcclient.InferInput("TEXT", [1, 3], "BYTES")
    t.set_data_from_numpy(np.array([[b"a", b"bb", b"ccc"]], dtype=np.object_))
    assert g.infer("upper", [t]).as_numpy("UPPER").tolist() == [[b"A", b"BB", b"CCC"]]
    # A malformed BYTES body (a length past the end) is refused clearly.
    head = b'{"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1,1],' \
           b'"parameters":{"binary_data_size":6}}]}'
    r = requests.post(f"{srv.url}/v2/models/upper/infer", data=head + b"\x09\0\0\0ab",
                      headers={"Inference-Header-Content-Length": str(len(head))}, timeout=30)
    assert r.status_code == 400 and "BYTES" in r.json()["error"]


def test_plugin_in_the_embedded_server(tmp_path):
    """libinfd.so in this process (infd.embedded) serves a plugin too: it is
    loaded RTLD_GLOBAL, so the plugin finds the host's infd_* functions. The
    plugins are the ones built with that library (an ASan build's would
    need the ASan runtime in this process)."""
    import infd.embedded as embedded
    plugins = pathlib.Path(embedded.library_path()).resolve().parent / "plugins"
    if not (plugins / "libinfd_test_plugin.so").exists():
        pytest.fail(f"{plugins}/libinfd_test_plugin.so is missing: build the release preset")
    repo_dir = make_plugin_repo(tmp_path / "repo", plugins)
    with embedded.Server(repo_dir, n_threads=1) as srv:
        out = srv.infer("scale", {"X": np.array([[1.5, -2.0]], np.float32)})
        np.testing.assert_array_equal(out["Y"], np.array([[4.5, -6.0]], np.float32))
        text = np.array([[b"abc", b"D"]], dtype=np.object_)
        assert srv.infer("upper", {"TEXT": text})["UPPER"].tolist() == [[b"ABC", b"D"]]


def test_binary_inputs_at_any_offset(serve, tmp_path):
    """Binary tensor data after a JSON header of any length starts at any
    address; a model kind still reads its floats at an aligned one
    (infd_request_input copies a piece that is not). fuzz_http found it:
    under UBSan the built-in softmax read floats at an odd address. make
    test runs this file under ASan+UBSan too."""
    d = tmp_path / "repo" / "sm"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(
        'backend: "softmax"\nmax_batch_size: 0\n'
        'parameters { key: "classes" value { string_value: "4" } }\n')
    srv = serve(tmp_path / "repo")
    x = np.array([1, 2, 3, 4], np.float32)
    want = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    for pad in range(8):
        hdr = json.dumps({"inputs": [{"name": "LOGITS", "shape": [4], "datatype": "FP32",
                                      "parameters": {"binary_data_size": 16}}]})
        hdr = (hdr[:-1] + " " * pad + "}").encode()
        r = requests.post(f"{srv.url}/v2/models/sm/infer", data=hdr + x.tobytes(), timeout=30,
                          headers={"Inference-Header-Content-Length": str(len(hdr)),
                                   "Content-Type": "application/octet-stream"})
        assert r.status_code == 200, (pad, r.text)
        got = np.array(r.json()["outputs"][0]["data"], np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-6)
