#!/usr/bin/python3
"""The text the speech model is trained and tested on, from English that
Debian packages ship: the `fortunes` package's collections (sentences), and
`wamerican`'s word list (for word sequences that widen the vocabulary).

    python3 tools/train_asr/corpus.py --out DIR

writes DIR/train.txt and DIR/test.txt, one normalised sentence a line:
lower case, words of a-z and apostrophes, single spaces. Sentences are kept
only when espeak-ng will say exactly their words: no digits, symbols,
abbreviations, acronyms or single letters other than "a" and "i".

The split is by sentence text: a sentence is held out for testing when
held_out(sentence) is true (a hash of its text), so that the tests, which
synthesise held-out sentences at test time from the same installed
packages, never meet a sentence the model was trained on. Word sequences
made from the word list go to training only.
"""

import argparse
import hashlib
import os
import random
import re

FORTUNES = "/usr/share/games/fortunes"
WORDS = "/usr/share/dict/american-english"
# Words espeak-ng expands into others, or that read as letters.
ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "ie", "eg", "co", "inc",
                 "ltd", "no", "vol", "pp", "ft", "lb", "oz", "mt", "ave", "gen", "gov", "rev",
                 "prof", "sgt", "capt", "col", "lt", "cf", "al", "ok"}
MIN_WORDS, MAX_WORDS = 3, 24
HELD_OUT_EVERY = 20  # 1 sentence in 20 is a test sentence


def held_out(sentence):
    """True for test sentences: the same rule in the recipe and the tests."""
    h = int.from_bytes(hashlib.sha1(sentence.encode()).digest()[:4], "big")
    return h % HELD_OUT_EVERY == 0


def normalise(raw):
    """The sentence's words as the model writes them, or None when espeak-ng
    might say something else than the words."""
    if re.search(r"[^A-Za-z' ,.;:!?\"\-]", raw):
        return None  # digits, symbols, brackets, non-ASCII letters
    words = []
    for w in re.split(r"[\s,.;:!?\"\-]+", raw):
        w = w.strip("'")
        if not w:
            continue
        if len(w) > 1 and w.isupper():
            return None  # an acronym, or shouting that espeak may spell
        lw = w.lower()
        if lw in ABBREVIATIONS or (len(lw) == 1 and lw not in ("a", "i")):
            return None
        if "'" in lw and not re.fullmatch(r"[a-z]+'[a-z]+", lw):
            return None
        words.append(lw)
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return None
    return " ".join(words)


def fortune_sentences(folder=FORTUNES):
    """Every sentence of every collection, normalised, without repeats, in
    a fixed order."""
    seen, out = set(), []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if "." in name or not os.path.isfile(path) or name.endswith("art"):
            continue
        with open(path, encoding="latin-1") as f:
            text = f.read()
        for entry in text.split("\n%\n"):
            # Attributions and dialogue markers are not speech.
            body = " ".join(line.strip() for line in entry.splitlines()
                            if line.strip() and not line.strip().startswith("--"))
            for raw in re.split(r"(?<=[.!?])\s+", body):
                s = normalise(raw)
                if s and s not in seen:
                    seen.add(s)
                    out.append(s)
    return out


def word_list(path=WORDS):
    """Lower-case words of the list, without possessives."""
    with open(path, encoding="utf-8") as f:
        return sorted({w.strip() for w in f
                       if re.fullmatch(r"[a-z]{2,14}", w.strip()) or w.strip() in ("a", "i")})


def word_sequences(words, vocabulary, n, seed=1):
    """n sequences of 4-12 words: half from the corpus's own words (so their
    frequencies carry over), half from the whole word list."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        pool = vocabulary if i % 2 == 0 else words
        out.append(" ".join(rng.choice(pool) for _ in range(rng.randint(4, 12))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sequences", type=int, default=20000,
                    help="word-list sequences added to training")
    a = ap.parse_args()
    sentences = fortune_sentences()
    train = [s for s in sentences if not held_out(s)]
    test = [s for s in sentences if held_out(s)]
    vocabulary = sorted({w for s in train for w in s.split()})
    train += word_sequences(word_list(), vocabulary, a.sequences)
    os.makedirs(a.out, exist_ok=True)
    for name, lines in (("train.txt", train), ("test.txt", test)):
        with open(os.path.join(a.out, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    words = sum(len(s.split()) for s in train)
    print(f"corpus: {len(sentences)} sentences ({len(test)} held out), "
          f"{a.sequences} word sequences; training text {words} words, "
          f"{len(vocabulary)} distinct words in its sentences")


if __name__ == "__main__":
    main()
