#!/usr/bin/env bash
# TLS against PLAINTEXT, kaas and Apache Kafka 4.4 side by side on this machine: each broker
# with a PLAINTEXT and an SSL listener (one 2048-bit RSA certificate, TLS 1.3), and over each
# listener kafka-producer-perf-test (1 KiB records, acks=all, idempotent, 6 partitions) and
# kafka-consumer-perf-test of what was produced. Prints each figure, kaas's ratio to Apache's,
# and each broker's TLS / PLAINTEXT ratio. Apache runs with its defaults (no fsync per write).
#
#   bench/tls.sh        (RECORDS=100000 BENCH_DIR=scratch dir)
#
# Not part of .ci/run: a benchmark run takes minutes and its figures belong in the issue notes.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-100000}
source bench/common.sh

# A CA and a broker certificate for localhost, the broker's key and chain in one PEM file.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 -subj "/CN=kaas-bench-ca" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$dir/broker.key" -out "$dir/broker.csr" -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$dir/broker.ext"
openssl x509 -req -in "$dir/broker.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -out "$dir/broker.pem" \
  -days 2 -extfile "$dir/broker.ext" 2>/dev/null
cat "$dir/broker.key" "$dir/broker.pem" > "$dir/keystore.pem"
printf 'security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location=%s\n' "$dir/ca.pem" > "$dir/SSL.properties"
: > "$dir/PLAINTEXT.properties"

results=$dir/results.tsv
: > "$results"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$results"; }

run_one() {
  local target=$1 plain ssl data pid
  plain=$(free_port)
  ssl=$(free_port)
  data=$dir/$target
  case $target in
    kaas) "$KAAS" serve --data-dir "$data" --set "listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$ssl" \
            --set "ssl.keystore.location=$dir/keystore.pem" --set group.initial.rebalance.delay.ms=0 > "$data.log" 2>&1 & ;;
    apache) ci/apache/kafka.sh "$plain" "$data" \
              "listeners=PLAINTEXT://127.0.0.1:$plain,CONTROLLER://127.0.0.1:$((plain + 1)),SSL://127.0.0.1:$ssl" \
              "advertised.listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$ssl" \
              "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL" \
              "ssl.keystore.type=PEM" "ssl.keystore.location=$dir/keystore.pem" > /dev/null 2>&1 & ;;
  esac
  pid=$!
  until (echo > "/dev/tcp/127.0.0.1/$ssl") 2>/dev/null; do sleep 0.05; done
  for protocol in PLAINTEXT SSL; do
    local port=$plain topic=bench-$protocol out
    [ "$protocol" = SSL ] && port=$ssl
    local b=127.0.0.1:$port
    tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --command-config "$dir/$protocol.properties" \
      --create --topic "$topic" --partitions 6 --replication-factor 1 > /dev/null 2>&1
    out=$(tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$records" --record-size 1024 \
      --throughput -1 --producer.config "$dir/$protocol.properties" \
      --producer-props bootstrap.servers="$b" acks=all enable.idempotence=true 2>/dev/null | tail -1)
    record "$target" "produce_records_per_s_$protocol" "$(echo "$out" | sed -E 's/.* ([0-9.]+) records\/sec.*/\1/')"
    record "$target" "produce_p99_ms_$protocol" "$(echo "$out" | sed -E 's/.* ([0-9]+) ms 99th.*/\1/')"
    out=$(tool org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$b" --topic "$topic" \
      --command-config "$dir/$protocol.properties" --messages "$records" --group "bench-$protocol" --timeout 60000 \
      2>/dev/null | tail -1)
    record "$target" "consume_mb_per_s_$protocol" "$(echo "$out" | awk -F', ' '{print $4}')"
  done
  local broker_pid=$pid
  [ "$target" = kaas ] || broker_pid=$(pgrep -f "kafka.Kafka $data/server.properties" | head -1)
  kill "$pid" 2>/dev/null || true
  [ "$target" = kaas ] || kill "$broker_pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

for target in apache kaas; do
  echo "$target" >&2
  run_one "$target"
done

python3 - "$results" <<'PY'
import collections, sys
v = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    target, metric, value = line.rstrip("\n").split("\t")
    try:
        v[metric][target] = float(value)
    except ValueError:
        pass
print("| metric | Apache | kaas | kaas / Apache |")
print("|---|---|---|---|")
for metric, by in v.items():
    a, k = by.get("apache"), by.get("kaas")
    ratio = f"{k / a:.2f}" if a and k else "-"
    cell = lambda x: "-" if x is None else f"{x:g}"
    print(f"| {metric} | {cell(a)} | {cell(k)} | {ratio} |")
print()
print("| broker | produce TLS / PLAINTEXT | consume TLS / PLAINTEXT |")
print("|---|---|---|")
for target in ("apache", "kaas"):
    def r(m):
        p, s = v.get(f"{m}_PLAINTEXT", {}).get(target), v.get(f"{m}_SSL", {}).get(target)
        return f"{s / p:.2f}" if p and s else "-"
    print(f"| {target} | {r('produce_records_per_s')} | {r('consume_mb_per_s')} |")
PY
