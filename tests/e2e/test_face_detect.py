"""The default repository's `face_detect` ensemble: a JPEG or PNG in (BYTES),
faces out. Its steps are the built-in processors (src/plugins: image_decode,
blazeface_decode) around the served BlazeFace. On the astronaut photo
(Debian python3-skimage's, fetched by scripts/setup.sh) it must find the face
within 3 px of the reference: `infd run` on BlazeFace with the image scaled
by ffmpeg, decoded by the video tests' own numpy code.
"""

import json
import pathlib
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import requests

from test_video import blazeface_decode, need

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import infd.http as httpclient  # noqa: E402


@pytest.fixture(scope="module")
def photo(cache_dir):
    png = cache_dir / "media" / "astronaut.png"
    if not png.exists():
        pytest.fail(f"{png} is missing: run scripts/setup.sh")
    return png


@pytest.fixture
def face_repo(tmp_path, repo_root):
    root = tmp_path / "repo"
    for name in ("face_image", "face_decode", "face_detect", "blazeface"):
        src = repo_root / "models" / name
        (root / name / "1").mkdir(parents=True)
        shutil.copy(src / "config.pbtxt", root / name / "config.pbtxt")
    onnx = repo_root / "models" / "blazeface" / "1" / "model.onnx"
    if not onnx.exists():
        pytest.fail(f"{onnx} is missing: run scripts/setup.sh")
    (root / "blazeface" / "1" / "model.onnx").symlink_to(onnx)
    return root


def reference(infd_bin, repo_root, png, tmp):
    """(box, keypoints) of the best face, in the photo's pixels."""
    need("ffmpeg")
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(png), "-vf",
                          "scale=128:128:flags=bilinear", "-f", "rawvideo", "-pix_fmt", "rgb24",
                          "-"], check=True, capture_output=True).stdout
    rgb = np.frombuffer(raw, np.uint8).reshape(128, 128, 3)
    np.save(tmp / "face.npy", (rgb.astype(np.float32) / 127.5 - 1.0)[None])
    out = tmp / "ref"
    subprocess.run([str(infd_bin), "run", str(repo_root / "models/blazeface/1/model.onnx"),
                    "--input", f"input:0={tmp / 'face.npy'}", "--output-dir", str(out)],
                   check=True, capture_output=True)
    scores = np.concatenate([np.load(out / "Identity_0.npy").reshape(-1),
                             np.load(out / "Identity_1_0.npy").reshape(-1)])
    regs = np.concatenate([np.load(out / "Identity_2_0.npy").reshape(-1, 16),
                           np.load(out / "Identity_3_0.npy").reshape(-1, 16)])
    faces = blazeface_decode(scores, regs)
    assert faces, "the reference found no face"
    _, box, kp = faces[0]
    side = 512  # the photo is 512 x 512: the letterbox is a plain scale
    return box * side, kp * side


def binary_body(images):
    """The KServe binary extension's body for IMAGE [n, 1] of BYTES."""
    data = b"".join(struct.pack("<I", len(b)) + b for b in images)
    head = json.dumps({"inputs": [{"name": "IMAGE", "datatype": "BYTES",
                                   "shape": [len(images), 1],
                                   "parameters": {"binary_data_size": len(data)}}],
                       "outputs": [{"name": "FACES", "parameters": {"binary_data": False}}]})
    return head.encode() + data, len(head)


def post(url, images):
    body, hl = binary_body(images)
    return requests.post(f"{url}/v2/models/face_detect/infer", data=body, timeout=60,
                         headers={"Inference-Header-Content-Length": str(hl),
                                  "Content-Type": "application/octet-stream"})


def test_face_detect_finds_the_astronaut(serve, face_repo, photo, infd_bin, repo_root, tmp_path):
    ref_box, ref_kp = reference(infd_bin, repo_root, photo, tmp_path)
    srv = serve(face_repo)
    png = photo.read_bytes()
    jpg_path = tmp_path / "astronaut.jpg"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(photo), "-q:v", "2", str(jpg_path)],
                   check=True)
    jpg = jpg_path.read_bytes()

    # curl's way: the binary extension over HTTP.
    r = post(srv.url, [png])
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["name"] == "FACES" and out["shape"][0] == 1 and out["shape"][2] == 17
    faces = np.array(out["data"], np.float32).reshape(out["shape"])[0]
    assert len(faces) >= 1 and faces[0, 0] > 0.75
    np.testing.assert_allclose(faces[0, 1:5], ref_box, atol=3)
    np.testing.assert_allclose(faces[0, 5:17].reshape(6, 2), ref_kp, atol=3)

    # The Python client, two photos in one request: PNG and JPEG.
    c = httpclient.InferenceServerClient(f"{srv.host}:{srv.http_port}")
    x = httpclient.InferInput("IMAGE", [2, 1], "BYTES")
    x.set_data_from_numpy(np.array([[png], [jpg]], dtype=np.object_))
    got = c.infer("face_detect", [x]).as_numpy("FACES")
    assert got.shape[0] == 2 and got.shape[2] == 17
    for row in got:
        np.testing.assert_allclose(row[0, 1:5], ref_box, atol=3)  # JPEG: the same face


def test_bad_images_are_refused_and_the_server_keeps_serving(serve, face_repo, photo):
    srv = serve(face_repo)
    png = photo.read_bytes()
    cases = {
        b"this is not an image": "not a JPEG or PNG",
        png[:200]: "corrupt PNG",
        b"\xff\xd8\xff\xe0" + b"\0" * 64: "corrupt JPEG",
        b"": "not a JPEG or PNG",
    }
    for data, why in cases.items():
        r = post(srv.url, [data])
        assert r.status_code == 400, (why, r.text)
        err = r.json()["error"]
        assert why in err and "step 0 (model 'face_image')" in err and "IMAGE row 0" in err, err
    # A good photo after a bad one in the same request: the request fails,
    # naming the bad row.
    r = post(srv.url, [png, b"nope"])
    assert r.status_code == 400 and "IMAGE row 1" in r.json()["error"]
    r = post(srv.url, [png])
    assert r.status_code == 200
