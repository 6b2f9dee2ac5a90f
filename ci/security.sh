#!/usr/bin/env bash
# SSL and SASL listeners with real clients: a CA, broker and client certificates made here with
# openssl; brokers with a PLAINTEXT and an SSL listener side by side.
# - one broker: the Java client (Kafka's console producer and consumer), kafka-python and
#   confluent-kafka produce and consume over SSL; each listener advertises its own address
#   (kafka-broker-api-versions on each); a PLAINTEXT client on the SSL port gets no answer;
# - mutual TLS (ssl.client.auth=required): a client with a certificate signed by the trusted CA
#   produces (the Java client, confluent-kafka, kafka-python), one without is refused; the
#   certificate's subject names its principal (ssl.principal.mapping.rules), to which ACLs
#   then apply;
# - a certificate replaced on disk is served to new connections without a restart;
# - each SSL listener may have its own certificate (listener.name.<listener>.ssl.*);
# - three brokers on one volume, peers on PLAINTEXT, clients on SSL: verifiable producer and
#   consumer, every record once;
# - SASL/PLAIN on SASL_PLAINTEXT and SASL_SSL listeners: the Java client, kafka-python and
#   confluent-kafka authenticate and produce and consume; a wrong password is refused
#   (SASL_AUTHENTICATION_FAILED, late, logged) and writes nothing; a request before
#   authentication closes the connection, ApiVersions is answered; an unserved mechanism is
#   refused with the list of those served;
# - SCRAM-SHA-256/512: kafka-configs sets a user's credentials (AlterUserScramCredentials),
#   confluent-kafka describes and deletes them; the Java client, kafka-python and
#   confluent-kafka authenticate with them, on the broker that set them and at once on a
#   second broker of the same volume; a wrong password and a deleted credential are refused;
# - three brokers on SASL_SSL alone (inter-broker too: peers over TLS, KAAS-BROKER): kaas admin
#   over SASL_SSL sets a SCRAM-SHA-512 user, with which the Java client, confluent-kafka
#   (transactions across the three brokers) and kafka-python (read_committed) work over
#   SASL_SSL; the brokers' WriteTxnMarkers calls to each other are counted.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/security-env.sh

# Certificates: a CA, two broker certificates (the second replaces the first on disk), a client.
cert() { # cert NAME CN: NAME.key, NAME.pem signed by the CA, NAME-keystore.pem (key then chain)
  openssl req -newkey rsa:2048 -nodes -keyout "$work/$1.key" -out "$work/$1.csr" -subj "/CN=$2" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$work/$1.ext"
  openssl x509 -req -in "$work/$1.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -out "$work/$1.pem" -days 2 -extfile "$work/$1.ext" 2>/dev/null
  cat "$work/$1.key" "$work/$1.pem" > "$work/$1-keystore.pem"
}
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" -days 2 \
  -subj "/CN=kaas-ci-ca" 2>/dev/null
cert broker localhost
cert broker2 localhost
cert client kaas-client
cp "$work/broker-keystore.pem" "$work/keystore.pem"
cat > "$work/ssl.properties" <<EOF
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$work/ca.pem
EOF
cat > "$work/mtls.properties" <<EOF
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$work/ca.pem
ssl.keystore.type=PEM
ssl.keystore.location=$work/client-keystore.pem
EOF

# start NAME ID DATA PLAIN_PORT SSL_PORT [--set ...]: a broker with both listeners.
start() {
  local name=$1 id=$2 data=$3 plain=$4 ssl=$5
  shift 5
  "$KAAS" serve --data-dir "$data" --broker-id "$id" \
    --set "listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$ssl" \
    --set "ssl.keystore.location=$work/keystore.pem" \
    --set group.initial.rebalance.delay.ms=0 --set broker.session.timeout.ms=3000 \
    --set broker.heartbeat.interval.ms=500 --set broker.lease.drift.margin.ms=500 \
    --set broker.ownership.settle.ms=1000 "$@" > /dev/null 2> "$work/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$ssl) 2>/dev/null && break; sleep 0.1; done
}
produce() { # produce BOOTSTRAP CONFIG TOPIC N
  seq 1 "$4" | timeout 60 java -cp "$cp" org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$1" \
    --topic "$3" --command-config "$2" --producer-property acks=all --producer-property max.block.ms=10000 \
    > "$work/produce.out" 2>&1
}
consume() { # consume BOOTSTRAP CONFIG TOPIC N: the values read
  timeout 60 java -cp "$cp" org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$1" \
    --topic "$3" --from-beginning --max-messages "$4" --timeout-ms 20000 --command-config "$2" 2> /dev/null
}

echo "== one broker, PLAINTEXT and SSL listeners (at ${SECONDS} s)"
plain=$(free_port); ssl=$(free_port)
start one 0 "$work/one" "$plain" "$ssl"
produce "127.0.0.1:$ssl" "$work/ssl.properties" tls 20 || fail "Java producer over SSL: $(tail -3 "$work/produce.out")"
[ "$(consume "127.0.0.1:$ssl" "$work/ssl.properties" tls 20 | sort -n | tr '\n' ' ')" = "$(seq 1 20 | tr '\n' ' ')" ] \
  || fail "Java consumer over SSL did not read 1..20"
echo "Java client over SSL: 20 records produced and read back"
# Each listener tells its clients its own addresses.
tool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "127.0.0.1:$ssl" \
  --command-config "$work/ssl.properties" 2> /dev/null | grep -q "^127.0.0.1:$ssl (id: 0" \
  || fail "the SSL listener does not advertise 127.0.0.1:$ssl"
tool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "127.0.0.1:$plain" 2> /dev/null \
  | grep -q "^127.0.0.1:$plain (id: 0" || fail "the PLAINTEXT listener does not advertise 127.0.0.1:$plain"
echo "each listener advertises its own address"
ci/.venv/bin/python - "$ssl" "$work/ca.pem" <<'PY' || fail "Python clients over SSL"
import sys
from kafka import KafkaConsumer, KafkaProducer
from confluent_kafka import Consumer, Producer
port, ca = sys.argv[1], sys.argv[2]
bootstrap = f"127.0.0.1:{port}"
p = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=ca, acks="all")
for i in range(10):
    p.send("tls-py", f"kafka-python-{i}".encode())
p.flush(); p.close()
c = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca})
for i in range(10):
    c.produce("tls-py", f"confluent-{i}".encode())
assert c.flush(20) == 0, "confluent-kafka: records not delivered"
k = KafkaConsumer("tls-py", bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=ca,
                  auto_offset_reset="earliest", consumer_timeout_ms=10000)
seen = sorted(m.value.decode() for m in k)
k.close()
assert len(seen) == 20, f"kafka-python read {len(seen)} records"
r = Consumer({"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca,
              "group.id": "tls-py", "auto.offset.reset": "earliest"})
r.subscribe(["tls-py"])
got = []
for _ in range(100):
    m = r.poll(0.5)
    if m is not None and not m.error():
        got.append(m.value().decode())
    if len(got) == 20:
        break
r.close()
assert sorted(got) == seen, f"confluent-kafka read {len(got)} records"
print("kafka-python and confluent-kafka over SSL: 20 records produced and read back by each")
PY
# A PLAINTEXT client on the SSL port: the handshake fails, no Kafka answer comes back.
if ci/.venv/bin/python - "$ssl" <<'PY' 2> /dev/null; then fail "a PLAINTEXT client got an answer from the SSL listener"; fi
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
header = struct.pack(">hhih", 18, 0, 1, 2) + b"ci"  # ApiVersions v0
s.sendall(struct.pack(">i", len(header)) + header)
answer = b""
while len(answer) < 8:
    more = s.recv(8 - len(answer))
    if not more:
        break
    answer += more
# A Kafka answer: a size, then the correlation id 1 (what came back is a TLS alert, or nothing).
sys.exit(0 if len(answer) == 8 and struct.unpack(">i", answer[4:8])[0] == 1 else 1)
PY
echo "a PLAINTEXT client on the SSL listener gets no Kafka answer (a TLS alert, then the close)"

echo "== a certificate replaced on disk (at ${SECONDS} s)"
serial() { openssl s_client -connect "127.0.0.1:$ssl" -servername localhost < /dev/null 2> /dev/null \
  | openssl x509 -noout -serial; }
before=$(serial)
[ "$before" = "$(openssl x509 -noout -serial -in "$work/broker.pem")" ] || fail "not serving broker.pem: $before"
cp "$work/broker2-keystore.pem" "$work/keystore.pem.tmp" && mv "$work/keystore.pem.tmp" "$work/keystore.pem"
want=$(openssl x509 -noout -serial -in "$work/broker2.pem")
for _ in $(seq 30); do [ "$(serial)" = "$want" ] && break; sleep 0.5; done
[ "$(serial)" = "$want" ] || fail "still serving $before after the keystore changed"
produce "127.0.0.1:$ssl" "$work/ssl.properties" tls 5 || fail "producing after the certificate changed"
echo "new connections get the new certificate ($before -> $want), no restart"
kill "${pids[@]}"; wait 2> /dev/null || true; pids=()
cp "$work/broker-keystore.pem" "$work/keystore.pem"

echo "== each SSL listener its own certificate (listener.name.<listener>.ssl.*) (at ${SECONDS} s)"
plain=$(free_port); ssl=$(free_port); other=$(free_port)
"$KAAS" serve --data-dir "$work/per-listener" \
  --set "listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$ssl,OTHER://127.0.0.1:$other" \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,OTHER:SSL" \
  --set "ssl.keystore.location=$work/broker-keystore.pem" \
  --set "listener.name.other.ssl.keystore.location=$work/broker2-keystore.pem" > /dev/null 2> "$work/per-listener.log" &
pids+=($!)
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$other) 2>/dev/null && break; sleep 0.1; done
serial_at() { openssl s_client -connect "127.0.0.1:$1" -servername localhost < /dev/null 2> /dev/null \
  | openssl x509 -noout -serial; }
[ "$(serial_at "$ssl")" = "$(openssl x509 -noout -serial -in "$work/broker.pem")" ] || fail "SSL does not serve broker.pem"
[ "$(serial_at "$other")" = "$(openssl x509 -noout -serial -in "$work/broker2.pem")" ] || fail "OTHER does not serve its own certificate"
produce "127.0.0.1:$other" "$work/ssl.properties" per-listener 5 || fail "producing over OTHER"
echo "SSL serves the broker's certificate, OTHER its own (listener.name.other.ssl.keystore.location); the Java client produces over it"
kill "${pids[@]}"; wait 2> /dev/null || true; pids=()

echo "== mutual TLS (ssl.client.auth=required) (at ${SECONDS} s)"
plain=$(free_port); ssl=$(free_port)
start mtls 0 "$work/mtls" "$plain" "$ssl" --set ssl.client.auth=required --set "ssl.truststore.certificates=$(cat "$work/ca.pem")"
# The trusted certificates, given inline, are described as a secret: no value.
configs=$(tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$plain" --describe \
  --entity-type brokers --entity-name 0 --all 2> /dev/null)
echo "$configs" | grep -q "ssl.truststore.certificates=null sensitive=true" || fail "ssl.truststore.certificates not sensitive"
if echo "$configs" | grep -q "BEGIN CERTIFICATE"; then fail "DescribeConfigs shows a secret"; fi
produce "127.0.0.1:$ssl" "$work/mtls.properties" mtls 10 || fail "a client with a certificate: $(tail -3 "$work/produce.out")"
produce "127.0.0.1:$ssl" "$work/ssl.properties" mtls 1 || true
[ "$(consume "127.0.0.1:$ssl" "$work/mtls.properties" mtls 11 | wc -l)" -eq 10 ] \
  || fail "the mTLS topic should hold the 10 records of the client with a certificate, no more"
grep -q "handshake failed" "$work/mtls.log" || fail "the refused handshake is not logged"
echo "with a CA-signed client certificate (trusted CA given inline, described as sensitive): 10 records produced and read; without one: refused, logged"
ci/.venv/bin/python - "$ssl" "$work" <<'PY' || fail "Python clients over mutual TLS"
import sys
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer
port, work = sys.argv[1], sys.argv[2]
b = f"127.0.0.1:{port}"
tls = {"bootstrap.servers": b, "security.protocol": "SSL", "ssl.ca.location": f"{work}/ca.pem",
       "ssl.certificate.location": f"{work}/client.pem", "ssl.key.location": f"{work}/client.key"}
p = Producer(tls)
for i in range(5):
    p.produce("mtls-py", f"confluent-{i}".encode())
assert p.flush(30) == 0, "confluent-kafka with a client certificate: records not delivered"
k = KafkaProducer(bootstrap_servers=b, security_protocol="SSL", ssl_cafile=f"{work}/ca.pem",
                  ssl_certfile=f"{work}/client.pem", ssl_keyfile=f"{work}/client.key", acks="all")
for i in range(5):
    k.send("mtls-py", f"kafka-python-{i}".encode())
k.flush(30); k.close()
c = KafkaConsumer("mtls-py", bootstrap_servers=b, security_protocol="SSL", ssl_cafile=f"{work}/ca.pem",
                  ssl_certfile=f"{work}/client.pem", ssl_keyfile=f"{work}/client.key",
                  auto_offset_reset="earliest", consumer_timeout_ms=10000)
n = len(list(c)); c.close()
assert n == 10, f"kafka-python read {n} of 10 over mutual TLS"
bare = Producer({"bootstrap.servers": b, "security.protocol": "SSL", "ssl.ca.location": f"{work}/ca.pem",
                 "message.timeout.ms": 5000})
outcomes = []
bare.produce("mtls-py", b"no certificate", on_delivery=lambda err, msg: outcomes.append(err))
bare.flush(15)
assert len(outcomes) == 1 and outcomes[0] is not None, f"confluent-kafka without a certificate was let in: {outcomes}"
print("mutual TLS: confluent-kafka and kafka-python with the client certificate, 10 records produced and read; without it refused")
PY
kill "${pids[@]}"; wait 2> /dev/null || true; pids=()

echo "== a client certificate names the principal (ssl.principal.mapping.rules); ACLs apply to it (at ${SECONDS} s)"
plain=$(free_port); ssl=$(free_port)
start mtls-acl 0 "$work/mtls-acl" "$plain" "$ssl" --set ssl.client.auth=required \
  --set "ssl.truststore.certificates=$(cat "$work/ca.pem")" \
  --set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer --set super.users=User:ANONYMOUS \
  --set 'ssl.principal.mapping.rules=RULE:^CN=([^,]*)$/cert-$1/L,DEFAULT'
for topic in mtls-ok mtls-no; do
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$plain" --create --topic "$topic" \
    --partitions 1 --replication-factor 1 > /dev/null 2>&1 || fail "creating $topic"
  tool org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$plain" --add \
    --allow-principal User:cert-kaas-client --operation All --topic "$topic" > /dev/null 2>&1 || fail "ACL on $topic"
done
tool org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$plain" --add \
  --deny-principal User:cert-kaas-client --operation Write --topic mtls-no > /dev/null 2>&1 || fail "DENY on mtls-no"
verifiable() { # verifiable TOPIC N: VerifiableProducer over mTLS, its events in $work/vp-TOPIC.out
  timeout 60 java -cp "$cp" org.apache.kafka.tools.VerifiableProducer --bootstrap-server "127.0.0.1:$ssl" \
    --topic "$1" --max-messages "$2" --producer.config "$work/mtls.properties" > "$work/vp-$1.out" 2>&1 || true
}
verifiable mtls-ok 5
[ "$(grep -c '"name":"producer_send_success"' "$work/vp-mtls-ok.out")" -eq 5 ] \
  || fail "User:cert-kaas-client, allowed, could not write: $(tail -3 "$work/vp-mtls-ok.out")"
verifiable mtls-no 3
grep -q '"name":"producer_send_error".*TopicAuthorizationException' "$work/vp-mtls-no.out" \
  || fail "User:cert-kaas-client was not refused by its DENY: $(tail -3 "$work/vp-mtls-no.out")"
if grep -q '"name":"producer_send_success"' "$work/vp-mtls-no.out"; then fail "a DENY of the certificate's principal let a write through"; fi
echo "the certificate CN=kaas-client is User:cert-kaas-client by RULE:^CN=([^,]*)\$/cert-\$1/L: its ALLOW lets it write, its DENY refuses it"
kill "${pids[@]}"; wait 2> /dev/null || true; pids=()

echo "== three brokers on one volume, peers on PLAINTEXT, clients on SSL (at ${SECONDS} s)"
bootstrap=
for id in 0 1 2; do
  plain=$(free_port); ssl=$(free_port)
  start "b$id" "$id" "$work/three" "$plain" "$ssl"
  bootstrap="${bootstrap:+$bootstrap,}127.0.0.1:$ssl"
done
sleep 4
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --command-config "$work/ssl.properties" \
  --create --topic tls3 --partitions 6 --replication-factor 1 > /dev/null 2>&1 || fail "creating tls3 over SSL"
tool org.apache.kafka.tools.VerifiableProducer --bootstrap-server "$bootstrap" --topic tls3 --max-messages 3000 \
  --acks -1 --producer.config "$work/ssl.properties" > "$work/vp.out" 2> /dev/null || fail "verifiable producer"
acked=$(grep -c '"name":"producer_send_success"' "$work/vp.out" || true)
[ "$acked" -eq 3000 ] || fail "3000 records sent over SSL, $acked acknowledged"
read=$(consume "$bootstrap" "$work/ssl.properties" tls3 3000 | sort -n | uniq | wc -l)
[ "$read" -eq 3000 ] || fail "read back $read distinct records of 3000"
echo "3 brokers: 3000 records over SSL, acknowledged and read back once each"
kill "${pids[@]}"; wait 2> /dev/null || true; pids=()

echo "== SASL/PLAIN on SASL_PLAINTEXT and SASL_SSL listeners (at ${SECONDS} s)"
plain=$(free_port); sasl=$(free_port); sasl_ssl=$(free_port)
login='org.apache.kafka.common.security.plain.PlainLoginModule required'
users="$login user_admin=\"admin-secret\" user_alice=\"alice-secret\";"
"$KAAS" serve --data-dir "$work/sasl" \
  --set "listeners=PLAINTEXT://127.0.0.1:$plain,SASL_PLAINTEXT://127.0.0.1:$sasl,SASL_SSL://127.0.0.1:$sasl_ssl" \
  --set "ssl.keystore.location=$work/keystore.pem" --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 \
  --set "listener.name.sasl_plaintext.plain.sasl.jaas.config=$users" --set "sasl.jaas.config=$users" \
  --set group.initial.rebalance.delay.ms=0 > /dev/null 2> "$work/sasl.log" &
pids+=($!)
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$sasl_ssl) 2>/dev/null && break; sleep 0.1; done
jaas() { echo "sasl.jaas.config=$login username=\"$1\" password=\"$2\";"; }
{ echo "security.protocol=SASL_PLAINTEXT"; echo "sasl.mechanism=PLAIN"; jaas alice alice-secret; } > "$work/sasl.properties"
{ cat "$work/ssl.properties" | sed 's/^security.protocol=SSL/security.protocol=SASL_SSL/'; echo "sasl.mechanism=PLAIN"
  jaas alice alice-secret; } > "$work/sasl-ssl.properties"
{ echo "security.protocol=SASL_PLAINTEXT"; echo "sasl.mechanism=PLAIN"; jaas alice wrong; } > "$work/sasl-wrong.properties"
produce "127.0.0.1:$sasl" "$work/sasl.properties" sasl 10 || fail "Java producer over SASL_PLAINTEXT: $(tail -3 "$work/produce.out")"
produce "127.0.0.1:$sasl_ssl" "$work/sasl-ssl.properties" sasl 10 || fail "Java producer over SASL_SSL: $(tail -3 "$work/produce.out")"
[ "$(consume "127.0.0.1:$sasl_ssl" "$work/sasl-ssl.properties" sasl 20 | wc -l)" -eq 20 ] || fail "Java consumer over SASL_SSL"
echo "Java client as alice: 10 records over SASL_PLAINTEXT, 10 over SASL_SSL, 20 read back over SASL_SSL"
produce "127.0.0.1:$sasl" "$work/sasl-wrong.properties" sasl 1 || true
grep -q "SASL authentication failed.*wrong password for alice" "$work/sasl.log" || fail "a wrong password is not logged"
[ "$(consume "127.0.0.1:$sasl" "$work/sasl.properties" sasl 21 | wc -l)" -eq 20 ] || fail "a wrong password wrote something"
echo "the Java client with a wrong password: refused, logged with its address, nothing written"
ci/.venv/bin/python - "$sasl" "$sasl_ssl" "$work/ca.pem" <<'PY' || fail "Python clients over SASL"
import socket, struct, sys
from kafka import KafkaConsumer, KafkaProducer
from confluent_kafka import Producer
sasl, sasl_ssl, ca = sys.argv[1], sys.argv[2], sys.argv[3]
auth = dict(sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret")
p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{sasl_ssl}", security_protocol="SASL_SSL", ssl_cafile=ca, acks="all", **auth)
for i in range(10):
    p.send("sasl-py", f"kafka-python-{i}".encode())
p.flush(); p.close()
conf = {"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
c = Producer(conf)
for i in range(10):
    c.produce("sasl-py", f"confluent-{i}".encode())
assert c.flush(20) == 0, "confluent-kafka: records not delivered"
k = KafkaConsumer("sasl-py", bootstrap_servers=f"127.0.0.1:{sasl}", security_protocol="SASL_PLAINTEXT",
                  auto_offset_reset="earliest", consumer_timeout_ms=10000, **auth)
seen = sorted(m.value.decode() for m in k)
k.close()
assert len(seen) == 20, f"kafka-python read {len(seen)} records"
print("kafka-python (SASL_SSL) and confluent-kafka (SASL_PLAINTEXT) as alice: 20 records, read back")
# A wrong password: the client is told authentication failed (SASL_AUTHENTICATION_FAILED).
def refusals(**changed):
    # What librdkafka reports of a client's connection (error_cb, served by poll).
    errors = []
    client = Producer({**conf, **changed, "error_cb": lambda e: errors.append(str(e)), "log_level": 0})
    for _ in range(20):
        client.poll(0.25)
        if errors:
            break
    return errors
errors = refusals(**{"sasl.password": "wrong"})
assert any("Authentication failed" in e for e in errors), errors
print("confluent-kafka with a wrong password: told Authentication failed")
# An unserved mechanism: refused, and the client is told which are served.
# An unserved mechanism (SaslHandshake v1 by hand): UNSUPPORTED_SASL_MECHANISM and the list.
s = socket.create_connection(("127.0.0.1", int(sasl)), timeout=5)
body = struct.pack(">hhih", 17, 1, 9, 2) + b"ci" + struct.pack(">h", 6) + b"GSSAPI"
s.sendall(struct.pack(">i", len(body)) + body)
size, correlation, code, count = struct.unpack(">iihi", s.recv(14))
mechanisms = []
for _ in range(count):
    (n,) = struct.unpack(">h", s.recv(2))
    mechanisms.append(s.recv(n).decode())
assert (correlation, code) == (9, 33), (correlation, code)
assert mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], mechanisms
print("GSSAPI (not served): UNSUPPORTED_SASL_MECHANISM, with", ",".join(mechanisms))
# Before authentication: ApiVersions is answered, Metadata closes the connection.
def raw(key, version):
    s = socket.create_connection(("127.0.0.1", int(sasl)), timeout=5)
    header = struct.pack(">hhih", key, version, 7, 2) + b"ci"
    s.sendall(struct.pack(">i", len(header) + (4 if key == 3 else 0)) + header + (struct.pack(">i", -1) if key == 3 else b""))
    data = s.recv(8)
    return len(data) == 8 and struct.unpack(">i", data[4:8])[0] == 7
assert raw(18, 0), "ApiVersions before authentication is not answered"
assert not raw(3, 1), "Metadata before authentication was answered"
print("before authentication: ApiVersions answered, Metadata closes the connection")
PY

echo "== SCRAM-SHA-256 and SCRAM-SHA-512, credentials on the volume (at ${SECONDS} s)"
tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$plain" --alter --entity-type users \
  --entity-name bob --add-config 'SCRAM-SHA-256=[iterations=8192,password=bob-secret],SCRAM-SHA-512=[password=bob-512]' \
  > "$work/configs.out" 2>&1 || fail "kafka-configs could not set bob's SCRAM credentials: $(tail -3 "$work/configs.out")"
# A second broker on the same volume: it reads bob's credentials when bob authenticates.
plain1=$(free_port); sasl1=$(free_port)
"$KAAS" serve --data-dir "$work/sasl" --broker-id 1 \
  --set "listeners=PLAINTEXT://127.0.0.1:$plain1,SASL_PLAINTEXT://127.0.0.1:$sasl1" \
  --set sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512 --set broker.ownership.settle.ms=1000 \
  > /dev/null 2> "$work/sasl1.log" &
pids+=($!)
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$sasl1) 2>/dev/null && break; sleep 0.1; done
scram_login='org.apache.kafka.common.security.scram.ScramLoginModule required'
{ echo "security.protocol=SASL_PLAINTEXT"; echo "sasl.mechanism=SCRAM-SHA-512"
  echo "sasl.jaas.config=$scram_login username=\"bob\" password=\"bob-512\";"; } > "$work/scram.properties"
produce "127.0.0.1:$sasl" "$work/scram.properties" scram 10 || fail "Java producer with SCRAM-SHA-512: $(tail -3 "$work/produce.out")"
[ "$(consume "127.0.0.1:$sasl" "$work/scram.properties" scram 10 | wc -l)" -eq 10 ] || fail "Java consumer with SCRAM-SHA-512"
echo "kafka-configs set bob's credentials; the Java client as bob (SCRAM-SHA-512): 10 records produced and read"
ci/.venv/bin/python - "$sasl" "$sasl1" <<'PY' || fail "Python clients with SCRAM"
import sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion
from kafka import KafkaConsumer
sasl, sasl1 = sys.argv[1], sys.argv[2]
def conf(port, mechanism="SCRAM-SHA-256", password="bob-secret"):
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": "bob", "sasl.password": password}
def refusals(c):
    errors = []
    client = Producer({**c, "error_cb": lambda e: errors.append(str(e)), "log_level": 0})
    for _ in range(20):
        client.poll(0.25)
        if errors:
            break
    return errors
admin = AdminClient(conf(sasl))
described = admin.describe_user_scram_credentials(["bob"])["bob"].result()
infos = sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos)
assert infos == [(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)], infos
print("confluent-kafka describes bob: SCRAM-SHA-256 8192 iterations, SCRAM-SHA-512 4096")
for port in (sasl, sasl1):
    p = Producer(conf(port))
    for i in range(5):
        p.produce("scram", f"confluent-{port}-{i}".encode())
    assert p.flush(20) == 0, f"confluent-kafka (SCRAM-SHA-256) at port {port}: records not delivered"
print("confluent-kafka as bob (SCRAM-SHA-256) on both brokers: 10 records")
k = KafkaConsumer("scram", bootstrap_servers=f"127.0.0.1:{sasl1}", security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob", sasl_plain_password="bob-secret",
                  auto_offset_reset="earliest", consumer_timeout_ms=10000)
n = len(list(k)); k.close()
assert n == 20, f"kafka-python read {n} of 20"
print("kafka-python as bob (SCRAM-SHA-256) on the second broker: 20 records read")
assert any("Authentication failed" in e for e in refusals(conf(sasl1, password="guess"))), "a wrong SCRAM password"
admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)])["bob"].result()
assert any("Authentication failed" in e for e in refusals(conf(sasl1, "SCRAM-SHA-512", "bob-512"))), "a deleted credential"
p = Producer(conf(sasl1))
p.produce("scram", b"after"); assert p.flush(20) == 0, "SCRAM-SHA-256 after deleting SCRAM-SHA-512"
print("a wrong SCRAM password and a deleted credential (at the other broker, at once) refused; the other credential still serves")
PY
kill "${pids[@]}"; wait 2> /dev/null || true; pids=()

echo "== three brokers on SASL_SSL alone: the brokers' own calls over TLS too (KAAS-BROKER) (at ${SECONDS} s)"
login_plain='org.apache.kafka.common.security.plain.PlainLoginModule required'
bootstrap=
metrics=()
for id in 0 1 2; do
  port=$(free_port); metrics+=("$(free_port)")
  "$KAAS" serve --data-dir "$work/sasl-ssl-only" --broker-id "$id" --metrics "127.0.0.1:${metrics[$id]}" \
    --set "listeners=SASL_SSL://127.0.0.1:$port" --set "ssl.keystore.location=$work/keystore.pem" \
    --set "ssl.truststore.location=$work/ca.pem" --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512 \
    --set "listener.name.sasl_ssl.plain.sasl.jaas.config=$login_plain user_alice=\"alice-secret\";" \
    --set group.initial.rebalance.delay.ms=0 --set broker.session.timeout.ms=3000 \
    --set broker.heartbeat.interval.ms=500 --set broker.lease.drift.margin.ms=500 \
    --set broker.ownership.settle.ms=1000 > /dev/null 2> "$work/sasl-ssl-only-$id.log" &
  pids+=($!)
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  bootstrap="${bootstrap:+$bootstrap,}127.0.0.1:$port"
done
sleep 4
# kaas admin over SASL_SSL (PLAIN, as alice) gives carol a SCRAM-SHA-512 credential, which the
# clients below use over SASL_SSL.
{ echo "security.protocol=SASL_SSL"; echo "ssl.truststore.type=PEM"; echo "ssl.truststore.location=$work/ca.pem"
  echo "sasl.mechanism=PLAIN"; echo "sasl.jaas.config=$login_plain username=\"alice\" password=\"alice-secret\";"; } \
  > "$work/admin-sasl-ssl.properties"
echo carol-512 | "$KAAS" admin --bootstrap-server "${bootstrap%%,*}" --command-config "$work/admin-sasl-ssl.properties" \
  users set carol --mechanism SCRAM-SHA-512 > "$work/admin.out" 2>&1 || fail "kaas admin users set over SASL_SSL: $(cat "$work/admin.out")"
{ echo "security.protocol=SASL_SSL"; echo "ssl.truststore.type=PEM"; echo "ssl.truststore.location=$work/ca.pem"
  echo "sasl.mechanism=SCRAM-SHA-512"; echo "sasl.jaas.config=$scram_login username=\"carol\" password=\"carol-512\";"; } \
  > "$work/scram-ssl.properties"
produce "$bootstrap" "$work/scram-ssl.properties" scram-ssl 10 || fail "Java producer, SCRAM-SHA-512 over SASL_SSL: $(tail -3 "$work/produce.out")"
[ "$(consume "$bootstrap" "$work/scram-ssl.properties" scram-ssl 10 | wc -l)" -eq 10 ] || fail "Java consumer, SCRAM-SHA-512 over SASL_SSL"
echo "kaas admin (PLAIN over SASL_SSL) set carol's SCRAM-SHA-512 credential; the Java client as carol over SASL_SSL: 10 records produced and read"
ci/.venv/bin/python - "$bootstrap" "$work/ca.pem" <<'PY' || fail "transactions across brokers on SASL_SSL alone"
import sys
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, ca = sys.argv[1:3]
conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "carol-512"}
admin = AdminClient(conf)
for f in admin.create_topics([NewTopic("tls-txn", 6, 1)]).values():
    f.result()
p = Producer({**conf, "transactional.id": "tls-txn"})
p.init_transactions(30)
for n in range(3):
    p.begin_transaction()
    for i in range(60):
        p.produce("tls-txn", f"{n}-{i}".encode(), partition=i % 6)
    p.commit_transaction(30)
c = Consumer({**conf, "group.id": "tls-txn", "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
c.assign([TopicPartition("tls-txn", i) for i in range(6)])
seen = set()
import time
deadline = time.time() + 30
while len(seen) < 180 and time.time() < deadline:
    m = c.poll(0.5)
    if m is not None and m.error() is None:
        seen.add(m.value())
assert len(seen) == 180, f"read_committed saw {len(seen)} of 180"
leaders = {p.leader for p in admin.list_topics("tls-txn").topics["tls-txn"].partitions.values()}
assert len(leaders) > 1, f"the partitions all on one broker: {leaders}"
from kafka import KafkaConsumer
k = KafkaConsumer("tls-txn", bootstrap_servers=bootstrap.split(","), security_protocol="SASL_SSL", ssl_cafile=ca,
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="carol", sasl_plain_password="carol-512",
                  isolation_level="read_committed", auto_offset_reset="earliest", consumer_timeout_ms=10000)
n = len({m.value for m in k}); k.close()
assert n == 180, f"kafka-python (SCRAM-SHA-512 over SASL_SSL) read {n} of 180"
print(f"3 brokers on SASL_SSL alone, confluent-kafka and kafka-python as carol (SCRAM-SHA-512): 3 transactions over partitions on brokers {sorted(leaders)}, committed and read once each")
PY
if grep -q "cannot authenticate to a peer" "$work"/sasl-ssl-only-*.log; then fail "a peer call could not authenticate"; fi
# The markers of partitions on other brokers went by the peers' calls (counted only once a
# call is past TLS and KAAS-BROKER), not only by the marker queue on the volume.
calls=0
for port in "${metrics[@]}"; do
  n=$(curl -s "127.0.0.1:$port/metrics" | sed -nE 's/^kaas_requests_total\{api="WriteTxnMarkers"\} ([0-9]+)$/\1/p')
  calls=$((calls + ${n:-0}))
done
[ "$calls" -gt 0 ] || fail "no WriteTxnMarkers call between the brokers over SASL_SSL"
echo "brokers' WriteTxnMarkers calls to each other over TLS and KAAS-BROKER: $calls"

echo "security.sh: passed"
