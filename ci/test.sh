#!/usr/bin/env bash
# The whole test suite, from a fresh machine: formatting and lints, every Rust test (unit,
# librdkafka integration, the simulator's scenario tests), then the client
# scripts (Python, Node.js, the Java client, Kafka's tools, franz-go) against a freshly built
# broker, and exactly-once copies under broker kills. Installs what it needs on first use
# (Python clients in ci/.venv, Node clients in ci/clients/node/node_modules, Maven jars in
# ~/.m2, Go modules in the Go module cache).
#
# The broker is built and tested per package, never with --workspace: a workspace build
# unifies features and would switch kaas-core's `sim` feature (mutants, BUGGIFY) on in the
# binary under test. The simulator's binary (ci/sim.sh) builds with the `sim` profile (optimised,
# assertions on); its tests run in the test profile.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each section says when it starts, so a slow CI run shows where its time went.
section() { echo "== $1 (at ${SECONDS} s)"; }

section "cargo fmt --check"
cargo fmt --all -- --check
section "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
section "cargo build --release -p kaas-server (the binary users build)"
cargo build --release -p kaas-server
section "cargo test: the broker"
cargo test -p kaas-core -p kaas-net -p kaas-server -- --test-threads=2
# Under .ci/run, the simulator's optimised binary for ci/sim.sh (in a target directory of its
# own, KAAS_SIM_TARGET_DIR, so that it does not wait for the tests' lock on this one), then the
# fuzz targets for ci/fuzz.sh (nightly, libFuzzer's instrumentation; fuzz/ is a workspace of its
# own), build in the background at the lowest priority from here on: the simulator's tests run
# in virtual time and the scripts after them mostly wait on brokers, JVMs and sleeps, so the
# later steps find them built (their cargo waits for these if not). Off for a plain test run.
if [ "${KAAS_CI_SIM_PREBUILD:-0}" = 1 ]; then
  (CARGO_TARGET_DIR=${KAAS_SIM_TARGET_DIR:-target} nice -n 19 cargo build --profile sim -p kaas-sim \
     > target/sim-prebuild.log 2>&1
   nice -n 19 bash ci/fuzz.sh --build-only > target/fuzz-prebuild.log 2>&1) &
fi
section "cargo test: the simulator"
# kaas-sim only (kaas-core's tests ran above), in the test profile, whose optimised
# dependencies the broker's tests just built: its tests run as fast as in the sim profile,
# and compiling their harness optimised took minutes; ci/sim.sh builds the sim profile's
# binary for the seeds.
cargo test -p kaas-sim -- --test-threads=2
section "client scripts"
bash ci/clients.sh
section "SSL and SASL listeners: Java, kafka-python, confluent-kafka; mutual TLS; a certificate replaced; SASL/PLAIN; 3 brokers"
bash ci/security.sh
section "ACLs and client quotas on 3 brokers: kafka-acls, kafka-configs, confluent-kafka transactions as a granted user, a refused user, kafka-python's admin"
bash ci/acls.sh
section "kafka-python's own admin integration tests (ACLs, topics, configs, groups, offsets) with an authorizer"
bash ci/suites/kafka_python.sh
section "OAUTHBEARER (signed and unsecured tokens) and re-authentication: the Java client, confluent-kafka"
bash ci/oauth.sh
section "exactly-once copies under broker kills (TransactionalMessageCopier, franz-go)"
bash ci/kills.sh
section "share consumers under consumer and broker bounces (VerifiableShareConsumer), 1 and 3 brokers"
bash ci/share_bounces.sh 1
bash ci/share_bounces.sh 3
section "exactly-once queues under broker kills (kaas share-copy, KIP-1289)"
bash ci/share_kills.sh
section "Kubernetes manifests (schema validation)"
bash ci/deploy.sh
echo "== ci/test.sh done in ${SECONDS} s"
