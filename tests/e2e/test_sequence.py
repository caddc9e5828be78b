"""Triton's sequence batcher with an ONNX model (issue #21): control inputs
(START, END, READY, CORRID) and implicit state, over KServe v2 HTTP, against
a real `infd serve`.

The model is an accumulator: ACC_OUT = ACC_IN * (1 - START) + INPUT * READY,
OUTPUT = ACC_OUT, ENDED = END, CORR = CORRID. ACC_IN/ACC_OUT are the
sequence's implicit state (config.pbtxt `state`), which the server keeps per
sequence slot and zeroes at START; the clients never see them. So each
response's OUTPUT is the running sum of its sequence's inputs, whatever the
interleaving of sequences and however they are batched, and the controls
reach the model with the values config.pbtxt gives them.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_sequence.py
"""

import concurrent.futures

import numpy as np
import pytest
import requests
from onnx import TensorProto, helper

import repo as model_repo

TIMEOUT = 60


def accumulator(path, max_batch_size):
    b = ["batch"] if max_batch_size > 0 else []
    vi = helper.make_tensor_value_info
    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("Cast", ["START"], ["start_f"], to=f32),
        helper.make_node("Cast", ["END"], ["end_f"], to=f32),
        helper.make_node("Sub", ["one", "start_f"], ["keep"]),
        helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"]),
        helper.make_node("Mul", ["INPUT", "READY"], ["add"]),
        helper.make_node("Add", ["kept", "add"], ["ACC_OUT"]),
        helper.make_node("Identity", ["ACC_OUT"], ["OUTPUT"]),
        helper.make_node("Identity", ["end_f"], ["ENDED"]),
        helper.make_node("Identity", ["CORRID"], ["CORR"]),
    ]
    graph = helper.make_graph(
        nodes, "accumulator",
        [vi("INPUT", f32, b + [4]), vi("START", TensorProto.INT32, b + [1]),
         vi("END", TensorProto.BOOL, b + [1]), vi("READY", f32, b + [1]),
         vi("CORRID", TensorProto.UINT64, b + [1]), vi("ACC_IN", f32, b + [4])],
        [vi("OUTPUT", f32, b + [4]), vi("ENDED", f32, b + [1]), vi("CORR", TensorProto.UINT64, b + [1]),
         vi("ACC_OUT", f32, b + [4])],
        initializer=[helper.make_tensor("one", f32, [1], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="infd-tests")
    model_repo._save(model, path)


CONTROLS = """
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },
    { name: "END" control [{ kind: CONTROL_SEQUENCE_END bool_false_true: [false, true] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] }] },
    { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }
  ]
  state [{ input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_FP32 dims: [4] }]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory, infd_bin):
    from serving import Server, stop_all
    repo = tmp_path_factory.mktemp("seq_repo")
    accumulator(repo / "acc" / "1" / "model.onnx", 8)
    model_repo.write_config(repo / "acc", f"""max_batch_size: 8
sequence_batching {{
  oldest {{ max_candidate_sequences: 8 max_queue_delay_microseconds: 20000 }}
{CONTROLS}}}
instance_group [{{ kind: KIND_CPU count: 2 }}]
""")
    accumulator(repo / "acc_direct" / "1" / "model.onnx", 4)
    model_repo.write_config(repo / "acc_direct", f"""max_batch_size: 4
sequence_batching {{
  direct {{ max_queue_delay_microseconds: 20000 }}
{CONTROLS}}}
""")
    # a state output listed as a client output: refused with a message
    accumulator(repo / "bad_listed" / "1" / "model.onnx", 4)
    model_repo.write_config(repo / "bad_listed", f"""max_batch_size: 4
output [{{ name: "ACC_OUT" data_type: TYPE_FP32 dims: [4] }}]
sequence_batching {{
{CONTROLS}}}
""")
    # a control whose type is not the model input's
    accumulator(repo / "bad_type" / "1" / "model.onnx", 4)
    model_repo.write_config(repo / "bad_type", f"""max_batch_size: 4
sequence_batching {{
{CONTROLS.replace("int32_false_true", "fp32_false_true")}}}
""")
    s = Server(infd_bin, repo)
    yield s
    problems = stop_all([s])
    assert not problems, problems


def infer(srv, model, seq, values, start=False, end=False, expect=200):
    body = {"parameters": {"sequence_id": seq, "sequence_start": start, "sequence_end": end},
            "inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 4],
                        "data": [float(v) for v in values]}]}
    r = requests.post(f"{srv.url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == expect, r.text
    if expect != 200:
        return r.json()["error"]
    return {o["name"]: o["data"] for o in r.json()["outputs"]}


@pytest.mark.parametrize("model", ["acc", "acc_direct"])
def test_state_and_controls_per_sequence(srv, model):
    # the client sees only INPUT and the outputs that are not state
    meta = requests.get(f"{srv.url}/v2/models/{model}", timeout=TIMEOUT).json()
    assert [i["name"] for i in meta["inputs"]] == ["INPUT"]
    assert sorted(o["name"] for o in meta["outputs"]) == ["CORR", "ENDED", "OUTPUT"]
    rng = np.random.default_rng(3)
    n_seq, n_req = 6, 5
    vals = rng.integers(-5, 6, size=(n_seq, n_req, 4)).astype(float)

    def session(s):
        seq = 1000 + s
        outs = []
        for k in range(n_req):
            outs.append(infer(srv, model, seq, vals[s, k], start=k == 0, end=k == n_req - 1))
        return outs

    with concurrent.futures.ThreadPoolExecutor(n_seq) as ex:
        results = list(ex.map(session, range(n_seq)))
    for s, outs in enumerate(results):
        sums = np.cumsum(vals[s], axis=0)
        for k, o in enumerate(outs):
            assert o["OUTPUT"] == list(sums[k]), (s, k)
            assert o["ENDED"] == [1.0 if k == n_req - 1 else 0.0]
            assert o["CORR"] == [1000 + s]
    # START zeroes the state: the same id again starts from nothing
    out = infer(srv, model, 1000, [1, 2, 3, 4], start=True, end=True)
    assert out["OUTPUT"] == [1, 2, 3, 4]


def test_a_string_id_reaches_corrid_as_zero(srv):
    out = infer(srv, "acc", "session-a", [1, 1, 1, 1], start=True)
    assert out["CORR"] == [0]
    out = infer(srv, "acc", "session-a", [1, 1, 1, 1], end=True)
    assert out["OUTPUT"] == [2, 2, 2, 2]


def test_clients_cannot_send_controls_or_state(srv):
    body = {"parameters": {"sequence_id": 5, "sequence_start": True, "sequence_end": True},
            "inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4},
                       {"name": "ACC_IN", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}
    r = requests.post(f"{srv.url}/v2/models/acc/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 400 and "no input 'ACC_IN'" in r.json()["error"]
    body["inputs"] = body["inputs"][:1]
    body["outputs"] = [{"name": "ACC_OUT"}]
    r = requests.post(f"{srv.url}/v2/models/acc/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 400 and "no output 'ACC_OUT'" in r.json()["error"]


def test_bad_sequence_configs_say_why(srv):
    idx = requests.post(f"{srv.url}/v2/repository/index", json={}, timeout=TIMEOUT).json()
    reasons = {m["name"]: m.get("reason", "") for m in idx}
    assert "'ACC_OUT' is a sequence_batching state's output_name" in reasons["bad_listed"]
    assert "control_input[0]" in reasons["bad_type"] and "START" in reasons["bad_type"]
    assert requests.get(f"{srv.url}/v2/models/acc/ready", timeout=TIMEOUT).status_code == 200
