#!/usr/bin/env python3
"""Offline transcription of 10 s utterances at batch 1, 32 and 128 on the
GPU: infd's whole pipeline against PyTorch's encoder plus decoding on the
same weights, side by side in one run (issue #21: goal 1.5x PyTorch's best,
RTFx > 10,000 at batch >= 32).

Run on the GPU machine (its python3 has torch, transformers with the
Parakeet classes, torchaudio), with tools/gpu_bundle.sh's bundle in .gpu/x:

    python3 bench/asr_offline.py --lib .gpu/x/bin/libinfd_asr.so --model /tmp/parakeet \\
        --batches 1,32,128 --out $OUT

The model is bench/export_parakeet.py's (written to --model when missing):
transformers' 0.6B ParakeetEncoder and a predictor and joint of
Parakeet-TDT 0.6B's sizes, seeded random weights. Every row decodes the
same B speech-like 10 s signals (tests/e2e/test_asr_features.speechlike).

- infd: the C ABI (libinfd_asr.so through ctypes), device cuda, every
  stream offline (chunk_ms 0): from float samples on the host to each
  stream's result, timed by the wall clock: stream creation, features,
  the encoder (64 windows a run at most), TDT decoding (the onnx-asr
  decoder-joint run once per step for all the streams still decoding),
  the results. A first round of the same batch builds the plans and is
  not timed; the median of --rounds rounds is reported, with the split
  that INFD_ASR_DEBUG=1 logs (features, encoder, decoding).
- PyTorch: from log-mel features already on the GPU (torchaudio's, not
  timed) to each utterance's tokens: the encoder in FP16 (eager, captured
  in a CUDA graph, torch.compile), then greedy TDT decoding of the whole
  batch in lockstep (NeMo's batched label looping: one predictor-and-joint
  step for every utterance per iteration, the encoder's projection in the
  joint computed once for all frames), eager and with the step captured in
  a CUDA graph, and the loop checking on the host every --check steps
  whether any utterance is still decoding. CUDA events around encoder
  plus decoding; median of --rounds.

The tokens are noise (random weights); their counts are printed beside
each row so that a run that decodes nothing stands out. Nothing here
asserts on time: bench/RESULTS.md records the numbers with the command.
"""

import argparse
import ctypes
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
sys.path.insert(0, str(HERE.parent / "scripts"))
from test_asr_features import speechlike  # noqa: E402
from test_asr_stream import Config, Error, Result  # noqa: E402 - asr.h's structs, as the tests bind them

RATE = 16000
DURATIONS = [0, 1, 2, 3, 4]


# --- infd, through the C ABI ------------------------------------------------

def load_lib(path):
    lib = ctypes.CDLL(path)
    vp = ctypes.c_void_p
    lib.infd_asr_recognizer_create.argtypes = [ctypes.POINTER(Config), ctypes.POINTER(vp),
                                               ctypes.POINTER(Error)]
    lib.infd_asr_stream_create.argtypes = [vp, ctypes.c_void_p, ctypes.POINTER(Error)]
    lib.infd_asr_accept_waveform.argtypes = [vp, ctypes.c_int32, ctypes.POINTER(ctypes.c_float),
                                             ctypes.c_int64, ctypes.POINTER(Error)]
    lib.infd_asr_input_finished.argtypes = [vp]
    lib.infd_asr_is_ready.argtypes = [vp, vp]
    lib.infd_asr_decode_multiple.argtypes = [vp, ctypes.POINTER(vp), ctypes.c_int32,
                                             ctypes.POINTER(Error)]
    lib.infd_asr_get_result.argtypes = [vp, vp, ctypes.POINTER(ctypes.POINTER(Result)),
                                        ctypes.POINTER(Error)]
    lib.infd_asr_result_destroy.argtypes = [ctypes.POINTER(Result)]
    lib.infd_asr_stream_destroy.argtypes = [vp]
    lib.infd_asr_recognizer_destroy.argtypes = [vp]
    return lib


def check(rc, err, what):
    if rc != 0:
        raise RuntimeError(f"{what}: {err.msg.decode(errors='replace')}")


def infd_batch(lib, rec, audio):
    """Seconds from samples to results for the utterances of `audio`, and
    the tokens of each."""
    err = Error()
    n = len(audio)
    t0 = time.perf_counter()
    streams = (ctypes.c_void_p * n)()
    for i, x in enumerate(audio):
        check(lib.infd_asr_stream_create(rec, ctypes.byref(streams, i * 8), ctypes.byref(err)),
              err, "stream_create")
        p = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        check(lib.infd_asr_accept_waveform(streams[i], RATE, p, x.size, ctypes.byref(err)), err,
              "accept_waveform")
        lib.infd_asr_input_finished(streams[i])
    while any(lib.infd_asr_is_ready(rec, streams[i]) for i in range(n)):
        check(lib.infd_asr_decode_multiple(rec, streams, n, ctypes.byref(err)), err,
              "decode_multiple")
    counts = []
    for i in range(n):
        res = ctypes.POINTER(Result)()
        check(lib.infd_asr_get_result(rec, streams[i], ctypes.byref(res), ctypes.byref(err)), err,
              "get_result")
        counts.append(res.contents.count)
        lib.infd_asr_result_destroy(res)
    dt = time.perf_counter() - t0
    for i in range(n):
        lib.infd_asr_stream_destroy(streams[i])
    return dt, counts


class StderrTo:
    """fd 2 into a file while inside (the recognizer's debug lines)."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.f = open(self.path, "a")
        os.dup2(self.f.fileno(), 2)

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.f.close()


def split_of(log):
    """features, encoder, decoding ms and joint steps summed over the
    debug lines of one round."""
    f = e = d = 0.0
    runs = steps = 0
    for line in log:
        if " streams: " not in line or "features" not in line:
            continue
        tail = line.split("features ")[1]
        f += float(tail.split(",")[0])
        e += float(tail.split("encoder ")[1].split(",")[0])
        d += float(tail.split("decoding ")[1].split(" ")[0])
        inner = tail.split("(")[1].split()
        runs += int(inner[0])
        steps += int(inner[4])
    return f, e, d, runs, steps


def infd_rows(a, batches, audio_all, log_dir):
    lib = load_lib(a.lib)
    rows = []
    for prec in a.precisions.split(","):
        os.environ["INFD_ASR_DEBUG"] = "1"
        cfg = Config()
        lib.infd_asr_config_init(ctypes.byref(cfg))
        cfg.model_dir, cfg.device = a.model.encode(), a.device.encode()
        cfg.chunk_ms, cfg.precision = 0, prec.encode()
        err, rec = Error(), ctypes.c_void_p()
        log = os.path.join(log_dir, f"infd-{prec}.log")
        t0 = time.perf_counter()
        with StderrTo(log):
            rc = lib.infd_asr_recognizer_create(ctypes.byref(cfg), ctypes.byref(rec),
                                                ctypes.byref(err))
        if rc != 0:
            rows.append({"variant": f"infd {prec}", "error": err.msg.decode(errors="replace")})
            continue
        print(f"infd {prec}: loaded in {time.perf_counter() - t0:.1f} s", flush=True)
        for b in batches:
            audio = audio_all[:b]
            try:
                t0 = time.perf_counter()
                with StderrTo(log):
                    infd_batch(lib, rec, audio)  # builds this batch's plans
                first = time.perf_counter() - t0
                times, splits = [], []
                for _ in range(a.rounds):
                    start = os.path.getsize(log)
                    with StderrTo(log):
                        dt, counts = infd_batch(lib, rec, audio)
                    with open(log) as f:
                        f.seek(start)
                        splits.append(split_of(f.read().splitlines()))
                    times.append(dt)
                k = times.index(statistics.median_low(times))
                f_ms, e_ms, d_ms, runs, steps = splits[k]
                rows.append({"batch": b, "variant": f"infd {prec} pipeline",
                             "ms": times[k] * 1000, "first_ms": first * 1000,
                             "features_ms": f_ms, "encoder_ms": e_ms, "decoding_ms": d_ms,
                             "joint_runs": runs, "joint_steps": steps,
                             "tokens": sum(counts)})
            except RuntimeError as e:
                rows.append({"batch": b, "variant": f"infd {prec} pipeline", "error": str(e)})
            report(rows[-1], a.seconds)
        lib.infd_asr_recognizer_destroy(rec)
    return rows


# --- PyTorch ----------------------------------------------------------------

def torch_features(audio, n_mels=128):
    """Log-mel features [B, n_mels, T] on the GPU in FP16, per-feature
    normalised (torchaudio; NeMo's window and hop)."""
    import torch
    import torchaudio

    x = torch.from_numpy(np.stack(audio)).cuda()
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=RATE, n_fft=512, win_length=400,
                                               hop_length=160, n_mels=n_mels).cuda()
    f = torch.log(mel(x) + 2 ** -24)
    f = (f - f.mean(dim=2, keepdim=True)) / (f.std(dim=2, keepdim=True) + 1e-5)
    return f.half().contiguous()


class Decoder:
    """Greedy TDT decoding of a batch in lockstep on the GPU, with the
    semantics of src/apps/asr/tdt.h: a blank with duration 0 moves one
    frame; a token with duration 0 stays on its frame, at most
    max_symbols tokens a frame; the predictor advances only on tokens."""

    def __init__(self, dec, batch, frames, vocab, max_symbols=10):
        import torch

        self.dec, self.B, self.T, self.V, self.max_symbols = dec, batch, frames, vocab, max_symbols
        dev = "cuda"
        H = dec.lstm.hidden_size
        self.dur = torch.tensor(DURATIONS, device=dev)
        self.ar = torch.arange(batch, device=dev)
        self.cap = frames * max_symbols + 1
        z = lambda *s, dt=torch.long: torch.zeros(*s, dtype=dt, device=dev)  # noqa: E731
        self.f = torch.zeros(batch, frames, dec.enc.out_features, device=dev)
        self.lens = z(batch)
        self.h, self.c = z(2, batch, H, dt=torch.float), z(2, batch, H, dt=torch.float)
        self.last, self.t, self.sym = z(batch), z(batch), z(batch)
        self.last_frame, self.n = z(batch), z(batch)
        self.out = z(batch, self.cap)
        self.graph = None

    def reset(self, enc, lens):
        """enc [B, D, T] from the encoder, lens [B] its valid frames."""
        import torch

        with torch.inference_mode():
            self.f.copy_(self.dec.enc(enc.transpose(1, 2).float()))
            self.lens.copy_(lens)
            self.h.zero_()
            self.c.zero_()
            self.last.fill_(self.V)
            self.t.zero_()
            self.sym.zero_()
            self.last_frame.fill_(-1)
            self.n.zero_()

    def step(self):
        import torch

        d = self.dec
        V = self.V
        active = self.t < self.lens
        g, (h2, c2) = d.lstm(d.embed(self.last).unsqueeze(0), (self.h, self.c))
        p = d.pred(g[0])
        z = d.joint(torch.relu(self.f[self.ar, self.t.clamp(max=self.T - 1)] + p))
        k = z[:, :V + 1].argmax(-1)
        dur = self.dur[z[:, V + 1:].argmax(-1)]
        blank = k == V
        dur = torch.where(blank & (dur == 0), 1, dur)
        emit = active & ~blank
        slot = self.n.clamp(max=self.cap - 1)
        self.out[self.ar, slot] = torch.where(emit, k, self.out[self.ar, slot])
        self.n.add_(emit.long())
        self.h.copy_(torch.where(emit[None, :, None], h2, self.h))
        self.c.copy_(torch.where(emit[None, :, None], c2, self.c))
        self.last.copy_(torch.where(emit, k, self.last))
        sym = torch.where(emit, torch.where(self.last_frame == self.t, self.sym + 1, 1), self.sym)
        self.sym.copy_(sym)
        self.last_frame.copy_(torch.where(emit, self.t, self.last_frame))
        forced = emit & (dur == 0) & (sym >= self.max_symbols)
        self.t.add_(torch.where(active, dur + forced.long(), 0))

    def capture(self, check):
        import torch

        from cuda_vs_torch import captured

        with torch.inference_mode():
            self.graph = captured(lambda: [self.step() for _ in range(check)])

    def run(self, check):
        """Decodes until every utterance is done; the token counts."""
        import torch

        with torch.inference_mode():
            while bool((self.t < self.lens).any()):
                if self.graph is not None:
                    self.graph()
                else:
                    for _ in range(check):
                        self.step()
        return self.n


def torch_rows(a, batches, audio_all):
    import torch

    import export_parakeet
    from cuda_vs_torch import captured

    enc, dec = export_parakeet.modules()
    enc = enc.half().cuda()
    dec = dec.cuda()
    V = export_parakeet.VOCAB
    rows = []
    compiled = torch.compile(enc, mode=a.compile) if a.compile else None
    for b in batches:
        feats = torch_features(audio_all[:b])
        T = feats.shape[2]
        n = torch.full((b,), T, device="cuda", dtype=torch.int64)
        with torch.inference_mode():
            out, lens = enc(feats, n)
        decoder = Decoder(dec, b, out.shape[2], V)

        def graphed():
            with torch.inference_mode():
                return captured(lambda: enc(feats, n))

        # eager decoding with the eager encoder; then the decoder's step
        # captured, after it the compiled encoder, last the encoder captured
        # by hand (each made when its rows come)
        plan = [("eager", lambda: lambda: enc(feats, n), "eager"),
                ("eager", lambda: lambda: enc(feats, n), "cuda graph")]
        if compiled is not None:
            plan.append((f"compile {a.compile}", lambda: lambda: compiled(feats, n), "cuda graph"))
        plan.append(("cuda graph", graphed, "cuda graph"))
        for ename, make, dname in plan:
            name = f"torch {ename} + {dname} decoding"
            try:
                if dname == "cuda graph" and decoder.graph is None:
                    decoder.reset(out, lens)
                    decoder.capture(a.check)
                fn = make()
                for _ in range(3):
                    with torch.inference_mode():
                        o, ln = fn()
                    decoder.reset(o, ln)
                    decoder.run(a.check)
                torch.cuda.synchronize()
                ms, enc_ms, counts = [], [], None
                e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                for _ in range(a.rounds):
                    e0.record()
                    with torch.inference_mode():
                        o, ln = fn()
                    e1.record()
                    decoder.reset(o, ln)
                    counts = decoder.run(a.check)
                    e2.record()
                    torch.cuda.synchronize()
                    ms.append(e0.elapsed_time(e2))
                    enc_ms.append(e0.elapsed_time(e1))
                k = ms.index(statistics.median_low(ms))
                rows.append({"batch": b, "variant": name, "ms": ms[k], "encoder_ms": enc_ms[k],
                             "decoding_ms": ms[k] - enc_ms[k], "tokens": int(counts.sum())})
            except Exception as e:  # noqa: BLE001 - reported, the run goes on
                rows.append({"batch": b, "variant": name,
                             "error": f"{type(e).__name__}: {e}"[:300]})
            report(rows[-1], a.seconds)
        del decoder
        torch.cuda.empty_cache()
    return rows


def report(r, seconds):
    if "error" in r:
        print(f"B={r.get('batch', '-'):>4}  {r['variant']:40s} failed: {r['error']}", flush=True)
        return
    rtfx = r["batch"] * seconds / (r["ms"] / 1000)
    r["rtfx"] = rtfx
    split = "  ".join(f"{k[:-3]} {r[k]:.1f}" for k in ("features_ms", "encoder_ms", "decoding_ms")
                      if k in r)
    steps = f"  joint {r['joint_runs']} runs in {r['joint_steps']} steps" \
        if "joint_steps" in r else ""
    print(f"B={r['batch']:4d}  {r['variant']:40s} {r['ms']:9.1f} ms  RTFx {rtfx:8.0f}  "
          f"({split}){steps}  tokens {r['tokens']}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=".gpu/x/bin/libinfd_asr.so")
    ap.add_argument("--model", default="/tmp/parakeet")
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--device", default="cuda", help="infd's (cpu: a smoke test of the script)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--precisions", default="fp16", help="infd's, comma-separated")
    ap.add_argument("--compile", default="reduce-overhead", help="torch.compile mode ('' none)")
    ap.add_argument("--check", type=int, default=4,
                    help="PyTorch decoding steps between the host's checks")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-infd", action="store_true")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.model, "decoder_joint-model.onnx")):
        subprocess.run([sys.executable, str(HERE / "export_parakeet.py"), "--out", a.model],
                       check=True)
    batches = [int(b) for b in a.batches.split(",")]
    n = int(a.seconds * RATE)
    audio_all = [speechlike(n, 1000 + i).astype(np.float32) for i in range(max(batches))]
    log_dir = a.out or tempfile.mkdtemp()
    rows = []
    if not a.skip_infd:
        rows += infd_rows(a, batches, audio_all, log_dir)
    if not a.skip_torch:
        rows += torch_rows(a, batches, audio_all)
    if a.out:
        with open(os.path.join(a.out, "asr_offline.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
