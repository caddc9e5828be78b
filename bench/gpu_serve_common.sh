# bench/gpu_serve_common.sh - sourced by bench/serve_gpu.sh and
# bench/profile_gpu.sh: the one-model repository, the server and the
# `infd perf` arguments of each protocol name, so the two measure the same
# setup.

# gpu_repo DIR MODEL.onnx MAX_BATCH INSTANCES: model "m" (KIND_GPU x
# INSTANCES on GPUS or every GPU, FP16, dynamic batching preferring
# MAX_BATCH).
gpu_repo() {
    mkdir -p "$1/m/1"
    ln -s "$(readlink -f "$2")" "$1/m/1/model.onnx"
    cat >"$1/m/config.pbtxt" <<CFG
name: "m"
max_batch_size: $3
instance_group [ { kind: KIND_GPU count: $4 ${GPUS:+gpus: [ $GPUS ]} } ]
dynamic_batching { preferred_batch_size: [ $3 ] max_queue_delay_microseconds: 5000 }
parameters { key: "precision" value: { string_value: "fp16" } }
CFG
}

# gpu_serve INFD DIR [ARGS...]: `infd serve` on ports 18000-18002 (8 HTTP
# and gRPC threads, raw sockets in DIR/sock, system and CUDA shared memory on), on
# SERVER_CPUS when set; sets PID and waits until the model is ready.
gpu_serve() {
    local infd=$1 dir=$2
    shift 2
    ${SERVER_CPUS:+taskset -c $SERVER_CPUS} "$infd" serve --model-repository "$dir" \
        --http-port 18000 --grpc-port 18001 --metrics-port 18002 --http-threads 8 \
        --grpc-threads 8 --raw-socket-dir "$dir/sock" --enable-shared-memory system,cuda "$@" \
        >"$dir/serve.log" 2>&1 &
    PID=$!
    for _ in $(seq 1 300); do
        curl -sf localhost:18000/v2/models/m/ready >/dev/null && return 0
        sleep 1
    done
    tail "$dir/serve.log"
    return 1
}

# perf_args PROTOCOL DIR: the `infd perf` arguments of http (binary),
# http-shm, http-cuda, grpc, grpc-ch8 (8 connections a client), grpc-shm,
# grpc-cuda or raw (framed, over the Unix socket).
perf_args() {
    case $1 in
    http) echo --url 127.0.0.1:18000 --binary ;;
    http-shm) echo --url 127.0.0.1:18000 --shared-memory system ;;
    grpc) echo --url 127.0.0.1:18001 --protocol grpc ;;
    grpc-ch8) echo --url 127.0.0.1:18001 --protocol grpc --grpc-channels 8 ;;
    grpc-shm) echo --url 127.0.0.1:18001 --protocol grpc --shared-memory system ;;
    http-cuda) echo --url 127.0.0.1:18000 --shared-memory cuda ;;
    grpc-cuda) echo --url 127.0.0.1:18001 --protocol grpc --shared-memory cuda ;;
    raw) echo --unix "$2/sock/m.framed.sock" --framed --metadata-url 127.0.0.1:18000 ;;
    esac
}
