"""End to end: `infd video`, the live face-detection server (docs/VIDEO.md).

Every test starts the real `infd video` on a free loopback UDP port and
drives it with the real tools its users have: the srt-face-server seed's
GStreamer sender and viewer, FFmpeg's, and srt-live-transmit (Debian's
srt-tools) for raw bytes. Every process is started here and stopped by PID.

The detection check sends a video made at test time from a real photo
(NASA's astronaut portrait, from Debian's python3-skimage, fetched by
scripts/setup.sh) and finds the drawn green box and red dots in the frames
the viewer receives. The reference box comes from `infd run` on the same
frame plus this file's own numpy decoding of BlazeFace's outputs
(MediaPipe's anchors and weighted NMS).
"""

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import serving
from serving import free_port
from test_cuda import cuda_state, gpu  # noqa: F401 (gpu is a fixture)

READY_TIMEOUT_S = 30.0
W = H = 640


def need(tool):
    path = shutil.which(tool)
    if not path:
        pytest.fail(f"{tool} not found: scripts/setup.sh installs it (make test runs it)")
    return path


def free_udp_port():
    """A UDP port on 127.0.0.1 that was free a moment ago, not handed out
    before (free_port keeps the record)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in serving._handed_out:
            serving._handed_out.add(port)
            return port
    raise RuntimeError("no free UDP port")


class Video:
    """One `infd video` process on a free SRT port, with its detections
    file and log in a temporary folder."""

    def __init__(self, infd_bin, models, *args, env=None):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="infd-video-test-"))
        self.port = free_udp_port()
        self.detections = self.dir / "detections.jsonl"
        self.log_path = self.dir / "video.log"
        self.metrics_port = free_port()
        cmd = [str(infd_bin), "video", "--listen", f"srt://127.0.0.1:{self.port}",
               "--model-repository", str(models), "--latency-ms", "20",
               "--detections", str(self.detections), "--metrics-port", str(self.metrics_port),
               "--host", "127.0.0.1", "--warmup", "2", "--stats-every", "30", *args]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "state ready" not in self.text():
            if self.proc.poll() is not None:
                raise AssertionError(f"infd video exited {self.proc.returncode}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"infd video not ready:\n{self.text()}")
            time.sleep(0.05)
        self.url = f"srt://127.0.0.1:{self.port}"

    def text(self):
        return self.log_path.read_text(errors="replace")

    def frames(self):
        """The detections JSON lines written so far."""
        if not self.detections.exists():
            return []
        return [json.loads(line) for line in self.detections.read_text().splitlines() if line]

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """SIGTERM; the exit status must be 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"infd video ignored SIGTERM:\n{self.text()[-3000:]}")
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def video(infd_bin, repo_root):
    """Factory: video(*extra_args) starts `infd video`; at teardown each is
    stopped with SIGTERM and must exit 0."""
    models = repo_root / "models"
    if not (models / "blazeface" / "1" / "model.onnx").is_file():
        pytest.skip("models/blazeface/1/model.onnx missing: run scripts/setup.sh")
    started = []

    def start(*args, **kw):
        v = Video(infd_bin, models, *args, **kw)
        started.append(v)
        return v

    yield start
    problems = []
    for v in started:
        rc = v.stop()
        if rc != 0:
            problems.append(f"infd video exited {rc}:\n{v.text()[-3000:]}")
        shutil.rmtree(v.dir, ignore_errors=True)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


class Proc:
    """A client tool started in its own session, stopped by PID."""

    def __init__(self, cmd, log):
        self.log_path = log
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.flush()

    def stop(self, sig=signal.SIGINT, timeout=5):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def text(self):
        return pathlib.Path(self.log_path).read_text(errors="replace")


def recorder(url, out, tmp, name="viewer", extra=""):
    """A viewer that keeps what the server sends, byte for byte, in a TS
    file: srt-live-transmit from the SRT caller to its standard output.
    (FFmpeg as a viewer remuxes, and at SIGINT drops the frames its demuxer
    still holds: fine to watch, not to count frames.)"""
    need("srt-live-transmit")
    log = tmp / f"{name}.log"
    return Proc(["sh", "-c", 'exec srt-live-transmit -q "$0" file://con > "$1" 2> "$2"',
                 f"{url}?latency=20{extra}", str(out), str(log)], tmp / f"{name}.sh.log")


def ffmpeg_viewer(url, out, tmp, name="viewer", extra=""):
    """FFmpeg as a viewer: what the server sends, copied to a TS file."""
    need("ffmpeg")
    # Probing for at most a second: FFmpeg's default (5 s of input) would
    # hold short test streams back until they end.
    return Proc(["ffmpeg", "-nostdin", "-v", "warning", "-y", "-analyzeduration", "1000000",
                 "-probesize", "500000", "-i", f"{url}?latency=20000{extra}", "-c", "copy",
                 "-f", "mpegts", str(out)], tmp / f"{name}.log")


def ffmpeg_send(url, ts, tmp, name="sender", extra=""):
    """FFmpeg as a publisher: a TS file sent in real time (-re), unchanged."""
    return Proc(["ffmpeg", "-nostdin", "-v", "warning", "-re", "-i", str(ts), "-c", "copy",
                 "-f", "mpegts", f"{url}?latency=20000&pkt_size=1316{extra}"],
                tmp / f"{name}.log")


def make_ts(src_args, out, frames):
    """An H.264 TS file as the seed's senders make them: zerolatency, no
    B-frames, a key frame a second."""
    need("ffmpeg")
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *src_args, "-frames:v",
                    str(frames), "-c:v", "libx264", "-preset", "ultrafast", "-tune",
                    "zerolatency", "-g", "30", "-bf", "0", "-pix_fmt", "yuv420p", "-f", "mpegts",
                    str(out)], check=True)


def count_frames(ts):
    """Decodable video frames in a TS file (0 when there are none)."""
    if not pathlib.Path(ts).exists() or pathlib.Path(ts).stat().st_size == 0:
        return 0
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
                        "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", str(ts)],
                       capture_output=True, text=True)
    m = re.search(r"\d+", r.stdout)
    return int(m.group()) if m else 0


def decode_rgb(ts, w=W, h=H, vf=None):
    """Every frame of a TS file as RGB, [n, h, w, 3] uint8."""
    cmd = ["ffmpeg", "-nostdin", "-v", "error", "-i", str(ts)]
    if vf:
        cmd += ["-vf", vf]
    cmd += ["-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    raw = subprocess.run(cmd, capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# ---------------------------------------------------------------------------
# The reference: BlazeFace decoded in numpy (MediaPipe's short-range recipe)
# ---------------------------------------------------------------------------

def anchors():
    """896 anchor centres: 16x16 cells with 2 anchors, then 8x8 with 6."""
    out = []
    for cells, per in ((16, 2), (8, 6)):
        for y in range(cells):
            for x in range(cells):
                out += [((x + 0.5) / cells, (y + 0.5) / cells)] * per
    return np.array(out, np.float32)


def blazeface_decode(scores, regs, size=128, min_score=0.5, iou=0.3):
    """Faces [(score, box[4], keypoints[6, 2])] in input-normalised units."""
    a = anchors()
    s = 1 / (1 + np.exp(-np.clip(scores.reshape(-1).astype(np.float64), -100, 100)))
    r = regs.reshape(-1, 16) / size
    keep = np.nonzero(s >= min_score)[0]
    cand = []
    for i in keep:
        cx, cy = a[i] + r[i, :2]
        w, h = r[i, 2:4]
        box = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
        kp = a[i] + r[i, 4:].reshape(6, 2)
        cand.append((float(s[i]), box, kp))
    cand.sort(key=lambda c: -c[0])

    def overlap(p, q):
        ix = min(p[2], q[2]) - max(p[0], q[0])
        iy = min(p[3], q[3]) - max(p[1], q[1])
        if ix <= 0 or iy <= 0:
            return 0.0
        inter = ix * iy
        return inter / ((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter)

    faces = []
    while cand:
        top = cand[0]
        group = [c for c in cand if c is top or overlap(top[1], c[1]) > iou]
        cand = [c for c in cand if not any(c is g for g in group)]
        wts = np.array([g[0] for g in group])
        box = sum(g[0] * g[1] for g in group) / wts.sum()
        kp = sum(g[0] * g[2] for g in group) / wts.sum()
        faces.append((top[0], box, kp))
    return faces


def reference_face(infd_bin, repo_root, ts, tmp, model="blazeface", size=128):
    """The face on the first frame of `ts` (a square 640x640 video), by
    `infd run` on BlazeFace (front at 128, or back at 256) and the numpy
    decoding: (box, keypoints) in frame pixels."""
    rgb = decode_rgb(ts, size, size, vf=f"scale={size}:{size}:flags=bilinear")[0]
    x = (rgb.astype(np.float32) / 127.5 - 1.0)[None]
    np.save(tmp / "face.npy", x)
    out = tmp / "ref"
    subprocess.run([str(infd_bin), "run", str(repo_root / f"models/{model}/1/model.onnx"),
                    "--input", f"input:0={tmp / 'face.npy'}", "--output-dir", str(out)],
                   check=True, capture_output=True)
    scores = np.concatenate([np.load(out / "Identity_0.npy").reshape(-1),
                             np.load(out / "Identity_1_0.npy").reshape(-1)])
    regs = np.concatenate([np.load(out / "Identity_2_0.npy").reshape(-1, 16),
                           np.load(out / "Identity_3_0.npy").reshape(-1, 16)])
    faces = blazeface_decode(scores, regs, size=size)
    assert faces, "the reference found no face on the astronaut photo"
    _, box, kp = faces[0]
    return box * W, kp * W


def drawn_box(frame):
    """The green box drawn on a frame: (x0, y0, x1, y1) of the pixels that
    are strongly green, or None."""
    f = frame.astype(np.int16)
    green = (f[..., 1] > 160) & (f[..., 0] < 110) & (f[..., 2] < 110)
    ys, xs = np.nonzero(green)
    if len(xs) < 100:
        return None
    return np.array([xs.min(), ys.min(), xs.max(), ys.max()], np.float64)


def red_near(frame, x, y, r=8):
    f = frame.astype(np.int16)
    x, y = int(round(x)), int(round(y))
    win = f[max(0, y - r):y + r + 1, max(0, x - r):x + r + 1]
    red = (win[..., 0] > 160) & (win[..., 1] < 100) & (win[..., 2] < 100)
    return int(red.sum())


@pytest.fixture(scope="module")
def astronaut(tmp_path_factory, cache_dir):
    png = cache_dir / "media" / "astronaut.png"
    if not png.is_file():
        pytest.fail(f"{png} missing: scripts/setup.sh fetches it from python3-skimage")
    tmp = tmp_path_factory.mktemp("astronaut")
    ts = tmp / "astronaut.ts"
    make_ts(["-loop", "1", "-i", str(png), "-vf", "scale=640:640,format=yuv420p", "-r", "30"],
            ts, 90)
    return ts


@pytest.fixture(scope="module")
def ball(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ball")
    ts = tmp / "ball.ts"
    make_ts(["-f", "lavfi", "-i", "testsrc2=size=640x640:rate=30"], ts, 150)
    return ts


# ---------------------------------------------------------------------------
# The seed's commands
# ---------------------------------------------------------------------------

def test_seed_gstreamer_sender_and_viewer(video, tmp_path):
    """The srt-face-server seed's TESTING commands, unchanged except for the
    port, the BGR caps filter GStreamer 1.22's x264enc cannot take
    (shared/reference/streaming.md), and a file in place of the display."""
    need("gst-launch-1.0")
    v = video()
    out = tmp_path / "viewer.ts"
    viewer = Proc(["gst-launch-1.0", "srtsrc", f"uri={v.url}", "latency=10", "!",
                   "filesink", f"location={out}"], tmp_path / "viewer.log")
    wait_for(lambda: "caller (a viewer" in v.text(), 10, "the viewer to connect")
    sender = Proc(["gst-launch-1.0", "-v", "videotestsrc", "pattern=ball", "!",
                   "video/x-raw,width=640,height=640,framerate=30/1", "!", "videoconvert", "!",
                   "x264enc", "tune=zerolatency", "bitrate=4000", "speed-preset=ultrafast", "!",
                   "mpegtsmux", "!", "srtsink", f"uri={v.url}", "latency=10"],
                  tmp_path / "sender.log")
    wait_for(lambda: len(v.frames()) >= 60, 30, "60 frames through the server")
    sender.stop()
    time.sleep(1.0)
    viewer.stop()
    assert "the caller sends media: publisher" in v.text()
    frames_in = len(v.frames())
    frames_out = count_frames(out)
    assert frames_out >= 60, (frames_out, viewer.text()[-2000:])
    # The seed's own viewer pipeline decodes what the server sent.
    seed_view = subprocess.run(
        ["gst-launch-1.0", "filesrc", f"location={out}", "!", "tsdemux", "!", "h264parse", "!",
         "avdec_h264", "!", "videoconvert", "!", "fakesink", "sync=false"],
        capture_output=True, text=True, timeout=60)
    assert seed_view.returncode == 0, seed_view.stderr[-2000:]
    assert frames_out == frames_in, (frames_out, frames_in)


def test_seed_gstreamer_viewer_of_an_ffmpeg_sender(video, ball, tmp_path):
    """The seed's viewer pipeline as written (display replaced by fakesink)
    against a live server, with FFmpeg sending."""
    need("gst-launch-1.0")
    v = video()
    viewer = Proc(["gst-launch-1.0", "-v", "srtsrc", f"uri={v.url}", "latency=10", "!",
                   "tsdemux", "!", "h264parse", "!", "avdec_h264", "!", "videoconvert", "!",
                   "fakesink", "sync=false", "silent=false"], tmp_path / "viewer.log")
    wait_for(lambda: "caller (a viewer" in v.text(), 10, "the viewer to connect")
    sender = ffmpeg_send(v.url, ball, tmp_path)
    assert sender.wait(30) == 0, sender.text()
    wait_for(lambda: len(v.frames()) == 150, 10, "150 frames")
    wait_for(lambda: viewer.text().count("chain") >= 100, 10, "the viewer to show frames")
    viewer.stop()


def test_ffmpeg_sender_and_viewer_frames_in_equal_frames_out(video, ball, tmp_path):
    """The seed's commands "the same with ffmpeg": an FFmpeg sender and
    viewer, plus a recorder beside the viewer that counts frames exactly."""
    v = video()
    out, watched = tmp_path / "out.ts", tmp_path / "watched.ts"
    rec = recorder(v.url, out, tmp_path)
    viewer = ffmpeg_viewer(v.url, watched, tmp_path, name="ffviewer")
    wait_for(lambda: v.text().count("caller (a viewer") == 2, 10, "the viewers to connect")
    sender = ffmpeg_send(v.url, ball, tmp_path)
    assert sender.wait(30) == 0, sender.text()
    wait_for(lambda: len(v.frames()) == 150, 10, "150 frames through the server")
    time.sleep(0.5)
    rec.stop()
    viewer.stop()
    assert count_frames(out) == 150
    assert count_frames(watched) >= 140, viewer.text()[-2000:]
    # Output timestamps follow the input's, one frame (3000 ticks) apart.
    pts = [f["pts"] for f in v.frames()]
    assert all(b - a == 3000 for a, b in zip(pts, pts[1:])), pts[:10]


# ---------------------------------------------------------------------------
# The astronaut: a real face, boxed
# ---------------------------------------------------------------------------

def check_astronaut(v, astronaut, ref_box, ref_kp, tmp_path):
    """Sends the astronaut video through `v` and checks every frame a
    viewer receives: the green box where the reference puts the face, red
    dots on the eyes, and the detections JSON saying the same."""
    out = tmp_path / "out.ts"
    viewer = recorder(v.url, out, tmp_path, extra="&streamid=#!::r=live,m=request")
    wait_for(lambda: "viewer connected" in v.text(), 10, "the viewer to connect")
    sender = ffmpeg_send(v.url, astronaut, tmp_path, extra="&streamid=#!::r=live,m=publish")
    assert sender.wait(30) == 0, sender.text()
    wait_for(lambda: len(v.frames()) == 90, 10, "90 frames")
    time.sleep(0.5)
    viewer.stop()

    frames = decode_rgb(out)
    assert len(frames) == 90, len(frames)
    dets = v.frames()
    # The input has a key frame every 30 frames (make_ts's -g 30).
    assert [d["frame"] for d in dets if d["input_key"]] == [0, 30, 60], dets[:2]
    for i, (frame, det) in enumerate(zip(frames, dets)):
        assert det["frame"] == i and det["width"] == W and det["height"] == H
        assert len(det["faces"]) == 1, det
        face = det["faces"][0]
        box = drawn_box(frame)
        assert box is not None, f"frame {i}: no green box"
        assert np.abs(box - ref_box).max() <= 10, (i, box, ref_box)
        # The JSON says where the box was drawn (its lines are 2 px thick).
        assert np.abs(np.array(face["box"]) - box).max() <= 4, (i, face["box"], box)
        assert np.abs(np.array(face["box"]) - ref_box).max() <= 10, (i, face["box"], ref_box)
        for eye in (0, 1):
            x, y = face["landmarks"][eye]
            assert abs(x - ref_kp[eye][0]) <= 8 and abs(y - ref_kp[eye][1]) <= 8, (i, eye)
            assert red_near(frame, x, y) >= 10, f"frame {i}: no red dot on eye {eye}"
        assert face["score"] > 0.75


def test_device_cuda_without_a_gpu_says_so(infd_bin, repo_root):
    usable, line = cuda_state(infd_bin)
    if usable:
        pytest.skip("a GPU is usable here: test_astronaut_on_the_gpu covers --device cuda")
    r = subprocess.run([str(infd_bin), "video", "--model-repository", str(repo_root / "models"),
                        "--device", "cuda", "--listen", "srt://127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "KIND_GPU, but no usable CUDA device" in r.stderr, r.stderr


@pytest.mark.parametrize("option,value", [("--encoder-threads", "65"), ("--latency-ms", "x"),
                                          ("--bitrate-kbps", "8"), ("--min-score", "1.5")])
def test_bad_option_values_are_named(infd_bin, option, value):
    r = subprocess.run([str(infd_bin), "video", option, value, "--listen", "srt://127.0.0.1:0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert f"bad value for {option}: '{value}'" in r.stderr, r.stderr


def test_astronaut_face_is_boxed(video, astronaut, infd_bin, repo_root, tmp_path):
    ref_box, ref_kp = reference_face(infd_bin, repo_root, astronaut, tmp_path)
    v = video()
    check_astronaut(v, astronaut, ref_box, ref_kp, tmp_path)
    assert "decoded on the CPU" in v.text()


def test_astronaut_with_the_back_model(video, astronaut, infd_bin, repo_root, tmp_path):
    """BlazeFace back at 256x256 (--model blazeface_back): the same two
    grids, offsets in its own input pixels; the same face."""
    if not (repo_root / "models" / "blazeface_back" / "1" / "model.onnx").is_file():
        pytest.skip("models/blazeface_back/1/model.onnx missing: run scripts/setup.sh")
    ref_box, ref_kp = reference_face(infd_bin, repo_root, astronaut, tmp_path,
                                     model="blazeface_back", size=256)
    v = video("--model", "blazeface_back")
    check_astronaut(v, astronaut, ref_box, ref_kp, tmp_path)
    assert "detector blazeface_back 256x256" in v.text()


def test_astronaut_on_the_gpu(gpu, video, astronaut, infd_bin, repo_root, tmp_path):
    """--device cuda: NVDEC decoding, the CUDA letterbox and drawing, the
    detector on the GPU; the same box on every frame."""
    ref_box, ref_kp = reference_face(infd_bin, repo_root, astronaut, tmp_path)
    v = video("--device", "cuda")
    check_astronaut(v, astronaut, ref_box, ref_kp, tmp_path)
    text = v.text()
    assert "decoded on the GPU (NVDEC)" in text, text[-3000:]
    # The H100 and H200 have no NVENC: the fallback is said once.
    assert re.search(r"video: encoder: (NVENC|this GPU has no usable NVENC)", text)


# ---------------------------------------------------------------------------
# Robustness: the server stays up, and the right thing happens
# ---------------------------------------------------------------------------

def send_raw(url, data, tmp, rate_bps=4_000_000, name="raw"):
    """Sends `data` as-is over SRT (GStreamer's fdsrc into srtsink: no
    demuxing, no repair), paced at about `rate_bps` in 1316-byte messages as
    a live encoder sends."""
    need("gst-launch-1.0")
    log = open(tmp / f"{name}.log", "wb")
    p = subprocess.Popen(["gst-launch-1.0", "-e", "fdsrc", "fd=0", "blocksize=1316", "!",
                          "srtsink", f"uri={url}", "latency=20"], stdin=subprocess.PIPE,
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    step = 1316
    t0 = time.monotonic()
    try:
        for i in range(0, len(data), step):
            p.stdin.write(data[i:i + step])
            p.stdin.flush()
            due = t0 + (i + step) * 8 / rate_bps
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
        p.stdin.close()
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()
    return p.returncode


def test_corrupt_ts_bytes_are_skipped(video, ball, tmp_path):
    data = bytearray(ball.read_bytes())
    rng = np.random.default_rng(7)
    # Garbage over 40 spots in the middle third: broken TS packets, PES
    # headers and slices.
    n = len(data)
    for pos in rng.integers(n // 3, 2 * n // 3, 40):
        data[pos:pos + 300] = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
    v = video()
    out = tmp_path / "out.ts"
    viewer = recorder(v.url, out, tmp_path)
    wait_for(lambda: "caller (a viewer" in v.text(), 10, "the viewer to connect")
    send_raw(v.url, bytes(data), tmp_path)
    wait_for(lambda: "publisher ended" in v.text(), 15, "the publisher to end")
    time.sleep(0.5)
    viewer.stop()
    assert v.alive()
    text = v.text()
    assert re.search(r"publisher ended after \d+ frames \([1-9]\d* demux/decode errors skipped\)",
                     text), text[-3000:]
    assert "is corrupt (TS continuity error)" in text
    frames = len(v.frames())
    # Damaged packets are decoded with concealment, so (nearly) every frame
    # comes through; the TS packets that made no frame at all are lost.
    assert frames >= 140, (frames, text[-3000:])
    assert count_frames(out) == frames
    # And it serves the next publisher as before.
    sender = ffmpeg_send(v.url, ball, tmp_path, name="after")
    assert sender.wait(30) == 0
    wait_for(lambda: len(v.frames()) >= frames + 150, 10, "the next publisher's frames")


def test_publisher_killed_and_back_resumes(video, ball, tmp_path):
    v = video()
    out = tmp_path / "out.ts"
    viewer = recorder(v.url, out, tmp_path)
    wait_for(lambda: "caller (a viewer" in v.text(), 10, "the viewer to connect")
    first = ffmpeg_send(v.url, ball, tmp_path, name="first")
    wait_for(lambda: len(v.frames()) >= 40, 15, "the first publisher's frames")
    first.stop(signal.SIGKILL)
    n1 = len(v.frames())
    # Back before SRT's peer timeout: the new connection takes the stream over.
    second = ffmpeg_send(v.url, ball, tmp_path, name="second")
    assert second.wait(30) == 0, second.text()
    wait_for(lambda: len(v.frames()) >= n1 + 150, 15, "the second publisher's frames")
    time.sleep(0.5)
    viewer.stop()
    frames = v.frames()
    pts = [f["pts"] for f in frames]
    assert all(b > a for a, b in zip(pts, pts[1:])), "output timestamps went back"
    # One viewer connection saw both publishers.
    assert count_frames(out) == len(frames)
    assert v.text().count("publishing") >= 2


def test_second_viewer_joins_mid_stream(video, ball, tmp_path):
    v = video()
    out1, out2 = tmp_path / "one.ts", tmp_path / "two.ts"
    one = recorder(v.url, out1, tmp_path, name="one")
    wait_for(lambda: "caller (a viewer" in v.text(), 10, "the first viewer")
    sender = ffmpeg_send(v.url, ball, tmp_path)
    wait_for(lambda: len(v.frames()) >= 50, 15, "50 frames")
    joined_at = len(v.frames())
    two = recorder(v.url, out2, tmp_path, name="two",
                        extra="&streamid=#!::r=live,m=request")
    assert sender.wait(30) == 0
    time.sleep(0.5)
    one.stop()
    two.stop()
    assert count_frames(out1) == 150
    # The second viewer has a picture from (about) when it joined: the
    # server made the next frame a key frame.
    got = count_frames(out2)
    assert 150 - joined_at - 15 <= got <= 150 - joined_at + 5, (got, joined_at)


def test_viewer_with_no_publisher_waits(video, ball, tmp_path):
    v = video()
    out = tmp_path / "out.ts"
    viewer = recorder(v.url, out, tmp_path, extra="&streamid=#!::r=cam2,m=request")
    wait_for(lambda: "stream cam2: viewer connected" in v.text(), 10, "the viewer")
    time.sleep(2.0)
    assert v.alive() and viewer.proc.poll() is None
    assert not out.exists() or out.stat().st_size == 0
    sender = ffmpeg_send(v.url, ball, tmp_path, extra="&streamid=#!::r=cam2,m=publish")
    assert sender.wait(30) == 0
    time.sleep(0.5)
    viewer.stop()
    assert count_frames(out) == 150
    assert {f["stream"] for f in v.frames()} == {"cam2"}


def test_wrong_passphrase_is_refused(video, ball, tmp_path):
    v = video("--passphrase", "correct-horse-battery")
    bad = ffmpeg_send(v.url, ball, tmp_path, name="bad", extra="&passphrase=wrong-passphrase")
    assert bad.wait(20) != 0
    none = ffmpeg_send(v.url, ball, tmp_path, name="none")
    assert none.wait(20) != 0
    assert v.alive() and v.frames() == []
    good = ffmpeg_send(v.url, ball, tmp_path, name="good",
                       extra="&passphrase=correct-horse-battery")
    assert good.wait(30) == 0
    wait_for(lambda: len(v.frames()) == 150, 10, "the good publisher's frames")


def test_bad_stream_ids_are_refused(video, ball, tmp_path):
    v = video()
    for i, sid in enumerate(["#!::m=bogus", "#!::r=a b", "#!::r=x,r=y", "#!::r", "bad\\name",
                             "#!::r=" + "a" * 100]):
        p = ffmpeg_send(v.url, ball, tmp_path, name=f"sid{i}", extra=f"&streamid={sid}")
        assert p.wait(20) != 0, sid
    assert v.text().count("connection refused: stream id") == 6, v.text()[-3000:]
    assert v.alive()
    ok = ffmpeg_send(v.url, ball, tmp_path, name="ok", extra="&streamid=cam-1")
    assert ok.wait(30) == 0
    wait_for(lambda: len(v.frames()) == 150, 10, "frames")
    assert {f["stream"] for f in v.frames()} == {"cam-1"}


def srt_handshake(sid):
    """An SRT caller's two handshake packets (induction, then conclusion
    with a stream ID extension), as bytes: enough to hand a listener a
    stream ID of any length, which libsrt's own callers cap at 512 bytes."""
    import struct

    def header(dst=0):
        return struct.pack(">IIII", 0x80000000, 0, 0, dst)

    def cif(version, ext, hs_type, cookie, sock_id=0x1234):
        return struct.pack(">IHHIIIiII16s", version, 0, ext, 1000, 1500, 8192, hs_type,
                           sock_id, cookie, b"\x01\x00\x00\x7f" + b"\0" * 12)

    induction = header() + cif(4, 2, 1, 0)

    def conclusion(cookie):
        sid_bytes = sid.encode()
        sid_bytes += b"\0" * (-len(sid_bytes) % 4)
        # SRT sends the stream ID in 32-bit words, each byte-swapped.
        words = [int.from_bytes(sid_bytes[i:i + 4], "little")
                 for i in range(0, len(sid_bytes), 4)]
        hsreq = struct.pack(">HHIII", 1, 3, 0x010501, 0xBF, (20 << 16) | 20)
        sid_ext = struct.pack(">HH", 5, len(words)) + struct.pack(f">{len(words)}I", *words)
        return header() + cif(5, 0x1 | 0x4, -1, cookie) + hsreq + sid_ext

    return induction, conclusion


def handshake(port, sid):
    """Runs the caller's side of the handshake with `sid`; the listener's
    reply to the conclusion (bytes), or None when it sent none."""
    induction, conclusion = srt_handshake(sid)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(induction, ("127.0.0.1", port))
        reply, _ = s.recvfrom(2048)
        cookie = int.from_bytes(reply[16 + 28:16 + 32], "big")
        s.sendto(conclusion(cookie), ("127.0.0.1", port))
        try:
            return s.recvfrom(2048)[0]
        except socket.timeout:
            return None


def test_stream_id_of_4_kb(video, ball, tmp_path):
    """libsrt's callers refuse to send a stream ID over 512 bytes, so hostile
    handshakes are made by hand: 4 KB (more than a datagram libsrt reads)
    and 1000 bytes (one datagram, past SRT's limit). The server stays up and
    serves; a well-formed handshake made the same way connects."""
    v = video()
    for n in (4096, 1000):
        handshake(v.port, "#!::r=" + "x" * (n - 6))
        assert v.alive()
    assert handshake(v.port, "#!::r=cam9,m=request") is not None
    wait_for(lambda: "stream cam9: viewer connected" in v.text(), 5, "the hand-made viewer")
    ok = ffmpeg_send(v.url, ball, tmp_path)
    assert ok.wait(30) == 0
    wait_for(lambda: len(v.frames()) == 150, 10, "frames after the hostile handshakes")


# ---------------------------------------------------------------------------
# Lifecycle, metrics, resources
# ---------------------------------------------------------------------------

def test_lifecycle_and_metrics(video, ball, tmp_path):
    v = video()
    text = v.text()
    order = [text.index(s) for s in ("state init", "state warmup", "state ready")]
    assert order == sorted(order)
    sender = ffmpeg_send(v.url, ball, tmp_path)
    assert sender.wait(30) == 0
    wait_for(lambda: len(v.frames()) == 150, 10, "frames")
    import requests

    m = requests.get(f"http://127.0.0.1:{v.metrics_port}/metrics", timeout=5).text
    count = re.search(r'infd_video_stage_seconds_count\{stage="process"\} (\d+)', m)
    assert count and int(count.group(1)) == 150, m[:2000]
    assert re.search(r"^infd_video_frames_total 150$", m, re.M)
    assert re.search(r"^infd_video_publishers_total 1$", m, re.M)
    # The detector is an ordinary served model: its requests are counted too.
    assert re.search(r'nv_inference_request_success\{model="blazeface",version="1"\} (\d+)', m) \
        or "blazeface" in m
    # Every frame's stage times are in its JSON line.
    for f in v.frames():
        lat = f["latency_us"]
        assert set(lat) == {"receive", "demux", "decode", "preprocess", "infer", "postprocess",
                            "draw", "encode", "send", "process"}
        assert lat["process"] >= lat["decode"] + lat["infer"]
    # Frames reach the stage-time log every 30 frames.
    assert "process (decoder in to encoder out) p50" in v.text()


def test_detections_as_server_sent_events(video, ball, tmp_path):
    import threading

    import requests

    port = free_port()
    v = video("--http-port", str(port))
    base = f"http://127.0.0.1:{port}/v2/video"
    assert requests.get(f"{base}/streams", timeout=5).json() == []
    events = []
    opened = threading.Event()

    def listen():
        with requests.get(f"{base}/streams/live/detections", stream=True, timeout=30) as r:
            assert r.status_code == 200
            assert r.headers["Content-Type"] == "text/event-stream"
            opened.set()
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    events.append(json.loads(line[6:]))
                if len(events) == 150:
                    return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert opened.wait(10)
    wait_for(lambda: "a detections subscriber" in v.text(), 5, "the subscription")
    sender = ffmpeg_send(v.url, ball, tmp_path)
    assert sender.wait(30) == 0
    t.join(15)
    assert len(events) == 150
    # The events are the detections file's lines.
    assert events == v.frames()
    streams = requests.get(f"{base}/streams", timeout=5).json()
    assert [(s["name"], s["frames"], s["width"]) for s in streams] == [("live", 150, 640)]
    r = requests.get(f"{base}/nothing", timeout=5)
    assert r.status_code == 404 and "no video route" in r.json()["error"]
    # The KServe API of the detector is on the same port.
    assert requests.get(f"http://127.0.0.1:{port}/v2/models/blazeface/ready",
                        timeout=5).status_code == 200


def test_sigterm_mid_stream_exits_0(video, ball, tmp_path):
    v = video()
    out = tmp_path / "out.ts"
    viewer = recorder(v.url, out, tmp_path)
    sender = ffmpeg_send(v.url, ball, tmp_path)
    wait_for(lambda: len(v.frames()) >= 30, 15, "frames")
    assert v.stop() == 0
    assert "video: stopped" in v.text()
    sender.stop()
    viewer.stop()
    assert count_frames(out) >= 30


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def sanitized(infd_bin):
    """True for an ASan build (its quarantine keeps freed memory resident,
    so RSS says nothing there; the leak check at exit says it instead)."""
    return b"__asan_init" in pathlib.Path(infd_bin).read_bytes()


def test_a_publishers_last_frames_arrive_after_it_leaves(video, tmp_path):
    """SRT holds each message for the latency before it is read; when the
    publisher leaves, what it sent in its last `latency` ms is still held.
    It is read, not dropped: with 500 ms of latency a 6-frame clip (200 ms)
    is whole in the buffer when the sender closes."""
    short = tmp_path / "short.ts"
    make_ts(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30"], short, 6)
    v = video("--stats-every", "0", "--latency-ms", "500")
    sender = ffmpeg_send(v.url, short, tmp_path)
    assert sender.wait(30) == 0, sender.text()
    wait_for(lambda: len(v.frames()) == 6, 10, "the clip's 6 frames")
    assert "publisher ended after 6 frames" in v.text()


def test_a_viewer_leaving_does_not_take_the_stream_over(video, tmp_path):
    """A caller without a role is a viewer until it sends media. When it
    leaves, libsrt reports its socket readable and broken at once, as for a
    caller that sent media and left: with nothing in its buffer it is a
    viewer leaving, and the publisher goes on."""
    clip = tmp_path / "clip.ts"
    make_ts(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30"], clip, 45)
    v = video("--stats-every", "0", "--latency-ms", "100")
    viewer = recorder(v.url, tmp_path / "v.ts", tmp_path)
    wait_for(lambda: "caller (a viewer until it sends media) connected" in v.text(), 10,
             "the viewer")
    sender = ffmpeg_send(v.url, clip, tmp_path)
    wait_for(lambda: len(v.frames()) >= 5, 10, "the first frames")
    viewer.stop()
    assert sender.wait(30) == 0, sender.text()
    wait_for(lambda: len(v.frames()) == 45, 10, "every frame")
    log = v.text()
    assert "viewer left" in log
    assert log.count("the caller sends media: publisher") == 1, log[-3000:]
    assert "publisher ended after 45 frames" in log


def test_50_connect_disconnect_cycles_leave_nothing(video, infd_bin, tmp_path):
    """Publishers and viewers come and go 50 times: open files and memory
    stay flat. (Under ASan, `make test` runs this with the sanitizer build,
    whose leak check fails the exit status.)"""
    short = tmp_path / "short.ts"
    make_ts(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30"], short, 6)
    # 200 ms of SRT latency, not the fixture's 20: each publisher's last
    # 200 ms are still held by SRT when it leaves, and the next publisher
    # comes within that time; every frame must still arrive. 30 s for the
    # last frames under a sanitizer build.
    v = video("--stats-every", "0", "--latency-ms", "200")
    pid = v.proc.pid
    base_fds = rss0 = None
    for i in range(50):
        viewer = recorder(v.url, tmp_path / "v.ts", tmp_path, name="cv")
        sender = ffmpeg_send(v.url, short, tmp_path, name="cs")
        assert sender.wait(30) == 0, sender.text()
        viewer.stop()
        if i == 4:
            time.sleep(1.0)
            base_fds, rss0 = fds(pid), rss_kb(pid)
    wait_for(lambda: len(v.frames()) == 50 * 6, 30, "every cycle's frames")
    time.sleep(1.0)
    assert v.alive()
    assert fds(pid) <= base_fds + 2, (fds(pid), base_fds)
    if not sanitized(infd_bin):
        assert rss_kb(pid) <= rss0 + 20_000, (rss_kb(pid), rss0)


# ---------------------------------------------------------------------------
# Inside `infd serve`: the detector is an ordinary served model
# ---------------------------------------------------------------------------

def test_serve_video_listen_two_streams_share_the_served_detector(serve, repo_root, ball,
                                                                   tmp_path):
    import requests

    if not (repo_root / "models" / "blazeface" / "1" / "model.onnx").is_file():
        pytest.skip("models/blazeface/1/model.onnx missing: run scripts/setup.sh")
    port = free_udp_port()
    url = f"srt://127.0.0.1:{port}"
    dets = tmp_path / "detections.jsonl"
    srv = serve(repo_root / "models", "--video-listen", url, "--video-latency-ms", "20",
                "--video-detections", dets)
    assert "video: state ready" in srv.log()
    a = ffmpeg_send(url, ball, tmp_path, name="a", extra="&streamid=#!::r=a,m=publish")
    b = ffmpeg_send(url, ball, tmp_path, name="b", extra="&streamid=#!::r=b,m=publish")
    assert a.wait(30) == 0 and b.wait(30) == 0

    def lines():
        return [json.loads(x) for x in dets.read_text().splitlines() if x] if dets.exists() else []

    wait_for(lambda: len(lines()) == 300, 15, "both streams' frames")
    assert {f["stream"] for f in lines()} == {"a", "b"}
    # Every frame was one request to the served model, counted in its
    # statistics like an HTTP or gRPC request.
    stats = requests.get(f"{srv.url}/v2/models/blazeface/stats", timeout=5).json()
    s = stats["model_stats"][0]
    assert int(s["inference_count"]) >= 300
    m = requests.get(srv.metrics_url, timeout=5).text
    assert re.search(r"^infd_video_frames_total 300$", m, re.M)
    streams = requests.get(f"{srv.url}/v2/video/streams", timeout=5).json()
    assert sorted((s["name"], s["frames"]) for s in streams) == [("a", 150), ("b", 150)]
    assert re.search(r"^infd_video_streams 2$", m, re.M)
