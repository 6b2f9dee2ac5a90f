"""aiokafka against kaas: acks=all produce with lz4, a group consumer that commits, and the
committed offsets read back."""
import asyncio
import sys

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

bootstrap = sys.argv[1]
topic, group, count = "aiokafka", "aiokafka-group", 300


async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    await admin.close()

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip",
                                enable_idempotence=True)
    await producer.start()
    acked = set()
    for i in range(count):
        meta = await producer.send_and_wait(topic, f"m{i}".encode(), key=str(i).encode())
        acked.add((meta.partition, meta.offset))
    await producer.stop()
    assert len(acked) == count

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    seen = set()
    async def drain():
        while len(seen) < count:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for r in records:
                    seen.add((r.partition, r.offset))
    await asyncio.wait_for(drain(), 60)
    assert seen == acked
    await consumer.commit()
    total = 0
    for p in range(2):
        total += await consumer.committed(TopicPartition(topic, p)) or 0
    assert total == count, total
    await consumer.stop()
    print(f"aiokafka: {count} produced, consumed and committed")


asyncio.run(main())
