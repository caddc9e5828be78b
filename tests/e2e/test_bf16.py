"""`infd run --precision bf16` against ONNX Runtime in FP32, and the flag's
edges in `infd bench` and `infd run`.

BF16 rounds activations and weights to 8 significant bits, so outputs are
not compared element by element as in test_parity.py. On synthetic
image-like inputs the classifiers are unsure (top-1 leads by 0.1 to 0.7
logits) and the rounding alone moves logits a lot: rounding only the
weights of ResNet-50 to bf16 and running ONNX Runtime in FP32 gives a
max |a - b| of 11-13% of max |b| on these inputs and flips the top-1 of
one of the four. So each of 4 inputs (one batch of 4) must get ONNX
Runtime's top-1 class where ONNX Runtime's top-1 leads by more than
MARGIN, and a class of ONNX Runtime's top 5 where it does not; and a
sample's max |a - b| must stay under REL_TOL of its max |b|. The numbers
are printed either way.
"""

import json
import os
import subprocess

import numpy as np
import pytest

from test_parity import image_like, sanitize

REL_TOL = 0.3
MARGIN = 0.5
BATCH = 4

# name, path in cache, input name, shape at batch 1
CASES = [
    ("resnet50", "models/resnet50.onnx", "input", (1, 3, 224, 224)),
    ("mobilenetv2", "models/mobilenetv2.onnx", "input", (1, 3, 224, 224)),
]


def bf16_supported():
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        pass
    return "avx512_bf16" in flags or "amx_bf16" in flags


needs_bf16 = pytest.mark.skipif(not bf16_supported(), reason="CPU has no AVX512-BF16 or AMX")


def model_path(cache_dir, rel):
    model = cache_dir / rel
    if not model.exists():
        pytest.skip(f"{rel} not in the cache (run scripts/setup.sh)")
    return model


@needs_bf16
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bf16_top1_matches_onnxruntime_fp32(case, cache_dir, infd_bin, repo_root, tmp_path):
    name, rel, input_name, shape = case
    model = model_path(cache_dir, rel)
    x = image_like((BATCH,) + tuple(shape[1:]), seed=11)
    inp = tmp_path / "input.npy"
    np.save(inp, x)
    ours, ref = tmp_path / "infd", tmp_path / "ort"

    r = subprocess.run([str(infd_bin), "run", str(model), "--input", f"{input_name}={inp}",
                        "--output-dir", str(ours), "--precision", "bf16"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"infd run --precision bf16 failed:\n{r.stderr}"
    r = subprocess.run(["node", str(repo_root / "tools" / "ort_ref.js"), str(model), "--input",
                        f"{input_name}={inp}", "--output-dir", str(ref), "--threads", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"ONNX Runtime failed:\n{r.stderr}"
    outputs = [json.loads(line)["name"] for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(outputs) == 1, r.stdout

    out = outputs[0]
    a = np.load(ours / f"{sanitize(out)}.npy").astype(np.float64).reshape(BATCH, -1)
    b = np.load(ref / f"{sanitize(out)}.npy").astype(np.float64).reshape(BATCH, -1)
    failures = []
    for i in range(BATCH):
        rel_err = float(np.max(np.abs(a[i] - b[i])) / np.max(np.abs(b[i])))
        top_a, top_b = int(np.argmax(a[i])), int(np.argmax(b[i]))
        top5 = [int(c) for c in np.argsort(b[i])[-5:]]
        margin = float(b[i][top_b] - np.sort(b[i])[-2])
        rms = float(np.sqrt(np.mean((a[i] - b[i]) ** 2)) / np.std(b[i]))
        print(f"{name} bf16 sample {i}: top-1 {top_a} (ORT {top_b}, margin {margin:.3g}), "
              f"max |a-b| / max |b| {rel_err:.4f}, rms(a-b) / std(b) {rms:.4f}")
        if top_a != top_b and (margin > MARGIN or top_a not in top5):
            failures.append(f"sample {i}: top-1 {top_a}, ONNX Runtime {top_b} (margin "
                            f"{margin:.3g}, top 5 {top5})")
        if rel_err > REL_TOL:
            failures.append(f"sample {i}: relative error {rel_err:.4f} > {REL_TOL}")
    assert not failures, "; ".join(failures)


@needs_bf16
def test_bench_bf16_prints_precision(cache_dir, infd_bin):
    model = model_path(cache_dir, "models/mobilenetv2.onnx")
    r = subprocess.run([str(infd_bin), "bench", str(model), "--precision", "bf16", "--iterations",
                        "2", "--warmup", "1", "--threads", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "precision bf16" in r.stdout, r.stdout
    r = subprocess.run([str(infd_bin), "bench", str(model), "--precision", "bf16", "--iterations",
                        "1", "--warmup", "0", "--threads", "2", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["precision"] == "bf16"


def test_bf16_refused_without_the_instructions(cache_dir, infd_bin):
    """oneDNN told to stop at AVX-512 (no BF16): the plan fails, no FP32 fallback."""
    model = model_path(cache_dir, "models/mobilenetv2.onnx")
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE")
    r = subprocess.run([str(infd_bin), "bench", str(model), "--precision", "bf16", "--iterations",
                        "1", "--warmup", "0"], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode != 0
    assert "BF16 needs AVX512-BF16 (or AMX) on this CPU" in r.stderr, r.stderr


def test_precision_value_checked(infd_bin, tmp_path):
    r = subprocess.run([str(infd_bin), "run", str(tmp_path / "m.onnx"), "--precision", "fp8"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--precision needs fp32, tf32, bf16 or fp16" in r.stderr
