#!/usr/bin/env bash
# Builds and runs examples/runtime-app, a package that depends on this toolkit the way any app
# would: by git URL and version. The dependency is a tagged (0.1.0) bare clone of the committed
# HEAD, made under .build-example/ (uncommitted changes are not in it: commit first). SwiftPM
# refuses unsafeFlags in a versioned dependency, so the build itself checks that the library
# products carry none. Then the app runs on the base model (ADAPTER_BASE_MODEL or the fetched one)
# with an adapter trained for three steps here, so that base and adapter sessions run concurrently.
#   scripts/test-example-app.sh            (after scripts/setup.sh; the test command runs it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work="$root/.build-example"
sha=$(git rev-parse --short=12 HEAD)
repo="$work/toolkit-$sha/adapter-toolkit.git"
if [ ! -d "$repo" ]; then
  rm -rf "$work"/toolkit-*
  mkdir -p "$(dirname "$repo")"
  git clone --quiet --bare "$root" "$repo"
  git -C "$repo" tag 0.1.0 "$sha"
fi
[ -n "$(git status --porcelain -- Sources Package.swift)" ] && echo "test-example-app: note: uncommitted changes under Sources/ or Package.swift are not in the dependency (it is HEAD, $sha)" >&2
export ADAPTER_TOOLKIT_URL="file://$repo"
app="$root/examples/runtime-app"
rm -f "$app/Package.resolved"   # a pin of an earlier clone's 0.1.0 would not match this one
echo "test-example-app: building examples/runtime-app against $ADAPTER_TOOLKIT_URL (from: 0.1.0)" >&2
# A debug build, as an app's first `swift run` is, with the C code (the block kernels)
# at -O2 so that the model runs at a usable speed: on a fresh 2-core machine 196 s against 292
# for a release build, the app's run 22 s against 2 (94 s since the toolkit stopped building
# BoringSSL, 2026-11-29). SwiftPM's refusal of unsafeFlags in a
# versioned dependency holds in every configuration.
build=(--package-path "$app" --scratch-path "$work/build" -c debug -Xcc -O2)
swift build "${build[@]}" --product events-app 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\]' || true
bin=$(swift build "${build[@]}" --show-bin-path)
[ -x "$bin/events-app" ] || { echo "test-example-app: the example did not build" >&2; exit 1; }

model=${ADAPTER_BASE_MODEL:-$(scripts/fetch-model.sh)}
# a small adapter on the same base (three optimizer steps on the extraction example, a high
# learning rate so that its replies differ from the base's)
adapter_dir="$work/adapter"
rm -rf "$adapter_dir"
head -n 8 examples/extraction/train.jsonl > "$work/train8.jsonl"
"$root/.build/release/train-adapter" --base-model "$model" --train-data "$work/train8.jsonl" --batch-size 4 \
  --max-steps 3 --learning-rate 5e-3 --rank 8 --checkpoint-dir "$adapter_dir" > "$work/train.log" 2>&1 \
  || { cat "$work/train.log" >&2; exit 1; }
"$bin/events-app" "$model" "$adapter_dir/adapter-final.safetensors"
