#!/bin/bash
# bench/serve_gpu.sh - a model served on the GPU end to end, against the
# engine alone (bench/RESULTS.md, "Serving end to end").
#
#   bench/serve_gpu.sh INFD_BIN MODEL.onnx [MAX_BATCH] [INSTANCES] [CLIENTS] [CONCURRENCY]
#
# Writes a one-model repository (KIND_GPU x INSTANCES, default 4, FP16,
# dynamic batching preferring MAX_BATCH), starts `infd serve` on ports
# 18000-18002 with 8 HTTP and gRPC threads, measures with `infd perf`: raw
# framed, gRPC and HTTP binary at concurrency 64 and 256 from one client
# process, then HTTP binary and raw framed from CLIENTS client processes
# (default 8) at CONCURRENCY each (default 128), with the share of the
# machine's CPU time that was busy; prints the server's batch statistics,
# stops it, and runs `infd bench` on the same model with MAX_BATCH,
# INSTANCES contexts and pinned I/O for the engine-only figure. Needs a
# GPU; meant for the GPU machine.
#
# Environment: GPUS="0" puts the instances on those GPUs only (Triton's
# instance_group gpus; default: every GPU); SERVER_CPUS and CLIENT_CPUS
# (taskset lists, e.g. 0-15 and 16-31) pin the server and the `infd perf`
# clients to separate cores, as a client on another machine would be;
# QUICK=1 skips the single-client sweep, SINGLE picks its protocols (default
# all: raw grpc http http-shm grpc-shm http-cuda grpc-cuda), MULTI the
# multi-client ones (default http raw); SERVE_ARGS adds options to
# `infd serve` (e.g. "--pinned-memory-pool-byte-size 0"); LOG_COPY=FILE keeps the
# server's log there.
set -u
INFD=${1:?usage: serve_gpu.sh INFD_BIN MODEL.onnx [MAX_BATCH] [INSTANCES]}
MODEL=${2:?usage: serve_gpu.sh INFD_BIN MODEL.onnx [MAX_BATCH] [INSTANCES]}
MAXB=${3:-128}
INST=${4:-4}
CLIENTS=${5:-8}
CONC=${6:-128}
REPO=$(mktemp -d)
trap 'kill $PID 2>/dev/null; [ -n "${LOG_COPY:-}" ] && cp "$REPO/serve.log" "$LOG_COPY"; rm -rf "$REPO"' EXIT
# shellcheck source=bench/gpu_serve_common.sh
. "$(dirname "$0")/gpu_serve_common.sh"
gpu_repo "$REPO" "$MODEL" "$MAXB" "$INST"
# shellcheck disable=SC2086
gpu_serve "$INFD" "$REPO" ${SERVE_ARGS:-} || exit 1
perf() {
    timeout 60 ${CLIENT_CPUS:+taskset -c $CLIENT_CPUS} "$INFD" perf --model m --measurement-ms 5000 \
        "$@" 2>&1 | tail -1
}
args() { perf_args "$1" "$REPO"; }
echo "protocol concurrency requests errors infer/s avg_us p50_us p90_us p95_us p99_us"
for c in $([ "${QUICK:-0}" = 1 ] || echo 64 256); do
    for proto in ${SINGLE:-raw grpc http http-shm grpc-shm http-cuda grpc-cuda}; do
        # shellcheck disable=SC2046
        echo "$proto $(perf $(args $proto) --concurrency-range $c:$c:1)"
    done
done
busy() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8, $5}' /proc/stat; }
for proto in ${MULTI:-http raw}; do
    pids=()
    c0=$(busy)
    for k in $(seq 1 "$CLIENTS"); do
        # shellcheck disable=SC2046
        perf $(args $proto) --concurrency-range $CONC:$CONC:1 >"$REPO/p$k" &
        pids+=($!)
    done
    wait "${pids[@]}"
    c1=$(busy)
    awk -v p=$proto -v n="$CLIENTS" -v c="$CONC" '{s += $4} END {printf "%s, %d clients x %d: %.1f infer/s in all", p, n, c, s}' \
        "$REPO"/p*
    echo "$c0 $c1" | awk '{b = $3 - $1; i = $4 - $2; printf ", CPU %.0f%% busy\n", 100 * b / (b + i)}'
done
curl -s localhost:18000/v2/models/m/stats | python3 -c "import json, sys
s = json.load(sys.stdin)['model_stats'][0]
i = s['inference_stats']
us = lambda k: i[k]['ns'] / max(i[k]['count'], 1) / 1e3
print('inferences', s['inference_count'], 'executions', s['execution_count'],
      'per request: queue %.0f us, compute_input %.0f us, compute_infer %.0f us' %
      (us('queue'), us('compute_input'), us('compute_infer')))"
kill $PID
wait $PID 2>/dev/null
${SERVER_CPUS:+taskset -c $SERVER_CPUS} "$INFD" bench "$MODEL" --device cuda --precision fp16 \
    --batch "$MAXB" --contexts "$INST" --pinned-io --iterations 30 | grep -E "latency|throughput"
