#!/usr/bin/env bash
# The run logs end to end, as the main job writes them, on the real base model in a few steps:
# train-adapter (stopped by Ctrl-C after a few steps and resumed), train-draft and
# evaluate-adapter into one folder, then TensorBoard's own reader loads the folder and every
# run's scalars must equal its metrics.jsonl (scripts/check_tensorboard.py), and the loss curves
# must render (rsvg-convert). Run by the test command after `swift test`; about two minutes.
# Needs the release build, scripts/fetch-model.sh's model (or $ADAPTER_BASE_MODEL) and the venv of
# scripts/tensorboard-env.sh. Usage: scripts/check-run-logs.sh [FOLDER] (default: a temporary one).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BIN=${BIN:-.build/release}
export ADAPTER_BASE_MODEL=${ADAPTER_BASE_MODEL:-$(scripts/fetch-model.sh)}
tb=$(scripts/tensorboard-env.sh)
if [ -n "${1:-}" ]; then
  RUN=$1
else
  # A temporary folder of our own (~600 MB) is removed when the check passes; a failure keeps it to read.
  own=$(mktemp -d); RUN=$own/run
fi
DATA=examples/extraction
rm -rf "$RUN"
mkdir -p "$RUN"
head -n 8 "$DATA/eval.jsonl" > "$RUN/../eval-8.jsonl"
common=(--train-data "$DATA/train.jsonl" --eval-data "$RUN/../eval-8.jsonl" --batch-size 2 --max-sequence-length 320
        --epochs 1 --warmup-steps 2 --checkpoint-dir "$RUN")

echo "check-run-logs: train-adapter, interrupted after step 2, then resumed" >&2
"$BIN/train-adapter" "${common[@]}" --max-steps 8 --learning-rate 3e-3 > "$RUN/../adapter-1.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  n=$(grep -c '"type":"train"' "$RUN/adapter/metrics.jsonl" 2>/dev/null || true)
  [ "${n:-0}" -ge 2 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
kill -INT "$pid" 2>/dev/null || true
status=0; wait "$pid" || status=$?
[ "$status" = 130 ] || { cat "$RUN/../adapter-1.log" >&2; echo "check-run-logs: train-adapter did not stop on Ctrl-C as expected (exit $status)" >&2; exit 1; }
"$BIN/train-adapter" "${common[@]}" --max-steps 8 --learning-rate 3e-3 --resume > "$RUN/../adapter-2.log" 2>&1 \
  || { cat "$RUN/../adapter-2.log" >&2; exit 1; }
grep -q "continuing this run's log" "$RUN/../adapter-2.log" || { cat "$RUN/../adapter-2.log" >&2; echo "check-run-logs: the resumed run did not continue its log" >&2; exit 1; }

echo "check-run-logs: train-draft" >&2
"$BIN/train-draft" "${common[@]}" --checkpoint "$RUN/adapter-final.safetensors" --max-steps 4 --learning-rate 2e-3 \
  --draft-layers 2 --divergence forward > "$RUN/../draft.log" 2>&1 || { cat "$RUN/../draft.log" >&2; exit 1; }

echo "check-run-logs: evaluate-adapter" >&2
"$BIN/evaluate-adapter" --eval-data "$RUN/../eval-8.jsonl" --max-samples 3 --include-base \
  --checkpoint "$RUN/adapter-final.safetensors" --output "$RUN/eval-results.jsonl" > "$RUN/../evaluate.log" 2>&1 \
  || { cat "$RUN/../evaluate.log" >&2; exit 1; }

"$tb/python" scripts/check_tensorboard.py "$RUN" --expect adapter,draft,evaluation
for kind in adapter draft; do
  rsvg-convert "$RUN/$kind/loss-curve.svg" -o "$RUN/../$kind-loss-curve.png" \
    || { echo "check-run-logs: rsvg-convert could not render $RUN/$kind/loss-curve.svg" >&2; exit 1; }
done
echo "check-run-logs: logs, TensorBoard events and curves agree ($RUN)"
[ -z "${own:-}" ] || rm -rf "$own"
