#!/usr/bin/env bash
# Exactly-once copies under broker kills, checked as Kafka's own system test checks them
# (tests/kafkatest/tests/core/transactions_test.py): three kaas brokers on one data directory;
# kafka-verifiable-producer fills an input topic; Kafka's TransactionalMessageCopier (one per
# input partition, offsets committed with group metadata) and franz-go's
# GroupTransactSession copy it while brokers are SIGKILLed and restarted one after another;
# then a read_committed reader must find every input message in the output exactly once. Two
# Java consumers on KIP-848's consumer group protocol read the input meanwhile, committing as
# they go, and must consume and commit all of it. Last, kaas.ConsumerGroupFailover kills the
# broker coordinating a KIP-848 group, which must go on with the same members at their epochs.
set -euo pipefail
cd "$(dirname "$0")/.."
(cd ci/clients/go && go build -o ../../../target/franz-go-check .)
messages=${KAAS_KILLS_MESSAGES:-80000}
source ci/cluster.sh
broker_settings=(--set group.initial.rebalance.delay.ms=0 --set group.consumer.heartbeat.interval.ms=500)
copiers=()
readers=()
cleanup() {
  stop_brokers
  kill "${copiers[@]}" "${readers[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$data" "$data.log" "$data".copier-*
}
trap cleanup EXIT
start_cluster

tool TopicCommand --bootstrap-server "$bootstrap" --create --topic input --partitions 3 --replication-factor 1 > /dev/null
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic output --partitions 3 --replication-factor 1 > /dev/null
tool VerifiableProducer --bootstrap-server "$bootstrap" --topic input --max-messages "$messages" --acks -1 --repeating-keys 97 \
  | grep -q "\"acked\":$messages," || { echo "FAILED: the input was not all acked"; exit 1; }

for p in 0 1 2; do
  timeout 300 java -cp "$cp" org.apache.kafka.tools.TransactionalMessageCopier --broker-list "$bootstrap" \
    --input-topic input --input-partition "$p" --output-topic output --transactional-id "copier-$p" \
    --consumer-group copiers --use-group-metadata --transaction-size 100 > "$data.copier-$p" 2>&1 &
  copiers+=($!)
done
timeout 300 target/franz-go-check "$bootstrap" copy 40000 > "$data.copier-franz" 2>&1 &
copiers+=($!)
# Two Java consumers on KIP-848's consumer group protocol read the input in one group meanwhile;
# they are not waited for by the kills (their group restarts with each coordinator move).
timeout 300 java -cp "$cp" kaas.ConsumerProtocolDrain "$bootstrap" input kip848-readers > "$data.copier-kip848" 2>&1 &
readers=($!)

# While any copier runs, a broker is SIGKILLed, round robin, and started again; the next kill
# comes once it is back (it waits out its old lease, 3.5 s here, then settles for 1 s), as
# transactions_test.py's hard bounce waits for a bounced broker to rejoin.
kills=0
running() { for pid in "${copiers[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
while running; do
  sleep 2
  running || break
  victim=$((kills % 3))
  kill_broker "$victim"
  sleep 1
  start_broker "$victim"
  kills=$((kills + 1))
  sleep 5
done
failed=0
copiers+=("${readers[@]}")
for i in "${!copiers[@]}"; do
  if ! wait "${copiers[$i]}"; then
    failed=1
  fi
done
for f in "$data".copier-*; do
  if [ $failed -ne 0 ]; then echo "-- $f"; tail -5 "$f"; fi
done
[ $failed -eq 0 ] || { tail -30 "$data.log"; echo "FAILED: a copier did not finish"; exit 1; }

# As transactions_test.py checks: the output, read_committed, is the input, once each.
timeout 120 java -cp "$cp" kaas.ReadCommitted "$bootstrap" output | sort -n > "$data.out"
seq 0 $((messages - 1)) > "$data.want"
if ! cmp -s "$data.out" "$data.want"; then
  echo "FAILED: output != input: $(wc -l < "$data.out") read, $(sort -n "$data.out" | uniq -d | wc -l) duplicated," \
    "$(comm -13 "$data.out" "$data.want" | wc -l) missing"
  rm -f "$data.out" "$data.want"
  exit 1
fi
rm -f "$data.out" "$data.want"
grep -h "copied exactly once" "$data.copier-franz"
grep -h "group.protocol=consumer" "$data.copier-kip848"
echo "TransactionalMessageCopier x3: $messages messages copied exactly once through $kills broker kills"

# A KIP-848 group outlives its coordinator: the same members at the same epochs after it is killed.
timeout 300 java -cp "$cp" kaas.ConsumerGroupFailover "$bootstrap" "${pids[@]}"
