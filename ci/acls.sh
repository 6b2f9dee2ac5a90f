#!/usr/bin/env bash
# ACLs with real clients and Kafka's own tool, on three brokers of one volume: clients on
# SASL_PLAINTEXT (SASL/PLAIN users admin, alice, bob; admin a super user), the brokers on
# PLAINTEXT among themselves, where they prove to each other who they are (KAAS-BROKER): no
# principal of theirs is in super.users, and transactions still cross brokers.
# - kafka-acls (AclCommand) grants alice prefixed WRITE/READ on topics, READ on a group and
#   WRITE on transactional ids, and lists them; kafka-python's admin describes them;
# - confluent-kafka as alice copies 300 records exactly once in transactions (offsets committed
#   in the transactions) across the three brokers: read_committed reads each once;
# - as bob: producing is TOPIC_AUTHORIZATION_FAILED, a transactional producer is
#   TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a consumer is GROUP_AUTHORIZATION_FAILED, nothing
#   written; the Java producer (VerifiableProducer) as bob is refused too;
# - kafka-acls removes alice's WRITE: her next produce is refused on every broker.
# - kafka-configs (ConfigCommand) alters and describes a user quota and a default client quota
#   as the super user (bob may not); librdkafka producing as alice over her quota is told it is
#   throttled (throttle_cb).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/security-env.sh

login='org.apache.kafka.common.security.plain.PlainLoginModule required'
users="$login user_admin=\"admin-secret\" user_alice=\"alice-secret\" user_bob=\"bob-secret\";"
bootstrap=
for id in 0 1 2; do
  plain=$(free_port); sasl=$(free_port)
  KAAS_LOG_FORMAT=json "$KAAS" serve --data-dir "$work/data" --broker-id "$id" \
    --set "listeners=PLAINTEXT://127.0.0.1:$plain,SASL_PLAINTEXT://127.0.0.1:$sasl" \
    --set "listener.name.sasl_plaintext.plain.sasl.jaas.config=$users" \
    --set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
    --set super.users=User:admin \
    --set group.initial.rebalance.delay.ms=0 --set broker.session.timeout.ms=3000 \
    --set broker.heartbeat.interval.ms=500 --set broker.lease.drift.margin.ms=500 \
    --set broker.ownership.settle.ms=1000 > /dev/null 2> "$work/b$id.log" &
  pids+=($!)
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$sasl) 2>/dev/null && break; sleep 0.1; done
  bootstrap="${bootstrap:+$bootstrap,}127.0.0.1:$sasl"
done
sleep 4
jaas() { echo "sasl.jaas.config=$login username=\"$1\" password=\"$2\";"; }
for who in admin alice bob; do
  { echo "security.protocol=SASL_PLAINTEXT"; echo "sasl.mechanism=PLAIN"; jaas "$who" "$who-secret"; } > "$work/$who.properties"
done
acls() { tool org.apache.kafka.tools.AclCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" "$@"; }

echo "== kafka-acls as the super user"
acls --add --allow-principal User:alice --operation Write --operation Read --topic eos- \
  --resource-pattern-type prefixed > "$work/acls.out" 2>&1 || fail "kafka-acls --add (topics): $(tail -3 "$work/acls.out")"
acls --add --allow-principal User:alice --operation Read --group eos- --resource-pattern-type prefixed \
  > "$work/acls.out" 2>&1 || fail "kafka-acls --add (group)"
acls --add --allow-principal User:alice --operation Write --transactional-id eos- --resource-pattern-type prefixed \
  > "$work/acls.out" 2>&1 || fail "kafka-acls --add (transactional id)"
listed=$(acls --list 2> /dev/null)
for want in "name=eos-, patternType=PREFIXED" "principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW" \
  "resourceType=TRANSACTIONAL_ID" "resourceType=GROUP"; do
  echo "$listed" | grep -qF "$want" || fail "kafka-acls --list lacks $want: $listed"
done
# A non-super user may not change them.
if tool org.apache.kafka.tools.AclCommand --bootstrap-server "$bootstrap" --command-config "$work/bob.properties" \
  --add --allow-principal User:bob --operation All --topic '*' > "$work/bob-acls.out" 2>&1 \
  && ! grep -q "ClusterAuthorizationException" "$work/bob-acls.out"; then
  fail "bob changed the ACLs: $(tail -3 "$work/bob-acls.out")"
fi
echo "kafka-acls: alice's prefixed topic, group and transactional-id ACLs added and listed; bob may not add any"
# The brokers log JSON (KAAS_LOG_FORMAT=json): each CreateAcls is audited with its principal.
python3 - "$work" <<'PY' || fail "CreateAcls is not audited in the JSON logs"
import glob, json, sys
lines = [json.loads(l) for f in glob.glob(f"{sys.argv[1]}/b*.log") for l in open(f) if l.startswith("{")]
audited = [l for l in lines if l.get("target") == "kaas::audit" and l["fields"].get("api") == "CreateAcls"]
assert audited, f"no audit line among {len(lines)} JSON lines"
who = {l.get("span", {}).get("principal") for l in audited}
assert who == {"User:admin"} and all(l["span"].get("id") for l in audited), f"CreateAcls audited as {who}"
print(f"JSON logs: {len(audited)} CreateAcls audited with their request ids, as User:admin")
PY
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" \
  --create --topic eos-in --partitions 6 --replication-factor 1 > /dev/null 2>&1 || fail "creating eos-in"
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" \
  --create --topic eos-out --partitions 6 --replication-factor 1 > /dev/null 2>&1 || fail "creating eos-out"

echo "== alice copies exactly once across three brokers; bob is refused everywhere"
ci/.venv/bin/python - "$bootstrap" <<'PY' || fail "Python clients with ACLs"
import sys, time
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclBindingFilter, AdminClient, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
from kafka import KafkaAdminClient
from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ResourcePatternFilter, ResourceType as KResourceType, ACLResourcePatternType
bootstrap = sys.argv[1]
def auth(who):
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": who, "sasl.password": f"{who}-secret"}
p = Producer({**auth("alice"), "enable.idempotence": True})
for i in range(300):
    p.produce("eos-in", str(i).encode(), partition=i % 6)
assert p.flush(30) == 0, "alice: records not delivered"

# bob: the topic is refused, per record.
errors = []
b = Producer({**auth("bob"), "message.timeout.ms": 10000, "enable.idempotence": False})
b.produce("eos-in", b"bob", partition=0, on_delivery=lambda err, msg: errors.append(err))
b.flush(20)
assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"bob produced: {errors}"
# bob: a transactional id he may not write.
try:
    Producer({**auth("bob"), "transactional.id": "eos-bob"}).init_transactions(15)
    raise SystemExit("bob initialised a transactional producer")
except KafkaException as e:
    assert e.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, f"bob's init_transactions: {e}"
# bob: a group he may not read.
c = Consumer({**auth("bob"), "group.id": "eos-g", "auto.offset.reset": "earliest"})
c.subscribe(["eos-in"])
refused = None
for _ in range(40):
    m = c.poll(0.5)
    if m is not None and m.error():
        refused = m.error().code()
        break
c.close()
assert refused in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED), f"bob consumed: {refused}"

# alice: consume-transform-produce, offsets in the transactions.
consumer = Consumer({**auth("alice"), "group.id": "eos-g", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "isolation.level": "read_committed"})
consumer.subscribe(["eos-in"])
producer = Producer({**auth("alice"), "transactional.id": "eos-copier"})
producer.init_transactions(30)
copied, deadline = 0, time.time() + 90
while copied < 300 and time.time() < deadline:
    batch = consumer.consume(100, 1.0)
    batch = [m for m in batch if not m.error()]
    if not batch:
        continue
    producer.begin_transaction()
    for m in batch:
        producer.produce("eos-out", m.value(), partition=m.partition())
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    copied += len(batch)
consumer.close()
assert copied == 300, f"alice copied {copied} of 300"
reader = Consumer({**auth("alice"), "group.id": "eos-reader", "auto.offset.reset": "earliest",
                   "isolation.level": "read_committed"})
reader.subscribe(["eos-out"])
seen, deadline = [], time.time() + 60
while len(seen) < 300 and time.time() < deadline:
    m = reader.poll(0.5)
    if m is not None and not m.error():
        seen.append(int(m.value()))
reader.close()
assert sorted(seen) == list(range(300)), f"read_committed read {len(seen)} records, {len(set(seen))} distinct"

# Both Python admin clients describe the ACLs (no "No Authorizer is configured").
admin = AdminClient(auth("admin"))
found = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY)).result(20)
assert len(found) == 4, f"confluent-kafka describe_acls: {found}"
k = KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                     sasl_plain_username="admin", sasl_plain_password="admin-secret")
acl_filter = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                       resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))
described, error = k.describe_acls(acl_filter)
assert len(described) == 4, f"kafka-python describe_acls: {described} {error}"
k.close()
print("confluent-kafka as alice: 300 records copied exactly once in transactions across 3 brokers; "
      "bob refused (TOPIC, TRANSACTIONAL_ID, GROUP authorization); both Python admins describe the 4 ACLs")
PY
grep -q "cannot authenticate to a peer" "$work"/b*.log && fail "a broker could not authenticate to a peer"
timeout 60 java -cp "$cp" org.apache.kafka.tools.VerifiableProducer --bootstrap-server "$bootstrap" --topic eos-in \
  --max-messages 3 --producer.config "$work/bob.properties" > "$work/bob-produce.out" 2>&1 || true
grep -q '"name":"producer_send_error".*Authorization' "$work/bob-produce.out" \
  || fail "the Java producer as bob was not refused: $(tail -3 "$work/bob-produce.out")"
if grep -q '"name":"producer_send_success"' "$work/bob-produce.out"; then fail "the Java producer as bob wrote"; fi
echo "the Java producer (VerifiableProducer) as bob: every send refused, $(grep -o "[A-Za-z]*AuthorizationException" "$work/bob-produce.out" | sort -u | tr "\n" " ")"

echo "== kafka-acls --remove: in force on every broker"
acls --remove --force --allow-principal User:alice --operation Write --topic eos- --resource-pattern-type prefixed \
  > "$work/acls.out" 2>&1 || fail "kafka-acls --remove: $(tail -3 "$work/acls.out")"
sleep 2
ci/.venv/bin/python - "$bootstrap" <<'PY' || fail "alice still writes after her ACL was removed"
import sys
from confluent_kafka import KafkaError, Producer
errors = []
for broker in sys.argv[1].split(","):
    p = Producer({"bootstrap.servers": broker, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "alice", "sasl.password": "alice-secret", "message.timeout.ms": 10000,
                  "enable.idempotence": False})
    for partition in range(6):
        p.produce("eos-in", b"late", partition=partition, on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
# None written; each is refused by the broker, or, once librdkafka has heard the topic refused,
# failed by librdkafka itself without a request.
codes = {e.code() if e else None for e in errors}
assert None not in codes and KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, f"alice's produces after the removal: {codes}"
print(f"after kafka-acls --remove: none of alice's produces written, on every broker (codes {sorted(codes)})")
PY

echo "== client quotas: kafka-configs as the super user, librdkafka told it is throttled"
configs() { tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "$bootstrap" --command-config "$work/$1.properties" "${@:2}"; }
configs admin --alter --add-config producer_byte_rate=10240 --entity-type users --entity-name alice \
  > "$work/configs.out" 2>&1 || fail "kafka-configs --alter (user quota): $(tail -3 "$work/configs.out")"
configs admin --alter --add-config consumer_byte_rate=20480,request_percentage=50 --entity-type clients --entity-default \
  > "$work/configs.out" 2>&1 || fail "kafka-configs --alter (default client quota): $(tail -3 "$work/configs.out")"
described=$(configs admin --describe --entity-type users --entity-name alice 2>&1)
echo "$described" | grep -q "producer_byte_rate=10240" || fail "kafka-configs --describe (user): $described"
described=$(configs admin --describe --entity-type clients --entity-default 2>&1)
echo "$described" | grep -q "consumer_byte_rate=20480" || fail "kafka-configs --describe (default client): $described"
if configs bob --alter --add-config producer_byte_rate=1 --entity-type users --entity-name bob > "$work/bob-configs.out" 2>&1 \
  && ! grep -q "ClusterAuthorizationException" "$work/bob-configs.out"; then
  fail "bob altered a quota: $(tail -3 "$work/bob-configs.out")"
fi
acls --add --allow-principal User:alice --operation Write --topic quota-alice > "$work/acls.out" 2>&1 \
  || fail "kafka-acls --add (quota-alice)"
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" \
  --create --topic quota-alice --partitions 1 --replication-factor 1 > /dev/null 2>&1 || fail "creating quota-alice"
sleep 2
ci/.venv/bin/python - "$bootstrap" <<'PY' || fail "librdkafka was not throttled by alice's quota"
import sys
from confluent_kafka import Producer
throttles = []
p = Producer({"bootstrap.servers": sys.argv[1], "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
              "sasl.username": "alice", "sasl.password": "alice-secret", "linger.ms": 50,
              "throttle_cb": lambda event: throttles.append(event.throttle_time)})
for i in range(120):
    p.produce("quota-alice", b"x" * 1024, partition=0)
p.flush(30)
p.poll(1)
assert throttles and max(throttles) > 0, f"no throttle reported to librdkafka: {throttles}"
print(f"confluent-kafka as alice over her 10 KiB/s quota: throttled {max(throttles):.1f} s")
PY
echo "kafka-configs: user and default client quotas altered and described by the super user; bob may not"

echo "acls: ok"
