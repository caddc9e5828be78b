"""The cache-aware streaming variant of infd's speech model (issue #26): the
encoder of gen_asr_models.build_modules (same modules, same parameter
names, so a full-context checkpoint warm-starts it), run the way NeMo's
cache-aware FastConformers run (reference notes, streaming.md section 2,
"(b)"), and exported in the sherpa-onnx layout that infd's mode (b) streams
(docs/ASR.md, "Streaming, mode (b)").

What makes it streamable:
- Features are not normalised per utterance (normalize_type ""): the
  encoder subtracts a fixed per-mel mean and divides by a fixed std
  (feat_mean, feat_std: measured on the training audio when the run
  starts), so a frame depends on its own 25 ms of audio only.
- The subsampling is the full model's (three stride-2 3x3 convolutions with
  padding 1): encoder frame i reads feature frames 8i-7 .. 8i+7, which
  ends inside its own block of 8. So a window of 24 feature frames moving
  by 16 (a pre-encode cache of 8 frames) gives two frames that do not
  depend on the window's edges; the first block's frame, whose field
  reaches before the window, is dropped, in every window and over a whole
  utterance alike (as tiny-tdt-streaming-pre does).
- Chunked, limited attention: a frame of chunk c (CHUNK encoder frames, 160
  ms) sees the LEFT frames before the chunk and the chunk itself, never a
  later one; cache_last_channel carries each layer's LEFT last
  attention inputs.
- Causal depthwise convolution (kernel 9): a frame sees the 8 before it,
  which cache_last_time carries; padding is zeroed after the GLU.

forward(audio_signal, length) runs a whole utterance with the masks that
make it equal to the chunk-by-chunk run (training, evaluation);
step(...) is one window with its caches (the export's graph).
"""

import inspect
import os

import torch
from torch import nn

CHUNK, LEFT, KERNEL, PRE = 2, 64, 9, 8  # encoder frames a chunk; attention's left context;
#                                        the conv's kernel; pre-encode feature frames
SHIFT = CHUNK * 8
WINDOW = SHIFT + PRE


def build(a, vocab, n_mels):
    """(StreamingEncoder, DecoderJoint) instances of train.py's sizes."""
    import gen_asr_models as g

    Encoder, DecoderJoint = g.build_modules(d_model=a.d_model, n_layers=a.layers,
                                            n_heads=a.heads, pred=a.pred, vocab=vocab,
                                            n_mels=n_mels, ff_mult=a.ff_mult,
                                            conv_mask="after-glu")
    left = getattr(a, "left", LEFT)

    class StreamingEncoder(Encoder):
        def __init__(self):
            super().__init__()
            self.register_buffer("feat_mean", torch.zeros(n_mels))
            self.register_buffer("feat_std", torch.ones(n_mels))
            self.left = left
            self.p_drop = 0.0  # train.add_dropout: the residual branches' dropout

        def subsample(self, x, length):
            """Normalised features -> encoder frames of every block but the
            first, and their count."""
            x = (x - self.feat_mean.view(1, -1, 1)) / self.feat_std.view(1, -1, 1)
            y, _ = self.pre(x, length)  # the full model's subsampling; its count differs
            lens = torch.clamp(torch.div(length - PRE + 7, 8, rounding_mode="floor"), min=0)
            return y[:, 1:], lens

        @staticmethod
        def attend(att, q_in, kv_in, hidden):  # hidden [B, 1, Tq, Tk]
            return g.attend_cached(att.qkv, att.out, att.h, q_in, kv_in, hidden)

        @staticmethod
        def convolve(conv, x, pad, cache):
            """The convolution module, causal: cache [B, d, K-1] holds the
            depthwise convolution's inputs before x. Gives the output and
            the next cache."""
            y = nn.functional.glu(conv.pw1(conv.norm(x).transpose(1, 2)), dim=1)
            y = y.masked_fill(pad.transpose(1, 2), 0.0)
            y = torch.cat([cache, y], dim=2)
            z = nn.functional.conv1d(y, conv.dw.weight, conv.dw.bias, groups=y.shape[1])
            z = conv.pw2(nn.functional.silu(conv.bn(z)))
            return z.transpose(1, 2), y[:, :, y.shape[2] - (KERNEL - 1):]

        def forward(self, audio_signal, length):
            """A whole utterance [B, mels, T] at once, with the chunked
            masks: what step() gives window after window."""
            t8 = -(-audio_signal.shape[2] // 8) * 8
            audio_signal = nn.functional.pad(audio_signal, (0, t8 - audio_signal.shape[2]))
            x, lens = self.subsample(audio_signal, length)
            b, t, d = x.shape
            pos = torch.arange(t, device=x.device)
            pad = pos.unsqueeze(0) >= lens.unsqueeze(1)  # [B, T]
            start = torch.div(pos, CHUNK, rounding_mode="floor") * CHUNK
            visible = (pos.unsqueeze(0) >= (start - self.left).unsqueeze(1)) & \
                (pos.unsqueeze(0) < (start + CHUNK).unsqueeze(1))  # [Tq, Tk]
            hidden = (~visible).unsqueeze(0).unsqueeze(0) | pad.unsqueeze(1).unsqueeze(1)
            padc = pad.unsqueeze(2)
            zeros = x.new_zeros(b, d, KERNEL - 1)

            def drop(y):  # training only; step(), the export, has none
                return nn.functional.dropout(y, self.p_drop, self.training)

            for layer in self.layers:
                x = x + 0.5 * drop(layer.ff1(x))
                a_in = layer.att.norm(x)
                x = x + drop(self.attend(layer.att, a_in, a_in, hidden))
                c, _ = self.convolve(layer.conv, x, padc, zeros)
                x = x + drop(c)
                x = x + 0.5 * drop(layer.ff2(x))
                x = layer.norm(x)
            return x.transpose(1, 2), lens

        def step(self, audio_signal, length, cache_last_channel, cache_last_time,
                 cache_last_channel_len):
            """One window of WINDOW feature frames (length of them real) and
            the caches -> its CHUNK frames, their count, the next caches."""
            x, lens = self.subsample(audio_signal, length)
            b, t, d = x.shape
            left_n = self.left
            pos = torch.arange(t, device=x.device)
            pad = pos.unsqueeze(0) >= lens.unsqueeze(1)  # [B, T]
            cpos = torch.arange(left_n, device=x.device)
            cache_hidden = cpos.unsqueeze(0) < (left_n - cache_last_channel_len).unsqueeze(1)
            hidden = torch.cat([cache_hidden, pad], dim=1).unsqueeze(1).unsqueeze(1)
            padc = pad.unsqueeze(2)
            channels, times = [], []
            for i, layer in enumerate(self.layers):
                x = x + 0.5 * layer.ff1(x)
                a_in = layer.att.norm(x)
                kv_in = torch.cat([cache_last_channel[:, i], a_in], dim=1)
                channels.append(kv_in[:, kv_in.shape[1] - left_n:])
                x = x + self.attend(layer.att, a_in, kv_in, hidden)
                c, tc = self.convolve(layer.conv, x, padc, cache_last_time[:, i])
                times.append(tc)
                x = x + c
                x = x + 0.5 * layer.ff2(x)
                x = layer.norm(x)
            next_len = torch.clamp(cache_last_channel_len + t, max=left_n)
            return (x.transpose(1, 2), lens, torch.stack(channels, 1), torch.stack(times, 1),
                    next_len)

    return StreamingEncoder(), DecoderJoint()


def from_full_context(state):
    """A full-context encoder's state dict (such as models/speech/3's) made a start
    for the streaming one: the centred depthwise kernels become causal ones
    that keep the taps on the past and the present (tap j at offset j - 4
    moves to k = j + 4 at offset k - 8) and lose those on the future."""
    out = dict(state)
    for k, w in state.items():
        if k.endswith("conv.dw.weight"):
            c = torch.zeros_like(w)
            half = w.shape[2] // 2
            c[:, :, half:] = w[:, :, :half + 1]
            out[k] = c
    return out


@torch.no_grad()
def feature_stats(lm, recs, pcm, count=256, seed=0):
    """Per-mel mean and std of unnormalised log-mels over `count` training
    utterances' valid frames."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(recs), generator=g)[:count].tolist()
    s = s2 = n = 0.0
    for i in idx:
        r = recs[i]
        x = pcm[r["offset"]:r["offset"] + r["samples"]].float().unsqueeze(0) / 32768.0
        f, frames = lm(x.to(lm.fb.device), torch.tensor([r["samples"]], device=lm.fb.device))
        f = f[0, :, :int(frames)].double()
        s = s + f.sum(1)
        s2 = s2 + (f * f).sum(1)
        n += f.shape[1]
    mean = s / n
    std = (s2 / n - mean * mean).clamp(min=1e-6).sqrt()
    return mean.float(), std.float()


def export(enc, dec, sp, a, vocab, out, n_mels):
    """The sherpa-onnx layout infd streams: encoder.onnx (step, with the
    metadata keys of sherpa-onnx's NeMo exports), decoder.onnx, joiner.onnx,
    tokens.txt."""
    import gen_asr_models as g

    os.makedirs(out, exist_ok=True)
    kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    enc = enc.cpu().eval()
    dec = dec.cpu().eval()
    L = len(enc.layers)
    d = a.d_model

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = enc

        def forward(self, *args):
            return self.enc.step(*args)

    path = os.path.join(out, "encoder.onnx")
    names_in = ["audio_signal", "length", "cache_last_channel", "cache_last_time",
                "cache_last_channel_len"]
    names_out = ["outputs", "encoded_lengths", "cache_last_channel_next",
                 "cache_last_time_next", "cache_last_channel_next_len"]
    torch.onnx.export(Step().eval(),
                      (torch.randn(1, n_mels, WINDOW), torch.tensor([WINDOW]),
                       torch.zeros(1, L, enc.left, d), torch.zeros(1, L, d, KERNEL - 1),
                       torch.zeros(1, dtype=torch.int64)), path,
                      input_names=names_in, output_names=names_out,
                      dynamic_axes={n: {0: "B"} for n in names_in + names_out},
                      opset_version=17, do_constant_folding=True, **kw)
    g.add_metadata(path, {"vocab_size": vocab + 1, "normalize_type": "", "pred_rnn_layers": 2,
                          "pred_hidden": a.pred, "subsampling_factor": 8, "feat_dim": n_mels,
                          "window_size": WINDOW, "chunk_shift": SHIFT,
                          "cache_last_channel_dim1": L, "cache_last_channel_dim2": enc.left,
                          "cache_last_channel_dim3": d, "cache_last_time_dim1": L,
                          "cache_last_time_dim2": d, "cache_last_time_dim3": KERNEL - 1,
                          "model_type": "EncDecRNNTBPEModel"})
    pieces = [sp.id_to_piece(i) for i in range(vocab)]
    g.export_predictor_joiner(dec, out, pieces, d, a.pred, vocab, **kw)
