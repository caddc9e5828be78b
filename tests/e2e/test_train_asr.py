"""The speech-model training recipe's own parts (tools/train_asr, issue #26),
on the CPU:

- the TDT loss against the enumeration of every path (durations 0-3, no
  RNN-T special case), and its gradient against finite differences;
- the loss's CUDA kernels (tdt_cuda.py, numba's CUDA simulator) against
  the torch loss;
- the recipe's features against `infd asr --features` on the same audio,
  so a model is trained on the features it is served with;
- the corpus rules: what espeak-ng would not say as written is dropped,
  and the held-out rule is a fixed function of the text.

The RNN-T special case against torchaudio.functional.rnnt_loss needs
torchaudio, which Debian 12 does not package; it runs on the GPU machine
before every training run (train.py stops if it disagrees).
"""

import math
import subprocess
import sys
import wave

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "train_asr"))

import corpus  # noqa: E402
import features  # noqa: E402
import tdt  # noqa: E402


def write_wav(path, pcm):
    """int16 samples as a 16 kHz mono WAV file: its path."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return path


@pytest.mark.parametrize("seed", range(5))
def test_tdt_loss_equals_path_enumeration(seed):
    diff, ours, ref = tdt.check_brute_force(seed)
    assert diff < 1e-4, (ours, ref)


def test_tdt_loss_batch_and_lengths():
    """Each utterance of a padded batch gets the loss it gets alone."""
    g = torch.Generator().manual_seed(3)
    B, T, U, V, durs = 3, 9, 4, 5, [0, 1, 2, 4]
    lp = torch.log_softmax(torch.randn(B, T, U + 1, V + 1, generator=g), -1)
    ld = torch.log_softmax(torch.randn(B, T, U + 1, len(durs), generator=g), -1)
    targets = torch.randint(0, V, (B, U), generator=g)
    t_lens, u_lens = torch.tensor([9, 6, 4]), torch.tensor([4, 2, 3])
    batch = tdt.tdt_loss(lp, ld, ld, targets, t_lens, u_lens, durs, V)
    for b in range(B):
        t, u = int(t_lens[b]), int(u_lens[b])
        alone = tdt.tdt_loss(lp[b:b + 1, :t, :u + 1], ld[b:b + 1, :t, :u + 1],
                             ld[b:b + 1, :t, :u + 1], targets[b:b + 1, :u], t_lens[b:b + 1],
                             u_lens[b:b + 1], durs, V)
        ref = tdt.brute_force(lp[b, :t, :u + 1], ld[b, :t, :u + 1], targets[b, :u].tolist(),
                              t, u, durs, V)
        assert abs(batch[b].item() - alone.item()) < 1e-4
        assert abs(batch[b].item() - ref) < 1e-4


def test_tdt_loss_gradient():
    g = torch.Generator().manual_seed(5)
    T, U, V, durs = 5, 2, 3, [0, 1, 2]
    x = torch.randn(1, T, U + 1, V + 1 + len(durs), generator=g, dtype=torch.float64)
    targets = torch.tensor([[1, 2]])

    def f(z):
        lp = torch.log_softmax(z[..., :V + 1], -1)
        ld = torch.log_softmax(z[..., V + 1:], -1)
        return tdt.tdt_loss(lp, ld, ld, targets, torch.tensor([T]), torch.tensor([U]), durs, V)

    assert torch.autograd.gradcheck(f, (x.requires_grad_(),), eps=1e-6, atol=1e-5)


def test_impossible_alignment_is_infinite_loss():
    """Three tokens cannot come out of one frame that must end with a
    blank when durations are only 1 and 2: the loss says so (-log 0)."""
    lp = torch.log_softmax(torch.zeros(1, 1, 4, 4), -1)
    ld = torch.log_softmax(torch.zeros(1, 1, 4, 2), -1)
    loss = tdt.tdt_loss(lp, ld, ld, torch.tensor([[0, 1, 2]]), torch.tensor([1]),
                        torch.tensor([3]), [1, 2], 3)
    assert loss.item() > 1e20


def test_tdt_cuda_kernels_match_the_torch_loss():
    """tdt_cuda's kernels (numba, simulated on the CPU with
    NUMBA_ENABLE_CUDASIM=1) give tdt.tdt_loss's loss and gradient on a
    padded batch with durations 0-4, and -log 0 with no gradient where no
    path exists."""
    pytest.importorskip("numba")
    code = f"""
import sys, json, torch
sys.path.insert(0, {str(ROOT / "tools" / "train_asr")!r})
import tdt_cuda
dl, dg = tdt_cuda.check("cpu", verbose=False)
lp = torch.log_softmax(torch.zeros(1, 1, 4, 4), -1).requires_grad_()
ld = torch.log_softmax(torch.zeros(1, 1, 4, 2), -1).requires_grad_()
loss = tdt_cuda.tdt_loss(lp, ld, ld, torch.tensor([[0, 1, 2]]), torch.tensor([1]),
                         torch.tensor([3]), [1, 2], 3)
loss.sum().backward()
print(json.dumps([dl, dg, loss.item(), lp.grad.abs().max().item()]))
"""
    env = dict(__import__("os").environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    dl, dg, impossible, grad = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert dl < 1e-4 and dg < 1e-4
    assert impossible > 1e20 and grad == 0.0


@pytest.mark.parametrize("conv_mask,independent", [("before", False), ("after-glu", True)])
def test_encoder_output_and_padding(conv_mask, independent):
    """infd pads every encoding to a 256-frame bucket. With the mask before
    the convolution module's first pointwise convolution (models/speech/1, in git history),
    its bias refills the padded frames and the valid frames' output changes
    with the padding; masked after the GLU (NeMo's place) it does not."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_asr_models as g

    torch.manual_seed(0)
    Encoder, _ = g.build_modules(d_model=32, n_layers=2, n_heads=4, pred=32, vocab=16,
                                 n_mels=128, ff_mult=2, conv_mask=conv_mask)
    enc = Encoder().eval()
    feats = torch.randn(1, 128, 200)
    length = torch.tensor([200])
    with torch.no_grad():
        a, la = enc(feats, length)
        b, lb = enc(torch.nn.functional.pad(feats, (0, 56)), length)
    assert int(la) == int(lb) == a.shape[2]
    diff = (a - b[:, :, :a.shape[2]]).abs().max().item()
    assert (diff < 1e-5) == independent, diff


def test_features_match_infd(infd_bin, tmp_path):
    """features.LogMel against `infd asr --features`: a chirp with noise,
    2.37 s at 16 kHz."""
    rng = np.random.default_rng(1)
    t = np.arange(int(2.37 * 16000)) / 16000
    x = 0.3 * np.sin(2 * math.pi * (200 + 900 * t) * t) + 0.02 * rng.standard_normal(t.size)
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)
    path = write_wav(tmp_path / "chirp.wav", pcm)
    subprocess.run([str(infd_bin), "asr", "--features", str(path), "-o",
                    str(tmp_path / "f.npy")], check=True, capture_output=True)
    ref = np.load(tmp_path / "f.npy")
    ours, frames = features.LogMel(128)(torch.from_numpy(pcm.astype(np.float32) / 32768.0)
                                        .unsqueeze(0), torch.tensor([pcm.size]))
    assert ours.shape[1:] == ref.shape and int(frames) == pcm.size // 160
    assert np.abs(ours[0].numpy() - ref).max() < 1e-3


@pytest.mark.parametrize("raw,want", [
    ("A gift of a flower will soon be made to you.", "a gift of a flower will soon be made to you"),
    ("Don't panic -- it's only a test!", "don't panic it's only a test"),
    ("Call me at 555 1234.", None),          # digits
    ("Mr. Smith goes to Washington", None),   # an abbreviation
    ("The IBM PC was new", None),             # acronyms read as letters
    ("Two words", None),                      # too short
    ("Caf\u00e9 au lait is nice", None),      # not ASCII
])
def test_corpus_normalise(raw, want):
    assert corpus.normalise(raw) == want


def test_held_out_rule_is_fixed():
    """The tests and the recipe agree on which sentences are held out: a
    hash of the text, about 1 in 20."""
    sentences = [f"sentence number {w} of the list" for w in
                 ("one two three four five six seven eight nine ten".split() * 40)]
    sentences = [s + f" {i}" for i, s in enumerate(sentences)]
    held = [s for s in sentences if corpus.held_out(s)]
    assert corpus.held_out("a special case") is corpus.held_out("a special case")
    assert 0 < len(held) < len(sentences) / 8


def test_batches_repeat_shapes():
    """train.batches: every utterance once; a batch holds utterances of one
    padded length and no more than its seconds of padded audio. collate
    pads to that length and the token count to PAD_TOKENS, scales int16
    samples as before, and zeroes the padding."""
    import random

    import train

    rng = random.Random(3)
    recs, off = [], 0
    for _ in range(300):
        n = rng.randrange(4000, 80000)
        recs.append({"samples": n, "offset": off, "tokens": [1] * rng.randrange(1, 30)})
        off += n
    pcm = torch.from_numpy(np.random.default_rng(0).integers(-32768, 32767, off,
                                                             dtype=np.int16))
    out = train.batches(recs, 8.0, rng)
    assert sorted(i for b in out for i in b) == list(range(len(recs)))
    for b in out:
        widths = {train.padded(recs[i]["samples"], train.PAD_SAMPLES) for i in b}
        assert len(widths) == 1
        assert len(b) == 1 or widths.pop() * len(b) <= 8.0 * 16000
    b = max(out, key=len)
    audio, n, targets, u_lens = train.collate(recs, pcm, b, None, torch.device("cpu"))
    assert audio.shape == (len(b), train.padded(max(n.tolist()), train.PAD_SAMPLES))
    assert targets.shape[1] % train.PAD_TOKENS == 0
    for k, i in enumerate(b):
        o, m = recs[i]["offset"], recs[i]["samples"]
        assert torch.equal(audio[k, :m], pcm[o:o + m].float() / 32768.0)
        assert not audio[k, m:].any()
        assert u_lens[k] == len(recs[i]["tokens"])


class _Pieces:
    """A SentencePiece stand-in (python3-sentencepiece is not needed by the
    tests): gen_asr_models' pieces, "▁" starting a word."""

    def __init__(self, pieces):
        self.pieces = pieces

    def id_to_piece(self, i):
        return self.pieces[i]

    def get_piece_size(self):
        return len(self.pieces)

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids).replace("\u2581", " ").strip()


def test_streaming_variant_is_what_infd_streams(infd_bin, tmp_path):
    """The cache-aware variant (streaming.py), small and random: its
    whole-utterance forward (what training and evaluation run) equals its
    window-by-window step() with the caches; exported, `infd asr` gives
    PyTorch's greedy TDT transcript, offline and streamed, and the graph
    has the five cache-aware inputs infd's mode (b) needs."""
    import argparse
    import json

    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_asr_models as g
    import streaming
    import train

    sp = _Pieces(g.PIECES)
    V = sp.get_piece_size()
    torch.manual_seed(3)
    a = argparse.Namespace(d_model=32, layers=2, heads=4, pred=32, ff_mult=2, streaming=True,
                           left=8)
    enc, dec = streaming.build(a, V, 128)
    enc.eval()
    dec.eval()
    rng = np.random.default_rng(1)
    t = np.arange(int(3.37 * 16000)) / 16000
    x = 0.3 * np.sin(2 * math.pi * (200 + 300 * t) * t) * (np.sin(2 * math.pi * 1.3 * t) > -0.2) \
        + 0.02 * rng.standard_normal(t.size)
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)
    lm = features.LogMel(128, normalize=False)
    audio = torch.from_numpy(pcm.astype(np.float32) / 32768.0).unsqueeze(0)
    n = torch.tensor([pcm.size])
    with torch.no_grad():
        g.randomise_batchnorm(enc)
        mean, std = streaming.feature_stats(lm, [{"offset": 0, "samples": pcm.size}],
                                            torch.from_numpy(pcm), count=1)
        enc.feat_mean.copy_(mean)
        enc.feat_std.copy_(std)
        feats, frames = lm(audio, n)
        g.calibrate_joint(lambda f, k: enc(feats.repeat(4, 1, 1), frames.repeat(4))[0], dec,
                          a.pred, V)
        full, lens = enc(feats, frames)
        T, L = int(frames), len(enc.layers)
        cc, ct = torch.zeros(1, L, a.left, a.d_model), torch.zeros(1, L, a.d_model, 8)
        cl = torch.zeros(1, dtype=torch.int64)
        parts = []
        for s0 in range(0, T - streaming.PRE, streaming.SHIFT):
            w = feats[:, :, s0:s0 + streaming.WINDOW]
            w = torch.nn.functional.pad(w, (0, streaming.WINDOW - w.shape[2]))
            o, k, cc, ct, cl = enc.step(w, torch.tensor([min(streaming.WINDOW, T - s0)]), cc, ct,
                                        cl)
            parts.append(o[:, :, :int(k)])
        chunked = torch.cat(parts, 2)
        assert chunked.shape[2] == int(lens) == (T - 1) // 8
        assert (full[:, :, :int(lens)] - chunked).abs().max().item() < 1e-4
        want = train.transcribe(enc, dec, lm, audio, n, V, sp)[0]
    assert len(want.split()) >= 3  # the calibrated joint emits tokens
    streaming.export(enc, dec, sp, a, V, str(tmp_path / "model"), 128)
    wav = write_wav(tmp_path / "a.wav", pcm)
    for extra in ([], ["--stream"]):
        r = subprocess.run([str(infd_bin), "asr", str(tmp_path / "model"), str(wav), "--json",
                            *extra], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        final = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")][-1]
        assert final["text"] == want, (extra, final["text"], want)


def test_dropout_only_in_training():
    """train.add_dropout: in training, the encoder's residual branches and
    the predictor drop (two passes differ); in eval mode the outputs are
    those of the same weights without dropout, so evaluation and the ONNX
    export are unchanged. The state dict keeps its keys."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_asr_models as g
    import train

    Enc, Dec = g.build_modules(d_model=32, n_layers=2, n_heads=2, pred=24, vocab=10, n_mels=16,
                               ff_mult=2, conv_mask="after-glu")
    torch.manual_seed(0)
    plain_enc, plain_dec = Enc(), Dec()
    enc, dec = Enc(), Dec()
    enc.load_state_dict(plain_enc.state_dict())
    dec.load_state_dict(plain_dec.state_dict())
    train.add_dropout(enc, dec, 0.3, 0.3)
    assert enc.state_dict().keys() == plain_enc.state_dict().keys()
    x, n = torch.randn(2, 16, 80), torch.tensor([80, 56])
    targets = torch.tensor([[1, 2, 3], [4, 5, 0]])
    enc.train()
    dec.train()
    assert not torch.equal(enc(x, n)[0], enc(x, n)[0])
    assert not torch.equal(train.predictions(dec, targets, 10), train.predictions(dec, targets, 10))
    plain_enc.load_state_dict(enc.state_dict())  # BatchNorm's running statistics moved
    for m in (enc, dec, plain_enc, plain_dec):
        m.eval()
    with torch.no_grad():
        assert torch.equal(enc(x, n)[0], plain_enc(x, n)[0])
        assert torch.equal(train.predictions(dec, targets, 10),
                           train.predictions(plain_dec, targets, 10))


def test_dropout_in_the_cache_aware_encoder():
    """The cache-aware encoder (streaming.py) drops its four residual
    branches itself: in training two passes differ; in eval mode its
    whole-utterance forward is the same weights' without dropout, and
    step(), what the export runs, never drops."""
    import argparse

    import streaming
    import train

    a = argparse.Namespace(d_model=32, layers=2, heads=4, pred=24, ff_mult=2, streaming=True,
                           left=8)
    torch.manual_seed(0)
    plain, _ = streaming.build(a, 10, 16)
    enc, dec = streaming.build(a, 10, 16)
    enc.load_state_dict(plain.state_dict())
    train.add_dropout(enc, dec, 0.3, 0.3)
    assert enc.p_drop == 0.3 and dec.train_dropout == 0.3
    assert enc.state_dict().keys() == plain.state_dict().keys()
    x, n = torch.randn(2, 16, 96), torch.tensor([96, 64])
    enc.train()
    assert not torch.equal(enc(x, n)[0], enc(x, n)[0])
    L = len(enc.layers)
    caches = (torch.zeros(1, L, a.left, a.d_model), torch.zeros(1, L, a.d_model, 8),
              torch.zeros(1, dtype=torch.int64))
    w, k = x[:1, :, :streaming.WINDOW], torch.tensor([streaming.WINDOW])
    with torch.no_grad():
        assert torch.equal(enc.step(w, k, *caches)[0], enc.step(w, k, *caches)[0])
    plain.load_state_dict(enc.state_dict())  # BatchNorm's running statistics moved
    enc.eval()
    plain.eval()
    with torch.no_grad():
        assert torch.equal(enc(x, n)[0], plain(x, n)[0])
