package kaas;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java consumer on the consumer group protocol of KIP-848 (group.protocol=consumer)
 * against kaas: one member takes every partition, a second joins and the partitions are split
 * between them with none owned twice, both consume and commit, the admin client describes the
 * group as a consumer group, and when one leaves the other gets everything back. Every record
 * is consumed, and the committed offsets cover the topic. Exits non-zero otherwise.
 *
 *   java -cp CP kaas.ConsumerProtocol BOOTSTRAP [remote-assignor]
 */
public final class ConsumerProtocol {
    static final int PARTITIONS = 4;
    static final int RECORDS = 200;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String assignor = args.length > 1 ? args[1] : "uniform";
        String run = Long.toHexString(System.nanoTime());
        String topic = "java-kip848-" + run;
        String group = "java-kip848-" + run;
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
            Properties pp = (Properties) common.clone();
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
                for (int i = 0; i < RECORDS; i++) {
                    p.send(new ProducerRecord<>(topic, i % PARTITIONS, null, "v" + i));
                }
            }
            Properties cp = (Properties) common.clone();
            cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            cp.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
            Set<String> seen = new HashSet<>();
            try (KafkaConsumer<String, String> a = new KafkaConsumer<>(cp)) {
                a.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 60_000;
                while (a.assignment().size() < PARTITIONS) {
                    check(System.currentTimeMillis() < deadline, "the first member gets every partition: " + a.assignment());
                    consume(a, seen);
                }
                try (KafkaConsumer<String, String> b = new KafkaConsumer<>(cp)) {
                    b.subscribe(List.of(topic));
                    deadline = System.currentTimeMillis() + 90_000;
                    while (true) {
                        consume(a, seen);
                        consume(b, seen);
                        Set<TopicPartition> both = new HashSet<>(a.assignment());
                        both.retainAll(b.assignment());
                        check(both.isEmpty(), "no partition is assigned to both: " + both);
                        if (!a.assignment().isEmpty() && !b.assignment().isEmpty()
                            && a.assignment().size() + b.assignment().size() == PARTITIONS) {
                            break;
                        }
                        check(System.currentTimeMillis() < deadline,
                            "the partitions are split: " + a.assignment() + " / " + b.assignment());
                    }
                    ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                    check(d.type() == GroupType.CONSUMER, "a consumer group: " + d);
                    check(d.members().size() == 2, "two members: " + d.members());
                    check(d.groupState() == GroupState.STABLE || d.groupState() == GroupState.RECONCILING,
                        "stable or reconciling: " + d.groupState());
                    while (!(atEnd(a) && atEnd(b))) {
                        check(System.currentTimeMillis() < deadline, "both read to the end");
                        consume(a, seen);
                        consume(b, seen);
                    }
                    a.commitSync();
                    b.commitSync();
                }
                // b left: a gets everything back.
                deadline = System.currentTimeMillis() + 60_000;
                while (a.assignment().size() < PARTITIONS || !atEnd(a)) {
                    check(System.currentTimeMillis() < deadline, "the partitions come back: " + a.assignment());
                    consume(a, seen);
                }
                a.commitSync();
            }
            check(seen.size() == RECORDS, "every record consumed: " + seen.size() + " of " + RECORDS);
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long sum = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            check(sum == RECORDS, "the committed offsets cover the topic: " + committed.keySet() + " sum " + sum);
            boolean listed = admin.listGroups().all().get().stream()
                .anyMatch(g -> g.groupId().equals(group) && g.type().orElse(null) == GroupType.CONSUMER);
            check(listed, "listGroups names it a consumer group");
            admin.deleteConsumerGroups(List.of(group)).all().get();
            check(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().isEmpty(),
                "deleted with its offsets");
        }
        System.out.println("java consumer, group.protocol=consumer (" + assignor + "): split, consumed and committed "
            + RECORDS + " records, every partition back after a leave");
    }

    static void consume(KafkaConsumer<String, String> c, Set<String> seen) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
            seen.add(r.value());
        }
    }

    /** Whether the consumer's position is at the end of every partition it is assigned. */
    static boolean atEnd(KafkaConsumer<String, String> c) {
        Set<TopicPartition> assigned = c.assignment();
        Map<TopicPartition, Long> ends = c.endOffsets(assigned);
        return assigned.stream().allMatch(tp -> c.position(tp) >= ends.get(tp));
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
