#!/usr/bin/python3
"""Word error rate on real human speech: the five LibriVox recordings of
Debian's pocketsphinx-testdata (16 kHz, 2-8 s, with transcripts), through
`infd asr MODEL_DIR` and through PocketSphinx (`pocketsphinx_continuous`
with Debian's pocketsphinx-en-us acoustic model, language model and
dictionary) on the same files (issue #26).

    python3 bench/asr_real_speech.py MODEL_DIR [--infd build/release/infd] [--json FILE]

Prints each file's reference and both transcripts, and each system's WER
over the five files (scored as tools/train_asr/train.py's wer()).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools", "train_asr"))

from evaluate import infd_transcripts  # noqa: E402
from train import wer  # noqa: E402

DATA = "/usr/share/pocketsphinx/test/data/librivox"
PS_MODEL = "/usr/share/pocketsphinx/model/en-us"


def references():
    refs = {}
    with open(os.path.join(DATA, "transcription")) as f:
        for line in f:
            m = re.match(r"<s> (.*) </s> \((\S+)\)", line.strip())
            if m:
                refs[m.group(2)] = m.group(1)
    return refs


def pocketsphinx(wav):
    r = subprocess.run(["pocketsphinx_continuous", "-infile", wav, "-hmm",
                        os.path.join(PS_MODEL, "en-us"), "-lm",
                        os.path.join(PS_MODEL, "en-us.lm.bin"), "-dict",
                        os.path.join(PS_MODEL, "cmudict-en-us.dict"), "-logfn", "/dev/null"],
                       capture_output=True, text=True)
    return " ".join(line.strip() for line in r.stdout.splitlines() if line.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--infd", default=os.path.join(REPO, "build", "release", "infd"))
    ap.add_argument("--json")
    a = ap.parse_args()
    refs = references()
    names = sorted(refs)
    wavs = [os.path.join(DATA, n + ".wav") for n in names]
    ours = infd_transcripts(a.infd, a.model, wavs, stream=False)
    have_ps = shutil.which("pocketsphinx_continuous") and os.path.isdir(PS_MODEL)
    ps = [pocketsphinx(w) for w in wavs] if have_ps else None
    report = {"files": []}
    for i, n in enumerate(names):
        row = {"file": n, "ref": refs[n], "infd": ours[i]}
        print(f"{n}\n  ref:          {refs[n]}\n  infd:         {ours[i]}")
        if ps:
            row["pocketsphinx"] = ps[i]
            print(f"  pocketsphinx: {ps[i]}")
        report["files"].append(row)
    gold = [refs[n] for n in names]
    report["infd_wer"] = wer(gold, ours)
    print(f"infd asr {a.model}: WER {100 * report['infd_wer']:.1f}% "
          f"({sum(len(g.split()) for g in gold)} words)")
    if ps:
        report["pocketsphinx_wer"] = wer(gold, ps)
        print(f"pocketsphinx_continuous (pocketsphinx-en-us): WER "
              f"{100 * report['pocketsphinx_wer']:.1f}%")
    else:
        print("pocketsphinx_continuous or pocketsphinx-en-us not installed: only infd measured")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
