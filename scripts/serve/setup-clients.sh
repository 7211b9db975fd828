#!/usr/bin/env bash
# The real clients the test command runs against `serve`: the `openai` Python package, `jsonschema`
# (to check guided replies) and `schemathesis` (to fuzz the OpenAPI document), pinned, in a venv
# under $SERVE_CLIENTS (default ~/.cache/adapter-serve-clients), plus curl. Test clients only:
# nothing in the toolkit runs Python. Does nothing when all of it is there; prints the venv's python.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
SERVE_CLIENTS=${SERVE_CLIENTS:-$HOME/.cache/adapter-serve-clients}
venv=$SERVE_CLIENTS/venv
pins=(openai==3.57.0 jsonschema==4.26.0 schemathesis==4.32.5)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

apt_install() {
  echo "serve clients: installing $* (Debian)" >&2
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$@" >&2
}

command -v curl >/dev/null || apt_install curl

pinned() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" "$root/scripts/pins-installed.py" "${pins[@]}"
}

if ! pinned; then
  mkdir -p "$SERVE_CLIENTS"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" >&2 2>/dev/null || { apt_install python3-venv; python3 -m venv "$venv" >&2; }
  fi
  echo "serve clients: installing ${pins[*]} from PyPI into $venv" >&2
  "$venv/bin/pip" install -q "${pins[@]}" >&2
  pinned || { echo "serve clients: $venv does not hold ${pins[*]} after pip install" >&2; exit 1; }
fi
echo "$venv/bin/python"
