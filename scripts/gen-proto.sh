#!/usr/bin/env bash
# Regenerate the Go code of the wire messages from protocol/nzcpb/*.proto.
# Needs protoc (apt-get install -y protobuf-compiler) and the protoc-gen-go
# that matches go.mod's google.golang.org/protobuf; it installs the latter.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc not found: apt-get install -y protobuf-compiler" >&2; exit 1; }
version=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
gobin=$(go env GOPATH)/bin
if ! "$gobin/protoc-gen-go" --version 2>/dev/null | grep -qx "protoc-gen-go $version"; then
	go install "google.golang.org/protobuf/cmd/protoc-gen-go@$version"
fi
PATH="$gobin:$PATH" protoc -I protocol/nzcpb \
	--go_out=protocol/nzcpb --go_opt=paths=source_relative \
	protocol/nzcpb/*.proto
gofmt -l protocol/nzcpb
echo "generated protocol/nzcpb with protoc-gen-go $version ($(protoc --version))"
