package kaas;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Consume throughput and acknowledgement latency for the share-group benchmark: CONSUMERS
 * consumers of one new group read RECORDS records of TOPIC (written beforehand), each poll's
 * records acknowledged before the next poll, synchronously: in a share group (MODE share) by
 * explicit ACCEPTs and commitSync, in a classic group (MODE classic) by commitSync of the
 * offsets. Prints one line: records, records per second, and the acknowledgement's latency
 * (commitSync) at p50 and p99.
 *
 *   java kaas.ShareBench BOOTSTRAP TOPIC RECORDS MODE CONSUMERS
 */
public class ShareBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], mode = args[3];
        long records = Long.parseLong(args[2]);
        int consumers = Integer.parseInt(args[4]);
        String group = "bench-" + mode + "-" + Long.toHexString(System.nanoTime());
        if (mode.equals("share")) {
            Properties a = new Properties();
            a.put("bootstrap.servers", bootstrap);
            try (Admin admin = Admin.create(a)) {
                ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
                AlterConfigOp earliest = new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
                admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
            }
        }
        AtomicLong consumed = new AtomicLong();
        List<Long> acks = Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        long start = System.nanoTime();
        long deadline = System.currentTimeMillis() + 300_000;
        for (int i = 0; i < consumers; i++) {
            Thread t = new Thread(() -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", group);
                if (mode.equals("share")) {
                    p.put("share.acknowledgement.mode", "explicit");
                    try (KafkaShareConsumer<byte[], byte[]> c =
                             new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                        c.subscribe(List.of(topic));
                        while (consumed.get() < records && System.currentTimeMillis() < deadline) {
                            ConsumerRecords<byte[], byte[]> polled = c.poll(Duration.ofMillis(100));
                            if (polled.isEmpty()) {
                                continue;
                            }
                            polled.forEach(c::acknowledge);
                            long before = System.nanoTime();
                            c.commitSync();
                            acks.add(System.nanoTime() - before);
                            consumed.addAndGet(polled.count());
                        }
                    }
                } else {
                    p.put("auto.offset.reset", "earliest");
                    p.put("enable.auto.commit", "false");
                    try (KafkaConsumer<byte[], byte[]> c =
                             new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                        c.subscribe(List.of(topic));
                        while (consumed.get() < records && System.currentTimeMillis() < deadline) {
                            ConsumerRecords<byte[], byte[]> polled = c.poll(Duration.ofMillis(100));
                            if (polled.isEmpty()) {
                                continue;
                            }
                            long before = System.nanoTime();
                            c.commitSync();
                            acks.add(System.nanoTime() - before);
                            consumed.addAndGet(polled.count());
                        }
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        List<Long> sorted = new ArrayList<>(acks);
        Collections.sort(sorted);
        double p50 = sorted.isEmpty() ? 0 : sorted.get(sorted.size() / 2) / 1e6;
        double p99 = sorted.isEmpty() ? 0 : sorted.get(Math.min(sorted.size() - 1, sorted.size() * 99 / 100)) / 1e6;
        System.out.printf("records=%d records_per_s=%.0f ack_p50_ms=%.2f ack_p99_ms=%.2f acks=%d%n",
            consumed.get(), consumed.get() / seconds, p50, p99, sorted.size());
    }
}
