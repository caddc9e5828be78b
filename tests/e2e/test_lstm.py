"""ONNX LSTM on the CPU (issue #21: a Parakeet predictor is a 2-layer LSTM)
against ONNX Runtime, in every variant the op has: directions, biases,
initial state, sequence_lens, peepholes, layout 1, clip, input_forget, a
predictor-like 2-layer stack with one step, and a refusal of activations
other than the defaults.

Models are built here with onnx.helper, inputs with numpy; `infd run` and
ONNX Runtime (tools/ort_ref.js, npm onnxruntime-node) run them in separate
processes, and every output element must satisfy |a - b| <= 1e-5 + 1e-4 |b|.
The ONNX node test suite's four LSTM cases run in test_onnx_node_suite.py.
"""

import json
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

ATOL, RTOL = 1e-5, 1e-4


def lstm_model(path, seq, batch, inp, hid, direction="forward", bias=True, lens=None,
               initial=False, peep=False, layout=0, clip=None, input_forget=0, seed=0,
               activations=None):
    """One LSTM node with constant weights; graph inputs X (and the initial
    state when `initial`). Returns the feeds (name -> array)."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    w = rng.uniform(-0.5, 0.5, (dirs, 4 * hid, inp)).astype(np.float32)
    r = rng.uniform(-0.5, 0.5, (dirs, 4 * hid, hid)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")]
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits.append(numpy_helper.from_array(
            rng.uniform(-0.3, 0.3, (dirs, 8 * hid)).astype(np.float32), "B"))
        names[3] = "B"
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array(lens, np.int32), "L"))
        names[4] = "L"
    xshape = [batch, seq, inp] if layout else [seq, batch, inp]
    sshape = [batch, dirs, hid] if layout else [dirs, batch, hid]
    graph_in = [helper.make_tensor_value_info("X", TensorProto.FLOAT, xshape)]
    feeds = {"X": rng.standard_normal(xshape).astype(np.float32)}
    if initial:
        for k, n in ((5, "H0"), (6, "C0")):
            graph_in.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, sshape))
            feeds[n] = rng.uniform(-1, 1, sshape).astype(np.float32)
            names[k] = n
    if peep:
        inits.append(numpy_helper.from_array(
            rng.uniform(-0.5, 0.5, (dirs, 3 * hid)).astype(np.float32), "P"))
        names[7] = "P"
    while names and names[-1] == "":
        names.pop()
    attrs = {"hidden_size": hid, "direction": direction}
    if layout:
        attrs["layout"] = layout
    if clip is not None:
        attrs["clip"] = clip
    if input_forget:
        attrs["input_forget"] = input_forget
    if activations:
        attrs["activations"] = activations
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], **attrs)
    yshape = [batch, seq, dirs, hid] if layout else [seq, dirs, batch, hid]
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, yshape),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, sshape),
            helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, sshape)]
    g = helper.make_graph([node], "lstm", graph_in, outs, inits)
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return feeds


def predictor_model(path, vocab=33, emb=64, hid=64, seed=1):
    """A Parakeet-like predictor step: Gather(embedding) -> 2 stacked
    single-step LSTMs carrying (h, c) per layer, as the onnx-asr export."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.uniform(-0.3, 0.3, (vocab, emb)).astype(np.float32),
                                     "E")]
    nodes = [helper.make_node("Gather", ["E", "tok"], ["e"]),  # [1, 1, emb]
             helper.make_node("Transpose", ["e"], ["x0"], perm=[1, 0, 2])]
    x = "x0"
    for layer in range(2):
        i = emb if layer == 0 else hid
        for n, shp in ((f"W{layer}", (1, 4 * hid, i)), (f"R{layer}", (1, 4 * hid, hid)),
                       (f"B{layer}", (1, 8 * hid))):
            inits.append(numpy_helper.from_array(
                rng.uniform(-0.3, 0.3, shp).astype(np.float32), n))
        nodes.append(helper.make_node("LSTM", [x, f"W{layer}", f"R{layer}", f"B{layer}", "",
                                               f"h{layer}", f"c{layer}"],
                                      [f"y{layer}", f"ho{layer}", f"co{layer}"], hidden_size=hid))
        nodes.append(helper.make_node("Squeeze", [f"y{layer}", "ax1"], [f"x{layer + 1}"]))
        x = f"x{layer + 1}"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
    ins = [helper.make_tensor_value_info("tok", TensorProto.INT64, [1, 1])]
    feeds = {"tok": np.array([[7]], np.int64)}
    for layer in range(2):
        for n in (f"h{layer}", f"c{layer}"):
            ins.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, hid]))
            feeds[n] = rng.uniform(-1, 1, (1, 1, hid)).astype(np.float32)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("x2", "ho0", "co0", "ho1", "co1")]
    g = helper.make_graph(nodes, "predictor", ins, outs, inits)
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return feeds


def run_both(infd_bin, repo_root, model, feeds, tmp_path):
    args = []
    for name, arr in feeds.items():
        f = tmp_path / f"in_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    ours, ref = tmp_path / "infd", tmp_path / "ort"
    r = subprocess.run([str(infd_bin), "run", str(model), *args, "--output-dir", str(ours)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"infd run failed:\n{r.stderr}"
    r = subprocess.run(["node", str(repo_root / "tools" / "ort_ref.js"), str(model), *args,
                        "--output-dir", str(ref), "--threads", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"ONNX Runtime failed:\n{r.stderr}"
    names = [json.loads(line)["name"] for line in r.stdout.splitlines() if line.startswith("{")]
    assert names
    for out in names:
        a, b = np.load(ours / f"{out}.npy"), np.load(ref / f"{out}.npy")
        assert a.shape == b.shape, (out, a.shape, b.shape)
        err = np.abs(a.astype(np.float64) - b)
        bound = ATOL + RTOL * np.abs(b.astype(np.float64))
        print(f"{model.name} {out}: max |infd - ort| {err.max() if err.size else 0:.3g}")
        assert np.all(err <= bound), f"{out}: {int(np.sum(err > bound))} of {err.size} off, " \
                                     f"max {err.max():.3g}"


CASES = {
    "forward": dict(seq=5, batch=3, inp=4, hid=6),
    "no_bias": dict(seq=4, batch=2, inp=3, hid=5, bias=False),
    "reverse": dict(seq=5, batch=2, inp=4, hid=6, direction="reverse"),
    "bidirectional": dict(seq=6, batch=3, inp=5, hid=4, direction="bidirectional"),
    "initial_state": dict(seq=3, batch=2, inp=4, hid=6, initial=True),
    "sequence_lens": dict(seq=6, batch=3, inp=4, hid=5, lens=[6, 2, 4],
                          direction="bidirectional", initial=True),
    "peepholes": dict(seq=4, batch=2, inp=3, hid=5, peep=True, initial=True),
    "clip": dict(seq=4, batch=2, inp=4, hid=5, clip=0.5),
    "input_forget": dict(seq=4, batch=2, inp=4, hid=5, input_forget=1),
    "one_step_wide": dict(seq=1, batch=1, inp=64, hid=128, initial=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lstm_matches_onnxruntime(name, infd_bin, repo_root, cache_dir, tmp_path):
    model = tmp_path / f"lstm_{name}.onnx"
    feeds = lstm_model(model, seed=len(name), **CASES[name])
    run_both(infd_bin, repo_root, model, feeds, tmp_path)


def test_layout1_matches_layout0_in_onnxruntime(infd_bin, repo_root, cache_dir, tmp_path):
    """layout 1 ([batch, seq, ...]), which ONNX Runtime's CPU LSTM refuses:
    infd's results on it, transposed, against ONNX Runtime on the same
    model in layout 0."""
    import onnx

    m0 = tmp_path / "l0.onnx"
    feeds0 = lstm_model(m0, 5, 3, 4, 6, direction="bidirectional", initial=True, lens=[5, 1, 3])
    ref = tmp_path / "ort"
    args = []
    for name, arr in feeds0.items():
        np.save(tmp_path / f"{name}0.npy", arr)
        args += ["--input", f"{name}={tmp_path / f'{name}0.npy'}"]
    r = subprocess.run(["node", str(repo_root / "tools" / "ort_ref.js"), str(m0), *args,
                        "--output-dir", str(ref), "--threads", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    model = onnx.load(str(m0))
    model.graph.node[0].attribute.append(helper.make_attribute("layout", 1))
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        vals = [d.dim_value for d in dims]
        new = [vals[1], vals[0], vals[2]] if len(vals) == 3 else \
            [vals[2], vals[0], vals[1], vals[3]]
        for d, x in zip(dims, new):
            d.dim_value = x
    m1 = tmp_path / "l1.onnx"
    save(model, str(m1))
    args = []
    for name, arr in feeds0.items():
        np.save(tmp_path / f"{name}1.npy", np.ascontiguousarray(arr.transpose(1, 0, 2)))
        args += ["--input", f"{name}={tmp_path / f'{name}1.npy'}"]
    ours = tmp_path / "infd"
    r = subprocess.run([str(infd_bin), "run", str(m1), *args, "--output-dir", str(ours)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for out, perm in (("Y", (1, 2, 0, 3)), ("Y_h", (1, 0, 2)), ("Y_c", (1, 0, 2))):
        a = np.load(ours / f"{out}.npy").transpose(perm)
        b = np.load(ref / f"{out}.npy")
        assert a.shape == b.shape, (out, a.shape, b.shape)
        assert np.all(np.abs(a - b) <= ATOL + RTOL * np.abs(b)), (out, np.abs(a - b).max())


def test_predictor_step_matches_onnxruntime(infd_bin, repo_root, cache_dir, tmp_path):
    model = tmp_path / "predictor.onnx"
    feeds = predictor_model(model)
    run_both(infd_bin, repo_root, model, feeds, tmp_path)


def test_other_activations_are_refused(infd_bin, tmp_path):
    model = tmp_path / "lstm_relu.onnx"
    feeds = lstm_model(model, 3, 1, 2, 3, activations=["Relu", "Tanh", "Tanh"])
    np.save(tmp_path / "x.npy", feeds["X"])
    r = subprocess.run([str(infd_bin), "run", str(model), "--input", f"X={tmp_path / 'x.npy'}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "LSTM activations other than the defaults" in r.stderr, r.stderr
