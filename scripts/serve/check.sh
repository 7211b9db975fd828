#!/usr/bin/env bash
# `serve` against real clients, as the test command runs it: trains a tiny adapter on the real base
# (a few steps, seconds), puts it in an adapters folder with one made for another base (a random
# model of SmolLM2's shape) and a damaged file, starts `serve` on a free loopback port with a key
# (--api-key-file), then runs
#   - the `openai` Python package (scripts/serve/clients.py), streaming with tools included,
#   - Apple's ChatCompletionsLanguageModel replayed (Tests/ServerTests/FoundationModelsClientTests:
#     its ten request kinds as it encodes them, its stream parsing and tool-call joining),
#   - curl: one request, one bad request (400), one without the key (401; /health needs none);
#     a client that leaves a stream after three events (its request cancelled, its slot freed),
#   - schemathesis against docs/openapi.yaml: no 5xx, and every status, content type, header and
#     body (SSE events included) as the document says (a bounded number of examples),
# and stops the server however the checks end; `serve` without a key on a non-loopback address
# must refuse to start. Needs ADAPTER_BASE_MODEL (scripts/fetch-model.sh).
# SERVE_SCHEMATHESIS_EXAMPLES (default 25) bounds the fuzzing per operation; 0 skips it.
# PREBUILT_BIN: the folder of a `swift test -c release -Xswiftc -enable-testing` build to use (no build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
: "${ADAPTER_BASE_MODEL:?set ADAPTER_BASE_MODEL to the base model (scripts/fetch-model.sh prints it)}"
python=$(scripts/serve/setup-clients.sh)
flags=(-c release -Xswiftc -enable-testing)
# The binaries and the replay's test bundle come from one `swift test` build, the test command's
# (PREBUILT_BIN: its folder) or, run alone, this one (up to date after the test command's).
# `swift test` compiles every module with one more -enable-testing than `swift build` can pass:
# mixing `swift build --product` or `--build-tests` (which adds every dependency's executable,
# swift-protobuf's protoc among them) with it recompiled everything each way, 15 minutes of CI.
if [ -n "${PREBUILT_BIN:-}" ]; then
  bin=$PREBUILT_BIN
else
  swift test "${flags[@]}" --filter FoundationModelsClientTests/testTheClientsTenRequestKindsAgainstFMReplayURL > /dev/null \
    || { echo "serve check: the build failed: swift test ${flags[*]}" >&2; exit 1; }
  bin=$(swift build "${flags[@]}" --show-bin-path)
fi
for p in serve train-adapter make-model; do
  [ -x "$bin/$p" ] || { echo "serve check: no $p in $bin" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/serve-check.XXXXXX")
server=""
stop_server() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$server" 2>/dev/null || true
  fi
  server=""
}
trap 'stop_server; rm -rf "$work"' EXIT

echo "serve check: training a tiny adapter and one for another base in $work" >&2
head -n 8 examples/extraction/train.jsonl > "$work/train.jsonl"
mkdir -p "$work/adapters"
"$bin/train-adapter" --base-model "$ADAPTER_BASE_MODEL" --train-data "$work/train.jsonl" --max-steps 2 --batch-size 2 \
  --rank 4 --learning-rate 1e-3 --checkpoint-dir "$work/run" > "$work/train.log" 2>&1 || { cat "$work/train.log" >&2; exit 1; }
cp "$work/run/adapter-final.safetensors" "$work/adapters/extract.safetensors"
"$bin/make-model" --shape smollm2-135m --type q4_0 --seed 7 --tokenizer-from "$ADAPTER_BASE_MODEL" --vocabulary tokenizer \
  --output "$work/other.gguf" > "$work/other.log" 2>&1 || { cat "$work/other.log" >&2; exit 1; }
"$bin/train-adapter" --base-model "$work/other.gguf" --train-data "$work/train.jsonl" --max-steps 1 --batch-size 1 --rank 4 \
  --checkpoint-dir "$work/other-run" > "$work/other-train.log" 2>&1 || { cat "$work/other-train.log" >&2; exit 1; }
cp "$work/other-run/adapter-final.safetensors" "$work/adapters/other-base.safetensors"
printf 'not a safetensors file' > "$work/adapters/broken.safetensors"

# without a key, a non-loopback address is refused before anything is loaded
if "$bin/serve" --base-model "$ADAPTER_BASE_MODEL" --host 0.0.0.0 --port 0 > "$work/open.log" 2>&1; then
  echo "serve check: serve started on 0.0.0.0 without a key" >&2; exit 1
fi
grep -q -- "--allow-unauthenticated" "$work/open.log" || { cat "$work/open.log" >&2; exit 1; }
echo "serve: ok: refuses 0.0.0.0 without a key: $(grep -o 'reachable from other machines[^,]*' "$work/open.log")"

key="sk-check-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
printf '# the check'"'"'s key\n%s\n' "$key" > "$work/keys"
auth="Authorization: Bearer $key"
"$bin/serve" --base-model "$ADAPTER_BASE_MODEL" --adapters "$work/adapters" --model-name smollm2 --port 0 --api-key-file "$work/keys" \
  --max-active 8 --queue 32 --default-max-tokens 16 --max-tokens-limit 256 > "$work/serve.log" 2> "$work/serve.err" &
server=$!
port=""
for _ in $(seq 300); do
  port=$(sed -n 's|^serve: listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.err" >&2; echo "serve check: the server did not start" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "serve check: no port after 30 s" >&2; exit 1; }
url=http://127.0.0.1:$port
echo "serve check: $(cat "$work/serve.log")" >&2

"$python" scripts/serve/clients.py "$url" smollm2 extract "$key"

# Apple's client, replayed: the ten request kinds against this server (the test skips only without these variables)
FM_REPLAY_URL=$url FM_REPLAY_MODEL=extract FM_REPLAY_KEY=$key swift test "${flags[@]}" --skip-build \
  --filter FoundationModelsClientTests/testTheClientsTenRequestKindsAgainstFMReplayURL > "$work/replay.log" 2>&1 \
  || { cat "$work/replay.log" >&2; echo "serve check: the Foundation Models replay failed" >&2; exit 1; }
if grep -q "skipped" "$work/replay.log" || ! grep -q "Executed 1 test, with 0 failures" "$work/replay.log"; then
  cat "$work/replay.log" >&2; echo "serve check: the Foundation Models replay did not run" >&2; exit 1
fi
grep '^replay:' "$work/replay.log" | cut -c1-200
echo "replay: ok: ChatCompletionsLanguageModel's ten request kinds ($(grep -o 'Executed 1 test, with 0 failures[^)]*)' "$work/replay.log" | head -1))"

# curl: one request, one bad request
out=$(curl -sS -f "$url/v1/chat/completions" -H 'Content-Type: application/json' -H "$auth" \
  -d '{"model":"extract","messages":[{"role":"user","content":"Say hi."}],"max_tokens":8}')
echo "$out" | "$python" -c 'import json,sys; r=json.load(sys.stdin); assert r["object"]=="chat.completion", r; print("curl: ok:", r["choices"][0]["message"]["content"][:60].replace("\n"," "))'
code=$(curl -sS -o "$work/bad.json" -w '%{http_code}' "$url/v1/chat/completions" -H 'Content-Type: application/json' -H "$auth" \
  -d '{"model":"extract","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}')
[ "$code" = 400 ] || { echo "serve check: a bad request got $code" >&2; cat "$work/bad.json" >&2; exit 1; }
"$python" -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["param"]=="max_tokens" and e["message"], e; print("curl: ok: 400", e["message"])' "$work/bad.json"
code=$(curl -sS -o "$work/nokey.json" -w '%{http_code}' "$url/v1/models")
[ "$code" = 401 ] || { echo "serve check: a request without the key got $code" >&2; cat "$work/nokey.json" >&2; exit 1; }
"$python" -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["code"]=="missing_api_key", e; print("curl: ok: 401", e["message"])' "$work/nokey.json"

# a streaming client that leaves mid-reply: the server notices, ends its request and frees its slot.
# The client reads the first three events and closes its connection (no wall-clock timeout: a fast
# machine finishes a short reply within any fixed time); the reply is a string of at least 250
# characters, so it cannot have ended after three events.
health() { curl -sS "$url/health" | "$python" -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$1"; }
before=$(health cancelled)
"$python" - "$port" "$key" <<'PY'
import json, socket, sys
body = json.dumps({"model": "extract", "messages": [{"role": "user", "content": "Write a long story."}],
                   "max_tokens": 256, "stream": True, "response_format": {"type": "json_schema", "json_schema":
                   {"name": "story", "schema": {"type": "string", "minLength": 250}}}}).encode()
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n" % (sys.argv[2].encode(), len(body)) + body)
received = b""
while received.count(b"data:") < 3:
    chunk = sock.recv(4096)
    assert chunk, "the stream ended after %d events: %r" % (received.count(b"data:"), received[-300:])
    received += chunk
assert received.startswith(b"HTTP/1.1 200"), received[:200]
assert b"[DONE]" not in received, "the reply ended within three events"
sock.shutdown(socket.SHUT_RDWR)
sock.close()
PY
for _ in $(seq 100); do
  [ "$(health active)" = 0 ] && [ "$(health cancelled)" -gt "$before" ] && break
  sleep 0.1
done
[ "$(health active)" = 0 ] && [ "$(health cancelled)" -gt "$before" ] \
  || { echo "serve check: a streaming client that left was not cancelled (active $(health active))" >&2; exit 1; }
echo "client: ok: a streaming client that left after three events freed its slot"

if [ "${SERVE_SCHEMATHESIS_EXAMPLES:-25}" != 0 ]; then
  "$(dirname "$python")/schemathesis" run docs/openapi.yaml --url "$url" --phases examples,fuzzing --header "$auth" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance \
    --max-examples "${SERVE_SCHEMATHESIS_EXAMPLES:-25}" --seed 1 --workers 4 --request-timeout 120 --no-color \
    --suppress-health-check all --generation-database none
fi

stop_server
grep -v '^$' "$work/serve.err" >&2 || true
echo "serve check: passed"
