#!/usr/bin/env bash
# The server's load benchmark (not a test): four adapters trained a few steps each on the real
# base (different seeds, so four different adapters), `serve` on loopback, then
#   1. one client alone (BASELINE_SECONDS, default 60): its tokens/s and time to first token,
#   2. CLIENTS concurrent clients (default 8) dealt the four adapters round-robin (LOAD_SECONDS,
#      default 60): aggregate tokens/s, speed-up over one client, TTFT p50/p99,
#   3. with LONG_SECONDS (e.g. 600), a long run of the same load: errors and the server's RSS
#      sampled every 5 s (first, last, max, slope over the second half).
# Every request streams MAX_TOKENS (default 96) tokens at most, temperature 0.8; ACTIVATIONS=q8
# serves with int8 activations (--activations q8), ADAPTER_PRECISION=float32 keeps the adapters'
# factors as trained (--adapter-precision float32; serve's default is float16), KV_CACHE=float16 halves
# every conversation's KV cache (--kv-cache float16), PROMPT_CACHE_MB sets --prompt-cache-mb (0: off;
# each request's prompt is its own words after the chat template's shared system message). Prints one JSON
# line per phase; ROUNDS=N alternates phases 1 and 2 N times and prints the median speed-up (this
# machine is shared: a slow spell during one phase alone skews a single ratio). Needs ADAPTER_BASE_MODEL (scripts/fetch-model.sh) and 2 quiet cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
: "${ADAPTER_BASE_MODEL:=$(scripts/fetch-model.sh)}"
python=$(scripts/serve/setup-clients.sh)
flags=(-c release -Xswiftc -enable-testing)
for p in serve train-adapter; do swift build "${flags[@]}" --product "$p" >&2; done
bin=$(swift build "${flags[@]}" --show-bin-path)
serve=${SERVE_BIN:-$bin/serve}  # SERVE_BIN: another build's serve, to compare two versions on one machine
work=$(mktemp -d "${TMPDIR:-/tmp}/serve-bench.XXXXXX")
server=""
trap '[ -n "$server" ] && kill -TERM "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

head -n 16 examples/extraction/train.jsonl > "$work/train.jsonl"
mkdir -p "$work/adapters"
for i in 1 2 3 4; do
  "$bin/train-adapter" --base-model "$ADAPTER_BASE_MODEL" --train-data "$work/train.jsonl" --max-steps 2 --batch-size 2 \
    --seed "$i" --checkpoint-dir "$work/run$i" > "$work/train$i.log" 2>&1 || { cat "$work/train$i.log" >&2; exit 1; }
  cp "$work/run$i/adapter-final.safetensors" "$work/adapters/adapter$i.safetensors"
done

"$serve" --base-model "$ADAPTER_BASE_MODEL" --adapters "$work/adapters" --port 0 --max-active "${CLIENTS:-8}" --queue 64 \
  --activations "${ACTIVATIONS:-float32}" --adapter-precision "${ADAPTER_PRECISION:-float16}" --kv-cache "${KV_CACHE:-float32}" \
  --prompt-cache-mb "${PROMPT_CACHE_MB:-128}" \
  > "$work/serve.log" 2> "$work/serve.err" &
server=$!
for _ in $(seq 300); do grep -q listening "$work/serve.log" && break; sleep 0.1; done
port=$(sed -n 's|^serve: listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
[ -n "$port" ] || { cat "$work/serve.err" >&2; exit 1; }
url=http://127.0.0.1:$port
models=adapter1,adapter2,adapter3,adapter4
echo "serve bench: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $url" >&2
"$python" scripts/serve/bench_load.py "$url" --models "$models" --clients "${CLIENTS:-8}" --seconds "${LOAD_SECONDS:-60}" \
  --baseline-seconds "${BASELINE_SECONDS:-60}" --rounds "${ROUNDS:-1}" --max-tokens "${MAX_TOKENS:-96}" --pid "$server"
if [ "${LONG_SECONDS:-0}" != 0 ]; then
  "$python" scripts/serve/bench_load.py "$url" --models "$models" --clients "${CLIENTS:-8}" --seconds "$LONG_SECONDS" \
    --max-tokens "${MAX_TOKENS:-96}" --pid "$server" --rss-every 5
fi
