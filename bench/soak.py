#!/usr/bin/python3
"""Soak test of `infd serve` (issue #24): HTTP, gRPC and raw requests at 80%
of the maximum stable rate, mixed with model load/unload cycles, with the
server's RSS sampled after every window.

    /usr/bin/python3 bench/soak.py [--minutes 10 | --seconds 30]
        [--cycles 1000] [--infd build/release/infd] [--json FILE]

1. The maximum stable rate: three closed-loop `infd perf` clients at once
   (HTTP binary, gRPC, raw framed; add_sub, 2 connections each) run in
   windows until three windows in a row are within 10% of each other in
   throughput (perf_analyzer's stability rule); their mean is the maximum.
2. The soak: windows of 10 s (5 s for runs under 2 minutes), each three
   open-loop `infd perf --request-rate` clients at 80% of their protocol's
   share of the maximum, while a thread loads and unloads a second model
   (`cycler`) through the repository API without pause. RSS (VmRSS of the
   server) is read after each window.
3. `--cycles` load/unload cycles of `cycler` alone, RSS before and after
   (after 50 cycles of warm-up: first-time allocations are not growth).

Goals, reported as PASS/FAIL rows (nothing here exits non-zero on them;
tests/e2e/test_soak.py asserts the ones that are not about time):
RSS growth over the second half <= 16 MiB; 0 errors (requests and cycles);
p99 drift <= 10% (per protocol, the median p99 of the last half of the
windows against the first half's); RSS growth over the cycles <= 8 MiB.
"""

import argparse
import csv
import json
import pathlib
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import serve_common as sc

PROTOCOLS = {
    # name: infd perf arguments after --model (the url filled in per server)
    "http": lambda srv: ["--url", srv.hostport, "--binary"],
    "grpc": lambda srv: ["--url", srv.grpc_hostport, "--protocol", "grpc"],
    "raw": lambda srv: ["--unix", str(srv.raw_dir / "add_sub.framed.sock"), "--framed",
                        "--metadata-url", srv.hostport],
}


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def perf_window(infd, srv, tmp, ms, rate=None, connections=2):
    """One window of the three protocols at once; {protocol: CSV row}."""
    procs = {}
    for name, args in PROTOCOLS.items():
        cmd = [str(infd), "perf", "--model", "add_sub", *args(srv),
               "--concurrency-range", str(connections), "--measurement-ms", str(ms),
               "--warmup-ms", "100", "--csv", str(tmp / f"{name}.csv")]
        if rate:
            cmd += ["--request-rate", f"{rate[name]:.1f}"]
        procs[name] = (cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True))
    rows = {}
    for name, (cmd, p) in procs.items():
        out, err = p.communicate()
        row = None
        try:
            with open(tmp / f"{name}.csv", newline="") as f:
                row = {k: float(v) for k, v in next(csv.DictReader(f)).items()}
        except (OSError, StopIteration, ValueError):
            pass
        if row is None:
            # A client that could not run at all: every request it meant to
            # send is an error of this window.
            row = {"Inferences/Second": 0.0, "Requests": 0.0, "Errors": 1.0, "Total Errors": 1.0,
                   "p99 latency": 0.0}
            print(f"  {name}: infd perf failed ({p.returncode}): {err.strip()[:300]}",
                  file=sys.stderr)
        row["late"] = 0
        for line in err.splitlines():
            if "came due with all" in line:
                row["late"] = int(line.split()[2])
            elif "first error" in line:
                row["first_error"] = line
        rows[name] = row
    return rows


def max_stable(infd, srv, tmp, ms, rounds=10):
    """perf_analyzer's rule over the sum of the three clients' throughput."""
    windows = []
    for _ in range(rounds):
        rows = perf_window(infd, srv, tmp, ms)
        windows.append({k: r["Inferences/Second"] for k, r in rows.items()})
        sums = [sum(w.values()) for w in windows[-3:]]
        if len(sums) == 3 and max(sums) <= 1.1 * min(sums):
            last = windows[-3:]
            return {k: statistics.mean(w[k] for w in last) for k in PROTOCOLS}, True
    last = windows[-3:]
    return {k: statistics.mean(w[k] for w in last) for k in PROTOCOLS}, False


class Cycler(threading.Thread):
    """Loads and unloads `cycler` through the repository API until stopped."""

    def __init__(self, url, pause_s=0.0):
        super().__init__(daemon=True)
        self.url, self.pause_s = url, pause_s
        self.cycles = self.errors = 0
        self.first_error = None
        self.stop = threading.Event()

    def one(self):
        for verb in ("load", "unload"):
            req = urllib.request.Request(f"{self.url}/v2/repository/models/cycler/{verb}",
                                         data=b"{}", method="POST")
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    ok = r.status == 200
            except (urllib.error.URLError, OSError) as e:
                ok = False
                self.first_error = self.first_error or f"{verb}: {e}"
            if not ok:
                self.errors += 1
        self.cycles += 1

    def run(self):
        while not self.stop.is_set():
            self.one()
            if self.pause_s:
                time.sleep(self.pause_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--infd", default=str(sc.DEFAULT_INFD))
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--json")
    a = ap.parse_args()
    seconds = a.seconds if a.seconds else (a.minutes or 10) * 60
    window_s = 10 if seconds >= 120 else 5
    n_windows = max(2, round(seconds / window_s))

    with sc.tempdir("infd-soak-") as tmpd:
        tmp = pathlib.Path(tmpd)
        repo = tmp / "models"
        sc.model_repo.add_sub(repo)
        sc.model_repo.add_sub(repo, name="cycler")
        with sc.Serve(a.infd, repo, tmp, "--model-control-mode", "explicit",
                      "--load-model", "add_sub") as srv:
            pid = srv.proc.pid
            rss0 = rss_kib(pid)
            stable, converged = max_stable(a.infd, srv, tmp, 1000 if seconds < 120 else 2000)
            rate = {k: 0.8 * v for k, v in stable.items()}
            print(f"maximum stable rate: {sum(stable.values()):.0f}/s "
                  f"({', '.join(f'{k} {v:.0f}' for k, v in stable.items())})"
                  f"{'' if converged else ' (not stable within 10% after 10 windows)'}; "
                  f"soak at 80%: {sum(rate.values()):.0f}/s, {n_windows} windows of {window_s} s")

            cyc = Cycler(srv.url)
            cyc.start()
            windows = []
            t0 = time.monotonic()
            for i in range(n_windows):
                rows = perf_window(a.infd, srv, tmp, window_s * 1000, rate=rate, connections=16)
                w = {"t_s": round(time.monotonic() - t0, 1), "rss_kib": rss_kib(pid),
                     "cycles": cyc.cycles}
                for k, r in rows.items():
                    w[k] = {"rate": r["Inferences/Second"], "p99_us": r["p99 latency"],
                            "errors": int(r["Total Errors"]), "late": r["late"]}
                    if r.get("first_error"):
                        w[k]["first_error"] = r["first_error"]
                windows.append(w)
                print(f"  window {i + 1:3d} t={w['t_s']:6.1f} s rss {w['rss_kib'] / 1024:7.1f} MiB "
                      f"cycles {w['cycles']:5d}  " + "  ".join(
                          f"{k} {w[k]['rate']:7.0f}/s p99 {w[k]['p99_us']:7.0f} us"
                          f" err {w[k]['errors']}" for k in PROTOCOLS))
            cyc.stop.set()
            cyc.join()

            # The cycles alone.
            solo = Cycler(srv.url)
            for _ in range(50):
                solo.one()
            rss_c0 = rss_kib(pid)
            tc = time.monotonic()
            for _ in range(a.cycles):
                solo.one()
            cycles_s = time.monotonic() - tc
            rss_c1 = rss_kib(pid)

    half = windows[len(windows) // 2 - 1]["rss_kib"] if len(windows) >= 2 else rss0
    growth_half_mib = (windows[-1]["rss_kib"] - half) / 1024
    errors = sum(w[k]["errors"] for w in windows for k in PROTOCOLS) + cyc.errors + solo.errors
    drift = {}
    for k in PROTOCOLS:
        p99 = [w[k]["p99_us"] for w in windows]
        first, last = statistics.median(p99[:len(p99) // 2]), statistics.median(p99[len(p99) // 2:])
        drift[k] = (last - first) / first * 100 if first else 0.0
    cycles_growth_mib = (rss_c1 - rss_c0) / 1024
    goals = [
        ("RSS growth, second half", f"{growth_half_mib:+.1f} MiB", "<= 16 MiB",
         growth_half_mib <= 16),
        ("errors (requests and cycles)", str(errors), "0", errors == 0),
        *[(f"p99 drift, {k}", f"{drift[k]:+.1f}%", "<= 10%", drift[k] <= 10) for k in PROTOCOLS],
        (f"RSS growth over {a.cycles} load/unload cycles", f"{cycles_growth_mib:+.1f} MiB",
         "<= 8 MiB", cycles_growth_mib <= 8),
    ]
    print(f"load/unload cycles during the soak: {cyc.cycles} ({cyc.errors} errors); "
          f"{a.cycles} alone in {cycles_s:.1f} s; RSS at start {rss0 / 1024:.1f} MiB")
    if cyc.first_error or solo.first_error:
        print(f"first cycle error: {cyc.first_error or solo.first_error}")
    sc.print_table(["goal", "measured", "bound", "result"],
                   [[g, m, b, "PASS" if ok else "FAIL"] for g, m, b, ok in goals])
    sc.write_json(a.json, {
        "machine": sc.machine_facts(a.infd), "seconds": seconds, "window_s": window_s,
        "max_stable_rate": stable, "stable": converged, "rate": rate, "windows": windows,
        "rss_start_kib": rss0, "rss_growth_second_half_mib": growth_half_mib, "errors": errors,
        "p99_drift_percent": drift, "cycles_during_soak": cyc.cycles,
        "cycle_errors": cyc.errors + solo.errors, "cycles": a.cycles, "cycles_seconds": cycles_s,
        "rss_growth_cycles_mib": cycles_growth_mib,
        "goals": [{"goal": g, "measured": m, "bound": b, "pass": ok} for g, m, b, ok in goals]})


if __name__ == "__main__":
    main()
