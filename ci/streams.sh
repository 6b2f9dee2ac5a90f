#!/usr/bin/env bash
# Kafka Streams 4.4 on kaas, exactly once, through kills, and restored from a compacted
# changelog (kaas.StreamsCount): three brokers on one data directory; two instances of a keyed
# count (a repartition topic, a state store with its changelog, exactly_once_v2, the store's
# cache off so that every input record makes exactly one update) while input is produced,
# brokers are SIGKILLed and restarted in turn, and one instance is SIGKILLed and restarted (an
# unclean stop: Streams wipes its state under EOS and restores it from the changelog). Then
# every word's updates in the output, read_committed, must be exactly 1, 2, ..., its count in
# the input: none lost, none repeated. Then the instances stop, the cleaner compacts the
# changelog (segments roll after 2 s, a pass runs at a dirty ratio of 0.1), a fresh instance
# with an empty state directory restores the store from what compaction left, and one more
# record per word must bring every word's count to exactly one more.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${KAAS_STREAMS_RECORDS:-12000}
source ci/cluster.sh
apps=(0 0 0)
broker_settings=(--set group.initial.rebalance.delay.ms=0
                 --set log.roll.ms=2000 --set log.cleaner.backoff.ms=500 --set log.cleaner.min.cleanable.ratio=0.1)
app() { java -cp "$cp" kaas.StreamsCount "$@"; }
# The JVM itself in the background (not a function's subshell), so that a SIGKILL reaches it.
start_app() {
  java -cp "$cp" kaas.StreamsCount run "$bootstrap" "$data.state-$1" >> "$data.app-$1" 2>&1 &
  apps[$1]=$!
}
fail() {
  echo "FAILED: $*"
  for f in "$data".app-*; do echo "--- $f"; tail -25 "$f" || true; done
  echo "--- brokers"; grep -i "error\|panic" "$data.log" | tail -20 || true
  exit 1
}
cleanup() {
  stop_brokers
  for pid in "${apps[@]}"; do
    [ "$pid" -gt 0 ] && { kill "$pid" 2>/dev/null || true; }
  done
  wait 2>/dev/null || true
  rm -rf "$data" "$data".*
}
trap cleanup EXIT
start_cluster

tool TopicCommand --bootstrap-server "$bootstrap" --create --topic input --partitions 3 --replication-factor 1 > /dev/null
tool TopicCommand --bootstrap-server "$bootstrap" --create --topic counts --partitions 3 --replication-factor 1 > /dev/null
start_app 0
start_app 1
# Until every word's count is complete (exit 0), or a check finds an update lost or repeated
# (exit 1), or the time runs out.
wait_complete() {
  local status
  for _ in $(seq "$1"); do
    status=0
    timeout 120 java -cp "$cp" kaas.StreamsCount check "$bootstrap" > "$data.check" 2>&1 || status=$?
    case $status in
      0) cat "$data.check"; return 0 ;;
      2) sleep 2 ;;
      *) cat "$data.check"; fail "the counts are not exactly once" ;;
    esac
  done
  cat "$data.check"
  fail "the counts did not complete"
}

# The input, 400 a second, while brokers are killed in turn and one instance once.
timeout 300 java -cp "$cp" kaas.StreamsCount produce "$bootstrap" 0 "$records" 400 > "$data.producer" 2>&1 &
producer=$!
kills=0
while kill -0 "$producer" 2>/dev/null; do
  sleep 4
  kill -0 "$producer" 2>/dev/null || break
  victim=$((kills % 3))
  kill_broker "$victim"
  if [ "$kills" -eq 1 ]; then
    kill -9 "${apps[1]}" 2>/dev/null || true
    wait "${apps[1]}" 2>/dev/null || true
    start_app 1
  fi
  sleep 1
  start_broker "$victim"
  kills=$((kills + 1))
done
wait "$producer" || fail "the producer: $(tail -3 "$data.producer")"
cat "$data.producer"
wait_complete 90
echo "through $kills broker kills and an instance SIGKILLed and restarted"

# Compaction of the changelog, then a fresh instance restores from it.
for i in 0 1; do
  kill -0 "${apps[$i]}" 2>/dev/null || fail "instance $i stopped on its own"
  kill "${apps[$i]}"
  wait "${apps[$i]}" 2>/dev/null || true
  apps[$i]=0
done
before=$(app changelog "$bootstrap")
compacted=
for _ in $(seq 60); do
  sleep 2
  after=$(app changelog "$bootstrap")
  # Each word's last count stays; every earlier update goes once its segment is cleaned.
  if [ "$(echo "$after" | awk '{print $2}')" -le $((records / 10)) ]; then compacted=1; break; fi
done
[ -n "$compacted" ] || fail "the changelog was not compacted: $before, then $after"
echo "$before; compacted: $after"
rm -rf "$data".state-*
start_app 2
timeout 60 java -cp "$cp" kaas.StreamsCount produce "$bootstrap" "$records" 20 100 > "$data.producer" 2>&1 \
  || fail "the last records: $(tail -3 "$data.producer")"
wait_complete 60
echo "Kafka Streams (exactly_once_v2) x2 on 3 brokers: $records records counted exactly once through $kills broker kills and an instance killed; restored from the compacted changelog ($after), one more record per word counted from the restored store"
