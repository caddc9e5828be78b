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
