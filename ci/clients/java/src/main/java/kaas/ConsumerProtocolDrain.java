package kaas;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Two Java consumers on KIP-848's consumer group protocol share a topic while ci/kills.sh kills
 * and restarts brokers: they rebalance as members come and go and the coordinator moves, and
 * commit after every poll. Done when every record was consumed (at least once) and the group's
 * committed offsets reach the end of every partition. Exits non-zero if that does not happen
 * within the deadline.
 *
 *   java -cp CP kaas.ConsumerProtocolDrain BOOTSTRAP TOPIC GROUP
 */
public final class ConsumerProtocolDrain {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        Set<String> seen = ConcurrentHashMap.newKeySet();
        AtomicBoolean done = new AtomicBoolean();
        List<Thread> members = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Thread t = new Thread(() -> member(common, topic, group, seen, done));
            t.start();
            members.add(t);
        }
        long deadline = System.currentTimeMillis() + 240_000;
        long expected = -1;
        int restarts = 0;
        try (Admin admin = Admin.create(common)) {
            while (System.currentTimeMillis() < deadline) {
                Thread.sleep(1000);
                try {
                    Map<TopicPartition, Long> ends = endOffsets(admin, topic);
                    expected = ends.values().stream().mapToLong(Long::longValue).sum();
                    Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                    boolean covered = ends.entrySet().stream().allMatch(e ->
                        committed.containsKey(e.getKey()) && committed.get(e.getKey()).offset() >= e.getValue());
                    if (covered && seen.size() >= expected) {
                        break;
                    }
                } catch (Exception e) {
                    restarts++; // a broker is down: ask again
                }
            }
        }
        done.set(true);
        for (Thread t : members) {
            t.join(30_000);
        }
        if (expected < 0 || seen.size() < expected) {
            System.err.println("FAILED: consumed " + seen.size() + " of " + expected + " records");
            System.exit(1);
        }
        System.out.println("java consumer, group.protocol=consumer: 2 members consumed and committed all " + expected
            + " records through broker kills (" + restarts + " admin calls refused on the way)");
    }

    static Map<TopicPartition, Long> endOffsets(Admin admin, String topic) throws Exception {
        int partitions = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        Map<TopicPartition, OffsetSpec> latest = new java.util.HashMap<>();
        for (int p = 0; p < partitions; p++) {
            latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
        }
        Map<TopicPartition, Long> ends = new java.util.HashMap<>();
        admin.listOffsets(latest).all().get().forEach((tp, info) -> ends.put(tp, info.offset()));
        return ends;
    }

    static void member(Properties common, String topic, String group, Set<String> seen, AtomicBoolean done) {
        Properties cp = (Properties) common.clone();
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "500");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(topic));
            while (!done.get()) {
                try {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) {
                        seen.add(r.partition() + ":" + r.offset());
                    }
                    c.commitSync(Duration.ofSeconds(10));
                } catch (KafkaException e) {
                    // A coordinator gone or moved, a commit fenced by a rebalance: go on polling.
                }
            }
        }
    }
}
