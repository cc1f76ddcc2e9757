#!/usr/bin/env bash
# Runs the soak: 100,000 queries from 4 concurrent students through 3
# hospitals and 3 auditors (real QUIC and raft over mutual TLS on loopback,
# in one process), then prints queries, duration, RSS after the warm-up and
# at the end, peak RSS, the error count, the goroutines left after shutdown,
# and each hospital's ε, which must equal a replay of the ledger's export.
#
#   scripts/soak.sh                  # 100,000 queries, at most 25 minutes
#   scripts/soak.sh -n 20000 -t 5m   # a shorter run (the bound is whole minutes)
#
# It stops by itself: on completion, or at the time bound (a failure). The
# full log goes to $NZC_SOAK_LOG (default: a new temporary file). Exit
# status: 0 when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."

queries=100000
bound=25m
while getopts "n:t:h" opt; do
	case $opt in
	n) queries=$OPTARG ;;
	t) bound=$OPTARG ;;
	h) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: scripts/soak.sh [-n queries] [-t bound]" >&2; exit 2 ;;
	esac
done
if ! [[ $bound =~ ^[0-9]+m$ ]]; then
	echo "soak: the bound is whole minutes, such as 25m (got $bound)" >&2
	exit 2
fi

log=${NZC_SOAK_LOG:-$(mktemp -t nzc-soak.XXXXXX.log)}
echo "soak: $queries queries, bound $bound; log in $log" >&2
status=0
NZC_SOAK_QUERIES=$queries NZC_SOAK_TIMEOUT=$bound \
	go test -tags soak -run '^TestSoak$' -count=1 -v -timeout "$(( ${bound%m} + 5 ))m" ./federation/e2e >"$log" 2>&1 || status=$?
grep -E 'soak: |^(--- |ok|FAIL|PASS)' "$log" | sed 's/^ *//'
if [ $status -ne 0 ]; then
	echo "soak FAILED (exit $status); see $log" >&2
fi
exit $status
