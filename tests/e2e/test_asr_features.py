"""Speech front end (issue #21): `infd asr --features` against a numpy
implementation of NeMo's feature recipe, and bad audio files.

The reference below follows ../shared/reference/streaming.md, section 2
("Feature extractor"): pre-emphasis 0.97, centred STFT (n_fft 512, a
symmetric 400-sample Hann window centred in it, hop 160, zero padding),
power, Slaney mel filterbank with Slaney normalisation (librosa's
formulas, written out here: librosa is not installed), log(x + 2^-24),
per-feature normalisation over seq_len = n // 160 frames with std over
N - 1 plus 1e-5, and the frame past seq_len zeroed. It is computed in
float64; infd's single-precision FFT must agree to 1e-4.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_asr_features.py
"""

import struct
import subprocess
import wave

import numpy as np
import pytest


def slaney_hz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    lin = f / (200.0 / 3)
    logstep = np.log(6.4) / 27.0
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / logstep, lin)


def slaney_mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    logstep = np.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), m * 200.0 / 3)


def mel_filters(sr=16000, n_fft=512, n_mels=128, fmin=0.0, fmax=None):
    fmax = sr / 2 if fmax is None else fmax
    fft_hz = np.linspace(0, sr / 2, n_fft // 2 + 1)
    pts = slaney_mel_to_hz(np.linspace(slaney_hz_to_mel(fmin), slaney_hz_to_mel(fmax),
                                       n_mels + 2))
    fdiff = np.diff(pts)
    ramps = pts[:, None] - fft_hz[None, :]
    w = np.zeros((n_mels, fft_hz.size))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        w[i] = np.maximum(0, np.minimum(lower, upper))
    w *= (2.0 / (pts[2:n_mels + 2] - pts[:n_mels]))[:, None]
    return w.astype(np.float32).astype(np.float64)


def nemo_features(x, n_mels=128, normalize=True):
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    y = np.concatenate([x[:1], x[1:] - 0.97 * x[:-1]]) if n else x
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 399)
    window = np.zeros(512)
    window[56:456] = win
    padded = np.concatenate([np.zeros(256), y, np.zeros(256)])
    frames = n // 160 + 1
    idx = np.arange(frames)[:, None] * 160 + np.arange(512)[None, :]
    spec = np.fft.rfft(padded[idx] * window, axis=1)
    power = (spec.real ** 2 + spec.imag ** 2).T  # [257, frames]
    mel = np.log(mel_filters(n_mels=n_mels) @ power + 2.0 ** -24)
    valid = n // 160
    if normalize and valid > 0:
        v = mel[:, :valid]
        mean = v.mean(axis=1, keepdims=True)
        sd = np.sqrt(((v - mean) ** 2).sum(axis=1, keepdims=True) / (valid - 1)) \
            if valid > 1 else np.zeros_like(mean)
        mel = (mel - mean) / (sd + 1e-5)
    mel[:, valid:] = 0.0
    return mel


def write_wav(path, samples, rate=16000, channels=1):
    """int16 PCM WAV of float samples in [-1, 1] (frames x channels)."""
    data = np.clip(np.round(np.asarray(samples) * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(data.tobytes())
    return data.astype(np.float64) / 32768.0  # libsndfile's float scaling of int16


def speechlike(n, seed):
    """Noise shaped by a few moving formant-like tones: energy in every band."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    x = 0.05 * rng.standard_normal(n)
    for f0 in (220.0, 700.0, 1800.0, 3500.0):
        x += 0.15 * np.sin(2 * np.pi * f0 * t * (1 + 0.05 * np.sin(2 * np.pi * 3 * t)))
    return x * 0.5


def run_features(infd_bin, path, out, *extra):
    return subprocess.run([str(infd_bin), "asr", "--features", str(path), "-o", str(out),
                           *extra], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("seconds", [0.1, 1.0, 3.73])
@pytest.mark.parametrize("normalize", [True, False])
def test_features_match_numpy_recipe(infd_bin, tmp_path, seconds, normalize):
    n = int(seconds * 16000)
    x = write_wav(tmp_path / "a.wav", speechlike(n, seed=n))
    extra = [] if normalize else ["--no-normalize"]
    r = run_features(infd_bin, tmp_path / "a.wav", tmp_path / "f.npy", *extra)
    assert r.returncode == 0, r.stderr
    assert f"features [128, {n // 160 + 1}], {n // 160} valid frames" in r.stdout, r.stdout
    got = np.load(tmp_path / "f.npy")
    want = nemo_features(x, normalize=normalize)
    assert got.shape == want.shape == (128, n // 160 + 1)
    assert got.dtype == np.float32
    err = np.abs(got - want).max()
    assert err <= 1e-4, f"max |infd - numpy| = {err:.3g}"
    assert np.all(got[:, -1] == 0.0)


def test_features_80_mels(infd_bin, tmp_path):
    x = write_wav(tmp_path / "a.wav", speechlike(16000, seed=3))
    r = run_features(infd_bin, tmp_path / "a.wav", tmp_path / "f.npy", "--mels", "80")
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "f.npy")
    assert np.abs(got - nemo_features(x, n_mels=80)).max() <= 1e-4


def test_stereo_is_averaged_and_other_rates_resampled(infd_bin, tmp_path):
    mono = speechlike(16000, seed=5)
    stereo = np.stack([mono, mono], axis=1).ravel()
    x = write_wav(tmp_path / "s.wav", stereo, channels=2)
    r = run_features(infd_bin, tmp_path / "s.wav", tmp_path / "f.npy")
    assert r.returncode == 0, r.stderr
    assert "2 channels" in r.stdout
    want = nemo_features(x.reshape(-1, 2).mean(axis=1))
    assert np.abs(np.load(tmp_path / "f.npy") - want).max() <= 1e-4
    # 8 kHz and 44.1 kHz come out at 16 kHz: the frame count says so.
    for rate, secs in ((8000, 1.0), (44100, 0.5)):
        write_wav(tmp_path / "r.wav", 0.3 * np.sin(np.arange(int(rate * secs)) * 0.05), rate)
        r = run_features(infd_bin, tmp_path / "r.wav", tmp_path / "f.npy")
        assert r.returncode == 0, r.stderr
        assert f"at 16000 Hz (the file: {rate} Hz" in r.stdout, r.stdout
        frames = np.load(tmp_path / "f.npy").shape[1]
        assert abs(frames - (16000 * secs // 160 + 1)) <= 1, (rate, frames)


def wav_header(rate, channels, bits, data_bytes, riff_extra=0):
    block = channels * bits // 8
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes + riff_extra) + b"WAVE" + b"fmt " +
            struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * block, block, bits) +
            b"data" + struct.pack("<I", data_bytes))


@pytest.mark.parametrize("name,content,message", [
    ("garbage.wav", b"this is not audio at all" * 20, "not a sound file libsndfile reads"),
    ("empty.wav", b"", "not a sound file libsndfile reads"),
    ("nosamples.wav", wav_header(16000, 1, 16, 0), "no samples"),
    ("rate0.wav", wav_header(0, 1, 16, 3200) + bytes(3200), "not a sound file"),
    ("truncated.wav", wav_header(16000, 1, 16, 32000) + bytes(3200), "truncated"),
    # A small file at a rate of a few Hz would resample to hours of audio
    # (fuzz_wav's timeout: 2.4 KB at 1 Hz, 19 minutes at 16 kHz).
    ("rate1.wav", wav_header(1, 1, 16, 2400) + bytes(2400),
     "the sample rate is 1 Hz; 4000 to 1000000 Hz are accepted"),
    ("rate2M.wav", wav_header(2000000, 1, 16, 3200) + bytes(3200), "the sample rate is 2000000 Hz"),
])
def test_bad_audio_is_refused_with_the_reason(infd_bin, tmp_path, name, content, message):
    p = tmp_path / name
    p.write_bytes(content)
    r = run_features(infd_bin, p, tmp_path / "f.npy")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert name in r.stderr and message in r.stderr, r.stderr
    assert not (tmp_path / "f.npy").exists()


def test_missing_file_and_usage(infd_bin, tmp_path):
    r = run_features(infd_bin, tmp_path / "nope.wav", tmp_path / "f.npy")
    assert r.returncode == 1 and "nope.wav: cannot open" in r.stderr, r.stderr
    r = subprocess.run([str(infd_bin), "asr", "--mels", "0", "--features", "x.wav"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--mels takes 1 to 512" in r.stderr, r.stderr
    r = subprocess.run([str(infd_bin), "asr", "models/x", "a.wav", "--stream", "--chunk-ms", "x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--chunk-ms takes milliseconds, not 'x'" in r.stderr, r.stderr
    r = subprocess.run([str(infd_bin), "asr", str(tmp_path / "no-model"), "a.wav"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no-model: not a Parakeet-TDT model directory" in r.stderr, \
        r.stderr
