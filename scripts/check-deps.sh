#!/usr/bin/env bash
# Fails when a pure package (mechanism/, ledger/) depends on the network,
# logging, or an outside library other than the ones DESIGN.md allows, and
# when raft is imported anywhere but party/auditor/raftnode.
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

# raft has one importer, and that importer knows nothing of the ledger.
raft_importers=$(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./... |
	awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^github\.com\/hashicorp\/raft($|\/)/) { print $1; break } }' |
	grep -v '^github\.com/nzcfed/nzc/party/auditor/raftnode$' || true)
if [ -n "$raft_importers" ]; then
	echo "FAIL: only party/auditor/raftnode may import hashicorp/raft (see DESIGN.md); also imported by:"
	printf '  %s\n' $raft_importers
	status=1
else
	echo "ok: hashicorp/raft is imported only by party/auditor/raftnode"
fi
if go list -deps ./party/auditor/raftnode | grep -qx 'github.com/nzcfed/nzc/ledger'; then
	echo "FAIL: party/auditor/raftnode must not depend on the ledger: it replicates any StateMachine"
	status=1
else
	echo "ok: party/auditor/raftnode does not depend on the ledger"
fi
exit $status
