#!/usr/bin/env bash
# The main job on a fresh machine: system packages, the default base model, a release build,
# then the example run. Grows with the toolkit (train, evaluate, draft, export).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
model=$(scripts/fetch-model.sh)
swift build -c release
echo "main: base model at $model"
