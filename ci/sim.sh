#!/usr/bin/env bash
# The simulator's CI batch, on an optimised binary with debug assertions and overflow checks
# on (the `sim` profile; in CI the `ci` profile's, built by ci/test.sh):
# 1. replay every seed file in sim-seeds/ (each holds the whole world that found a bug: it
#    must pass now, and reproduce its trace exactly at the commit that wrote it);
# 2. hunt every mutant (a deliberate bug) until a world of its scenarios reports the violation
#    it plants and passes without it;
# 3. a fixed window of seeds of every scenario, the same for every run of a commit, its first
#    quarter run twice to check determinism;
# 4. a rotating window that moves on every day, so CI explores rather than repeats;
# 5. the corner-case matrix over both windows (`kaas-sim coverage`): every crash point, BUGGIFY
#    site, fault kind, KIP-1289 case and placement, with how many worlds reached it.
# Seeds run in parallel on every core. Fails on any violation.
set -euo pipefail
cd "$(dirname "$0")/.."
section() { echo "== $1 (at ${SECONDS} s)"; }
FIXED=${KAAS_SIM_FIXED:-32}
ROTATING=${KAAS_SIM_ROTATING:-48}
MUTANT_SEEDS=${KAAS_SIM_MUTANT_SEEDS:-400}
# cluster-flap's worlds live through several leases each (about 40 simulated seconds of
# frequent heartbeats): a quarter of each window.
SLOW=cluster-flap
SLOW_SHARE=4
# .ci/run gives the binary ci/test.sh built (KAAS_SIM_BIN, the ci profile: optimised,
# assertions on); by hand, the sim profile's.
if [ -n "${KAAS_SIM_BIN:-}" ]; then
  sim=$KAAS_SIM_BIN
else
  cargo build --profile sim -p kaas-sim
  sim=target/sim/kaas-sim
fi
status=0
coverage=target/sim-coverage.jsonl
rm -f "$coverage"
shopt -s nullglob
files=(sim-seeds/*.json)
if [ ${#files[@]} -gt 0 ]; then
  section "kaas-sim replay (${#files[@]} seed files)"
  "$sim" replay "${files[@]}" > target/sim-replay.txt || status=1
  grep '^replay' target/sim-replay.txt || true
  grep -B3 'FAILS\|DIFFERS' target/sim-replay.txt || true
fi
section "kaas-sim mutants --seeds 0..$MUTANT_SEEDS"
"$sim" mutants --seeds "0..$MUTANT_SEEDS" || status=1
# The first quarter of the fixed window runs twice and must give the same trace hashes: a
# nondeterminism shows within a few hundred worlds, and the rest of the window runs once.
TWICE=$((FIXED / 4))
section "kaas-sim run --seeds 0..$FIXED (fixed window, 0..$TWICE twice; $SLOW 0..$((FIXED / SLOW_SHARE)))"
"$sim" run --seeds "0..$TWICE" --skip "$SLOW" --check-determinism --coverage "$coverage" > target/sim-fixed.txt || status=1
"$sim" run --seeds "$TWICE..$FIXED" --skip "$SLOW" --coverage "$coverage" >> target/sim-fixed.txt || status=1
"$sim" run --scenario "$SLOW" --seeds "0..$((TWICE / SLOW_SHARE))" --check-determinism --coverage "$coverage" >> target/sim-fixed.txt || status=1
"$sim" run --scenario "$SLOW" --seeds "$((TWICE / SLOW_SHARE))..$((FIXED / SLOW_SHARE))" --coverage "$coverage" >> target/sim-fixed.txt || status=1
start=$(( 1000000 + $(date +%s) / 86400 * 10000 ))
section "kaas-sim run --seeds $start..$((start + ROTATING)) (today's window; $SLOW a quarter)"
"$sim" run --seeds "$start..$((start + ROTATING))" --skip "$SLOW" --coverage "$coverage" > target/sim-rotating.txt || status=1
"$sim" run --scenario "$SLOW" --seeds "$start..$((start + ROTATING / SLOW_SHARE))" --coverage "$coverage" >> target/sim-rotating.txt || status=1
for batch in target/sim-fixed.txt target/sim-rotating.txt; do
  echo "-- $batch: $(grep -c 'result=pass' "$batch") seeds passed"
  grep '^summary\|^batch' "$batch" || true
  grep -A5 'result=fail' "$batch" || true
done
section "kaas-sim coverage (both windows)"
"$sim" coverage "$coverage" || status=1
echo "== ci/sim.sh done in ${SECONDS} s"
exit $status
