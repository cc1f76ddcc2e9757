#!/usr/bin/env bash
# The tests of the onnx build (build tag onnx, cgo): Go inference against
# ONNX Runtime on the same weights, ONNX teachers voting as the Go ones and
# as the PyTorch ones (examples/pytorch; skips without PyTorch unless
# NZC_REQUIRE_TORCH is set), and a federation in which one hospital votes
# with ONNX teachers. Fetches the
# ONNX Runtime library first (scripts/fetch-onnxruntime.sh); with
# NZC_REQUIRE_ONNX=1 the tests cannot skip for want of it.
#
# Usage: scripts/test-onnx.sh [go test flags]
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(bash scripts/fetch-onnxruntime.sh | tail -1)
export NZC_ONNXRUNTIME="$lib" NZC_REQUIRE_ONNX=1 CGO_ENABLED=1
go vet -tags onnx ./ml/onnx/... ./party/teacher/... ./federation/e2e/... ./examples/...
go test -race -tags onnx "$@" ./ml/onnx/... ./party/teacher/... ./examples/...
go test -race -tags onnx -run 'ONNX' "$@" ./federation/e2e/
