#!/bin/bash
# bench/profile_gpu.sh - where `infd serve` spends its CPU time under a
# protocol's load (issue #25): ResNet-50-style setup of bench/serve_gpu.sh
# (KIND_GPU x 4, FP16, max batch 128, server on SERVER_CPUS, 8 `infd perf`
# clients x 128 on CLIENT_CPUS), and `perf record` of the server for 5 s
# in the middle of the run, reported per symbol and per thread. Needs the
# GPU machine; without Linux perf there (the H200 machine has none: send
# Debian's linux-perf unpacked) it reports CPU ticks per thread name from
# /proc instead.
#
#   bench/profile_gpu.sh INFD_BIN MODEL.onnx PROTOCOL...   (http grpc grpc-ch8 raw http-shm grpc-shm http-cuda grpc-cuda)
set -u
INFD=${1:?usage: profile_gpu.sh INFD_BIN MODEL.onnx PROTOCOL...}
MODEL=${2:?usage: profile_gpu.sh INFD_BIN MODEL.onnx PROTOCOL...}
shift 2
PERF=$(command -v perf || true)
REPO=$(mktemp -d)
trap 'kill $PID 2>/dev/null; rm -rf "$REPO"' EXIT
# shellcheck source=bench/gpu_serve_common.sh
. "$(dirname "$0")/gpu_serve_common.sh"
gpu_repo "$REPO" "$MODEL" 128 4
SERVER_CPUS=${SERVER_CPUS:-0-7} gpu_serve "$INFD" "$REPO" || exit 1
args() { perf_args "$1" "$REPO"; }
for proto in "$@"; do
    pids=()
    for k in $(seq 1 8); do
        # shellcheck disable=SC2046
        timeout 60 taskset -c "${CLIENT_CPUS:-8-15}" "$INFD" perf --model m --measurement-ms 9000 \
            $(args "$proto") --concurrency-range 128:128:1 >"$REPO/p$k" 2>&1 &
        pids+=($!)
    done
    sleep 3
    echo "== $proto"
    if [ -n "$PERF" ]; then
        "$PERF" record -F 499 -g -p $PID -o "$REPO/perf.data" -- sleep 5 >/dev/null 2>&1
        "$PERF" report -i "$REPO/perf.data" --stdio --no-children --sort comm,dso,symbol \
            --percent-limit 1.5 2>/dev/null | grep -v '^$' | grep -v '^#' | grep '%' | head -40
        "$PERF" report -i "$REPO/perf.data" --stdio --no-children --sort comm \
            2>/dev/null | grep '%' | head -20
    else
        echo "no perf here: CPU ticks per thread name over 5 s, from /proc"
        snap() { for t in /proc/$PID/task/*; do echo "$(tr ' ' _ <"$t/comm") $(awk '{print $14+$15}' "$t/stat")"; done; }
        snap >"$REPO/t0"
        sleep 5
        snap >"$REPO/t1"
        awk 'NR == FNR {a[$1] += $2; next} {b[$1] += $2} END {for (k in b) print k, b[k] - a[k]}' \
            "$REPO/t0" "$REPO/t1" | sort -k2 -n -r | head -20
    fi
    wait "${pids[@]}" # the clients, not the server
    tail -qn1 "$REPO"/p* | awk -v p="$proto" '{s += $4} END {printf "%s: %.1f infer/s in all\n", p, s}'
done
