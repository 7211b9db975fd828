#!/usr/bin/env bash
# Makes the README's figures from real short runs on the default base model:
#   docs/figures/adapter-loss-curve.png  train-adapter on the first 48 extraction samples, 3 epochs
#                                        (36 steps, an evaluation after each epoch), its loss-curve.svg
#                                        rendered by rsvg-convert
# About three minutes on 2 cores after the release build. Usage: scripts/make-figures.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BIN=${BIN:-.build/release}
[ -x "$BIN/train-adapter" ] || { echo "make-figures: build first: swift build -c release" >&2; exit 1; }
export ADAPTER_BASE_MODEL=${ADAPTER_BASE_MODEL:-$(scripts/fetch-model.sh)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -n 48 examples/extraction/train.jsonl > "$work/train.jsonl"
head -n 16 examples/extraction/eval.jsonl > "$work/eval.jsonl"
"$BIN/train-adapter" --train-data "$work/train.jsonl" --eval-data "$work/eval.jsonl" --epochs 3 --batch-size 4 \
  --learning-rate 3e-3 --warmup-steps 3 --max-sequence-length 320 --checkpoint-dir "$work/run"
mkdir -p docs/figures
rsvg-convert "$work/run/adapter/loss-curve.svg" -o docs/figures/adapter-loss-curve.png
ls -l docs/figures/adapter-loss-curve.png
