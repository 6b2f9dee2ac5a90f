#!/usr/bin/env bash
# franz-go (github.com/twmb/franz-go, fetched by the Go module proxy) against kaas:
# ci/clients/go/main.go.
set -euo pipefail
cd "$(dirname "$0")/go"
exec go run . "$1"
