"""Speech recognition served by `infd serve` (issue #21): models of backend
"asr" (src/apps/asr/kind.c) under Triton's sequence batcher
(src/runtime/sequence.c), over KServe v2 HTTP and gRPC ModelStreamInfer,
and whole recordings POSTed as a WAV body.

The tiny random-weight Parakeet-TDT models of test_asr.py. The reference is
`infd asr --stream` with the same chunking, which test_asr_stream.py checks
token by token against the Python reference pipeline; here the server must
give the same tokens, however the audio is cut into requests and however
sessions interleave. Bad input (reused and unknown correlation ids, a
request without one, a session dropped without END, a thousand empty
chunks, a corrupt WAV) gets a clear error, and the server keeps serving.

Run: INFD_BIN=build/<dir>/infd /usr/bin/python3 -m pytest -q tests/e2e/test_asr_serve.py
"""

import json
import queue
import subprocess
import threading

import numpy as np
import pytest
import requests

from test_asr import model_dir  # noqa: F401
from test_asr_features import speechlike, wav_header, write_wav
from test_asr_stream import streaming_dir  # noqa: F401

try:  # the gRPC tests need grpcio; the others run without it
    import grpc
    from test_grpc import pb  # noqa: F401
except (ImportError, pytest.skip.Exception):
    grpc = None

    @pytest.fixture
    def pb():
        pytest.skip("grpcio is not installed")

TIMEOUT = 60
MS = 16  # samples per millisecond at 16 kHz
CHUNK, LEFT, RIGHT = 160, 1600, 160  # the streaming models' windows, ms

STREAM_PARAMS = f"""
parameters {{ key: "chunk_ms" value {{ string_value: "{CHUNK}" }} }}
parameters {{ key: "left_ms" value {{ string_value: "{LEFT}" }} }}
parameters {{ key: "right_ms" value {{ string_value: "{RIGHT}" }} }}
"""


def model_param(path):
    return f'parameters {{ key: "model_dir" value {{ string_value: "{path}" }} }}\n'


def write_model(repo, name, text):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(text)


@pytest.fixture(scope="module")
def asr_repo(tmp_path_factory, model_dir, streaming_dir):  # noqa: F811
    repo = tmp_path_factory.mktemp("asr_repo")
    # Buffered streaming; oldest strategy, batching concurrent sessions.
    write_model(repo, "speech", f"""backend: "asr"
max_batch_size: 8
sequence_batching {{
  max_sequence_idle_microseconds: 30000000
  oldest {{ max_candidate_sequences: 8 max_queue_delay_microseconds: 200000 }}
}}
{model_param(model_dir)}{STREAM_PARAMS}""")
    # Cache-aware streaming; direct strategy (the default).
    write_model(repo, "speech_cache", f"""backend: "asr"
max_batch_size: 4
sequence_batching {{ max_sequence_idle_microseconds: 30000000 }}
{model_param(streaming_dir)}""")
    # One slot, a short idle limit: for dropped sessions.
    write_model(repo, "speech_one", f"""backend: "asr"
max_batch_size: 1
sequence_batching {{
  max_sequence_idle_microseconds: 400000
  oldest {{ max_candidate_sequences: 1 }}
}}
{model_param(model_dir)}{STREAM_PARAMS}""")
    # Whole recordings.
    write_model(repo, "speech_file", f"""backend: "asr"
max_batch_size: 4
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
{model_param(model_dir)}""")
    # A precision that does not exist: refused, naming it.
    write_model(repo, "speech_fp8", f"""backend: "asr"
max_batch_size: 1
parameters {{ key: "precision" value {{ string_value: "fp8" }} }}
{model_param(model_dir)}""")
    # A model that cannot load: the server must serve the others.
    write_model(repo, "speech_missing", f"""backend: "asr"
max_batch_size: 1
{model_param(repo / "nowhere")}""")
    # The same for streaming models, whose loads fail before their
    # sessions' slots are made (this crashed the server).
    write_model(repo, "speech_missing_stream", f"""backend: "asr"
max_batch_size: 4
sequence_batching {{ max_sequence_idle_microseconds: 30000000 }}
{model_param(repo / "nowhere")}{STREAM_PARAMS}""")
    write_model(repo, "speech_chunk0", f"""backend: "asr"
max_batch_size: 4
sequence_batching {{ max_sequence_idle_microseconds: 30000000 }}
parameters {{ key: "chunk_ms" value {{ string_value: "0" }} }}
{model_param(model_dir)}""")
    return repo


@pytest.fixture(scope="module")
def srv(asr_repo, infd_bin):
    from serving import Server, stop_all
    s = Server(infd_bin, asr_repo)
    yield s
    problems = stop_all([s])
    assert not problems, problems


def cli_stream(infd_bin, model, wav, extra=()):
    r = subprocess.run([str(infd_bin), "asr", str(model), str(wav), "--stream", "--json",
                        "--chunk-ms", str(CHUNK), "--left-ms", str(LEFT), "--right-ms",
                        str(RIGHT), *extra], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def cli_ids(final):
    return [t["id"] for t in final["tokens"]]


def http_chunk(srv, model, seq, samples, start, end, expect=200):
    body = {"parameters": {"sequence_id": seq, "sequence_start": start, "sequence_end": end},
            "inputs": [{"name": "AUDIO", "datatype": "FP32", "shape": [1, len(samples)],
                        "data": [float(v) for v in samples]}]}
    r = requests.post(f"{srv.url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == expect, r.text
    if expect != 200:
        return r.json()["error"]
    return {o["name"]: o["data"][0] for o in r.json()["outputs"]}


def http_session(srv, model, seq, x, piece):
    pieces = [x[i:i + piece] for i in range(0, len(x), piece)] or [x[:0]]
    outs = []
    for k, p in enumerate(pieces):
        outs.append(http_chunk(srv, model, seq, p, k == 0, k == len(pieces) - 1))
    return outs


@pytest.mark.parametrize("piece_ms", [160, 50, 1000])
def test_http_stream_gives_the_cli_tokens(srv, infd_bin, model_dir, tmp_path,  # noqa: F811
                                          piece_ms):
    x = write_wav(tmp_path / "a.wav", speechlike(int(3.3 * 16000), 4))
    want = cli_stream(infd_bin, model_dir, tmp_path / "a.wav")
    outs = http_session(srv, "speech", 1000 + piece_ms, x, piece_ms * MS)
    final = json.loads(outs[-1]["RESULT"])
    assert outs[-1]["IS_FINAL"] is True and final["is_final"]
    assert not any(o["IS_FINAL"] for o in outs[:-1])
    assert final["token_ids"] == cli_ids(want)
    assert outs[-1]["TRANSCRIPT"] == want["text"] == final["text"]
    # partial transcripts grow into the final one
    for o in outs[:-1]:
        ids = json.loads(o["RESULT"])["token_ids"]
        assert ids == final["token_ids"][:len(ids)]


def test_cache_aware_stream_gives_the_cli_tokens(srv, infd_bin, streaming_dir,  # noqa: F811
                                                 tmp_path):
    x = write_wav(tmp_path / "a.wav", speechlike(int(2.7 * 16000), 9))
    want = cli_stream(infd_bin, streaming_dir, tmp_path / "a.wav")
    outs = http_session(srv, "speech_cache", "cache-1", x, 1234)
    final = json.loads(outs[-1]["RESULT"])
    assert final["token_ids"] == cli_ids(want)
    assert outs[-1]["TRANSCRIPT"] == want["text"]


def grpc_request(pb, model, seq, samples, start, end, rid):
    req = pb.svc.ModelInferRequest(model_name=model, id=rid)
    req.parameters["sequence_id"].string_param = seq
    req.parameters["sequence_start"].bool_param = start
    req.parameters["sequence_end"].bool_param = end
    t = req.inputs.add(name="AUDIO", datatype="FP32", shape=[1, len(samples)])
    del t
    req.raw_input_contents.append(np.asarray(samples, "<f4").tobytes())
    return req


def bytes_output(resp, name):
    names = [o.name for o in resp.outputs]
    raw = resp.raw_output_contents[names.index(name)]
    n = int.from_bytes(raw[:4], "little")
    return raw[4:4 + n].decode()


def test_grpc_stream_batches_concurrent_sessions(srv, pb, infd_bin, model_dir,  # noqa: F811
                                                 tmp_path):
    """Six sessions interleaved on one ModelStreamInfer stream: each gets the
    CLI's transcript of its audio, and the sequence batcher runs their
    chunks together (executions of more than one row)."""
    n_sess = 6
    audio, want = [], []
    for s in range(n_sess):
        x = write_wav(tmp_path / f"{s}.wav", speechlike(int((1.5 + 0.4 * s) * 16000), 20 + s))
        audio.append(x)
        want.append(cli_stream(infd_bin, model_dir, tmp_path / f"{s}.wav"))
    piece = CHUNK * MS
    reqs = []
    longest = max(len(x) for x in audio)
    for k in range(0, longest, piece):
        for s, x in enumerate(audio):
            if k < len(x):
                reqs.append(grpc_request(pb, "speech", f"sess-{s}", x[k:k + piece], k == 0,
                                         k + piece >= len(x), f"{s}/{k}"))
    before = requests.get(f"{srv.url}/v2/models/speech/stats", timeout=TIMEOUT).json()
    stub = pb.svc_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(f"{srv.host}:{srv.grpc_port}"))
    finals = {}
    n = 0
    for resp in stub.ModelStreamInfer(iter(reqs), timeout=120):
        assert not resp.error_message, resp.error_message
        n += 1
        r = resp.infer_response
        if bytes_output(r, "RESULT") and json.loads(bytes_output(r, "RESULT"))["is_final"]:
            finals[r.id.split("/")[0]] = json.loads(bytes_output(r, "RESULT"))
    assert n == len(reqs)
    for s in range(n_sess):
        assert finals[str(s)]["token_ids"] == cli_ids(want[s]), s
        assert finals[str(s)]["text"] == want[s]["text"]
    after = requests.get(f"{srv.url}/v2/models/speech/stats", timeout=TIMEOUT).json()
    b0 = before["model_stats"][0]
    b1 = after["model_stats"][0]
    rows = b1["inference_count"] - b0["inference_count"]
    execs = b1["execution_count"] - b0["execution_count"]
    print(f"{rows} chunks in {execs} executions")
    assert rows == len(reqs) and execs < rows


def test_wav_post_returns_a_json_transcript(srv, infd_bin, model_dir, tmp_path):  # noqa: F811
    write_wav(tmp_path / "a.wav", speechlike(int(4.1 * 16000), 31))
    r = subprocess.run([str(infd_bin), "asr", str(model_dir), str(tmp_path / "a.wav"), "--json"],
                       capture_output=True, text=True, timeout=120)
    want = json.loads(r.stdout.splitlines()[-1])
    body = (tmp_path / "a.wav").read_bytes()
    resp = requests.post(f"{srv.url}/v2/models/speech_file/infer", data=body,
                         headers={"Content-Type": "audio/wav"}, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    out = {o["name"]: o["data"][0] for o in resp.json()["outputs"]}
    assert out["TRANSCRIPT"] == want["text"]
    assert json.loads(out["RESULT"])["token_ids"] == cli_ids(want)
    assert out["IS_FINAL"] is True


def test_real_speech_through_the_server(srv, infd_bin, model_dir):  # noqa: F811
    """A LibriVox recording, POSTed whole and streamed: the CLI's transcripts,
    twice the same (deterministic)."""
    import pathlib
    import wave
    wav = pathlib.Path("/usr/share/pocketsphinx/test/data/librivox/"
                       "sense_and_sensibility_01_austen_64kb-0870.wav")
    if not wav.exists():
        pytest.skip(f"{wav} missing: scripts/setup.sh installs pocketsphinx-testdata")
    r = subprocess.run([str(infd_bin), "asr", str(model_dir), str(wav), "--json"],
                       capture_output=True, text=True, timeout=120)
    offline = json.loads(r.stdout.splitlines()[-1])
    for _ in range(2):
        resp = requests.post(f"{srv.url}/v2/models/speech_file/infer", data=wav.read_bytes(),
                             headers={"Content-Type": "audio/wav"}, timeout=TIMEOUT)
        assert resp.json()["outputs"][0]["data"][0] == offline["text"]
    with wave.open(str(wav)) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64) / 32768.0
    want = cli_stream(infd_bin, model_dir, wav)
    outs = http_session(srv, "speech", "librivox", x, 4000)
    assert outs[-1]["TRANSCRIPT"] == want["text"]


# -- bad input -------------------------------------------------------------------


def test_sequence_errors_are_clear_and_the_server_keeps_serving(srv, tmp_path):
    x = speechlike(8000, 3)
    # a request without a correlation id
    body = {"inputs": [{"name": "AUDIO", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}
    r = requests.post(f"{srv.url}/v2/models/speech/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 400 and "correlation id" in r.json()["error"]
    # a continuation of a sequence that never started
    err = http_chunk(srv, "speech", 424242, x[:100], False, False, expect=400)
    assert "424242 is not active" in err and "sequence_start" in err
    # a correlation id reused while active
    http_chunk(srv, "speech", 5, x[:1600], True, False)
    err = http_chunk(srv, "speech", 5, x[:1600], True, False, expect=400)
    assert "sequence 5 is already active" in err
    # the session goes on, and ends; then the id is free again
    out = http_chunk(srv, "speech", 5, x[1600:], False, True)
    assert out["IS_FINAL"] is True
    out = http_chunk(srv, "speech", 5, x, True, True)
    assert out["IS_FINAL"] is True
    # samples far outside [-1, 1] (JSON has no NaN)
    err = http_chunk(srv, "speech", 6, [1e30] * 10, True, True, expect=400)
    assert "AUDIO" in err
    # a bad sequence_id parameter
    body = {"parameters": {"sequence_id": -3, "sequence_start": True},
            "inputs": [{"name": "AUDIO", "datatype": "FP32", "shape": [1, 1], "data": [0]}]}
    r = requests.post(f"{srv.url}/v2/models/speech/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 400 and "sequence_id" in r.json()["error"]
    assert requests.get(f"{srv.url}/v2/health/ready", timeout=TIMEOUT).status_code == 200


def test_a_thousand_empty_chunks_change_nothing(srv, infd_bin, model_dir, tmp_path):  # noqa: F811
    x = write_wav(tmp_path / "a.wav", speechlike(int(1.3 * 16000), 8))
    want = cli_stream(infd_bin, model_dir, tmp_path / "a.wav")
    http_chunk(srv, "speech", 77, x[:8000], True, False)
    s = requests.Session()
    body = {"parameters": {"sequence_id": 77},
            "inputs": [{"name": "AUDIO", "datatype": "FP32", "shape": [1, 0], "data": []}]}
    for _ in range(1000):
        r = s.post(f"{srv.url}/v2/models/speech/infer", json=body, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
    out = http_chunk(srv, "speech", 77, x[8000:], False, True)
    assert json.loads(out["RESULT"])["token_ids"] == cli_ids(want)


def test_a_dropped_session_is_released_after_its_idle_time(srv, tmp_path):
    """speech_one has one slot and a 400 ms idle limit: a session dropped
    without END holds the slot until then; the next session waits for it,
    then runs, and the dropped one is gone."""
    x = speechlike(16000, 12)
    http_chunk(srv, "speech_one", "dropped", x[:3200], True, False)
    out = http_chunk(srv, "speech_one", "next", x, True, True)  # waits in the backlog
    assert out["IS_FINAL"] is True
    # it could only run once the slot was released, which the log says
    assert "sequence 'dropped' released after" in srv.log()
    err = http_chunk(srv, "speech_one", "dropped", x[:100], False, True, expect=400)
    assert "'dropped' is not active" in err


def test_bad_recordings_are_rejected(srv, tmp_path):
    def post(data, ctype="audio/wav"):
        return requests.post(f"{srv.url}/v2/models/speech_file/infer", data=data,
                             headers={"Content-Type": ctype}, timeout=TIMEOUT)
    r = post(b"\x00" * 100)
    assert r.status_code == 400 and "not a sound file" in r.json()["error"]
    good = write_wav(tmp_path / "a.wav", speechlike(8000, 2))
    del good
    wav = (tmp_path / "a.wav").read_bytes()
    r = post(wav[:60])  # truncated in the samples
    assert r.status_code == 400 and "AUDIO" in r.json()["error"], r.text
    r = post(wav[:44])  # a header and no samples
    assert r.status_code == 400, r.text
    r = post(b"")
    assert r.status_code == 400, r.text
    # 2 KB at 1 Hz would be 2,000 s of audio at 16 kHz: refused, not resampled
    r = post(wav_header(1, 1, 16, 2000) + bytes(2000))
    assert r.status_code == 400 and "the sample rate is 1 Hz" in r.json()["error"], r.text
    # the streaming model takes samples, not files
    r = requests.post(f"{srv.url}/v2/models/speech/infer", data=wav,
                      headers={"Content-Type": "audio/wav"}, timeout=TIMEOUT)
    assert r.status_code == 400 and "one BYTES input" in r.json()["error"]
    r = post(wav)
    assert r.status_code == 200


def test_a_model_that_cannot_load_says_why(srv):
    r = requests.get(f"{srv.url}/v2/models/speech_missing/ready", timeout=TIMEOUT)
    assert r.status_code != 200
    idx = requests.post(f"{srv.url}/v2/repository/index", json={}, timeout=TIMEOUT).json()
    row = [m for m in idx if m["name"] == "speech_missing"][0]
    assert row["state"] == "UNAVAILABLE" and "nowhere" in row["reason"], row
    row = [m for m in idx if m["name"] == "speech_fp8"][0]
    assert "precision is 'fp8'" in row["reason"], row
    row = [m for m in idx if m["name"] == "speech_missing_stream"][0]
    assert row["state"] == "UNAVAILABLE" and "nowhere" in row["reason"], row
    row = [m for m in idx if m["name"] == "speech_chunk0"][0]
    assert row["state"] == "UNAVAILABLE" and "chunk_ms 0" in row["reason"], row


def test_unknown_backend_names_the_registered_ones(serve, tmp_path):
    write_model(tmp_path, "odd", 'backend: "whisper"\nmax_batch_size: 1\n')
    s = serve(tmp_path)
    idx = requests.post(f"{s.url}/v2/repository/index", json={}, timeout=TIMEOUT).json()
    row = [m for m in idx if m["name"] == "odd"][0]
    assert "backend 'whisper'" in row["reason"] and "asr" in row["reason"], row


def test_many_sessions_in_parallel_over_http(srv, infd_bin, model_dir, tmp_path):  # noqa: F811
    """Eight clients at once, each its own session: every transcript is the
    CLI's (sessions never see each other's state)."""
    xs, want = [], []
    for s in range(8):
        xs.append(write_wav(tmp_path / f"{s}.wav", speechlike(int(1.1 * 16000), 50 + s)))
        want.append(cli_stream(infd_bin, model_dir, tmp_path / f"{s}.wav"))
    results = queue.Queue()

    def run(s):
        try:
            outs = http_session(srv, "speech", f"par-{s}", xs[s], CHUNK * MS)
            results.put((s, json.loads(outs[-1]["RESULT"])["token_ids"]))
        except Exception as e:  # reported below
            results.put((s, repr(e)))
    threads = [threading.Thread(target=run, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    got = dict(results.get_nowait() for _ in range(8))
    for s in range(8):
        assert got[s] == cli_ids(want[s]), (s, got[s])


def test_gpu_instances_give_the_cpu_tokens(serve, infd_bin, model_dir, streaming_dir,  # noqa: F811
                                           tmp_path):
    """KIND_GPU instances of both streaming modes and of whole recordings:
    the server's tokens on the GPU are the CLI's on the CPU. Skips without
    a usable GPU."""
    from test_cuda import cuda_state

    usable, line = cuda_state(infd_bin)
    if not usable:
        pytest.skip(f"no usable CUDA device (infd --version: cuda backend: {line})")
    repo = tmp_path / "repo"
    gpu = "instance_group [{ kind: KIND_GPU count: 1 }]\n"
    write_model(repo, "speech", f"""backend: "asr"
max_batch_size: 8
sequence_batching {{ oldest {{ max_candidate_sequences: 8 }} }}
{gpu}{model_param(model_dir)}{STREAM_PARAMS}""")
    write_model(repo, "speech_cache", f"""backend: "asr"
max_batch_size: 4
sequence_batching {{}}
{gpu}{model_param(streaming_dir)}""")
    write_model(repo, "speech_file", f"""backend: "asr"
max_batch_size: 4
{gpu}{model_param(model_dir)}""")
    s = serve(repo)
    cfg = requests.get(f"{s.url}/v2/models/speech/config", timeout=TIMEOUT).json()
    assert cfg["instance_group"][0]["kind"] == "KIND_GPU"
    x = write_wav(tmp_path / "a.wav", speechlike(int(2.9 * 16000), 17))
    for model, d in (("speech", model_dir), ("speech_cache", streaming_dir)):
        want = cli_stream(infd_bin, d, tmp_path / "a.wav")
        outs = http_session(s, model, f"gpu-{model}", x, 2560)
        assert json.loads(outs[-1]["RESULT"])["token_ids"] == cli_ids(want), model
    r = subprocess.run([str(infd_bin), "asr", str(model_dir), str(tmp_path / "a.wav"), "--json"],
                       capture_output=True, text=True, timeout=120)
    want = json.loads(r.stdout.splitlines()[-1])
    resp = requests.post(f"{s.url}/v2/models/speech_file/infer",
                         data=(tmp_path / "a.wav").read_bytes(),
                         headers={"Content-Type": "audio/wav"}, timeout=TIMEOUT)
    out = {o["name"]: o["data"][0] for o in resp.json()["outputs"]}
    assert json.loads(out["RESULT"])["token_ids"] == cli_ids(want)


def test_grpc_stream_reports_sequence_errors_and_goes_on(srv, pb):
    """On one ModelStreamInfer stream: a START for an id already active and
    a continuation of an unknown id each come back as an error message
    naming the id; the stream and the sessions around them go on."""
    x = speechlike(16000, 21).astype("<f4")
    reqs = [grpc_request(pb, "speech", "g-1", x[:4000], True, False, "a"),
            grpc_request(pb, "speech", "g-1", x[4000:8000], True, False, "b"),
            grpc_request(pb, "speech", "g-404", x[:100], False, False, "c"),
            grpc_request(pb, "speech", "g-1", x[8000:], False, True, "d")]
    stub = pb.svc_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(f"{srv.host}:{srv.grpc_port}"))
    errors, finals = [], []
    for resp in stub.ModelStreamInfer(iter(reqs), timeout=60):
        if resp.error_message:
            errors.append(resp.error_message)
        elif json.loads(bytes_output(resp.infer_response, "RESULT"))["is_final"]:
            finals.append(resp.infer_response.id)
    assert len(errors) == 2, errors
    assert any("'g-1' is already active" in e for e in errors), errors
    assert any("'g-404' is not active" in e for e in errors), errors
    assert finals == ["d"]
