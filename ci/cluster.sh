# Sourced by the scripts that kill brokers (kills.sh, share_kills.sh, streams.sh, connect.sh):
# three kaas brokers on one data directory, with failure detection in seconds so that a killed
# broker's partitions, groups and transactions move while the clients run.
#   start_cluster          start brokers 0, 1 and 2 and wait until they listen
#   start_broker ID        start one (again), with cluster_settings and the script's
#                          broker_settings (an array the script may set before calling)
#   kill_broker ID         SIGKILL one and reap it
#   stop_brokers           stop those running (for the script's cleanup)
#   tool CLASS ARGS...     one of Kafka's tools (org.apache.kafka.tools.CLASS)
# Sets KAAS, cp (the Java classpath), data (the volume; logs beside it as $data.*), ports,
# bootstrap and pids.
KAAS=${KAAS:-target/release/kaas}
[ -x "$KAAS" ] || cargo build --release -p kaas-server
cp=$(bash ci/clients/java/build.sh)
data=$(mktemp -d)
pids=(0 0 0)
ports=()
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for id in 0 1 2; do ports+=("$(free_port)"); done
bootstrap="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
# A lease of 3 s renewed every 0.5 s: a killed broker's work moves 3.5 s after the kill.
cluster_settings=(--set broker.session.timeout.ms=3000 --set broker.heartbeat.interval.ms=500
                  --set broker.lease.drift.margin.ms=500 --set broker.ownership.settle.ms=1000)
broker_settings=()
start_broker() {
  "$KAAS" serve --data-dir "$data" --listen "127.0.0.1:${ports[$1]}" --broker-id "$1" \
    "${cluster_settings[@]}" "${broker_settings[@]}" > /dev/null 2>> "$data.log" &
  pids[$1]=$!
}
start_cluster() {
  local id port
  for id in 0 1 2; do start_broker "$id"; done
  for port in "${ports[@]}"; do
    for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  done
  sleep 3
}
kill_broker() {
  kill -9 "${pids[$1]}" 2>/dev/null || true
  wait "${pids[$1]}" 2>/dev/null || true
}
stop_brokers() {
  local pid
  # Only real pids: `kill 0` would signal this script's whole process group (CI's too).
  for pid in "${pids[@]}"; do
    [ "$pid" -gt 0 ] && { kill "$pid" 2>/dev/null || true; }
  done
  true
}
tool() { timeout 120 java -cp "$cp" "org.apache.kafka.tools.$1" "${@:2}"; }
