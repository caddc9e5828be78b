#!/bin/bash
# tools/train_asr/pack.sh - what the GPU machine needs to make the training
# data, packed into .gpu/asrdata.tar.xz (git-ignored, about 9 MB) for the
# device tool's `carry`: espeak-ng from Debian with the libraries its binary
# links (tools/gpu_bundle.sh) and its espeak-ng-data, a wrapper `espeak`
# that sets their paths, and the corpus (corpus.py's train.txt and
# test.txt). Needs espeak-ng, fortunes and wamerican installed here:
#   apt-get install espeak-ng fortunes wamerican
# There: tar -xJf .gpu/asrdata.tar.xz -C /tmp/espb, then
# tools/train_asr/device_train.sh (which does that itself).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
"$repo/tools/gpu_bundle.sh" /usr/bin/espeak-ng >/dev/null
tar -xJf "$repo/.gpu/bundle.tar.xz" -C "$stage"
rm "$repo/.gpu/bundle.tar.xz"
cp -r /usr/lib/x86_64-linux-gnu/espeak-ng-data "$stage/"
printf '#!/bin/sh\nd=$(dirname "$0")\nLD_LIBRARY_PATH="$d/lib" ESPEAK_DATA_PATH="$d" exec "$d/bin/espeak-ng" "$@"\n' \
    >"$stage/espeak"
chmod +x "$stage/espeak"
/usr/bin/python3 "$repo/tools/train_asr/corpus.py" --out "$stage/corpus"
tar -C "$stage" -cJf "$repo/.gpu/asrdata.tar.xz" .
du -h "$repo/.gpu/asrdata.tar.xz"
