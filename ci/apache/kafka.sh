#!/usr/bin/env bash
# Runs one Apache Kafka 4.x node in KRaft mode (broker and controller in one process) from its
# Maven jars, the reference kaas is checked and measured against:
#   ci/apache/kafka.sh PORT DATA_DIR [name=value ...]
# Clients connect to 127.0.0.1:PORT; the controller listens on PORT+1. Settings are those a
# single node needs (replication factor 1 for the internal topics, no initial rebalance delay)
# and any given after DATA_DIR. Runs in the foreground; stop it with SIGTERM. Logs: DATA_DIR.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
port=$1 data=$2
shift 2
if [ ! -s "$here/target/classpath.txt" ] || [ "$here/pom.xml" -nt "$here/target/classpath.txt" ]; then
  (cd "$here" && mvn -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt >&2)
fi
cp=$(cat "$here/target/classpath.txt")
mkdir -p "$data"
props=$data/server.properties
cat > "$props" <<PROPS
process.roles=broker,controller
node.id=0
controller.quorum.voters=0@127.0.0.1:$((port + 1))
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data/logs
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
PROPS
for setting in "$@"; do echo "$setting" >> "$props"; done
cat > "$data/log4j2.properties" <<LOG
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = $data.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
LOG
java_opts=(-Xmx1g -Dlog4j2.configurationFile="$data/log4j2.properties")
if [ ! -f "$data/logs/meta.properties" ]; then
  java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$(java -cp "$cp" kafka.tools.StorageTool random-uuid)" \
    -c "$props" >> "$data.log" 2>&1
fi
exec java "${java_opts[@]}" -cp "$cp" kafka.Kafka "$props"
