#!/usr/bin/env bash
# Every tool end to end on one base model, each under /usr/bin/time -v: train-adapter (a few
# steps on a tiny repeated data set; the loss must fall), train-draft (frozen embeddings),
# evaluate-adapter, export-fmadapter (package with the draft, PEFT, llama.cpp LoRA GGUF, and fuse),
# generate (the base, with the adapter, with the draft) and `bench speculative`. Prints one line per
# tool: wall time, peak RSS, how many full float32 copies of stored base matrices the tool made
# (ADAPTER_REPORT_FULL_COPIES=1), the tool's own figure (loss, tokens/s), and the base's float32
# size beside it. Leaves out quality (random-weight models say nothing there).
# STEPS (default 8: two epochs of the 8 samples, whose halves the loss check compares), DRAFT_STEPS
# (4) and RANK (8) from the environment.
# Usage: scripts/bench-tools.sh MODEL.gguf [WORKDIR]   (WORKDIR default: a fresh folder in /tmp,
# deleted at the end unless KEEP=1; the fused model alone is as big as an F16 copy of the base)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:?usage: scripts/bench-tools.sh MODEL.gguf [WORKDIR]}
[ -f "$model" ] || { echo "bench-tools: no such file: $model" >&2; exit 1; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
work=${2:-$(mktemp -d /tmp/bench-tools.XXXXXX)}
mkdir -p "$work"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
cd "$root"
bin=.build/release
for t in train-adapter train-draft evaluate-adapter export-fmadapter generate bench; do
  [ -x "$bin/$t" ] || { echo "bench-tools: $bin/$t is missing; run swift build -c release first" >&2; exit 1; }
done
steps=${STEPS:-8} draft_steps=${DRAFT_STEPS:-4} rank=${RANK:-8}

# A tiny repeated data set: the assistant repeats the user's word in upper case.
words=(alpha bravo charlie delta echo foxtrot golf hotel)
: > "$work/train.jsonl"
for w in "${words[@]}"; do
  printf '{"messages": [{"role": "user", "content": "say %s"}, {"role": "assistant", "content": "%s"}]}\n' "$w" "${w^^}" >> "$work/train.jsonl"
done
head -4 "$work/train.jsonl" > "$work/eval.jsonl"
for w in india juliet; do printf '{"messages": [{"role": "user", "content": "say %s"}]}\n' "$w"; done > "$work/prompts.jsonl"

# float32 size of the base: its parameter count (adapter-data inspect) times 4
params=$($bin/adapter-data inspect --base-model "$model" --json 2>/dev/null | sed -n 's/.*"parameters" : \([0-9]*\).*/\1/p' || true)

export ADAPTER_REPORT_FULL_COPIES=1  # each tool prints its count of full float32 copies on exit
run() {  # run NAME CMD...: time -v into NAME.time, the tool's stdout and stderr into NAME.log
  local name=$1; shift
  /usr/bin/time -v -o "$work/$name.time" "$@" > "$work/$name.log" 2>&1 || { echo "bench-tools: $name failed:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
}
grab() { grep -oE "$1" "$work/$2.log" || true; }  # grab PATTERN NAME: every match in NAME.log
halves() {  # halves NAME: the mean loss of the first and the second half of the steps (batches differ: compare epochs)
  grab 'step [0-9/]+ +loss [0-9.]+' "$1" | awk '{l[NR] = $NF} END {h = int(NR / 2); for (i = 1; i <= NR; i++) if (i <= h) a += l[i]; else b += l[i];
    if (h > 0) printf "mean %.3f -> %.3f (%s)", a / h, b / (NR - h), (b / (NR - h) < a / h ? "falls" : "DOES NOT FALL")}'
}
report() {  # report NAME FIGURE
  local rss wall copies
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$work/$1.time")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/$1.time")
  copies=$(sed -n 's/^full float32 copies of stored base matrices: //p' "$work/$1.log" | tail -1)
  printf '%-22s wall %8s   peak RSS %6s MB   full copies %3s   %s\n' "$1" "$wall" "$rss" "${copies:-?}" "$2"
}

echo "== $(basename "$model") ($(du -m "$model" | cut -f1) MB file${params:+, float32 weights $((params * 4 / 1048576)) MB}); load average $(cut -d' ' -f1-3 /proc/loadavg)"
run train-adapter $bin/train-adapter --base-model "$model" --train-data "$work/train.jsonl" --checkpoint-dir "$work/adapter" \
  --rank "$rank" --batch-size 2 --epochs 100 --max-steps "$steps" --learning-rate 5e-3 --warmup-steps 0 --seed 1
report train-adapter "losses: $(grab 'step [0-9/]+ +loss [0-9.]+' train-adapter | awk '{print $NF}' | tr '\n' ' ')$(halves train-adapter); $(grab '[0-9.]+ tok/s' train-adapter | tail -1)"
adapter=$work/adapter/adapter-final.safetensors

run train-draft $bin/train-draft --base-model "$model" --checkpoint "$adapter" --train-data "$work/train.jsonl" \
  --checkpoint-dir "$work/draft" --draft-layers 2 --freeze-embeddings --batch-size 2 --epochs 100 --max-steps "$draft_steps" \
  --learning-rate 1e-3 --warmup-steps 0
draft=$work/draft/draft-model-final.safetensors
report train-draft "losses: $(grab 'step [0-9/]+ +loss [0-9.]+' train-draft | awk '{print $NF}' | tr '\n' ' '); $(grab '[0-9.]+ tok/s' train-draft | tail -1)"

run evaluate-adapter $bin/evaluate-adapter --base-model "$model" --checkpoint "$adapter" --eval-data "$work/eval.jsonl" \
  --max-samples 4 --max-new-tokens 8
report evaluate-adapter "$(grep -iE 'loss|match' "$work/evaluate-adapter.log" | tail -3 | tr -s ' ' | tr '\n' ';' || true)"

run export-package $bin/export-fmadapter export --checkpoint "$adapter" --draft-checkpoint "$draft" --base-model "$model" \
  --adapter-name bench --output-dir "$work/exports"
report export-package "$(du -sm "$work/exports/bench.fmadapter" | cut -f1) MB package"

run export-peft $bin/export-fmadapter export --format peft --checkpoint "$adapter" --base-model "$model" \
  --adapter-name bench_peft --output-dir "$work/exports"
report export-peft "$(du -sm "$work/exports/bench_peft" | cut -f1) MB PEFT folder"

run export-gguf $bin/export-fmadapter export --format gguf --checkpoint "$adapter" --base-model "$model" \
  --adapter-name bench_lora --output-dir "$work/exports"
report export-gguf "$(du -m "$work/exports/bench_lora.gguf" | cut -f1) MB llama.cpp LoRA GGUF"

run export-fuse $bin/export-fmadapter fuse --base-model "$model" --checkpoint "$adapter" --format gguf-f16 --output "$work/fused.gguf"
report export-fuse "$(du -m "$work/fused.gguf" | cut -f1) MB fused F16 GGUF"
rm -f "$work/fused.gguf"

# Decoding speed on the bare base (random weights: it does not stop early; the briefly trained
# adapter tends to end its turn at once), with and without the draft, and once with the adapter.
run generate $bin/generate --base-model "$model" --prompt "say alpha" --max-new-tokens 32
report generate "$(grab '[0-9]+ new tokens.*tokens/s' generate | tail -1)"

run generate-adapter $bin/generate --base-model "$model" --checkpoint "$adapter" --prompt "say alpha" --max-new-tokens 32
report generate-adapter "$(grab '[0-9]+ new tokens.*tokens/s' generate-adapter | tail -1)"

run generate-draft $bin/generate --base-model "$model" --draft-checkpoint "$draft" --num-draft-tokens 3 \
  --prompt "say alpha" --max-new-tokens 32
report generate-draft "$(grab '[0-9]+ new tokens.*tokens/s' generate-draft | tail -1); $(grab 'acceptance ratio [0-9.]+' generate-draft | tail -1)"

run bench-speculative $bin/bench speculative --base-model "$model" --draft-checkpoint "$draft" \
  --prompts "$work/prompts.jsonl" --max-prompts 2 --num-draft-tokens 3 --max-new-tokens 32 --repeats 1
report bench-speculative "$(grep -iE 'tokens/s|identical' "$work/bench-speculative.log" | tr -s ' ' | tr '\n' ';' | cut -c1-200 || true)"
if [ "${KEEP:-0}" = 1 ]; then echo "logs: $work"; else echo "logs removed (KEEP=1 keeps them)"; fi
