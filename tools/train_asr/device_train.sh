#!/bin/bash
# tools/train_asr/device_train.sh - one device call of training (issue #26),
# within the device tool's 10 minutes a command:
#   - unpacks .gpu/asrdata.tar.xz (pack.sh) into /tmp/espb, once per machine;
#   - synthesises the training and test speech into /tmp/asrd, once per
#     machine (about 80 s on 16 cores), each training sentence COPIES times
#     (default 1) in different voices;
#   - trains for what is left of SECONDS (default 540) after that and the
#     evaluation's margin, resuming from /tmp/asr_run/model.ckpt when an
#     earlier call on the same machine left one, else from RESUME (a
#     weights.pt carried from an earlier session), else from scratch;
#   - on every GPU of the machine (torchrun, one process a GPU);
#   - copies to $OUT/$NAME: train.json, the log, spm.model, the exported
#     model (model.tar) and weights.pt (weights only, to carry into a later
#     session).
# The machine stays warm only 30 s after a call: call again at once to go on.
#
#   bash tools/train_asr/device_train.sh [SECONDS] [RESUME] [-- train.py options]
#   bash tools/train_asr/device_train.sh prep [RESUME]   (only the data)
# Environment: COPIES (voices a training line), SYNTH_ARGS (more synth.py
# options, e.g. --all-accents), T0 (the call's start, as date +%s: SECONDS
# count from it; default now), and, to train two models at once on parts of
# the machine, CUDA_VISIBLE_DEVICES, RUN (default /tmp/asr_run), NAME (a
# folder of $OUT) and PORT (torchrun's) for each: run prep first, then both
# in the background.
set -u
T0=${T0:-$(date +%s)}
SECONDS_BUDGET=${1:-540}
RESUME=${2:-}
shift $(($# < 2 ? $# : 2))
[ "${1:-}" = "--" ] && shift
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/asr_out}${NAME:+/$NAME}
D=/tmp/asrd
RUN=${RUN:-/tmp/asr_run}
mkdir -p "$OUT" "$D" "$RUN"
if [ ! -x /tmp/espb/espeak ]; then
    mkdir -p /tmp/espb && tar -xJf .gpu/asrdata.tar.xz -C /tmp/espb
fi
# A carried weights.pt comes with the vocabulary it was trained with.
if [ -n "$RESUME" ] && [ -s "$(dirname "$RESUME")/spm.model" ] && [ ! -s "$D/spm.model" ]; then
    cp "$(dirname "$RESUME")/spm.model" "$D/"
fi
if [ ! -s "$D/test.jsonl" ]; then
    cp /tmp/espb/corpus/*.txt "$D/"
    # shellcheck disable=SC2086 # SYNTH_ARGS: several words
    "$PY" tools/train_asr/synth.py --text "$D/train.txt" --out "$D" --split train \
        --copies "${COPIES:-1}" --espeak /tmp/espb/espeak ${SYNTH_ARGS:-} >>"$OUT/log.txt" 2>&1
    # shellcheck disable=SC2086
    "$PY" tools/train_asr/synth.py --text "$D/test.txt" --out "$D" --split test \
        --espeak /tmp/espb/espeak ${SYNTH_ARGS:-} >>"$OUT/log.txt" 2>&1
fi
[ "$SECONDS_BUDGET" = prep ] && exit 0
from=()
if [ -s "$RUN/model.ckpt" ]; then
    from=(--resume "$RUN/model.ckpt")
elif [ -n "$RESUME" ]; then
    from=(--resume "$RESUME")
fi
left=$((SECONDS_BUDGET - ($(date +%s) - T0) - 70))
minutes=$(python3 -c "print(max(0.5, $left / 60))")
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())")
launch=("$PY")
# PORT: the rendezvous port, when two trainings share the machine.
if [ "$gpus" -gt 1 ]; then
    rdzv=(--standalone)
    [ -n "${PORT:-}" ] && rdzv=(--nnodes=1 --rdzv-backend=c10d --rdzv-endpoint="localhost:$PORT")
    launch=("$PY" -m torch.distributed.run "${rdzv[@]}" --nproc_per_node="$gpus")
fi
echo "device_train: $(($(date +%s) - T0)) s of set-up; training $minutes min on $gpus GPU(s) ${from[*]}" >>"$OUT/log.txt"
touch "$RUN/.started"
"${launch[@]}" tools/train_asr/train.py --data "$D" --out "$RUN" --minutes "$minutes" "${from[@]}" "$@" \
    >>"$OUT/log.txt" 2>&1
if [ "$gpus" -gt 1 ] && [ ! "$RUN/model.ckpt" -nt "$RUN/.started" ]; then
    # Several processes failed: what is left on one GPU.
    left=$((SECONDS_BUDGET - ($(date +%s) - T0) - 70))
    minutes=$(python3 -c "print(max(0.5, $left / 60))")
    echo "device_train: $gpus processes failed; $minutes min on one GPU" >>"$OUT/log.txt"
    "$PY" tools/train_asr/train.py --data "$D" --out "$RUN" --minutes "$minutes" "${from[@]}" "$@" \
        >>"$OUT/log.txt" 2>&1
fi
cp "$RUN/train.json" "$D/spm.model" "$OUT/" 2>/dev/null
(cd "$RUN" && tar -cf "$OUT/model.tar" model)
"$PY" -c "
import torch
ck = torch.load('$RUN/model.ckpt')
torch.save({k: v for k, v in ck.items() if k != 'optimizer'}, '$OUT/weights.pt')
" 2>>"$OUT/log.txt"
echo "device_train: $(($(date +%s) - T0)) s in all" >>"$OUT/log.txt"
