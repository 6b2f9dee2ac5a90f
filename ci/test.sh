#!/usr/bin/env bash
# The whole test suite, from a fresh machine: formatting and lints, every Rust test (unit,
# librdkafka integration, the simulator's scenario tests), then the client scripts (Python,
# Node.js, the Java client, Kafka's tools, franz-go) against a freshly built broker,
# exactly-once copies and queues under broker kills, Kafka Streams and Kafka Connect. Installs what it needs
# on first use (Python clients in ci/.venv, Node clients in ci/clients/node/node_modules, Maven
# jars in ~/.m2, Go modules in the Go module cache).
#
# Everything is built once, in the `ci` profile (Cargo.toml: optimised, assertions and overflow
# checks on): the tests, target/ci/kaas (the binary every script runs) and target/ci/kaas-sim
# (the simulator's, for ci/sim.sh). The broker is built and tested per package, never with
# --workspace: a workspace build unifies features and would switch kaas-core's `sim` feature
# (mutants, BUGGIFY) on in the binary under test. Each selection's tests are built first, then
# clippy runs on the same selection, reusing the build scripts (librdkafka, zstd, lz4) and
# proc-macros (Cargo.toml's build-override keys them alike in both); the simulator's selection
# reuses the broker's dependencies (their features aligned: ci/feature-drift.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each section says when it starts, so a slow CI run shows where its time went.
section() { echo "== $1 (at ${SECONDS} s)"; }
BROKER=(-p kaas-core -p kaas-net -p kaas-server)
SIM=(-p kaas-client -p kaas-sim)
PROFILE=(--profile ci)

section "cargo fmt --check"
cargo fmt --all -- --check
section "cargo build: the broker's tests and binary (ci profile)"
cargo test "${BROKER[@]}" "${PROFILE[@]}" --no-run
section "cargo clippy: the broker"
cargo clippy "${BROKER[@]}" "${PROFILE[@]}" --all-targets -- -D warnings
# Under .ci/run, the fuzz targets for ci/fuzz.sh build in the background at the lowest
# priority from here on (nightly, libFuzzer's instrumentation; fuzz/ is a workspace of its own,
# so its cargo takes no lock of this one's). The tests and the scripts mostly wait on brokers,
# JVMs and sleeps.
if [ "${KAAS_CI_PREBUILD:-0}" = 1 ]; then
  (nice -n 19 bash ci/fuzz.sh --build-only > target/fuzz-prebuild.log 2>&1) &
fi
section "cargo test: the broker"
cargo test "${BROKER[@]}" "${PROFILE[@]}" -- --test-threads=2
section "cargo clippy: the simulator and its client"
cargo clippy "${SIM[@]}" "${PROFILE[@]}" --all-targets -- -D warnings
section "cargo test: the simulator and its client"
# This also builds target/ci/kaas-sim, the binary ci/sim.sh runs.
cargo test "${SIM[@]}" "${PROFILE[@]}" -- --test-threads=2
# Every script runs the binary the broker's tests built, optimised: the scripts that kill
# brokers every few seconds need a take-over to finish between two kills, as in production.
export KAAS=target/ci/kaas
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
section "exactly-once copies under broker kills (TransactionalMessageCopier, franz-go)"
bash ci/kills.sh
section "share consumers under consumer and broker bounces (VerifiableShareConsumer), 1 and 3 brokers"
bash ci/share_bounces.sh 1
bash ci/share_bounces.sh 3
section "exactly-once queues under broker kills (kaas share-copy, KIP-1289)"
bash ci/share_kills.sh
section "Kafka Streams (exactly_once_v2) under broker and instance kills, restored from a compacted changelog"
bash ci/streams.sh
section "Kafka Connect (exactly.once.source.support) under broker and worker kills, its topics compacted"
bash ci/connect.sh
section "Kubernetes manifests (schema validation)"
bash ci/deploy.sh
echo "== ci/test.sh done in ${SECONDS} s"
