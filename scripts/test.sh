#!/usr/bin/env bash
# The test command: set up a fresh machine (system packages, the default base model), then
# run every test in a release build (model math is 10-100x slower in debug builds).
# Tests that need the real base model find it through ADAPTER_BASE_MODEL (set here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
# docs/architecture.md matches Package.swift, and nothing points outside the repository.
python3 scripts/check-architecture.py
export ADAPTER_BASE_MODEL=$(scripts/fetch-model.sh)
# Everything the tests and the scripts below write to temporary folders (several GB: test models,
# checkpoints, the small main run, Foundation's own leftovers) goes into one folder, removed when
# the command passes and kept, with its path printed, when it fails.
test_tmp=$(mktemp -d "${TMPDIR:-/tmp}/adapter-test.XXXXXX")
export TMPDIR=$test_tmp
trap 'status=$?; if [ "$status" = 0 ]; then rm -rf "$test_tmp"; else echo "test: temporary files kept in $test_tmp" >&2; fi' EXIT
swift test -c release -Xswiftc -enable-testing "$@"
# The scripts below run this build's binaries (PREBUILT_BIN) instead of building their products:
# `swift test` compiles every module with one more -enable-testing than `swift build` can pass, so
# a `swift build --product` after it compiled them all again (CI: main.sh ~5 min, the serve check
# ~15 min with every dependency's executable).
bin=$(swift build -c release -Xswiftc -enable-testing --show-bin-path)
# The numerics tests once more at each CPU level below this machine's best (ADAPTER_CPU_LEVEL runs
# that level's block kernels and OpenBLAS's kernels for it; docs/architecture.md), so a result that
# holds only on the CPU at hand (AVX-512 here, AVX2 on many users' machines) fails here. Each
# level's OpenBLAS core is its own (OPENBLAS_CORETYPE unset for these runs). On 2 busy Zen 5 cores
# this adds ~6 minutes: ~1 each for avx512 and avx2, ~3.5 for portable. CPU_LEVELS=0 skips.
if [ "${CPU_LEVELS:-1}" != 0 ]; then
  numerics='BlockKernelTests|Q8KTests|VectorKernelTests|StoredWeightsTests|StoredSafetensorsTests|PromptAttentionTests'
  numerics+='|TinyModelReferenceTests|SmolLM2ReferenceTests|RowAdapterTests|BatchedGenerationTests|SpeculativeDecodingTests'
  numerics+='|EngineTests|GradientCheckTests|NumericsTests|OutputRowsTests'
  best=$(env -u ADAPTER_CPU_LEVEL swift test -c release -Xswiftc -enable-testing --skip-build --filter BlockKernelTests.testLevelControl 2>&1 \
         | sed -n 's/^BlockKernelTests: best level here is //p')
  [ -n "$best" ] || { echo "test.sh: could not read this CPU's best level from BlockKernelTests" >&2; exit 1; }
  for level in portable avx2 avx512 avx512vnni; do
    [ "$level" = "$best" ] && break
    echo "== numerics tests at CPU level $level (this CPU runs $best)"
    env -u OPENBLAS_CORETYPE ADAPTER_CPU_LEVEL="$level" swift test -c release -Xswiftc -enable-testing --skip-build --filter "$numerics"
  done
  # An environment that picks OpenBLAS's kernels (this VM image exports OPENBLAS_CORETYPE=Haswell)
  # hides the ones a user's machine runs (Cooperlake on Zen 5): the whole suite once more with
  # OpenBLAS's own choice (~2 minutes). A reference test's bound once held only for Haswell's sums.
  if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    echo "== every test with OpenBLAS's own kernels for this CPU (the environment sets OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)"
    env -u OPENBLAS_CORETYPE swift test -c release -Xswiftc -enable-testing --skip-build "$@"
  fi
fi
# The README's first command, at a small size (a few minutes, on the test build's binaries): set up, train,
# evaluate, train a draft, measure speculative decoding, export, generate constrained with the
# package's draft. It fails when any step fails, so the first thing a newcomer types is checked.
main_run=$(mktemp -d)
PREBUILT_BIN=$bin STEPS=8 EVAL_SAMPLES=8 DRAFT_STEPS=4 RUN="$main_run/extraction" scripts/main.sh > "$main_run/main.log" 2>&1 \
  || { tail -n 40 "$main_run/main.log"; echo "test: scripts/main.sh (small) failed; the whole log: $main_run/main.log" >&2; exit 1; }
grep -q '^main: done' "$main_run/main.log" || { tail -n 20 "$main_run/main.log"; echo "test: scripts/main.sh did not print 'main: done'" >&2; exit 1; }
echo "test: scripts/main.sh (small) passed: $(grep '^main: done' "$main_run/main.log")"
rm -rf "$main_run"
# An app that depends on the toolkit by git URL and version (a tagged clone of HEAD) builds and runs.
scripts/test-example-app.sh
# The run logs as TensorBoard reads them: a short real adapter, draft and evaluation run into one
# folder, loaded with TensorBoard's own reader and compared with the metrics files (~2 minutes).
scripts/check-run-logs.sh
# PEFT loads the toolkit's exported adapter on each described architecture's tiny model and gives
# the toolkit's logits (scripts/fixtures/check_peft_architectures.py: train-adapter, export as
# PEFT, PeftModel.from_pretrained; ~30 s). It runs in the peer venv of scripts/peers/setup.sh
# (6 GB, which the test command does not make); without the venv it says so and is skipped.
peers_python=${PEERS:-$HOME/.cache/adapter-peers}/venv/bin/python
if [ -x "$peers_python" ]; then
  "$peers_python" scripts/fixtures/check_peft_architectures.py
else
  echo "test: SKIPPED scripts/fixtures/check_peft_architectures.py: no peer venv at $peers_python (scripts/peers/setup.sh makes it)" >&2
fi
# The OpenAI-compatible server against real clients on loopback: the openai Python package, curl,
# schemathesis on docs/openapi.yaml (SERVE_CHECK=0 skips; scripts/serve/check.sh says what it does).
if [ "${SERVE_CHECK:-1}" != 0 ]; then
  PREBUILT_BIN=$bin scripts/serve/check.sh
fi
# Then every parser fuzzer briefly (FUZZ_SECONDS each, default 20; 0 skips), so that a
# regression on hostile input shows in CI. Long runs: scripts/fuzz.sh 600 (docs/reliability.md).
if [ "${FUZZ_SECONDS:-20}" != 0 ]; then
  scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
