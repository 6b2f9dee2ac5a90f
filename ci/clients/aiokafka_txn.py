"""aiokafka transactions against kaas (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit and EndTxn at their v0/v1 forms): a transactional copier with
send_offsets_to_transaction, an aborted transaction, and a read_committed reader."""
import asyncio
import sys

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

bootstrap = sys.argv[1]
src, dst, group, count = "aio-txn-in", "aio-txn-out", "aio-txn-copier", 100


async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 2, 1)])
    await admin.close()
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await plain.start()
    for i in range(count):
        await plain.send_and_wait(src, f"in{i}".encode(), partition=i % 2)
    await plain.stop()

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-copier")
    await producer.start()
    consumer = AIOKafkaConsumer(src, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    copied = 0
    while copied < count:
        batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500, max_records=20), 30)
        if not batch:
            continue
        async with producer.transaction():
            offsets = {}
            for tp, records in batch.items():
                for r in records:
                    await producer.send(dst, b"copy-" + r.value, partition=tp.partition)
                offsets[tp] = records[-1].offset + 1
            await producer.send_offsets_to_transaction(offsets, group)
        copied += sum(len(r) for r in batch.values())
    await producer.begin_transaction()
    for i in range(10):
        await producer.send(dst, f"aborted{i}".encode(), partition=i % 2)
    await producer.abort_transaction()
    await producer.stop()

    committed = 0
    for p in range(2):
        committed += await consumer.committed(TopicPartition(src, p)) or 0
    assert committed == count, committed
    await consumer.stop()

    reader = AIOKafkaConsumer(dst, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                              enable_auto_commit=False, isolation_level="read_committed")
    await reader.start()
    values = []
    while True:
        batch = await reader.getmany(timeout_ms=2000)
        if not batch:
            break
        values += [r.value.decode() for records in batch.values() for r in records]
    await reader.stop()
    assert sorted(values) == sorted(f"copy-in{i}" for i in range(count)), values[:5]
    print(f"aiokafka transactions: {count} copied exactly once, offsets committed in the transactions, abort invisible")


asyncio.run(main())
