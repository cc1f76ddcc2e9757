#!/usr/bin/env bash
# Holds the module's import graph (tests and tagged files included) against
# its layer table, internal/layers/layers.txt: no import runs up or across a
# layer; quic-go, age, raft, viper and cobra each have their one importer;
# mechanism/ and ledger/ stay pure; raftnode knows no ledger. A violation
# is printed as "RULE: IMPORTER -> IMPORTED: why".
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
out=$(go test -count=1 -run '^TestHouse$' -v ./internal/layers 2>&1) || status=$?
if [ "$status" -ne 0 ] && ! grep -q 'house_test\.go' <<<"$out"; then
	echo "$out"
	exit "$status"
fi
grep -E '^\s+house_test\.go' <<<"$out" | sed -E 's/^\s+house_test\.go:[0-9]+: //'
[ "$status" -eq 0 ] || echo "FAIL: see internal/layers/layers.txt for the layers and the rules"
exit "$status"
