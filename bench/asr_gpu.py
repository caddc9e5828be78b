#!/usr/bin/env python3
"""Parakeet-TDT 0.6B's encoder on the GPU: infd's CUDA backend against
PyTorch on the same random weights, side by side in one run (issue #21).

Run on the GPU machine (its python3 has torch and transformers with the
Parakeet classes):

    python3 bench/asr_gpu.py --infd .gpu/x/bin/infd --batches 1,32,128 --out $OUT

1. Builds transformers' ParakeetEncoder(ParakeetEncoderConfig(num_mel_bins=128))
   (the 0.6B FastConformer: 24 layers, d_model 1024) with seeded random
   weights and exports it in the onnx-asr encoder layout: a wrapper takes
   audio_signal [B, 128, T] and length [B] (NeMo's), passes the features
   and an attention mask from the lengths to the encoder, and returns
   outputs [B, 1024, T'] and encoded_lengths [B] (torch.onnx.export,
   opset 17, dynamo=False; --onnx reuses a file).
2. For each batch B of 10 s utterances (1000 feature frames): PyTorch eager
   FP16 (input on the GPU), the same forward in a CUDA graph, and
   torch.compile when --compile is given, timed with CUDA events; then
   `infd bench --device cuda --precision fp16|fp32 --shape
   audio_signal=B,128,1000 --shape length=B --json --device-input`.
   infd's number includes copying the outputs back to the host.
3. Prints a row per (batch, variant) with ms per batch and RTFx (audio
   seconds per second of compute), and writes them as JSON to --out.

What fails is reported as it is (an operator infd does not run on CUDA
yet, say), and the run goes on with the next variant.
"""

import argparse
import json
import os
import subprocess
import sys

from cuda_vs_torch import time_ms  # CUDA-event timing, shared with the vision benchmark


def build_encoder(seed=2126):
    import torch
    from transformers import ParakeetEncoder, ParakeetEncoderConfig

    torch.manual_seed(seed)
    enc = ParakeetEncoder(ParakeetEncoderConfig(num_mel_bins=128)).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = enc

        def forward(self, audio_signal, length):
            t = audio_signal.shape[2]
            mask = torch.arange(t, device=audio_signal.device)[None, :] < length[:, None]
            out = self.enc(input_features=audio_signal.transpose(1, 2), attention_mask=mask)
            h = out.last_hidden_state  # [B, T', D]
            lens = length
            for _ in range(3):
                lens = torch.div(lens + 2 - 3, 2, rounding_mode="floor") + 1
            return h.transpose(1, 2), lens

    return Wrapped().eval()


def export(model, path):
    import torch

    x = torch.randn(1, 128, 1000)
    n = torch.tensor([1000], dtype=torch.int64)
    torch.onnx.export(model, (x, n), path, input_names=["audio_signal", "length"],
                      output_names=["outputs", "encoded_lengths"],
                      dynamic_axes={"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"},
                                    "outputs": {0: "B", 2: "T_out"},
                                    "encoded_lengths": {0: "B"}},
                      opset_version=17, do_constant_folding=True, dynamo=False)


def torch_rows(model, batch, frames, iters, compile_mode):
    import torch

    rows = []
    m = model.half().cuda()  # in place: later batches find it there
    x = torch.randn(batch, 128, frames, device="cuda", dtype=torch.half)
    n = torch.full((batch,), frames, device="cuda", dtype=torch.int64)
    with torch.inference_mode():
        for _ in range(3):
            m(x, n)
        torch.cuda.synchronize()
        rows.append(("torch eager fp16", time_ms(lambda: m(x, n), iters)))
        try:
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    m(x, n)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                m(x, n)
            rows.append(("torch cuda graph fp16", time_ms(g.replay, iters)))
        except Exception as e:  # noqa: BLE001 - reported, the run goes on
            rows.append(("torch cuda graph fp16", f"failed: {type(e).__name__}: {e}"[:300]))
        if compile_mode:
            try:
                c = torch.compile(m, mode=compile_mode)
                for _ in range(3):
                    c(x, n)
                torch.cuda.synchronize()
                rows.append((f"torch.compile {compile_mode} fp16", time_ms(lambda: c(x, n), iters)))
            except Exception as e:  # noqa: BLE001
                rows.append((f"torch.compile {compile_mode}", f"failed: {e}"[:300]))
    return rows


def infd_rows(infd, onnx, batch, frames, iters):
    rows = []
    for prec in ("fp16", "fp32"):
        cmd = [infd, "bench", onnx, "--device", "cuda", "--precision", prec, "--shape",
               f"audio_signal={batch},128,{frames}", "--shape", f"length={batch}",
               "--iterations", str(iters), "--json", "--device-input"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            rows.append((f"infd {prec}", "failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]))
            continue
        j = json.loads(r.stdout.strip().splitlines()[-1])
        ms = j.get("p50_ms")
        rows.append((f"infd {prec}", ms if ms is not None else f"no latency in {j}"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", required=True)
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--frames", type=int, default=1000, help="feature frames (1000: 10 s)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--onnx", default="/tmp/parakeet-encoder/encoder-model.onnx")
    ap.add_argument("--compile", default="", help="torch.compile mode to time too")
    ap.add_argument("--probe", action="store_true", help="export and run infd at batch 1 only")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    import torch

    model = build_encoder()
    if not os.path.exists(a.onnx):
        os.makedirs(os.path.dirname(a.onnx), exist_ok=True)
        export(model, a.onnx)
    print(f"encoder: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, "
          f"{a.onnx}", flush=True)
    results = []
    batches = [1] if a.probe else [int(b) for b in a.batches.split(",")]
    for b in batches:
        rows = infd_rows(a.infd, a.onnx, b, a.frames, a.iters)
        if not a.probe:
            rows = torch_rows(model, b, a.frames, a.iters, a.compile) + rows
            torch.cuda.empty_cache()
        audio_s = b * a.frames / 100.0
        for name, ms in rows:
            if isinstance(ms, (int, float)):
                print(f"B={b:4d}  {name:28s} {ms:9.2f} ms  RTFx {audio_s / (ms / 1000):9.0f}",
                      flush=True)
            else:
                print(f"B={b:4d}  {name:28s} {ms}", flush=True)
            results.append({"batch": b, "variant": name, "ms": ms})
    if a.out:
        with open(os.path.join(a.out, "asr_gpu.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
