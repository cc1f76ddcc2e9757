#!/usr/bin/env bash
# Installs what the build and tests need on a fresh machine, idempotently:
# pinned Go tools into ./bin.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2

mkdir -p bin
if ! ./bin/staticcheck -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	echo "installing staticcheck $STATICCHECK_VERSION into ./bin"
	GOBIN="$PWD/bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
echo "staticcheck: $(./bin/staticcheck -version)"
