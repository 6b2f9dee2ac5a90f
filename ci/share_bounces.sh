#!/usr/bin/env bash
# Kafka's VerifiableShareConsumer under consumer and broker bounces, checked as Apache's
# share_consumer_test.py checks it and a little more: N kaas brokers (1 or 3) on one data
# directory; kafka-verifiable-producer writes to a topic of 3 partitions throughout; three
# VerifiableShareConsumers of one share group (sync acknowledgements) consume it while
# consumers are stopped (SIGTERM and SIGKILL in turn, so one leaves and one vanishes
# mid-batch) and started again, then while brokers are SIGKILLed and started again. Then:
# every record the producer had acked was consumed by some consumer (nothing lost), no
# record's acceptance was answered twice (an accepted record is never delivered again), and
# kafka-share-groups shows lag 0 on every partition (nothing left unacknowledged). An
# acknowledgement answered with an error (its broker killed before it answered) may still
# have been applied, as in Apache Kafka: those records are consumed, not necessarily redelivered.
#
#   bash ci/share_bounces.sh [BROKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
KAAS=${KAAS:-target/release/kaas}
[ -x "$KAAS" ] || cargo build --release -p kaas-server
cp=$(bash ci/clients/java/build.sh)
brokers=${1:-3}
throughput=${KAAS_SHARE_BOUNCE_THROUGHPUT:-500}

data=$(mktemp -d)
pids=()
ports=()
consumers=(0 0 0)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for id in $(seq 0 $((brokers - 1))); do ports+=("$(free_port)"); pids+=(0); done
bootstrap=$(printf '127.0.0.1:%s,' "${ports[@]}"); bootstrap=${bootstrap%,}
start_broker() {
  "$KAAS" serve --data-dir "$data" --listen "127.0.0.1:${ports[$1]}" --broker-id "$1" \
    --set broker.session.timeout.ms=3000 --set broker.heartbeat.interval.ms=500 \
    --set broker.lease.drift.margin.ms=500 --set broker.ownership.settle.ms=1000 \
    --set group.share.session.timeout.ms=10000 --set group.share.heartbeat.interval.ms=1000 \
    > /dev/null 2>> "$data.log" &
  pids[$1]=$!
}
wait_port() { for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/"$1") 2>/dev/null && break; sleep 0.1; done; }
producer=0
cleanup() {
  kill "${pids[@]}" "${consumers[@]}" "$producer" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${KAAS_KEEP:-}" ] || rm -rf "$data" "$data".*
}
trap cleanup EXIT
for id in "${!ports[@]}"; do start_broker "$id"; done
for port in "${ports[@]}"; do wait_port "$port"; done
[ "$brokers" -eq 1 ] || sleep 3

tool() { timeout 120 java -cp "$cp" "org.apache.kafka.tools.$1" "${@:2}"; }
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic bounced --partitions 3 --replication-factor 1 > /dev/null
tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type groups --entity-name bounced --alter \
  --add-config share.auto.offset.reset=earliest > /dev/null

# The tool sends with retries=0; with retries a broker kill costs the producer little. It
# produces until every bounce is over (SIGTERM then flushes what it sent and prints a
# summary): a fixed count could all be consumed before the last bounce on a slow machine,
# and a consumer with nothing to consume cannot show progress.
printf 'retries=2147483647\ndelivery.timeout.ms=120000\n' > "$data.producer.properties"
java -cp "$cp" org.apache.kafka.tools.VerifiableProducer --bootstrap-server "$bootstrap" --topic bounced \
  --max-messages -1 --throughput "$throughput" --acks -1 --command-config "$data.producer.properties" \
  > "$data.producer" 2>&1 &
producer=$!
start_consumer() {
  java -cp "$cp" org.apache.kafka.tools.VerifiableShareConsumer --bootstrap-server "$bootstrap" --topic bounced \
    --group-id bounced --acknowledgement-mode sync --verbose >> "$data.consumer-$1" 2>&1 &
  consumers[$1]=$!
}
acknowledged() { cat "$data".consumer-* | grep -c '"name":"offsets_acknowledged".*"success":true' || true; }
# Waits until the consumers acknowledged more than they had: they work again after a bounce.
await_progress() {
  local before=$1
  for _ in $(seq 120); do [ "$(acknowledged)" -gt "$before" ] && return 0; sleep 0.5; done
  echo "FAILED: the share consumers acknowledged nothing for a minute after a bounce"
  tail -n 5 "$data".consumer-*; tail -n 30 "$data.log"
  exit 1
}
for n in 0 1 2; do start_consumer "$n"; done
await_progress 0

# Consumers: each stopped in turn, alternately with SIGTERM (it leaves the group) and SIGKILL
# (it vanishes holding records), and started again.
consumer_bounces=0
for round in 0 1; do
  for n in 0 1 2; do
    signal=$([ $(((round * 3 + n) % 2)) -eq 0 ] && echo TERM || echo KILL)
    kill -"$signal" "${consumers[$n]}" 2>/dev/null || true
    wait "${consumers[$n]}" 2>/dev/null || true
    before=$(acknowledged)
    start_consumer "$n"
    consumer_bounces=$((consumer_bounces + 1))
    await_progress "$before"
  done
done
# Brokers: each SIGKILLed in turn and started again while the producer and consumers run.
broker_kills=0
for round in 0 1; do
  for id in "${!ports[@]}"; do
    kill -9 "${pids[$id]}" 2>/dev/null || true
    wait "${pids[$id]}" 2>/dev/null || true
    sleep 0.5
    start_broker "$id"
    wait_port "${ports[$id]}"
    broker_kills=$((broker_kills + 1))
    before=$(acknowledged)
    await_progress "$before"
  done
done

kill -TERM "$producer"
wait "$producer" || true
if ! grep -q '"name":"tool_data"' "$data.producer"; then
  tail -5 "$data.producer"
  echo "FAILED: the producer did not flush and stop"
  exit 1
fi
# Everything the producer had acked must be consumed; a minute for the last of it (and for
# records a killed consumer held to come back).
check() {
  python3 - "$data.producer" "$data".consumer-* <<'PY'
import collections, json, sys
produced = set()
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("name") == "producer_send_success":
        produced.add((e["partition"], e["offset"]))
consumed, accepted, failed = set(), collections.Counter(), 0
for path in sys.argv[2:]:
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        offsets = [(p["partition"], o) for p in e.get("partitions", []) for o in p["offsets"]]
        if e.get("name") == "records_consumed":
            consumed.update(offsets)
        elif e.get("name") == "offsets_acknowledged" and e.get("success"):
            accepted.update(offsets)
        elif e.get("name") == "offsets_acknowledged":
            failed += len(offsets)
twice = [k for k, n in accepted.items() if n > 1]
missing = produced - consumed
print(f"{len(produced)} produced, {len(consumed)} consumed, {len(missing)} missing, {len(accepted)} accepted "
      f"({failed} acknowledgements answered with an error), {len(twice)} accepted twice")
if twice:
    sys.exit(f"FAILED: accepted twice (an accepted record delivered again): {sorted(twice)[:10]}")
sys.exit(2 if missing else 0)
PY
}
for attempt in $(seq 60); do
  status=0; summary=$(check) || status=$?
  [ $status -ne 2 ] && break
  sleep 1
done
echo "$summary"
if [ $status -ne 0 ]; then
  tail -n 30 "$data.log"
  exit 1
fi
kill "${consumers[@]}" 2>/dev/null || true
tool consumer.group.ShareGroupCommand --bootstrap-server "$bootstrap" --describe --group bounced > "$data.describe" 2>&1
left=$(awk '$1 == "bounced" && $2 == "bounced" && $5 != "0"' "$data.describe")
if [ -n "$left" ] || [ "$(grep -c '^bounced  *bounced ' "$data.describe")" -ne 3 ]; then
  cat "$data.describe"
  echo "FAILED: the share group did not acknowledge everything"
  exit 1
fi
echo "VerifiableShareConsumer x3 on $brokers broker(s): $summary," \
  "through $consumer_bounces consumer bounces (SIGTERM and SIGKILL) and $broker_kills broker kills; lag 0 (${SECONDS} s)"
