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
#   bench/profile_gpu.sh INFD_BIN MODEL.onnx PROTOCOL...   (http grpc raw http-shm grpc-shm)
set -u
INFD=${1:?usage: profile_gpu.sh INFD_BIN MODEL.onnx PROTOCOL...}
MODEL=${2:?usage: profile_gpu.sh INFD_BIN MODEL.onnx PROTOCOL...}
shift 2
PERF=$(command -v perf || true)
REPO=$(mktemp -d)
trap 'kill $PID 2>/dev/null; rm -rf "$REPO"' EXIT
mkdir -p "$REPO/m/1"
ln -s "$(readlink -f "$MODEL")" "$REPO/m/1/model.onnx"
cat >"$REPO/m/config.pbtxt" <<CFG
name: "m"
max_batch_size: 128
instance_group [ { kind: KIND_GPU count: 4 } ]
dynamic_batching { preferred_batch_size: [ 128 ] max_queue_delay_microseconds: 5000 }
parameters { key: "precision" value: { string_value: "fp16" } }
CFG
taskset -c "${SERVER_CPUS:-0-7}" "$INFD" serve --model-repository "$REPO" --http-port 18000 \
    --grpc-port 18001 --metrics-port 18002 --http-threads 8 --grpc-threads 8 \
    --raw-socket-dir "$REPO/sock" --enable-shared-memory system >"$REPO/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
    curl -sf localhost:18000/v2/models/m/ready >/dev/null && break
    sleep 1
done
args() {
    case $1 in
    http) echo --url 127.0.0.1:18000 --binary ;;
    http-shm) echo --url 127.0.0.1:18000 --shared-memory system ;;
    grpc) echo --url 127.0.0.1:18001 --protocol grpc ;;
    grpc-shm) echo --url 127.0.0.1:18001 --protocol grpc --shared-memory system ;;
    raw) echo --unix "$REPO/sock/m.framed.sock" --framed --metadata-url 127.0.0.1:18000 ;;
    esac
}
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
