#!/usr/bin/python3
"""Speech for the corpus, synthesised with espeak-ng (Debian's package).

    python3 tools/train_asr/synth.py --text train.txt --out DIR --split train [--jobs N]
        [--copies K] [--espeak espeak-ng]

Each line of the text is spoken K times (default 1), each time by a voice
drawn for it: one of espeak-ng's English voices (accents), with a voice
variant (espeak-ng's `+variant`: timbre, pitch range, formants), a speed
(120-220 words a minute), a pitch (25-75) and a gap between words (0-80 ms).
The test split draws from voices that training never hears: variants no
training voice uses (HELD_OUT_VARIANTS) in every accent, and a whole accent
(HELD_OUT_ACCENTS: West Midlands) unless --all-accents (models/speech/1 was
trained without it; later models hear it, and its held-out variants stay
unseen).

espeak-ng writes 22,050 Hz WAV; it is resampled to 16 kHz (torchaudio's
resampler where torch is, else scipy's polyphase one) and stored as int16:
DIR/SPLIT.pcm (all utterances back to back) and DIR/SPLIT.jsonl (per
utterance: offset and length in samples, text, voice, speed, pitch, gap).
Runs espeak-ng in N processes at once (default: every core).
"""

import argparse
import io
import json
import multiprocessing
import os
import random
import subprocess
import sys
import wave

import numpy as np

ACCENTS = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-029",
           "en-us-nyc", "en-gb-x-gbcwmd"]
VARIANTS = ["", "m1", "m2", "m3", "m5", "m6", "m7", "m8", "f1", "f2", "f4", "f5", "klatt",
            "klatt3", "klatt4", "Alex", "Alicia", "Andrea", "Annie", "adam", "anika", "aunty",
            "benjamin", "boris", "caleb", "david", "ed", "edward", "grandma", "grandpa", "iven",
            "john", "linda", "max", "michel", "norbert", "paul", "quincy", "rob", "robert",
            "shelby", "steph", "travis", "victor", "zac", "Mike", "Michael", "Lee", "Hugo",
            "Gene", "Jacky", "Marco", "m4", "f3", "klatt2", "Andy", "belinda", "steph2"]
# Never in training: six variants, and one accent (West Midlands) unless
# --all-accents.
HELD_OUT_ACCENTS = {"en-gb-x-gbcwmd"}
HELD_OUT_VARIANTS = {"m4", "f3", "klatt2", "Andy", "belinda", "steph2"}
RATE = 16000


def voices(split, held_out_accents=HELD_OUT_ACCENTS):
    """(accent, variant) pairs of a split: training's use neither held-out
    accents nor held-out variants; the test's use at least one of them."""
    out = []
    for a in ACCENTS:
        for v in VARIANTS:
            unseen = a in held_out_accents or v in HELD_OUT_VARIANTS
            if unseen == (split == "test"):
                out.append((a, v))
    return out


def draw(rng, split, held_out_accents=HELD_OUT_ACCENTS):
    accent, variant = rng.choice(voices(split, held_out_accents))
    return {"voice": accent + (f"+{variant}" if variant else ""),
            "speed": rng.randint(120, 220), "pitch": rng.randint(25, 75),
            "gap": rng.randint(0, 8)}


def resampler():
    """22,050 -> 16,000 Hz, float32 in and out."""
    try:
        import torch
        import torchaudio.functional as AF

        torch.set_num_threads(1)  # one process per core already

        def f(x):
            return AF.resample(torch.from_numpy(x), 22050, RATE).numpy()
        return f
    except ImportError:
        from scipy.signal import resample_poly

        def f(x):
            return resample_poly(x, 320, 441).astype(np.float32)
        return f


_RESAMPLE = None


def speak(job):
    """One utterance: (index, int16 samples at 16 kHz or None, its record)."""
    global _RESAMPLE
    if _RESAMPLE is None:
        _RESAMPLE = resampler()
    i, text, v, espeak = job
    r = subprocess.run([espeak, "-v", v["voice"], "-s", str(v["speed"]), "-p", str(v["pitch"]),
                        "-g", str(v["gap"]), "--stdout", text], capture_output=True)
    if r.returncode != 0 or len(r.stdout) < 100:
        return i, None, {"error": r.stderr.decode(errors="replace")[:200]}
    with wave.open(io.BytesIO(r.stdout)) as w:
        if w.getframerate() != 22050 or w.getsampwidth() != 2 or w.getnchannels() != 1:
            return i, None, {"error": f"unexpected WAV {w.getparams()}"}
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32)
    y = _RESAMPLE(x / 32768.0)
    return i, np.clip(np.round(y * 32767.0), -32768, 32767).astype(np.int16), {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", choices=("train", "test"), required=True)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="only the first N lines")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--espeak", default="espeak-ng")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--all-accents", action="store_true",
                    help="train on every accent (hold out only HELD_OUT_VARIANTS)")
    a = ap.parse_args()
    with open(a.text) as f:
        lines = [s.strip() for s in f if s.strip()]
    if a.limit:
        lines = lines[:a.limit]
    rng = random.Random(f"{a.seed}-{a.split}")
    held = set() if a.all_accents else HELD_OUT_ACCENTS
    jobs = [(len(lines) * c + k, s, draw(rng, a.split, held), a.espeak)
            for c in range(a.copies) for k, s in enumerate(lines)]
    os.makedirs(a.out, exist_ok=True)
    records, failed, offset = [], 0, 0
    with open(os.path.join(a.out, f"{a.split}.pcm"), "wb") as pcm, \
            multiprocessing.Pool(a.jobs) as pool:
        for i, samples, extra in pool.imap(speak, jobs, chunksize=16):
            _, text, v, _ = jobs[i]
            if samples is None:
                failed += 1
                if failed <= 5:
                    print(f"synth: line {i}: {extra['error']}", file=sys.stderr)
                continue
            pcm.write(samples.tobytes())
            records.append({"offset": offset, "samples": len(samples), "text": text, **v})
            offset += len(samples)
    with open(os.path.join(a.out, f"{a.split}.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print(f"synth {a.split}: {len(records)} utterances, {offset / RATE / 3600:.2f} h, "
          f"{len({r['voice'] for r in records})} voices, {failed} failed")
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
