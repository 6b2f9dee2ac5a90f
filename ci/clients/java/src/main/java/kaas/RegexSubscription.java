package kaas;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java consumer subscribed by a regular expression the broker resolves (KIP-848's
 * SubscriptionPattern, group.protocol=consumer) against kaas: it reads every record of the two
 * topics the pattern matches and none of the one it does not, then the records of a matching
 * topic created while it runs. Exits non-zero otherwise.
 *
 *   java -cp CP kaas.RegexSubscription BOOTSTRAP
 */
public final class RegexSubscription {
    static final int RECORDS = 20;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String run = Long.toHexString(System.nanoTime());
        String prefix = "java-rx-" + run;
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(prefix + "-a", 2, (short) 1), new NewTopic(prefix + "-b", 1, (short) 1),
                new NewTopic(prefix + "-a-not", 1, (short) 1))).all().get();
            Properties pp = (Properties) common.clone();
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            Properties cp = (Properties) common.clone();
            cp.put(ConsumerConfig.GROUP_ID_CONFIG, prefix);
            cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            Set<String> seen = new HashSet<>();
            try (KafkaProducer<String, String> p = new KafkaProducer<>(pp);
                 KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
                for (String t : List.of("-a", "-b", "-a-not")) {
                    for (int i = 0; i < RECORDS; i++) {
                        p.send(new ProducerRecord<>(prefix + t, null, t + ":" + i));
                    }
                }
                p.flush();
                // RE2 syntax, the whole name: -a and -b, not -a-not.
                c.subscribe(new SubscriptionPattern(prefix + "-[ab]"));
                long deadline = System.currentTimeMillis() + 60_000;
                while (seen.size() < 2 * RECORDS) {
                    check(System.currentTimeMillis() < deadline, "both matching topics read: " + seen.size());
                    consume(c, seen);
                }
                admin.createTopics(List.of(new NewTopic(prefix + "-c", 1, (short) 1))).all().get();
                for (int i = 0; i < RECORDS; i++) {
                    p.send(new ProducerRecord<>(prefix + "-c", null, "-c:" + i));
                }
                p.flush();
                c.subscribe(new SubscriptionPattern(prefix + "-[abc]"));
                deadline = System.currentTimeMillis() + 60_000;
                while (seen.size() < 3 * RECORDS) {
                    check(System.currentTimeMillis() < deadline, "the topic created later read: " + seen.size());
                    consume(c, seen);
                }
                for (int i = 0; i < 5; i++) {
                    consume(c, seen);
                }
            }
            check(seen.stream().noneMatch(v -> v.startsWith("-a-not:")), "nothing of the topic the pattern does not match");
            check(seen.size() == 3 * RECORDS, "every matching record once: " + seen.size());
        }
        System.out.println("java consumer, SubscriptionPattern: " + 3 * RECORDS
            + " records of the topics the broker matched, a topic created later included, none of another");
    }

    static void consume(KafkaConsumer<String, String> c, Set<String> seen) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
            seen.add(r.value());
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
