#!/usr/bin/env bash
# kafka-python's own admin integration tests (test/integration/test_admin_integration.py of
# its sdist from PyPI, the version ci/clients/requirements.txt pins) against a kaas broker with
# an authorizer (super.users=User:ANONYMOUS, the tests' unauthenticated client): its ACL test
# creates, describes and deletes ACLs; the rest lists, describes and alters topics, configs,
# partitions, groups, offsets and records, DescribeQuorum and ListConfigResources. None is left
# out.
set -euo pipefail
cd "$(dirname "$0")/../.."
source ci/security-env.sh
version=$(sed -nE 's/^kafka-python==(.*)$/\1/p' ci/clients/requirements.txt)
ci/.venv/bin/pip install --quiet pytest pytest-timeout
ci/.venv/bin/pip download --quiet --no-binary :all: --no-deps "kafka-python==$version" -d "$work"
tar xzf "$work/kafka_python-$version.tar.gz" -C "$work"
suite=$work/kafka_python-$version
touch "$suite/test/__init__.py"
cp ci/suites/kafka_python_service.py "$suite/test/service.py"

port=$(free_port)
"$KAAS" serve --data-dir "$work/data" --listen "127.0.0.1:$port" \
  --set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
  --set super.users=User:ANONYMOUS --set group.initial.rebalance.delay.ms=0 > /dev/null 2> "$work/kaas.log" &
pids+=($!)
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
# KAFKA_ROOT: the fixtures want an existing directory even for a running broker.
(cd "$suite" && KAFKA_URI="kafka://127.0.0.1:$port" KAFKA_VERSION=4.1.0 KAFKA_ROOT="$work" \
  "$OLDPWD/ci/.venv/bin/python" -m pytest -q -p no:cacheprovider -W ignore --timeout 120 \
  test/integration/test_admin_integration.py \
  > "$work/pytest.log" 2>&1) || fail "kafka-python's admin integration tests: $(tail -30 "$work/pytest.log")"
grep -q "test_create_describe_delete_acls" <(cd "$suite" && "$OLDPWD/ci/.venv/bin/python" -m pytest --collect-only -q \
  test/integration/test_admin_integration.py -k acls 2>/dev/null) || fail "kafka-python's suite has no ACL test to run"
echo "kafka-python $version's admin integration tests: $(tail -1 "$work/pytest.log")"
