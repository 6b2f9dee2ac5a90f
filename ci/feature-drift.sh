#!/usr/bin/env bash
# CI builds the broker's selection (kaas-core, kaas-net, kaas-server) and then the simulator's
# (kaas-client, kaas-sim) in one profile (ci/test.sh). A dependency whose features differ
# between the two is compiled twice, with everything that depends on it. This lists such
# dependencies and fails if there are any; the fix is a "feature alignment" line in
# kaas-sim/Cargo.toml or kaas-server/Cargo.toml. kaas-core and kaas-net differ by design (the
# `sim` feature).
set -euo pipefail
cd "$(dirname "$0")/.."
features() {
  cargo tree "$@" -e normal,build,dev --prefix none -f '{p} [{f}]' 2>/dev/null |
    sed -E 's/ \([^)]*\)//; s/ \(\*\)$//' | grep -v '^kaas-' | awk '{print $1"@"$2, $3}' | sort -u
}
drift=$(join -j1 <(features -p kaas-core -p kaas-net -p kaas-server) <(features -p kaas-client -p kaas-sim) |
        awk '$2 != $3')
if [ -n "$drift" ]; then
  echo "built with different features by the broker's and the simulator's selections:"
  echo "$drift"
  exit 1
fi
echo "no feature drift between the broker's and the simulator's selections"
