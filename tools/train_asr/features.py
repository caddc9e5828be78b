"""NeMo's log-mel features for Parakeet, in torch, batched: what infd's
src/apps/asr/features.c computes (docs/ASR.md, "Features"), so that the
model is trained on the features it will be served with. train.py checks
them against `infd asr --features` when it is given an infd binary.

pre-emphasis 0.97; centred STFT (n_fft 512, a symmetric 400-sample Hann
window centred in it, hop 160, zero padding); power; Slaney mel filters
over 0-8 kHz; log(x + 2^-24); per-feature normalisation over the n // 160
valid frames (std over N - 1, plus 1e-5); frames past the valid ones 0.
"""

import math

import torch

RATE, N_FFT, WIN, HOP = 16000, 512, 400, 160
LOG_GUARD = 2.0 ** -24


def _hz_to_mel(hz):
    f_sp, min_hz = 200.0 / 3.0, 1000.0
    step = math.log(6.4) / 27.0
    return min_hz / f_sp + math.log(hz / min_hz) / step if hz >= min_hz else hz / f_sp


def _mel_to_hz(mel):
    f_sp, min_hz = 200.0 / 3.0, 1000.0
    step = math.log(6.4) / 27.0
    min_mel = min_hz / f_sp
    return min_hz * math.exp(step * (mel - min_mel)) if mel >= min_mel else f_sp * mel


def mel_filters(n_mels=128, rate=RATE, n_fft=N_FFT):
    """[n_mels, n_fft / 2 + 1]: Slaney-scale triangles with Slaney's area
    normalisation (2 / width in Hz), in float64 then float32."""
    nb = n_fft // 2 + 1
    lo, hi = _hz_to_mel(0.0), _hz_to_mel(rate / 2.0)
    pts = [_mel_to_hz(lo + (hi - lo) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    hz = torch.arange(nb, dtype=torch.float64) * (rate / 2.0) / (nb - 1)
    out = torch.zeros(n_mels, nb, dtype=torch.float64)
    for m in range(n_mels):
        lower = (hz - pts[m]) / (pts[m + 1] - pts[m])
        upper = (pts[m + 2] - hz) / (pts[m + 2] - pts[m + 1])
        out[m] = torch.clamp(torch.minimum(lower, upper), min=0.0) * (2.0 / (pts[m + 2] - pts[m]))
    return out.float()


class LogMel(torch.nn.Module):
    def __init__(self, n_mels=128, normalize=True):
        super().__init__()
        self.normalize = normalize
        self.register_buffer("window", torch.hann_window(WIN, periodic=False))
        self.register_buffer("fb", mel_filters(n_mels))

    @torch.no_grad()
    def forward(self, audio, lengths):
        """audio [B, N] float in [-1, 1] (zero past each length), lengths [B]
        samples -> features [B, n_mels, N // 160 + 1], frames [B] (the valid
        count, lengths // 160)."""
        x = torch.cat([audio[:, :1], audio[:, 1:] - 0.97 * audio[:, :-1]], dim=1)
        n = torch.arange(x.shape[1], device=x.device)
        x = x.masked_fill(n.unsqueeze(0) >= lengths.unsqueeze(1), 0.0)
        spec = torch.stft(x.double(), N_FFT, HOP, WIN, self.window.double(), center=True,
                          pad_mode="constant", return_complex=True)
        power = spec.real ** 2 + spec.imag ** 2  # [B, bins, frames]
        mel = torch.matmul(self.fb.double(), power)
        feats = torch.log(mel + LOG_GUARD)
        frames = torch.div(lengths, HOP, rounding_mode="floor")
        t = torch.arange(feats.shape[2], device=x.device)
        valid = (t.unsqueeze(0) < frames.unsqueeze(1)).unsqueeze(1)  # [B, 1, T]
        if self.normalize:
            cnt = frames.clamp(min=1).double().view(-1, 1, 1)
            mean = (feats * valid).sum(2, keepdim=True) / cnt
            var = (((feats - mean) * valid) ** 2).sum(2, keepdim=True) / (cnt - 1).clamp(min=1)
            std = torch.where(cnt > 1, var.sqrt(), torch.zeros_like(var))
            feats = (feats - mean) / (std + 1e-5)
        return feats.masked_fill(~valid, 0.0).float(), frames
