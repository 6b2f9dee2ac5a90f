package kaas;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Committed transactions per second for the side-by-side benchmark: PRODUCERS transactional
 * producers, each committing transactions of 10 records of 1 KiB, one after another, for
 * SECONDS. Prints one line: transactions, transactions per second, and the commit's latency
 * (commitTransaction: EndTxn until the markers are written) at p50 and p99.
 *
 *   java kaas.TxnBench BOOTSTRAP TOPIC PRODUCERS SECONDS
 */
public class TxnBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int producers = Integer.parseInt(args[2]);
        long seconds = Long.parseLong(args[3]);
        String run = Long.toHexString(System.nanoTime());
        List<Long> commits = Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        byte[] value = new byte[1024];
        for (int i = 0; i < producers; i++) {
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "txn-bench-" + run + "-" + i);
            p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
            KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
            producer.initTransactions();
            Thread t = new Thread(() -> {
                while (!stop.get()) {
                    producer.beginTransaction();
                    for (int r = 0; r < 10; r++) producer.send(new ProducerRecord<>(topic, value));
                    long start = System.nanoTime();
                    producer.commitTransaction();
                    commits.add(System.nanoTime() - start);
                }
                producer.close();
            });
            threads.add(t);
        }
        long begun = System.nanoTime();
        threads.forEach(Thread::start);
        Thread.sleep(seconds * 1000);
        stop.set(true);
        for (Thread t : threads) t.join();
        double elapsed = (System.nanoTime() - begun) / 1e9;
        List<Long> sorted = new ArrayList<>(commits);
        Collections.sort(sorted);
        double p50 = sorted.get(sorted.size() / 2) / 1e6;
        double p99 = sorted.get(Math.min(sorted.size() - 1, (int) (sorted.size() * 0.99))) / 1e6;
        System.out.printf("txns=%d txn_per_s=%.1f commit_p50_ms=%.2f commit_p99_ms=%.2f%n",
            sorted.size(), sorted.size() / elapsed, p50, p99);
    }
}
