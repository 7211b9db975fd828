#!/usr/bin/env bash
# Installs what the toolkit needs on a fresh Debian/Ubuntu machine, and nothing when it is
# already there: OpenBLAS + LAPACKE (matrix work), libcrypto (SHA-256: libssl-dev), Open MPI (data-parallel training under mpirun)
# and pkg-config (how SwiftPM finds them); for looking at runs and checking them: rsvg-convert
# (librsvg2-bin: renders loss curves to PNG) and a Python venv with TensorBoard
# (scripts/tensorboard-env.sh; python3-venv makes it).
set -euo pipefail
need=()
for p in libopenblas-dev libssl-dev libopenmpi-dev openmpi-bin pkg-config librsvg2-bin python3-venv; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi
command -v swift >/dev/null || { echo "setup: swift not found on PATH (Swift 6 toolchain required)" >&2; exit 1; }
pkg-config --exists openblas || { echo "setup: pkg-config cannot find openblas after install" >&2; exit 1; }
pkg-config --exists libcrypto || { echo "setup: pkg-config cannot find libcrypto (libssl-dev) after install" >&2; exit 1; }
pkg-config --exists mpi || { echo "setup: pkg-config cannot find mpi (Open MPI) after install" >&2; exit 1; }
scripts_dir=$(cd "$(dirname "$0")" && pwd)
"$scripts_dir/tensorboard-env.sh" >/dev/null
# The real clients the test command runs against `serve` (openai, jsonschema, schemathesis in a
# venv, curl): test clients only, never used by the toolkit.
"$(dirname "$0")/serve/setup-clients.sh" > /dev/null
