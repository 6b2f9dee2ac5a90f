"""kafka-python 3.x against kaas: admin create, compressed acks=all produce, a group consumer
that commits, and a second member of the group resuming from the commit."""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

bootstrap = sys.argv[1]
topic, group, count = "kafka-python", "kafka-python-group", 300

admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
assert topic in admin.list_topics(), admin.list_topics()

# kafka-python 3 turns idempotence on by default: InitProducerId, then sequenced batches.
producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
futures = [producer.send(topic, key=str(i).encode(), value=f"m{i}".encode()) for i in range(count)]
producer.flush()
acked = {(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)}
assert len(acked) == count, len(acked)

consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False)
seen = set()
deadline = time.time() + 60
while len(seen) < count and time.time() < deadline:
    for records in consumer.poll(timeout_ms=500).values():
        for r in records:
            seen.add((r.partition, r.offset))
assert seen == acked, f"consumed {len(seen)} of {count}"
consumer.commit()
committed = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in range(3))
assert committed == count, committed
consumer.close()

again = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False)
leftover = sum(len(v) for v in again.poll(timeout_ms=3000).values())
assert leftover == 0, f"{leftover} records redelivered after the commit"
again.close()
listed = admin.list_groups()
assert any(group in str(g) for g in listed), listed
described = admin.describe_groups([group])
assert "Empty" in str(described), described

# IncrementalAlterConfigs on a topic and on the broker, DescribeConfigs, DescribeCluster.
altered = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "123456"})])
assert altered == {"topic": {topic: "OK"}}, altered
altered = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0", configs={"log.retention.bytes": "1073741824"})])
assert altered == {"broker": {"0": "OK"}}, altered
# In a cluster another broker may answer: it takes a peer's change on within a heartbeat, as
# Apache's brokers take it from the metadata log, and in the same order: once the broker
# change shows, the topic change made before it shows too.
for attempt in range(50):
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    if described.get("retention.bytes", {}).get("config_source") == "DYNAMIC_BROKER_CONFIG":
        break
    time.sleep(0.1)
assert described["retention.ms"]["value"] == "123456", described
assert described["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG", described
assert described["retention.bytes"]["config_source"] == "DYNAMIC_BROKER_CONFIG", described
cluster = admin.describe_cluster()
assert cluster["controller_id"] == 0 and len(cluster["brokers"]) == len(bootstrap.split(",")), cluster
admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0", configs={"log.retention.bytes": ("DELETE", None)})])

# DescribeProducers (KIP-664): each partition remembers the one idempotent producer.
from kafka import TopicPartition
states = admin.describe_producers([TopicPartition(topic, p) for p in range(3)])
producers = {state.producer_id for ps in states.values() for state in ps.active_producers}
assert len(producers) == 1 and producers.pop() >= 1 << 40, states
assert all(s.producer_epoch == 0 and s.last_sequence >= 0 for ps in states.values() for s in ps.active_producers), states

# DeleteGroups: the empty group goes, with its committed offsets.
deleted = admin.delete_groups([group])
assert "Error" not in str(deleted), deleted
assert not any(group in str(g) for g in admin.list_groups()), admin.list_groups()
print(f"kafka-python: {count} produced idempotently, consumed and committed; configs altered and described; producers described")
