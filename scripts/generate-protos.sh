#!/usr/bin/env bash
# Regenerates Sources/RunLog/Generated/*.pb.swift from proto/tensorboard/*.proto: protoc (Debian's
# protobuf-compiler, installed when missing) with protoc-gen-swift built from the swift-protobuf
# package this package depends on (the plugin's version equals the runtime library's). The
# output is committed, so a build never needs protoc or the plugin (swift-protobuf's build
# plugin would add ~10 minutes to every fresh build). Run after editing a .proto; commit the result.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v protoc >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q protobuf-compiler
fi
# A build folder of its own, so the main build's flags and products are left alone.
scratch=.build-protoc
swift build -c release --scratch-path "$scratch" --product protoc-gen-swift >&2
plugin=$(swift build -c release --scratch-path "$scratch" --show-bin-path)/protoc-gen-swift
out=Sources/RunLog/Generated
rm -f "$out"/*.pb.swift
protoc --plugin=protoc-gen-swift="$plugin" -I proto \
  --swift_out="$out" --swift_opt=FileNaming=DropPath --swift_opt=Visibility=Internal \
  proto/tensorboard/*.proto
echo "generated: $(ls "$out"/*.pb.swift | tr '\n' ' ')(protoc $(protoc --version | cut -d' ' -f2), $("$plugin" --version))" >&2
