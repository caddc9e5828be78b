#!/usr/bin/python3
"""Word error rate of a trained model through infd, and agreement with
PyTorch's own greedy TDT decode of the same weights.

    python3 tools/train_asr/evaluate.py --model DIR --data DIR [--weights weights.pt]
        [--infd build/release/infd] [--limit N] [--stream [--left-ms 4000 --right-ms 2000]]
        [--torch-pad FRAMES] [--json FILE]

--data holds test.pcm and test.jsonl from synth.py (held-out sentences
spoken by held-out voices). Each utterance is written as a 16 kHz WAV and
transcribed by `infd asr MODEL_DIR` (offline, or with --stream in 160 ms
chunks). With --weights (train.py's weights.pt, and spm.model beside it or
in --data), the same utterances are decoded by train.py's PyTorch path, on
the CPU: the transcripts are compared utterance by utterance, and each
difference is listed. --torch-pad 256 pads PyTorch's features with zero
frames to a multiple of 256, as infd's encoder buckets do, to tell the
differences padding makes from the rest.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from synth import HELD_OUT_ACCENTS  # noqa: E402
from train import wer  # noqa: E402


def infd_transcripts(infd, model, wavs, stream, left_ms=4000, right_ms=2000):
    """One `infd asr` run over every file: its text per file. Streaming: in
    160 ms chunks, each encoded with left_ms before and right_ms after it."""
    cmd = [infd, "asr", model, *wavs, "--json"]
    if stream:
        cmd += ["--stream", "--chunk-ms", "160", "--left-ms", str(left_ms), "--right-ms",
                str(right_ms)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"infd asr failed ({r.returncode}): {r.stderr[-2000:]}")
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            out[d["file"]] = d["text"]
    return [out.get(w, "") for w in wavs]


def torch_transcripts(weights, spm_path, recs, pcm, pad=0):
    import sentencepiece as spm
    import torch

    import features
    import train

    ck = torch.load(weights, map_location="cpu")
    a = argparse.Namespace(**ck["args"])
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    enc, dec = train.build(a, sp.get_piece_size())
    enc.load_state_dict(ck["encoder"])
    dec.load_state_dict(ck["decoder_joint"])
    enc.eval()
    dec.eval()
    lm = features.LogMel(train.N_MELS, normalize=not getattr(a, "streaming", False))
    out = []
    for r in recs:
        x = torch.from_numpy(pcm[r["offset"]:r["offset"] + r["samples"]].astype(np.float32)
                             / 32768.0).unsqueeze(0)
        out += train.transcribe(enc, dec, lm, x, torch.tensor([r["samples"]]),
                                sp.get_piece_size(), sp, pad)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--weights")
    ap.add_argument("--spm")
    ap.add_argument("--infd", default=os.path.join(HERE, "..", "..", "build", "release", "infd"))
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--left-ms", type=int, default=4000)
    ap.add_argument("--right-ms", type=int, default=2000)
    ap.add_argument("--torch-pad", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    with open(os.path.join(a.data, "test.jsonl")) as f:
        recs = [json.loads(line) for line in f][:a.limit or None]
    pcm = np.fromfile(os.path.join(a.data, "test.pcm"), dtype=np.int16)
    refs = [r["text"] for r in recs]
    report = {"utterances": len(recs), "voices": len({r["voice"] for r in recs}),
              "words": sum(len(t.split()) for t in refs), "stream": a.stream}
    if a.stream:
        report.update({"chunk_ms": 160, "left_ms": a.left_ms, "right_ms": a.right_ms})
    with tempfile.TemporaryDirectory(prefix="infd-asr-eval-") as tmp:
        wavs = []
        for i, r in enumerate(recs):
            path = os.path.join(tmp, f"u{i:05d}.wav")
            with wave.open(path, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(16000)
                w.writeframes(pcm[r["offset"]:r["offset"] + r["samples"]].tobytes())
            wavs.append(path)
        hyps = infd_transcripts(a.infd, a.model, wavs, a.stream, a.left_ms, a.right_ms)
    report["infd_wer"] = wer(refs, hyps)
    print(f"infd asr{' --stream' if a.stream else ''}: WER {100 * report['infd_wer']:.2f}% over "
          f"{len(recs)} utterances ({report['words']} words, {report['voices']} voices)")
    # The test's voices are held-out variants; the West Midlands accent
    # (HELD_OUT_ACCENTS) is apart: models/speech/1 never heard it.
    report["by_voice"] = {}
    for name, pick in (("West Midlands accent", lambda v: v.split("+")[0] in HELD_OUT_ACCENTS),
                       ("other accents", lambda v: v.split("+")[0] not in HELD_OUT_ACCENTS)):
        ix = [i for i, r in enumerate(recs) if pick(r["voice"])]
        w = wer([refs[i] for i in ix], [hyps[i] for i in ix])
        report["by_voice"][name] = {"utterances": len(ix), "wer": w}
        print(f"  {name}: WER {100 * w:.2f}% over {len(ix)} utterances")
    if a.weights:
        spm_path = a.spm or os.path.join(os.path.dirname(a.weights), "spm.model")
        ref_hyps = torch_transcripts(a.weights, spm_path, recs, pcm, a.torch_pad)
        same = sum(h == t for h, t in zip(hyps, ref_hyps))
        report["torch_wer"] = wer(refs, ref_hyps)
        report["identical"] = same
        report["differences"] = [{"ref": r, "infd": h, "torch": t}
                                 for r, h, t in zip(refs, hyps, ref_hyps) if h != t]
        print(f"PyTorch greedy TDT: WER {100 * report['torch_wer']:.2f}%; identical "
              f"transcripts {same} of {len(recs)} ({100 * same / max(1, len(recs)):.1f}%)")
        for d in report["differences"][:10]:
            print(f"  ref:   {d['ref']}\n  infd:  {d['infd']}\n  torch: {d['torch']}")
    report["transcripts"] = [{"ref": r, "infd": h} for r, h in zip(refs, hyps)]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
