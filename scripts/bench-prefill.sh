#!/usr/bin/env bash
# Prefill speed at several prompt lengths (17-256 rows: issue 40 item 4), ours beside llama.cpp's
# llama-bench in one sitting, 2 threads, per GGUF file: `bench decode --prompt-tokens N` in both
# activation modes (q8, the default, and float32) against `llama-bench -p N -n 0` (mean tokens/s of
# REPS runs after a warmup, from its JSON). Prints one table per file and writes
# runs/bench-prefill/<time>.json. Leaves out decoding and memory (scripts/bench-decode.sh has them).
# Usage: scripts/bench-prefill.sh [GGUF ...]   (default: the SmolLM2 file from scripts/fetch-model.sh)
# Knobs (environment): LENGTHS ("17 32 64 128 256"), REPS (3), THREADS (2), BENCH_LEVEL (unset: the
# CPU's own level; avx2 etc. sets ADAPTER_CPU_LEVEL for ours), LLAMA_BENCH (default: the build of
# scripts/peers/llama_cpp.sh, $PEERS/llama.cpp/bin/llama-bench; at BENCH_LEVEL=avx2 pass the AVX2-only
# build, $PEERS/llama.cpp-avx2/bin/llama-bench, to compare like with like), BLAS_CORE (below).
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PEERS:-$HOME/.cache/adapter-peers}
LENGTHS=${LENGTHS:-17 32 64 128 256}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
# OpenBLAS's own kernels for this CPU unless BLAS_CORE names some (why: scripts/bench-decode.sh).
if [ -n "${BLAS_CORE:-}" ]; then export OPENBLAS_CORETYPE=$BLAS_CORE; else unset OPENBLAS_CORETYPE; fi
llama_bench=${LLAMA_BENCH:-$PEERS/llama.cpp/bin/llama-bench}
ours=.build/release/bench
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(assets/SmolLM2-135M-Instruct.Q4_1.gguf)
[ -x "$llama_bench" ] || { echo "bench-prefill: no llama-bench at $llama_bench: run scripts/peers/llama_cpp.sh (or set LLAMA_BENCH)" >&2; exit 1; }
[ -x "$ours" ] || swift build -c release --product bench
for m in "${models[@]}"; do [ -f "$m" ] || { echo "bench-prefill: no file $m" >&2; exit 1; }; done

stamp=$(date -u +%Y%m%dT%H%M%SZ)
dir=runs/bench-prefill/$stamp
mkdir -p "$dir"
csv=$(echo $LENGTHS | tr ' ' ',')
i=0
for model in "${models[@]}"; do
  i=$((i + 1))
  echo "== $(basename "$model"): llama-bench -t $THREADS -p $csv -n 0 -r $REPS (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$llama_bench" -m "$model" -t "$THREADS" -p "$csv" -n 0 -r "$REPS" -o json > "$dir/$i.llama.json"
  for n in $LENGTHS; do
    for mode in q8 float32; do
      echo "== $(basename "$model"): ours bench decode --prompt-tokens $n --activations $mode" >&2
      ${BENCH_LEVEL:+env ADAPTER_CPU_LEVEL=$BENCH_LEVEL} "$ours" decode --model "$model" --prompt-tokens "$n" --gen-tokens 1 \
        --repeats "$REPS" --threads "$THREADS" --activations "$mode" --out "$dir/$i.ours.$n.$mode.json" > /dev/null
    done
  done
done

python3 - "$dir" "$stamp" "${models[@]}" <<'EOF'
import json, os, platform, sys
dir, stamp, models = sys.argv[1], sys.argv[2], sys.argv[3:]
lengths = [int(n) for n in os.environ.get("LENGTHS", "17 32 64 128 256").split()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
out = {"time": stamp, "cpu": cpu, "level": os.environ.get("BENCH_LEVEL") or "native", "threads": int(os.environ.get("THREADS", "2")), "files": []}
for i, model in enumerate(models, 1):
    llama = {t["n_prompt"]: t["avg_ts"] for t in json.load(open(f"{dir}/{i}.llama.json")) if t["n_gen"] == 0}
    rows = []
    print(f"\n{os.path.basename(model)} — prefill tokens/s, {out['threads']} threads, level {out['level']}, {cpu}")
    print(f"{'rows':>5} {'llama.cpp':>10} {'ours q8':>9} {'ratio':>7} {'ours f32':>9} {'ratio':>7}")
    for n in lengths:
        q8 = json.load(open(f"{dir}/{i}.ours.{n}.q8.json"))["prefill_tokens_per_s"]
        f32 = json.load(open(f"{dir}/{i}.ours.{n}.float32.json"))["prefill_tokens_per_s"]
        l = llama[n]
        rows.append({"rows": n, "llama_cpp": l, "q8": q8, "float32": f32, "q8_ratio": q8 / l, "float32_ratio": f32 / l})
        print(f"{n:5d} {l:10.1f} {q8:9.1f} {q8 / l:6.2f}x {f32:9.1f} {f32 / l:6.2f}x")
    out["files"].append({"model": model, "rows": rows})
json.dump(out, open(f"{dir}.json", "w"), indent=1)
print(f"\nwritten: {dir}.json")
EOF
