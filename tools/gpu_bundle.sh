#!/usr/bin/env bash
# gpu_bundle.sh - packs a release build for the GPU machine (GPU.md in the
# design docs): the given binaries of build/release, stripped, and the
# Debian shared libraries they link (not glibc, not the CUDA driver; cuDNN
# and cuBLASLt are dlopened from the machine's own, see
# src/backends/cuda/cuda_libs.h) into .gpu/bundle.tar.xz (git-ignored), to
# be named in the device tool's `carry`. There:
#   tar -xJf .gpu/bundle.tar.xz -C .gpu && export LD_LIBRARY_PATH=$PWD/.gpu/lib:...
# and the binaries are in .gpu/bin.
#
# Usage: tools/gpu_bundle.sh [BINARY ...]   (default: infd and the CUDA and
#        weights unit tests). A BINARY is relative to build/release, or an
#        absolute path (a Debian tool the machine lacks: /usr/bin/ffmpeg,
#        /usr/bin/srt-live-transmit), sent with its libraries the same way.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$repo/build/release
bins=("$@")
if ((${#bins[@]} == 0)); then
    bins=(infd tests/unit/backends_cuda tests/unit/backends_cuda_ops tests/unit/graph_weights)
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$repo/.gpu"
for b in "${bins[@]}"; do
    case "$b" in /*) path=$b ;; *) path=$build/$b ;; esac
    [ -x "$path" ] || { echo "gpu_bundle: $path missing (build the release preset)" >&2; exit 1; }
    cp "$path" "$stage/bin/"
    strip "$stage/bin/$(basename "$b")"
    ldd "$path" | awk '$3 ~ /^\// { print $3 }' | while read -r lib; do
        case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
        libcuda.so.* | libcudnn* | libcublas*) ;;
        *) cp -Lu "$lib" "$stage/lib/" ;;
        esac
    done
done
tar -C "$stage" -cJf "$repo/.gpu/bundle.tar.xz" bin lib
du -h "$repo/.gpu/bundle.tar.xz"
