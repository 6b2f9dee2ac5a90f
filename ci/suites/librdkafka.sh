#!/usr/bin/env bash
# librdkafka's own admin test (tests/0081-admin.c of the librdkafka source Debian ships,
# 2.0.2) against a kaas broker with an authorizer (super.users=User:ANONYMOUS): its CreateAcls,
# DescribeAcls and DeleteAcls subtests (each at two request versions) must pass. The file's
# later subtests were written for brokers before Kafka 4 (Apache 4.4 fails its CreateTopics
# subtest), so the run is judged by those six.
#
#   bash ci/suites/librdkafka.sh     (downloads and builds librdkafka and its tests: minutes)
#
# Not part of .ci/run for the build's minutes; kafka-python's suite (ci/suites/kafka_python.sh)
# is.
set -euo pipefail
cd "$(dirname "$0")/../.."
source ci/security-env.sh
version=2.0.2
src=${LIBRDKAFKA_SRC:-target/librdkafka-$version}
if [ ! -x "$src/tests/test-runner" ]; then
  mkdir -p target
  curl -sSf -o "target/librdkafka_$version.orig.tar.gz" \
    "http://deb.debian.org/debian/pool/main/libr/librdkafka/librdkafka_$version.orig.tar.gz"
  tar xzf "target/librdkafka_$version.orig.tar.gz" -C target
  (cd "$src" && ./configure --disable-gssapi > /dev/null && make -j"$(nproc)" libs > /dev/null \
    && make -C tests -j"$(nproc)" build > /dev/null)
fi
port=$(free_port)
"$KAAS" serve --data-dir "$work/data" --listen "127.0.0.1:$port" \
  --set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
  --set super.users=User:ANONYMOUS > /dev/null 2> "$work/kaas.log" &
pids+=($!)
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
echo "bootstrap.servers=127.0.0.1:$port" > "$src/tests/test.conf"
(cd "$src/tests" && TEST_KAFKA_VERSION=3.9.0 TESTS=0081 LD_LIBRARY_PATH=../src:../src-cpp \
  timeout 300 ./test-runner > "$work/0081.log" 2>&1) || true
passed=$(sed 's/\x1b\[[0-9;]*m//g' "$work/0081.log" | grep -cE "do_test_(Create|Describe|Delete)Acls:[0-9]+: PASS")
[ "$passed" -eq 6 ] || fail "librdkafka's ACL subtests: $passed of 6 passed: $(grep -i acl "$work/0081.log" | tail -20)"
echo "librdkafka $version's 0081-admin: CreateAcls, DescribeAcls and DeleteAcls pass (6 subtests)"
