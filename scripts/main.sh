#!/usr/bin/env bash
# The main job on a fresh machine, end to end: system packages, the default base model, a
# release build, then the extraction example: train an adapter, evaluate base vs adapter on
# held-out data, train a draft model and measure speculative decoding, export the .fmadapter
# package, and generate with it (constrained to the example's schema, with the package's draft).
# Results are printed at the end and kept under runs/.
# Knobs (environment): STEPS (adapter), EVAL_SAMPLES, DRAFT_STEPS, SKIP_DRAFT=1, RUN (the run folder,
# default runs/extraction; replaced), BUILD_FLAGS (extra `swift build` flags), PREBUILT_BIN (a folder
# holding release builds of the tools below: no build step). The test command runs this job at a
# small size (STEPS=8 EVAL_SAMPLES=8 DRAFT_STEPS=4) on the binaries its `swift test` built, so it
# cannot break unseen.
# examples/extraction/prompts.jsonl: eval samples 101-108 without their replies.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - start ))" >&2; }

step "set up"
scripts/setup.sh
export ADAPTER_BASE_MODEL=$(scripts/fetch-model.sh)

tools=(adapter-data train-adapter evaluate-adapter train-draft export-fmadapter generate bench)
if [ -n "${PREBUILT_BIN:-}" ]; then
  # The test command's binaries: `swift test` compiles every module with one more -enable-testing
  # than `swift build` can pass, so a product build after it compiled all of them again (~5 min on
  # 2 cores), and the next `swift test` once more.
  step "build: the binaries in $PREBUILT_BIN"
  for tool in "${tools[@]}"; do
    [ -x "$PREBUILT_BIN/$tool" ] || { echo "main: PREBUILT_BIN=$PREBUILT_BIN has no $tool; build it or leave PREBUILT_BIN unset" >&2; exit 1; }
  done
  BIN=$PREBUILT_BIN
else
  step "build (release)"
  # only the tools this job runs: a plain `swift build` also builds every executable of the
  # dependencies (swift-protobuf's protoc: ~600 C++ files) that nothing here uses.
  for tool in "${tools[@]}"; do
    swift build -c release ${BUILD_FLAGS:-} --product "$tool" 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\]' || true
  done
  BIN=$(swift build -c release ${BUILD_FLAGS:-} --show-bin-path)
  [ -x "$BIN/train-adapter" ] || { echo "main: the build failed; see the output above" >&2; exit 1; }
fi
"$BIN/adapter-data" inspect | grep -E '^(path|architecture|layers|parameters|chatTemplate|signature):'

DATA=examples/extraction
RUN=${RUN:-runs/extraction}
EVAL_SAMPLES=${EVAL_SAMPLES:-100}

step "train the extraction adapter and evaluate base vs adapter (examples/extraction/run.sh)"
EVAL_SAMPLES=$EVAL_SAMPLES RUN=$RUN BIN=$BIN examples/extraction/run.sh

if [ "${SKIP_DRAFT:-0}" != 1 ]; then
  step "train a draft model for speculative decoding"
  "$BIN/train-draft" --checkpoint "$RUN/adapter-final.safetensors" \
      --train-data "$DATA/train.jsonl" \
      --draft-layers 4 --divergence forward --epochs 1 --max-steps "${DRAFT_STEPS:-60}" \
      --learning-rate 2e-3 --batch-size 4 --warmup-steps 5 --max-sequence-length 320 --checkpoint-dir "$RUN"
  step "speculative decoding: speed with and without the draft, constrained as the package runs (identical output)"
  "$BIN/bench" speculative --checkpoint "$RUN/adapter-final.safetensors" \
      --draft-checkpoint "$RUN/draft-model-final.safetensors" --constrained \
      --prompts "$DATA/prompts.jsonl" --num-draft-tokens 3 | tee "$RUN/speculative.txt"
  step "speculative decoding with prompt lookup (no draft to train), constrained"
  "$BIN/bench" speculative --checkpoint "$RUN/adapter-final.safetensors" --draft ngram --constrained \
      --prompts "$DATA/prompts.jsonl" --num-draft-tokens 3 | tee "$RUN/speculative-ngram.txt"
  DRAFT_ARGS=(--draft-checkpoint "$RUN/draft-model-final.safetensors")
else
  DRAFT_ARGS=()
fi

step "export the .fmadapter package"
"$BIN/export-fmadapter" --adapter-name calendar_extraction --checkpoint "$RUN/adapter-final.safetensors" \
    "${DRAFT_ARGS[@]}" --output-dir "$RUN/export" --author "adapter-toolkit example" \
    --description "Calendar requests to JSON (examples/extraction)" --license Apache-2.0

step "generate with the package"
# examples/extraction/prompt.jsonl: "lunch with Ana next Tuesday at 12:30 for an hour at Cafe Rio"
# with the example's system message and response_format schema
"$BIN/generate" --checkpoint "$RUN/export/calendar_extraction.fmadapter" --prompt "$DATA/prompt.jsonl"

step "results"
cat "$RUN/eval-table.txt"
[ -f "$RUN/speculative.txt" ] && tail -n 3 "$RUN/speculative.txt" && tail -n 3 "$RUN/speculative-ngram.txt"
echo "adapter: $RUN/adapter-final.safetensors; package: $RUN/export/calendar_extraction.fmadapter"
# Each run keeps its own log (metrics.jsonl: a header naming the run, then a row per step), loss
# curve and TensorBoard event files in a folder of its own; docs/run-logs.md.
echo "adapter run: loss curve $RUN/adapter/loss-curve.svg, log $RUN/adapter/metrics.jsonl"
[ -f "$RUN/draft/metrics.jsonl" ] && echo "draft run:   loss curve $RUN/draft/loss-curve.svg, log $RUN/draft/metrics.jsonl"
echo "evaluation:  $RUN/evaluation/metrics.jsonl (a TensorBoard run per model)"
echo "TensorBoard, the runs side by side: tensorboard --logdir $RUN"
echo "  (scripts/setup.sh installed it: $(scripts/tensorboard-env.sh)/tensorboard --logdir $RUN, then open http://localhost:6006)"
echo "main: done in $(( $(date +%s) - start ))s"
