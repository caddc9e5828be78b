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
the time allowed (--minutes, or --schedule-minutes across runs), bf16
autocast on CUDA. On CUDA the loss runs as tdt_cuda.py's kernels when they
agree with tdt.py. Under torchrun, one process a GPU, each with its own
batches, gradients averaged every step. At the end: greedy
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
import streaming  # noqa: E402
import tdt  # noqa: E402
import tdt_cuda  # noqa: E402

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
    # Mapped, not read: the processes of several GPUs share the page cache.
    pcm = np.memmap(os.path.join(data, f"{split}.pcm"), dtype=np.int16, mode="c")
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


# Lengths are padded to multiples of these (samples; tokens), so that a
# batch's shapes repeat from batch to batch and PyTorch finds the cuDNN
# plans it chose for them again. Profiled on the H200 (--profile) before
# this, with every batch a new shape, the convolutions spent about 1 ms of
# CPU a call choosing them, 45 ms a step, while the GPU waited.
PAD_SAMPLES = 8000
PAD_TOKENS = 8


def padded(count, step):
    return -(-count // step) * step


def batches(recs, seconds, rng):
    """Lists of record indices: sorted by length; a batch holds utterances
    of one padded length (PAD_SAMPLES) and at most `seconds` of padded
    audio; in random order."""
    order = sorted(range(len(recs)), key=lambda i: recs[i]["samples"])
    out, cur, width = [], [], 0
    for i in order:  # ascending: recs[i] is the batch's longest
        w = padded(recs[i]["samples"], PAD_SAMPLES)
        if cur and (w != width or w * (len(cur) + 1) > seconds * 16000):
            out.append(cur)
            cur = []
        cur.append(i)
        width = w
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def collate(recs, pcm, idx, sp, device):
    """A batch on `device`: audio [B, N] (N padded to PAD_SAMPLES), its
    lengths, targets [B, U] (U padded to PAD_TOKENS) and their lengths. The
    samples travel as int16, from pinned memory on CUDA."""
    n = [recs[i]["samples"] for i in idx]
    src = pcm.numpy() if torch.is_tensor(pcm) else pcm
    buf = np.zeros((len(idx), padded(max(n), PAD_SAMPLES)), dtype=np.int16)
    for k, i in enumerate(idx):
        o = recs[i]["offset"]
        buf[k, :n[k]] = src[o:o + n[k]]
    audio = torch.from_numpy(buf)
    if device.type == "cuda":
        audio = audio.pin_memory()
    audio = audio.to(device, non_blocking=True).float().div_(32768.0)
    toks = [recs[i]["tokens"] if "tokens" in recs[i] else sp.encode(recs[i]["text"]) for i in idx]
    u = padded(max(1, max(len(t) for t in toks)), PAD_TOKENS)
    targets = torch.zeros(len(idx), u, dtype=torch.int64)
    for k, t in enumerate(toks):
        targets[k, :len(t)] = torch.tensor(t, dtype=torch.int64)
    return (audio, torch.tensor(n, device=device), targets.to(device),
            torch.tensor([len(t) for t in toks], device=device))


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


def spec_augment(feats, frames, gen, fill=None):
    """Two frequency masks (up to 20 of 128 mels) and four time masks of up
    to 1.25% of each utterance's frames each. Masked values become 0 (the
    mean of normalised features), or fill [mels] (unnormalised ones: their
    mean)."""
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
    if fill is None:
        return feats.masked_fill(mask, 0.0)
    return torch.where(mask, fill.view(1, M, 1).to(feats.dtype), feats)


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------

def build(a, vocab):
    if getattr(a, "streaming", False):
        return streaming.build(a, vocab, N_MELS)
    import gen_asr_models as g

    Encoder, DecoderJoint = g.build_modules(d_model=a.d_model, n_layers=a.layers,
                                            n_heads=a.heads, pred=a.pred, vocab=vocab,
                                            n_mels=N_MELS, ff_mult=a.ff_mult,
                                            conv_mask=getattr(a, "conv_mask", "before"))
    return Encoder(), DecoderJoint()


def add_dropout(enc, dec, p_enc, p_pred):
    """Dropout in training only. NeMo's FastConformer transducer configs
    use 0.1 in the encoder and 0.2 in the predictor; here p_enc drops the
    output of each layer's four residual branches (ff1, att, conv, ff2), by
    forward hooks, so that the modules, the weights and the ONNX export stay
    gen_asr_models' (in eval mode, and so in evaluation and export, the
    hooks do nothing), and p_pred the predictor's embedding and LSTM output
    (in predictions(), which reads dec.train_dropout). The cache-aware
    encoder (streaming.py) calls its attention and convolution around their
    modules, so it drops the same four branches itself (enc.p_drop)."""
    drop = torch.nn.functional.dropout
    if hasattr(enc, "p_drop"):
        enc.p_drop = p_enc
    elif p_enc > 0:
        for layer in enc.layers:
            for m in (layer.ff1, layer.att, layer.conv, layer.ff2):
                m.register_forward_hook(lambda mod, _args, out: drop(out, p_enc, mod.training))
    dec.train_dropout = p_pred


def predictions(dec, targets, vocab):
    """The predictor's output after the start (blank) and each target
    token: [B, U + 1, P]."""
    B = targets.shape[0]
    p, on = getattr(dec, "train_dropout", 0.0), dec.training
    sos = torch.full((B, 1), vocab, dtype=torch.int64, device=targets.device)
    g = dec.embed(torch.cat([sos, targets], dim=1)).transpose(0, 1)  # [U+1, B, P]
    g, _ = dec.lstm(torch.nn.functional.dropout(g, p, on))
    return torch.nn.functional.dropout(g, p, on).transpose(0, 1)


def joint_logits(enc_out, dec, g):
    """All (t, u) joint logits of a batch: [B, T, U + 1, V + 1 + 5]."""
    p = dec.pred(g)  # [B, U+1, P]
    f = dec.enc(enc_out.transpose(1, 2))  # [B, T, P]
    return dec.joint(torch.relu(f.unsqueeze(2) + p.unsqueeze(1)))


def loss_of(enc, dec, lm, audio, n, targets, u_lens, vocab, gen=None, loss_fn=tdt.tdt_loss):
    feats, frames = lm(audio, n)
    if gen is not None:
        feats = spec_augment(feats, frames, gen, getattr(enc, "feat_mean", None))
    dev_type = "cuda" if audio.is_cuda else "cpu"
    g = predictions(dec, targets, vocab)  # the LSTM in FP32
    with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=audio.is_cuda):
        enc_out, t_lens = enc(feats, frames)
        z = joint_logits(enc_out, dec, g)
    z = z.float()
    lp_tok = torch.log_softmax(z[..., :vocab + 1], dim=-1)
    lp_dur = torch.log_softmax(z[..., vocab + 1:], dim=-1)
    return loss_fn(lp_tok, lp_dur, lp_dur, targets, t_lens, u_lens, DURATIONS, vocab)


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
def transcribe(enc, dec, lm, audio, n, vocab, sp, pad=0):
    """Greedy TDT decoding (tdt.greedy_decode, NeMo's label looping) of a
    batch, utterance by utterance: texts. pad: zero feature frames added up
    to a multiple of it (infd encodes in buckets of 256 frames)."""
    feats, frames = lm(audio, n)
    if pad:
        feats = torch.nn.functional.pad(feats, (0, -feats.shape[-1] % pad))
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
    if getattr(a, "streaming", False):
        return streaming.export(enc, dec, sp, a, vocab, out, N_MELS)
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

class Phases:
    """--profile: where a training step's time goes. Steps first .. first+n
    are timed phase by phase (the GPU synchronised at each mark, so a
    phase's kernels are counted in it) under torch.profiler, whose table of
    operations is printed after them."""

    def __init__(self, device, first, n):
        self.device, self.first, self.n = device, first, n
        self.on, self.prof, self.times, self.t, self.steps = False, None, {}, 0.0, 0

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self, step):
        self.on = self.n > 0 and self.first <= step < self.first + self.n
        if not self.on:
            return
        if self.prof is None:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.__enter__()
        self._sync()
        self.t = time.perf_counter()

    def mark(self, name):
        if self.on:
            self._sync()
            now = time.perf_counter()
            self.times[name] = self.times.get(name, 0.0) + now - self.t
            self.t = now

    def end(self):
        if not self.on:
            return
        self.steps += 1
        if self.steps < self.n:
            return
        self.prof.__exit__(None, None, None)
        total = sum(self.times.values())
        log(f"profile of {self.n} steps: {1000 * total / self.n:.1f} ms a step: " + ", ".join(
            f"{k} {1000 * v / self.n:.1f} ms" for k, v in self.times.items()))
        events = self.prof.key_averages()
        key = "cpu_time_total"
        if self.device.type == "cuda":  # renamed in torch 2.4
            key = "device_time_total" if hasattr(events[0], "device_time_total") \
                else "cuda_time_total"
        for sort in (key, "self_cpu_time_total"):
            print(events.table(sort_by=sort, row_limit=25), flush=True)
        self.n = 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=5.0,
                    help="training time of this run (not counting eval)")
    ap.add_argument("--schedule-minutes", type=float, default=0,
                    help="the learning-rate schedule's length, on the checkpoint's clock "
                         "(0: this run's end), so that several runs make one schedule; "
                         "a run stops where it ends")
    ap.add_argument("--resume")
    ap.add_argument("--restart-clock", action="store_true",
                    help="start the schedule's clock at 0 when resuming (a new schedule "
                         "from an earlier run's weights)")
    ap.add_argument("--d-model", type=int, default=144)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff-mult", type=int, default=3)
    ap.add_argument("--pred", type=int, default=160)
    ap.add_argument("--conv-mask", choices=("before", "after-glu"), default="before",
                    help="where the convolution module zeroes padding (gen_asr_models."
                         "build_modules; models/speech/1 was 'before', which makes its output "
                         "depend on padding)")
    ap.add_argument("--streaming", action="store_true",
                    help="the cache-aware variant (streaming.py): unnormalised features, "
                         "chunked attention, causal convolutions; exported in the sherpa-onnx "
                         "layout. Resuming from a full-context checkpoint warm-starts it")
    ap.add_argument("--left", type=int, default=streaming.LEFT,
                    help="--streaming: encoder frames before its chunk that attention sees")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout of each encoder layer's four residual branches, in "
                         "training only (full-context encoder)")
    ap.add_argument("--pred-dropout", type=float, default=0.0,
                    help="dropout of the predictor's embedding and LSTM output, in training")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch-seconds", type=float, default=600.0,
                    help="padded audio a batch holds, per GPU")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=600)
    ap.add_argument("--eval-limit", type=int, default=0, help="test utterances to decode (0: all)")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="time each phase of N steps (after 20 of warming up), with the "
                         "GPU synchronised between phases, and print torch.profiler's "
                         "table of them; training then goes on")
    a = ap.parse_args()
    # Several GPUs: started by torchrun, one process a GPU. Every process
    # takes its own batches; the gradients are averaged by one all-reduce a
    # step, which also carries the "time is up" flag, so that all stop at
    # the same step.
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        if a.device == "cuda":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group("nccl")
            device = torch.device("cuda", torch.cuda.current_device())
        else:  # several CPU processes: only to test this path
            dist.init_process_group("gloo")
            device = torch.device("cpu")
    else:
        device = torch.device(a.device)
    main_rank = rank == 0
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    gen = torch.Generator(device=device).manual_seed(a.seed + rank)
    os.makedirs(a.out, exist_ok=True)
    report = {"args": vars(a), "gpus": world if device.type == "cuda" else 0}

    loss_fn = tdt.tdt_loss
    if device.type == "cuda":
        dl, dg = tdt.check_against_rnnt(device=device, verbose=main_rank)
        report["rnnt_check"] = {"max_loss_diff": dl, "max_grad_diff": dg}
        if dl > 1e-3 or dg > 1e-4:
            sys.exit("tdt: the RNN-T special case disagrees with torchaudio; not training")
        # The loss's CUDA kernels, when numba works and they agree with tdt.py.
        try:
            dl, dg = tdt_cuda.check(device=device, verbose=main_rank) if tdt_cuda.available() \
                else (None, None)
        except Exception as e:  # numba broken: the torch loss
            print(f"tdt_cuda: {e!r}; training with tdt.tdt_loss", flush=True)
            dl = dg = None
        report["tdt_cuda_check"] = {"max_loss_diff": dl, "max_grad_diff": dg}
        if dl is not None and dl < 1e-3 and dg < 1e-4:
            loss_fn = tdt_cuda.tdt_loss
    report["loss"] = "tdt_cuda (numba kernels)" if loss_fn is not tdt.tdt_loss else "tdt (torch)"
    diff, ours, ref = tdt.check_brute_force()
    report["brute_force_check"] = {"diff": diff, "ours": ours, "enumerated": ref}

    sp = tokenizer(a.data, a.vocab) if main_rank else None
    if world > 1:
        dist.barrier()  # rank 0 trains the vocabulary once
        sp = sp or tokenizer(a.data, a.vocab)
    vocab = sp.get_piece_size()
    train_recs, train_pcm = load_split(a.data, "train")
    test_recs, test_pcm = load_split(a.data, "test")
    for r, t in zip(train_recs, sp.encode([r["text"] for r in train_recs])):
        r["tokens"] = t
    hours = sum(r["samples"] for r in train_recs) / 16000 / 3600
    if main_rank:
        log(f"data: {len(train_recs)} training utterances ({hours:.1f} h, "
            f"{len({r['voice'] for r in train_recs})} voices), {len(test_recs)} test utterances "
            f"({len({r['voice'] for r in test_recs})} unseen voices); vocabulary {vocab} + blank;"
            f" {world} process(es); loss: {report['loss']}")
    report["data"] = {"train_utterances": len(train_recs), "train_hours": hours,
                      "train_voices": len({r["voice"] for r in train_recs}),
                      "train_sentences": len({r["text"] for r in train_recs}),
                      "test_utterances": len(test_recs),
                      "test_voices": len({r["voice"] for r in test_recs})}

    enc, dec = build(a, vocab)
    add_dropout(enc, dec, a.dropout, a.pred_dropout)
    enc.to(device).train()
    dec.to(device).train()
    lm = features.LogMel(N_MELS, normalize=not a.streaming).to(device)
    params = list(enc.parameters()) + list(dec.parameters())
    n_params = sum(p.numel() for p in params)
    if main_rank:
        log(f"model: {n_params / 1e6:.2f} M parameters")
    report["parameters"] = n_params
    # fused: one kernel for every parameter (the loop of the default took
    # 15 ms of CPU a step on the H200)
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.98), weight_decay=1e-3,
                            fused=device.type == "cuda")
    step, clock, warm_from, total, hours_before = 0, 0.0, 0, 0.0, 0.0
    fresh_stats = a.streaming
    if a.resume:
        ck = torch.load(a.resume, map_location=device)
        if a.streaming and not ck.get("args", {}).get("streaming"):
            # a full-context model's weights: a start for the streaming one
            got = enc.load_state_dict(streaming.from_full_context(ck["encoder"]), strict=False)
            if set(got.missing_keys) != {"feat_mean", "feat_std"} or got.unexpected_keys:
                sys.exit(f"train: {a.resume} is not this encoder's full-context form: "
                         f"missing {got.missing_keys}, unexpected {got.unexpected_keys}")
            ck.pop("optimizer", None)
            a.restart_clock = True
        else:
            enc.load_state_dict(ck["encoder"])
            fresh_stats = False
        dec.load_state_dict(ck["decoder_joint"])
        step, clock = ck["step"], ck["seconds"]
        total = ck.get("total_seconds", clock)
        hours_before = ck.get("audio_hours", 0.0)
        warm_from = ck.get("warm_from", 0)
        if "optimizer" in ck:
            opt.load_state_dict(ck["optimizer"])
        else:  # a weights-only file (weights.pt): a new optimizer warms up again
            warm_from = step
        if a.restart_clock:
            clock, warm_from = 0.0, step
        if main_rank:
            log(f"resumed at step {step} ({total / 60:.1f} min trained, schedule clock "
                f"{clock / 60:.1f} min){'' if 'optimizer' in ck else ', weights only'}")
    if fresh_stats:  # a streaming model's fixed feature normalisation
        mean, std = streaming.feature_stats(lm, train_recs, train_pcm)
        enc.feat_mean.copy_(mean)
        enc.feat_std.copy_(std)
        if main_rank:
            log(f"feature statistics: mean {enc.feat_mean.mean():.2f}, std "
                f"{enc.feat_std.mean():.2f} (averaged over mels)")
    if world > 1:  # the same start everywhere
        for p in params + list(enc.buffers()) + list(dec.buffers()):
            dist.broadcast(p.data, 0)
    budget = clock + a.minutes * 60
    schedule = a.schedule_minutes * 60 or budget
    if a.schedule_minutes and budget > schedule:
        budget = schedule  # a run stops where its schedule ends
        if main_rank:
            log(f"the schedule ends at {schedule / 60:.1f} min: this run stops there")
    t0 = time.time() - clock
    t_start = time.time()
    last_log, losses, step0 = time.time(), [], step
    # The all-reduce's buffer: the gradients, this step's audio seconds,
    # and the stop flag.
    flat = torch.zeros(n_params + 2, device=device)
    seen = torch.zeros((), dtype=torch.float64, device=device)
    epoch, done = 0, False
    phases = Phases(device, step0 + 20, a.profile if main_rank else 0)
    while not done:
        epoch += 1
        mine = batches(train_recs, a.batch_seconds, rng)
        mine = mine[:len(mine) // world * world][rank::world]
        if not mine:
            sys.exit("train: fewer batches than processes")
        for idx in mine:
            elapsed = time.time() - t0
            lr = a.lr * min(1.0, (step - warm_from + 1) / a.warmup) * \
                (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, elapsed / schedule))))
            for group in opt.param_groups:
                group["lr"] = lr
            phases.start(step)
            audio, n, targets, u_lens = collate(train_recs, train_pcm, idx, sp, device)
            phases.mark("collate")
            audio = augment(audio, n, gen)
            phases.mark("augment")
            per = loss_of(enc, dec, lm, audio, n, targets, u_lens, vocab, gen, loss_fn)
            loss = per.sum() / u_lens.sum().clamp(min=1)
            phases.mark("forward")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            phases.mark("backward")
            stop = elapsed >= budget
            secs = sum(train_recs[i]["samples"] for i in idx) / 16000
            if world > 1:
                off = 0
                for p in params:
                    k = p.numel()
                    if p.grad is None:
                        flat[off:off + k].zero_()
                    else:
                        flat[off:off + k].copy_(p.grad.reshape(-1))
                    off += k
                flat[-2] = secs
                flat[-1] = float(stop)
                dist.all_reduce(flat)
                seen += flat[-2]
                off = 0
                for p in params:
                    k = p.numel()
                    if p.grad is not None:
                        p.grad.copy_(flat[off:off + k].view_as(p)).div_(world)
                    off += k
            else:
                seen += secs
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            phases.mark("optimizer")
            phases.end()
            step += 1
            losses.append(loss.detach())
            # Whether to stop is read every 10 steps (reading it waits for
            # the GPU), at the same step everywhere.
            if (step - step0) % 10 == 0:
                done = (flat[-1].item() > 0) if world > 1 else stop
                if done:
                    break
            if main_rank and time.time() - last_log > 30:
                last_log = time.time()
                recent = torch.stack(losses[-50:]).mean().item()
                seen_hours = seen.item() / 3600
                log(f"step {step} epoch {epoch} loss/token {recent:.3f} lr {lr:.2e} "
                    f"audio seen {seen_hours:.1f} h, {(step - step0) / (time.time() - t_start):.2f}"
                    f" steps/s")
    clock = time.time() - t0
    ran = time.time() - t_start
    total += ran
    final_loss = torch.stack(losses[-50:]).mean().item()
    seen_hours = seen.item() / 3600
    if world > 1:
        dist.barrier()
    if not main_rank:
        dist.destroy_process_group()
        return
    log(f"trained {step - step0} steps ({step} in all), {ran / 60:.1f} min "
        f"({total / 60:.1f} in all), {seen_hours:.1f} h of audio this run")
    torch.save({"encoder": enc.state_dict(), "decoder_joint": dec.state_dict(),
                "optimizer": opt.state_dict(), "step": step, "seconds": clock,
                "total_seconds": total, "warm_from": warm_from,
                "audio_hours": hours_before + seen_hours, "args": vars(a)},
               os.path.join(a.out, "model.ckpt"))
    t_eval = time.time()
    w, refs, hyps = evaluate(enc, dec, lm, test_recs, test_pcm, sp, vocab, device, a.eval_limit)
    log(f"test WER {100 * w:.2f}% over {len(refs)} utterances ({time.time() - t_eval:.0f} s)")
    for r, h in list(zip(refs, hyps))[:8]:
        log(f"  ref: {r}\n             hyp: {h}")
    report.update({"steps_this_run": step - step0, "steps": step, "train_seconds": ran,
                   "total_train_seconds": total, "steps_per_second": (step - step0) / ran,
                   "epochs_started": epoch, "audio_hours_this_run": seen_hours,
                   "audio_hours_in_all": hours_before + seen_hours,
                   "final_loss": final_loss, "test_wer": w, "test_decoded": len(refs),
                   "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:20]]})
    export(enc, dec, sp, a, vocab, os.path.join(a.out, "model"))
    with open(os.path.join(a.out, "train.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(f"exported to {os.path.join(a.out, 'model')}")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
