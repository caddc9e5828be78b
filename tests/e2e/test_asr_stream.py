"""Buffered streaming speech recognition (issue #21, mode (a)): `infd asr
--stream` and the C ABI (include/infd/asr.h, libinfd_asr.so through
ctypes) with the tiny random-weight Parakeet-TDT model, against the
reference pipeline of test_asr.py run chunk by chunk the same way: each
chunk encoded inside its [left | chunk | right] window, only its frames
decoded, the decoder's state carried. Token-identical (ids and frames),
whatever the size of the pieces the audio comes in.

A full-attention encoder sees different context in a window than in the
whole file, so the streamed tokens of a random model differ from the
offline ones unless the windows cover the file; when they do, streaming
gives exactly the offline tokens (test_windows_over_the_whole_file...).

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_asr_stream.py
"""

import ctypes
import os
import json
import pathlib
import shutil
import subprocess
import wave

import numpy as np
import pytest

from test_asr import model_dir, reference, reference_transcribe, sherpa_dir  # noqa: F401
from test_asr_features import speechlike, write_wav

MS = 16  # samples per millisecond at 16 kHz


def stream(infd_bin, model, wav, chunk_ms, left_ms, right_ms, feed_ms=100, extra=()):
    r = subprocess.run([str(infd_bin), "asr", str(model), str(wav), "--stream", "--json",
                        "--chunk-ms", str(chunk_ms), "--left-ms", str(left_ms),
                        "--right-ms", str(right_ms), "--feed-ms", str(feed_ms), *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def ids(result):
    return [(t["id"], t["frame"], t["duration"]) for t in result["tokens"]]


@pytest.mark.parametrize("layout", ["onnx-asr", "sherpa-onnx"])
@pytest.mark.parametrize("chunk_ms,left_ms,right_ms,feed_ms,seconds", [
    (2000, 10000, 2000, 100, 7.3),   # NeMo's 10-2-2
    (160, 2000, 320, 37, 4.1),       # low latency, odd-sized pieces
    (480, 0, 0, 480, 3.3),           # no context at all
    (800, 1600, 800, 1000, 0.5),     # shorter than one chunk
])
def test_stream_matches_the_reference(infd_bin, model_dir, sherpa_dir, reference, tmp_path,
                                      layout, chunk_ms, left_ms, right_ms, feed_ms, seconds):
    x = write_wav(tmp_path / "a.wav", speechlike(int(seconds * 16000), 11))
    model = model_dir if layout == "onnx-asr" else sherpa_dir
    lines = stream(infd_bin, model, tmp_path / "a.wav", chunk_ms, left_ms, right_ms, feed_ms)
    final = lines[-1]
    assert final["final"] and all(not line["final"] for line in lines[:-1])
    tokens, text = reference_transcribe(reference, x, chunk=chunk_ms * MS, left=left_ms * MS,
                                        right=right_ms * MS)
    print(f"{chunk_ms}/{left_ms}/{right_ms} ms: {len(tokens)} tokens, {len(lines) - 1} partials")
    assert ids(final) == tokens
    assert final["text"] == text
    # partials grow: each is a prefix of the final transcript
    for p in lines[:-1]:
        assert ids(p) == tokens[:len(p["tokens"])]
    # words: their times come from their tokens
    if final["words"]:
        assert " ".join(w["word"] for w in final["words"]) == text
        assert all(w["end"] > w["start"] for w in final["words"])


def test_windows_over_the_whole_file_give_the_offline_tokens(infd_bin, model_dir, tmp_path):
    """When the right context reaches past the end of the file, every chunk
    is encoded with the whole file around it: the chunks' frames and the
    carried decoder state must then give exactly the offline tokens."""
    write_wav(tmp_path / "a.wav", speechlike(int(6.2 * 16000), 5))
    r = subprocess.run([str(infd_bin), "asr", str(model_dir), str(tmp_path / "a.wav"), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    offline = json.loads(r.stdout)
    for chunk_ms in (160, 800, 2000):
        final = stream(infd_bin, model_dir, tmp_path / "a.wav", chunk_ms, 10000, 10000)[-1]
        assert ids(final) == ids(offline), chunk_ms
        assert final["text"] == offline["text"]


def test_endpoints_split_segments(infd_bin, model_dir, tmp_path):
    """--endpoint: a segment ends at an endpoint, is printed as final, and
    the next begins where it ended. The random model emits tokens even in
    silence, so here rule 3 (a segment of 2 s) ends them, or rule 2 (0.8 s
    after the last token)."""
    write_wav(tmp_path / "a.wav", np.concatenate([speechlike(16000 * 3, 2),
                                                  np.zeros(16000 * 3, np.float32),
                                                  speechlike(16000 * 3, 3)]))
    lines = stream(infd_bin, model_dir, tmp_path / "a.wav", 400, 2000, 400, extra=["--endpoint-rules", "2.4,0.8,2"])
    finals = [line for line in lines if line["final"]]
    print([(f["segment"], f["start_frame"], len(f["tokens"])) for f in finals])
    assert len(finals) >= 4
    assert [f["segment"] for f in finals] == list(range(len(finals)))
    for a, b in zip(finals, finals[1:]):
        assert b["start_frame"] == a["start_frame"] + a["frames"]
        assert a["frames"] * 0.08 <= 2.0 + 0.4  # rule 3, checked after each 400 ms chunk
        assert all(t["frame"] >= b["start_frame"] for t in b["tokens"])


def test_stream_text_output_and_errors(infd_bin, model_dir, tmp_path):
    write_wav(tmp_path / "a.wav", speechlike(16000 * 5, 4))
    r = subprocess.run([str(infd_bin), "asr", str(model_dir), str(tmp_path / "a.wav"),
                        "--stream"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'a.wav'} [partial 4.00 s]: ")
    assert lines[-1].startswith(f"{tmp_path / 'a.wav'}: ")
    r = subprocess.run([str(infd_bin), "asr", str(model_dir), str(tmp_path / "a.wav"),
                        "--stream", "--chunk-ms", "100"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert "the chunk is 0.1 s; it must be a whole number of encoder frames (0.08 s each)" \
        in r.stderr


class Result(ctypes.Structure):
    _fields_ = [("text", ctypes.c_char_p), ("count", ctypes.c_int32),
                ("tokens", ctypes.POINTER(ctypes.c_char_p)),
                ("token_ids", ctypes.POINTER(ctypes.c_int32)),
                ("timestamps", ctypes.POINTER(ctypes.c_float)),
                ("durations", ctypes.POINTER(ctypes.c_float)),
                ("n_words", ctypes.c_int32), ("words", ctypes.c_void_p),
                ("segment", ctypes.c_int32), ("start_time", ctypes.c_float),
                ("is_final", ctypes.c_int32), ("json", ctypes.c_char_p)]


class Config(ctypes.Structure):
    _fields_ = [("model_dir", ctypes.c_char_p), ("device", ctypes.c_char_p),
                ("num_threads", ctypes.c_int), ("chunk_ms", ctypes.c_int),
                ("left_ms", ctypes.c_int), ("right_ms", ctypes.c_int),
                ("rule1", ctypes.c_float), ("rule2", ctypes.c_float), ("rule3", ctypes.c_float),
                ("contract", ctypes.c_char_p), ("precision", ctypes.c_char_p)]


class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 512)]


@pytest.fixture(scope="module")
def libasr(infd_bin):
    path = pathlib.Path(infd_bin).resolve().parent / "libinfd_asr.so"
    assert path.exists(), f"{path}: the build makes it beside infd"
    lib = ctypes.CDLL(str(path))
    lib.infd_asr_accept_waveform.argtypes = [ctypes.c_void_p, ctypes.c_int32,
                                             ctypes.POINTER(ctypes.c_float), ctypes.c_int64,
                                             ctypes.POINTER(Error)]
    for f in ("infd_asr_is_ready", "infd_asr_decode", "infd_asr_get_result",
              "infd_asr_decode_multiple"):
        getattr(lib, f).argtypes = None
    lib.infd_asr_get_result.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.POINTER(ctypes.POINTER(Result)),
                                        ctypes.POINTER(Error)]
    lib.infd_asr_is_ready.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.infd_asr_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(Error)]
    lib.infd_asr_decode_multiple.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.c_int32, ctypes.POINTER(Error)]
    lib.infd_asr_input_finished.argtypes = [ctypes.c_void_p]
    lib.infd_asr_stream_destroy.argtypes = [ctypes.c_void_p]
    lib.infd_asr_recognizer_destroy.argtypes = [ctypes.c_void_p]
    lib.infd_asr_result_destroy.argtypes = [ctypes.POINTER(Result)]
    return lib


def abi_sessions(libasr, model, audio, pieces, window_ms=None, device="cpu"):
    """Runs len(audio) sessions through the C ABI at once, fed interleaved
    in pieces of the given sizes and decoded together with
    infd_asr_decode_multiple after each round; returns each session's
    result as (tokens [(id, frame, duration)], text, is_final, json)."""
    cfg = Config()
    libasr.infd_asr_config_init(ctypes.byref(cfg))
    cfg.model_dir = str(model).encode()
    cfg.device = device.encode()
    cfg.num_threads = 1
    if window_ms:
        cfg.chunk_ms, cfg.left_ms, cfg.right_ms = window_ms
    err = Error()
    rec = ctypes.c_void_p()
    assert libasr.infd_asr_recognizer_create(ctypes.byref(cfg), ctypes.byref(rec),
                                             ctypes.byref(err)) == 0, err.msg
    n = len(audio)
    streams = (ctypes.c_void_p * n)()
    for i in range(n):
        assert libasr.infd_asr_stream_create(rec, ctypes.byref(streams, i * 8),
                                             ctypes.byref(err)) == 0, err.msg
    at = [0] * n
    while any(at[i] < audio[i].size for i in range(n)):
        for i in range(n):
            if at[i] >= audio[i].size:
                continue
            x = np.ascontiguousarray(audio[i][at[i]:at[i] + pieces[i]], np.float32)
            at[i] += x.size
            p = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            assert libasr.infd_asr_accept_waveform(streams[i], 16000, p, x.size,
                                                   ctypes.byref(err)) == 0, err.msg
            if at[i] >= audio[i].size:
                libasr.infd_asr_input_finished(streams[i])
        assert libasr.infd_asr_decode_multiple(rec, streams, n, ctypes.byref(err)) == 0, err.msg
    out = []
    for i in range(n):
        while libasr.infd_asr_is_ready(rec, streams[i]):
            assert libasr.infd_asr_decode(rec, streams[i], ctypes.byref(err)) == 0, err.msg
        res = ctypes.POINTER(Result)()
        assert libasr.infd_asr_get_result(rec, streams[i], ctypes.byref(res),
                                          ctypes.byref(err)) == 0, err.msg
        r = res.contents
        tokens = [(r.token_ids[k], round(r.timestamps[k] / 0.08), round(r.durations[k] / 0.08))
                  for k in range(r.count)]
        out.append((tokens, r.text.decode(), r.is_final, json.loads(r.json.decode())))
        libasr.infd_asr_result_destroy(res)
        libasr.infd_asr_stream_destroy(streams[i])
    libasr.infd_asr_recognizer_destroy(rec)
    return out


def test_c_abi_many_streams(libasr, model_dir, reference):
    """Three sessions through the C ABI at once, fed interleaved in pieces
    of different sizes and decoded together with infd_asr_decode_multiple
    (their windows batched through the encoder): each gets the reference's
    tokens, and the result's arrays and JSON agree."""
    audio = [speechlike(int(s * 16000), 20 + i) for i, s in enumerate((2.9, 4.4, 1.3))]
    results = abi_sessions(libasr, model_dir, audio, (1000, 3200, 777), (320, 1600, 480))
    for x, (got, text, final, j) in zip(audio, results):
        tokens, want_text = reference_transcribe(reference, x.astype(np.float32), chunk=320 * MS,
                                                 left=1600 * MS, right=480 * MS)
        assert got == tokens
        assert text == want_text and final == 1
        assert j["text"] == text and j["token_ids"] == [t[0] for t in tokens]
        assert j["is_final"] is True and j["segment"] == 0


@pytest.mark.parametrize("layout", ["onnx-asr", "sherpa-onnx"])
def test_c_abi_offline_batch_decodes_in_lockstep(libasr, model_dir, sherpa_dir, reference,
                                                 layout, capfd, monkeypatch):
    """Nine offline sessions of one length decoded by one
    infd_asr_decode_multiple call: one encoder run, then the onnx-asr
    decoder-joint run once per step for every session still decoding
    (batches of 16 rows, then 8, 4, 2, 1 as sessions finish at different
    steps), fewer runs than the sessions' joint runs; the sherpa-onnx
    layout's rows one by one. Every session gets the offline reference's
    tokens either way."""
    monkeypatch.setenv("INFD_ASR_DEBUG", "1")
    model = model_dir if layout == "onnx-asr" else sherpa_dir
    audio = [speechlike(int(2.6 * 16000), 60 + i) for i in range(9)]
    results = abi_sessions(libasr, model, audio, [a.size for a in audio], (0, 0, 0))
    for x, (got, _, final, _) in zip(audio, results):
        tokens, _ = reference_transcribe(reference, x.astype(np.float32))
        assert got == tokens and final == 1
    lines = [ln for ln in capfd.readouterr().err.splitlines() if " streams: " in ln]
    assert lines and "9 windows in 1 encoder runs" in lines[0], lines
    runs, steps = (int(w) for w in lines[0].split("(")[1].split()[0:5:4])
    assert runs > 9
    assert steps < runs / 3 if layout == "onnx-asr" else steps == runs


@pytest.mark.parametrize("pre", [0, 8])
def test_c_abi_cache_aware_batches(libasr, streaming_dir, streaming_pre_dir, pre):
    """Five cache-aware sessions decoded together: their windows go through
    the encoder in one run (batches of up to 8 here), their caches gathered
    into the batch and scattered back, and every session still gets exactly
    the whole-utterance reference's tokens."""
    model = streaming_pre_dir if pre else streaming_dir
    audio = [speechlike(int(s * 16000), 30 + i) for i, s in enumerate((2.2, 3.1, 0.7, 2.9, 1.6))]
    results = abi_sessions(libasr, model, audio, (1600, 2560, 999, 4000, 2560))
    for x, (got, _, final, _) in zip(audio, results):
        assert got == cache_aware_reference(model, x)
        assert final == 1


def test_c_abi_batches_on_cuda(infd_bin, libasr, model_dir, streaming_pre_dir, reference):
    """The same batched sessions with device "cuda": encoder runs of
    several windows (buffered and cache-aware) on the GPU, every session
    the reference's tokens. Skips without a usable GPU."""
    from test_cuda import cuda_state

    usable, line = cuda_state(infd_bin)
    if not usable:
        pytest.skip(f"no usable CUDA device (infd --version: cuda backend: {line})")
    audio = [speechlike(int(s * 16000), 40 + i) for i, s in enumerate((2.9, 4.4, 1.3))]
    results = abi_sessions(libasr, model_dir, audio, (1000, 3200, 777), (320, 1600, 480), "cuda")
    for x, (got, _, _, _) in zip(audio, results):
        tokens, _ = reference_transcribe(reference, x.astype(np.float32), chunk=320 * MS,
                                         left=1600 * MS, right=480 * MS)
        assert got == tokens
    audio = [speechlike(int(s * 16000), 50 + i) for i, s in enumerate((2.2, 3.1, 0.7, 2.9))]
    results = abi_sessions(libasr, streaming_pre_dir, audio, (1600, 2560, 999, 4000),
                           device="cuda")
    for x, (got, _, _, _) in zip(audio, results):
        assert got == cache_aware_reference(streaming_pre_dir, x)


def test_taps_replay_and_debug_log(infd_bin, model_dir, tmp_path):
    """INFD_ASR_TAP_DIR records a stream (its audio as accepted, each
    window's features, the events); `infd asr --replay` plays it back and
    finds every chunk decodes to its recorded tokens, and says which chunk
    does not when the recording is changed. INFD_ASR_DEBUG=1 logs each
    chunk."""
    write_wav(tmp_path / "a.wav", speechlike(int(3.3 * 16000), 6))
    env = dict(os.environ, INFD_ASR_TAP_DIR=str(tmp_path / "taps"), INFD_ASR_DEBUG="1")
    r = subprocess.run([str(infd_bin), "asr", str(model_dir), str(tmp_path / "a.wav"), "--stream",
                        "--json", "--chunk-ms", "800", "--left-ms", "1600", "--right-ms", "800",
                        "--feed-ms", "250"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    final = json.loads(r.stdout.splitlines()[-1])
    assert r.stderr.count("infd asr: chunk ") == 5, r.stderr  # 3.3 s in chunks of 0.8 s
    (tap,) = (tmp_path / "taps").iterdir()
    events = [json.loads(line) for line in (tap / "events.jsonl").read_text().splitlines()]
    assert events[0]["event"] == "start" and events[0]["chunk_s"] == 0.8
    accepts = [e for e in events if e["event"] == "accept"]
    assert sum(e["n"] for e in accepts) == int(3.3 * 16000) and accepts[0]["n"] == 4000
    audio = np.fromfile(tap / "audio.f32", np.float32)
    assert audio.size == int(3.3 * 16000)
    decodes = [e for e in events if e["event"] == "decode"]
    assert [t for e in decodes for t in e["tokens"]] == [list(t) for t in ids(final)]
    feats = np.fromfile(tap / "features.f32", np.float32)
    assert feats.size == sum(e["features"][0] * e["features"][1] for e in decodes)
    assert np.isfinite(feats).all()
    r = subprocess.run([str(infd_bin), "asr", "--replay", str(tap)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"segment 0 ({len(final['tokens'])} tokens): {final['text']}" in r.stdout
    assert "replay: 5 chunks, every one as recorded" in r.stdout
    # a recording whose third chunk says otherwise
    lines = (tap / "events.jsonl").read_text().splitlines()
    k = [i for i, line in enumerate(lines) if '"decode"' in line][2]
    e = json.loads(lines[k])
    e["tokens"] = e["tokens"][:-1] if e["tokens"] else [[0, 0, 1]]
    lines[k] = json.dumps(e)
    (tap / "events.jsonl").write_text("\n".join(lines) + "\n")
    r = subprocess.run([str(infd_bin), "asr", "--replay", str(tap)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and f"events.jsonl:{k + 1}: chunk 2 decoded to" in r.stderr, r.stderr


def test_nan_guard_names_where(infd_bin, model_dir, tmp_path):
    """An encoder whose weights hold a NaN: with INFD_ASR_NAN_GUARD=1 the
    transcription stops with the encoder's output named; without it the
    NaN goes through unnoticed."""
    import onnx
    from onnx import numpy_helper

    d = tmp_path / "m"
    shutil.copytree(model_dir, d)
    m = onnx.load(str(d / "encoder-model.onnx"))
    for init in m.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype == np.float32 and w.ndim == 2 and w.size > 100:
            w = w.copy()
            w.flat[0] = np.nan
            init.CopyFrom(numpy_helper.from_array(w, init.name))
            break
    onnx.save(m, str(d / "encoder-model.onnx"))
    write_wav(tmp_path / "a.wav", speechlike(16000, 1))
    r = subprocess.run([str(infd_bin), "asr", str(d), str(tmp_path / "a.wav")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, INFD_ASR_NAN_GUARD="1")
    r = subprocess.run([str(infd_bin), "asr", str(d), str(tmp_path / "a.wav")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1 and "NaN guard: the encoder's output" in r.stderr \
        and "(chunk 0)" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def streaming_dir(cache_dir):
    """The cache-aware variant (scripts/gen_asr_models.py, generate_streaming)."""
    d = cache_dir / "models" / "asr" / "tiny-tdt-streaming"
    if not (d / "encoder.onnx").exists():
        pytest.skip(f"{d} missing: run scripts/setup.sh (scripts/gen_asr_models.py)")
    return d


@pytest.fixture(scope="module")
def streaming_pre_dir(cache_dir):
    """The cache-aware variant with a pre-encode cache of 8 frames
    (window_size 24, chunk_shift 16)."""
    d = cache_dir / "models" / "asr" / "tiny-tdt-streaming-pre"
    if not (d / "encoder.onnx").exists():
        pytest.skip(f"{d} missing: run scripts/setup.sh (scripts/gen_asr_models.py)")
    return d


def cache_aware_reference(model_dir, x):
    """Tokens of samples x by the cache-aware model run on the whole
    utterance at once (forward_full: the chunked-limited attention as a
    mask, causal convs; with a pre-encode cache, the first 8 frames give no
    output), unnormalised features of the whole file, and the label-looping
    decoder of test_asr.py."""
    import sys

    import torch

    from test_asr import REPO, decode
    from test_asr_features import nemo_features

    sys.path.insert(0, str(REPO / "scripts"))
    import gen_asr_models as gen

    pre = 8 if model_dir.name.endswith("-pre") else 0
    enc = gen.build_streaming_encoder(pre_frames=pre)().eval()
    _, DecoderJoint = gen.build_modules()
    dec = DecoderJoint().eval()
    sd = torch.load(model_dir / "model.pt")
    enc.load_state_dict(sd["encoder"])
    dec.load_state_dict(sd["decoder_joint"])
    V = 32
    f = nemo_features(x, normalize=False).astype(np.float32)
    with torch.no_grad():
        out, lens = enc.forward_full(torch.from_numpy(f)[None], torch.tensor([x.size // 160]))
    st = {"h": torch.zeros(2, 1, 64), "c": torch.zeros(2, 1, 64), "last": V, "jump": 0,
          "done": 0, "last_frame": -1, "on": 0}
    return decode(dec, V, out, int(lens[0]), st)


@pytest.mark.parametrize("pre", [0, 8])
@pytest.mark.parametrize("seconds,seed,feed_ms", [(0.3, 1, 100), (2.47, 2, 37), (6.1, 3, 160),
                                                  (4.0, 4, 1000)])
def test_cache_aware_streaming_equals_offline(infd_bin, streaming_dir, streaming_pre_dir, tmp_path,
                                              seconds, seed, feed_ms, pre):
    """Mode (b): the cache-aware encoder streams in the model's own chunks
    (16 feature frames, 160 ms; with a pre-encode cache each window also
    holds the 8 frames before it, as sherpa-onnx feeds NeMo's exports), its
    caches carried from chunk to chunk; offline and streamed in pieces of
    any size, the tokens are exactly those of the whole utterance encoded at
    once."""
    streaming_dir = streaming_pre_dir if pre else streaming_dir
    x = write_wav(tmp_path / "a.wav", speechlike(int(seconds * 16000), seed))
    want = cache_aware_reference(streaming_dir, x)
    r = subprocess.run([str(infd_bin), "asr", str(streaming_dir), str(tmp_path / "a.wav"),
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    offline = json.loads(r.stdout)
    lines = stream(infd_bin, streaming_dir, tmp_path / "a.wav", 2000, 10000, 2000, feed_ms)
    print(f"{seconds} s: {len(want)} tokens, {len(lines) - 1} partials")
    assert ids(offline) == want
    assert ids(lines[-1]) == want and lines[-1]["text"] == offline["text"]
    for p in lines[:-1]:
        assert ids(p) == want[:len(p["tokens"])]


def test_cache_aware_real_speech_and_contract(infd_bin, streaming_dir, streaming_pre_dir,
                                              tmp_path):
    """The LibriVox recordings stream through the cache-aware model exactly
    as the whole-utterance reference; its contract says cache_aware with its
    window and shift, and the sherpa-onnx metadata keys are checked."""
    import onnx

    wavs = sorted(pathlib.Path("/usr/share/pocketsphinx/test/data/librivox").glob("*.wav"))
    if not wavs:
        pytest.skip("pocketsphinx-testdata missing: run scripts/setup.sh")
    r = subprocess.run([str(infd_bin), "asr", str(streaming_dir), *map(str, wavs), "--stream",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    finals = [json.loads(line) for line in r.stdout.splitlines() if json.loads(line)["final"]]
    r = subprocess.run([str(infd_bin), "asr", str(streaming_pre_dir), *map(str, wavs), "--stream",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    finals_pre = [json.loads(line) for line in r.stdout.splitlines()
                  if json.loads(line)["final"]]
    for wav, got, got_pre in zip(wavs, finals, finals_pre):
        with wave.open(str(wav), "rb") as w:
            x = np.frombuffer(w.readframes(w.getnframes()), "<i2") / 32768.0
        assert ids(got) == cache_aware_reference(streaming_dir, x), wav.name
        assert ids(got_pre) == cache_aware_reference(streaming_pre_dir, x), wav.name
    d = tmp_path / "m"
    shutil.copytree(streaming_dir, d)
    r = subprocess.run([str(infd_bin), "asr", str(d), "--write-contract"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    c = json.loads((tmp_path / "contracts" / "m.contract.json").read_text())
    assert c["cache"] == {"kind": "cache_aware", "window_size": 16, "chunk_shift": 16}
    assert [t["name"] for t in c["networks"]["encoder"]["inputs"]] == [
        "audio_signal", "length", "cache_last_channel", "cache_last_time",
        "cache_last_channel_len"]
    assert c["networks"]["encoder"]["inputs"][2]["shape"] == [1, 2, 8, 64]
    assert c["features"]["normalize"] == "NA"
    (tmp_path / "contracts" / "m.contract.json").unlink()
    write_wav(tmp_path / "a.wav", speechlike(8000, 1))

    def with_metadata(key, value, message):
        m = onnx.load(str(streaming_dir / "encoder.onnx"))
        for e in m.metadata_props:
            if e.key == key:
                e.value = value
        onnx.save(m, str(d / "encoder.onnx"))
        r = subprocess.run([str(infd_bin), "asr", str(d), str(tmp_path / "a.wav")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and message in r.stderr, r.stderr

    with_metadata("vocab_size", "1025",
                  "metadata vocab_size is 1025; tokens.txt has 32 tokens and the blank")
    with_metadata("window_size", "8", "window_size 8 is less than chunk_shift 16")
    with_metadata("normalize_type", "per_feature", "a cache-aware encoder with per_feature")
    with_metadata("cache_last_channel_dim2", "9", "cache_last_channel")
    with_metadata("pred_hidden", "x", "metadata pred_hidden is \"x\"")


def test_cuda_gives_the_cpu_tokens(infd_bin, model_dir, sherpa_dir, streaming_dir,
                                   streaming_pre_dir, tmp_path):
    """`--device cuda`: the encoder, the predictor's LSTM and the joint on
    the GPU (FP32), offline and streamed, in the four tiny models: the
    tokens the CPU gives. Skips without a usable GPU."""
    from test_cuda import cuda_state

    usable, line = cuda_state(infd_bin)
    if not usable:
        pytest.skip(f"no usable CUDA device (infd --version: cuda backend: {line})")
    write_wav(tmp_path / "a.wav", speechlike(int(3.7 * 16000), 12))
    for model in (model_dir, sherpa_dir, streaming_dir, streaming_pre_dir):
        for mode in ([], ["--stream", "--chunk-ms", "480", "--left-ms", "2000",
                          "--right-ms", "480"]):
            got = {}
            for device in ("cpu", "cuda"):
                r = subprocess.run([str(infd_bin), "asr", str(model), str(tmp_path / "a.wav"),
                                    "--json", "--device", device, *mode], capture_output=True,
                                   text=True, timeout=300)
                assert r.returncode == 0, (model.name, device, r.stderr)
                got[device] = json.loads(r.stdout.splitlines()[-1])
            print(f"{model.name} {mode[:1]}: {len(got['cpu']['tokens'])} tokens")
            assert ids(got["cuda"]) == ids(got["cpu"]), (model.name, mode)
