#!/usr/bin/env bash
# The whole test suite, from a fresh machine: formatting and lints, every Rust test (unit,
# librdkafka integration, simulator smoke), then the Python and Node.js client scripts against
# a freshly built broker. Installs what it needs (Python clients in ci/.venv, Node clients in
# ci/clients/node/node_modules) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo build --release"
cargo build --release --workspace
echo "== cargo test"
cargo test --workspace -- --test-threads=2
echo "== client scripts"
bash ci/clients.sh
