"""The ONNX backend node test suite (Debian package libonnx-testdata: 932
single-operator models with inputs and expected outputs) through `infd run`.

Each case is classified:
  pass         infd's outputs match the expected ones
  unsupported  infd refuses the model with exit status 4 (an operator, dtype
               or attribute it does not run), saying which
  fail         anything else: a wrong result, a crash, another error
The report lists the counts and every failure. Failures listed with a reason
in node_suite_known_failures.txt are reported but do not fail the test; any
other failure does, and so does a listed case that now passes (so the list
only shrinks).
"""

import concurrent.futures
import os
import pathlib
import subprocess
import tempfile

import numpy as np
import pytest

SUITE = pathlib.Path("/usr/share/libonnx-testdata/data/node")
KNOWN = pathlib.Path(__file__).with_name("node_suite_known_failures.txt")


def sanitize(name):
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)


def known_failures():
    known = {}
    if KNOWN.exists():
        for line in KNOWN.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                case, _, why = line.partition(" ")
                known[case] = why.strip()
    return known


def run_case(infd_bin, case_dir):
    """Returns (status, detail) for one case."""
    try:
        return run_case_checked(infd_bin, case_dir)
    except (ValueError, TypeError) as e:  # onnx's numpy_helper cannot read the data itself
        return "unsupported", f"test data is not a plain tensor ({e})"


def run_case_checked(infd_bin, case_dir):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(case_dir / "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    in_names = [i.name for i in model.graph.input if i.name not in inits]
    out_names = [o.name for o in model.graph.output]
    data = case_dir / "test_data_set_0"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        args = [str(infd_bin), "run", str(case_dir / "model.onnx"), "--output-dir",
                str(tmp / "out"), "--threads", "1"]
        for i, name in enumerate(in_names):
            pb = data / f"input_{i}.pb"
            if not pb.exists():
                return "fail", f"test data has no input_{i}.pb"
            t = onnx.TensorProto()
            t.ParseFromString(pb.read_bytes())
            arr = numpy_helper.to_array(t)
            if arr.dtype.kind in "OUS":
                return "unsupported", "string tensors"
            np.save(tmp / f"in{i}.npy", arr)
            args += ["--input", f"{name}={tmp / f'in{i}.npy'}"]
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "fail", "timed out"
        if r.returncode == 4:
            return "unsupported", r.stderr.strip().splitlines()[-1][:200]
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
            return "fail", f"exit {r.returncode}: {tail[:300]}"
        for i, name in enumerate(out_names):
            t = onnx.TensorProto()
            t.ParseFromString((data / f"output_{i}.pb").read_bytes())
            want = numpy_helper.to_array(t)
            got_path = tmp / "out" / f"{sanitize(name)}.npy"
            if not got_path.exists():
                return "fail", f"output {name} not written"
            got = np.load(got_path)
            if got.shape != want.shape:
                return "fail", f"output {name}: shape {got.shape}, expected {want.shape}"
            if want.dtype.kind in "fc":
                a, b = got.astype(np.float64), want.astype(np.float64)
                ok = np.isclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True)
                if not ok.all():
                    err = np.nanmax(np.abs(a - b))
                    return "fail", f"output {name}: {int((~ok).sum())} of {ok.size} off, " \
                        f"max |a-b| {err:.3g}"
            elif not np.array_equal(got, want.astype(got.dtype)) or got.dtype != want.dtype:
                return "fail", f"output {name}: values or dtype differ ({got.dtype} vs " \
                    f"{want.dtype})"
    return "pass", ""


def test_onnx_node_suite(infd_bin):
    if not SUITE.is_dir():
        pytest.skip(f"{SUITE} missing: apt-get install libonnx-testdata (scripts/setup.sh)")
    cases = sorted(p for p in SUITE.iterdir() if (p / "model.onnx").exists())
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        futures = {ex.submit(run_case, infd_bin, c): c.name for c in cases}
        for f in concurrent.futures.as_completed(futures):
            results[futures[f]] = f.result()
    known = known_failures()
    counts = {"pass": 0, "fail": 0, "unsupported": 0}
    for status, _ in results.values():
        counts[status] += 1
    print(f"\nONNX node suite: {len(results)} cases: {counts['pass']} pass, "
          f"{counts['fail']} fail, {counts['unsupported']} unsupported")
    new_failures, fixed = [], []
    for name in sorted(results):
        status, detail = results[name]
        if status == "fail":
            mark = "known" if name in known else "NEW"
            print(f"  fail ({mark}) {name}: {detail}")
            if name not in known:
                new_failures.append(f"{name}: {detail}")
        elif name in known and status == "pass":
            fixed.append(name)
    assert not new_failures, f"{len(new_failures)} unexpected failures:\n" + "\n".join(
        new_failures)
    assert not fixed, f"now passing, remove from {KNOWN.name}: {', '.join(fixed)}"
