#!/usr/bin/env bash
# The project's test command: every package's tests under the race detector.
# Extra arguments are passed to `go test` (e.g. scripts/test.sh -run Ledger ./ledger/...).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(./...)
args=()
for a in "$@"; do
	case "$a" in
	./*) pkgs=() ;;
	esac
done
if [ "${#pkgs[@]}" -eq 0 ]; then
	args=("$@")
else
	args=("$@" "${pkgs[@]}")
fi

echo "==> go test -race -count=1 ${args[*]}"
exec go test -race -count=1 -timeout 30m "${args[@]}"
