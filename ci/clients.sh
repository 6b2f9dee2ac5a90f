#!/usr/bin/env bash
# Real clients nobody here wrote, installed from their registries (PyPI, npm, Maven Central),
# each running a short script against a three-broker cluster (one script per runtime against a
# single broker too):
# produce, consume in a group, commit, read the commit back, and copy in transactions.
set -euo pipefail
cd "$(dirname "$0")/.."
KAAS=${KAAS:-target/release/kaas}
[ -x "$KAAS" ] || cargo build --release -p kaas-server
scripts=$(ls ci/clients/*.py ci/clients/node/*.mjs ci/clients/*.sh 2>/dev/null || true)
if [ -z "$scripts" ]; then echo "no client scripts"; exit 0; fi

bash ci/install-clients.sh
echo "== clients installed, Java checks compiled (${SECONDS} s)"
# Every script runs against one broker, then against three brokers on one data directory
# (short leases, so that ownership settles in seconds): there the partitions, the group and
# the transaction coordinator are spread over the brokers, and markers cross between them.
# Share groups may set locks as short as a second, so that a renewal test need not wait 15 s.
pids=()
dirs=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "${dirs[@]}"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# start_brokers N: N brokers on one fresh data dir; sets $bootstrap to their list.
start_brokers() {
  local n=$1 data port
  bootstrap=
  data=$(mktemp -d); dirs+=("$data" "$data.log")
  for id in $(seq 0 $((n - 1))); do
    port=$(free_port)
    "$KAAS" serve --data-dir "$data" --listen "127.0.0.1:$port" --broker-id "$id" \
      --set group.initial.rebalance.delay.ms=0 --set broker.session.timeout.ms=3000 \
      --set broker.heartbeat.interval.ms=500 --set broker.lease.drift.margin.ms=500 \
      --set broker.ownership.settle.ms=1000 --set group.share.min.record.lock.duration.ms=1000 \
      > /dev/null 2>> "$data.log" &
    pids+=($!)
    for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    bootstrap="${bootstrap:+$bootstrap,}127.0.0.1:$port"
  done
  [ "$n" -eq 1 ] || sleep 4
}

# The cluster exercises every path one broker does and the routing too, so most scripts run
# against it only; one script per runtime also runs against a single broker (the Rust tests
# cover one broker with librdkafka, the conformance test and the SIGKILL tests).
single_too="ci/clients/kafka_python_client.py ci/clients/node/kafkajs_client.mjs"
passed=0; failed=0
for brokers in 1 3; do
  start_brokers $brokers
  for script in $scripts; do
    if [ "$brokers" -eq 1 ] && [[ " $single_too " != *" $script "* ]]; then continue; fi
    echo "== $script ($brokers broker(s): $bootstrap)"
    case "$script" in
      *.py) runner=ci/.venv/bin/python ;;
      *.mjs) runner=node ;;
      *.sh) runner=bash ;;
    esac
    started=$SECONDS
    if timeout 120 "$runner" "$script" "$bootstrap"; then passed=$((passed+1)); else failed=$((failed+1)); echo "FAILED: $script ($brokers)"; fi
    echo "   ($((SECONDS - started)) s)"
  done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] || { for d in "${dirs[@]}"; do [[ $d == *.log ]] && tail -30 "$d"; done; exit 1; }
