#!/bin/bash
# bench/ncu_kernels.sh - where a CUDA plan's time goes, kernel by kernel,
# from Nsight Compute (bench/RESULTS.md, "Memory-bound kernels").
#
#   bench/ncu_kernels.sh INFD_BIN MODEL.onnx [BATCH] [PRECISION]
#
# Builds the model into a plan file (batch BATCH, default 128; precision
# default fp16) so that loading skips tuning, measures it with `infd bench`
# (one context and two, pinned I/O), then runs one warm-up and one timed run
# under `ncu --clock-control none --metrics gpu__time_duration.sum` and
# prints each kernel of the last run with its duration, the total, and the
# time per kernel name. ncu times kernels one at a time with nothing else on
# the GPU: true durations, where `infd bench --profile` syncs around each
# kernel and inflates the small ones. One warm-up run and two timed ones
# are profiled; a run is the longest tail of kernels that repeats just
# before itself (the warm-up run may launch others: capture, first use).
# Needs ncu on the PATH (the GPU machine has it) and a GPU.
set -euo pipefail
INFD=${1:?usage: bench/ncu_kernels.sh INFD_BIN MODEL.onnx [BATCH] [PRECISION]}
MODEL=${2:?usage: bench/ncu_kernels.sh INFD_BIN MODEL.onnx [BATCH] [PRECISION]}
B=${3:-128}
P=${4:-fp16}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$INFD" build "$MODEL" --device cuda --precision "$P" --max-batch "$B" -o "$W/m.plan" | tail -1
"$INFD" bench "$W/m.plan" --batch "$B" --pinned-io --iterations 300 | grep -E "latency|throughput"
"$INFD" bench "$W/m.plan" --batch "$B" --pinned-io --iterations 300 --contexts 2 |
    sed -n 's/^throughput/throughput, 2 contexts/p'
ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    "$INFD" bench "$W/m.plan" --batch "$B" --iterations 2 --warmup 1 > "$W/ncu.csv" 2> "$W/ncu.err" ||
    { tail -5 "$W/ncu.err"; exit 1; }
python3 - "$W/ncu.csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
ki, vi, ii = head.index("Kernel Name"), head.index("Metric Value"), head.index("ID")
ks = sorted((int(r[ii]), r[ki], float(r[vi].replace(",", ""))) for r in rows
            if r[vi].replace(",", "").replace(".", "").isdigit())
# The two timed runs launch the same kernels: the longest tail that repeats.
names = [k[1] for k in ks]
per_run = next((n for n in range(len(ks) // 2, 0, -1) if names[-n:] == names[-2 * n:-n]), len(ks))
last = ks[-per_run:]
print(f"kernels per run {len(last)}, total {sum(k[2] for k in last) / 1000:.1f} us")
by_name, count = collections.Counter(), collections.Counter()
for i, (_, name, ns) in enumerate(last):
    print(f"{i:4d} {ns / 1000:8.1f} us  {name[:100]}")
    by_name[name[:60]] += ns / 1000
    count[name[:60]] += 1
print("by kernel:")
for name, us in by_name.most_common(15):
    print(f"{us:9.1f} us x{count[name]:<3} {name}")
PY
