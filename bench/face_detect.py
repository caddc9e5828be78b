#!/usr/bin/env python3
"""The issue's 3-step image pipeline against its slowest step alone:
`face_detect` (image_decode -> BlazeFace -> blazeface_decode, the default
repository's ensemble) on the astronaut photo, against each step served
alone, on one `infd serve`, in one run.

Every side is driven by wrk POSTing one fixed binary KServe request (Triton's
binary extension), at the same connection count:
  * face_detect: the photo (PNG, 512 x 512, 263 KB) as a BYTES tensor;
  * face_image alone: the same body;
  * blazeface alone: the letterboxed 128 x 128 x 3 tensor (196 KB);
  * face_decode alone: BlazeFace's four outputs and the letterbox.
The slowest step is the one with the lowest throughput alone. Goals: the
pipeline at >= 0.9x its throughput, <= 20 us added per step (concurrency 1).

Usage: python3 bench/face_detect.py [--connections 8] [--seconds 5]
"""

import argparse
import json
import pathlib
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_common import DEFAULT_INFD, ROOT, WRK_POST_LUA, Serve, run_wrk  # noqa: E402


def body(inputs):
    """(bytes, json length) of a binary-extension request: [(name, dtype,
    shape, raw bytes)]."""
    head = json.dumps({"inputs": [{"name": n, "datatype": d, "shape": s,
                                   "parameters": {"binary_data_size": len(b)}}
                                  for n, d, s, b in inputs],
                       "parameters": {"binary_data_output": True}}).encode()
    return head + b"".join(b for _, _, _, b in inputs), len(head)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(DEFAULT_INFD))
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    png = (ROOT / ".cache" / "media" / "astronaut.png").read_bytes()
    out = {}
    with tempfile.TemporaryDirectory(prefix="infd-face-") as tmp:
        tmp = pathlib.Path(tmp)
        repo = tmp / "repo"
        for name in ("face_image", "face_decode", "face_detect", "blazeface"):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text(
                (ROOT / "models" / name / "config.pbtxt").read_text())
        (repo / "blazeface" / "1" / "model.onnx").symlink_to(
            ROOT / "models" / "blazeface" / "1" / "model.onnx")
        with Serve(args.infd, repo, tmp) as srv:
            import urllib.request

            def post(model, data, hl):
                req = urllib.request.Request(
                    f"{srv.url}/v2/models/{model}/infer", data=data,
                    headers={"Inference-Header-Content-Length": str(hl)})
                with urllib.request.urlopen(req, timeout=60) as r:
                    hlen = int(r.headers["Inference-Header-Content-Length"])
                    raw = r.read()
                return json.loads(raw[:hlen]), raw[hlen:]

            image = [("IMAGE", "BYTES", [1, 1], struct.pack("<I", len(png)) + png)]
            # The intermediate tensors, from the steps themselves.
            meta, raw = post("face_image", *body(image))
            sizes = [o["parameters"]["binary_data_size"] for o in meta["outputs"]]
            pixels, letterbox = raw[:sizes[0]], raw[sizes[0]:]
            meta, raw = post("blazeface", *body([("input:0", "FP32", [1, 128, 128, 3], pixels)]))
            off, outs = 0, {}
            for o in meta["outputs"]:
                n = o["parameters"]["binary_data_size"]
                outs[o["name"]] = (o["shape"], raw[off:off + n])
                off += n
            names = {"Identity:0": "SCORES16", "Identity_1:0": "SCORES8",
                     "Identity_2:0": "BOXES16", "Identity_3:0": "BOXES8"}
            decode_in = [(names[k], "FP32", s, b) for k, (s, b) in outs.items()]
            decode_in.append(("LETTERBOX", "FP32", [1, 5], letterbox))
            meta, raw = post("face_detect", *body(image))
            faces = np.frombuffer(raw, np.float32).reshape(meta["outputs"][0]["shape"])
            assert faces.shape[1] >= 1 and faces[0, 0, 0] > 0.75, faces
            sides = {"face_detect": body(image), "face_image": body(image),
                     "blazeface": body([("input:0", "FP32", [1, 128, 128, 3], pixels)]),
                     "face_decode": body(decode_in)}
            for model, (data, hl) in sides.items():
                (tmp / f"{model}.bin").write_bytes(data)
                lua = tmp / f"{model}.lua"
                lua.write_text(WRK_POST_LUA.format(body=tmp / f"{model}.bin", json_len=hl))
                for conns in (1, args.connections):
                    r = run_wrk(f"{srv.url}/v2/models/{model}/infer", conns, args.seconds, lua)
                    out[f"{model}@{conns}"] = r
                    print(f"{model:12s} {conns:2d} connection(s): {r['throughput']:8.1f} "
                          f"infer/s, p50 {r['p50_us']:9.1f} us, p99 {r['p99_us']:9.1f} us")
    c = args.connections
    steps = ("face_image", "blazeface", "face_decode")
    slowest = min(steps, key=lambda m: out[f"{m}@{c}"]["throughput"])
    ratio = out[f"face_detect@{c}"]["throughput"] / out[f"{slowest}@{c}"]["throughput"]
    added = (out["face_detect@1"]["p50_us"] - sum(out[f"{m}@1"]["p50_us"] for m in steps)) / 3
    print(f"slowest step alone: {slowest}; face_detect / {slowest} at {c} connections: "
          f"{ratio:.3f}; added per step at 1 connection (p50, against the steps' own p50s "
          f"summed): {added:.1f} us")
    out.update({"slowest": slowest, "ratio": ratio, "added_us_per_step": added})
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
