"""An SRT publisher and viewer in Python, through libsrt (ctypes), for
machines without FFmpeg's or GStreamer's command-line tools (the GPU
machine gets libsrt with infd's bundle, not the tools).

    send_ts(port, path, streamid=None)      sends a TS file in real time
    Receiver(port, path, streamid=None)     keeps what the server sends
    count_ts_frames(path)                   video PES packets in a TS file

The sender paces 1316-byte messages (7 TS packets) by the video PTS in the
file, as `ffmpeg -re` does; the protocol is libsrt's own.
"""

import ctypes
import ctypes.util
import os
import struct
import threading
import time

SRTO_SNDSYN, SRTO_RCVSYN, SRTO_RCVTIMEO = 1, 2, 14
SRTO_LATENCY, SRTO_STREAMID, SRTO_TRANSTYPE = 23, 46, 50
SRTT_LIVE = 0
MSG = 1316


def _lib():
    for name in ("libsrt-gnutls.so.1.5", "libsrt.so.1.5", ctypes.util.find_library("srt-gnutls"),
                 ctypes.util.find_library("srt")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
    raise OSError("libsrt not found (Debian libsrt1.5-gnutls)")


_srt = None


def srt():
    global _srt
    if _srt is None:
        _srt = _lib()
        _srt.srt_startup()
        _srt.srt_getlasterror_str.restype = ctypes.c_char_p
    return _srt


def _connect(port, streamid, latency_ms):
    lib = srt()
    s = lib.srt_create_socket()

    def opt(o, value):
        v = ctypes.c_int(value)
        if lib.srt_setsockflag(s, o, ctypes.byref(v), 4) != 0:
            raise OSError(lib.srt_getlasterror_str().decode())

    opt(SRTO_TRANSTYPE, SRTT_LIVE)
    opt(SRTO_LATENCY, latency_ms)
    if streamid:
        b = streamid.encode()
        if lib.srt_setsockflag(s, SRTO_STREAMID, b, len(b)) != 0:
            raise OSError(lib.srt_getlasterror_str().decode())
    sa = struct.pack("<HH4s8x", 2, ((port & 0xff) << 8) | (port >> 8), bytes([127, 0, 0, 1]))
    if lib.srt_connect(s, sa, len(sa)) != 0:
        err = lib.srt_getlasterror_str().decode()
        lib.srt_close(s)
        raise ConnectionError(f"srt connect to 127.0.0.1:{port}: {err}")
    return s


def _video_pts(pkt, video_pid):
    """The PTS (90 kHz) of a TS packet that starts a video PES, else None."""
    pid = ((pkt[1] & 0x1f) << 8) | pkt[2]
    if not pkt[1] & 0x40 or (video_pid is not None and pid != video_pid):
        return None, pid
    afc = (pkt[3] >> 4) & 3
    off = 4 + (1 + pkt[4] if afc & 2 else 0)
    if afc & 1 == 0 or off + 14 > 188:
        return None, pid
    p = pkt[off:]
    if p[0:3] != b"\0\0\1" or not 0xe0 <= p[3] <= 0xef or not p[7] & 0x80:
        return None, pid
    pts = (((p[9] >> 1) & 7) << 30) | (p[10] << 22) | ((p[11] >> 1) << 15) | (p[12] << 7) | \
        (p[13] >> 1)
    return pts, pid


def send_ts(port, path, streamid=None, latency_ms=20, sent=None):
    """Sends the TS file at `path` in real time; returns the frames sent.
    With `sent` (a dict), records each video frame's PTS -> the wall time
    (time.time()) its first packet was handed to libsrt."""
    data = open(path, "rb").read()
    lib = srt()
    s = _connect(port, streamid, latency_ms)
    t0 = None
    pts0 = None
    video_pid = None
    frames = 0
    try:
        for i in range(0, len(data), MSG):
            chunk = data[i:i + MSG]
            for j in range(0, len(chunk) - 187, 188):
                pts, pid = _video_pts(chunk[j:j + 188], video_pid)
                if pts is None:
                    continue
                video_pid = pid
                frames += 1
                if pts0 is None:
                    pts0, t0 = pts, time.monotonic()
                due = t0 + (pts - pts0) / 90000
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if sent is not None:
                    sent[pts] = time.time()
            if lib.srt_sendmsg2(s, chunk, len(chunk), None) < 0:
                raise OSError(f"srt send: {lib.srt_getlasterror_str().decode()}")
        time.sleep(0.3)  # let the last messages leave before closing
    finally:
        lib.srt_close(s)
    return frames


class Receiver:
    """Connects as a viewer and writes every message to `path` until stop()."""

    def __init__(self, port, path, streamid=None, latency_ms=20):
        """`arrived` maps each video frame's PTS to the wall time its first
        packet arrived (the stream carries the sender's PTS through)."""
        self.arrived = {}
        self.sock = _connect(port, streamid, latency_ms)
        timeout = ctypes.c_int(200)
        srt().srt_setsockflag(self.sock, SRTO_RCVTIMEO, ctypes.byref(timeout), 4)
        self.path = path
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        lib = srt()
        buf = ctypes.create_string_buffer(1500)
        with open(self.path, "wb") as f:
            while not self.stopping:
                n = lib.srt_recvmsg(self.sock, buf, 1500)
                if n > 0:
                    now = time.time()
                    data = buf.raw[:n]
                    f.write(data)
                    for j in range(0, n - 187, 188):
                        pts, pid = _video_pts(data[j:j + 188], None)
                        if pts is not None and pts not in self.arrived:
                            self.arrived[pts] = now
                elif lib.srt_getlasterror(None) not in (6002, 6003):  # not a timeout
                    break

    def stop(self):
        self.stopping = True
        self.thread.join()
        srt().srt_close(self.sock)


def count_ts_frames(path):
    """Video PES packets in a TS file: frames, for streams with one frame
    a PES (what x264 and infd write)."""
    if not os.path.exists(path):
        return 0
    data = open(path, "rb").read()
    n, video_pid = 0, None
    for j in range(0, len(data) - 187, 188):
        if data[j] != 0x47:
            continue
        pts, pid = _video_pts(data[j:j + 188], video_pid)
        if pts is not None:
            video_pid = pid
            n += 1
    return n
