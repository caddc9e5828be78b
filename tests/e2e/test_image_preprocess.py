"""The image_decode processor's general pre-processing (src/plugins/image.c):
letterbox and center-crop resizes to any W x H, mean/std normalization,
NHWC/NCHW layout, RGB/BGR order and UINT8 output, checked on synthetic
images whose expected pixels are known, and against numpy for the
normalization; bad parameters leave the model UNAVAILABLE with the reason.
"""

import io
import math
import pathlib
import sys

import numpy as np
import pytest
import requests
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import infd.http as httpclient  # noqa: E402


def image_model(root, name, **params):
    d = pathlib.Path(root) / name
    (d / "1").mkdir(parents=True)
    text = "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
                   for k, v in params.items())
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "image_decode"\nmax_batch_size: 4\n{text}')


IMAGENET = dict(width=32, height=32, resize="crop", crop_fraction=0.875, scale=1 / 255,
                offset=0, mean="0.485,0.456,0.406", std="0.229, 0.224, 0.225")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    image_model(root, "crop_u8", size=50, resize="crop", dtype="UINT8")
    image_model(root, "wide_u8", width=64, height=32, dtype="UINT8")
    image_model(root, "imagenet_u8", width=32, height=32, resize="crop", crop_fraction=0.875,
                dtype="UINT8")
    image_model(root, "imagenet", **IMAGENET)
    image_model(root, "imagenet_bgr_nchw", **IMAGENET, layout="NCHW", channel_order="BGR")
    bad = {
        "bad_layout": dict(layout="NWHC"),
        "bad_mean": dict(mean="1,2"),
        "u8_mean": dict(dtype="UINT8", mean="3"),
        "half_size": dict(width=64),
        "fraction_alone": dict(crop_fraction=0.5),
        "zero_std": dict(std="0"),
    }
    for name, params in bad.items():
        image_model(root, name, **params)
    return root


def png(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def run(srv, model, data):
    c = httpclient.InferenceServerClient(f"{srv.host}:{srv.http_port}")
    t = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    t.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    res = c.infer(model, [t])
    return res.as_numpy("PIXELS")[0], res.as_numpy("LETTERBOX")[0]


def test_crop_and_letterbox_place_the_image(serve, repo):
    srv = serve(repo)
    # 200 x 100, red left half, blue right half; cropped to 50 x 50: scaled
    # by 0.5 to 100 x 50, the middle 50 columns kept.
    img = np.zeros((100, 200, 3), np.uint8)
    img[:, :100] = (255, 0, 0)
    img[:, 100:] = (0, 0, 255)
    px, lb = run(srv, "crop_u8", png(img))
    assert px.shape == (50, 50, 3) and px.dtype == np.uint8
    assert lb.tolist() == [-25, 0, 0.5, 200, 100]
    assert (px[:, :23] == (255, 0, 0)).all() and (px[:, 27:] == (0, 0, 255)).all()
    # 100 x 100 green letterboxed into 64 x 32: 32 x 32 in the middle.
    img = np.zeros((100, 100, 3), np.uint8)
    img[:] = (0, 255, 0)
    px, lb = run(srv, "wide_u8", png(img))
    assert px.shape == (32, 64, 3)
    assert lb.tolist() == pytest.approx([16, 0, 0.32, 100, 100])
    assert (px[:, :16] == 0).all() and (px[:, 48:] == 0).all()
    assert (px[:, 16:48] == (0, 255, 0)).all()


def test_normalization_layout_and_channel_order_match_numpy(serve, repo):
    srv = serve(repo)
    rng = np.random.default_rng(11)
    img = rng.integers(0, 256, (90, 120, 3), dtype=np.uint8)
    raw, lb_raw = run(srv, "imagenet_u8", png(img))
    # The crop: scaled by max(32/120, 32/90) / 0.875, centred.
    scale = max(32 / 120, 32 / 90) / 0.875
    assert lb_raw[2] == pytest.approx(scale, rel=1e-6)
    sw, sh = math.floor(120 * scale + 0.5), math.floor(90 * scale + 0.5)  # C's lround
    assert lb_raw[:2].tolist() == [int((32 - sw) / 2), int((32 - sh) / 2)]  # C's division
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    want = ((raw.astype(np.float32) * np.float32(1 / 255)) - mean) / std
    px, lb = run(srv, "imagenet", png(img))
    assert px.shape == (32, 32, 3) and px.dtype == np.float32
    assert np.allclose(px, want, atol=1e-5) and (lb == lb_raw).all()
    # NCHW and BGR: mean and std are in the output's (BGR) order.
    want_bgr = ((raw[..., ::-1].astype(np.float32) * np.float32(1 / 255)) - mean) / std
    px, _ = run(srv, "imagenet_bgr_nchw", png(img))
    assert px.shape == (3, 32, 32)
    assert np.allclose(px, want_bgr.transpose(2, 0, 1), atol=1e-5)


def test_bad_parameters_are_named(serve, repo):
    srv = serve(repo)
    index = {m["name"]: m for m in requests.post(f"{srv.url}/v2/repository/index", json={},
                                                 timeout=10).json()}
    reasons = {
        "bad_layout": "parameter 'layout' is 'NWHC': \"NHWC\" or \"NCHW\"",
        "bad_mean": "parameter 'mean' is '1,2': one number or three",
        "u8_mean": "parameter 'mean' is for dtype FP32",
        "half_size": "'width' and 'height' go together",
        "fraction_alone": "'crop_fraction' needs resize \"crop\"",
        "zero_std": "'std' must not be 0",
    }
    for name, why in reasons.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert why in index[name]["reason"], (name, index[name]["reason"])
    assert index["imagenet"]["state"] == "READY"
