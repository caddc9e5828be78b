#!/usr/bin/python3
"""What TLS costs in serving throughput (issue #24: at most 10% on a CPU
model): the same repository served twice at once, one `infd serve` plain and
one with TLS on HTTP and gRPC (--http-ssl-cert/-key, --grpc-use-ssl), each
driven by `infd perf` (with --ssl against the TLS one), in interleaved
rounds (which goes first alternating) so that the machine's drift falls on
both alike.

    /usr/bin/python3 bench/tls_cost.py [--infd build/release/infd]
        [--concurrency 4] [--seconds 2] [--rounds 5] [--pin]
        [--models add_sub,blazeface,mobilenetv2,resnet50] [--json FILE]

Models: add_sub (1x16 FP32, the frontend's cost alone: the worst case for
TLS), BlazeFace (1x3x128x128 FP32, 196 KB a request), MobileNetV2 and
ResNet-50 (1x3x224x224 FP32, 602 KB a request; the ONNX files scripts/setup.sh
caches in .cache/models). HTTP binary and gRPC unary, one HTTP loop and one
gRPC thread in each server. Prints per model and protocol the median over
rounds of throughput and p99 for plain and TLS, and TLS's cost in throughput.

It also prints each server's own CPU time a request (user and system time of
the process from /proc, over the requests its statistics counted in the
run, warm-up included), and the cost that follows from it: 1 - plain/TLS,
the throughput a server bound by its CPU loses. On a machine where client and
servers share the cores, this is the steadier figure: it does not depend on
how the cores were shared. "batch" is the mean batch the dynamic batcher
formed (requests over executions): a cheaper frontend keeps more requests
queued, and larger batches cost less a request.

--pin runs both servers on CPU 1 and the client on CPU 0 (on a 2-core
machine, client and server otherwise share the cores and each run's share
differs: the unpinned rows scatter by about ±10 points).
"""

import argparse
import os
import pathlib
import statistics
import sys
import tempfile

import serve_common as sc

sys.path.insert(0, str(sc.ROOT / "tests" / "e2e"))
from pki import have_openssl, make_pki  # noqa: E402


def cpu_seconds(pid):
    """User and system CPU time of process `pid`, all its threads, in s."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def served(srv, model):
    """Requests of `model` the server counted as successful, and the
    model's executions (batches) so far."""
    stats = srv.stats(model)
    return int(stats["inference_stats"]["success"]["count"]), int(stats["execution_count"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pin", action="store_true",
                    help="servers on CPU 1, the client on CPU 0")
    ap.add_argument("--models", default="add_sub,blazeface",
                    help="comma-separated: add_sub, blazeface, mobilenetv2, resnet50")
    ap.add_argument("--json")
    a = ap.parse_args()
    models = a.models.split(",")
    for m in models:
        if m not in ("add_sub", "blazeface", "mobilenetv2", "resnet50"):
            sys.exit(f"--models: unknown model {m!r}")
    if a.pin and os.cpu_count() < 2:
        sys.exit("--pin needs two CPUs")
    if not have_openssl():
        sys.exit("the openssl tool is missing (scripts/setup.sh installs it)")
    cache = pathlib.Path(os.environ.get("INFD_CACHE") or sc.ROOT / ".cache")
    with tempfile.TemporaryDirectory(prefix="infd-tls-") as tmp:
        tmp = pathlib.Path(tmp)
        pki = make_pki(tmp)
        repo = tmp / "models"
        if "add_sub" in models:
            sc.model_repo.add_sub(repo)
        if "blazeface" in models:
            sc.model_repo.blazeface(repo, cache)
        for m in ("mobilenetv2", "resnet50"):
            if m in models:
                onnx = cache / "models" / f"{m}.onnx"
                if not onnx.exists():
                    sys.exit(f"{onnx} is missing (scripts/setup.sh caches it)")
                (repo / m / "1").mkdir(parents=True)
                os.symlink(onnx.resolve(), repo / m / "1" / "model.onnx")
        common = ["--http-threads", 1, "--grpc-threads", 1]
        tls = ["--http-ssl-cert", pki / "server.pem", "--http-ssl-key", pki / "server.key",
               "--grpc-use-ssl", "true", "--grpc-server-cert", pki / "server.pem",
               "--grpc-server-key", pki / "server.key"]
        (tmp / "plain").mkdir()
        (tmp / "tls").mkdir()
        if a.pin:
            os.sched_setaffinity(0, {1})  # the servers inherit it
        with sc.Serve(a.infd, repo, tmp / "plain", *common) as plain, \
                sc.Serve(a.infd, repo, tmp / "tls", *common, *tls,
                         https_ca=pki / "ca.pem") as secure:
            if a.pin:
                os.sched_setaffinity(0, {0})  # infd perf inherits it
            runs = {}
            for r in range(a.rounds):
                for model in models:
                    for proto in ("http", "grpc"):
                        # Which goes first alternates by round: the one that
                        # runs second meets what the first left (caches, the
                        # other server's threads winding down).
                        pair = (("plain", plain), ("tls", secure))
                        for name, srv in (pair if r % 2 == 0 else pair[::-1]):
                            port = srv.http_port if proto == "http" else srv.grpc_port
                            args = ["--model", model, "--url", f"127.0.0.1:{port}",
                                    "--protocol", proto, "--concurrency-range", a.concurrency,
                                    "--measurement-ms", int(a.seconds * 1000),
                                    "--warmup-ms", 200]
                            if proto == "http":
                                args.append("--binary")
                            if name == "tls":
                                args += ["--ssl", "--ssl-ca", pki / "ca.pem"]
                            (n0, e0), c0 = served(srv, model), cpu_seconds(srv.proc.pid)
                            row = sc.perf_row(sc.run_perf(a.infd, args, tmp / "perf.csv")[0])
                            c1, (n1, e1) = cpu_seconds(srv.proc.pid), served(srv, model)
                            row["server_cpu_us"] = 1e6 * (c1 - c0) / max(1, n1 - n0)
                            row["mean_batch"] = (n1 - n0) / max(1, e1 - e0)
                            runs.setdefault((model, proto, name), []).append(row)
    rows, out = [], []
    for model in models:
        for proto in ("http", "grpc"):
            p = runs[(model, proto, "plain")]
            t = runs[(model, proto, "tls")]
            pt = statistics.median(x["throughput"] for x in p)
            tt = statistics.median(x["throughput"] for x in t)
            p99p = statistics.median(x["p99_us"] for x in p)
            p99t = statistics.median(x["p99_us"] for x in t)
            cost = 100.0 * (1.0 - tt / pt)
            cp = statistics.median(x["server_cpu_us"] for x in p)
            ct = statistics.median(x["server_cpu_us"] for x in t)
            cpu_cost = 100.0 * (1.0 - cp / ct)
            bp = statistics.median(x["mean_batch"] for x in p)
            bt = statistics.median(x["mean_batch"] for x in t)
            rows.append([model, proto, f"{pt:.0f}", f"{tt:.0f}", f"{cost:.1f}%",
                         f"{p99p:.0f}", f"{p99t:.0f}", f"{cp:.0f}", f"{ct:.0f}",
                         f"{cpu_cost:.1f}%", f"{bp:.2f}", f"{bt:.2f}"])
            out.append({"model": model, "protocol": proto, "plain_per_s": pt, "tls_per_s": tt,
                        "cost_pct": cost, "plain_p99_us": p99p, "tls_p99_us": p99t,
                        "plain_server_cpu_us": cp, "tls_server_cpu_us": ct,
                        "cpu_cost_pct": cpu_cost, "plain_mean_batch": bp, "tls_mean_batch": bt,
                        "runs": {"plain": p, "tls": t}})
    print(f"concurrency {a.concurrency}, {a.seconds} s a run, median of {a.rounds} rounds"
          + (", servers on CPU 1, client on CPU 0" if a.pin else ""))
    sc.print_table(["model", "protocol", "plain /s", "TLS /s", "TLS cost", "plain p99 µs",
                    "TLS p99 µs", "plain CPU µs", "TLS CPU µs", "TLS cost (CPU)",
                    "plain batch", "TLS batch"], rows)
    if a.json:
        sc.write_json(a.json, {"concurrency": a.concurrency, "seconds": a.seconds,
                               "rounds": a.rounds, "pin": a.pin, "rows": out,
                               "machine": sc.machine_facts(a.infd)})


if __name__ == "__main__":
    main()
