#!/usr/bin/env bash
# Exactly-once queues (KIP-1289) under broker kills: three kaas brokers on one data directory;
# kafka-verifiable-producer fills an input topic of 6 partitions; three `kaas share-copy`
# copiers (one share group, a transactional id each, every 5th transaction aborted on
# purpose) take from it and write to an output topic while brokers, and now and then a copier,
# are SIGKILLed and started again one after another. A record whose transactions keep failing
# reaches the delivery limit (share.delivery.count.limit, 5) as it would on Apache Kafka, and
# goes to the group's dead-letter queue (KIP-1191, copied). Then a read_committed reader must
# find every input message exactly once in the output or else in the dead-letter queue, never in
# both, and kafka-share-groups must show the group with nothing left (start at the end, lag 0)
# on every partition.
set -euo pipefail
cd "$(dirname "$0")/.."
messages=${KAAS_SHARE_KILLS_MESSAGES:-50000}
# Lower (2 at least) to send more records to the dead-letter queue.
delivery_limit=${KAAS_SHARE_KILLS_DELIVERY_LIMIT:-5}
source ci/cluster.sh
broker_settings=(--set group.share.session.timeout.ms=10000 --set group.share.heartbeat.interval.ms=1000)
copiers=()
cleanup() {
  stop_brokers
  kill "${copiers[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${KAAS_KEEP:-}" ] || rm -rf "$data" "$data.log" "$data".copier-* "$data.out" "$data.want"
}
trap cleanup EXIT
start_cluster

tool TopicCommand --bootstrap-server "$bootstrap" --create --topic input --partitions 6 --replication-factor 1 > /dev/null
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic output --partitions 6 --replication-factor 1 > /dev/null
tool VerifiableProducer --bootstrap-server "$bootstrap" --topic input --max-messages "$messages" --acks -1 \
  | grep -q "\"acked\":$messages," || { echo "FAILED: the input was not all acked"; exit 1; }
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic dlq.input --partitions 3 --replication-factor 1 \
  --config errors.deadletterqueue.group.enable=true > /dev/null
tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type groups --entity-name copiers --alter \
  --add-config share.auto.offset.reset=earliest,share.delivery.count.limit=$delivery_limit,errors.deadletterqueue.topic.name=dlq.input,errors.deadletterqueue.copy.record.enable=true \
  > /dev/null

start_copier() {
  timeout "${KAAS_SHARE_COPY_TIMEOUT:-600}" "$KAAS" share-copy --bootstrap "$bootstrap" --group copiers --input input \
    --output output --transactional-id "share-copier-$1" --abort-every 5 --idle-exit-ms 20000 >> "$data.copier-$1" 2>&1 &
  copiers[$1]=$!
}
for n in 0 1 2; do start_copier "$n"; done

# While any copier runs, a broker is SIGKILLed, round robin, and started again; the next kill
# comes soon after it is back (its old lease run out: 3.5 s here), faster than ci/kills.sh
# does, for the copiers are fast. Every third round a running copier is SIGKILLed too, in the
# middle of whatever transaction it has open, and started again with its transactional id: its
# successor's InitProducerId aborts what it left, and its records come back when its share
# session runs out.
kills=0
copier_kills=0
running() { for pid in "${copiers[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
while running; do
  sleep 1
  running || break
  victim=$((kills % 3))
  kill_broker "$victim"
  sleep 0.5
  start_broker "$victim"
  kills=$((kills + 1))
  copier=$(((kills / 3) % 3))
  if [ $((kills % 3)) -eq 2 ] && kill -0 "${copiers[$copier]}" 2>/dev/null; then
    pkill -9 -P "${copiers[$copier]}" 2>/dev/null || true
    wait "${copiers[$copier]}" 2>/dev/null || true
    echo "(killed)" >> "$data.copier-$copier"
    start_copier "$copier"
    copier_kills=$((copier_kills + 1))
  fi
  sleep 3
done
failed=0
for pid in "${copiers[@]}"; do wait "$pid" || failed=1; done
if [ $failed -ne 0 ]; then
  for f in "$data".copier-*; do echo "-- $f"; tail -5 "$f"; done
  tail -30 "$data.log"
  echo "FAILED: a copier did not finish"
  exit 1
fi

timeout 120 java -cp "$cp" kaas.ReadCommitted "$bootstrap" output | sort -n > "$data.out"
# A record is dead-lettered before its state says so: a broker killed in between may write it
# there again, so the queue is read as a set.
timeout 120 java -cp "$cp" kaas.ReadCommitted "$bootstrap" dlq.input | sort -n | uniq > "$data.dlq"
seq 0 $((messages - 1)) > "$data.want"
duplicated=$(uniq -d "$data.out" | wc -l)
both=$(comm -12 <(sort "$data.out") <(sort "$data.dlq") | wc -l)
dead=$(wc -l < "$data.dlq")
if [ "$duplicated" -ne 0 ] || [ "$both" -ne 0 ] || ! sort -n -m "$data.out" "$data.dlq" | cmp -s - "$data.want"; then
  echo "FAILED: output and dead-letter queue != input: $(wc -l < "$data.out") copied ($duplicated duplicated)," \
    "$dead dead-lettered ($both also copied), $(sort "$data.out" "$data.dlq" | comm -13 - <(sort "$data.want") | wc -l) missing"
  exit 1
fi
tool consumer.group.ShareGroupCommand --bootstrap-server "$bootstrap" --describe --group copiers > "$data.out" 2>&1
left=$(awk '$1 == "copiers" && $2 == "input" && $5 != "0"' "$data.out")
if [ -n "$left" ] || [ "$(grep -c '^copiers  *input ' "$data.out")" -ne 6 ]; then
  cat "$data.out"
  echo "FAILED: the share group did not acknowledge everything"
  exit 1
fi
# Copied by the last run of each copier (a killed one's count died with it).
committed=$(grep -h "^done:" "$data".copier-* | awk '{s += $2} END {print s}')
aborted=$(grep -h "^done:" "$data".copier-* | awk '{s += $8} END {print s}')
restarts=$(cat "$data".copier-* | grep -c "starting over" || true)
echo "kaas share-copy x3: $messages messages, $((messages - dead)) copied exactly once and $dead dead-lettered at their delivery limit, through $kills broker kills and $copier_kills copier kills" \
  "($committed copied by the copiers' last runs, $aborted transactions aborted, $restarts copier restarts" \
  "after a broker vanished mid-transaction), share group lag 0"
