#!/usr/bin/env bash
# Kafka's share group tools (kafka-tools 4.4, run with java -cp as bin/kafka-*.sh do) against
# kaas: kafka-configs on a GROUP resource (share.auto.offset.reset), kafka-console-share-consumer,
# kafka-share-groups (list, describe offsets/members/state, reset-offsets, delete-offsets,
# delete), and VerifiableShareConsumer with an --ack-pattern of accept, release, reject and
# renew: a released record comes back until its delivery limit archives it, a renewed one once;
# then with a dead-letter queue (KIP-1191) that gets what it rejects and what runs out.
set -euo pipefail
bootstrap=$1
cp=$(bash "$(dirname "$0")/java/build.sh")
run=$(date +%s%N | tail -c 7)
topic=share-tools-$run
group=share-tools-g-$run
out=$(mktemp)
events=$(mktemp)
trap 'rm -f "$out" "$events"' EXIT

tool() {
  local class=$1
  shift
  if ! timeout 120 java -cp "$cp" "org.apache.kafka.tools.$class" "$@" > "$out" 2>&1; then
    cat "$out"
    echo "FAILED: $class $*"
    exit 1
  fi
}
expect() {
  if ! grep -Eq "$1" "$out"; then
    cat "$out"
    echo "FAILED: $2 (no match for /$1/)"
    exit 1
  fi
}
share_groups() { tool consumer.group.ShareGroupCommand --bootstrap-server "$bootstrap" "$@"; }

tool TopicCommand --bootstrap-server "$bootstrap" --create --topic "$topic" --partitions 1 --replication-factor 1
tool VerifiableProducer --topic "$topic" --max-messages 300 --bootstrap-server "$bootstrap"
expect '"name":"tool_data","sent":300,"acked":300' "kafka-verifiable-producer: 300 records"

tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type groups --entity-name "$group" --alter \
  --add-config share.auto.offset.reset=earliest
expect "Completed updating config for group $group" "kafka-configs --entity-type groups --alter"
tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type groups --entity-name "$group" --describe
expect "share.auto.offset.reset=earliest" "kafka-configs --entity-type groups --describe"

tool consumer.ConsoleShareConsumer --bootstrap-server "$bootstrap" --topic "$topic" --group "$group" --max-messages 5
expect "Processed a total of 5 messages" "kafka-console-share-consumer --max-messages 5"

share_groups --list
expect "^$group\$" "kafka-share-groups --list"
share_groups --describe --group "$group"
expect "^$group +$topic +0 +5 +295 *\$" "kafka-share-groups --describe: start 5, lag 295"
share_groups --describe --group "$group" --state
expect "^$group +[^ ]+ +\([0-9]+\) +Empty +0 *\$" "kafka-share-groups --describe --state: Empty, no members"
share_groups --describe --group "$group" --members
expect "has no active members" "kafka-share-groups --describe --members"

share_groups --reset-offsets --to-earliest --execute --group "$group" --topic "$topic"
expect "^$group +$topic +0 +0 *\$" "kafka-share-groups --reset-offsets --to-earliest"
share_groups --describe --group "$group"
expect "^$group +$topic +0 +0 +300 *\$" "kafka-share-groups --describe after the reset: start 0, lag 300"
share_groups --delete-offsets --group "$group" --topic "$topic"
expect "^$topic +Successful" "kafka-share-groups --delete-offsets"
share_groups --describe --group "$group"
expect "has no offset information" "kafka-share-groups --describe after --delete-offsets"
share_groups --delete --group "$group"
expect "Deletion of requested share groups \('$group'\) was successful" "kafka-share-groups --delete"
share_groups --list
if grep -q "^$group\$" "$out"; then
  cat "$out"
  echo "FAILED: kafka-share-groups --list still shows $group after --delete"
  exit 1
fi

# VerifiableShareConsumer runs until stopped: stopped once the released records were delivered
# five times (share.delivery.count.limit's default), or after a minute.
vgroup=$group-verifiable
java -cp "$cp" org.apache.kafka.tools.VerifiableShareConsumer --bootstrap-server "$bootstrap" --topic "$topic" \
  --group-id "$vgroup" --acknowledgement-mode sync --ack-pattern accept,release,reject,renew \
  --offset-reset-strategy earliest > "$events" 2>&1 &
consumer=$!
for _ in $(seq 60); do
  [ "$(grep -c '"ackTypeCounts":{"RELEASE":75}' "$events" || true)" -ge 4 ] && break
  sleep 1
done
sleep 2
kill "$consumer" 2>/dev/null || true
wait "$consumer" 2>/dev/null || true
python3 - "$events" <<'PY'
import collections, json, sys
acks = collections.Counter()   # (offset % 4) -> acknowledgements
types = collections.Counter()
for line in open(sys.argv[1]):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    if event.get("name") != "offsets_acknowledged" or not event.get("success"):
        continue
    types.update(event.get("ackTypeCounts", {}))
    for p in event["partitions"]:
        for offset in p["offsets"]:
            acks[offset % 4] += 1
# accept (0): once; release (1): delivered 5 times, then archived; reject (2): once; renew (3):
# renewed once, then accepted on its next delivery.
want_types = {"ACCEPT": 150, "RELEASE": 375, "REJECT": 75, "RENEW": 75}
want_acks = {0: 75, 1: 375, 2: 75, 3: 150}
if dict(types) != want_types or dict(acks) != want_acks:
    sys.exit(f"FAILED: VerifiableShareConsumer --ack-pattern: types {dict(types)} (want {want_types}), "
             f"by offset % 4 {dict(acks)} (want {want_acks})")
print(f"  VerifiableShareConsumer --ack-pattern accept,release,reject,renew: {dict(types)}")
PY
share_groups --describe --group "$vgroup"
expect "^$vgroup +$topic +0 +300 +0 *\$" "kafka-share-groups --describe after the verifiable consumer: everything done"

# KIP-1191: a dead-letter queue for the group (kafka-configs), a queue topic that allows it;
# rejected records (offset % 3 == 1) and released ones at their delivery limit (offset % 3 ==
# 2, five deliveries) land there copied, with Apache's context headers.
dgroup=$group-dlq
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic "dlq.$topic" --partitions 1 --replication-factor 1 \
  --config errors.deadletterqueue.group.enable=true
tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type groups --entity-name "$dgroup" --alter \
  --add-config "errors.deadletterqueue.topic.name=dlq.$topic,errors.deadletterqueue.copy.record.enable=true"
java -cp "$cp" org.apache.kafka.tools.VerifiableShareConsumer --bootstrap-server "$bootstrap" --topic "$topic" \
  --group-id "$dgroup" --acknowledgement-mode sync --ack-pattern accept,reject,release \
  --offset-reset-strategy earliest > "$events" 2>&1 &
consumer=$!
for _ in $(seq 60); do
  share_groups --describe --group "$dgroup"
  grep -Eq "^$dgroup +$topic +0 +300 +0 *\$" "$out" && break
  sleep 1
done
kill "$consumer" 2>/dev/null || true
wait "$consumer" 2>/dev/null || true
expect "^$dgroup +$topic +0 +300 +0 *\$" "kafka-share-groups --describe: every record accepted or archived by way of the queue"
tool consumer.ConsoleConsumer --bootstrap-server "$bootstrap" --topic "dlq.$topic" --from-beginning --timeout-ms 5000 \
  --formatter-property print.headers=true
python3 - "$out" "$topic" "$dgroup" <<'PY'
import re, sys
out, topic, group = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
seen = {}
for line in out.splitlines():
    m = re.match(r"__dlq\.errors\.topic:(\S+),__dlq\.errors\.partition:(\d+),__dlq\.errors\.offset:(\d+),"
                 r"__dlq\.errors\.group:(\S+),__dlq\.errors\.delivery\.count:(\d+),__dlq\.errors\.message:([^\t]+)\t(.*)$", line)
    if m:
        seen[int(m[3])] = (m[1], m[2], m[4], int(m[5]), m[6], m[7])
want = {}
for offset in range(300):
    if offset % 3 == 1:
        want[offset] = (topic, "0", group, 1, "Offset rejected by client.", str(offset))
    elif offset % 3 == 2:
        want[offset] = (topic, "0", group, 5, "Offset delivery count exceeded the threshold.", str(offset))
if seen != want:
    wrong = sorted(set(seen.items()) ^ set(want.items()))[:6]
    sys.exit(f"FAILED: dead-letter queue: {len(seen)} records, want {len(want)}; differing: {wrong}")
print(f"  dead-letter queue: {len(seen)} records (100 rejected, 100 at the delivery limit), copied, with context headers")
PY
echo "kafka share tools: ok"
