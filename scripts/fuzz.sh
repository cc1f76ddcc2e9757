#!/usr/bin/env bash
# Runs every fuzz target of the module for a given time each, and reports
# executions and any crasher.
#
#   scripts/fuzz.sh                       # every target, 5 minutes each, one after the other
#   scripts/fuzz.sh -t 30s                # every target, 30 seconds each
#   scripts/fuzz.sh -t 5m ./ledger        # only the targets of ./ledger
#   scripts/fuzz.sh -r 'Checkpoint' ./... # only targets whose name matches the regexp
#   scripts/fuzz.sh -j 3                  # three targets at a time
#   scripts/fuzz.sh -p 2                  # two fuzzing workers per target
#
# A crasher is written by `go test` under the package's
# testdata/fuzz/<Target>/ and replays as a regression seed in every later
# `go test` run; commit it with the fix. Logs go to $NZC_FUZZ_LOGS
# (default: a new temporary directory), with summary.tsv: package, target,
# fuzz time, result, executions, new interesting inputs. Exit status: 0
# when no target failed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=5m
workers=1
jobs=1
match=.
while getopts "t:p:j:r:h" opt; do
	case $opt in
	t) fuzztime=$OPTARG ;;
	p) workers=$OPTARG ;;
	j) jobs=$OPTARG ;;
	r) match=$OPTARG ;;
	h) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: scripts/fuzz.sh [-t duration] [-p workers] [-j parallel targets] [-r regexp] [package...]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
	echo "fuzz: -j wants a positive number of targets at a time (got $jobs)" >&2
	exit 2
fi

logs=${NZC_FUZZ_LOGS:-$(mktemp -d -t nzc-fuzz.XXXXXX)}
mkdir -p "$logs"
summary="$logs/summary.tsv"
printf 'package\ttarget\tfuzztime\tresult\texecs\tnew_interesting\n' >"$summary"

# The list of "package target" pairs.
list="$logs/targets"
: >"$list"
mapfile -t packages < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' "${pkgs[@]}" | sed '/^$/d')
for pkg in "${packages[@]}"; do
	go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' | grep -E -- "$match" | sed "s|^|$pkg |" >>"$list" || true
done
total=$(wc -l <"$list")
if [ "$total" -eq 0 ]; then
	echo "fuzz: no fuzz target matches $match in ${pkgs[*]}" >&2
	exit 2
fi

# fuzz_one PKG TARGET fuzzes one target and appends its line to the summary
# (one short write, so parallel jobs do not interleave).
fuzz_one() {
	local pkg=$1 target=$2 log result last execs interesting
	log="$logs/$(echo "$pkg" | tr '/' '_').$target.log"
	if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel "$workers" "$pkg" >"$log" 2>&1; then
		result=ok
	else
		result=FAIL
	fi
	# The last progress line holds the totals: "fuzz: elapsed: 5m0s, execs: N (r/sec), new interesting: M (total: T)".
	last=$(grep -E '^fuzz: elapsed' "$log" | tail -1 || true)
	execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
	interesting=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$target" "$fuzztime" "$result" "${execs:-?}" "${interesting:-?}" >>"$summary"
	echo "$pkg $target ($fuzztime): $result, ${execs:-?} execs" >&2
	if [ "$result" = FAIL ]; then
		grep -E 'Failing input written to|--- FAIL|panic:' "$log" | head -5 >&2 || true
	fi
}
export -f fuzz_one
export logs fuzztime workers summary

echo "fuzzing $total targets for $fuzztime each, $jobs at a time; logs in $logs" >&2
xargs -P "$jobs" -L 1 bash -c 'fuzz_one "$0" "$1"' <"$list" || true

failed=$(awk -F'\t' 'NR > 1 && $4 != "ok"' "$summary" | wc -l)
finished=$(($(wc -l <"$summary") - 1))
if [ "$finished" -ne "$total" ]; then
	echo "fuzz: only $finished of $total targets reported a result" >&2
	failed=$((failed + total - finished))
fi
echo "fuzzed $total targets for $fuzztime each; $failed failed; logs and summary.tsv in $logs" >&2
column -t -s $'\t' "$summary" 2>/dev/null || cat "$summary"
[ "$failed" -eq 0 ]
