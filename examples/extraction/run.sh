#!/usr/bin/env bash
# Calendar extraction end to end: validate the data, train a rank-32 LoRA adapter on
# SmolLM2-135M-Instruct, then evaluate the base model and the adapter side by side on the
# held-out eval set. Run from anywhere after `swift build -c release` and scripts/fetch-model.sh.
# Knobs (environment): BIN (binaries, default .build/release), RUN (run folder, default
# runs/extraction; replaced), STEPS (optimizer steps, default 125: one pass over the 1,000
# training samples in batches of 8), LR, BATCH, EVAL_SAMPLES (default 100 of 200).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.build/release}
RUN=${RUN:-runs/extraction}
STEPS=${STEPS:-125}
LR=${LR:-3e-3}
BATCH=${BATCH:-8}
EVAL_SAMPLES=${EVAL_SAMPLES:-100}
DATA=examples/extraction

"$BIN/adapter-data" validate "$DATA/train.jsonl"
"$BIN/adapter-data" validate "$DATA/eval.jsonl"
rm -rf "$RUN"
"$BIN/train-adapter" --train-data "$DATA/train.jsonl" \
  --epochs 1 --max-steps "$STEPS" --learning-rate "$LR" --batch-size "$BATCH" --warmup-steps 5 \
  --max-sequence-length 320 --checkpoint-dir "$RUN"
"$BIN/evaluate-adapter" --eval-data "$DATA/eval.jsonl" --max-samples "$EVAL_SAMPLES" \
  --include-base --checkpoint "$RUN/adapter-final.safetensors" --constrained \
  --output "$RUN/eval-results.jsonl" | tee "$RUN/eval-table.txt"
