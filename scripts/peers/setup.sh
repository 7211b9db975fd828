#!/usr/bin/env bash
# Sets up the peer the toolkit is measured and checked against: PyTorch + transformers + PEFT (+ TRL) on
# the CPU in a venv under $PEERS (default ~/.cache/adapter-peers), and the toolkit's own GGUF
# (fetched by scripts/fetch-model.sh) dequantized into an fp32 Hugging Face folder there. Leaves
# out MLX (scripts/bench.sh adds it with WITH_MLX=1). Follows PyPI's packages at the versions the
# committed fixtures record. Does nothing when all of it is there. Progress on stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PEERS=${PEERS:-$HOME/.cache/adapter-peers}
venv=$PEERS/venv
hf=$PEERS/smollm2-135m-hf
# Pinned: Tests/TrainingTests/Fixtures were made with these, and bit-exact fixtures and comparable
# speed figures need the same ones. PyPI has one torch build for Linux x86_64: it runs on the CPU
# here, but pip also brings its CUDA libraries and triton (4 of the venv's ~6 GB); torch loads them
# at import, so they cannot be left out.
pins=(torch==2.15.0 transformers==5.23.0 peft==0.21.2 accelerate==1.15.0 gguf==0.19.0 sentencepiece==0.2.3 protobuf==7.36.2 trl==1.16.0)

pinned() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" "$root/scripts/pins-installed.py" "${pins[@]}"
}

if ! pinned; then
  mkdir -p "$PEERS"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2 \
    || { echo "peers: python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
  echo "peers: installing ${pins[*]} from PyPI into $venv (~6 GB, a few minutes)" >&2
  "$venv/bin/pip" install -q "${pins[@]}" >&2
  pinned || { echo "peers: $venv does not hold ${pins[*]} after pip install" >&2; exit 1; }
fi

if [ ! -f "$hf/config.json" ] || [ ! -f "$hf/model.safetensors" ]; then
  gguf=$("$root/scripts/fetch-model.sh")
  echo "peers: dequantizing $gguf into $hf" >&2
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$venv/bin/python" "$here/convert_gguf.py" "$gguf" "$hf" >&2
fi
echo "peers ready: $venv/bin/python, model at $hf" >&2
