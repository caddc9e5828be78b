#!/usr/bin/python3
"""Speech on the CPU (issue #21): infd against ONNX Runtime on the same
Parakeet-TDT-like ONNX files, side by side in one run.

The model is scripts/gen_asr_models.py's "bench" size (d_model 256, 8
conformer layers, 4 heads, LSTM predictor 320, vocab 1024, 128 mels;
random weights, onnx-asr layout), made here when missing. Per thread count:

- the encoder at 2.56 s and 10.24 s of audio (256 and 1024 feature frames,
  infd's bucket sizes): `infd bench` against tools/ort_ref.js
  (onnxruntime-node, graph optimizations "all"), p50 ms;
- one decoder-joint step (predictor + joint, batch 1), p50 ms;
- the whole pipeline: `infd asr MODEL FILE.wav` on 10 s of speech-like
  audio, five files in one process minus one file (the model load taken
  out) over four, as a real-time factor (seconds of compute per second of
  audio). ORT's pipeline figure is its encoder time plus its step time
  times the decoder-joint runs infd's decoding took (`infd asr --json`'s
  joint_runs): the same work, with ORT's per-call times, and without the
  features, which both would compute alike.
- streaming (`infd asr --stream`, buffered mode) of the same 10 s file in
  NeMo's 10-2-2 (chunk 2 s, 10 s before, 2 s after) and a low-latency
  2-0.16-0.32 setting: compute per chunk and the real-time factor of one
  session. ORT's estimate adds, per chunk, its encoder time at that chunk's
  window (padded to infd's buckets of 256 frames, each timed here) and its
  step time times the joint runs infd took.

    /usr/bin/python3 bench/asr_vs_ort.py [--threads 1,2] [--rounds 3]
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("INFD_CACHE", REPO / ".cache"))
MODEL = CACHE / "models" / "asr" / "bench-tdt"
sys.path.insert(0, str(REPO / "tests" / "e2e"))


def p50(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: {r.stderr.strip()[-300:]}")
    return json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])[
        "p50_ms"]


def shapes(pairs):
    out = []
    for name, dims in pairs:
        out += ["--shape", f"{name}={','.join(map(str, dims))}"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(REPO / "build/release/infd"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    a = ap.parse_args()
    if not (MODEL / "stamp").exists():
        subprocess.run(["/usr/bin/python3", REPO / "scripts/gen_asr_models.py", "--size", "bench",
                        "--out", MODEL.parent], check=True, capture_output=True)
    enc, dj = MODEL / "encoder-model.onnx", MODEL / "decoder_joint-model.onnx"
    cases = [(f"encoder {frames / 100:.2f} s", enc,
              shapes([("audio_signal", (1, 128, frames)), ("length", (1,))]))
             for frames in (256, 1024)]
    cases.append(("decoder-joint step", dj, shapes([
        ("encoder_outputs", (1, 256, 1)), ("targets", (1, 1)), ("target_length", (1,)),
        ("input_states_1", (2, 1, 320)), ("input_states_2", (2, 1, 320))])))
    print("| part | threads | infd p50 ms | ORT p50 ms | infd/ORT speed |")
    print("|---|---|---|---|---|")
    per = {}
    for threads in [int(t) for t in a.threads.split(",")]:
        for name, path, shp in cases:
            rows = []
            for _ in range(a.rounds):
                ours = p50([a.infd, "bench", path, *shp, "--threads", threads, "--iterations",
                            a.iterations, "--warmup", 5, "--json"])
                ref = p50(["node", REPO / "tools/ort_ref.js", path, *shp, "--threads", threads,
                           "--opt", "all", "--warmup", 5, "--bench-iterations", a.iterations])
                rows.append((ours, ref))
            ours, ref = (statistics.median(r[i] for r in rows) for i in (0, 1))
            per[(name, threads)] = (ours, ref)
            print(f"| {name} | {threads} | {ours:.3f} | {ref:.3f} | {ref / ours:.2f} |",
                  flush=True)
    from test_asr_features import speechlike, write_wav

    with tempfile.TemporaryDirectory() as tmp:
        wav = pathlib.Path(tmp) / "s.wav"
        write_wav(wav, speechlike(160000, 1))
        print("\n| pipeline, 10 s of audio | threads | infd s | infd RTF | ORT est. s | "
              "ORT est. RTF | infd/ORT speed |")
        print("|---|---|---|---|---|---|---|")
        for threads in [int(t) for t in a.threads.split(",")]:
            def wall(n):
                t0 = time.monotonic()
                r = subprocess.run([a.infd, "asr", MODEL, *([wav] * n), "--json", "--threads",
                                    str(threads)], capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    raise RuntimeError(r.stderr)
                return time.monotonic() - t0, json.loads(r.stdout.splitlines()[0])
            runs = []
            for _ in range(a.rounds):
                (t1, res), (t5, _) = wall(1), wall(5)
                runs.append((t5 - t1) / 4)
            per_file = statistics.median(runs)
            steps = res["joint_runs"]
            ort = (per[("encoder 10.24 s", threads)][1] +
                   steps * per[("decoder-joint step", threads)][1]) / 1000
            print(f"| {len(res['tokens'])} tokens, {steps} joint runs | {threads} | "
                  f"{per_file:.4f} | {per_file / 10:.4f} | {ort:.4f} | {ort / 10:.4f} | "
                  f"{ort / per_file:.2f} |", flush=True)
        stream_rows(a, wav, enc, per)
    return 0


def windows(n, chunk, left, right, unit=1280):
    """The windows (in samples) infd's buffered streaming encodes for n
    samples (recognizer.c: plan_chunk), as padded feature frames."""
    out, cs = [], 0
    while cs < n:
        ce = min(cs + chunk, n)
        ws, we = max(0, cs - left), min(n, ce + right)
        frames = (we - ws) // 160 + 1
        out.append(-(-frames // 256) * 256)
        cs += chunk
    return out


def stream_rows(a, wav, enc, per):
    """Streaming rows (module docstring)."""
    ort_enc = {}
    print("\n| streaming 10 s, chunk/left/right ms | threads | chunks | infd ms per chunk | "
          "infd RTF | ORT est. ms per chunk | infd/ORT speed |")
    print("|---|---|---|---|---|---|---|")
    for threads in [int(t) for t in a.threads.split(",")]:
        for chunk, left, right in ((2000, 10000, 2000), (160, 2000, 320)):
            opts = ["--stream", "--chunk-ms", str(chunk), "--left-ms", str(left), "--right-ms",
                    str(right), "--feed-ms", str(chunk)]

            def wall(n):
                t0 = time.monotonic()
                r = subprocess.run([a.infd, "asr", MODEL, *([wav] * n), "--json", "--threads",
                                    str(threads), *opts], capture_output=True, text=True,
                                   timeout=600)
                if r.returncode != 0:
                    raise RuntimeError(r.stderr)
                finals = [json.loads(x) for x in r.stdout.splitlines() if '"final":true' in x]
                return time.monotonic() - t0, finals[0]
            runs = []
            for _ in range(a.rounds):
                (t1, res), (t5, _) = wall(1), wall(5)
                runs.append((t5 - t1) / 4)
            per_file = statistics.median(runs)
            wins = windows(160000, chunk * 16, left * 16, right * 16)
            for f in set(wins):
                if (f, threads) not in ort_enc:
                    ort_enc[(f, threads)] = statistics.median(p50([
                        "node", REPO / "tools/ort_ref.js", enc, *shapes([
                            ("audio_signal", (1, 128, f)), ("length", (1,))]),
                        "--threads", threads, "--opt", "all", "--warmup", 3,
                        "--bench-iterations", 10]) for _ in range(a.rounds))
            ort = (sum(ort_enc[(f, threads)] for f in wins) +
                   res["joint_runs"] * per[("decoder-joint step", threads)][1])
            ours = per_file * 1000 / len(wins)
            print(f"| {chunk}/{left}/{right} | {threads} | {len(wins)} | {ours:.2f} | "
                  f"{per_file / 10:.4f} | {ort / len(wins):.2f} | "
                  f"{ort / len(wins) / ours:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
