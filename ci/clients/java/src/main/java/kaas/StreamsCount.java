package kaas;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.function.Function;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Kafka Streams on kaas, exactly once (ci/streams.sh): input records (value: a number) are
 * grouped by word ("w" + number % WORDS, through a repartition topic) and counted in a state
 * store backed by a compacted changelog, every update sent to `counts`, under exactly_once_v2
 * with the store's cache off, so each input record makes exactly one update.
 *
 * <ul>
 *   <li>{@code run <bootstrap> <state dir>}: one instance, until SIGTERM (closed) or SIGKILL;
 *   <li>{@code produce <bootstrap> <first> <count> <per second>}: input records first..first+count-1;
 *   <li>{@code check <bootstrap>}: every word's updates in `counts` (read_committed) are exactly
 *       1, 2, ..., the number of its records in `input`: exit 0 when so, 2 while they are a
 *       prefix of it (still processing), 1 for anything else (an update lost or repeated);
 *   <li>{@code changelog <bootstrap>}: the store's changelog, read_committed: records and keys.
 * </ul>
 */
public class StreamsCount {
    static final String APP = "kaas-streams";
    static final long WORDS = 20;
    static final String CHANGELOG = APP + "-counts-store-changelog";

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "run" -> run(args[1], args[2]);
            case "produce" -> produce(args[1], Long.parseLong(args[2]), Long.parseLong(args[3]), Long.parseLong(args[4]));
            case "check" -> System.exit(check(args[1]));
            case "changelog" -> changelog(args[1]);
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    static String word(String value) {
        return "w" + (Long.parseLong(value) % WORDS);
    }

    static void run(String bootstrap, String stateDir) throws Exception {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream("input", Consumed.with(Serdes.String(), Serdes.String()))
            .groupBy((key, value) -> word(value), Grouped.with("by-word", Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts-store").withCachingDisabled())
            .toStream()
            .to("counts", Produced.with(Serdes.String(), Serdes.Long()));
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, APP);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        // A killed instance's partitions move on in seconds, not in the default 45.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch closed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + before + " -> " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                closed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("stream thread failed, replaced: " + e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            closed.countDown();
        }));
        streams.start();
        closed.await();
    }

    static void produce(String bootstrap, long first, long count, long perSecond) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            long start = System.nanoTime();
            long[] failed = {0};
            for (long i = first; i < first + count; i++) {
                producer.send(new ProducerRecord<>("input", "in-" + i, Long.toString(i)), (m, e) -> {
                    if (e != null) {
                        synchronized (failed) {
                            failed[0]++;
                        }
                    }
                });
                long due = start + (i - first) * 1_000_000_000L / perSecond;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            producer.flush();
            System.out.println("produced " + count + " input records from " + first + ", " + failed[0] + " failed");
        }
    }

    /** Every record of a topic, read_committed, to its end; values as text. */
    static <V> List<ConsumerRecord<String, String>> readAll(String bootstrap, String topic, Deserializer<V> values,
            Function<V, String> text) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        try (KafkaConsumer<String, V> consumer = new KafkaConsumer<>(props, new StringDeserializer(), values)) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                .map(p -> new TopicPartition(topic, p.partition())).collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + 60_000;
            while (partitions.stream().anyMatch(p -> consumer.position(p) < end.get(p))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(topic + ": not read to its end in 60 s");
                }
                for (ConsumerRecord<String, V> r : consumer.poll(Duration.ofMillis(500))) {
                    out.add(new ConsumerRecord<>(r.topic(), r.partition(), r.offset(), r.key(), text.apply(r.value())));
                }
            }
        }
        return out;
    }

    static int check(String bootstrap) {
        Map<String, Long> expected = new TreeMap<>();
        for (ConsumerRecord<String, String> r : readAll(bootstrap, "input", new StringDeserializer(), v -> v)) {
            expected.merge(word(r.value()), 1L, Long::sum);
        }
        Map<String, List<Long>> updates = new TreeMap<>();
        for (ConsumerRecord<String, String> r : readAll(bootstrap, "counts", new LongDeserializer(), v -> Long.toString(v))) {
            updates.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(Long.parseLong(r.value()));
        }
        boolean complete = true;
        for (Map.Entry<String, List<Long>> e : updates.entrySet()) {
            if (!expected.containsKey(e.getKey())) {
                System.out.println("FAIL: " + e.getKey() + " counted but never in the input");
                return 1;
            }
        }
        long total = 0;
        for (Map.Entry<String, Long> e : expected.entrySet()) {
            List<Long> got = updates.getOrDefault(e.getKey(), List.of());
            total += e.getValue();
            for (int i = 0; i < got.size(); i++) {
                if (got.get(i) != i + 1) {
                    System.out.println("FAIL: " + e.getKey() + "'s updates are not 1, 2, 3, ...: at " + i + " came " + got.get(i)
                        + " (" + got.size() + " updates, " + e.getValue() + " input records)");
                    return 1;
                }
            }
            if (got.size() > e.getValue()) {
                System.out.println("FAIL: " + e.getKey() + " counted " + got.size() + " times, " + e.getValue() + " input records");
                return 1;
            }
            complete &= got.size() == e.getValue();
        }
        System.out.println((complete ? "complete: " : "so far: ") + updates.values().stream().mapToLong(List::size).sum()
            + " updates for " + total + " input records, " + expected.size() + " words");
        return complete ? 0 : 2;
    }

    static void changelog(String bootstrap) {
        Map<String, Integer> keys = new HashMap<>();
        List<ConsumerRecord<String, String>> all = readAll(bootstrap, CHANGELOG, new ByteArrayDeserializer(), v -> "");
        for (ConsumerRecord<String, String> r : all) {
            keys.merge(r.key(), 1, Integer::sum);
        }
        System.out.println("changelog " + all.size() + " records " + keys.size() + " keys");
    }
}
