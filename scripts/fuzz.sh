#!/usr/bin/env bash
# Builds the libFuzzer harnesses in Fuzz/ (every parser of outside input: GGUF, safetensors,
# tokenizer.json, config.json, JSONL samples, checkpoints, .fmadapter packages, chat templates) and runs each
# for SECONDS (default 30) on a seed corpus: seeds the harness writes with the toolkit's own
# writers, plus small committed fixtures. Prints executions and findings per fuzzer; exits 1 when
# any fuzzer found a crash, hang (>10 s per input) or huge allocation (>512 MiB).
#   scripts/fuzz.sh [SECONDS] [FUZZER ...]      e.g. scripts/fuzz.sh 600 fuzz-gguf
# Findings land in .build-fuzz/work/FUZZER/ (crash-*, timeout-*, oom-*); replay one with
#   .build-fuzz/debug/FUZZER FILE
# The corpus grows across runs in .build-fuzz/work/FUZZER/corpus. Fuzzers run under nice -n 19,
# FUZZ_JOBS at a time (default: one per core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-30}
shift || true
all=(fuzz-gguf fuzz-safetensors fuzz-tokenizer-json fuzz-model-config fuzz-jsonl fuzz-checkpoint fuzz-fmadapter fuzz-jinja)
fuzzers=("$@")
[ ${#fuzzers[@]} -eq 0 ] && fuzzers=("${all[@]}")

scratch="$root/.build-fuzz"
flags=(--package-path Fuzz --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library)
if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
  start=$(date +%s)
  if [ $# -eq 0 ]; then
    nice -n 10 swift build "${flags[@]}" >&2
  else
    for f in "${fuzzers[@]}"; do nice -n 10 swift build "${flags[@]}" --product "$f" >&2; done
  fi
  echo "fuzz: built ${#fuzzers[@]} fuzzer(s) in $(( $(date +%s) - start )) s" >&2
fi
bin=$(swift build "${flags[@]}" --show-bin-path)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=0}

# Committed seeds beside the generated ones (small text fixtures of the test suites).
extra_seeds() {
  case "$1" in
    fuzz-tokenizer-json) echo Tests/TokenizerTests/Fixtures/tiny_llama3/tokenizer.json Tests/TokenizerTests/Fixtures/tiny_qwen2/tokenizer.json ;;
    fuzz-model-config) echo Tests/TrainingTests/Fixtures/tiny-llama/config.json Tests/TrainingTests/Fixtures/tiny-qwen2/config.json ;;
    fuzz-jsonl) echo examples/extraction/prompt.jsonl ;;
    fuzz-jinja) ls Tests/JinjaTests/Fixtures/templates/*.jinja ;;
  esac
}

# One fuzzer's run: its result line into $work/result, 1 into $work/failed when it found something.
run_one() {
  local f=$1 work="$scratch/work/$1" rc=0 t0 took execs rate found
  mkdir -p "$work/corpus"
  rm -f "$work/result" "$work/failed"
  if ! FUZZ_SEED_DIR="$work/corpus" "$bin/$f" -runs=0 "$work/corpus" >"$work/seed.log" 2>&1; then
    cat "$work/seed.log" >&2
    printf '%-20s %8s %12s %10s  %s\n' "$f" 0 ? ? "seeding failed, see $work/seed.log" >"$work/result"
    echo 1 >"$work/failed"
    return 0
  fi
  for s in $(extra_seeds "$f"); do cp "$s" "$work/corpus/seed-$(basename "$(dirname "$s")")-$(basename "$s")"; done
  rm -f "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*
  t0=$(date +%s)
  nice -n 19 "$bin/$f" "$work/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -use_value_profile=1 -print_final_stats=1 -artifact_prefix="$work/" >"$work/fuzz.log" 2>&1 || rc=$?
  took=$(( $(date +%s) - t0 ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/fuzz.log" | tail -1)
  found=$(cd "$work" && ls crash-* timeout-* oom-* leak-* 2>/dev/null | tr '\n' ' ' || true)
  if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
    echo 1 >"$work/failed"
    [ -z "$found" ] && found="exit $rc, see $work/fuzz.log"
    grep -m1 -E "ERROR: (libFuzzer|AddressSanitizer)|Fatal error|SUMMARY" "$work/fuzz.log" >&2 || tail -20 "$work/fuzz.log" >&2
  fi
  printf '%-20s %8s %12s %10s  %s\n' "$f" "$took" "${execs:-?}" "${rate:-?}" "${found:-none}" >"$work/result"
}

# libFuzzer runs one thread: FUZZ_JOBS fuzzers (default: one per core) run side by side, each for
# its full SECONDS, so the whole run takes about SECONDS x fuzzers / cores.
jobs_max=${FUZZ_JOBS:-$(nproc)}
printf '%-20s %8s %12s %10s  %s\n' fuzzer seconds executions exec/s findings
for f in "${fuzzers[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_one "$f" &
done
wait
failed=0
for f in "${fuzzers[@]}"; do
  cat "$scratch/work/$f/result" 2>/dev/null || printf '%-20s %8s %12s %10s  %s\n' "$f" ? ? ? "no result"
  [ -f "$scratch/work/$f/failed" ] || [ ! -f "$scratch/work/$f/result" ] && failed=1
done
exit $failed
