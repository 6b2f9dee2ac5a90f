#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, cargo-fuzz) of what a broker reads before it trusts
# anyone: request frames (`frames`), every API's request decoder and a Produce's batches
# (`request`), and SASL before authentication through rsasl's mechanisms (`sasl`).
#
#   bash ci/fuzz.sh [SECONDS_PER_TARGET]      (default 60; --build-only: build, run nothing)
#
# Needs the nightly toolchain (without it: says so, and fails); installs cargo-fuzz if it is
# missing. .ci/run runs it for 10 s per target, built unoptimised (KAAS_FUZZ_DEV=1: a third of
# the release build's CPU time, which CI spends on the simulator instead; overflow checks on). Each target starts from
# fuzz/seeds/<target> (regressions, committed) and fuzz/corpus/<target> (what earlier runs kept,
# not committed). A crash leaves its input in fuzz/artifacts/<target>/: fix it, then commit the
# input under fuzz/seeds/<target>/ with a name that says what it broke. The test suite runs the
# same targets for a bounded time without coverage guidance (kaas-server/tests/fuzz.rs).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}
rustup run nightly rustc --version > /dev/null 2>&1 || { echo "fuzz.sh: no nightly toolchain (rustup toolchain install nightly)" >&2; exit 1; }
command -v cargo-fuzz > /dev/null || cargo install cargo-fuzz --locked
mode=()
[ "${KAAS_FUZZ_DEV:-0}" = 1 ] && mode=(--dev)
cargo +nightly fuzz build -s none "${mode[@]}"
[ "$seconds" = --build-only ] && exit 0
for target in frames request sasl; do
  # A target without committed seeds has no seeds directory in a clone: libFuzzer must still
  # be given one that exists, or it runs nothing.
  mkdir -p "corpus/$target" "seeds/$target"
  echo "== $target: ${seconds}s"
  log=$(mktemp)
  cargo +nightly fuzz run -s none "${mode[@]}" "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 > "$log" 2>&1 || true
  grep -E "^(stat::number_of_executed_units|==[0-9]+==|SUMMARY|thread .* panicked)" "$log" || true
  if ls "artifacts/$target"/{crash,oom,timeout,leak}-* > /dev/null 2>&1; then
    echo "fuzz.sh: $target crashed; inputs in fuzz/artifacts/$target/" >&2
    exit 1
  fi
  # A run that never started (a bad argument, a missing binary) is a failure too, not a pass.
  runs=$(sed -nE 's/^stat::number_of_executed_units: ([0-9]+)$/\1/p' "$log")
  if [ "${runs:-0}" -eq 0 ]; then
    echo "fuzz.sh: $target did not run:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  rm -f "$log"
done
echo "fuzz.sh: no crash in ${seconds}s per target"
