"""Ensembles (platform "ensemble", Triton's ensemble_scheduling): steps over
served models wired by tensor names. An ONNX model (add_sub) feeds a
processor plugin (tests/plugins/test_plugin.c, "scale"); the ensemble must
equal its steps run one by one, batch in its steps, pass BYTES along, and
refuse bad wiring and failing steps with messages that name the step.
"""

import concurrent.futures
import pathlib
import shutil

import numpy as np
import pytest
import requests

import repo

PIPE = """
name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "SCALED" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "DIFF" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "scale" model_version: -1
      input_map { key: "X" value: "sum" }
      output_map { key: "Y" value: "SCALED" } },
    { model_name: "add_sub" model_version: -1
      input_map { key: "INPUT0" value: "A" }
      input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "sum" }
      output_map { key: "OUTPUT1" value: "DIFF" } }
  ]
}
"""

SHOUT = """
name: "shout"
platform: "ensemble"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "LOUD" data_type: TYPE_STRING dims: [ -1 ] } ]
ensemble_scheduling { step [ { model_name: "upper" model_version: -1
  input_map { key: "TEXT" value: "TEXT" } output_map { key: "UPPER" value: "LOUD" } } ] }
"""


def bad(name, steps, outputs='{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }', extra=""):
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            f"output [ {outputs} ]\n{extra}ensemble_scheduling {{ step [ {steps} ] }}\n")


def step(model, ins, outs):
    m = "".join(f'input_map {{ key: "{k}" value: "{v}" }} ' for k, v in ins)
    m += "".join(f'output_map {{ key: "{k}" value: "{v}" }} ' for k, v in outs)
    return f'{{ model_name: "{model}" model_version: -1 {m}}}'


@pytest.fixture
def ens_repo(tmp_path, infd_bin):
    plugin = pathlib.Path(infd_bin).resolve().parent / "plugins" / "libinfd_test_plugin.so"
    if not plugin.exists():
        pytest.fail(f"{plugin} is missing: build the tests (cmake --build --preset release)")
    root = tmp_path / "repo"
    repo.add_sub(root, dynamic_batching={"max_queue_delay_microseconds": 2000})
    for name, op in (("scale", "scale"), ("upper", "upper")):
        d = root / name
        (d / "1").mkdir(parents=True)
        (d / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "plugin"\nmax_batch_size: 8\n'
            f'parameters {{ key: "library" value {{ string_value: "{plugin}" }} }}\n'
            f'parameters {{ key: "op" value {{ string_value: "{op}" }} }}\n'
            'parameters { key: "factor" value { string_value: "3" } }\n'
            "dynamic_batching { max_queue_delay_microseconds: 2000 }\n")
    for name, text in (("pipe", PIPE), ("shout", SHOUT),
                       ("cycle", bad("cycle", step("scale", [("X", "b")], [("Y", "a")]) + ", " +
                                     step("scale", [("X", "a")], [("Y", "b")]),
                                     '{ name: "a" data_type: TYPE_FP32 dims: [ -1 ] }')),
                       ("dangling", bad("dangling", step("scale", [("X", "nowhere")],
                                                         [("Y", "Y")]))),
                       ("no_output", bad("no_output", step("scale", [("X", "X")],
                                                           [("Y", "other")]))),
                       ("itself", bad("itself", step("itself", [("X", "X")], [("Y", "Y")]))),
                       ("grouped", bad("grouped", step("scale", [("X", "X")], [("Y", "Y")]),
                                       extra="instance_group [ { count: 2 kind: KIND_CPU } ]\n")),
                       ("ghost", bad("ghost", step("nope", [("X", "X")], [("Y", "Y")])))):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(text)
    return root


def infer(url, model, inputs):
    body = {"inputs": [{"name": n, "datatype": "FP32", "shape": list(a.shape),
                        "data": a.flatten().tolist()} for n, a in inputs.items()]}
    return requests.post(f"{url}/v2/models/{model}/infer", json=body, timeout=60)


def outputs(r):
    assert r.status_code == 200, r.text
    return {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
            for o in r.json()["outputs"]}


def test_ensemble_equals_its_steps_run_one_by_one(serve, ens_repo):
    srv = serve(ens_repo)
    rng = np.random.default_rng(5)
    a = rng.integers(-20, 20, (3, 16)).astype(np.float32)
    b = rng.integers(-20, 20, (3, 16)).astype(np.float32)
    got = outputs(infer(srv.url, "pipe", {"A": a, "B": b}))
    step1 = outputs(infer(srv.url, "add_sub", {"INPUT0": a, "INPUT1": b}))
    step2 = outputs(infer(srv.url, "scale", {"X": step1["OUTPUT0"]}))
    np.testing.assert_array_equal(got["SCALED"], step2["Y"])
    np.testing.assert_array_equal(got["DIFF"], step1["OUTPUT1"])
    np.testing.assert_array_equal(got["SCALED"], 3 * (a + b))
    md = requests.get(f"{srv.url}/v2/models/pipe", timeout=10).json()
    assert md["platform"] == "ensemble"


def test_ensemble_requests_batch_in_their_steps(serve, ens_repo):
    srv = serve(ens_repo)
    before = requests.get(f"{srv.url}/v2/models/add_sub/stats", timeout=10).json()
    xs = [np.full((1, 16), k, np.float32) for k in range(32)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        rs = list(pool.map(lambda x: infer(srv.url, "pipe", {"A": x, "B": x}), xs))
    for x, r in zip(xs, rs):
        np.testing.assert_array_equal(outputs(r)["SCALED"], 6 * x)
    after = requests.get(f"{srv.url}/v2/models/add_sub/stats", timeout=10).json()
    st0, st1 = before["model_stats"][0], after["model_stats"][0]
    runs = st1["execution_count"] - st0["execution_count"]
    rows = st1["inference_count"] - st0["inference_count"]
    assert rows == 32 and runs < 32, (rows, runs)
    pipe = requests.get(f"{srv.url}/v2/models/pipe/stats", timeout=10).json()["model_stats"][0]
    assert pipe["inference_count"] == 32


def test_bytes_pass_through_an_ensemble(serve, ens_repo):
    srv = serve(ens_repo)
    r = requests.post(f"{srv.url}/v2/models/shout/infer", json={"inputs": [
        {"name": "TEXT", "datatype": "BYTES", "shape": [2, 2], "data": ["ab", "c", "", "xyz"]}]},
        timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["name"] == "LOUD" and out["shape"] == [2, 2]
    assert out["data"] == ["AB", "C", "", "XYZ"]


def test_bad_ensembles_and_failing_steps_are_named(serve, ens_repo):
    srv = serve(ens_repo)
    index = {m["name"]: m for m in requests.post(f"{srv.url}/v2/repository/index", json={},
                                                 timeout=10).json()}
    reasons = {
        "cycle": "form a cycle",
        "dangling": "reads 'nowhere', which is neither an ensemble input nor any step's output",
        "no_output": "ensemble output 'Y' is not written by any step's output_map",
        "itself": "names the ensemble itself",
        "grouped": "and no instance_group, dynamic_batching or sequence_batching",
    }
    for name, why in reasons.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert why in index[name]["reason"], (name, index[name]["reason"])
    # A step model that is not served fails the request, naming the step.
    r = infer(srv.url, "ghost", {"X": np.ones((1, 2), np.float32)})
    assert r.status_code in (400, 404, 503)
    assert "ensemble 'ghost' step 0 (model 'nope')" in r.json()["error"]
    # A step that refuses a request: the ensemble request fails with its message.
    a = np.zeros((1, 16), np.float32)
    a[0, 0] = -1.0
    r = infer(srv.url, "pipe", {"A": a, "B": np.zeros((1, 16), np.float32)})
    assert r.status_code == 400
    assert "(model 'scale')" in r.json()["error"] and "refuses" in r.json()["error"]
    # A request the first step refuses (wrong shape) names that step.
    r = infer(srv.url, "pipe", {"A": np.ones((1, 16), np.float32),
                                "B": np.ones((1, 15), np.float32)})
    assert r.status_code == 400
    # ... and the ensemble still serves.
    x = np.ones((1, 16), np.float32)
    np.testing.assert_array_equal(outputs(infer(srv.url, "pipe", {"A": x, "B": x}))["SCALED"],
                                  6 * x)


def test_sigterm_lets_an_ensemble_request_in_flight_finish(serve, tmp_path):
    """The drain stops ensembles first: a request already accepted still
    runs its second step, submitted while the server drains (steps are
    accepted then), answers, and infd exits 0."""
    import threading
    import time

    from test_redis import slow_model
    root = tmp_path / "repo"
    slow_model(root)
    (root / "slowpipe" / "1").mkdir(parents=True)
    (root / "slowpipe" / "config.pbtxt").write_text(
        'name: "slowpipe"\nplatform: "ensemble"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1, 1 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "slow" model_version: -1 '
        'input_map { key: "X" value: "X" } output_map { key: "Y" value: "mid" } }, '
        '{ model_name: "slow" model_version: -1 '
        'input_map { key: "X" value: "mid" } output_map { key: "Y" value: "Y" } } ] }\n')
    srv = serve(root)
    result = {}

    def call():
        result["r"] = infer(srv.url, "slowpipe", {"X": np.full((1, 1), 2.0, np.float32)})

    t = threading.Thread(target=call)
    t.start()
    deadline = time.time() + 60
    while 'infd_inference_pending_request_count{model="slowpipe",version="1"} 1' not in \
            requests.get(srv.metrics_url, timeout=10).text:
        assert time.time() < deadline, "the ensemble request never arrived"
        time.sleep(0.01)
    assert srv.stop() == 0
    t.join(60)
    r = result["r"]
    assert r.status_code == 200, r.text
    assert abs(r.json()["outputs"][0]["data"][0] - 2.0) < 1e-3
