#!/usr/bin/env bash
# Calendar extraction end to end: validate the data, train a rank-32 LoRA adapter on
# SmolLM2-135M-Instruct, then evaluate the base model and the adapter side by side on the
# held-out eval set. Run from anywhere after `swift build -c release` and scripts/fetch-model.sh.
# Knobs (environment): BIN (binaries, default .build/release), RUN (run folder, default
# runs/extraction; replaced), STEPS (optimizer steps, default 80: 320 of the 1,000 training
# samples, about what 2 CPU cores train in minutes), LR, BATCH, EVAL_SAMPLES (default 100 of 200).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.build/release}
RUN=${RUN:-runs/extraction}
STEPS=${STEPS:-80}
LR=${LR:-2e-3}
BATCH=${BATCH:-4}
EVAL_SAMPLES=${EVAL_SAMPLES:-100}
DATA=examples/extraction

"$BIN/adapter-data" validate "$DATA/train.jsonl"
"$BIN/adapter-data" validate "$DATA/eval.jsonl"
rm -rf "$RUN"
"$BIN/train-adapter" --train-data "$DATA/train.jsonl" \
  --epochs 1 --max-steps "$STEPS" --learning-rate "$LR" --batch-size "$BATCH" --warmup-steps 5 \
  --max-sequence-length 320 --checkpoint-dir "$RUN"
"$BIN/evaluate-adapter" --eval-data "$DATA/eval.jsonl" --max-samples "$EVAL_SAMPLES" \
  --include-base --checkpoint "$RUN/adapter-final.safetensors" \
  --output "$RUN/eval-results.jsonl" | tee "$RUN/eval-table.txt"
