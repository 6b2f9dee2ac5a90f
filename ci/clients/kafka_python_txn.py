"""kafka-python 3.x transactions against kaas: a consume-transform-produce copier committing
its input offsets with send_offsets_to_transaction (TxnOffsetCommit v3 with group metadata),
an aborted transaction, and read_committed readers of the output and of the offsets."""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

bootstrap = sys.argv[1]
src, dst, group, count = "kp-txn-in", "kp-txn-out", "kp-txn-copier", 100

admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 2, 1)])
plain = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
for i in range(count):
    plain.send(src, value=f"in{i}".encode(), partition=i % 2)
plain.flush()
plain.close()

producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-copier")
producer.init_transactions()
consumer = KafkaConsumer(src, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, isolation_level="read_committed")
copied, deadline = 0, time.time() + 60
while copied < count and time.time() < deadline:
    batch = consumer.poll(timeout_ms=500, max_records=20)
    if not batch:
        continue
    producer.begin_transaction()
    offsets = {}
    for tp, records in batch.items():
        for r in records:
            producer.send(dst, value=b"copy-" + r.value, partition=tp.partition)
        offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
    producer.send_offsets_to_transaction(offsets, consumer.group_metadata()
                                         if hasattr(consumer, "group_metadata") else group)
    producer.commit_transaction()
    copied += sum(len(r) for r in batch.values())
assert copied == count, copied

# An aborted transaction leaves nothing visible.
producer.begin_transaction()
for i in range(10):
    producer.send(dst, value=f"aborted{i}".encode(), partition=i % 2)
producer.flush()
producer.abort_transaction()
producer.close()

reader = KafkaConsumer(dst, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       enable_auto_commit=False, isolation_level="read_committed", consumer_timeout_ms=3000)
values = sorted(m.value.decode() for m in reader)
assert values == sorted(f"copy-in{i}" for i in range(count)), values[:5]
committed = sum(consumer.committed(TopicPartition(src, p)) or 0 for p in range(2))
assert committed == count, committed
consumer.close()
print(f"kafka-python transactions: {count} copied exactly once, offsets committed in the transactions, abort invisible")
