#!/usr/bin/env bash
# Fails when a pure package (mechanism/, ledger/) depends on the network,
# logging, or an outside library other than the ones DESIGN.md allows.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
for pure in mechanism ledger; do
	[ -d "$pure" ] || continue
	bad=$(go list -deps "./$pure/..." |
		grep -E '^(net|log/slog|os/exec|time/tzdata)$|^net/|^github\.com/(quic-go|hashicorp|spf13)/|^filippo\.io/age' |
		sort -u || true)
	allowed_ext='^(github\.com/nzcfed/nzc/|golang\.org/x/mod/sumdb/(tlog|note)$|golang\.org/x/mod/internal/)'
	ext=$(go list -deps "./$pure/..." | grep -E '^[a-z0-9-]+\.[a-z]' | grep -Ev "$allowed_ext" | sort -u || true)
	if [ -n "$bad$ext" ]; then
		echo "FAIL: $pure/ must stay pure (see DESIGN.md, 'Packages and the direction of imports'); it depends on:"
		printf '  %s\n' $bad $ext
		status=1
	else
		echo "ok: $pure/ depends only on the standard library and allowed packages"
	fi
done
exit $status
