#!/usr/bin/env bash
# Fetch the ONNX Runtime shared library into lib/onnxruntime/ (git-ignored),
# for teachers built with -tags onnx (party/teacher, ml/onnx).
#
# Source: the npm registry package onnxruntime-node@1.30.0, which ships the
# CPU build of libonnxruntime.so.1 for linux/x64 inside its tarball. Only
# that file is kept, after checking its SHA-256; the package's install script
# is never run. Running the script again does nothing when the verified
# library is already present.
#
# Usage: scripts/fetch-onnxruntime.sh [DEST_DIR]   (default: lib/onnxruntime)
# Prints the library's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

NPM_PACKAGE="onnxruntime-node@1.30.0"
IN_PACKAGE="package/bin/napi-v6/linux/x64/libonnxruntime.so.1"
SHA256=ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23
DEST=${1:-lib/onnxruntime}
LIB="$DEST/libonnxruntime.so.1"

if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
	echo "fetch-onnxruntime.sh: the npm package ships the library used here for linux/x64 only; this is $(uname -s)/$(uname -m)" >&2
	exit 1
fi
verified() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }
if verified "$LIB"; then
	echo "$PWD/$LIB"
	exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "fetch-onnxruntime.sh: npm is needed (Debian: apt-get install npm)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching $NPM_PACKAGE from the npm registry (about 110 MB) for $LIB" >&2
(cd "$tmp" && npm pack "$NPM_PACKAGE" --silent >/dev/null)
tar -xzf "$tmp"/onnxruntime-node-*.tgz -C "$tmp" "$IN_PACKAGE"
if ! verified "$tmp/$IN_PACKAGE"; then
	echo "fetch-onnxruntime.sh: $IN_PACKAGE of $NPM_PACKAGE has SHA-256 $(sha256sum "$tmp/$IN_PACKAGE" | cut -d' ' -f1), want $SHA256; not installed" >&2
	exit 1
fi
mkdir -p "$DEST"
install -m 0644 "$tmp/$IN_PACKAGE" "$LIB.tmp"
mv "$LIB.tmp" "$LIB"
echo "$PWD/$LIB"
