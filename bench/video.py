#!/usr/bin/python3
"""Per-frame processing time of `infd video` against its floor, a GStreamer
pipeline that only decodes and re-encodes the same stream.

    python3 bench/video.py [--infd build/release/infd] [--device cpu|cuda]
                           [--sizes 640x640,1280x720] [--seconds 10]
                           [--streams 1] [--no-floor] [--json FILE]

For each size a test stream is made with FFmpeg: the astronaut photo
(.cache/media/astronaut.png) moving over FFmpeg's testsrc2 pattern at
30 fps, H.264 as the seed's senders make it (libx264 ultrafast,
zerolatency, no B-frames, a key frame a second). It is sent in real time
(ffmpeg -re) over SRT on loopback, and what comes back is recorded with
srt-live-transmit.

- infd: `infd video`'s detections JSON gives every frame's stage times;
  "process" is DeepStream's measure, from the packet going into the decoder
  to the encoder giving the frame's packet (decode, letterbox, BlazeFace,
  NMS, drawing, encode).
- floor: `srtsrc ! tsdemux ! h264parse ! avdec_h264 ! x264enc
  tune=zerolatency ! mpegtsmux ! srtsink`, with x264enc set as infd's
  encoder is (ultrafast, 4000 kbit/s, key frame every 30). GStreamer's
  latency tracer (flags=element) times each element per buffer; the floor's
  per-frame processing is avdec_h264's time plus x264enc's.

With --client libsrt, glass-to-glass time is measured too: the sender
notes when each frame (by PTS) leaves, the viewer when it comes back (the
output keeps the input's PTS), SRT's latency in both hops included.

With --soak SECONDS, one stream runs that long instead (the input looped),
and infd's RSS is sampled every 10 s: frames expected, in and out, and the
memory over time.

With --streams N, N publishers send at once (stream IDs s0..sN-1), each
with its own viewer; every stream must get out every frame it sent.
Frames in and out are counted for each run. Prints a table and, with
--json, writes the numbers.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import srt_client

REPO = pathlib.Path(__file__).resolve().parents[1]


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_stream(png, w, h, seconds, out, kbps=4000):
    """The astronaut (four fifths of the frame high, so the face is about a
    seventh of it) moving over testsrc2."""
    fh = h * 4 // 5
    subprocess.run(
        ["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
         f"testsrc2=size={w}x{h}:rate=30", "-loop", "1", "-i", str(png), "-filter_complex",
         f"[1:v]scale={fh}:{fh}[face];[0:v][face]overlay="
         f"x='{(w - fh) // 2}+{(w - fh) // 2}*sin(t)':y='{(h - fh) // 2}+{(h - fh) // 2}*cos(t)',"
         "format=yuv420p",
         "-t", str(seconds), "-r", "30", "-c:v", "libx264", "-preset", "ultrafast", "-tune",
         "zerolatency", "-g", "30", "-bf", "0", "-b:v", f"{kbps}k", "-f", "mpegts", str(out)],
        check=True)


def count_frames(ts):
    if not ts.exists() or ts.stat().st_size == 0:
        return 0
    if not shutil.which("ffprobe"):
        return srt_client.count_ts_frames(str(ts))
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
                        "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", str(ts)],
                       capture_output=True, text=True)
    m = re.search(r"\d+", r.stdout)
    return int(m.group()) if m else 0


def start(cmd, log, env=None):
    return subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, env=env)


def stop(p, sig=signal.SIGINT):
    if p.poll() is None:
        os.killpg(p.pid, sig)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def with_query(url, q):
    return f"{url}&{q}" if "?" in url else f"{url}?{q}"


def recorder(url, out, log):
    """srt-live-transmit keeps what the server sends, byte for byte."""
    return start(["sh", "-c", 'exec srt-live-transmit -q "$0" file://con > "$1"',
                  with_query(url, "latency=20"), str(out)], log)


def send(url, ts, log):
    """FFmpeg sends a TS file in real time, unchanged (ffmpeg's SRT latency
    is in microseconds)."""
    return start(["ffmpeg", "-nostdin", "-v", "error", "-re", "-i", str(ts), "-c", "copy",
                  "-f", "mpegts", with_query(url, "latency=20000&pkt_size=1316")], log)


def stats(values_ms):
    a = np.array(values_ms, dtype=np.float64)
    if len(a) == 0:
        return {}
    return {"n": int(len(a)), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max()), "mean": float(a.mean())}


def run_infd(args, ts, tmp, streams):
    port = free_udp_port()
    url = f"srt://127.0.0.1:{port}"
    dets = tmp / "detections.jsonl"
    log = tmp / "infd.log"
    cmd = [args.infd, "video", "--listen", url, "--model-repository", str(REPO / "models"),
           "--latency-ms", "20", "--detections", str(dets), "--stats-every", "0",
           "--device", args.device, *args.infd_arg]
    srv = start(cmd, log)
    deadline = time.time() + 120
    while "state ready" not in log.read_text(errors="replace"):
        if srv.poll() is not None or time.time() > deadline:
            sys.exit(f"infd video did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    recs, outs, sends = [], [], []
    lib = args.client == "libsrt"
    for i in range(streams):
        out = tmp / f"out{i}.ts"
        outs.append(out)
        if lib:
            recs.append(srt_client.Receiver(port, str(out), f"#!::r=s{i},m=request"))
        else:
            recs.append(recorder(f"{url}?streamid=#!::r=s{i},m=request", out,
                                 tmp / f"rec{i}.log"))
    time.sleep(1.0)
    sent = [{} for _ in range(streams)]
    for i in range(streams):
        if lib:
            t = threading.Thread(target=srt_client.send_ts,
                                 args=(port, str(ts), f"#!::r=s{i},m=publish", 20, sent[i]))
            t.start()
            sends.append(t)
        else:
            sends.append(send(f"{url}?streamid=#!::r=s{i},m=publish", ts, tmp / f"send{i}.log"))
    for p in sends:
        if lib:
            p.join(timeout=args.seconds + 60)
        else:
            p.wait(timeout=args.seconds + 60)
    time.sleep(1.5)
    glass = []
    for i, p in enumerate(recs):
        if lib:
            p.stop()
            # Glass to glass: the sender's PTS comes back in the output (the
            # first publisher's timestamps are kept), so sent and arrived
            # times pair up by PTS. SRT's latency (20 ms each way) is in it.
            glass += [(p.arrived[k] - t) * 1000 for k, t in sorted(sent[i].items())[30:]
                      if k in p.arrived]
        else:
            stop(p)
    stop(srv, signal.SIGTERM)
    text = log.read_text(errors="replace")
    if args.save:
        save = pathlib.Path(args.save) / f"{ts.stem}_{args.device}_x{streams}"
        save.mkdir(parents=True, exist_ok=True)
        for f in [dets, log, *outs]:
            shutil.copy(f, save / f.name)
    frames = [json.loads(x) for x in dets.read_text().splitlines() if x]
    per_stream = {}
    for f in frames:
        per_stream.setdefault(f["stream"], []).append(f)
    # The first second of each stream warms the encoder and caches up.
    body = [f for fs in per_stream.values() for f in fs[30:]]
    stages = {k: stats([f["latency_us"][k] / 1000 for f in body])
              for k in frames[0]["latency_us"]} if frames else {}
    # The input's key frames decode slowest (an IDR is several times a P
    # frame's bytes): process time apart for them and for the rest.
    by_key = {name: stats([f["latency_us"]["process"] / 1000 for f in body
                           if f.get("input_key") == want])
              for name, want in (("input_key_frames", True), ("other_frames", False))}
    got = {f"s{i}": count_frames(outs[i]) for i in range(streams)}
    frames_in = {k: len(v) for k, v in per_stream.items()}
    return {"stages_ms": stages, "process_by_input_key_ms": by_key,
            "frames_in": frames_in, "frames_out": got,
            "glass_to_glass_ms": stats(glass),
            "gpu": "decoded on the GPU (NVDEC)" in text,
            "encoder": (re.search(r"video: encoder: [^\n]*", text) or [""])[0]}


def run_floor(ts, tmp):
    pin, pout = free_udp_port(), free_udp_port()
    log = tmp / "gst.log"
    env = dict(os.environ, GST_TRACERS="latency(flags=element)", GST_DEBUG="GST_TRACER:7",
               GST_DEBUG_NO_COLOR="1")
    gst = start(["gst-launch-1.0", "srtsrc", f"uri=srt://127.0.0.1:{pin}?mode=listener",
                 "latency=20", "!", "tsdemux", "!", "h264parse", "!", "avdec_h264", "!",
                 "x264enc", "tune=zerolatency", "speed-preset=ultrafast", "bitrate=4000",
                 "key-int-max=30", "!", "mpegtsmux", "!", "srtsink",
                 f"uri=srt://127.0.0.1:{pout}?mode=listener", "latency=20"], log, env=env)
    time.sleep(1.0)
    out = tmp / "floor.ts"
    rec = recorder(f"srt://127.0.0.1:{pout}", out, tmp / "floor_rec.log")
    time.sleep(0.5)
    s = send(f"srt://127.0.0.1:{pin}", ts, tmp / "floor_send.log")
    s.wait(timeout=600)
    time.sleep(1.5)
    stop(rec)
    stop(gst)
    times = {"avdec_h264": [], "x264enc": []}
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"element-latency, .*element=\(string\)(avdec_h264|x264enc)\S*, .*"
                      r"time=\(guint64\)(\d+)", line)
        if m:
            times[m.group(1)].append(int(m.group(2)) / 1e6)
    n = min(len(times["avdec_h264"]), len(times["x264enc"]))
    per_frame = [times["avdec_h264"][i] + times["x264enc"][i] for i in range(30, n)]
    return {"process_ms": stats(per_frame), "decode_ms": stats(times["avdec_h264"][30:]),
            "encode_ms": stats(times["x264enc"][30:]), "frames_out": count_frames(out),
            "frames_traced": n}


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run_soak(args, ts, tmp):
    """One stream for --soak seconds: the input looped by FFmpeg (timestamps
    kept continuous), infd's RSS sampled every 10 s, frames counted."""
    port = free_udp_port()
    url = f"srt://127.0.0.1:{port}"
    dets = tmp / "soak.jsonl"
    log = tmp / "soak.log"
    srv = start([args.infd, "video", "--listen", url, "--model-repository", str(REPO / "models"),
                 "--latency-ms", "20", "--detections", str(dets), "--stats-every", "1800",
                 "--device", args.device, *args.infd_arg], log)
    while "state ready" not in log.read_text(errors="replace"):
        if srv.poll() is not None:
            sys.exit(f"infd video did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    out = tmp / "soak_out.ts"
    rec = recorder(url, out, tmp / "soak_rec.log")
    time.sleep(1.0)
    sender = start(["ffmpeg", "-nostdin", "-v", "error", "-re", "-stream_loop", "-1", "-i",
                    str(ts), "-t", str(args.soak), "-c", "copy", "-f", "mpegts",
                    with_query(url, "latency=20000&pkt_size=1316")], tmp / "soak_send.log")
    rss = []
    t0 = time.time()
    while sender.poll() is None:
        rss.append((round(time.time() - t0), rss_kb(srv.pid)))
        time.sleep(10)
    time.sleep(1.5)
    stop(rec)
    stop(srv, signal.SIGTERM)
    frames = sum(1 for x in dets.read_text().splitlines() if x)
    lat = [json.loads(x)["latency_us"]["process"] / 1000 for x in dets.read_text().splitlines()
           if x][30:]
    return {"seconds": args.soak, "frames_expected": args.soak * 30, "frames_in": frames,
            "frames_out": count_frames(out), "rss_kb": rss, "process_ms": stats(lat),
            "exit": srv.returncode}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(REPO / "build/release/infd"))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--sizes", default="640x640,1280x720")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--no-floor", action="store_true")
    ap.add_argument("--astronaut", default=str(REPO / ".cache/media/astronaut.png"))
    ap.add_argument("--client", choices=("tools", "libsrt"),
                    help="who sends and views: FFmpeg and srt-live-transmit (tools, the "
                         "default where they exist) or bench/srt_client.py over libsrt")
    ap.add_argument("--inputs", help="a folder with the test streams made already "
                                     "(in_WxH.ts, e.g. by --keep-inputs on another machine)")
    ap.add_argument("--soak", type=int, help="instead: one stream for this many seconds "
                                             "(the first size), RSS and frames counted")
    ap.add_argument("--save", help="copy each run's output streams and detections here")
    ap.add_argument("--input-kbps", type=int, default=4000, help="the test streams' bit rate")
    ap.add_argument("--keep-inputs", help="copy the test streams made here to this folder")
    ap.add_argument("--infd-arg", action="append", default=[],
                    help="one more argument for infd video (repeat: --infd-arg=--encoder-threads "
                         "--infd-arg=4)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not args.client:
        args.client = "tools" if shutil.which("ffmpeg") else "libsrt"
    tools = ("srt-live-transmit", "ffmpeg") if args.client == "tools" else ()
    tools += () if args.inputs else ("ffmpeg",)
    tools += () if args.no_floor else ("gst-launch-1.0",)
    for tool in tools:
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (scripts/setup.sh installs it)")
    results = {"device": args.device, "streams": args.streams, "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="infd-video-bench-") as d:
        tmp = pathlib.Path(d)
        for size in args.sizes.split(","):
            w, h = map(int, size.split("x"))
            ts = tmp / f"in_{size}.ts"
            if args.inputs:
                shutil.copy(pathlib.Path(args.inputs) / ts.name, ts)
            else:
                make_stream(args.astronaut, w, h, args.seconds, ts, args.input_kbps)
            if args.keep_inputs:
                os.makedirs(args.keep_inputs, exist_ok=True)
                shutil.copy(ts, pathlib.Path(args.keep_inputs) / ts.name)
            if args.soak:
                r = run_soak(args, ts, tmp)
                results["soak"] = r
                rss = [kb for _, kb in r["rss_kb"]]
                print(f"soak {size} {args.device} {r['seconds']} s: frames expected "
                      f"{r['frames_expected']}, in {r['frames_in']}, out {r['frames_out']}; "
                      f"RSS first {rss[0] if rss else 0} kB, after 1 min "
                      f"{rss[min(6, len(rss) - 1)] if rss else 0} kB, last "
                      f"{rss[-1] if rss else 0} kB, max {max(rss) if rss else 0} kB; process "
                      f"p50 {r['process_ms']['p50']:.2f} p99 {r['process_ms']['p99']:.2f} ms; "
                      f"exit {r['exit']}")
                break
            row = {"infd": run_infd(args, ts, tmp, args.streams)}
            if not args.no_floor:
                row["floor"] = run_floor(ts, tmp)
            results["sizes"][size] = row
            st = row["infd"]["stages_ms"]
            print(f"{size} {args.device} x{args.streams}: infd process p50 "
                  f"{st['process']['p50']:.2f} p99 {st['process']['p99']:.2f} max "
                  f"{st['process']['max']:.2f} ms; frames in {row['infd']['frames_in']} out "
                  f"{row['infd']['frames_out']}")
            for name, s in row["infd"]["process_by_input_key_ms"].items():
                if s:
                    print(f"   process on {name.replace('_', ' ')} ({s['n']}): p50 "
                          f"{s['p50']:.2f} p99 {s['p99']:.2f} max {s['max']:.2f} ms")
            print("   infd stage means (ms): " + ", ".join(
                f"{k} {v['mean']:.3f}" for k, v in st.items() if k != "process"))
            print(f"   {row['infd']['encoder']}")
            g = row["infd"]["glass_to_glass_ms"]
            if g:
                print(f"   glass to glass (sender's send to viewer's arrival, SRT latency 20 ms "
                      f"each way included): p50 {g['p50']:.1f} p99 {g['p99']:.1f} max "
                      f"{g['max']:.1f} ms")
            if "floor" in row:
                fl = row["floor"]
                print(f"   floor (GStreamer decode + x264enc) p50 {fl['process_ms']['p50']:.2f} "
                      f"p99 {fl['process_ms']['p99']:.2f} max {fl['process_ms']['max']:.2f} ms "
                      f"(decode p50 {fl['decode_ms']['p50']:.2f}, encode p50 "
                      f"{fl['encode_ms']['p50']:.2f}); frames out {fl['frames_out']}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
