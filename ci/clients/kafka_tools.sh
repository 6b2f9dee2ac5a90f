#!/usr/bin/env bash
# Kafka's own command-line tools (kafka-tools 4.x, run with java -cp, as bin/kafka-*.sh do)
# against kaas: kafka-topics, kafka-configs, kafka-producer-perf-test,
# kafka-consumer-perf-test, kafka-get-offsets, kafka-consumer-groups (describe, reset offsets,
# delete offsets, delete), kafka-verifiable-producer and -consumer, kafka-transactions (list, describe,
# describe-producers, find-hanging, abort) on a transaction its producer left open by dying,
# and kafka-log-dirs, kafka-leader-election, kafka-reassign-partitions (--list, --execute,
# --verify), kafka-acls and kafka-metadata-quorum.
set -euo pipefail
bootstrap=$1
cp=$(bash "$(dirname "$0")/java/build.sh")
run=$(date +%s%N | tail -c 7)
topic=tools-$run
group=tools-g-$run
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# tool CLASS ARGS...: runs one tool; its output (stderr too) is kept in $out and echoed on failure.
tool() {
  local class=$1
  shift
  if ! timeout 120 java -cp "$cp" "org.apache.kafka.tools.$class" "$@" > "$out" 2>&1; then
    cat "$out"
    echo "FAILED: $class $*"
    exit 1
  fi
}
# expect PATTERN WHAT: the last tool's output matches PATTERN (extended regex).
expect() {
  if ! grep -Eq "$1" "$out"; then
    cat "$out"
    echo "FAILED: $2 (no match for /$1/)"
    exit 1
  fi
}

tool TopicCommand --bootstrap-server "$bootstrap" --create --topic "$topic" --partitions 3 --replication-factor 1
expect "Created topic $topic" "kafka-topics --create"
tool TopicCommand --bootstrap-server "$bootstrap" --alter --topic "$topic" --partitions 4
tool TopicCommand --bootstrap-server "$bootstrap" --describe --topic "$topic"
expect "PartitionCount: 4" "kafka-topics --describe after --alter --partitions 4"
tool TopicCommand --bootstrap-server "$bootstrap" --list
expect "^$topic\$" "kafka-topics --list"

tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type topics --entity-name "$topic" --alter --add-config retention.ms=86400000
tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type topics --entity-name "$topic" --describe
expect "retention.ms=86400000 sensitive=false synonyms=\{DYNAMIC_TOPIC_CONFIG:retention.ms=86400000, DEFAULT_CONFIG:log.retention.ms=604800000\}" \
  "kafka-configs --describe after --alter, with the synonyms under it"
# The broker's settings under Kafka's names, those set by a flag shown as static.
tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type brokers --entity-name 0 --describe --all
expect "^  log.dirs=/[^ ]+ sensitive=false synonyms=\{STATIC_BROKER_CONFIG:log.dirs=" "kafka-configs --describe --all: log.dirs"
expect "^  advertised.listeners=PLAINTEXT://[^ ]+:[0-9]+ " "kafka-configs --describe --all: advertised.listeners"
expect "^  group.initial.rebalance.delay.ms=0 sensitive=false synonyms=\{STATIC_BROKER_CONFIG:group.initial.rebalance.delay.ms=0, DEFAULT_CONFIG:group.initial.rebalance.delay.ms=3000\}" \
  "kafka-configs --describe --all: a --set setting over its default"

records=20000
tool ProducerPerformance --topic "$topic" --num-records $records --record-size 100 --throughput -1 \
  --command-property bootstrap.servers="$bootstrap" acks=all
expect "^$records records sent" "kafka-producer-perf-test"
echo "  $(tail -1 "$out")"
tool ConsumerPerformance --bootstrap-server "$bootstrap" --topic "$topic" --num-records $records --group "$group" --timeout 30000
expect ", $records, " "kafka-consumer-perf-test read every record"
tool GetOffsetShell --bootstrap-server "$bootstrap" --topic "$topic"
total=$(awk -F: '{s += $3} END {print s}' "$out")
[ "$total" -eq $records ] || { cat "$out"; echo "FAILED: kafka-get-offsets sums to $total, not $records"; exit 1; }

tool consumer.group.ConsumerGroupCommand --bootstrap-server "$bootstrap" --describe --group "$group"
expect "$group[[:space:]]+$topic[[:space:]]+0 " "kafka-consumer-groups --describe"
tool consumer.group.ConsumerGroupCommand --bootstrap-server "$bootstrap" --reset-offsets --group "$group" \
  --topic "$topic" --to-earliest --execute
expect "$group[[:space:]]+$topic[[:space:]]+[0-3][[:space:]]+0" "kafka-consumer-groups --reset-offsets --to-earliest"
tool consumer.group.ConsumerGroupCommand --bootstrap-server "$bootstrap" --describe --group "$group" --offsets
[ "$(awk -v g="$group" '$1 == g {s += $4} END {print s + 0}' "$out")" -eq 0 ] \
  || { cat "$out"; echo "FAILED: offsets not reset to 0"; exit 1; }
tool consumer.group.ConsumerGroupCommand --bootstrap-server "$bootstrap" --delete-offsets --group "$group" --topic "$topic"
expect "$topic[[:space:]]+0[[:space:]]+Successful" "kafka-consumer-groups --delete-offsets"
tool consumer.group.ConsumerGroupCommand --bootstrap-server "$bootstrap" --describe --group "$group" --offsets
if grep -Eq "^$group[[:space:]]+$topic[[:space:]]" "$out"; then cat "$out"; echo "FAILED: offsets left after --delete-offsets"; exit 1; fi
tool consumer.group.ConsumerGroupCommand --bootstrap-server "$bootstrap" --delete --group "$group"
expect "successful" "kafka-consumer-groups --delete"

verified=ver-$run
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic "$verified" --partitions 3 --replication-factor 1
tool VerifiableProducer --bootstrap-server "$bootstrap" --topic "$verified" --max-messages 1000 --acks -1
expect '"sent":1000,"acked":1000' "kafka-verifiable-producer: every message acked"
tool VerifiableConsumer --bootstrap-server "$bootstrap" --topic "$verified" --group-id "ver-g-$run" --max-messages 1000
consumed=$(python3 -c '
import json, sys
print(sum(e.get("count", 0) for e in map(json.loads, filter(str.strip, open(sys.argv[1]))) if e.get("name") == "records_consumed"))
' "$out")
[ "$consumed" -eq 1000 ] || { cat "$out"; echo "FAILED: kafka-verifiable-consumer consumed $consumed"; exit 1; }

# A producer that dies inside its transaction, and what kafka-transactions makes of it.
txn_topic=tools-txn-$run
txn_id=tools-open-$run
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic "$txn_topic" --partitions 2 --replication-factor 1
start=$(timeout 60 java -cp "$cp" kaas.OpenTransaction "$bootstrap" "$txn_topic" "$txn_id")
tool TransactionsCommand --bootstrap-server "$bootstrap" list
expect "$txn_id[[:space:]]+[0-9]+[[:space:]]+[0-9]+[[:space:]]+Ongoing" "kafka-transactions list"
tool TransactionsCommand --bootstrap-server "$bootstrap" describe --transactional-id "$txn_id"
expect "$txn_id[[:space:]]+[0-9]+[[:space:]]+[0-9]+[[:space:]]+Ongoing .*$txn_topic-0" "kafka-transactions describe"
tool TransactionsCommand --bootstrap-server "$bootstrap" describe-producers --topic "$txn_topic" --partition 0
expect "[[:space:]]$start[[:space:]]+\$" "kafka-transactions describe-producers: the open transaction's start offset"
# Open, but known to its coordinator: not hanging.
tool TransactionsCommand --bootstrap-server "$bootstrap" find-hanging --max-transaction-timeout 0 --topic "$txn_topic" --partition 0
if grep -q "$txn_topic" "$out"; then cat "$out"; echo "FAILED: find-hanging calls an ongoing transaction hanging"; exit 1; fi
tool TransactionsCommand --bootstrap-server "$bootstrap" abort --topic "$txn_topic" --partition 0 --start-offset "$start"
tool TransactionsCommand --bootstrap-server "$bootstrap" describe-producers --topic "$txn_topic" --partition 0
expect "[[:space:]]None[[:space:]]+\$" "kafka-transactions abort ends the partition's open transaction"
# The admin surface a shared volume answers in its own way: one log directory holding what
# each broker owns, leaders that need no election, reassignments that move ownership, no
# authorizer.
tool LogDirsCommand --bootstrap-server "$bootstrap" --describe --topic-list "$topic"
python3 -c '
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
dirs = [d for b in json.loads(lines[0])["brokers"] for d in b["logDirs"]]
parts = sorted(p["partition"] for d in dirs for p in d["partitions"])
want = sorted(f"{sys.argv[2]}-{i}" for i in range(4))
assert parts == want, (parts, want)
assert sum(p["size"] for d in dirs for p in d["partitions"]) > 20000 * 100, "sizes hold the records"
' "$out" "$topic" || { cat "$out"; echo "FAILED: kafka-log-dirs lists each partition once, with its size"; exit 1; }
tool LeaderElectionCommand --bootstrap-server "$bootstrap" --election-type preferred --topic "$topic" --partition 0
expect "Valid replica already elected for partitions $topic-0" "kafka-leader-election: no election needed"
tool reassign.ReassignPartitionsCommand --bootstrap-server "$bootstrap" --list
expect "No partition reassignments found" "kafka-reassign-partitions --list"
# A reassignment moves ownership: each partition to one broker, the next one along from its
# leader now (a cluster of one stays where it is), then --verify until it reports every move
# complete, and kafka-topics shows each partition led by its new broker alone.
plan=$(mktemp); trap 'rm -f "$out" "$plan"' EXIT
tool TopicCommand --bootstrap-server "$bootstrap" --describe --topic "$topic"
python3 -c '
import json, re, sys
brokers = len(sys.argv[3].split(","))
leaders = {int(p): int(l) for p, l in re.findall(r"Partition: (\d+)\s+Leader: (\d+)", open(sys.argv[1]).read())}
assert sorted(leaders) == [0, 1, 2, 3], leaders
moves = [{"topic": sys.argv[2], "partition": p, "replicas": [(l + 1) % brokers]} for p, l in sorted(leaders.items())]
json.dump({"version": 1, "partitions": moves}, open(sys.argv[4], "w"))
' "$out" "$topic" "$bootstrap" "$plan"
tool reassign.ReassignPartitionsCommand --bootstrap-server "$bootstrap" --reassignment-json-file "$plan" --execute
expect "Successfully started partition reassignments" "kafka-reassign-partitions --execute"
for _ in $(seq 60); do
  tool reassign.ReassignPartitionsCommand --bootstrap-server "$bootstrap" --reassignment-json-file "$plan" --verify
  grep -q "still in progress" "$out" || break
  sleep 0.5
done
expect "Reassignment of partition $topic-0 is completed" "kafka-reassign-partitions --verify"
if grep -q "still in progress" "$out"; then cat "$out"; echo "FAILED: a reassignment never completed"; exit 1; fi
tool TopicCommand --bootstrap-server "$bootstrap" --describe --topic "$topic"
python3 -c '
import json, re, sys
want = {m["partition"]: m["replicas"][0] for m in json.load(open(sys.argv[2]))["partitions"]}
text = open(sys.argv[1]).read()
got = {int(p): (int(l), r, i) for p, l, r, i in re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: (\S+)\s+Isr: (\S+)", text)}
assert got == {p: (b, str(b), str(b)) for p, b in want.items()}, (got, want)
' "$out" "$plan" || { cat "$out"; echo "FAILED: kafka-topics shows each partition led by the broker it was moved to"; exit 1; }
# The records moved with ownership: the volume is the one replica.
tool GetOffsetShell --bootstrap-server "$bootstrap" --topic "$topic"
total=$(awk -F: '{s += $3} END {print s}' "$out")
[ "$total" -eq $records ] || { cat "$out"; echo "FAILED: after the moves kafka-get-offsets sums to $total, not $records"; exit 1; }
# It exits 1 against Apache with no authorizer too, saying why.
timeout 120 java -cp "$cp" org.apache.kafka.tools.AclCommand --bootstrap-server "$bootstrap" --list > "$out" 2>&1 || true
expect "SecurityDisabledException: No Authorizer is configured on the broker" "kafka-acls --list without an authorizer"
# No metadata quorum: kafka-metadata-quorum shows the brokers' leases instead, each broker a
# voter whose last fetch is its lease's last renewal.
tool MetadataQuorumCommand --bootstrap-server "$bootstrap" describe --replication
brokers=$(($(tr -cd , <<< "$bootstrap" | wc -c) + 1))
voters=$(grep -Ec "^[0-9]+[[:space:]].*(Leader|Follower)" "$out" || true)
[ "$voters" -eq "$brokers" ] || { cat "$out"; echo "FAILED: kafka-metadata-quorum lists $voters voters, not $brokers"; exit 1; }
echo "kafka tools 4.x: topics, configs, perf tests, get-offsets, consumer-groups, verifiable producer/consumer, transactions, log-dirs, leader-election, reassign-partitions, acls, metadata-quorum"
