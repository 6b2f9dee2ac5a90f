package kaas;

import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Fills a compacted topic for bench/compaction.sh: {@code records} keyed updates over
 * {@code keys} keys (key-0, key-1, ... in turn), each value {@code valueBytes} long, acks=all,
 * as fast as the broker takes them. Args: bootstrap, topic, records, keys, valueBytes. Prints
 * one line: records, MB and seconds.
 */
public final class CompactionLoad {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        long records = Long.parseLong(args[2]);
        long keys = Long.parseLong(args[3]);
        int valueBytes = Integer.parseInt(args[4]);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, 10);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, 256 * 1024);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        long start = System.nanoTime();
        long bytes = 0;
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(p)) {
            for (long i = 0; i < records; i++) {
                String key = "key-" + (i % keys);
                byte[] value = new byte[valueBytes];
                for (int b = 0; b < valueBytes; b += 8) {
                    value[b] = (byte) (i >>> (b % 64));
                }
                bytes += key.length() + valueBytes;
                producer.send(new ProducerRecord<>(topic, 0, key, value));
            }
            producer.flush();
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        System.out.printf("records=%d mb=%.1f seconds=%.1f%n", records, bytes / 1e6, seconds);
    }
}
