"""librdkafka 2.16.0's send_offsets_to_transaction hang, shown against Apache Kafka and kaas.

A transactional copier on confluent-kafka 2.16.1 (librdkafka 2.16.0) copies a topic while its
only broker restarts twice. After the restarts, librdkafka's re-bootstrap decommissions the
handle of the group coordinator's broker, and send_offsets_to_transaction hangs past its own
timeout (librdkafka issue 5511, fixed by pull request 5512, not released). Apache Kafka
triggers it the same way; `metadata.recovery.strategy=none` avoids it.

    python3 -m venv /tmp/ck && /tmp/ck/bin/pip install confluent-kafka==2.16.1
    cargo build --release -p kaas-server
    /tmp/ck/bin/python ci/librdkafka/send_offsets_hang.py apache|kaas [--workaround]

Prints one line, `hang` or `copied`, and exits 0 when the outcome is the expected one: a hang
without the workaround, every record copied exactly once with it.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RECORDS = 2000
CALL_TIMEOUT_S = 10
# A call still running this long after its own timeout has hung.
HUNG_AFTER_S = CALL_TIMEOUT_S + 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    def __init__(self, kind, data):
        self.kind, self.data, self.port, self.proc = kind, data, free_port(), None
        if kind == "apache":
            # kafka.sh listens on port and port + 1 (the controller).
            while True:
                self.port = free_port()
                try:
                    socket.create_server(("127.0.0.1", self.port + 1)).close()
                    break
                except OSError:
                    continue

    def start(self):
        if self.kind == "apache":
            cmd = [os.path.join(ROOT, "ci/apache/kafka.sh"), str(self.port), self.data]
        else:
            kaas = os.environ.get("KAAS", os.path.join(ROOT, "target/release/kaas"))
            cmd = [kaas, "serve", "--data-dir", self.data, "--listen", f"127.0.0.1:{self.port}",
                   "--set", "group.initial.rebalance.delay.ms=0"]
        log = open(self.data + ".out", "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.kind} did not start")

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=60)

    def bootstrap(self):
        return f"127.0.0.1:{self.port}"


class Copier(threading.Thread):
    """Consume, produce and commit the input offsets in one transaction, batch by batch."""

    def __init__(self, bootstrap, extra):
        super().__init__(daemon=True)
        self.bootstrap, self.extra = bootstrap, extra
        self.committed = 0
        self.call = None  # (name, started) of the call in progress
        self.error = None

    def timed(self, name, fn, *args):
        self.call = (name, time.time())
        try:
            return fn(*args)
        finally:
            self.call = None

    def retrying(self, name, fn, *args):
        """True once the call succeeds; False if the transaction must be aborted."""
        while True:
            try:
                self.timed(name, fn, *args)
                return True
            except KafkaException as e:
                error = e.args[0]
                if error.retriable():
                    continue
                if error.txn_requires_abort():
                    return False
                raise

    def run(self):
        try:
            common = {"bootstrap.servers": self.bootstrap, "log_level": 2, **self.extra}
            consumer = Consumer({**common, "group.id": "copier", "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False, "isolation.level": "read_committed"})
            consumer.subscribe(["in"])
            producer = Producer({**common, "transactional.id": "copier", "linger.ms": 5})
            producer.init_transactions(60)
            while self.committed < RECORDS:
                # Small transactions, so that the copy is still under way after both restarts.
                messages = [m for m in consumer.consume(10, timeout=1) if m.error() is None]
                if not messages:
                    continue
                producer.begin_transaction()
                for m in messages:
                    producer.produce("out", m.value(), m.key())
                positions = consumer.position(consumer.assignment())
                # librdkafka's documented handling: retry what is retriable, abort and rewind
                # what requires an abort, give up on the rest (fatal).
                done = self.retrying("send_offsets_to_transaction", producer.send_offsets_to_transaction,
                                     positions, consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
                done = done and self.retrying("commit_transaction", producer.commit_transaction, CALL_TIMEOUT_S)
                if done:
                    self.committed += len(messages)
                else:
                    self.retrying("abort_transaction", producer.abort_transaction, CALL_TIMEOUT_S)
                    committed = consumer.committed(consumer.assignment(), timeout=CALL_TIMEOUT_S)
                    for tp in committed:
                        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                time.sleep(0.1)
        except KafkaException as e:
            self.error = e

    def hung(self):
        call = self.call
        return call is not None and time.time() - call[1] > HUNG_AFTER_S


def read_committed(bootstrap):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("out", 0)])
    values, idle = [], time.time()
    while time.time() - idle < 5:
        for m in consumer.consume(500, timeout=1):
            if m.error() is None:
                values.append(m.value())
                idle = time.time()
    consumer.close()
    return values


def main():
    kind, workaround = sys.argv[1], "--workaround" in sys.argv
    data = tempfile.mkdtemp(prefix=f"rdkafka-hang-{kind}-")
    broker = Broker(kind, os.path.join(data, "broker"))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("in", "out")]).values():
            f.result(60)
        producer = Producer({"bootstrap.servers": broker.bootstrap(), "enable.idempotence": True})
        for i in range(RECORDS):
            producer.produce("in", str(i).encode())
            producer.poll(0)
        producer.flush(60)
        extra = {"metadata.recovery.strategy": "none"} if workaround else {}
        copier = Copier(broker.bootstrap(), extra)
        copier.start()
        for restart in range(2):
            time.sleep(3)
            broker.stop()
            time.sleep(2)
            broker.start()
        deadline = time.time() + 180
        while copier.is_alive() and not copier.hung() and time.time() < deadline:
            time.sleep(0.5)
        if copier.hung():
            print(f"hang: {copier.call[0]} still running {time.time() - copier.call[1]:.0f} s after it began "
                  f"(its timeout {CALL_TIMEOUT_S} s), {copier.committed} of {RECORDS} copied")
            return 0 if not workaround else 1
        if copier.error is not None or copier.is_alive():
            print(f"failed: {copier.error or 'no progress'}, {copier.committed} of {RECORDS} copied")
            return 1
        values = read_committed(broker.bootstrap())
        ok = sorted(values) == sorted(str(i).encode() for i in range(RECORDS))
        print(f"copied: {len(values)} records read_committed, each input once: {ok}")
        return 0 if ok and workaround else 1
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
