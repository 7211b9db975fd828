#!/usr/bin/env bash
# House style end to end: train an adapter to rewrite casual status notes as
# "TL;DR: ...\n- Owner: ...\n- Deadline: ..." in a fixed order, then compare exact match of
# the base model and the adapter on held-out notes (unseen projects and people).
# Knobs (environment): BIN (default .build/release), RUN (default runs/house-style; replaced),
# EPOCHS, LR, BATCH, EVAL_SAMPLES (default all 150).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.build/release}
RUN=${RUN:-runs/house-style}
EPOCHS=${EPOCHS:-2}
LR=${LR:-1e-3}
BATCH=${BATCH:-8}
EVAL_SAMPLES=${EVAL_SAMPLES:-150}
DATA=examples/house-style

"$BIN/adapter-data" validate "$DATA/train.jsonl"
"$BIN/adapter-data" validate "$DATA/eval.jsonl"
rm -rf "$RUN"
"$BIN/train-adapter" --train-data "$DATA/train.jsonl" --eval-data "$DATA/eval.jsonl" \
  --epochs "$EPOCHS" --learning-rate "$LR" --batch-size "$BATCH" --warmup-steps 10 \
  --max-sequence-length 256 --checkpoint-dir "$RUN"
"$BIN/evaluate-adapter" --eval-data "$DATA/eval.jsonl" --max-samples "$EVAL_SAMPLES" \
  --include-base --checkpoint "$RUN/adapter-final.safetensors" \
  --output "$RUN/eval-results.jsonl" | tee "$RUN/eval-table.txt"
