#!/usr/bin/env bash
# Installs what the build and tests need on a fresh machine, idempotently:
# pinned Go tools into ./bin, Debian's chromium for the dashboard's
# headless-browser test, Debian's systemd for systemd-analyze, which checks
# the units in deploy/, and Debian's python3-torch for the PyTorch example.
# Quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2

mkdir -p bin
if ! ./bin/staticcheck -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	echo "installing staticcheck $STATICCHECK_VERSION into ./bin"
	GOBIN="$PWD/bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
echo "staticcheck: $(./bin/staticcheck -version)"

# The dashboard test (party/auditor, TestDashboardInBrowser) renders the page
# in headless chromium; CI sets NZC_REQUIRE_BROWSER=1 so it cannot skip.
if ! command -v chromium >/dev/null 2>&1; then
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "chromium is missing; install it (Debian: apt-get install chromium) or the dashboard's browser test skips" >&2
	else
		echo "installing chromium (Debian package) for the dashboard's browser test"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null
		apt-get install -y -qq --no-install-recommends chromium >/dev/null
	fi
fi
if command -v chromium >/dev/null 2>&1; then
	echo "chromium: $(chromium --version 2>/dev/null || echo 'installed')"
fi

# debian_install PACKAGE WHAT: installs a Debian package as root with apt-get
# (updating the lists once), saying what it is for and how long it took; or,
# where it cannot, says what skips without it.
apt_updated=
debian_install() {
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "$1 is missing; install it (Debian: apt-get install $1) or $2 skips" >&2
		return 0
	fi
	echo "installing $1 (Debian package) for $2"
	local t0=$SECONDS
	export DEBIAN_FRONTEND=noninteractive
	[ -n "$apt_updated" ] || { apt-get update -qq >/dev/null && apt_updated=1; }
	apt-get install -y -qq --no-install-recommends "$1" >/dev/null
	echo "installed $1 in $((SECONDS - t0))s"
}

# The units in deploy/systemd are checked by systemd-analyze (deploy,
# TestUnitsVerify); CI sets NZC_REQUIRE_SYSTEMD=1 so that test cannot skip.
# The package (about 10 MB installed) is not started: the test only
# analyses unit files.
if ! command -v systemd-analyze >/dev/null 2>&1; then
	debian_install systemd "the check of the systemd units"
fi
if command -v systemd-analyze >/dev/null 2>&1; then
	echo "systemd-analyze: $(systemd-analyze --version | head -1)"
fi

# The PyTorch example's test (examples/pytorch, in scripts/test-onnx.sh)
# trains teachers with Debian's python3-torch; CI sets NZC_REQUIRE_TORCH=1 so
# it cannot skip. The package brings about 150 MB of downloads (176 packages
# with --no-install-recommends) and took 169 s to install on a busy 2-core
# machine. It installs torch for Debian's /usr/bin/python3.
if ! /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
	debian_install python3-torch "the PyTorch example's test"
fi
if /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
	echo "torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
fi
