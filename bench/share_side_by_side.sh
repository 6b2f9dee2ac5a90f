#!/usr/bin/env bash
# Share groups (KIP-932) on Apache Kafka 4.4 and on kaas, side by side on this machine, in turn
# (interleaved over ROUNDS rounds), as bench/side_by_side.sh measures the rest:
# - RECORDS records of 1 KiB on 6 partitions (kafka-producer-perf-test), then
# - consumed by one share consumer, by three, and by one classic group consumer, each poll's
#   records acknowledged before the next poll (explicit ACCEPTs and commitSync; the classic
#   consumer's commitSync): records per second and the acknowledgement's p50/p99 (kaas.ShareBench);
# - on kaas alone (Apache serves no TxnShareAcknowledge): `kaas share-copy`, the exactly-once
#   queue copier of KIP-1289, copying the records to another topic, in transactions per second.
# Apache runs with its defaults and with log.flush.interval.messages=1 (an fsync per write, as
# kaas does before it answers a produce; kaas's share state is durable before every
# acknowledgement is answered, Apache's is written to its __share_group_state topic).
#
#   bench/share_side_by_side.sh      (RECORDS=200000 ROUNDS=1 BENCH_DIR=scratch dir)
#
# Not part of .ci/run: it takes minutes; its figures belong in the README.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-200000}
rounds=${ROUNDS:-1}
source bench/common.sh

results=$dir/results.tsv
: > "$results"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$results"; }
field() { echo "$1" | sed -nE "s/.*$2=([0-9.]+).*/\1/p"; }

run_one() {
  local target=$1 round=$2 port data pid
  port=$(free_port)
  data=$dir/$target-$round
  case $target in
    kaas) "$KAAS" serve --data-dir "$data" --listen "127.0.0.1:$port" \
            --set group.initial.rebalance.delay.ms=0 > "$data.log" 2>&1 & ;;
    apache) ci/apache/kafka.sh "$port" "$data" > /dev/null 2>&1 & ;;
    apache-flush) ci/apache/kafka.sh "$port" "$data" log.flush.interval.messages=1 > /dev/null 2>&1 & ;;
  esac
  pid=$!
  until (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
  local b=127.0.0.1:$port topic=share-bench-$round out
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --create --topic "$topic" --partitions 6 \
    --replication-factor 1 > /dev/null 2>&1
  tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$records" --record-size 1024 \
    --throughput -1 --producer-props bootstrap.servers="$b" acks=all > /dev/null 2>&1
  for run in "share 1" "share 3" "classic 1"; do
    set -- $run
    out=$(tool kaas.ShareBench "$b" "$topic" "$records" "$1" "$2" 2>/dev/null | tail -1)
    record "$target" "$1_x$2_records_per_s" "$(field "$out" records_per_s)"
    record "$target" "$1_x$2_ack_p50_ms" "$(field "$out" ack_p50_ms)"
    record "$target" "$1_x$2_ack_p99_ms" "$(field "$out" ack_p99_ms)"
  done
  if [ "$target" = kaas ]; then
    tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --create --topic "$topic-copy" --partitions 6 \
      --replication-factor 1 > /dev/null 2>&1
    tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "$b" --entity-type groups --entity-name copy-$round \
      --alter --add-config share.auto.offset.reset=earliest > /dev/null 2>&1
    local start end
    start=$(date +%s%N)
    out=$("$KAAS" share-copy --bootstrap "$b" --group "copy-$round" --input "$topic" --output "$topic-copy" \
      --transactional-id "copy-$round" --max-records "$records" --idle-exit-ms 5000 | grep '^done:')
    end=$(date +%s%N)
    # The copier stops at --max-records; only if it fell short did it wait out 5 s of idleness
    # first, which is not part of the copy.
    local seconds txns copied
    txns=$(echo "$out" | sed -nE 's/.* ([0-9]+) transactions committed.*/\1/p')
    copied=$(echo "$out" | sed -nE 's/done: ([0-9]+) records copied.*/\1/p')
    seconds=$(python3 -c "print(($end - $start) / 1e9 - (0 if $copied >= $records else 5))")
    record kaas share_copy_txn_per_s "$(python3 -c "print(round($txns / $seconds, 1))")"
    record kaas share_copy_records_per_s "$(python3 -c "print(round($copied / $seconds))")"
  fi
  local broker_pid=$pid
  [ "$target" = kaas ] || broker_pid=$(pgrep -f "kafka.Kafka $data/server.properties" | head -1)
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

python3 - "$results" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    target, metric, value = line.rstrip("\n").split("\t")
    try:
        rows[metric][target].append(float(value))
    except ValueError:
        pass
print("| metric | Apache (defaults) | Apache (flush per message) | kaas | kaas / Apache defaults | kaas / Apache flush |")
print("|---|---|---|---|---|---|")
for metric, by in rows.items():
    med = {t: statistics.median(v) for t, v in by.items() if v}
    def ratio(t):
        return f"{med['kaas'] / med[t]:.2f}" if "kaas" in med and med.get(t) else "-"
    cells = [f"{med[t]:g}" if t in med else "-" for t in ("apache", "apache-flush", "kaas")]
    print(f"| {metric} | {' | '.join(cells)} | {ratio('apache')} | {ratio('apache-flush')} |")
PY
