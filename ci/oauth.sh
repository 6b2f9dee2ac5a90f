#!/usr/bin/env bash
# OAUTHBEARER and re-authentication (KIP-255, KIP-768, KIP-368) with real clients, on one broker
# with two SASL_PLAINTEXT listeners and connections.max.reauth.ms=3000:
# - SECURED checks signed tokens against a key set (a file: JWKS, audience and issuer
#   expected): the Java client, given a token file by Kafka's OAuthBearerLoginCallbackHandler,
#   produces and consumes; a token signed with another key is refused and writes nothing;
# - UNSECURED takes unsigned tokens, as Apache's unsecured validator does, because its login
#   module is Apache's unsecured one: confluent-kafka with librdkafka's unsecured tokens
#   produces and consumes;
# - both clients keep their connections past several session lifetimes by authenticating
#   again (the broker logs each renewal), and no session ends unrenewed.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/security-env.sh

# An HS256 key set and tokens, made with Python's standard library.
python3 - "$work" <<'PY'
import base64, hashlib, hmac, json, sys, time
work = sys.argv[1]
b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
secret, other = b"kaas-ci-oauth-secret-of-32-bytes!", b"somebody-else-s-secret-32-bytes!!"
json.dump({"keys": [{"kty": "oct", "kid": "ci", "alg": "HS256", "k": b64(secret)}]}, open(f"{work}/jwks.json", "w"))
def token(key, sub):
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "ci"}).encode())
    now = int(time.time())
    claims = b64(json.dumps({"sub": sub, "aud": "kafka", "iss": "https://idp.kaas.test", "iat": now,
                             "exp": now + 3600, "scope": "kafka"}).encode())
    signature = b64(hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest())
    return f"{header}.{claims}.{signature}"
open(f"{work}/alice.jwt", "w").write(token(secret, "alice"))
open(f"{work}/forged.jwt", "w").write(token(other, "alice"))
PY

plain=$(free_port); secured=$(free_port); unsecured=$(free_port)
RUST_LOG=info,kaas_net::sasl=debug "$KAAS" serve --data-dir "$work/data" \
  --set "listeners=PLAINTEXT://127.0.0.1:$plain,SECURED://127.0.0.1:$secured,UNSECURED://127.0.0.1:$unsecured" \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURED:SASL_PLAINTEXT,UNSECURED:SASL_PLAINTEXT" \
  --set listener.name.secured.sasl.enabled.mechanisms=OAUTHBEARER \
  --set "listener.name.secured.sasl.oauthbearer.jwks.endpoint.url=file:$work/jwks.json" \
  --set listener.name.secured.sasl.oauthbearer.expected.audience=kafka \
  --set listener.name.secured.sasl.oauthbearer.expected.issuer=https://idp.kaas.test \
  --set listener.name.unsecured.sasl.enabled.mechanisms=OAUTHBEARER \
  --set 'listener.name.unsecured.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";' \
  --set connections.max.reauth.ms=3000 --set group.initial.rebalance.delay.ms=0 > /dev/null 2> "$work/broker.log" &
pids+=($!)
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$unsecured) 2>/dev/null && break; sleep 0.1; done

client_config() { # client_config TOKEN_FILE
  echo "security.protocol=SASL_PLAINTEXT"
  echo "sasl.mechanism=OAUTHBEARER"
  echo "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
  echo "sasl.oauthbearer.token.endpoint.url=file://$1"
  echo "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
}
client_config "$work/alice.jwt" > "$work/alice.properties"
client_config "$work/forged.jwt" > "$work/forged.properties"
java_tool() { timeout 90 java -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="file://$work/alice.jwt,file://$work/forged.jwt" -cp "$cp" "$@"; }

echo "== signed tokens (SECURED): the Java client, past several session lifetimes"
# 80 records at 10 a second: the producer's connection outlives two dozen 3 s sessions.
java_tool org.apache.kafka.tools.VerifiableProducer --bootstrap-server "127.0.0.1:$secured" --topic oauth \
  --max-messages 80 --throughput 10 --producer.config "$work/alice.properties" > "$work/produce.out" 2>&1 \
  || fail "the Java producer with a signed token: $(tail -3 "$work/produce.out")"
sent=$(grep -c '"name":"producer_send_success"' "$work/produce.out" || true)
[ "$sent" -eq 80 ] || fail "the Java producer sent $sent of 80: $(grep -m3 error "$work/produce.out")"
read=$(java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "127.0.0.1:$secured" --topic oauth \
  --from-beginning --max-messages 80 --timeout-ms 20000 --consumer.config "$work/alice.properties" 2> /dev/null \
  | grep -cx '[0-9]\+' || true)
[ "$read" -eq 80 ] || fail "the Java consumer read $read of 80"
echo "the Java client as alice (signed token): 80 records produced over 8 s, 80 read back"
java_tool org.apache.kafka.tools.VerifiableProducer --bootstrap-server "127.0.0.1:$secured" --topic oauth \
  --max-messages 3 --producer.config "$work/forged.properties" > "$work/forged.out" 2>&1 || true
if grep -q '"name":"producer_send_success"' "$work/forged.out"; then fail "a forged token wrote"; fi
grep -q "SaslAuthenticationException\|Authentication failed" "$work/forged.out" \
  || fail "a forged token was not refused: $(tail -3 "$work/forged.out")"
grep -q "SASL authentication failed.*OAUTHBEARER" "$work/broker.log" || fail "the forged token's refusal is not logged"
echo "a token signed with another key: refused (logged), nothing written"

echo "== unsecured tokens (UNSECURED): confluent-kafka, past several session lifetimes"
ci/.venv/bin/python - "$unsecured" <<'PY' || fail "confluent-kafka with unsecured tokens"
import sys, time
from confluent_kafka import Consumer, Producer
conf = {"bootstrap.servers": f"127.0.0.1:{sys.argv[1]}", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice lifeSeconds=3600"}
p = Producer(conf)
c = Consumer({**conf, "group.id": "oauth-g", "auto.offset.reset": "earliest"})
c.subscribe(["oauth-py"])
seen, deadline, sent = set(), time.time() + 30, 0
start = time.time()
while time.time() < deadline and (len(seen) < 80 or time.time() - start < 10):
    if sent < 80:
        p.produce("oauth-py", str(sent).encode()); sent += 1
    p.poll(0)
    m = c.poll(0.1)
    if m is not None and not m.error():
        seen.add(int(m.value()))
assert p.flush(20) == 0
c.close()
assert seen == set(range(80)), f"read {len(seen)} of 80"
print(f"confluent-kafka as alice (unsecured token): 80 records produced and consumed over {time.time() - start:.0f} s")
PY
renewals=$(grep -c "renewed=true" "$work/broker.log" || true)
[ "$renewals" -ge 4 ] || fail "the clients did not authenticate again ($renewals renewals)"
if grep -q "was not renewed" "$work/broker.log"; then fail "a session ended unrenewed: $(grep -m1 "was not renewed" "$work/broker.log")"; fi
echo "re-authentication: $renewals sessions renewed on their connections, none ended unrenewed"
echo "oauth.sh: passed"
