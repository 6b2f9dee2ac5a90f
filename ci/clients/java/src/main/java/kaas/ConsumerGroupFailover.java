package kaas;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A KIP-848 consumer group outlives its coordinator: two Java consumers
 * (group.protocol=consumer) share a topic on a cluster of kaas brokers; once the group is
 * stable, the broker coordinating it is killed (SIGKILL, by its pid), and the group, carried on
 * by another broker from the volume, must be the same group: the same members at the same
 * member epochs with the same assignments, at the same group epoch (a group formed anew would
 * start again from epoch 1: a third member came and went first, so the epoch is past what two
 * joins reach), and the members go on consuming what is produced after the kill.
 *
 *   java -cp CP kaas.ConsumerGroupFailover BOOTSTRAP PID_OF_BROKER_0 PID_OF_BROKER_1 ...
 */
public final class ConsumerGroupFailover {
    static final int PARTITIONS = 4;
    static final int RECORDS = 200;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String run = Long.toHexString(System.nanoTime());
        String topic = "kip848-failover-" + run;
        String group = "kip848-failover-" + run;
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        Properties pp = (Properties) common.clone();
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Properties cp = (Properties) common.clone();
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Set<String> seen = new HashSet<>();
        try (Admin admin = Admin.create(common);
             KafkaProducer<String, String> producer = new KafkaProducer<>(pp);
             KafkaConsumer<String, String> a = new KafkaConsumer<>(cp);
             KafkaConsumer<String, String> b = new KafkaConsumer<>(cp)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
            produce(producer, topic, 0);
            a.subscribe(List.of(topic));
            b.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 90_000;
            while (a.assignment().size() + b.assignment().size() < PARTITIONS || a.assignment().isEmpty()
                    || b.assignment().isEmpty() || seen.size() < RECORDS) {
                check(System.currentTimeMillis() < deadline, "the two members share the topic and read it: "
                        + a.assignment() + " " + b.assignment() + ", " + seen.size() + " records");
                consume(a, seen);
                consume(b, seen);
            }
            // A third member comes and goes, so the group's epoch (4 by then) is one a group
            // formed anew by the two would not reach (2).
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
                c.subscribe(List.of(topic));
                deadline = System.currentTimeMillis() + 60_000;
                while (c.assignment().isEmpty()) {
                    check(System.currentTimeMillis() < deadline, "a third member is given a partition");
                    consume(a, seen);
                    consume(b, seen);
                    consume(c, seen);
                }
            }
            ConsumerGroupDescription before = stable(admin, group, a, b, seen, -1);
            check(before.groupEpoch().orElse(0) > 2, "a group epoch past 2: " + before.groupEpoch());
            int coordinator = before.coordinator().id();
            long pid = Long.parseLong(args[1 + coordinator]);
            System.out.println("group epoch " + before.groupEpoch().orElse(-1) + " on broker " + coordinator
                    + ": killing it (pid " + pid + ")");
            check(ProcessHandle.of(pid).map(ProcessHandle::destroyForcibly).orElse(false), "broker " + coordinator + " killed");
            produce(producer, topic, RECORDS);
            deadline = System.currentTimeMillis() + 90_000;
            while (seen.size() < 2 * RECORDS) {
                check(System.currentTimeMillis() < deadline, "the members read what came after the kill: " + seen.size());
                consume(a, seen);
                consume(b, seen);
            }
            ConsumerGroupDescription after = stable(admin, group, a, b, seen, coordinator);
            check(after.coordinator().id() != coordinator, "another broker coordinates the group");
            check(after.groupEpoch().equals(before.groupEpoch()),
                    "the same group epoch after the failover: " + before.groupEpoch() + " then " + after.groupEpoch());
            check(members(after).equals(members(before)),
                    "the same members, epochs and assignments: " + members(before) + " then " + members(after));
            System.out.println("KIP-848 group carried on through its coordinator's kill: group epoch "
                    + after.groupEpoch().orElse(-1) + ", members " + members(after).keySet() + " at their epochs, "
                    + seen.size() + " records read");
        }
    }

    /** Described once stable (every member at the group's epoch), polling the members meanwhile. */
    static ConsumerGroupDescription stable(Admin admin, String group, KafkaConsumer<String, String> a,
            KafkaConsumer<String, String> b, Set<String> seen, int notOn) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            consume(a, seen);
            consume(b, seen);
            try {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
                boolean settled = d.members().size() == 2 && d.coordinator().id() != notOn
                        && d.members().stream().allMatch(m -> m.memberEpoch().equals(d.groupEpoch()));
                if (settled) {
                    return d;
                }
            } catch (Exception e) {
                // The coordinator is moving: ask again.
            }
            check(System.currentTimeMillis() < deadline, "the group settles");
        }
    }

    static Map<String, String> members(ConsumerGroupDescription d) {
        Map<String, String> out = new TreeMap<>();
        for (MemberDescription m : d.members()) {
            out.put(m.consumerId(), m.memberEpoch().orElse(-1) + " " + new TreeMap<>(group(m)));
        }
        return out;
    }

    static Map<String, List<Integer>> group(MemberDescription m) {
        Map<String, List<Integer>> out = new TreeMap<>();
        m.assignment().topicPartitions().forEach(tp -> out.computeIfAbsent(tp.topic(), t -> new ArrayList<>()).add(tp.partition()));
        out.values().forEach(ps -> ps.sort(null));
        return out;
    }

    static void produce(KafkaProducer<String, String> p, String topic, int from) throws Exception {
        for (int i = from; i < from + RECORDS; i++) {
            p.send(new ProducerRecord<>(topic, i % PARTITIONS, null, "v" + i));
        }
        p.flush();
    }

    static void consume(KafkaConsumer<String, String> c, Set<String> seen) {
        try {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                seen.add(r.value());
            }
        } catch (org.apache.kafka.common.errors.RetriableException e) {
            // The coordinator or a partition is moving.
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.exit(1);
        }
    }
}
