#!/usr/bin/env bash
# Apache Kafka 4.4 and kaas side by side on this machine, the same workloads against each, in
# turn (interleaved over ROUNDS rounds), printing each figure and kaas's ratio to Apache's:
# - produce: kafka-producer-perf-test, 1 KiB records, acks=all, idempotent, 6 partitions;
# - consume: kafka-consumer-perf-test of what was produced;
# - transactions: committed transactions per second and the commit's p50/p99, 10 records of
#   1 KiB per transaction, one producer and eight (kaas.TxnBench);
# - end to end: kafka-e2e-latency, produce to a read_committed consumer, p50/p99;
# - the broker's RSS after the run and its start-up time (spawn to accepting connections).
# Apache runs twice: with its defaults (no fsync per write, it relies on replication) and with
# log.flush.interval.messages=1 (an fsync per write, as kaas does before every ack). The fsync
# ceiling of the disk is measured first (1 KiB writes, each followed by fsync).
#
#   bench/side_by_side.sh        (RECORDS=200000 ROUNDS=1 SECONDS_TXN=15 BENCH_DIR=scratch dir)
#
# Not part of .ci/run: a benchmark run takes minutes and its figures belong in the README.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-200000}
rounds=${ROUNDS:-1}
txn_seconds=${SECONDS_TXN:-15}
source bench/common.sh

fsync_ceiling=$(python3 - "$dir" <<'PY'
import os, sys, time
path = os.path.join(sys.argv[1], "fsync-probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
n, start = 0, time.time()
while time.time() - start < 3:
    os.write(fd, b"x" * 1024)
    os.fsync(fd)
    n += 1
os.close(fd)
os.remove(path)
print(f"{n / (time.time() - start):.0f}")
PY
)
echo "fsync ceiling: $fsync_ceiling fsyncs/s (1 KiB write + fsync, $dir)"

results=$dir/results.tsv
: > "$results"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$results"; }

run_one() {
  local target=$1 round=$2 port data pid start
  port=$(free_port)
  data=$dir/$target-$round
  start=$(date +%s%N)
  case $target in
    kaas) "$KAAS" serve --data-dir "$data" --listen "127.0.0.1:$port" \
            --set group.initial.rebalance.delay.ms=0 > "$data.log" 2>&1 & ;;
    apache) ci/apache/kafka.sh "$port" "$data" > /dev/null 2>&1 & ;;
    apache-flush) ci/apache/kafka.sh "$port" "$data" log.flush.interval.messages=1 > /dev/null 2>&1 & ;;
  esac
  pid=$!
  until (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
  record "$target" startup_s "$(( ($(date +%s%N) - start) / 1000000 ))e-3"
  local b=127.0.0.1:$port topic=bench-$round
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --create --topic "$topic" --partitions 6 \
    --replication-factor 1 > /dev/null 2>&1
  local out
  out=$(tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$records" --record-size 1024 \
    --throughput -1 --producer-props bootstrap.servers="$b" acks=all enable.idempotence=true 2>/dev/null | tail -1)
  record "$target" produce_records_per_s "$(echo "$out" | sed -E 's/.* ([0-9.]+) records\/sec.*/\1/')"
  record "$target" produce_p50_ms "$(echo "$out" | sed -E 's/.* ([0-9]+) ms 50th.*/\1/')"
  record "$target" produce_p99_ms "$(echo "$out" | sed -E 's/.* ([0-9]+) ms 99th.*/\1/')"
  out=$(tool org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$b" --topic "$topic" \
    --messages "$records" --group "bench-g-$round" --timeout 60000 2>/dev/null | tail -1)
  record "$target" consume_mb_per_s "$(echo "$out" | awk -F', ' '{print $4}')"
  for producers in 1 8; do
    out=$(tool kaas.TxnBench "$b" "$topic" "$producers" "$txn_seconds" 2>/dev/null | tail -1)
    record "$target" "txn_per_s_x$producers" "$(echo "$out" | sed -E 's/.*txn_per_s=([0-9.]+).*/\1/')"
    record "$target" "commit_p50_ms_x$producers" "$(echo "$out" | sed -E 's/.*commit_p50_ms=([0-9.]+).*/\1/')"
    record "$target" "commit_p99_ms_x$producers" "$(echo "$out" | sed -E 's/.*commit_p99_ms=([0-9.]+).*/\1/')"
  done
  local e2e=$dir/e2e.properties
  echo "isolation.level=read_committed" > "$e2e"
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --create --topic "e2e-$round" --partitions 1 \
    --replication-factor 1 > /dev/null 2>&1
  out=$(tool org.apache.kafka.tools.EndToEndLatency "$b" "e2e-$round" 2000 all 1024 "$e2e" 2>/dev/null)
  record "$target" e2e_p50_ms "$(echo "$out" | sed -nE 's/.*50th = ([0-9.]+).*/\1/p')"
  record "$target" e2e_p99_ms "$(echo "$out" | sed -nE 's/.*99th = ([0-9.]+).*/\1/p' | head -1)"
  local broker_pid=$pid
  [ "$target" = kaas ] || broker_pid=$(pgrep -f "kafka.Kafka $data/server.properties" | head -1)
  record "$target" rss_mib "$(( $(ps -o rss= -p "$broker_pid") / 1024 ))"
  kill "$pid" 2>/dev/null || true
  [ "$target" = kaas ] || kill "$broker_pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

for round in $(seq "$rounds"); do
  for target in apache apache-flush kaas; do
    echo "round $round: $target" >&2
    run_one "$target" "$round"
  done
done

python3 - "$results" "$fsync_ceiling" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    target, metric, value = line.rstrip("\n").split("\t")
    try:
        rows[metric][target].append(float(value))
    except ValueError:
        pass
print(f"| metric | Apache (defaults) | Apache (flush per message) | kaas | kaas / Apache defaults | kaas / Apache flush |")
print("|---|---|---|---|---|---|")
for metric, by in rows.items():
    med = {t: statistics.median(v) for t, v in by.items() if v}
    def ratio(t):
        return f"{med['kaas'] / med[t]:.2f}" if "kaas" in med and med.get(t) else "-"
    cells = [f"{med[t]:g}" if t in med else "-" for t in ("apache", "apache-flush", "kaas")]
    print(f"| {metric} | {' | '.join(cells)} | {ratio('apache')} | {ratio('apache-flush')} |")
print(f"\nfsync ceiling: {sys.argv[2]} fsyncs/s")
PY
