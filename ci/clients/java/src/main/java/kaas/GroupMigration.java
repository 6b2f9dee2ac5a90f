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
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A rolling upgrade of a live consumer group from the classic protocol to KIP-848's consumer
 * protocol and back, as Apache Kafka allows it (group.consumer.migration.policy=bidirectional),
 * with the Java consumer against kaas:
 * <ol>
 * <li>two classic members share the partitions;</li>
 * <li>one is replaced by a consumer-protocol member: the live group is upgraded, and the two
 * kinds of member share the partitions, none owned twice;</li>
 * <li>the other classic member is replaced too: the group is a consumer group of two;</li>
 * <li>a classic member joins, and the two consumer-protocol members leave: the group goes back
 * to being a classic group, and the classic member gets every partition.</li>
 * </ol>
 * Records are produced before each step; every one is consumed, and the committed offsets
 * cover the topic at the end. The classic members use the given assignment strategy (eager
 * range, or cooperative-sticky). Exits non-zero otherwise.
 *
 *   java -cp CP kaas.GroupMigration BOOTSTRAP range|cooperative-sticky
 */
public final class GroupMigration {
    static final int PARTITIONS = 4;
    static final int RECORDS_PER_STEP = 100;

    final String topic;
    final String group;
    final Properties common = new Properties();
    final String strategy;
    final Set<String> seen = new HashSet<>();
    int produced = 0;

    GroupMigration(String bootstrap, String strategy) {
        String run = Long.toHexString(System.nanoTime());
        this.topic = "java-migration-" + run;
        this.group = "java-migration-" + run;
        this.strategy = strategy;
        common.put("bootstrap.servers", bootstrap);
    }

    public static void main(String[] args) throws Exception {
        String strategy = args.length > 1 ? args[1] : "range";
        new GroupMigration(args[0], strategy).run();
    }

    void run() throws Exception {
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
            produce();
            KafkaConsumer<String, String> c1 = consumer("classic");
            KafkaConsumer<String, String> c2 = consumer("classic");
            settle(List.of(c1, c2), "two classic members");
            check(describe(admin).type() == GroupType.CLASSIC, "a classic group to start with");

            // Rolling upgrade, one member at a time.
            c1.close();
            produce();
            KafkaConsumer<String, String> n1 = consumer("consumer");
            settle(List.of(c2, n1), "a classic and a consumer-protocol member");
            ConsumerGroupDescription mixed = describe(admin);
            check(mixed.type() == GroupType.CONSUMER, "upgraded to a consumer group: " + mixed);
            check(mixed.members().size() == 2, "two members: " + mixed.members());
            long classic = mixed.members().stream().filter(m -> m.upgraded().equals(java.util.Optional.of(false))).count();
            check(classic == 1, "one member still classic: " + mixed.members());

            c2.close();
            produce();
            KafkaConsumer<String, String> n2 = consumer("consumer");
            settle(List.of(n1, n2), "two consumer-protocol members");
            ConsumerGroupDescription upgraded = describe(admin);
            check(upgraded.members().stream().allMatch(m -> m.upgraded().equals(java.util.Optional.of(true))),
                "every member on the consumer protocol: " + upgraded.members());

            // And back: a classic member joins, the consumer-protocol members leave.
            produce();
            KafkaConsumer<String, String> c3 = consumer("classic");
            settle(List.of(n1, n2, c3), "two consumer-protocol members and a classic one");
            n1.close();
            n2.close();
            produce();
            settle(List.of(c3), "the classic member alone");
            check(c3.assignment().size() == PARTITIONS, "the classic member has every partition: " + c3.assignment());
            ConsumerGroupDescription downgraded = describe(admin);
            check(downgraded.type() == GroupType.CLASSIC, "downgraded to a classic group: " + downgraded);
            c3.close();

            int total = produced;
            check(seen.size() == total, "every record consumed: " + seen.size() + " of " + total);
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long sum = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            check(sum == total, "the committed offsets cover the topic: " + committed + " sum " + sum);
        }
        System.out.println("java consumer, online migration (classic " + strategy + "): classic to consumer "
            + "protocol and back, " + produced + " records consumed and committed, no partition owned twice");
    }

    KafkaConsumer<String, String> consumer(String protocol) {
        Properties cp = (Properties) common.clone();
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            String assignor = strategy.equals("range")
                ? "org.apache.kafka.clients.consumer.RangeAssignor"
                : "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            cp.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
            cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        }
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20");
        KafkaConsumer<String, String> c = new KafkaConsumer<>(cp);
        c.subscribe(List.of(topic));
        return c;
    }

    void produce() throws Exception {
        Properties pp = (Properties) common.clone();
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < RECORDS_PER_STEP; i++) {
                p.send(new ProducerRecord<>(topic, produced % PARTITIONS, null, "v" + produced));
                produced++;
            }
        }
    }

    /**
     * Polls the members until every partition is owned by exactly one of them and each has read
     * its partitions to the end, then commits. No partition is ever owned by two at once.
     */
    void settle(List<KafkaConsumer<String, String>> members, String what) {
        long deadline = System.currentTimeMillis() + 120_000;
        while (true) {
            Set<TopicPartition> owned = new HashSet<>();
            int count = 0;
            for (KafkaConsumer<String, String> c : members) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    seen.add(r.value());
                }
                owned.addAll(c.assignment());
                count += c.assignment().size();
            }
            check(owned.size() == count, what + ": no partition owned twice: " + assignments(members));
            boolean split = count == PARTITIONS && members.stream().allMatch(c -> !c.assignment().isEmpty());
            if (split && members.stream().allMatch(GroupMigration::atEnd)) {
                break;
            }
            check(System.currentTimeMillis() < deadline, what + ": the partitions are split and read: "
                + assignments(members));
        }
        for (KafkaConsumer<String, String> c : members) {
            c.commitSync();
        }
    }

    ConsumerGroupDescription describe(Admin admin) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).all().get().get(group);
    }

    static List<Set<TopicPartition>> assignments(List<KafkaConsumer<String, String>> members) {
        List<Set<TopicPartition>> out = new ArrayList<>();
        members.forEach(c -> out.add(c.assignment()));
        return out;
    }

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
