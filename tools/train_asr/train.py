#!/usr/bin/env python3
"""Trains infd's own small TDT speech model (issue #26) on espeak-ng speech,
and exports it in the onnx-asr layout infd's runtime loads.

    python3 tools/train_asr/train.py --data DIR --out DIR [--minutes M] [--resume CKPT]
        [--d-model 144 --layers 8 --heads 4 --ff-mult 3 --pred 160 --vocab 256]

DIR (--data) holds what corpus.py and synth.py wrote: train.txt, test.txt,
train.pcm/.jsonl and test.pcm/.jsonl. The SentencePiece vocabulary
(unigram, --vocab pieces) is trained on train.txt unless DIR/spm.model
exists.

The network is scripts/gen_asr_models.py's (a FastConformer-style encoder
with 8x subsampling, an LSTM predictor, a joint with durations 0-4), at
the size given. Training: features exactly as infd computes them
(features.py), random gain, noise and reverberation on the audio and
SpecAugment masks on the features, the TDT loss of tdt.py (checked against
torchaudio's RNN-T loss first), AdamW with warm-up and a cosine decay over
the time allowed (--minutes), bf16 autocast on CUDA. At the end: greedy
TDT decoding of the held-out test set (unseen voices, unseen sentences)
and its word error rate, a checkpoint (model.ckpt: weights, optimizer,
step), and the export: OUT/model/{encoder-model.onnx,
decoder_joint-model.onnx, vocab.txt, config.json} plus OUT/train.json with
every figure of the run.
"""

import argparse
import inspect
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

import features  # noqa: E402
import tdt  # noqa: E402

DURATIONS = [0, 1, 2, 3, 4]
N_MELS = 128


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

def load_split(data, split):
    with open(os.path.join(data, f"{split}.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    pcm = np.fromfile(os.path.join(data, f"{split}.pcm"), dtype=np.int16)
    return recs, torch.from_numpy(pcm)


def tokenizer(data, vocab):
    import sentencepiece as spm

    path = os.path.join(data, "spm.model")
    if not os.path.exists(path):
        spm.SentencePieceTrainer.train(
            input=os.path.join(data, "train.txt"), model_prefix=os.path.join(data, "spm"),
            vocab_size=vocab, model_type="unigram", character_coverage=1.0, unk_id=0,
            bos_id=-1, eos_id=-1, pad_id=-1, input_sentence_size=2000000,
            shuffle_input_sentence=True, num_threads=os.cpu_count() or 1)
    return spm.SentencePieceProcessor(model_file=path)


def batches(recs, seconds, rng):
    """Lists of record indices: sorted by length, cut so that a batch holds
    at most `seconds` of padded audio, in random order."""
    order = sorted(range(len(recs)), key=lambda i: recs[i]["samples"])
    out, cur = [], []
    for i in order:  # ascending: recs[i] is the batch's longest
        if cur and recs[i]["samples"] * (len(cur) + 1) > seconds * 16000:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def collate(recs, pcm, idx, sp, device):
    n = [recs[i]["samples"] for i in idx]
    audio = torch.zeros(len(idx), max(n))
    for k, i in enumerate(idx):
        o = recs[i]["offset"]
        audio[k, :n[k]] = pcm[o:o + n[k]].float() / 32768.0
    toks = [sp.encode(recs[i]["text"]) for i in idx]
    u = max(1, max(len(t) for t in toks))
    targets = torch.zeros(len(idx), u, dtype=torch.int64)
    for k, t in enumerate(toks):
        targets[k, :len(t)] = torch.tensor(t, dtype=torch.int64)
    return (audio.to(device, non_blocking=True), torch.tensor(n, device=device),
            targets.to(device), torch.tensor([len(t) for t in toks], device=device))


def augment(audio, lengths, gen):
    """Random level, noise at 5-40 dB SNR (white, or brown-ish: integrated
    white noise, high-passed), and reverberation (exponentially decaying
    noise, RT60 0.15-0.7 s), each utterance its own draw; padding stays 0."""
    B, N = audio.shape
    dev = audio.device
    valid = (torch.arange(N, device=dev).unsqueeze(0) < lengths.unsqueeze(1)).float()
    u = torch.rand(B, 6, device=dev, generator=gen)
    # Reverberation (40% of utterances).
    L = 4800  # 0.3 s
    t = torch.arange(L, device=dev).float() / 16000
    rt60 = 0.15 + 0.55 * u[:, 0:1]
    rir = torch.randn(B, L, device=dev, generator=gen) * torch.exp(-6.9 * t / rt60)
    rir[:, 0] = 1.0
    rir = rir / rir.norm(dim=1, keepdim=True)
    nfft = 1 << (N + L - 1).bit_length()
    wet = torch.fft.irfft(torch.fft.rfft(audio, nfft) * torch.fft.rfft(rir, nfft), nfft)[:, :N]
    rev = (u[:, 1:2] < 0.4).float()
    x = (rev * wet + (1 - rev) * audio) * valid
    # Noise (70% of utterances).
    p_sig = (x ** 2).sum(1, keepdim=True) / lengths.unsqueeze(1).clamp(min=1)
    white = torch.randn(B, N, device=dev, generator=gen)
    brown = torch.cumsum(white, dim=1)
    brown = brown - torch.nn.functional.avg_pool1d(brown.unsqueeze(1), 401, 1, 200,
                                                   count_include_pad=False).squeeze(1)
    noise = torch.where(u[:, 2:3] < 0.5, white, brown)
    noise = noise / noise.pow(2).mean(1, keepdim=True).sqrt().clamp(min=1e-8)
    snr_db = 5 + 35 * u[:, 3:4]
    scale = (p_sig / 10 ** (snr_db / 10)).sqrt() * (u[:, 4:5] < 0.7).float()
    x = (x + scale * noise) * valid
    # Level: -20 to +6 dB, then kept inside [-1, 1].
    x = x * 10 ** ((-20 + 26 * u[:, 5:6]) / 20)
    peak = x.abs().amax(1, keepdim=True).clamp(min=1.0)
    return x / peak


def spec_augment(feats, frames, gen):
    """Two frequency masks (up to 20 of 128 mels) and time masks covering up
    to 5% of each utterance's frames (10 masks of up to 4% each, capped)."""
    B, M, T = feats.shape
    dev = feats.device
    f = torch.arange(M, device=dev).view(1, M, 1)
    t = torch.arange(T, device=dev).view(1, 1, T)
    mask = torch.zeros(B, M, T, dtype=torch.bool, device=dev)
    for _ in range(2):
        w = (torch.rand(B, device=dev, generator=gen) * 21).long().view(B, 1, 1)
        s = (torch.rand(B, device=dev, generator=gen) * (M - w.view(B))).long().view(B, 1, 1)
        mask |= (f >= s) & (f < s + w)
    for _ in range(4):
        w = (torch.rand(B, device=dev, generator=gen) * frames.float() * 0.0125).long().view(B, 1, 1)
        s = (torch.rand(B, device=dev, generator=gen) * frames.float()).long().view(B, 1, 1)
        mask |= (t >= s) & (t < s + w)
    return feats.masked_fill(mask, 0.0)


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------

def build(a, vocab):
    import gen_asr_models as g

    Encoder, DecoderJoint = g.build_modules(d_model=a.d_model, n_layers=a.layers,
                                            n_heads=a.heads, pred=a.pred, vocab=vocab,
                                            n_mels=N_MELS, ff_mult=a.ff_mult)
    return Encoder(), DecoderJoint()


def predictions(dec, targets, vocab):
    """The predictor's output after the start (blank) and each target
    token: [B, U + 1, P]."""
    B = targets.shape[0]
    sos = torch.full((B, 1), vocab, dtype=torch.int64, device=targets.device)
    g = dec.embed(torch.cat([sos, targets], dim=1)).transpose(0, 1)  # [U+1, B, P]
    g, _ = dec.lstm(g)
    return g.transpose(0, 1)


def joint_logits(enc_out, dec, g):
    """All (t, u) joint logits of a batch: [B, T, U + 1, V + 1 + 5]."""
    p = dec.pred(g)  # [B, U+1, P]
    f = dec.enc(enc_out.transpose(1, 2))  # [B, T, P]
    return dec.joint(torch.relu(f.unsqueeze(2) + p.unsqueeze(1)))


def loss_of(enc, dec, lm, audio, n, targets, u_lens, vocab, gen=None):
    feats, frames = lm(audio, n)
    if gen is not None:
        feats = spec_augment(feats, frames, gen)
    dev_type = "cuda" if audio.is_cuda else "cpu"
    g = predictions(dec, targets, vocab)  # the LSTM in FP32
    with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=audio.is_cuda):
        enc_out, t_lens = enc(feats, frames)
        z = joint_logits(enc_out, dec, g)
    z = z.float()
    lp_tok = torch.log_softmax(z[..., :vocab + 1], dim=-1)
    lp_dur = torch.log_softmax(z[..., vocab + 1:], dim=-1)
    return tdt.tdt_loss(lp_tok, lp_dur, lp_dur, targets, t_lens, u_lens, DURATIONS, vocab)


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------

def wer(refs, hyps):
    """Word error rate over the whole set: (S + D + I) / reference words."""
    errors = words = 0
    for r, h in zip(refs, hyps):
        r, h = r.split(), h.split()
        d = list(range(len(h) + 1))
        for i in range(1, len(r) + 1):
            prev, d[0] = d[0], i
            for j in range(1, len(h) + 1):
                cur = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
                prev, d[j] = d[j], cur
        errors += d[len(h)]
        words += len(r)
    return errors / max(1, words)


@torch.no_grad()
def transcribe(enc, dec, lm, audio, n, vocab, sp):
    """Greedy TDT decoding (tdt.greedy_decode, NeMo's label looping) of a
    batch, utterance by utterance: texts."""
    feats, frames = lm(audio, n)
    enc_out, t_lens = enc(feats, frames)
    f = dec.enc(enc_out.transpose(1, 2))  # [B, T, P]
    P = dec.pred.in_features

    def predictor(tok, state):
        x = torch.tensor([[vocab if tok is None else tok]], device=f.device)
        if state is None:
            state = (torch.zeros(2, 1, P, device=f.device), torch.zeros(2, 1, P, device=f.device))
        g, state = dec.lstm(dec.embed(x).transpose(0, 1), state)
        return dec.pred(g[0, 0]), state

    def joint(fe, g):
        return dec.joint(torch.relu(fe + g))

    out = []
    for b in range(f.shape[0]):
        toks = tdt.greedy_decode(f[b, :int(t_lens[b])], predictor, joint, DURATIONS, vocab)
        out.append(sp.decode(toks))
    return out


def evaluate(enc, dec, lm, recs, pcm, sp, vocab, device, limit=0):
    enc.eval()
    dec.eval()
    idx = list(range(len(recs)))[:limit or None]
    refs, hyps = [], []
    for k in range(0, len(idx), 32):
        chunk = idx[k:k + 32]
        audio, n, _, _ = collate(recs, pcm, chunk, sp, device)
        hyps += transcribe(enc, dec, lm, audio, n, vocab, sp)
        refs += [recs[i]["text"] for i in chunk]
    enc.train()
    dec.train()
    return wer(refs, hyps), refs, hyps


# ---------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------

def export(enc, dec, sp, a, vocab, out):
    import gen_asr_models as g

    os.makedirs(out, exist_ok=True)
    kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    enc = enc.cpu().eval()
    dec = dec.cpu().eval()
    g.export_encoder(enc, os.path.join(out, "encoder-model.onnx"), N_MELS, 256, **kw)
    g.export_decoder_joint(dec, os.path.join(out, "decoder_joint-model.onnx"), a.d_model, a.pred,
                           vocab, **kw)
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
        for i in range(vocab):
            f.write(f"{sp.id_to_piece(i)} {i}\n")
        f.write(f"<blk> {vocab}\n")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "nemo-conformer-tdt", "features_size": N_MELS,
                   "subsampling_factor": 8, "max_tokens_per_step": 10}, f, indent=1)


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=5.0, help="training time (not counting eval)")
    ap.add_argument("--resume")
    ap.add_argument("--d-model", type=int, default=144)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff-mult", type=int, default=3)
    ap.add_argument("--pred", type=int, default=160)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch-seconds", type=float, default=600.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=600)
    ap.add_argument("--eval-limit", type=int, default=0, help="test utterances to decode (0: all)")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    gen = torch.Generator(device=device).manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    report = {"args": vars(a)}

    if device.type == "cuda":
        dl, dg = tdt.check_against_rnnt(device=device)
        report["rnnt_check"] = {"max_loss_diff": dl, "max_grad_diff": dg}
        if dl > 1e-3 or dg > 1e-4:
            sys.exit("tdt: the RNN-T special case disagrees with torchaudio; not training")
    diff, ours, ref = tdt.check_brute_force()
    report["brute_force_check"] = {"diff": diff, "ours": ours, "enumerated": ref}

    sp = tokenizer(a.data, a.vocab)
    vocab = sp.get_piece_size()
    train_recs, train_pcm = load_split(a.data, "train")
    test_recs, test_pcm = load_split(a.data, "test")
    hours = sum(r["samples"] for r in train_recs) / 16000 / 3600
    log(f"data: {len(train_recs)} training utterances ({hours:.1f} h, "
        f"{len({r['voice'] for r in train_recs})} voices), {len(test_recs)} test utterances "
        f"({len({r['voice'] for r in test_recs})} unseen voices); vocabulary {vocab} + blank")
    report["data"] = {"train_utterances": len(train_recs), "train_hours": hours,
                      "train_voices": len({r["voice"] for r in train_recs}),
                      "test_utterances": len(test_recs),
                      "test_voices": len({r["voice"] for r in test_recs})}

    enc, dec = build(a, vocab)
    enc.to(device).train()
    dec.to(device).train()
    lm = features.LogMel(N_MELS).to(device)
    params = list(enc.parameters()) + list(dec.parameters())
    n_params = sum(p.numel() for p in params)
    log(f"model: {n_params / 1e6:.2f} M parameters")
    report["parameters"] = n_params
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.98), weight_decay=1e-3)
    step, spent, warm_from = 0, 0.0, 0
    if a.resume:
        ck = torch.load(a.resume, map_location=device)
        enc.load_state_dict(ck["encoder"])
        dec.load_state_dict(ck["decoder_joint"])
        if "optimizer" in ck:  # a weights-only file (weights.pt) starts a fresh optimizer
            opt.load_state_dict(ck["optimizer"])
        step, spent = ck["step"], ck["seconds"]
        warm_from = 0 if "optimizer" in ck else step  # a new optimizer warms up again
        log(f"resumed at step {step} ({spent / 60:.1f} min trained)"
            f"{'' if 'optimizer' in ck else ', weights only: a new optimizer'}")
    budget = spent + a.minutes * 60
    t0 = time.time() - spent
    seen_hours, last_log, losses = 0.0, time.time(), []
    epoch = 0
    while time.time() - t0 < budget:
        epoch += 1
        for idx in batches(train_recs, a.batch_seconds, rng):
            elapsed = time.time() - t0
            if elapsed >= budget:
                break
            lr = a.lr * min(1.0, (step - warm_from + 1) / a.warmup) * \
                (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, elapsed / budget))))
            for group in opt.param_groups:
                group["lr"] = lr
            audio, n, targets, u_lens = collate(train_recs, train_pcm, idx, sp, device)
            audio = augment(audio, n, gen)
            per = loss_of(enc, dec, lm, audio, n, targets, u_lens, vocab, gen)
            loss = per.sum() / u_lens.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            seen_hours += n.sum().item() / 16000 / 3600
            losses.append(loss.item())
            if time.time() - last_log > 30:
                last_log = time.time()
                log(f"step {step} epoch {epoch} loss/token {np.mean(losses[-50:]):.3f} "
                    f"lr {lr:.2e} audio seen {seen_hours:.1f} h")
    spent = time.time() - t0
    log(f"trained {step} steps, {spent / 60:.1f} min, {seen_hours:.1f} h of audio this run")
    torch.save({"encoder": enc.state_dict(), "decoder_joint": dec.state_dict(),
                "optimizer": opt.state_dict(), "step": step, "seconds": spent,
                "args": vars(a)}, os.path.join(a.out, "model.ckpt"))
    t_eval = time.time()
    w, refs, hyps = evaluate(enc, dec, lm, test_recs, test_pcm, sp, vocab, device, a.eval_limit)
    log(f"test WER {100 * w:.2f}% over {len(refs)} utterances ({time.time() - t_eval:.0f} s)")
    for r, h in list(zip(refs, hyps))[:8]:
        log(f"  ref: {r}\n             hyp: {h}")
    report.update({"steps": step, "train_seconds": spent, "epochs_started": epoch,
                   "audio_hours_this_run": seen_hours, "final_loss": float(np.mean(losses[-50:])),
                   "test_wer": w, "test_decoded": len(refs),
                   "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:20]]})
    export(enc, dec, sp, a, vocab, os.path.join(a.out, "model"))
    with open(os.path.join(a.out, "train.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(f"exported to {os.path.join(a.out, 'model')}")


if __name__ == "__main__":
    main()
