#!/usr/bin/env bash
# The whole test suite, from a fresh machine: formatting and lints, every Rust test (unit,
# librdkafka integration, the simulator's scenario tests), then the client scripts (Python,
# Node.js, the Java client, Kafka's tools, franz-go) against a freshly built broker,
# exactly-once copies and queues under broker kills, and Kafka Streams. Installs what it needs
# on first use (Python clients in ci/.venv, Node clients in ci/clients/node/node_modules, Maven
# jars in ~/.m2, Go modules in the Go module cache).
#
# The broker is built and tested per package, never with --workspace: a workspace build
# unifies features and would switch kaas-core's `sim` feature (mutants, BUGGIFY) on in the
# binary under test. Each selection is built once: its tests first (the test profile, which
# also builds target/debug/kaas, the binary the client scripts run), then clippy on the same
# selection, which reuses the build scripts (librdkafka, zstd, lz4: most of the compiling) and
# proc-macros (Cargo.toml's build-override keys them alike in both). The simulator's binary
# (ci/sim.sh) builds with the `sim` profile (optimised, assertions on); its tests run in the
# test profile.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each section says when it starts, so a slow CI run shows where its time went.
section() { echo "== $1 (at ${SECONDS} s)"; }
BROKER=(-p kaas-core -p kaas-net -p kaas-server)
SIM=(-p kaas-client -p kaas-sim)

section "cargo fmt --check"
cargo fmt --all -- --check
section "cargo build: the broker's tests and binary (test profile)"
cargo test "${BROKER[@]}" --no-run
section "cargo clippy: the broker"
cargo clippy "${BROKER[@]}" --all-targets -- -D warnings
# Under .ci/run, three builds run in the background at the lowest priority from here on, each in
# a target directory of its own so that none waits for the locks on this one: the release
# binary for the scripts that kill brokers, the simulator's optimised binary for ci/sim.sh
# (KAAS_SIM_TARGET_DIR), then the fuzz targets for ci/fuzz.sh (nightly, libFuzzer's
# instrumentation; fuzz/ is a workspace of its own). The broker's tests and the scripts mostly
# wait on brokers, JVMs and sleeps, so the later steps find them built (their cargo waits for
# these if not). Off for a plain test run, which builds the release binary where it is needed.
release_dir=target
if [ "${KAAS_CI_PREBUILD:-0}" = 1 ]; then
  release_dir=target/ci-release
  (CARGO_TARGET_DIR=$release_dir nice -n 19 cargo build --release -p kaas-server > target/release-prebuild.log 2>&1
   CARGO_TARGET_DIR=${KAAS_SIM_TARGET_DIR:-target} nice -n 19 cargo build --profile sim -p kaas-sim \
     > target/sim-prebuild.log 2>&1
   nice -n 19 bash ci/fuzz.sh --build-only > target/fuzz-prebuild.log 2>&1) &
fi
section "cargo test: the broker"
cargo test "${BROKER[@]}" -- --test-threads=2
section "cargo clippy: the simulator and its client"
cargo clippy "${SIM[@]}" --all-targets -- -D warnings
section "cargo test: the simulator and its client"
# In the test profile (kaas-core's own tests ran above): its tests run in virtual time, as fast
# as in the sim profile, and compiling their harness optimised took minutes.
cargo test "${SIM[@]}" -- --test-threads=2
# The client scripts run the binary the broker's tests built: they wait on clients, JVMs and
# sleeps, not on the broker's CPU. The scripts that kill brokers every few seconds run the
# release binary: there a take-over must finish between two kills, as in production.
export KAAS=target/debug/kaas
section "clients installed (PyPI, npm, Maven Central), the Java checks compiled"
bash ci/install-clients.sh
# Two lanes side by side: the scripts mostly wait on JVMs, handshakes, timeouts and sleeps,
# using about half of the machine each. The security lane writes to a log of its own, printed
# when both are done; the kill and bounce tests after them run alone.
section "client scripts; beside them SSL, SASL, ACLs, quotas, OAUTHBEARER (printed after)"
security_log=target/ci-security-lane.log
(
  lane() { echo "== $1 (lane at ${SECONDS} s)"; }
  lane "SSL and SASL listeners: Java, kafka-python, confluent-kafka; mutual TLS; a certificate replaced; SASL/PLAIN; 3 brokers"
  bash ci/security.sh
  lane "ACLs and client quotas on 3 brokers: kafka-acls, kafka-configs, confluent-kafka transactions as a granted user, a refused user, kafka-python's admin"
  bash ci/acls.sh
  lane "kafka-python's own admin integration tests (ACLs, topics, configs, groups, offsets) with an authorizer"
  bash ci/suites/kafka_python.sh
  lane "OAUTHBEARER (signed and unsecured tokens) and re-authentication: the Java client, confluent-kafka"
  bash ci/oauth.sh
  lane "security lane done"
) > "$security_log" 2>&1 &
security_lane=$!
clients_status=0
bash ci/clients.sh || clients_status=$?
security_status=0
wait "$security_lane" || security_status=$?
section "the security lane's output"
cat "$security_log"
[ "$clients_status" -eq 0 ] || { echo "FAILED: ci/clients.sh"; exit 1; }
[ "$security_status" -eq 0 ] || { echo "FAILED: the security lane (above)"; exit 1; }
section "the release binary, for the scripts that kill brokers"
CARGO_TARGET_DIR=$release_dir cargo build --release -p kaas-server
export KAAS=$release_dir/release/kaas
section "exactly-once copies under broker kills (TransactionalMessageCopier, franz-go)"
bash ci/kills.sh
section "share consumers under consumer and broker bounces (VerifiableShareConsumer), 1 and 3 brokers"
bash ci/share_bounces.sh 1
bash ci/share_bounces.sh 3
section "exactly-once queues under broker kills (kaas share-copy, KIP-1289)"
bash ci/share_kills.sh
section "Kafka Streams (exactly_once_v2) under broker and instance kills, restored from a compacted changelog"
bash ci/streams.sh
section "Kubernetes manifests (schema validation)"
bash ci/deploy.sh
echo "== ci/test.sh done in ${SECONDS} s"
