"""Streaming speech recognition through `infd serve`: N concurrent sessions
sending 160 ms chunks in real time (simulated) over gRPC ModelStreamInfer,
the latency from a session's last sample to its final transcript (issue
#21: p50 and p99 at 64 and 256 sessions; goal p99 < 50 ms).

Each session is a sequence of the `asr` model kind under the sequence
batcher (oldest strategy, one slot per session). A session's chunk k is sent
when its audio would have been spoken: at start + (k + 1) x chunk, the
sessions' starts spread evenly over one chunk period, as independent
clients are. Its last request carries the last samples and
sequence_end; the final latency is from sending it to receiving its answer
(whose RESULT says is_final). All requests go on one bidirectional stream,
sent by one thread on schedule; "late" says how far the sender fell behind
the schedule (the client shares the machine's cores with the server).

Run:
  /usr/bin/python3 bench/asr_serve.py [--model .cache/models/asr/bench-tdt]
      [--sessions 64,256] [--seconds 4] [--device cpu|cuda] [--infd build/release/infd]

Prints a table per session count and writes JSON with --json FILE. Nothing
here asserts on time; bench/RESULTS.md records the numbers with the command.
"""

import argparse
import heapq
import importlib
import json
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

import serve_common as sc

sys.path.insert(0, str(sc.ROOT / "tests" / "e2e"))
from test_asr_features import speechlike  # noqa: E402


def stubs(tmp, pregenerated=None):
    if pregenerated:  # made elsewhere (a machine without protoc)
        sys.path.insert(0, str(pregenerated))
        return (importlib.import_module("grpc_service_pb2"),
                importlib.import_module("grpc_service_pb2_grpc"))
    plugin = shutil.which("grpc_python_plugin")
    if not shutil.which("protoc") or not plugin:
        sys.exit("protoc / grpc_python_plugin missing (protobuf-compiler, protobuf-compiler-grpc)")
    proto = sc.ROOT / "proto"
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(["protoc", f"--python_out={tmp}", f"--grpc_python_out={tmp}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", f"-I{proto}",
                    str(proto / "grpc_service.proto"), str(proto / "model_config.proto")],
                   check=True)
    sys.path.insert(0, str(tmp))
    return (importlib.import_module("grpc_service_pb2"),
            importlib.import_module("grpc_service_pb2_grpc"))


def pct(xs, p):
    return float(np.percentile(np.asarray(xs), p)) if xs else float("nan")


def write_repo(repo, model, sessions, args):
    d = repo / "speech"
    (d / "1").mkdir(parents=True)
    kind = "KIND_GPU" if args.device == "cuda" else "KIND_CPU"
    (d / "config.pbtxt").write_text(f"""backend: "asr"
max_batch_size: {min(sessions, 256)}
sequence_batching {{
  max_sequence_idle_microseconds: 60000000
  oldest {{ max_candidate_sequences: {sessions} max_queue_delay_microseconds: {args.delay_us} }}
}}
instance_group [{{ kind: {kind} count: 1 }}]
parameters {{ key: "model_dir" value {{ string_value: "{model}" }} }}
parameters {{ key: "chunk_ms" value {{ string_value: "{args.chunk_ms}" }} }}
parameters {{ key: "left_ms" value {{ string_value: "{args.left_ms}" }} }}
parameters {{ key: "right_ms" value {{ string_value: "{args.right_ms}" }} }}
parameters {{ key: "precision" value {{ string_value: "{args.precision}" }} }}
""")


def run(pb, pbg, grpc, srv, sessions, args):
    rate = 16000
    piece = args.chunk_ms * rate // 1000
    n = int(args.seconds * rate) // piece * piece
    audio = [speechlike(n, 100 + s).astype("<f4") for s in range(sessions)]
    chunks = n // piece
    period = args.chunk_ms / 1000.0
    t0 = time.monotonic() + 0.5
    # (due, session, k): chunk k is complete at start + (k + 1) x chunk.
    due = [(t0 + s * period / sessions + (k + 1) * period, s, k)
           for s in range(sessions) for k in range(chunks)]
    heapq.heapify(due)
    sent = {}
    late = [0.0]

    def requests():
        while due:
            when, s, k = heapq.heappop(due)
            wait = when - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                late[0] = max(late[0], -wait)
            req = pb.ModelInferRequest(model_name="speech", id=f"{s}/{k}")
            req.parameters["sequence_id"].int64_param = s + 1
            req.parameters["sequence_start"].bool_param = k == 0
            req.parameters["sequence_end"].bool_param = k == chunks - 1
            req.inputs.add(name="AUDIO", datatype="FP32", shape=[1, piece])
            req.raw_input_contents.append(audio[s][k * piece:(k + 1) * piece].tobytes())
            sent[(s, k)] = time.monotonic()
            yield req

    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(
        srv.grpc_hostport, options=[("grpc.max_receive_message_length", 64 << 20)]))
    before = srv.stats("speech")
    chunk_ms, final_ms, errors = [], [], []
    for resp in stub.ModelStreamInfer(requests(), timeout=600):
        now = time.monotonic()
        if resp.error_message:
            errors.append(resp.error_message)
            continue
        s, k = map(int, resp.infer_response.id.split("/"))
        dt = (now - sent[(s, k)]) * 1000.0
        (final_ms if k == chunks - 1 else chunk_ms).append(dt)
    after = srv.stats("speech")
    delta = sc.stats_delta(before, after)
    return {
        "sessions": sessions, "chunks_per_session": chunks, "chunk_ms": args.chunk_ms,
        "final_p50_ms": pct(final_ms, 50), "final_p99_ms": pct(final_ms, 99),
        "final_max_ms": max(final_ms) if final_ms else float("nan"),
        "chunk_p50_ms": pct(chunk_ms, 50), "chunk_p99_ms": pct(chunk_ms, 99),
        "sender_late_ms": late[0] * 1000.0, "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "executions": delta["executions"], "requests": delta["n"],
        "mean_batch": delta["n"] / delta["executions"] if delta["executions"] else 0.0,
        "compute_infer_us_per_request": delta["compute_infer_us"],
        "queue_us_per_request": delta["queue_us"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--model", default=str(sc.ROOT / ".cache" / "models" / "asr" / "bench-tdt"))
    ap.add_argument("--sessions", default="64,256")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--chunk-ms", type=int, default=160)
    ap.add_argument("--left-ms", type=int, default=1600)
    ap.add_argument("--right-ms", type=int, default=160)
    ap.add_argument("--delay-us", type=int, default=2000,
                    help="the oldest strategy's max_queue_delay_microseconds")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--ready-timeout", type=float, default=120.0,
                    help="seconds the server may take to load (a 0.6B model builds its plans "
                    "and warms up)")
    ap.add_argument("--stubs", help="a folder with grpc_service_pb2(_grpc).py made already")
    ap.add_argument("--save-logs", help="copy each run's server log into this folder "
                    "(with INFD_ASR_DEBUG=1 in the environment it says where each batch's "
                    "time went)")
    args = ap.parse_args()
    import grpc
    rows = []
    with sc.tempdir("asr-serve-") as tmp:
        tmp = pathlib.Path(tmp)
        pb, pbg = stubs(tmp / "stubs", args.stubs)
        for sessions in [int(x) for x in args.sessions.split(",")]:
            repo = tmp / f"repo{sessions}"
            write_repo(repo, pathlib.Path(args.model).resolve(), sessions, args)
            with sc.Serve(args.infd, repo, tmp, ready_timeout=args.ready_timeout) as srv:
                rows.append(run(pb, pbg, grpc, srv, sessions, args))
            if args.save_logs:
                pathlib.Path(args.save_logs).mkdir(parents=True, exist_ok=True)
                shutil.copy(srv.log_path, pathlib.Path(args.save_logs) / f"serve-{sessions}.log")
            r = rows[-1]
            print(f"{sessions} sessions: final p50 {r['final_p50_ms']:.1f} ms, p99 "
                  f"{r['final_p99_ms']:.1f} ms; chunk p50 {r['chunk_p50_ms']:.1f} ms, p99 "
                  f"{r['chunk_p99_ms']:.1f} ms; mean batch {r['mean_batch']:.1f}; sender late "
                  f"{r['sender_late_ms']:.0f} ms; errors {r['errors']} {r['first_error']}",
                  flush=True)
    sc.print_table(["sessions", "final p50 ms", "final p99 ms", "chunk p50 ms", "chunk p99 ms",
                    "mean batch", "engine µs/chunk", "sender late ms"],
                   [[r["sessions"], f"{r['final_p50_ms']:.1f}", f"{r['final_p99_ms']:.1f}",
                     f"{r['chunk_p50_ms']:.1f}", f"{r['chunk_p99_ms']:.1f}",
                     f"{r['mean_batch']:.1f}", f"{r['compute_infer_us_per_request']:.0f}",
                     f"{r['sender_late_ms']:.0f}"] for r in rows])
    if args.json:
        sc.write_json(args.json, {"machine": sc.machine_facts(args.infd), "args": vars(args),
                                  "rows": rows})


if __name__ == "__main__":
    main()
