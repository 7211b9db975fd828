#!/usr/bin/env bash
# Training/forward/generation speed and peak memory of the toolkit beside the peer (PyTorch +
# PEFT, ../shared/bench/peft_bench.py) in the same sitting, on SmolLM2-135M, fp32, rank 32, all
# seven targets, random tokens; prints both and the ratios. The machine is shared: run it when
# it is otherwise idle, and read the ratios rather than the absolute figures.
# Usage: scripts/bench.sh [SEQ ...]   (default: 256 512). Peers: ../shared/bench/setup_peers.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PEERS=${PEERS:-$HOME/.cache/adapter-peers}
SHARED=${SHARED:-$root/../shared}
[ -x "$PEERS/venv/bin/python" ] || bash "$SHARED/bench/setup_peers.sh"
model=$(scripts/fetch-model.sh)
swift build -c release --product bench-train >/dev/null
out=${OUT:-runs/bench}
mkdir -p "$out"
for seq in "${@:-256 512}"; do
  for s in $seq; do
    echo "== seq $s: PyTorch + PEFT" >&2
    OMP_NUM_THREADS=2 "$PEERS/venv/bin/python" "$SHARED/bench/peft_bench.py" --random-tokens --rank 32 --batch 4 --seq "$s" \
      --warmup 1 --steps 3 --fwd-reps 2 --gen-tokens 64 --gen-reps 1 --skip-lora-infer --out "$out/peft_$s.json" >&2
    echo "== seq $s: adapter-toolkit" >&2
    .build/release/bench-train --model "$model" --rank 32 --batch 4 --seq "$s" --steps 3 --out "$out/ours_$s.json"
    python3 - "$out/peft_$s.json" "$out/ours_$s.json" "$s" <<'PY'
import json, sys
p, o, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
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
PY
  done
done
