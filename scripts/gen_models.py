#!/usr/bin/python3
"""Generate random-weight ResNet-50 and MobileNetV2 ONNX models for infd tests.

Run with Debian's python:  /usr/bin/python3 scripts/gen_models.py [--out DIR]
(default DIR: $INFD_CACHE/models, INFD_CACHE defaulting to <repo>/.cache).

The weights are random (torchvision, weights=None) but seeded, so the
generated models are reproducible for a given torch/torchvision build.

BatchNorm recalibration: with random weights the BN running statistics are
still their init values (mean 0, var 1) which do not match the real activation
statistics, so activations grow or shrink layer after layer: measured here,
the uncalibrated ResNet-50 gives the same argmax (525) and cosine similarity
~0.999 for any two inputs, MobileNetV2 gives logits of ~1e-9. We therefore
re-estimate the running
stats (momentum=None -> cumulative average) in train mode on a few batches,
then switch back to eval mode before exporting. Each calibration batch mixes
smooth image-like noise, blocky image-like noise, N(0,1) noise and
ImageNet-normalized U[0,1] noise, so that all of these kinds of test inputs
land in the calibrated range (calibrating on one kind only makes the others
give huge logits dominated by a per-kind offset: e.g. np.random.randn inputs
then all give nearly the same output).

Even with sane BN statistics, the global-average-pooled features of a random
network share a large common component (post-ReLU means are positive), so the
logits of different inputs are still strongly correlated. The classifier is
therefore also calibrated on the same batches: its bias is set so that the
mean logit vector over the calibration set is 0 (bias -= W @ mean_feature)
and W, b are scaled so that the logits have a standard deviation of
LOGIT_STD. Different inputs (image-like or noise) then give clearly different
outputs of magnitude O(1..10) (good for numerical comparisons against ONNX
Runtime). sanity_check() enforces this before anything is written.

Idempotent: a model is skipped when <name>.onnx exists and <name>.onnx.stamp
holds the current GENERATOR_VERSION string. torch is only imported when some
model actually has to be (re)generated.
"""

import argparse
import os
import sys
import time

# Bump when anything that changes the produced model changes.
GENERATOR_VERSION = ("infd-gen-models/3 seed=20240601 opset=17 "
                     "calib=4x8x224(smooth,blocky,normal,uniform) fc=center,std2")

SEED = 20240601
OPSET = 17
CALIB_BATCHES = 4
CALIB_BATCH_SIZE = 8
IMAGE_SIZE = 224
LOGIT_STD = 2.0
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

MODELS = {
    # name -> torchvision.models constructor name
    "resnet50": "resnet50",
    "mobilenetv2": "mobilenet_v2",
}


def log(msg):
    print(f"gen_models: {msg}", flush=True)


def default_out_dir():
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = os.environ.get("INFD_CACHE") or os.path.join(repo_root, ".cache")
    return os.path.join(cache, "models")


def is_up_to_date(onnx_path):
    stamp = onnx_path + ".stamp"
    if not (os.path.isfile(onnx_path) and os.path.isfile(stamp)):
        return False
    with open(stamp, "r", encoding="utf-8") as f:
        return f.read().strip() == GENERATOR_VERSION


def imagenet_normalize(torch, img):
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (img - mean) / std


def image_like_batch(torch, gen, n, size=IMAGE_SIZE, mode="bilinear"):
    """Structured noise in [0,1], normalized like ImageNet inputs.

    Sum of a few upsampled low-resolution noise fields (blobs of several
    scales; mode "bilinear": smooth, "nearest": blocky with sharp edges) + a
    little pixel noise, with a random per-image contrast and brightness so
    that batches are not all alike.
    """
    import torch.nn.functional as F

    img = torch.zeros(n, 3, size, size)
    for res, amp in ((4, 1.0), (14, 0.6), (56, 0.3)):
        low = torch.rand(n, 3, res, res, generator=gen)
        if mode == "nearest":
            img += amp * F.interpolate(low, size=(size, size), mode="nearest")
        else:
            img += amp * F.interpolate(low, size=(size, size), mode="bilinear",
                                       align_corners=False)
    img += 0.1 * torch.rand(n, 3, size, size, generator=gen)
    # per-image min/max normalization then random contrast/brightness
    flat = img.view(n, -1)
    lo = flat.min(dim=1).values.view(n, 1, 1, 1)
    hi = flat.max(dim=1).values.view(n, 1, 1, 1)
    img = (img - lo) / (hi - lo + 1e-6)
    contrast = 0.5 + 0.5 * torch.rand(n, 1, 1, 1, generator=gen)
    bright = (1 - contrast) * torch.rand(n, 1, 1, 1, generator=gen)
    img = (img * contrast + bright).clamp(0, 1)
    return imagenet_normalize(torch, img)


def input_batch(torch, gen, kind, n, size=IMAGE_SIZE):
    if kind == "smooth":
        return image_like_batch(torch, gen, n, size, "bilinear")
    if kind == "blocky":
        return image_like_batch(torch, gen, n, size, "nearest")
    if kind == "normal":
        return torch.randn(n, 3, size, size, generator=gen)
    if kind == "uniform":
        return imagenet_normalize(torch, torch.rand(n, 3, size, size, generator=gen))
    raise ValueError(kind)


INPUT_KINDS = ("smooth", "blocky", "normal", "uniform")


def calibration_batch(torch, gen, n):
    """n images, an equal share of each input kind (smooth gets the rest)."""
    q = n // len(INPUT_KINDS)
    parts = [input_batch(torch, gen, k, q if k != "smooth" else n - 3 * q)
             for k in INPUT_KINDS]
    return torch.cat(parts)


def calibrate(torch, model, gen):
    """Recalibrate BatchNorm running stats, then center/scale the classifier."""
    batches = [calibration_batch(torch, gen, CALIB_BATCH_SIZE)
               for _ in range(CALIB_BATCHES)]
    n_bn = 0
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative moving average over all batches
            n_bn += 1
    model.train()
    with torch.no_grad():
        for x in batches:
            model(x)
    model.eval()

    # Classifier = last Linear (resnet50: fc, mobilenet_v2: classifier[1]).
    fc = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    feats = []
    hook = fc.register_forward_pre_hook(lambda mod, inp: feats.append(inp[0]))
    with torch.no_grad():
        for x in batches:
            model(x)
    hook.remove()
    f = torch.cat(feats)
    with torch.no_grad():
        fc.bias.sub_(fc.weight @ f.mean(0))
        scale = LOGIT_STD / fc(f).std().item()
        fc.weight.mul_(scale)
        fc.bias.mul_(scale)
    return n_bn


def sanity_check(torch, model, name, gen):
    """Different inputs must give finite, O(1) and clearly different outputs.

    Pairs of inputs of the same kind (the hard case: same statistics) and of
    different kinds. Without the calibration these fail (ResNet-50: cos ~ 1.0
    for two N(0,1) inputs; MobileNetV2: logits ~ 1e-9).
    """
    pairs = [("smooth", "smooth"), ("blocky", "blocky"), ("normal", "normal"),
             ("uniform", "uniform"), ("smooth", "normal")]
    report = []
    ok = True
    for ka, kb in pairs:
        with torch.no_grad():
            a = model(input_batch(torch, gen, ka, 1))
            b = model(input_batch(torch, gen, kb, 1))
        for o in (a, b):
            if tuple(o.shape) != (1, 1000):
                raise SystemExit(f"gen_models: {name}: output shape {tuple(o.shape)} != (1, 1000)")
            if not torch.isfinite(o).all():
                raise SystemExit(f"gen_models: {name}: non-finite output")
        a, b = a[0], b[0]
        scale = max(a.abs().max().item(), b.abs().max().item())
        cos = torch.nn.functional.cosine_similarity(a, b, dim=0).item()
        rel = (a - b).abs().max().item() / scale
        argmax_differs = int(a.argmax()) != int(b.argmax())
        report.append(f"{ka}/{kb}:argmax{'!=' if argmax_differs else '=='},"
                      f"cos={cos:.2f},rel={rel:.2f},max={scale:.3g}")
        if not (1e-2 < scale < 1e3 and cos < 0.98 and (argmax_differs or rel > 0.25)):
            ok = False
    log(f"{name}: sanity " + " ".join(report))
    if not ok:
        raise SystemExit(
            f"gen_models: {name}: outputs are out of range or barely depend on the "
            "input (BatchNorm/classifier calibration failed?)")


def generate(name, ctor, out_dir):
    import torch
    import torchvision
    import onnx

    t0 = time.time()
    torch.manual_seed(SEED)
    model = getattr(torchvision.models, ctor)(weights=None)
    gen = torch.Generator().manual_seed(SEED + 1)
    n_bn = calibrate(torch, model, gen)
    t_cal = time.time()
    log(f"{name}: built + calibrated ({n_bn} BN layers + classifier) in {t_cal - t0:.1f}s")

    sanity_check(torch, model, name, gen)

    final = os.path.join(out_dir, name + ".onnx")
    tmp = final + ".tmp"
    dummy = torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    with torch.no_grad():
        torch.onnx.export(
            model, dummy, tmp,
            opset_version=OPSET,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            do_constant_folding=True,
        )
    m = onnx.load(tmp)
    onnx.checker.check_model(m)
    ins = [i.name for i in m.graph.input]
    outs = [o.name for o in m.graph.output]
    if ins != ["input"] or outs != ["output"]:
        raise SystemExit(f"gen_models: {name}: unexpected io names {ins} -> {outs}")
    os.replace(tmp, final)
    with open(final + ".stamp", "w", encoding="utf-8") as f:
        f.write(GENERATOR_VERSION + "\n")
    log(f"{name}: exported {final} ({os.path.getsize(final) / 1e6:.1f} MB, "
        f"{len(m.graph.node)} nodes) in {time.time() - t_cal:.1f}s; "
        f"total {time.time() - t0:.1f}s")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=default_out_dir(),
                    help="output directory (default: $INFD_CACHE/models)")
    ap.add_argument("--force", action="store_true",
                    help="regenerate even if up to date")
    ap.add_argument("--only", choices=sorted(MODELS), action="append",
                    help="generate only this model (repeatable)")
    args = ap.parse_args(argv)

    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    todo = []
    for name in (args.only or list(MODELS)):
        path = os.path.join(args.out, name + ".onnx")
        if not args.force and is_up_to_date(path):
            log(f"{name}: up to date ({path})")
        else:
            todo.append(name)
    if todo:
        import torch
        ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        torch.set_num_threads(max(1, ncpu))
        log(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
            f"generating {', '.join(todo)} into {args.out}")
        for name in todo:
            generate(name, MODELS[name], args.out)
    log(f"done in {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
