#!/usr/bin/env bash
# Log compaction, Apache Kafka 4.4 and kaas side by side on this machine: how fast the cleaner
# cleans, and what it does to produce latency meanwhile.
# - A compacted topic of one partition (16 MiB segments) is filled with RECORDS keyed updates of
#   VALUE bytes over KEYS keys (kaas.CompactionLoad) while min.compaction.lag.ms (an hour) keeps
#   the cleaner off it; its size on disk is the dirty log.
# - Then min.compaction.lag.ms is set to 0 (IncrementalAlterConfigs) and the partition's size
#   on disk is watched (every 0.5 s) until it stops shrinking: cleaned MB/s is the dirty log over
#   the time from the change's answer to the last shrink (the active segment is never cleaned,
#   on either; where it begins depends on each broker's batching, hence "after cleaning" differs).
# - Produce latency: kafka-producer-perf-test at 2000 records/s of 1 KiB (acks=all) to another
#   topic for 10 s before the cleaning and for 10 s from its start: p50 and p99.
# Both brokers run one cleaner thread with their defaults (Apache: log.cleaner.dedupe.buffer.size
# 128 MiB, io.buffer.size 512 KiB, no I/O limit), log.cleaner.backoff.ms=500.
#
#   bench/compaction.sh        (RECORDS=1000000 KEYS=10000 VALUE=200 BENCH_DIR=scratch dir)
#
# Not part of .ci/run: a run takes minutes and its figures belong in the issue's note.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-1000000}
keys=${KEYS:-10000}
value=${VALUE:-200}
source bench/common.sh
# The partition's live segments: not a cleaner's output before its swap, nor the segments Apache
# keeps as .deleted for log.segment.delete.delay.ms after one.
size_of() { find "$1" -name '*.log' -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
latency() {
  tool org.apache.kafka.tools.ProducerPerformance --topic lat --num-records 20000 --record-size 1024 \
    --throughput 2000 --producer-props bootstrap.servers="$1" acks=all 2>/dev/null | tail -1 |
    sed -E 's/.* ([0-9]+) ms 50th, ([0-9]+) ms 95th, ([0-9]+) ms 99th.*/p50=\1 p99=\3/'
}

run_one() {
  local target=$1 port data pid b partition
  port=$(free_port)
  data=$dir/$target
  case $target in
    kaas) "$KAAS" serve --data-dir "$data" --listen "127.0.0.1:$port" --set log.cleaner.backoff.ms=500 \
            > "$data.log" 2>&1 &
          partition=$data/compacted-0 ;;
    apache) ci/apache/kafka.sh "$port" "$data" log.cleaner.backoff.ms=500 > /dev/null 2>&1 &
          partition=$data/logs/compacted-0 ;;
  esac
  pid=$!
  until (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
  b=127.0.0.1:$port
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --create --topic compacted --partitions 1 \
    --replication-factor 1 --config cleanup.policy=compact --config segment.bytes=16777216 \
    --config min.compaction.lag.ms=3600000 > /dev/null
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --create --topic lat --partitions 1 \
    --replication-factor 1 > /dev/null
  local load
  load=$(tool kaas.CompactionLoad "$b" compacted "$records" "$keys" "$value" 2>/dev/null | tail -1)
  local before_latency dirty
  before_latency=$(latency "$b")
  dirty=$(size_of "$partition")
  local start end now size last stable=0
  latency "$b" > "$dir/during" &
  local lat_pid=$!
  tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "$b" --entity-type topics --entity-name compacted \
    --alter --add-config min.compaction.lag.ms=0 > /dev/null
  # From the change's answer (not the tool's JVM start); each cleaner looks again within 0.5 s.
  start=$(date +%s%N)
  last=$dirty
  end=$start
  # Until the size has not moved for 5 s (or 5 minutes have passed).
  for _ in $(seq 600); do
    sleep 0.5
    now=$(date +%s%N)
    size=$(size_of "$partition")
    if [ "$size" -lt "$last" ]; then last=$size; end=$now; stable=0; else stable=$((stable + 1)); fi
    [ "$stable" -ge 10 ] && break
  done
  wait "$lat_pid" || true
  local seconds
  seconds=$(python3 -c "print(f'{($end - $start) / 1e9:.2f}')")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$load" "$dirty" "$last" "$seconds" "$before_latency" "$(cat "$dir/during")" \
    >> "$dir/results.tsv"
  kill "$pid" 2>/dev/null || true
  [ "$target" = kaas ] || pkill -f "kafka.Kafka $data/server.properties" || true
  wait "$pid" 2>/dev/null || true
}

: > "$dir/results.tsv"
for target in apache kaas; do
  echo "$target" >&2
  run_one "$target"
done
python3 - "$dir/results.tsv" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    target, load, dirty, clean, seconds, before, during = line.rstrip("\n").split("\t")
    rows[target] = dict(load=load, dirty=int(dirty), clean=int(clean), seconds=float(seconds),
                        before=before, during=during)
print("| | dirty log | after cleaning | took | cleaned MB/s | produce p50/p99 before | while cleaning |")
print("|---|---|---|---|---|---|---|")
for t, r in rows.items():
    rate = r["dirty"] / 1e6 / r["seconds"] if r["seconds"] > 0 else float("nan")
    r["rate"] = rate
    print(f"| {t} | {r['dirty'] / 1e6:.1f} MB | {r['clean'] / 1e6:.1f} MB | {r['seconds']:.1f} s | {rate:.1f} | {r['before']} | {r['during']} |")
if "kaas" in rows and "apache" in rows and rows["apache"]["rate"] > 0:
    print(f"\nkaas / Apache, cleaned MB/s: {rows['kaas']['rate'] / rows['apache']['rate']:.2f}")
for t, r in rows.items():
    print(f"{t} load: {r['load']}")
PY
