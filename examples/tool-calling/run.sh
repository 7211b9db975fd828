#!/usr/bin/env bash
# Tool calling end to end: train an adapter to call get_weather / convert_currency / set_timer
# with the right arguments and answer from the result, then score every assistant turn (the
# call and the answer) of the held-out conversations for the base model and the adapter.
# Knobs (environment): BIN (default .build/release), RUN (default runs/tool-calling; replaced),
# EPOCHS, LR, BATCH, EVAL_SAMPLES (default all 100).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.build/release}
RUN=${RUN:-runs/tool-calling}
EPOCHS=${EPOCHS:-2}
LR=${LR:-1e-3}
BATCH=${BATCH:-8}
EVAL_SAMPLES=${EVAL_SAMPLES:-100}
DATA=examples/tool-calling

"$BIN/adapter-data" validate "$DATA/train.jsonl"
"$BIN/adapter-data" validate "$DATA/eval.jsonl"
rm -rf "$RUN"
"$BIN/train-adapter" --train-data "$DATA/train.jsonl" --eval-data "$DATA/eval.jsonl" \
  --epochs "$EPOCHS" --learning-rate "$LR" --batch-size "$BATCH" --warmup-steps 10 \
  --max-sequence-length 512 --checkpoint-dir "$RUN"
"$BIN/evaluate-adapter" --eval-data "$DATA/eval.jsonl" --max-samples "$EVAL_SAMPLES" --turns all \
  --include-base --checkpoint "$RUN/adapter-final.safetensors" \
  --output "$RUN/eval-results.jsonl" | tee "$RUN/eval-table.txt"
