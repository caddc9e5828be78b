#!/usr/bin/env python3
"""What `infd router` adds: an identity model with 4 KB tensors (FP32
[1024]) on one `infd serve` worker, driven by `infd perf --binary` over HTTP
directly and through an `infd router` in front of it, in one run, at
concurrency 1 and 8. etcd (Debian's etcd-server, one member) holds the
worker's registration.

Goals (issue #23): <= 50 us added at p50 and <= 250 us at p99 (concurrency
1); router throughput >= 20,000 requests/s per core.

With --elements N the tensors are FP32 [N] instead (65536: 256 KiB, where
the router copies no payload byte over HTTP; docs/CLUSTER.md).

Usage: python3 bench/router.py [--measurement-ms 4000] [--elements 1024]
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_common import DEFAULT_INFD, Serve, free_port, perf_row, run_perf  # noqa: E402


def identity_model(root, elements):
    import onnx
    from onnx import TensorProto, helper
    d = pathlib.Path(root) / "identity"
    (d / "1").mkdir(parents=True)
    g = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "identity",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", elements])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                         ["N", elements])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              str(d / "1" / "model.onnx"))
    (d / "config.pbtxt").write_text('name: "identity"\nmax_batch_size: 8\n'
                                    "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
                                    "instance_group [ { kind: KIND_CPU } ]\n")


def ready(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(DEFAULT_INFD))
    ap.add_argument("--measurement-ms", type=int, default=4000)
    ap.add_argument("--elements", type=int, default=1024, help="FP32 elements per tensor")
    ap.add_argument("--json")
    args = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="infd-router-bench-") as tmp:
        tmp = pathlib.Path(tmp)
        cport, pport = free_port(), free_port()
        etcd = subprocess.Popen(
            ["etcd", "--data-dir", str(tmp / "etcd"), "--listen-client-urls",
             f"http://127.0.0.1:{cport}", "--advertise-client-urls", f"http://127.0.0.1:{cport}",
             "--listen-peer-urls", f"http://127.0.0.1:{pport}", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        router = None
        try:
            identity_model(tmp / "repo", args.elements)
            endpoint = f"http://127.0.0.1:{cport}"
            with Serve(args.infd, tmp / "repo", tmp, "--cluster", endpoint, "--advertise",
                       f"tcp://127.0.0.1:{free_port()}") as worker:
                hport = free_port()
                router = subprocess.Popen(
                    [args.infd, "router", "--etcd", endpoint, "--host", "127.0.0.1",
                     "--http-port", str(hport), "--grpc-port", "-1", "--metrics-port", "-1",
                     "--log-level", "warn"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline = time.time() + 60
                while not ready(f"http://127.0.0.1:{hport}/v2/models/identity/ready"):
                    if time.time() > deadline or router.poll() is not None:
                        sys.exit("the router never served the model")
                    time.sleep(0.1)
                for conc in (1, 8):
                    for side, hostport in (("direct", worker.hostport),
                                           ("router", f"127.0.0.1:{hport}")):
                        row = perf_row(run_perf(args.infd, [
                            "--model", "identity", "--url", hostport, "--binary",
                            "--concurrency-range", f"{conc}:{conc}:1",
                            "--measurement-ms", args.measurement_ms],
                            tmp / f"{side}{conc}.csv")[0])
                        out[f"{side}@{conc}"] = row
                        print(f"{side:6s} concurrency {conc}: {row['throughput']:9.1f} infer/s, "
                              f"p50 {row['p50_us']:7.1f} us, p99 {row['p99_us']:7.1f} us",
                              flush=True)
        finally:
            if router:
                router.terminate()
                router.wait(timeout=30)
            etcd.terminate()
            etcd.wait(timeout=30)
    p50 = out["router@1"]["p50_us"] - out["direct@1"]["p50_us"]
    p99 = out["router@1"]["p99_us"] - out["direct@1"]["p99_us"]
    print(f"router adds {p50:.1f} us at p50 and {p99:.1f} us at p99 (concurrency 1); "
          f"{out['router@8']['throughput'] / out['direct@8']['throughput']:.2f} of the direct "
          f"throughput at 8")
    out["added_p50_us"], out["added_p99_us"] = p50, p99
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
