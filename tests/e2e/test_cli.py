"""End-to-end tests of the `infd` command line and the installed library.

They run the real binary and compile a real embedder program against the
public headers and libinfd, as a user of the C API would.
"""

import pathlib
import re
import shutil
import subprocess

import pytest

# The subcommands DESIGN.md names; every one must be listed by --help.
DESIGN_COMMANDS = ["serve", "run", "bench", "build", "perf", "router"]


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60, **kw)


def test_version(infd_bin):
    r = run([infd_bin, "--version"])
    assert r.returncode == 0, r.stderr
    assert re.match(r"infd \d+\.\d+\.\d+ \(git [0-9a-f]+|infd \d+\.\d+\.\d+ \(git unknown",
                    r.stdout), r.stdout
    assert "cpu backend:" in r.stdout
    # Built with or without CUDA, the line says which and, without a GPU, why.
    assert re.search(r"cuda backend: (not built|built; (no usable GPU \(.+\)|\d+ GPU))",
                     r.stdout), r.stdout


def test_help_lists_design_commands(infd_bin):
    r = run([infd_bin, "--help"])
    assert r.returncode == 0, r.stderr
    for name in DESIGN_COMMANDS:
        assert re.search(rf"^  {name} ", r.stdout, re.M), f"--help does not list '{name}'"
        assert f"infd {name} " in r.stdout, f"--help has no usage line for '{name}'"
    for alias in ["-h", "help"]:
        assert run([infd_bin, alias]).stdout == r.stdout


def test_engine_commands_are_built(infd_bin):
    assert "run" not in not_built_commands(infd_bin)
    assert "bench" not in not_built_commands(infd_bin)


def not_built_commands(infd_bin):
    out = run([infd_bin, "--help"]).stdout
    return re.findall(r"^  (\w+) .*\[not built yet\]$", out, re.M)


def test_unbuilt_commands_say_so_and_fail(infd_bin):
    names = not_built_commands(infd_bin)
    for name in names:
        r = run([infd_bin, name, "--model-repository", "models"])
        assert r.returncode == 3, (name, r.returncode, r.stderr)
        assert f"infd {name}: not built yet" in r.stderr
        assert f"usage: infd {name}" in r.stderr


def test_usage_errors(infd_bin):
    r = run([infd_bin])
    assert r.returncode == 2
    assert "usage: infd <command>" in r.stderr
    r = run([infd_bin, "frobnicate"])
    assert r.returncode == 2
    assert "unknown command 'frobnicate'" in r.stderr


def build_dir(infd_bin) -> pathlib.Path:
    return pathlib.Path(infd_bin).parent


def test_shared_library_exports_only_the_api(infd_bin):
    lib = build_dir(infd_bin) / "libinfd.so"
    assert lib.exists(), f"{lib} missing"
    assert (build_dir(infd_bin) / "libinfd.a").exists()
    nm = run(["nm", "-D", "--defined-only", lib])
    assert nm.returncode == 0, nm.stderr
    syms = [line.split()[-1] for line in nm.stdout.splitlines() if line.split()[1] in "TDBR"]
    ours = [s for s in syms if s.startswith("infd_")]
    assert "infd_version" in ours and "infd_fp16_from_fp32" in ours
    # Hidden visibility: internal modules (alloc, arena, pool, ...) stay private.
    assert "infd_malloc" not in syms and "infd_arena_alloc" not in syms
    # Nothing else of ours leaks: every exported function is in a public header.
    headers = "".join(p.read_text() for p in (build_dir(infd_bin).parents[1] / "include" /
                                              "infd").glob("*.h"))
    for s in ours:
        assert re.search(rf"\b{s}\(", headers), f"{s} is exported but not declared publicly"


EMBEDDER = r"""
#include <infd/infd.h>
#include <infd/engine.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    infd_error err;
    infd_error_clear(&err);
    infd_shape s;
    int64_t dims[2] = {2, -3};
    if (infd_shape_init(&s, 2, dims, &err) != INFD_STATUS_INVALID_ARGUMENT)
        return 1;
    infd_tensor t;
    dims[1] = 3;
    infd_shape_init(&s, 2, dims, NULL);
    if (infd_tensor_alloc(&t, INFD_DTYPE_FP16, &s, &err) != INFD_STATUS_OK)
        return 2;
    ((unsigned short *)t.data)[0] = infd_fp16_from_fp32(1.5f);
    float back = infd_fp16_to_fp32(((unsigned short *)t.data)[0]);
    infd_tensor_fini(&t);
    printf("%s %s %g %s %d\n", infd_version(), infd_dtype_name(INFD_DTYPE_BF16), back,
           infd_status_name(INFD_STATUS_NOT_FOUND), infd_engine_device_count(INFD_DEVICE_CPU, NULL));
    return 0;
}
"""


@pytest.mark.parametrize("compiler", ["cc", "c++"])
def test_embedder_builds_against_public_headers(infd_bin, repo_root, tmp_path, compiler):
    """A program that includes only include/infd/ and links libinfd.so works
    (C11 with all warnings as errors, and C++ to check the extern "C" guards)."""
    if not shutil.which(compiler):
        pytest.skip(f"no {compiler} on PATH")
    src = tmp_path / ("embed.c" if compiler == "cc" else "embed.cpp")
    src.write_text(EMBEDDER)
    exe = tmp_path / "embed"
    lang = ["-std=c11"] if compiler == "cc" else ["-std=c++17"]
    r = run([compiler, *lang, "-Wall", "-Wextra", "-Werror", "-pedantic", "-I",
             repo_root / "include", src, "-o", exe, "-L", build_dir(infd_bin), "-linfd",
             f"-Wl,-rpath,{build_dir(infd_bin)}"])
    assert r.returncode == 0, r.stderr
    r = run([exe])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0.1.0", "BF16", "1.5", "NOT_FOUND", "1"]


# ---- infd run / infd bench on small models made here with onnx's helper ----

def make_model(path, opset=17):
    """Y = Relu(X @ W + B) with X: FP32 [batch, 4]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "W")
    b = numpy_helper.from_array(np.array([-1, 0, 1], np.float32), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["M"]),
             helper.make_node("Add", ["M", "B"], ["S"]),
             helper.make_node("Relu", ["S"], ["Y"])]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("X", 1, ["batch", 4])],
                          [helper.make_tensor_value_info("Y", 1, ["batch", 3])], [w, b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    path.write_bytes(model.SerializeToString())
    return w, b


def test_run_writes_outputs_that_are_right(infd_bin, tmp_path):
    import numpy as np
    make_model(tmp_path / "m.onnx")
    x = np.array([[1, 2, 3, 4], [-1, 0, 0.5, 2]], np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run([infd_bin, "run", tmp_path / "m.onnx", "--input", f"X={tmp_path / 'x.npy'}",
             "--output-dir", tmp_path / "out"])
    assert r.returncode == 0, r.stderr
    assert "output Y: FP32 [2,3]" in r.stdout
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    want = np.maximum(x @ w + np.array([-1, 0, 1], np.float32), 0)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "Y.npy"), want, rtol=1e-6)


def test_run_random_inputs_are_saved(infd_bin, tmp_path):
    make_model(tmp_path / "m.onnx")
    r = run([infd_bin, "run", tmp_path / "m.onnx", "--batch", "5", "--output-dir",
             tmp_path / "out"])
    assert r.returncode == 0, r.stderr
    assert "input X: FP32 [5,4]" in r.stdout
    assert (tmp_path / "out" / "input_X.npy").exists()


def test_bench_reports_numbers(infd_bin, tmp_path):
    make_model(tmp_path / "m.onnx")
    r = run([infd_bin, "bench", tmp_path / "m.onnx", "--iterations", "20", "--json"])
    assert r.returncode == 0, r.stderr
    import json
    rec = json.loads(r.stdout)
    assert rec["iterations"] == 20 and rec["p50_ms"] > 0 and rec["throughput_per_s"] > 0
    r = run([infd_bin, "bench", tmp_path / "m.onnx", "--iterations", "5", "--profile"])
    assert r.returncode == 0, r.stderr
    for word in ["load", "latency", "throughput", "peak RSS", "slowest kernels"]:
        assert word in r.stdout


def test_precision_tf32_is_parsed_and_cuda_only(infd_bin, tmp_path):
    """--precision tf32 is a precision of run, bench and build, listed by
    --help; on the CPU it is refused as FP16 is (naming CUDA), never run as
    FP32 in its place. Without a GPU this is all it can check; the
    numbers are in test_cuda.py."""
    make_model(tmp_path / "m.onnx")
    help_text = run([infd_bin, "--help"]).stdout
    assert "--precision fp32|tf32|bf16|fp16" in help_text
    assert re.search(r"^  tf32  CUDA only", help_text, re.M), help_text
    for cmd in (["run"], ["bench", "--iterations", "1"],
                ["build", "-o", tmp_path / "m.plan"]):
        r = run([infd_bin, cmd[0], tmp_path / "m.onnx", "--precision", "tf32", *cmd[1:]])
        assert r.returncode in (1, 4), (cmd, r.returncode, r.stderr)
        assert "precision tf32 is implemented on the CUDA backend only (--device cuda)" in \
            r.stderr, r.stderr
    assert not (tmp_path / "m.plan").exists()
    r = run([infd_bin, "run", tmp_path / "m.onnx", "--precision", "tf16"])
    assert r.returncode == 2 and "--precision needs fp32, tf32, bf16 or fp16" in r.stderr
    # An FP32 plan is not silently run as TF32, nor the other way round.
    r = run([infd_bin, "build", tmp_path / "m.onnx", "-o", tmp_path / "m.plan"])
    assert r.returncode == 0, r.stderr
    r = run([infd_bin, "run", tmp_path / "m.plan", "--precision", "tf32"])
    assert r.returncode == 1 and "was built with precision fp32" in r.stderr, r.stderr


def test_malformed_models_give_clear_errors(infd_bin, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0fnot a model")
    r = run([infd_bin, "run", bad])
    assert r.returncode == 1
    assert f"{bad}: not a valid ONNX protobuf" in r.stderr
    make_model(tmp_path / "m.onnx")
    data = (tmp_path / "m.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[:len(data) // 2])
    r = run([infd_bin, "run", tmp_path / "cut.onnx"])
    assert r.returncode == 1 and "cut.onnx: " in r.stderr
    r = run([infd_bin, "run", tmp_path / "missing.onnx"])
    assert r.returncode == 1 and "cannot open" in r.stderr


def test_unsupported_operator_is_named(infd_bin, tmp_path):
    from onnx import helper
    g = helper.make_graph([helper.make_node("Det", ["X"], ["Y"], name="det0")], "g",
                          [helper.make_tensor_value_info("X", 1, [3, 3])],
                          [helper.make_tensor_value_info("Y", 1, [])])
    (tmp_path / "det.onnx").write_bytes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    r = run([infd_bin, "run", tmp_path / "det.onnx"])
    assert r.returncode == 4, r.stderr
    assert "node 'det0' (Det)" in r.stderr


def test_bad_shapes_and_options(infd_bin, tmp_path):
    make_model(tmp_path / "m.onnx")
    r = run([infd_bin, "run", tmp_path / "m.onnx", "--shape", "X=2,5"])
    assert r.returncode == 1 and "input 'X' has shape [batch,4]; the given shape [2,5] differs " \
        "in dim 1" in r.stderr
    r = run([infd_bin, "run", tmp_path / "m.onnx", "--shape", "X"])
    assert r.returncode == 2 and "--shape needs NAME=D0,D1" in r.stderr
    r = run([infd_bin, "bench", tmp_path / "m.onnx", "--iterations", "zero"])
    assert r.returncode == 2
    r = run([infd_bin, "run"])
    assert r.returncode == 2 and "usage: infd run" in r.stderr


def test_shape_inputs_are_bound(infd_bin, tmp_path):
    """A Reshape target fed as an input: the plan binds its value (TensorRT's
    shape tensors), with a note, and the result is right."""
    import numpy as np
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Reshape", ["X", "S"], ["Y"])], "g",
                          [helper.make_tensor_value_info("X", 1, [2, 6]),
                           helper.make_tensor_value_info("S", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("Y", 1, None)])
    (tmp_path / "r.onnx").write_bytes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "s.npy", np.array([3, -1, 2], np.int64))
    args = [infd_bin, "run", tmp_path / "r.onnx", "--input", f"X={tmp_path / 'x.npy'}",
            "--input", f"S={tmp_path / 's.npy'}", "--output-dir", tmp_path / "out"]
    r = run(args)
    assert r.returncode == 0, r.stderr
    assert "binding the given inputs" in r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "Y.npy"), x.reshape(3, 2, 2))
    r = run(args + ["--bind", "S"])
    assert r.returncode == 0 and "binding" not in r.stderr
    r = run([infd_bin, "run", tmp_path / "r.onnx", "--bind", "S"])
    assert r.returncode == 2 and "--bind S: give its value with --input S=FILE.npy" in r.stderr
