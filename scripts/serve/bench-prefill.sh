#!/usr/bin/env bash
# What a long prompt does to the replies in flight (not a test): `serve` on the base model, once per
# --prefill-chunk-ms in CHUNK_MS (default "0 500": whole prompts, then serve's default), each time
# CLIENTS (default 4) streaming replies while another client sends a PROMPT_WORDS-word prompt
# (default 1200, ~1,600 tokens), ROUNDS times (default 3; new words each round). Prints one JSON line
# per round (scripts/serve/bench_prefill.py): the long prompt's time to its first token and the
# streaming clients' longest gap between two events while it was prefilled, against their median
# gap outside it. Needs ADAPTER_BASE_MODEL (scripts/fetch-model.sh) or a GGUF in it; ACTIVATIONS=q8
# serves with int8 activations.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
: "${ADAPTER_BASE_MODEL:=$(scripts/fetch-model.sh)}"
python=$(scripts/serve/setup-clients.sh)
flags=(-c release -Xswiftc -enable-testing)
swift build "${flags[@]}" --product serve >&2
serve=${SERVE_BIN:-$(swift build "${flags[@]}" --show-bin-path)/serve}
work=$(mktemp -d "${TMPDIR:-/tmp}/serve-prefill.XXXXXX")
server=""
trap '[ -n "$server" ] && kill -TERM "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
echo "serve prefill bench: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $ADAPTER_BASE_MODEL" >&2
for chunk in ${CHUNK_MS:-0 500}; do
  "$serve" --base-model "$ADAPTER_BASE_MODEL" --model-name base --port 0 --max-active 8 --prefill-chunk-ms "$chunk" \
    --activations "${ACTIVATIONS:-float32}" > "$work/serve.log" 2> "$work/serve.err" &
  server=$!
  for _ in $(seq 600); do grep -q listening "$work/serve.log" && break; sleep 0.1; done
  port=$(sed -n 's|^serve: listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
  [ -n "$port" ] || { cat "$work/serve.err" >&2; exit 1; }
  echo "--prefill-chunk-ms $chunk" >&2
  "$python" scripts/serve/bench_prefill.py "http://127.0.0.1:$port" base --clients "${CLIENTS:-4}" \
    --prompt-words "${PROMPT_WORDS:-1200}" --rounds "${ROUNDS:-3}" | sed "s/^{/{\"prefill_chunk_ms\": $chunk, /"
  kill -TERM "$server"; wait "$server" 2>/dev/null || true
  server=""
done
