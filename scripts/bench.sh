#!/usr/bin/env bash
# Training/forward/generation speed and peak memory of the toolkit beside the peers (PyTorch +
# PEFT, scripts/peers/peft_bench.py; with WITH_MLX=1 also mlx-lm's LoRA training on the CPU,
# scripts/mlx_bench.py: it installs from PyPI but runs one step at seq 256 in about 400 s, so it
# is opt-in and timed over one step) in the same sitting, on SmolLM2-135M, fp32, rank 32, all
# seven targets, random tokens; prints both and the ratios. The machine is shared: run it when
# it is otherwise idle, and read the ratios rather than the absolute figures.
# Usage: scripts/bench.sh [SEQ ...]   (default: 256 512), from any directory; results in $OUT
# (default runs/bench in the repository). The first run sets up the peers (scripts/peers/setup.sh:
# a venv under $PEERS, ~6 GB from PyPI, a few minutes); later runs find them there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/runs/bench}
case $out in /*) ;; *) out=$PWD/$out ;; esac
cd "$root"
export PEERS=${PEERS:-$HOME/.cache/adapter-peers}
scripts/peers/setup.sh
# MLX's CPU build from PyPI, in its own venv; left out (with the reason) where it does not install.
MLX_PY=$PEERS/mlx-venv/bin/python
if [ "${WITH_MLX:-0}" = 1 ] && [ ! -x "$MLX_PY" ]; then
  { python3 -m venv "$PEERS/mlx-venv" && "$PEERS/mlx-venv/bin/pip" install -q "mlx[cpu]" mlx-lm; } >&2 \
    || { echo "bench: mlx-lm did not install here; the MLX column is left out" >&2; rm -rf "$PEERS/mlx-venv"; }
fi
model=$(scripts/fetch-model.sh)
swift build -c release --product bench >/dev/null
mkdir -p "$out"
for seq in "${@:-256 512}"; do
  for s in $seq; do
    echo "== seq $s: PyTorch + PEFT" >&2
    OMP_NUM_THREADS=2 "$PEERS/venv/bin/python" scripts/peers/peft_bench.py --random-tokens --rank 32 --batch 4 --seq "$s" \
      --warmup 1 --steps 3 --fwd-reps 2 --gen-tokens 64 --gen-reps 1 --skip-lora-infer --out "$out/peft_$s.json" >&2
    rm -f "$out/mlx_$s.json"
    if [ "${WITH_MLX:-0}" = 1 ] && [ -x "$MLX_PY" ]; then
      echo "== seq $s: mlx-lm (CPU)" >&2
      OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$MLX_PY" scripts/mlx_bench.py --rank 32 --batch 4 --seq "$s" \
        --warmup 0 --steps 1 --out "$out/mlx_$s.json" >&2 || echo "bench: the MLX run failed; its column is left out" >&2
    fi
    echo "== seq $s: adapter-toolkit" >&2
    .build/release/bench train --model "$model" --rank 32 --batch 4 --seq "$s" --steps 3 --out "$out/ours_$s.json"
    python3 - "$out/peft_$s.json" "$out/ours_$s.json" "$s" "$out/mlx_$s.json" <<'PY'
import json, os, sys
p, o, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
x = json.load(open(sys.argv[4])) if os.path.exists(sys.argv[4]) else None
def get(d, *ks):
    for k in ks:
        if not isinstance(d, dict) or k not in d: return None
        d = d[k]
    return d
rows = [("train tokens/s", get(o, "train", "tokens_per_s"), get(p, "train", "tokens_per_s"), True),
        ("forward tokens/s", get(o, "forward", "tokens_per_s"), get(p, "forward_base", "tokens_per_s"), True),
        ("greedy generation tokens/s", get(o, "generate", "tokens_per_s"), get(p, "generate_base", "tokens_per_s_mean"), True),
        ("peak RSS MB", get(o, "peak_rss_mb"), get(p, "peak_rss_mb"), False)]
print(f"seq {s}, batch 4, rank 32, all 7 targets, fp32")
print(f"{'':30} {'ours':>10} {'PEFT':>10} {'ratio':>8}")
for name, a, b, _ in rows:
    if a is None or b is None:
        print(f"{name:30} {a!s:>10} {b!s:>10}"); continue
    print(f"{name:30} {a:10.1f} {b:10.1f} {a / b:8.2f}x")
t = o.get("train", {})
if "sgemm_bound_tokens_per_s" in t:
    print(f"sgemm-bound limit: {t['matrix_gflop_per_step']:.0f} matrix GFLOP per step at {t['sgemm_gflops']:.1f} GFLOP/s (sgemm, both cores, this run)"
          f" = {t['sgemm_bound_tokens_per_s']:.0f} tokens/s; ours {100 * t['fraction_of_sgemm_bound']:.0f}% of it, PEFT {100 * (get(p, 'train', 'tokens_per_s') or 0) / t['sgemm_bound_tokens_per_s']:.0f}%")
if "startup" in o:
    print(f"time to first training step (load model, tokenize {o['startup']['samples']} samples): {o['startup']['seconds']:.2f}s")
if x is not None:
    ours_t, mlx_t = get(o, "train", "tokens_per_s"), get(x, "train", "tokens_per_s")
    print(f"{x['peer']}: train {mlx_t:.1f} tokens/s (ours {ours_t / mlx_t:.2f}x), peak RSS {x['peak_rss_mb']:.0f} MB (ours {o['peak_rss_mb'] / x['peak_rss_mb']:.2f}x)")
PY
  done
done
