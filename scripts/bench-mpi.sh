#!/usr/bin/env bash
# Data-parallel training on this machine, and what it would do on many. Part 1 trains the same
# adapter (same data, seed and global batch) as 1 process × 2 threads and as `mpirun -np 2` × 1
# thread with the TCP transport forced (--mca btl tcp,self --mca pml ob1: the path between
# machines, here over loopback), with prompt prefixes shared within batches (the default) and
# without; it prints tokens/s of each over the steps after the first, their ratio, and the
# gradient sum's seconds and bytes per step that train-adapter reports. Part 2 (ESTIMATE=1,
# the default) measures one process's step time and the adapter's size for each model in
# ESTIMATE_MODELS (default: SmolLM2, and with WITH_3B=1 a random-weight Llama-3.2-3B-shaped
# GGUF that make-model writes under runs/, never committed) and prints the scaling estimate.
# The machine is shared: part 1 alternates the runs REPEATS times and keeps each one's fastest,
# but run it when the machine is otherwise idle. Usage: scripts/bench-mpi.sh
# Environment: STEPS (default 6), BATCH (8), SAMPLES (64 training samples of the extraction
# example), REPEATS (3), OUT (runs/bench-mpi), LATENCY_US (per-message latency in the estimate, 50),
# BUILD_FLAGS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/runs/bench-mpi}
steps=${STEPS:-6}
batch=${BATCH:-8}
samples=${SAMPLES:-64}
repeats=${REPEATS:-3}
latency_us=${LATENCY_US:-50}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=$(scripts/fetch-model.sh)
# BUILD_FLAGS: the flags your other builds use (e.g. "-c release -Xswiftc -enable-testing"), so
# that this build does not redo them.
build=(${BUILD_FLAGS:--c release})
swift build "${build[@]}" --product train-adapter >/dev/null
swift build "${build[@]}" --product make-model >/dev/null
mkdir -p "$out"
head -n "$samples" examples/extraction/train.jsonl > "$out/train.jsonl"
mpi=(mpirun -np 2 --mca btl tcp,self --mca pml ob1)

# tokens/s over steps 2... of a run folder's adapter log (FOLDER/adapter/metrics.jsonl) (total tokens over total time)
rate() {
  awk '/"type":"train"/ {
    match($0, /"step":[0-9]+/); s = substr($0, RSTART + 7, RLENGTH - 7) + 0
    match($0, /"tokens":[0-9]+/); t = substr($0, RSTART + 9, RLENGTH - 9) + 0
    match($0, /"tokens_per_second":[0-9.e+-]+/); r = substr($0, RSTART + 20, RLENGTH - 20) + 0
    if (s > 1 && r > 0) { tokens += t; seconds += t / r; n++ }
  } END { if (seconds > 0) printf "%.1f %.3f %d\n", tokens / seconds, seconds / n, tokens / n; else print "0 0 0" }' "$1/adapter/metrics.jsonl"
}
# mean allreduce seconds per step and MB per step from a 2-rank log (steps after the first)
allreduce() {
  grep -o 'allreduce [0-9.]* s/step of [0-9.]* MB' "$1" | awk '$2 > 0 { s += $2; mb = $5; n++ } END { if (n) printf "%.3f %.1f\n", s / n, mb; else print "0 0" }'
}

train() {  # train FOLDER [launcher...] -- [flags...]
  local dir=$1; shift
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done; shift
  rm -rf "$dir"
  "${launcher[@]}" .build/release/train-adapter --base-model "${MODEL_UNDER_TEST:-$model}" --train-data "$out/train.jsonl" \
    --epochs 1 --max-steps "$steps" --batch-size "$batch" --seed 0 --checkpoint-dir "$dir" "$@" > "$dir.log" 2>&1
}

echo "== part 1: 1 process × 2 threads vs 2 ranks × 1 thread (TCP), SmolLM2, batch $batch, $steps steps" >&2
echo "| prompt prefixes | 1 process × 2 threads | 2 ranks × 1 thread (TCP) | ratio | allreduce per step | step time (1 process) |"
echo "| --- | --- | --- | --- | --- | --- |"
for layout in share no-share; do
  flags=(); [ $layout = no-share ] && flags=(--no-share-prefix)
  one_rate=0; two_rate=0; ar_s=1e9
  for r in $(seq "$repeats"); do
    train "$out/one-$layout-$r" env -- "${flags[@]}"
    train "$out/two-$layout-$r" "${mpi[@]}" -- "${flags[@]}"
    read -r a st _ < <(rate "$out/one-$layout-$r")
    read -r b _ _ < <(rate "$out/two-$layout-$r")
    read -r s mb < <(allreduce "$out/two-$layout-$r.log")
    echo "   run $r ($layout): 1 process $a tok/s, 2 ranks $b tok/s, allreduce $s s" >&2
    if awk -v a="$a" -v b="$one_rate" 'BEGIN { exit !(a > b) }'; then one_rate=$a; one_step=$st; rm -rf "$out/one-$layout"; cp -r "$out/one-$layout-$r" "$out/one-$layout"; cp "$out/one-$layout-$r.log" "$out/one-$layout.log"; fi
    if awk -v a="$b" -v b="$two_rate" 'BEGIN { exit !(a > b) }'; then two_rate=$b; fi
    if awk -v a="$s" -v b="$ar_s" 'BEGIN { exit !(a < b) }'; then ar_s=$s; ar_mb=$mb; fi
  done
  label=$([ $layout = share ] && echo "shared within a batch (default)" || echo "not shared (--no-share-prefix)")
  awk -v l="$label" -v a="$one_rate" -v b="$two_rate" -v s="$ar_s" -v mb="$ar_mb" -v st="$one_step" \
    'BEGIN { printf "| %s | %.0f tok/s | %.0f tok/s | %.3f | %.3f s, %.1f MB | %.2f s |\n", l, a, b, b / a, s, mb, st }'
done

[ "${ESTIMATE:-1}" = 1 ] || exit 0
echo "== part 2: one process's step time per model, then the estimate" >&2
models=("smollm2-135m=$model")
if [ "${WITH_3B:-0}" = 1 ]; then
  big=$root/runs/llama-3.2-3b-random.q4_0.gguf
  [ -f "$big" ] || .build/release/make-model --shape llama-3.2-3b --type q4_0 --output "$big" >&2
  models+=("llama-3.2-3b=$big")
fi
echo
echo "Estimate: M machines like this one (2 cores, one process × 2 threads each), each with a batch of $batch"
echo "(the global batch grows with M), gradients summed as here (reduce-scatter + allgather:"
echo "2(M−1)/M of the adapter's bytes leave each machine per step, 2(M−1) messages of ${latency_us} µs latency);"
echo "no overlap of the sum with backward. Efficiency = step compute / (compute + sum)."
echo
echo "| model | adapter (rank 32, 7 targets) | link | M = 1 | 2 | 4 | 8 | 16 |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
# Positions per step of a batch of $batch: SmolLM2's run (the 3B file carries SmolLM2's tokenizer,
# so the same data gives the same positions); a bigger model is timed on BIG_BATCH (2) samples
# per step over BIG_STEPS (2) steps and its step time scaled to those positions.
[ -f "$out/one-share/adapter/metrics.jsonl" ] || train "$out/one-share" env --
read -r _ _ tokens < <(rate "$out/one-share")
for entry in "${models[@]}"; do
  name=${entry%%=*}; path=${entry#*=}
  dir=$out/one-share
  if [ "$name" != smollm2-135m ]; then
    dir=$out/step-$name
    MODEL_UNDER_TEST=$path steps=${BIG_STEPS:-2} batch=${BIG_BATCH:-2} train "$dir" env --
  fi
  read -r tps _ _ < <(rate "$dir")
  step=$(awk -v t="$tokens" -v r="$tps" 'BEGIN { printf "%.3f", t / r }')
  echo "   $name: $tps tok/s in one process, so $step s for a step of $tokens positions" >&2
  params=$(grep -o '[0-9]* trainable parameters' "$dir.log" | head -1 | awk '{print $1}')
  for link in 10 100; do
    awk -v n="$name" -v tps="$tps" -v step="$step" -v tok="$tokens" -v p="$params" -v gbit="$link" -v lat="$latency_us" 'BEGIN {
      bytes = 4 * p; bw = gbit * 1e9 / 8
      row = sprintf("| %s | %.1f MB | %d Gbit/s |", n, bytes / 1e6, gbit)
      split("1 2 4 8 16", ms, " ")
      for (i = 1; i <= 5; i++) {
        m = ms[i]; ar = m > 1 ? 2 * (m - 1) / m * bytes / bw + 2 * (m - 1) * lat * 1e-6 : 0
        row = row sprintf(" %.0f tok/s (%.0f%%) |", m * tok / (step + ar), 100 * step / (step + ar))
      }
      print row
    }'
  done
done
