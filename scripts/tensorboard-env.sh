#!/usr/bin/env bash
# Makes the Python venv with TensorBoard that reads the toolkit's run logs (the read-back check of
# the test command, and `tensorboard --logdir` for people), and prints its bin folder. Pinned to
# the version the check was tested with. Nothing in the toolkit runs Python. Does nothing when the
# venv already holds it. Folder: $ADAPTER_TOOLS (default ~/.cache/adapter-tools).
set -euo pipefail
TOOLS=${ADAPTER_TOOLS:-$HOME/.cache/adapter-tools}
venv=$TOOLS/venv
pin=tensorboard==2.21.0
have() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    sys.exit(0 if version('tensorboard') == '${pin#*==}' else 1)
except PackageNotFoundError:
    sys.exit(1)" 2>/dev/null
}
if ! have; then
  mkdir -p "$TOOLS"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2 \
    || { echo "tensorboard-env: python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
  echo "tensorboard-env: installing $pin from PyPI into $venv (~180 MB)" >&2
  "$venv/bin/pip" install -q "$pin" >&2
  have || { echo "tensorboard-env: $venv does not hold $pin after pip install" >&2; exit 1; }
fi
echo "$venv/bin"
