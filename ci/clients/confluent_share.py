"""confluent-kafka-python's ShareConsumer (librdkafka's share consumer, ShareFetch v1) against kaas:

1. implicit acknowledgement, three consumers of one group on a topic of three partitions:
   every record delivered, none held by two consumers at once (a record seen twice was
   delivered again, with a higher delivery count);
2. explicit acknowledgement: released records come back with a higher delivery count,
   accepted and rejected ones never come back;
3. a consumer closed holding records it did not acknowledge: another member gets them again;
4. a consumer killed (SIGKILL) holding records: its connections close, and another member of
   the partition gets them again well before their acquisition locks (30 s) run out.
"""
import os
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

bootstrap = sys.argv[1]
PARTITIONS, RECORDS = 3, 300
run = f"{time.time_ns():x}"


def check(ok, what):
    if not ok:
        print(f"FAILED: {what}")
        sys.exit(1)


def prepare(name, partitions=PARTITIONS):
    """A topic with RECORDS values v0..v(N-1), and a share group that starts at its beginning."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    earliest = ConfigEntry("share.auto.offset.reset", "earliest",
                           incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, name, incremental_configs=[earliest])]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(name, value=f"v{i}".encode(), partition=i % partitions)
    check(producer.flush(30) == 0, f"{name}: every record produced")


def consumer(group, mode):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": mode})
    c.subscribe([group])
    return c


def records(c, timeout=0.2):
    out = []
    for m in c.poll(timeout):
        if m.error() is None:
            out.append(m)
    return out


def count(m):
    return m.delivery_count() or 1


def implicit_sharing(name):
    prepare(name)
    seen, doubled, per_consumer = {}, [], {}
    lock, done = threading.Lock(), threading.Event()

    def run_consumer(i):
        c = consumer(name, "implicit")
        try:
            while not done.is_set():
                for m in records(c):
                    v = m.value().decode()
                    with lock:
                        per_consumer[i] = per_consumer.get(i, 0) + 1
                        before = seen.get(v)
                        seen[v] = count(m)
                        if before is not None and count(m) <= before:
                            doubled.append(f"{v} delivered with count {count(m)} after {before}")
        finally:
            c.close()

    threads = [threading.Thread(target=run_consumer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.time() + 90
    while len(seen) < RECORDS and time.time() < deadline:
        time.sleep(0.1)
    done.set()
    for t in threads:
        t.join()
    check(len(seen) == RECORDS, f"implicit: every record delivered: {len(seen)} of {RECORDS}")
    check(not doubled, f"implicit: no record held by two consumers at once: {doubled}")
    print(f"implicit: {RECORDS} records over consumers {per_consumer}")


def explicit_acknowledgements(name):
    prepare(name)
    accepted, rejected, released = set(), set(), {}
    deadline = time.time() + 90
    c = consumer(name, "explicit")
    while len(accepted) + len(rejected) < RECORDS:
        check(time.time() < deadline,
              f"explicit: done in time: {len(accepted)} accepted, {len(rejected)} rejected")
        batch = records(c)
        for m in batch:
            v = m.value().decode()
            n = int(v[1:])
            check(v not in accepted, f"explicit: an accepted record comes back: {v}")
            check(v not in rejected, f"explicit: a rejected record comes back: {v}")
            if n % 10 == 0:
                c.acknowledge(m, AcknowledgeType.REJECT)
                rejected.add(v)
            elif n % 10 == 1 and v not in released:
                c.acknowledge(m, AcknowledgeType.RELEASE)
                released[v] = count(m)
            else:
                if v in released:
                    check(count(m) > released[v],
                          f"explicit: a released record is delivered again: {v} count {count(m)}")
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                accepted.add(v)
        if batch:
            for tp, err in c.commit_sync(30).items():
                check(err is None, f"explicit: acknowledgement of {tp} answered {err}")
    c.close()
    check(len(rejected) == RECORDS // 10, f"explicit: every tenth record rejected: {len(rejected)}")
    check(len(released) == RECORDS // 10, f"explicit: a tenth released once: {len(released)}")
    print(f"explicit: {len(accepted)} accepted ({len(released)} after a release), "
          f"{len(rejected)} rejected")


def closed_with_records(name):
    prepare(name)
    held = set()
    a = consumer(name, "explicit")
    deadline = time.time() + 60
    while not held:
        check(time.time() < deadline, "closed: the first consumer gets records")
        held = {m.value().decode() for m in records(a)}
    a.close()  # without acknowledging anything it holds
    again = set()
    b = consumer(name, "implicit")
    deadline = time.time() + 90
    while not held <= again:
        check(time.time() < deadline,
              f"closed: what it held is delivered again: {len(again & held)} of {len(held)}")
        for m in records(b):
            v = m.value().decode()
            if v in held:
                check(count(m) >= 2, f"closed: delivered again with a count of 2 or more: {v}")
            again.add(v)
    b.close()
    print(f"closed: {len(held)} records held by a closed consumer delivered again")


def killed_with_records(name):
    # One partition: the killed member stays in the group until its session times out (45 s),
    # and the assignor gives a lone partition to every member, so the other member shares it.
    prepare(name, partitions=1)
    # The child acquires records, says which, and waits to be killed.
    child = subprocess.Popen([sys.executable, __file__, bootstrap, "--hold", name],
                             stdout=subprocess.PIPE, text=True)
    held = set(child.stdout.readline().split())
    check(held, "killed: the child consumer got records")
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    killed_at = time.time()
    again = set()
    b = consumer(name, "implicit")
    while not held <= again:
        check(time.time() < killed_at + 20,
              f"killed: what it held is delivered again before the locks expire: "
              f"{len(again & held)} of {len(held)}")
        again |= {m.value().decode() for m in records(b)}
    b.close()
    print(f"killed: {len(held)} records held by a killed consumer delivered again after "
          f"{time.time() - killed_at:.1f} s")


if len(sys.argv) > 3 and sys.argv[2] == "--hold":
    c = consumer(sys.argv[3], "explicit")
    while True:
        got = [m.value().decode() for m in records(c)]
        if got:
            print(" ".join(got), flush=True)
            time.sleep(600)

implicit_sharing(f"ck-share-implicit-{run}")
explicit_acknowledgements(f"ck-share-explicit-{run}")
closed_with_records(f"ck-share-closed-{run}")
killed_with_records(f"ck-share-killed-{run}")
print("confluent-kafka share consumers: ok")
