#!/usr/bin/env bash
# Runs every fault test of the federation (cmd/internal/faults with the
# faults build tag): the party binaries as processes on loopback, the
# aggregator killed at each point of the release path, a hospital killed in
# the middle of a batch, the aggregator cut off from a majority of the
# auditors, an auditor restarted from its store and started on a damaged
# one. The project's test command runs only the fast part.
#
#   scripts/faults.sh            # every fault, without the race detector
#   scripts/faults.sh -race      # the same, binaries and tests under -race
#   FAULTS_LOGS=1 scripts/faults.sh -v   # print every party's log at the end
#
# Extra arguments go to `go test`. Exit status is go test's.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "==> go test -tags faults -count=1 -v $* ./cmd/internal/faults"
exec go test -tags faults -count=1 -timeout 20m -v "$@" ./cmd/internal/faults
