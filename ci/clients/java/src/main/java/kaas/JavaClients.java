package kaas;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client (kafka-clients 4.x, the reference implementation) against kaas: the admin
 * client (topics, configs, groups, offsets, DeleteRecords, transactions, producers), the
 * idempotent producer with acks=all and compression, a classic group consumer with static
 * membership reading read_committed, and a transactional copier with sendOffsetsToTransaction
 * whose zombie is fenced. Exits non-zero at the first thing that is not as Apache Kafka does it.
 */
public final class JavaClients {
    private static String bootstrap;
    private static final String RUN = Long.toHexString(System.nanoTime());

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        try (Admin admin = Admin.create(props())) {
            String plain = "java-plain-" + RUN;
            String in = "java-in-" + RUN;
            String out = "java-out-" + RUN;
            topics(admin, plain, in, out);
            produceAndConsume(admin, plain);
            deleteRecords(admin, plain);
            copyInTransactions(admin, in, out);
            zombieFenced(admin, out);
        }
        System.out.println("java client " + org.apache.kafka.common.utils.internals.AppInfoParser.getVersion() + ": all checks passed");
    }

    static Properties props() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "kaas-java-check");
        return p;
    }

    static KafkaProducer<String, String> producer(Map<String, Object> extra) {
        Properties p = props();
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(Map<String, Object> extra) {
        Properties p = props();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void topics(Admin admin, String... names) throws Exception {
        List<NewTopic> wanted = new ArrayList<>();
        for (String name : names) {
            wanted.add(new NewTopic(name, 3, (short) 1));
        }
        admin.createTopics(wanted).all().get();
        Map<String, TopicDescription> described = admin.describeTopics(List.of(names)).allTopicNames().get();
        for (String name : names) {
            check(described.get(name).partitions().size() == 3, name + ": 3 partitions described");
            check(described.get(name).topicId() != null, name + ": a topic id");
        }
        check(admin.listTopics().names().get().containsAll(List.of(names)), "listTopics names the new topics");
        try {
            admin.createTopics(List.of(new NewTopic(names[0], 3, (short) 1))).all().get();
            check(false, "a second create of " + names[0] + " fails");
        } catch (ExecutionException e) {
            check(e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException,
                "a second create is TOPIC_ALREADY_EXISTS: " + e.getCause());
        }
        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, names[0]);
        AlterConfigOp set = new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET);
        admin.incrementalAlterConfigs(Map.of(topic, List.of(set))).all().get();
        Config config = admin.describeConfigs(List.of(topic)).all().get().get(topic);
        check("3600000".equals(config.get("retention.ms").value()), "retention.ms reads back as set: " + config.get("retention.ms"));
        check(config.get("cleanup.policy") != null, "describeConfigs lists the defaults too");
    }

    static void produceAndConsume(Admin admin, String topic) throws Exception {
        int count = 300;
        // Idempotent by default in 4.x; two codecs, so both paths meet the broker.
        for (String codec : List.of("zstd", "lz4")) {
            try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                    ProducerConfig.LINGER_MS_CONFIG, 5))) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < count / 2; i++) {
                    sent.add(p.send(new ProducerRecord<>(topic, i % 3, "k" + i, codec + "-" + i)));
                }
                for (Future<RecordMetadata> f : sent) {
                    check(f.get().offset() >= 0, "an acked offset");
                }
            }
        }
        String group = "java-static-" + RUN;
        Set<String> seen = new TreeSet<>();
        Map<String, Object> extra = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "member-1", ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        try (KafkaConsumer<String, String> c = consumer(extra)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    seen.add(r.value());
                }
                c.commitSync();
            }
            check(seen.size() == count, "read every record once: " + seen.size());
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            check(d.members().size() == 1, "one member described: " + d.members());
            check(d.members().iterator().next().groupInstanceId().orElse("").equals("member-1"),
                "the static member keeps its instance id: " + d.members());
        }
        Map<TopicPartition, OffsetAndMetadata> committed =
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
        check(total == count, "committed offsets add up to the records read: " + committed);
        check(admin.listGroups().all().get().stream().anyMatch(g -> g.groupId().equals(group)), "listGroups names the group");
        // A static member that comes back with its instance id resumes from the commit.
        try (KafkaConsumer<String, String> c = consumer(extra)) {
            c.subscribe(List.of(topic));
            ConsumerRecords<String, String> more = c.poll(Duration.ofSeconds(3));
            check(more.isEmpty(), "nothing read again after the commit: " + more.count());
        }
        // A static member stays in the group after close (as on Apache) until removed by its
        // instance id (LeaveGroup v3+), which the admin client does for every member.
        admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions()).all().get();
        admin.deleteConsumerGroups(List.of(group)).all().get();
        check(admin.listGroups().all().get().stream().noneMatch(g -> g.groupId().equals(group)), "the group is deleted");
    }

    static void deleteRecords(Admin admin, String topic) throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset();
        check(end == 100, "partition 0 holds 100 records: " + end);
        long lowWatermark = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(40))).lowWatermarks().get(tp).get().lowWatermark();
        check(lowWatermark == 40, "DeleteRecords answers the new low watermark: " + lowWatermark);
        long earliest = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp).offset();
        check(earliest == 40, "earliest offset after DeleteRecords: " + earliest);
    }

    static void copyInTransactions(Admin admin, String in, String out) throws Exception {
        int count = 120;
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            for (int i = 0; i < count; i++) {
                p.send(new ProducerRecord<>(in, i % 3, null, "in" + i));
            }
        }
        String group = "java-copier-" + RUN;
        String transactionalId = "java-copier-" + RUN;
        int copied = 0;
        int ends = 0;
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group));
             KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId))) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long deadline = System.currentTimeMillis() + 60_000;
            while (copied < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>(out, r.partition(), null, "copy-" + r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
                ends++;
                copied += records.count();
            }
            check(copied == count, "copied every input record: " + copied);
            // An aborted transaction leaves nothing visible.
            p.beginTransaction();
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(out, i % 3, null, "aborted" + i));
            }
            p.flush();
            p.abortTransaction();
            ends++;

            Collection<TransactionListing> listed = admin.listTransactions().all().get();
            check(listed.stream().anyMatch(t -> t.transactionalId().equals(transactionalId)), "listTransactions names the copier");
            TransactionDescription d = admin.describeTransactions(List.of(transactionalId)).all().get().get(transactionalId);
            check(d.producerId() >= 0 && d.topicPartitions().isEmpty(), "the copier's transaction is complete: " + d);
            // Transactions v2 (KIP-890 part 2), which the client takes when the broker finalizes
            // transaction.version 2: every commit and abort bumps the epoch.
            FinalizedVersionRange tv = admin.describeFeatures().featureMetadata().get().finalizedFeatures().get("transaction.version");
            int expectedEpoch = tv != null && tv.maxVersionLevel() >= 2 ? ends : 0;
            check(d.producerEpoch() == expectedEpoch,
                "the epoch after " + ends + " ends under transaction.version " + tv + ": " + d.producerEpoch());
            TopicPartition tp = new TopicPartition(out, 0);
            PartitionProducerState producers = admin.describeProducers(List.of(tp)).all().get().get(tp);
            check(producers.activeProducers().stream().anyMatch(s -> s.producerId() == d.producerId()),
                "describeProducers lists the copier on " + tp + ": " + producers.activeProducers());
        }
        List<String> values = readCommitted(out, count);
        List<String> expected = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            expected.add("copy-in" + i);
        }
        check(new TreeSet<>(values).equals(new TreeSet<>(expected)) && values.size() == count,
            "read_committed sees every copy once and no aborted record: " + values.size());
        Map<TopicPartition, OffsetAndMetadata> committed =
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        check(committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum() == count,
            "the offsets committed in the transactions: " + committed);
    }

    static void zombieFenced(Admin admin, String out) throws Exception {
        String transactionalId = "java-zombie-" + RUN;
        Map<String, Object> txn = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        try (KafkaProducer<String, String> zombie = producer(txn)) {
            zombie.initTransactions();
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(out, 1, null, "zombie-write")).get();
            try (KafkaProducer<String, String> successor = producer(txn)) {
                successor.initTransactions();
                successor.beginTransaction();
                successor.send(new ProducerRecord<>(out, 1, null, "successor-write")).get();
                successor.commitTransaction();
            }
            try {
                zombie.send(new ProducerRecord<>(out, 1, null, "zombie-late")).get();
                zombie.commitTransaction();
                check(false, "the zombie's commit is refused");
            } catch (ProducerFencedException | InvalidProducerEpochException e) {
                // As Apache answers a fenced producer.
            } catch (ExecutionException | KafkaException e) {
                Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
                check(cause instanceof ProducerFencedException || cause instanceof InvalidProducerEpochException
                    || cause.getCause() instanceof ProducerFencedException, "the zombie is fenced, not something else: " + e);
            }
        }
        List<String> values = readCommitted(out, -1);
        check(values.contains("successor-write"), "the successor's commit is visible");
        check(!values.contains("zombie-write") && !values.contains("zombie-late"), "nothing of the zombie is visible");
    }

    /** Every read_committed value of `topic` (waiting for `expect` of them, or 3 s of quiet). */
    static List<String> readCommitted(String topic, int expect) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1), new TopicPartition(topic, 2));
            c.assign(tps);
            c.seekToBeginning(tps);
            long quietSince = System.currentTimeMillis();
            while (System.currentTimeMillis() - quietSince < 3000 && (expect < 0 || values.size() < expect)) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(300));
                if (!records.isEmpty()) {
                    quietSince = System.currentTimeMillis();
                }
                for (ConsumerRecord<String, String> r : records) {
                    values.add(r.value());
                }
            }
        }
        return values;
    }
}
