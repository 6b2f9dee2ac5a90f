#!/usr/bin/env bash
# Kafka Connect 4.3 on kaas, exactly once (KIP-618), through kills: three brokers on one data
# directory; two distributed workers with exactly.once.source.support=enabled keep their
# configs, offsets and statuses in topics they create compacted; Kafka's FileStreamSource
# connector (exactly.once.support=required, a transaction per poll) tails a file the script
# appends numbers to, into a topic, while brokers are SIGKILLed and restarted in turn and the
# worker running the task is SIGKILLed once (its task moves to the other worker, which fences
# the zombie's transactional producer and resumes from the offsets committed with the last
# transaction). Then a read_committed reader must find every number exactly once, and the
# cleaner must have compacted the offsets topic (one offset per transaction) down to a few
# records.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${KAAS_CONNECT_RECORDS:-20000}
source ci/cluster.sh
connect_cp=$(bash ci/clients/connect/classpath.sh)
broker_settings=(--set group.initial.rebalance.delay.ms=0
                 --set log.roll.ms=2000 --set log.cleaner.backoff.ms=500 --set log.cleaner.min.cleanable.ratio=0.1)
workers=(0 0)
rest=("$(free_port)" "$(free_port)")
input=$data.input
: > "$input"
start_worker() {
  cat > "$data.worker-$1.properties" <<PROPS
bootstrap.servers=$bootstrap
group.id=kaas-connect
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
config.storage.topic=connect-configs
offset.storage.topic=connect-offsets
status.storage.topic=connect-status
config.storage.replication.factor=-1
offset.storage.replication.factor=-1
status.storage.replication.factor=-1
exactly.once.source.support=enabled
listeners=http://127.0.0.1:${rest[$1]}
rest.advertised.host.name=127.0.0.1
rest.advertised.port=${rest[$1]}
offset.flush.interval.ms=1000
# A vanished worker's task is given to another after 5 s, not the default 5 minutes.
scheduled.rebalance.max.delay.ms=5000
session.timeout.ms=10000
heartbeat.interval.ms=1000
PROPS
  # The JVM itself in the background (not a function's subshell), so that a SIGKILL reaches it.
  java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$connect_cp" \
    org.apache.kafka.connect.cli.ConnectDistributed "$data.worker-$1.properties" >> "$data.worker-$1" 2>&1 &
  workers[$1]=$!
}
fail() {
  echo "FAILED: $*"
  for f in "$data".worker-[01]; do echo "--- $f"; grep -v "^\s*at " "$f" | tail -25 || true; done
  echo "--- brokers"; grep -i "error\|panic" "$data.log" | tail -20 || true
  exit 1
}
cleanup() {
  stop_brokers
  for pid in "${workers[@]}"; do
    [ "$pid" -gt 0 ] && { kill "$pid" 2>/dev/null || true; }
  done
  wait 2>/dev/null || true
  [ -n "${KAAS_KEEP:-}" ] && { echo "kept: $data.*"; return; }
  rm -rf "$data" "$data".*
}
trap cleanup EXIT
start_cluster
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic numbers --partitions 3 --replication-factor 1 > /dev/null
start_worker 0
start_worker 1
api() { curl -sf --max-time 10 "$@"; }
for _ in $(seq 120); do
  api "http://127.0.0.1:${rest[0]}/connectors" > /dev/null 2>&1 && api "http://127.0.0.1:${rest[1]}/connectors" > /dev/null 2>&1 && break
  sleep 1
done
api "http://127.0.0.1:${rest[0]}/connectors" > /dev/null || fail "the workers' REST servers did not come up"
connector='{"name": "numbers", "config": {
  "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
  "file": "'"$input"'", "topic": "numbers", "batch.size": "200",
  "exactly.once.support": "required", "transaction.boundary": "poll"}}'
for _ in $(seq 30); do
  api -X POST -H 'Content-Type: application/json' -d "$connector" "http://127.0.0.1:${rest[0]}/connectors" > /dev/null && break
  sleep 2
done
# The worker (0 or 1) running the task, once it runs.
task_worker() {
  api "http://127.0.0.1:${rest[0]}/connectors/numbers/status" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
t = [t for t in s.get("tasks", []) if t.get("state") == "RUNNING"]
print(t[0]["worker_id"].rsplit(":", 1)[1] if t else "")' 2>/dev/null || true
}
for _ in $(seq 60); do [ -n "$(task_worker)" ] && break; sleep 1; done
[ -n "$(task_worker)" ] || fail "the connector's task did not start: $(api "http://127.0.0.1:${rest[0]}/connectors/numbers/status" || true)"

# The input, appended 500 numbers at a time, while brokers are killed in turn, and the worker
# running the task once.
next=0
kills=0
worker_killed=
while [ "$next" -lt "$records" ]; do
  for _ in 1 2 3 4; do
    end=$((next + 500 < records ? next + 500 : records))
    seq "$next" $((end - 1)) >> "$input"
    next=$end
    sleep 1
  done
  victim=$((kills % 3))
  kill_broker "$victim"
  if [ "$kills" -eq 2 ] && [ -z "$worker_killed" ]; then
    port=$(task_worker)
    for w in 0 1; do
      if [ "${rest[$w]}" = "$port" ]; then
        kill -9 "${workers[$w]}"; wait "${workers[$w]}" 2>/dev/null || true
        worker_killed="worker $w (running the task)"
        start_worker "$w"
      fi
    done
  fi
  sleep 1
  start_broker "$victim"
  kills=$((kills + 1))
done
[ -n "$worker_killed" ] || fail "the task's worker was not found to kill"

# Until every number is in the topic (or one is there twice).
seq 0 $((records - 1)) > "$data.want"
complete=
for _ in $(seq 40); do
  timeout 120 java -cp "$cp" kaas.ReadCommitted "$bootstrap" numbers | sort -n > "$data.out"
  duplicated=$(uniq -d "$data.out" | wc -l)
  [ "$duplicated" -eq 0 ] || fail "$duplicated numbers twice in the topic ($(uniq -d "$data.out" | head -3 | tr '\n' ' ')...)"
  if cmp -s "$data.out" "$data.want"; then complete=1; break; fi
  sleep 3
done
[ -n "$complete" ] || fail "$(wc -l < "$data.out") of $records numbers in the topic, $(comm -13 "$data.out" "$data.want" | wc -l) missing ($(comm -13 "$data.out" "$data.want" | sort -n | sed -n '1p;$p' | tr '\n' ' ')first and last)"

# The internal topics as Connect created them, and the offsets topic compacted.
for topic in connect-configs connect-offsets connect-status; do
  tool ConfigCommand --bootstrap-server "$bootstrap" --entity-type topics --entity-name "$topic" --describe --all \
    | grep -q "cleanup.policy=compact " || fail "$topic is not cleanup.policy=compact"
done
# Every offset the task committed (one per transaction) is a record of one key (the file).
written=$(tool GetOffsetShell --bootstrap-server "$bootstrap" --topic connect-offsets | awk -F: '{s += $3} END {print s}')
compacted=
for _ in $(seq 60); do
  offsets=$(timeout 120 java -cp "$cp" kaas.ReadCommitted "$bootstrap" connect-offsets | wc -l)
  # The active segment (never cleaned) keeps the last 2 s of transactions.
  if [ "$offsets" -le 25 ] && [ $((offsets * 4)) -le "$written" ]; then compacted=1; break; fi
  sleep 2
done
[ -n "$compacted" ] || fail "connect-offsets was not compacted: $written offsets written (with their markers), $offsets records left"
echo "Kafka Connect (FileStreamSource, exactly.once.source.support=enabled) x2 workers on 3 brokers: $records records exactly once through $kills broker kills and $worker_killed SIGKILLed; connect-offsets compacted: $offsets records left of $written offsets written with their markers"
