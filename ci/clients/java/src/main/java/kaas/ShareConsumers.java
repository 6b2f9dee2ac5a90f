package kaas;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's share consumer (KIP-932, KafkaShareConsumer) against kaas:
 *
 * 1. implicit acknowledgement, three consumers of one group sharing a topic of three
 *    partitions: every record is delivered, and a record delivered twice was delivered again
 *    (its delivery count says so), never handed to two consumers at once;
 * 2. explicit acknowledgement: records released come back with a higher delivery count,
 *    records rejected and accepted never come back;
 * 3. a consumer closed holding records it acquired and did not acknowledge: another member of
 *    the group gets them, delivered again.
 *
 * Exits non-zero otherwise.
 *
 *   java -cp CP kaas.ShareConsumers BOOTSTRAP
 */
public final class ShareConsumers {
    static final int PARTITIONS = 3;
    static final int RECORDS = 300;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String run = Long.toHexString(System.nanoTime());
        implicitSharing(bootstrap, "share-implicit-" + run);
        explicitAcknowledgements(bootstrap, "share-explicit-" + run);
        closedWithRecords(bootstrap, "share-closed-" + run);
        System.out.println("share consumers: ok");
    }

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    /** A topic with RECORDS values v0..v(N-1), and a group that starts at its beginning. */
    static void prepare(String bootstrap, String name) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(name, PARTITIONS, (short) 1))).all().get();
            ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, name);
            AlterConfigOp earliest =
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(group, List.of(earliest))).all().get();
        }
        Properties pp = common(bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < RECORDS; i++) {
                p.send(new ProducerRecord<>(name, i % PARTITIONS, null, "v" + i));
            }
        }
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, String mode) {
        Properties cp = common(bootstrap);
        cp.put("group.id", group);
        cp.put("share.acknowledgement.mode", mode);
        cp.put("max.poll.records", "20");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(cp);
        c.subscribe(List.of(group));
        return c;
    }

    static short count(ConsumerRecord<String, String> r) {
        return r.deliveryCount().orElse((short) 1);
    }

    static void implicitSharing(String bootstrap, String name) throws Exception {
        prepare(bootstrap, name);
        Map<String, Short> seen = new ConcurrentHashMap<>();
        List<String> doubled = java.util.Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean done = new AtomicBoolean(false);
        List<Thread> threads = new ArrayList<>();
        Map<Integer, Integer> perConsumer = new ConcurrentHashMap<>();
        for (int i = 0; i < 3; i++) {
            final int id = i;
            Thread t = new Thread(() -> {
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, name, "implicit")) {
                    while (!done.get()) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                            perConsumer.merge(id, 1, Integer::sum);
                            Short before = seen.put(r.value(), count(r));
                            // Seen before: only as a delivery again, never as a second holder.
                            if (before != null && count(r) <= before) {
                                doubled.add(r.value() + " delivered with count " + count(r) + " after " + before);
                            }
                        }
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        long deadline = System.currentTimeMillis() + 90_000;
        while (seen.size() < RECORDS && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        done.set(true);
        for (Thread t : threads) {
            t.join();
        }
        check(seen.size() == RECORDS, "implicit: every record delivered: " + seen.size() + " of " + RECORDS);
        check(doubled.isEmpty(), "implicit: no record held by two consumers at once: " + doubled);
        System.out.println("implicit: " + RECORDS + " records over consumers " + perConsumer);
    }

    static void explicitAcknowledgements(String bootstrap, String name) throws Exception {
        prepare(bootstrap, name);
        Set<String> accepted = new HashSet<>();
        Set<String> rejected = new HashSet<>();
        Map<String, Short> released = new HashMap<>();
        long deadline = System.currentTimeMillis() + 90_000;
        try (KafkaShareConsumer<String, String> c = consumer(bootstrap, name, "explicit")) {
            while (accepted.size() + rejected.size() < RECORDS) {
                check(System.currentTimeMillis() < deadline, "explicit: done in time: " + accepted.size()
                    + " accepted, " + rejected.size() + " rejected");
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    int v = Integer.parseInt(r.value().substring(1));
                    check(!accepted.contains(r.value()), "explicit: an accepted record comes back: " + r.value());
                    check(!rejected.contains(r.value()), "explicit: a rejected record comes back: " + r.value());
                    if (v % 10 == 0) {
                        c.acknowledge(r, AcknowledgeType.REJECT);
                        rejected.add(r.value());
                    } else if (v % 10 == 1 && !released.containsKey(r.value())) {
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                        released.put(r.value(), count(r));
                    } else {
                        if (released.containsKey(r.value())) {
                            check(count(r) > released.get(r.value()), "explicit: a released record is delivered again: "
                                + r.value() + " count " + count(r));
                        }
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted.add(r.value());
                    }
                }
                if (!records.isEmpty()) {
                    c.commitSync();
                }
            }
        }
        check(rejected.size() == RECORDS / 10, "explicit: every tenth record rejected: " + rejected.size());
        check(released.size() == RECORDS / 10, "explicit: a tenth released once: " + released.size());
        System.out.println("explicit: " + accepted.size() + " accepted (" + released.size() + " after a release), "
            + rejected.size() + " rejected");
    }

    static void closedWithRecords(String bootstrap, String name) throws Exception {
        prepare(bootstrap, name);
        Set<String> held = new HashSet<>();
        try (KafkaShareConsumer<String, String> a = consumer(bootstrap, name, "explicit")) {
            long deadline = System.currentTimeMillis() + 60_000;
            while (held.isEmpty()) {
                check(System.currentTimeMillis() < deadline, "closed: the first consumer gets records");
                for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(200))) {
                    held.add(r.value());
                }
            }
            // Closed without acknowledging anything it holds.
        }
        Set<String> again = new HashSet<>();
        try (KafkaShareConsumer<String, String> b = consumer(bootstrap, name, "implicit")) {
            long deadline = System.currentTimeMillis() + 90_000;
            while (!again.containsAll(held)) {
                check(System.currentTimeMillis() < deadline, "closed: what it held is delivered again: " + again.size()
                    + " of " + held.size());
                for (ConsumerRecord<String, String> r : b.poll(Duration.ofMillis(200))) {
                    if (held.contains(r.value())) {
                        check(count(r) >= 2, "closed: delivered again with a count of 2 or more: " + r.value());
                        again.add(r.value());
                    }
                }
            }
        }
        System.out.println("closed: the " + held.size() + " records it held went to another member");
    }

    static void check(boolean condition, String what) {
        if (!condition) {
            System.err.println("FAILED: " + what);
            System.exit(1);
        }
    }
}
