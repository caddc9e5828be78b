#!/usr/bin/python3
"""Generate tiny random-weight Parakeet-TDT-like models for infd's speech tests.

Run with Debian's python:  /usr/bin/python3 scripts/gen_asr_models.py [--out DIR]
[--size tiny|bench] (default DIR: $INFD_CACHE/models/asr, INFD_CACHE defaulting
to <repo>/.cache). setup.sh makes the tiny one for the tests; bench
(d_model 256, 8 layers, predictor 320, vocab 1024) is made by
bench/asr_vs_ort.py when it needs it.

The networks have Parakeet-TDT's structure at a small size (the facts are in
the team's reference notes, reference/streaming.md section 2): a
FastConformer encoder (dw_striding subsampling x8: Conv2d 3x3 stride 2 +
ReLU, then twice a depthwise 3x3 stride 2 + pointwise 1x1 + ReLU, then a
Linear; conformer layers of half-step feed-forward, multi-head
self-attention, a convolution module with GLU, depthwise conv 9 and
BatchNorm, a second half-step feed-forward and LayerNorm), an
Embedding + 2-layer LSTM predictor and a joint (enc Linear + pred Linear ->
ReLU -> Linear to V + 1 + 5 outputs: tokens, blank, 5 durations). Sizes:
128 mels, d_model 64, 2 layers, 4 heads, predictor 64, vocab 32 + blank.
The weights are random but seeded; the joint's blank and duration biases
are set so that a random network emits a mix of tokens, blanks and
durations on speech-like input (all-blank output would test little).

Written in the onnx-asr layout (istupakov/onnx-asr, the published
Parakeet ONNX files):
  asr/tiny-tdt/encoder-model.onnx   audio_signal [B,128,T] f32, length [B] i64
                                    -> outputs [B,64,T'] f32, encoded_lengths [B] i64
  asr/tiny-tdt/decoder_joint-model.onnx
                                    encoder_outputs [B,64,1] f32, targets [B,1] i32,
                                    target_length [B] i32, input_states_1 [2,B,64],
                                    input_states_2 [2,B,64] -> outputs [B,1,1,38],
                                    prednet_lengths, output_states_1, output_states_2
  asr/tiny-tdt/vocab.txt            "token id" lines, <blk> last
  asr/tiny-tdt/config.json          model_type, features_size, subsampling_factor
  asr/tiny-tdt/model.pt             the torch state dict, for the tests' reference
and, from the same networks, the sherpa-onnx layout in asr/tiny-tdt-sherpa/
(encoder.onnx, decoder.onnx, joiner.onnx, tokens.txt, and the metadata keys
sherpa-onnx's NeMo export writes; export_sherpa).

A cache-aware streaming variant, asr/tiny-tdt-streaming/ in the sherpa-onnx
layout (generate_streaming): an encoder built for chunked-limited
attention, as NeMo's cache-aware FastConformers are (reference notes,
section 2, "(b) True cache-aware FastConformer"), at a small size: frame
stacking x8 (so no pre-encode cache: window_size = chunk_shift = 16 mel
frames, 2 encoder frames a chunk), 2 layers whose attention sees its chunk
and the 8 encoder frames before it (cache_last_channel [B, 2, 8, 64]) and a
causal depthwise conv of kernel 5 (cache_last_time [B, 2, 64, 4]), no
feature normalisation (normalize_type ""; the encoder scales its input by
fixed constants). Its encoder.onnx takes
audio_signal, length, cache_last_channel, cache_last_time,
cache_last_channel_len and gives outputs, encoded_lengths and the three
caches' next values; its forward_full runs a whole utterance at once with
the equivalent masks, the tests' offline reference. asr/tiny-tdt-streaming-pre/
is the same with a pre-encode cache of 8 frames (window_size 24, chunk_shift
16), as NeMo's cache-aware exports have one (build_streaming_encoder).
Exported with torch.onnx.export(opset 17, dynamo off) and dynamic batch and
time axes.

Idempotent: skipped when the stamp file holds the current GENERATOR_VERSION.
"""

import argparse
import json
import os
import sys

GENERATOR_VERSION = ("infd-gen-asr-models/5 seed=2126 d=64 L=2 V=32 mels=128 joint=centred,std2 "
                     "sherpa-metadata streaming=C8,K5,chunk16,fixednorm streaming-pre=8")
SEED = 2126
N_MELS, D_MODEL, N_LAYERS, N_HEADS, PRED, VOCAB = 128, 64, 2, 4, 64, 32
# name -> (d_model, layers, heads, predictor, vocab). "tiny" for the tests,
# "bench" for bench/asr_vs_ort.py (not made by setup.sh).
SIZES = {"tiny": (D_MODEL, N_LAYERS, N_HEADS, PRED, VOCAB), "bench": (256, 8, 4, 320, 1024)}
DURATIONS = [0, 1, 2, 3, 4]
# SentencePiece-like pieces: "▁" starts a word.
PIECES = ["▁the", "▁a", "▁of", "▁to", "s", "e", "t", "▁and", "▁in", "ing", "ed", "▁is",
          "er", "▁it", "o", "n", "▁that", "▁was", "r", "▁he", "y", "l", "▁on", "d", "▁for",
          "ly", "▁be", "i", "▁with", "▁as", "u", "▁at"]


def default_out():
    cache = os.environ.get("INFD_CACHE") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache")
    return os.path.join(cache, "models", "asr")


def feed_forward_class(mult=4):
    """A conformer's half-step feed-forward: LayerNorm, Linear to mult x d,
    SiLU, Linear back."""
    from torch import nn

    class FeedForward(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.l1, self.l2 = nn.Linear(d, mult * d), nn.Linear(mult * d, d)

        def forward(self, x):
            return self.l2(nn.functional.silu(self.l1(self.norm(x))))

    return FeedForward


def build_modules(d_model=D_MODEL, n_layers=N_LAYERS, n_heads=N_HEADS, pred=PRED, vocab=VOCAB,
                  n_mels=N_MELS, ff_mult=4, conv_mask="before"):
    """(Encoder, DecoderJoint) classes of the given size (ff_mult: the
    feed-forward's width over d_model; tools/train_asr trains these).

    conv_mask: where the convolution module zeroes padded frames. "before"
    (these tiny models, and models/speech/1, in git history): before the
    first pointwise convolution, whose bias refills them, so the depthwise
    convolution reads the padding into the last valid frames and the
    output depends on how far the input is padded. "after-glu": NeMo's
    place, just before the depthwise convolution; the output does not
    depend on the padding."""
    if conv_mask not in ("before", "after-glu"):
        raise ValueError(f"conv_mask {conv_mask!r}: before or after-glu")
    import torch
    from torch import nn

    class Subsampling(nn.Module):
        def __init__(self, d, ch=32):
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(1, ch, 3, 2, 1), nn.ReLU(),
                nn.Conv2d(ch, ch, 3, 2, 1, groups=ch), nn.Conv2d(ch, ch, 1), nn.ReLU(),
                nn.Conv2d(ch, ch, 3, 2, 1, groups=ch), nn.Conv2d(ch, ch, 1), nn.ReLU())
            self.out = nn.Linear(ch * (n_mels // 8), d)

        def forward(self, x, length):  # x [B, mels, T]
            x = self.conv(x.transpose(1, 2).unsqueeze(1))  # [B, ch, T/8, mels/8]
            b, c, t, f = x.shape
            x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
            for _ in range(3):
                length = torch.div(length + 2 - 3, 2, rounding_mode="floor") + 1
            return x, length

    FeedForward = feed_forward_class(ff_mult)

    class Attention(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.h = heads

        def forward(self, x, mask):  # mask [B, 1, 1, T]: True where padding
            b, t, d = x.shape
            q, k, v = self.qkv(self.norm(x)).reshape(b, t, 3, self.h, d // self.h).permute(
                2, 0, 3, 1, 4)
            s = torch.matmul(q, k.transpose(-1, -2)) / float((d // self.h) ** 0.5)
            s = s.masked_fill(mask, -10000.0)
            a = torch.matmul(torch.softmax(s, dim=-1), v)
            return self.out(a.transpose(1, 2).reshape(b, t, d))

    class ConvModule(nn.Module):
        def __init__(self, d, k=9):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.pw1 = nn.Conv1d(d, 2 * d, 1)
            self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
            self.bn = nn.BatchNorm1d(d)
            self.pw2 = nn.Conv1d(d, d, 1)

        def forward(self, x, pad):  # pad [B, T, 1]: 1 where padding
            y = self.norm(x)
            if conv_mask == "before":
                y = y.masked_fill(pad, 0.0)
            y = nn.functional.glu(self.pw1(y.transpose(1, 2)), dim=1)
            if conv_mask == "after-glu":
                y = y.masked_fill(pad.transpose(1, 2), 0.0)
            y = self.pw2(nn.functional.silu(self.bn(self.dw(y))))
            return y.transpose(1, 2)

    class Layer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ff1, self.att, self.conv, self.ff2 = (FeedForward(d), Attention(d, n_heads),
                                                        ConvModule(d), FeedForward(d))
            self.norm = nn.LayerNorm(d)

        def forward(self, x, mask, pad):
            x = x + 0.5 * self.ff1(x)
            x = x + self.att(x, mask)
            x = x + self.conv(x, pad)
            x = x + 0.5 * self.ff2(x)
            return self.norm(x)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = Subsampling(d_model)
            self.layers = nn.ModuleList([Layer(d_model) for _ in range(n_layers)])

        def forward(self, audio_signal, length):
            x, lens = self.pre(audio_signal, length)
            t = torch.arange(x.shape[1], device=x.device)
            pad = (t.unsqueeze(0) >= lens.unsqueeze(1))  # [B, T']
            mask = pad.unsqueeze(1).unsqueeze(1)
            padc = pad.unsqueeze(2)
            for layer in self.layers:
                x = layer(x, mask, padc)
            return x.transpose(1, 2), lens

    class DecoderJoint(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab + 1, pred, padding_idx=vocab)
            self.lstm = nn.LSTM(pred, pred, num_layers=2)
            self.enc = nn.Linear(d_model, pred)
            self.pred = nn.Linear(pred, pred)
            self.joint = nn.Linear(pred, vocab + 1 + len(DURATIONS))

        def forward(self, encoder_outputs, targets, target_length, input_states_1,
                    input_states_2):
            g = self.embed(targets.long()).transpose(0, 1)  # [1, B, pred]
            g, (h, c) = self.lstm(g, (input_states_1, input_states_2))
            f = self.enc(encoder_outputs.transpose(1, 2))  # [B, 1, PRED]
            p = self.pred(g.transpose(0, 1))  # [B, 1, PRED]
            z = self.joint(torch.relu(f.unsqueeze(2) + p.unsqueeze(1)))  # [B, 1, 1, V+1+5]
            return z, target_length, h, c

    return Encoder, DecoderJoint


def attend_cached(qkv, out, heads, q_in, kv_in, hidden):
    """Multi-head attention of the queries q_in [B, Tq, d] over the keys and
    values kv_in [B, Tk, d] (a cache before the queries' own frames), with
    qkv (Linear d -> 3d: q, k, v) and out; hidden [B, 1, Tq, Tk] is True
    where a key is not seen. The cache-aware encoders' attention."""
    import torch
    from torch import nn

    b, tq, d = q_in.shape
    tk = kv_in.shape[1]
    h = heads
    w, bias = qkv.weight, qkv.bias
    q = nn.functional.linear(q_in, w[:d], bias[:d]).reshape(b, tq, h, d // h)
    kv = nn.functional.linear(kv_in, w[d:], bias[d:]).reshape(b, tk, 2, h, d // h)
    q = q.transpose(1, 2)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    s = torch.matmul(q, k.transpose(-1, -2)) / float((d // h) ** 0.5)
    s = s.masked_fill(hidden, -10000.0)
    a = torch.matmul(torch.softmax(s, dim=-1), v)
    return out(a.transpose(1, 2).reshape(b, tq, d))


STREAM_CHUNK, STREAM_LEFT, STREAM_KERNEL = 2, 8, 5  # encoder frames a chunk, left context, conv


def build_streaming_encoder(d_model=D_MODEL, n_layers=N_LAYERS, n_heads=N_HEADS, n_mels=N_MELS,
                            chunk=STREAM_CHUNK, left=STREAM_LEFT, kernel=STREAM_KERNEL,
                            pre_frames=0):
    """The cache-aware encoder class: forward(audio_signal, length,
    cache_last_channel, cache_last_time, cache_last_channel_len) for one
    window of pre_frames + chunk * 8 mel frames, and forward_full(audio_signal,
    length) for a whole utterance with the masks that make it equal.

    pre_frames (0 or 8) is a pre-encode cache, as NeMo's exports have and
    sherpa-onnx streams them (window_size = chunk_shift + the cache, each
    window starting where the last one's shift ended): the first 8 frames
    of a window are context only. Each stacked frame adds a linear map of
    the stacked frame before it, and the window's first stacked frame gives
    no output (NeMo's drop_extra_pre_encoded); over a whole utterance the
    first 8 frames likewise give none."""
    import torch
    from torch import nn

    FeedForward = feed_forward_class()

    class Layer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ff1, self.ff2 = FeedForward(d), FeedForward(d)
            self.att_norm = nn.LayerNorm(d)
            self.qkv, self.att_out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.conv_norm = nn.LayerNorm(d)
            self.pw1 = nn.Conv1d(d, 2 * d, 1)
            self.dw = nn.Conv1d(d, d, kernel, groups=d)  # causal: left context from the cache
            self.bn = nn.BatchNorm1d(d)
            self.pw2 = nn.Conv1d(d, d, 1)
            self.norm = nn.LayerNorm(d)

        def attend(self, q_in, kv_in, mask):  # mask [B, 1, Tq, Tk]: True where hidden
            return attend_cached(self.qkv, self.att_out, n_heads, q_in, kv_in, mask)

        def conv(self, x, pad, cache):  # cache [B, d, K-1]: the dw conv's last inputs
            y = self.conv_norm(x).masked_fill(pad, 0.0).transpose(1, 2)
            y = nn.functional.glu(self.pw1(y), dim=1)
            y = torch.cat([cache, y], dim=2)
            out = self.pw2(nn.functional.silu(self.bn(self.dw(y))))
            return out.transpose(1, 2), y[:, :, y.shape[2] - (kernel - 1):]

    class StreamingEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = nn.Linear(8 * n_mels, d_model)
            self.layers = nn.ModuleList([Layer(d_model) for _ in range(n_layers)])
            if pre_frames:
                self.prev = nn.Linear(d_model, d_model)

        def subsample(self, audio_signal, length):
            b, m, t = audio_signal.shape
            # fixed normalisation of unnormalised log-mels (a cache-aware
            # model's features depend on nothing but their own frames)
            audio_signal = (audio_signal + 9.0) / 3.5
            x = torch.relu(self.pre(audio_signal.transpose(1, 2).reshape(b, t // 8, 8 * m)))
            if not pre_frames:
                return x, torch.div(length + 7, 8, rounding_mode="floor")
            x = x[:, 1:] + self.prev(x[:, :-1])  # the first stacked frame: context only
            return x, torch.clamp(torch.div(length - pre_frames + 7, 8, rounding_mode="floor"),
                                  min=0)

        def forward(self, audio_signal, length, cache_last_channel, cache_last_time,
                    cache_last_channel_len):
            x, lens = self.subsample(audio_signal, length)
            b, t, d = x.shape
            pos = torch.arange(t, device=x.device)
            pad = (pos.unsqueeze(0) >= lens.unsqueeze(1))  # [B, T]
            cpos = torch.arange(left, device=x.device)
            cache_hidden = cpos.unsqueeze(0) < (left - cache_last_channel_len).unsqueeze(1)
            hidden = torch.cat([cache_hidden, pad], dim=1)  # [B, C + T]
            mask = hidden.unsqueeze(1).unsqueeze(1)
            padc = pad.unsqueeze(2)
            channels, times = [], []
            for i, layer in enumerate(self.layers):
                x = x + 0.5 * layer.ff1(x)
                a_in = layer.att_norm(x)
                kv_in = torch.cat([cache_last_channel[:, i], a_in], dim=1)
                channels.append(kv_in[:, kv_in.shape[1] - left:])
                x = x + layer.attend(a_in, kv_in, mask)
                c, tc = layer.conv(x, padc, cache_last_time[:, i])
                times.append(tc)
                x = x + c
                x = x + 0.5 * layer.ff2(x)
                x = layer.norm(x)
            next_len = torch.clamp(cache_last_channel_len + t, max=left)
            return (x.transpose(1, 2), lens, torch.stack(channels, 1), torch.stack(times, 1),
                    next_len)

        def forward_full(self, audio_signal, length):
            """A whole utterance at once: frame i attends to frames from
            `left` before its chunk's start to its chunk's end (chunks of
            `chunk` frames), the convs are causal."""
            t8 = -(-audio_signal.shape[2] // 8) * 8
            audio_signal = nn.functional.pad(audio_signal, (0, t8 - audio_signal.shape[2]))
            x, lens = self.subsample(audio_signal, length)
            b, t, d = x.shape
            pos = torch.arange(t)
            pad = pos.unsqueeze(0) >= lens.unsqueeze(1)
            start = pos // chunk * chunk
            visible = (pos.unsqueeze(0) >= (start - left).unsqueeze(1)) & \
                (pos.unsqueeze(0) < (start + chunk).unsqueeze(1))  # [Tq, Tk]
            mask = (~visible).unsqueeze(0).unsqueeze(0) | pad.unsqueeze(1).unsqueeze(1)
            padc = pad.unsqueeze(2)
            for layer in self.layers:
                x = x + 0.5 * layer.ff1(x)
                a_in = layer.att_norm(x)
                x = x + layer.attend(a_in, a_in, mask)
                c, _ = layer.conv(x, padc, torch.zeros(b, d, kernel - 1))
                x = x + c
                x = x + 0.5 * layer.ff2(x)
                x = layer.norm(x)
            return x.transpose(1, 2), lens

    return StreamingEncoder


def calibrate_joint(encode, dec, pred, vocab):
    """A random joint made to emit a mix of tokens, blanks and durations:
    the joint's inputs (post-ReLU, so with a common positive part) are
    collected over random features and tokens, the logits centred
    (bias -= W mean) and scaled to a standard deviation of 2, then the
    blank and the durations get biases of their own."""
    import torch

    eo = encode(torch.randn(4, N_MELS, 400), torch.tensor([400] * 4))
    f = dec.enc(eo.transpose(1, 2)).reshape(-1, pred)  # [4 * 50, PRED]
    toks = torch.randint(0, vocab, (1, 64))
    g, _ = dec.lstm(dec.embed(toks),  # [1 step, 64 sequences, PRED]
                    (torch.zeros(2, 64, pred), torch.zeros(2, 64, pred)))
    p = dec.pred(g.reshape(-1, pred))  # [64, PRED]
    z = torch.relu(f[:, None, :] + p[None, :, :]).reshape(-1, pred)
    w = dec.joint.weight
    logits = z @ w.t()
    w.mul_(2.0 / logits.std(dim=0, keepdim=True).t().clamp_min(1e-6))
    dec.joint.bias.copy_(-(z.mean(dim=0) @ w.t()))
    dec.joint.bias[vocab] += 1.5  # blank
    dec.joint.bias[vocab + 1:] += torch.tensor([0.5, 1.0, 0.5, 0.0, -0.5])


def randomise_batchnorm(module):
    """BatchNorm statistics of a trained-looking net."""
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)


def add_metadata(path, meta):
    """Writes `meta` into the ONNX file's metadata_props, as sherpa-onnx's
    NeMo export scripts do."""
    import onnx

    m = onnx.load(path)
    for k, v in meta.items():
        e = m.metadata_props.add()
        e.key, e.value = k, str(v)
    onnx.save(m, path)


def rough_logmels(seconds=4.0, batch=4):
    """Log-mels of synthetic speech-like audio (moving tones in noise, with
    pauses), unnormalised, [batch, N_MELS, frames]: a cache-aware model's
    inputs, to calibrate its joint on. Rough (HTK-style triangles): only the
    spread of values matters here."""
    import math

    import torch

    g = torch.Generator().manual_seed(SEED)
    n = int(seconds * 16000)
    t = torch.arange(n) / 16000.0
    hz = torch.linspace(0, 8000, 257)
    mel = lambda f: 2595.0 * torch.log10(1.0 + f / 700.0)  # noqa: E731
    edges = torch.linspace(0, float(mel(torch.tensor(8000.0))), N_MELS + 2)
    m = mel(hz)
    fb = torch.clamp(torch.minimum((m[None] - edges[:-2, None]) / (edges[1:-1, None] - edges[:-2, None]),
                                   (edges[2:, None] - m[None]) / (edges[2:, None] - edges[1:-1, None])),
                     min=0.0)
    out = []
    for _ in range(batch):
        x = 0.05 * torch.randn(n, generator=g)
        for f0 in (220.0, 700.0, 1800.0, 3500.0):
            rate = float(torch.rand(1, generator=g)) * 4 + 1
            x += 0.15 * torch.sin(2 * math.pi * f0 * t * (1 + 0.05 * torch.sin(2 * math.pi * rate * t)))
        x *= (torch.sin(2 * math.pi * 0.7 * t + float(torch.rand(1, generator=g)) * 6) > -0.3).float()
        spec = torch.stft(x, 512, 160, 400, torch.hann_window(400, periodic=False), center=True,
                          pad_mode="constant", return_complex=True)
        out.append(torch.log(fb @ spec.abs() ** 2 + 2.0 ** -24))
    return torch.stack(out)


def generate_streaming(out, pre=0):
    """The cache-aware variant (module docstring) in the sherpa-onnx layout,
    with model.pt (encoder and decoder_joint state dicts); `pre` mel frames
    of pre-encode cache (0, or 8 for tiny-tdt-streaming-pre)."""
    import torch

    StreamingEncoder = build_streaming_encoder(pre_frames=pre)
    _, DecoderJoint = build_modules()
    torch.manual_seed(SEED + 1 + pre)
    enc, dec = StreamingEncoder().eval(), DecoderJoint().eval()
    L, C, K = N_LAYERS, STREAM_LEFT, STREAM_KERNEL
    shift = STREAM_CHUNK * 8
    window = shift + pre
    with torch.no_grad():
        randomise_batchnorm(enc)
        if pre:  # the context term small beside the frame's own
            enc.prev.weight.mul_(0.2)
            enc.prev.bias.zero_()
        # on unnormalised log-mels of speech-like audio
        feats = rough_logmels()
        calibrate_joint(lambda x, n: enc.forward_full(feats, torch.tensor([feats.shape[2]] * 4))[0],
                        dec, PRED, VOCAB)
        # the chunked forward with caches equals the whole-utterance one
        x = torch.randn(1, N_MELS, 8 * 13)
        full, _ = enc.forward_full(x, torch.tensor([x.shape[2]]))
        ch, tm, ln = torch.zeros(1, L, C, D_MODEL), torch.zeros(1, L, D_MODEL, K - 1), \
            torch.zeros(1, dtype=torch.int64)
        parts = []
        for s in range(0, x.shape[2] - pre, shift):
            piece = torch.nn.functional.pad(x[:, :, s:s + window],
                                            (0, max(0, s + window - x.shape[2])))
            o, _, ch, tm, ln = enc(piece, torch.tensor([min(window, x.shape[2] - s)]), ch, tm, ln)
            parts.append(o)
        chunked = torch.cat(parts, dim=2)[:, :, :full.shape[2]]
        assert torch.allclose(full, chunked, atol=1e-4), (full - chunked).abs().max()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "encoder.onnx")
    torch.onnx.export(enc, (torch.randn(1, N_MELS, window), torch.tensor([window]),
                            torch.zeros(1, L, C, D_MODEL), torch.zeros(1, L, D_MODEL, K - 1),
                            torch.zeros(1, dtype=torch.int64)), path,
                      input_names=["audio_signal", "length", "cache_last_channel",
                                   "cache_last_time", "cache_last_channel_len"],
                      output_names=["outputs", "encoded_lengths", "cache_last_channel_next",
                                    "cache_last_time_next", "cache_last_channel_next_len"],
                      dynamic_axes={"audio_signal": {0: "B"}, "length": {0: "B"},
                                    "cache_last_channel": {0: "B"}, "cache_last_time": {0: "B"},
                                    "cache_last_channel_len": {0: "B"}, "outputs": {0: "B"},
                                    "encoded_lengths": {0: "B"},
                                    "cache_last_channel_next": {0: "B"},
                                    "cache_last_time_next": {0: "B"},
                                    "cache_last_channel_next_len": {0: "B"}},
                      opset_version=17, do_constant_folding=True)
    add_metadata(path, {"vocab_size": VOCAB + 1, "normalize_type": "", "pred_rnn_layers": 2,
                        "pred_hidden": PRED, "subsampling_factor": 8, "feat_dim": N_MELS,
                        "window_size": window, "chunk_shift": shift,
                        "cache_last_channel_dim1": L, "cache_last_channel_dim2": C,
                        "cache_last_channel_dim3": D_MODEL, "cache_last_time_dim1": L,
                        "cache_last_time_dim2": D_MODEL, "cache_last_time_dim3": K - 1,
                        "model_type": "EncDecRNNTBPEModel"})
    pieces = PIECES
    export_predictor_joiner(dec, out, pieces, D_MODEL, PRED, VOCAB)
    torch.save({"encoder": enc.state_dict(), "decoder_joint": dec.state_dict()},
               os.path.join(out, "model.pt"))


def export_encoder(enc, path, n_mels=N_MELS, frames=200, **kw):
    """Writes Encoder `enc` with the onnx-asr names, traced on `frames`
    feature frames (kw: more torch.onnx.export arguments)."""
    import torch

    feats = torch.randn(1, n_mels, frames)
    length = torch.tensor([frames], dtype=torch.int64)
    torch.onnx.export(enc, (feats, length), path,
                      input_names=["audio_signal", "length"],
                      output_names=["outputs", "encoded_lengths"],
                      dynamic_axes={"audio_signal": {0: "batch", 2: "time"}, "length": {0: "batch"},
                                    "outputs": {0: "batch", 2: "frames"},
                                    "encoded_lengths": {0: "batch"}},
                      opset_version=17, do_constant_folding=True, **kw)


def export_decoder_joint(dec, path, d_model, pred, vocab, **kw):
    """Writes DecoderJoint `dec` with the onnx-asr names (kw: more
    torch.onnx.export arguments)."""
    import torch

    eo = torch.randn(1, d_model, 1)
    tg = torch.tensor([[vocab]], dtype=torch.int32)
    tl = torch.tensor([1], dtype=torch.int32)
    s1, s2 = torch.zeros(2, 1, pred), torch.zeros(2, 1, pred)
    torch.onnx.export(dec, (eo, tg, tl, s1, s2), path,
                      input_names=["encoder_outputs", "targets", "target_length",
                                   "input_states_1", "input_states_2"],
                      output_names=["outputs", "prednet_lengths", "output_states_1",
                                    "output_states_2"],
                      dynamic_axes={"encoder_outputs": {0: "batch"}, "targets": {0: "batch"},
                                    "target_length": {0: "batch"},
                                    "input_states_1": {1: "batch"}, "input_states_2": {1: "batch"},
                                    "outputs": {0: "batch"}, "prednet_lengths": {0: "batch"},
                                    "output_states_1": {1: "batch"},
                                    "output_states_2": {1: "batch"}},
                      opset_version=17, do_constant_folding=True, **kw)


def generate(out, size):
    """Writes the model of SIZES[size] into out."""
    import torch

    d_model, n_layers, n_heads, PRED, VOCAB = SIZES[size]
    Encoder, DecoderJoint = build_modules(d_model, n_layers, n_heads, PRED, VOCAB)
    pieces = PIECES if VOCAB == len(PIECES) else \
        [("\u2581" if i % 3 == 0 else "") + f"p{i}" for i in range(VOCAB)]
    torch.manual_seed(SEED)
    enc, dec = Encoder().eval(), DecoderJoint().eval()
    with torch.no_grad():
        randomise_batchnorm(enc)
        calibrate_joint(lambda x, n: enc(x, n)[0], dec, PRED, VOCAB)
    os.makedirs(out, exist_ok=True)
    export_encoder(enc, os.path.join(out, "encoder-model.onnx"))
    export_decoder_joint(dec, os.path.join(out, "decoder_joint-model.onnx"), d_model, PRED, VOCAB)
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
        for i, p in enumerate(pieces):
            f.write(f"{p} {i}\n")
        f.write(f"<blk> {VOCAB}\n")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "nemo-conformer-tdt", "features_size": N_MELS,
                   "subsampling_factor": 8, "max_tokens_per_step": 10}, f, indent=1)
    torch.save({"encoder": enc.state_dict(), "decoder_joint": dec.state_dict()},
               os.path.join(out, "model.pt"))
    export_sherpa(enc, dec, out + "-sherpa", pieces, d_model, PRED, VOCAB)
    if size == "tiny":
        generate_streaming(out.replace("-tdt", "-tdt-streaming"))
        generate_streaming(out.replace("-tdt", "-tdt-streaming-pre"), pre=8)


def export_sherpa(enc, dec, out, pieces, d_model, pred, vocab):
    """The same networks in the sherpa-onnx layout (NeMo's own transducer
    export, k2-fsa/sherpa-onnx scripts/nemo): encoder.onnx as above,
    decoder.onnx (the predictor: targets [B, U] i32, target_length [B] i32,
    two states [2, B, H] with export-made names -> outputs [B, H, U],
    prednet_lengths, two states), joiner.onnx (encoder_outputs [B, D, T],
    decoder_outputs [B, H, U] -> outputs [B, T, U, V + 1 + 5]) and
    tokens.txt (piece id, <blk> last)."""
    import torch

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "encoder.onnx")
    torch.onnx.export(enc, (torch.randn(1, N_MELS, 200), torch.tensor([200])),
                      path, input_names=["audio_signal", "length"],
                      output_names=["outputs", "encoded_lengths"],
                      dynamic_axes={"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"},
                                    "outputs": {0: "B", 2: "T_out"},
                                    "encoded_lengths": {0: "B"}},
                      opset_version=17, do_constant_folding=True)
    add_metadata(path, {"vocab_size": vocab + 1, "normalize_type": "per_feature",
                        "pred_rnn_layers": 2, "pred_hidden": pred, "subsampling_factor": 8,
                        "feat_dim": N_MELS, "model_type": "EncDecRNNTBPEModel"})
    export_predictor_joiner(dec, out, pieces, d_model, pred, vocab)


def export_predictor_joiner(dec, out, pieces, d_model, pred, vocab, **kw):
    """decoder.onnx, joiner.onnx and tokens.txt of the sherpa-onnx layout (kw:
    more torch.onnx.export arguments)."""
    import torch
    from torch import nn

    class Predictor(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.lstm = dec.embed, dec.lstm

        def forward(self, targets, target_length, s1, s2):
            g, (h, c) = self.lstm(self.embed(targets.long()).transpose(0, 1), (s1, s2))
            return g.permute(1, 2, 0), target_length, h, c  # [B, H, U]

    class Joiner(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.pred, self.joint = dec.enc, dec.pred, dec.joint

        def forward(self, encoder_outputs, decoder_outputs):
            f = self.enc(encoder_outputs.transpose(1, 2))  # [B, T, H]
            p = self.pred(decoder_outputs.transpose(1, 2))  # [B, U, H]
            return self.joint(torch.relu(f.unsqueeze(2) + p.unsqueeze(1)))

    torch.onnx.export(Predictor().eval(),
                      (torch.tensor([[vocab]], dtype=torch.int32), torch.tensor([1], dtype=torch.int32),
                       torch.zeros(2, 1, pred), torch.zeros(2, 1, pred)),
                      os.path.join(out, "decoder.onnx"),
                      input_names=["targets", "target_length", "states.1", "onnx::Slice_3"],
                      output_names=["outputs", "prednet_lengths", "states", "162"],
                      dynamic_axes={"targets": {0: "B", 1: "U"}, "target_length": {0: "B"},
                                    "states.1": {1: "B"}, "onnx::Slice_3": {1: "B"},
                                    "outputs": {0: "B", 2: "U"}, "prednet_lengths": {0: "B"},
                                    "states": {1: "B"}, "162": {1: "B"}},
                      opset_version=17, do_constant_folding=True, **kw)
    torch.onnx.export(Joiner().eval(), (torch.randn(1, d_model, 1), torch.randn(1, pred, 1)),
                      os.path.join(out, "joiner.onnx"),
                      input_names=["encoder_outputs", "decoder_outputs"], output_names=["outputs"],
                      dynamic_axes={"encoder_outputs": {0: "B", 2: "T"},
                                    "decoder_outputs": {0: "B", 2: "U"}, "outputs": {0: "B"}},
                      opset_version=17, do_constant_folding=True, **kw)
    with open(os.path.join(out, "tokens.txt"), "w", encoding="utf-8") as f:
        for i, p in enumerate(pieces):
            f.write(f"{p} {i}\n")
        f.write(f"<blk> {vocab}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=default_out(), help="output directory (default: %(default)s)")
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES),
                    help="tiny (the tests') or bench (d_model 256, 8 layers, vocab 1024)")
    ap.add_argument("--force", action="store_true", help="regenerate even if up to date")
    a = ap.parse_args(argv)
    out = os.path.join(a.out, f"{a.size}-tdt")
    version = f"{GENERATOR_VERSION} size={a.size}"
    stamp = os.path.join(out, "stamp")
    if not a.force and os.path.exists(stamp) and open(stamp).read().strip() == version:
        print(f"gen_asr_models: {out} up to date")
        return 0
    generate(out, a.size)
    with open(stamp, "w") as f:
        f.write(version + "\n")
    print(f"gen_asr_models: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
