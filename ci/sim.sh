#!/usr/bin/env bash
# The simulator's CI batch: replay every seed file ever written, check that every mutant (a
# deliberate bug) is still caught, then a fresh batch of seeds of every scenario with a
# determinism check. Fails on any violation.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${KAAS_SIM_SEEDS:-500}
cargo build --release -p kaas-sim
sim=target/release/kaas-sim
status=0
shopt -s nullglob
for file in sim-seeds/*.json; do
  echo "== replay $file"
  "$sim" replay "$file" || status=1
done
echo "== kaas-sim mutants"
"$sim" mutants --seeds 0..3000 || status=1
# A fresh window of seeds each day, so CI explores rather than repeats.
start=$(( $(date +%s) / 86400 * 10000 ))
echo "== kaas-sim run --seeds $start..$((start + SEEDS)) --check-determinism"
"$sim" run --seeds "$start..$((start + SEEDS))" --check-determinism > target/sim-batch.txt || status=1
grep -c 'result=pass' target/sim-batch.txt | sed 's/$/ seeds passed/' || true
grep '^summary' target/sim-batch.txt || true
grep -A5 'result=fail' target/sim-batch.txt || true
exit $status
