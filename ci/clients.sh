#!/usr/bin/env bash
# Real clients nobody here wrote, installed from their registries, each running a short script
# against a kaas broker: produce, consume in a group, commit, read the commit back.
set -euo pipefail
cd "$(dirname "$0")/.."
KAAS=target/release/kaas
[ -x "$KAAS" ] || cargo build --release -p kaas-server
scripts=$(ls ci/clients/*.py ci/clients/node/*.mjs 2>/dev/null || true)
if [ -z "$scripts" ]; then echo "no client scripts"; exit 0; fi

if ls ci/clients/*.py >/dev/null 2>&1; then
  if [ ! -x ci/.venv/bin/python ]; then
    python3 -m venv ci/.venv
    ci/.venv/bin/pip install --quiet -r ci/clients/requirements.txt
  fi
fi
if ls ci/clients/node/*.mjs >/dev/null 2>&1 && [ ! -d ci/clients/node/node_modules ]; then
  (cd ci/clients/node && npm install --no-audit --no-fund --silent)
fi

data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$KAAS" serve --data-dir "$data" --listen "127.0.0.1:$port" --set group.initial.rebalance.delay.ms=0 2> "$data.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

passed=0; failed=0
for script in $scripts; do
  echo "== $script"
  case "$script" in
    *.py) runner=ci/.venv/bin/python ;;
    *.mjs) runner=node ;;
  esac
  if timeout 120 "$runner" "$script" "127.0.0.1:$port"; then passed=$((passed+1)); else failed=$((failed+1)); echo "FAILED: $script"; fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] || { tail -50 "$data.log"; exit 1; }
