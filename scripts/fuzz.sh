#!/usr/bin/env bash
# Runs every fuzz target of the module, one after the other, for a given
# time each, and reports executions and any crasher.
#
#   scripts/fuzz.sh                 # every target, 5 minutes each
#   scripts/fuzz.sh -t 30s          # every target, 30 seconds each
#   scripts/fuzz.sh -t 5m ./ledger  # only the targets of ./ledger
#   scripts/fuzz.sh -p 2            # two fuzzing workers per target
#
# A crasher is written by `go test` under the package's
# testdata/fuzz/<Target>/ and replays as a regression seed in every later
# `go test` run; commit it with the fix. Logs go to $NZC_FUZZ_LOGS
# (default: a new temporary directory). Exit status: 0 when no target
# failed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=5m
workers=1
while getopts "t:p:h" opt; do
	case $opt in
	t) fuzztime=$OPTARG ;;
	p) workers=$OPTARG ;;
	h) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: scripts/fuzz.sh [-t duration] [-p workers] [package...]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)

logs=${NZC_FUZZ_LOGS:-$(mktemp -d -t nzc-fuzz.XXXXXX)}
mkdir -p "$logs"
summary="$logs/summary.tsv"
printf 'package\ttarget\tfuzztime\tresult\texecs\tnew_interesting\n' >"$summary"

mapfile -t packages < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' "${pkgs[@]}" | sed '/^$/d')
failed=0
total=0
for pkg in "${packages[@]}"; do
	mapfile -t targets < <(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
	for target in "${targets[@]}"; do
		total=$((total + 1))
		log="$logs/$(echo "$pkg" | tr '/' '_').$target.log"
		printf '%s %s (%s) ... ' "$pkg" "$target" "$fuzztime" >&2
		if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel "$workers" "$pkg" >"$log" 2>&1; then
			result=ok
		else
			result=FAIL
			failed=$((failed + 1))
		fi
		# The last progress line holds the totals: "fuzz: elapsed: 5m0s, execs: N (r/sec), new interesting: M (total: T)".
		last=$(grep -E '^fuzz: elapsed' "$log" | tail -1 || true)
		execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
		interesting=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
		printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$target" "$fuzztime" "$result" "${execs:-?}" "${interesting:-?}" >>"$summary"
		echo "$result, ${execs:-?} execs" >&2
		if [ "$result" = FAIL ]; then
			grep -E 'Failing input written to|--- FAIL|panic:' "$log" | head -5 >&2 || true
		fi
	done
done

echo "fuzzed $total targets for $fuzztime each; $failed failed; logs and summary.tsv in $logs" >&2
column -t -s $'\t' "$summary" 2>/dev/null || cat "$summary"
[ "$failed" -eq 0 ]
