#!/usr/bin/env bash
# A federation on nine "hosts", each party in a network namespace of its
# own with its own address on a private bridge, started from its kit as
# docs/DEPLOY.md says, behind an nftables firewall that lets in only the
# flows DEPLOY.md's table lists. It provisions with a topology file (no
# configuration is edited), trains the hospitals, labels, exports and
# verifies the ledger as the compliance officer, and changes a hospital's
# cap. Needs root (ip netns, nft), Go, curl and jq. Usage:
#
#   sudo scripts/multihost.sh [WORKDIR]
#
# Addresses: 10.77.0.0/24 on a bridge inside a namespace of its own
# (nzcmh-sw); nothing is changed in the machine's own namespace.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
start=$(date +%s)
work=${1:-$(mktemp -d /tmp/nzc-multihost.XXXXXX)}
mkdir -p "$work"/{bin,logs,kits}
say() { printf '%s multihost: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
fail() {
	say "FAILED: $*"
	for f in "$work"/logs/*.log; do printf '\n--- %s (last 15 lines)\n' "$f"; tail -n 15 "$f"; done
	exit 1
}

[ "$(id -u)" -eq 0 ] || { echo "multihost: needs root (ip netns, nft)" >&2; exit 2; }
# On a fresh Debian machine, install what is missing (the Debian package
# that holds each tool), as scripts/setup.sh does for the CI's tools.
missing=()
for tool in ip:iproute2 nft:nftables curl:curl jq:jq; do
	command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
	command -v apt-get >/dev/null || { echo "multihost: needs ${missing[*]}; install them" >&2; exit 2; }
	echo "multihost: installing ${missing[*]} (Debian packages)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "multihost: needs go" >&2; exit 2; }

# name  address      (the party's namespace is nzcmh-NAME)
parties=(aggregator:10.77.0.10 auditor-1:10.77.0.11 auditor-2:10.77.0.12 auditor-3:10.77.0.13
	hospital-1:10.77.0.21 hospital-2:10.77.0.22 hospital-3:10.77.0.23 student-1:10.77.0.31 compliance:10.77.0.41)
addr() {
	local p
	for p in "${parties[@]}"; do
		if [ "${p%%:*}" = "$1" ]; then echo "${p#*:}"; return 0; fi
	done
	return 1
}
ns() { echo "nzcmh-$1"; }
in_ns() { local n=$1; shift; ip netns exec "$(ns "$n")" "$@"; }

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	for p in "${parties[@]}"; do ip netns del "$(ns "${p%%:*}")" 2>/dev/null || true; done
	ip netns del nzcmh-sw 2>/dev/null || true
}
trap cleanup EXIT

say "building the binaries (CGO_ENABLED=0)"
CGO_ENABLED=0 go build -o "$work/bin/" ./cmd/nzc ./cmd/nzc-aggregator ./cmd/nzc-auditor ./cmd/nzc-teacher ./cmd/nzc-student
export PATH="$work/bin:$PATH"

say "network: a bridge in nzcmh-sw, one namespace per party"
cleanup
ip netns add nzcmh-sw
ip -n nzcmh-sw link add br0 type bridge
ip -n nzcmh-sw link set br0 up
i=0
for p in "${parties[@]}"; do
	name=${p%%:*} ip4=${p#*:}
	i=$((i + 1))
	ip netns add "$(ns "$name")"
	ip link add "mh$i" netns nzcmh-sw type veth peer name eth0 netns "$(ns "$name")"
	ip -n nzcmh-sw link set "mh$i" master br0 up
	ip -n "$(ns "$name")" addr add "$ip4/24" dev eth0
	ip -n "$(ns "$name")" link set eth0 up
	ip -n "$(ns "$name")" link set lo up
done

say "firewall: each namespace lets in only DEPLOY.md's flows"
hospitals="$(addr hospital-1), $(addr hospital-2), $(addr hospital-3)"
auditors="$(addr auditor-1), $(addr auditor-2), $(addr auditor-3)"
firewall() { # NAME RULES...
	local name=$1
	shift
	{
		echo "table inet nzc {"
		echo " chain input {"
		echo "  type filter hook input priority 0; policy drop;"
		echo "  iif lo accept"
		echo "  ct state established,related accept"
		echo "  meta l4proto icmp accept"
		for r in "$@"; do echo "  $r"; done
		echo " }"
		echo "}"
	} | in_ns "$name" nft -f -
}
firewall aggregator "ip saddr { $hospitals, $(addr student-1) } udp dport 7400 accept"
for n in 0 1 2; do
	firewall "auditor-$((n + 1))" \
		"ip saddr { $(addr aggregator), $hospitals } udp dport $((7600 + n)) accept" \
		"ip saddr { $auditors } tcp dport $((7500 + n)) accept" \
		"ip saddr { $(addr compliance), $hospitals } tcp dport $((7700 + n)) accept"
done
for name in hospital-1 hospital-2 hospital-3 student-1 compliance; do firewall "$name"; done

say "provisioning from a topology file"
cat >"$work/topology.yaml" <<EOF
base_port: 7400
parties:
  aggregator: {host: $(addr aggregator)}
  auditor-1: {host: $(addr auditor-1)}
  auditor-2: {host: $(addr auditor-2)}
  auditor-3: {host: $(addr auditor-3)}
EOF
nzc init --dir "$work/fed" --hospitals 3 --auditors 3 --students 1 --teachers 30 --classes 2 \
	--topology "$work/topology.yaml" >"$work/logs/init.log"
for p in "${parties[@]}"; do
	nzc init kit --dir "$work/fed" --party "${p%%:*}" --out "$work/kits/${p%%:*}" >/dev/null
done

# Data: two classes, four features; the hospitals each train on a third.
awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) { c = i % 2; printf "%.3f,%.3f,%.3f,%.3f,%d\n", c*3+rand(), rand()-c, rand(), c+rand(), c } }' >"$work/train.csv"
awk 'BEGIN { srand(11); for (i = 0; i < 200; i++) { c = i % 2; printf "%.3f,%.3f,%.3f,%.3f,%d\n", c*3+rand(), rand()-c, rand(), c+rand(), c } }' >"$work/query.csv"

run() { # NAME BINARY ARGS...: start a party in its namespace, from its kit
	local name=$1
	shift
	(cd "$work/kits/$name" && exec ip netns exec "$(ns "$name")" "$@") >"$work/logs/$name.log" 2>&1 &
	pids+=($!)
}

say "starting the auditors and the aggregator from their kits"
for n in 1 2 3; do run "auditor-$n" nzc-auditor run --config "auditor-$n.yaml"; done
run aggregator nzc-aggregator run --config aggregator.yaml

say "training and starting the hospitals"
for n in 1 2 3; do
	(cd "$work/kits/hospital-$n" && in_ns "hospital-$n" nzc-teacher train --config "hospital-$n.yaml" \
		--data "$work/train.csv" --data-part "$n" --data-parts 3 --model softmax --epochs 5) >"$work/logs/hospital-$n-train.log" 2>&1 ||
		fail "training hospital-$n"
	run "hospital-$n" nzc-teacher run --config "hospital-$n.yaml"
done

aggops=$(jq -r '.ops.listen' < <(cd "$work/kits/aggregator" && nzc-aggregator config show --config aggregator.yaml --format json))
say "waiting for the aggregator to have its hospitals (ops $aggops)"
for _ in $(seq 240); do
	if in_ns aggregator curl -fsS "http://$aggops/readyz" >/dev/null 2>&1; then break; fi
	sleep 0.5
done
in_ns aggregator curl -fsS "http://$aggops/readyz" >/dev/null || fail "the aggregator is not ready: $(in_ns aggregator curl -sS "http://$aggops/readyz" || true)"

accounts() { # the hospitals' budget accounts, as the compliance officer reads them from its kit
	(cd "$work/kits/compliance" && in_ns compliance nzc ledger accounts --federation . --as compliance --format json) 2>>"$work/logs/compliance.log"
}
opened() { accounts | jq '[.. | strings | select(test("^hospital-[0-9]+$"))] | unique | length' 2>/dev/null || echo 0; }
say "waiting for the ledger to hold the hospitals' accounts"
for _ in $(seq 240); do
	[ "$(opened)" = 3 ] && break
	sleep 0.5
done
[ "$(opened)" = 3 ] || fail "the ledger does not hold the three hospitals' accounts: $(accounts || true)"

say "labelling 40 queries"
(cd "$work/kits/student-1" && in_ns student-1 nzc-student label --config student-1.yaml --data "$work/query.csv" --count 40 \
	--out "$work/labels.json" --format json) >"$work/label.json" 2>"$work/logs/student-1.log" || fail "labelling"
answered=$(jq .answered "$work/label.json")
[ "$answered" -gt 0 ] || fail "no query was labelled: $(cat "$work/label.json")"

say "the compliance officer exports and verifies the ledger from its kit"
(cd "$work/kits/compliance" && in_ns compliance nzc ledger export --federation . --as compliance --out "$work/ledger.export" &&
	in_ns compliance nzc ledger verify --export "$work/ledger.export" --federation . --max-age 1h) >"$work/logs/verify.log" 2>&1 ||
	fail "verifying the ledger"
grep -q VERIFIED "$work/logs/verify.log" || fail "the ledger did not verify: $(cat "$work/logs/verify.log")"

say "hospital-1 changes its cap, sending it to the auditors' intake directly"
(cd "$work/kits/hospital-1" && in_ns hospital-1 nzc-teacher cap --config hospital-1.yaml --epsilon 4 --delta 1e-6) \
	>"$work/logs/cap.log" 2>&1 || fail "changing hospital-1's cap"
accounts >"$work/accounts.json" || fail "reading the accounts"
jq -e '.[] | select(.hospital == "hospital-1") | .cap_epsilon == 4' "$work/accounts.json" >/dev/null ||
	fail "hospital-1's cap is not 4: $(cat "$work/accounts.json")"

say "the firewall holds: the student cannot reach an auditor's API, nor the aggregator an auditor's raft port"
if in_ns student-1 curl -sk --connect-timeout 2 "https://$(addr auditor-1):7700/" >/dev/null 2>&1; then
	fail "the student reached auditor-1's compliance API through the firewall"
fi
if in_ns aggregator curl -sk --connect-timeout 2 "https://$(addr auditor-1):7500/" >/dev/null 2>&1; then
	fail "the aggregator reached auditor-1's raft port through the firewall"
fi

say "PASS: $answered of 40 queries labelled, ledger VERIFIED from the compliance kit, cap changed; $(( $(date +%s) - start )) s"
