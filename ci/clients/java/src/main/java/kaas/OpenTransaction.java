package kaas;

import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional producer that dies inside its transaction: it writes one record to
 * partition 0 of the topic, then halts without committing, leaving the transaction open for
 * kafka-transactions to find and abort. Args: bootstrap, topic, transactional id.
 */
public final class OpenTransaction {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[2]);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 600_000);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        producer.beginTransaction();
        long offset = producer.send(new ProducerRecord<>(args[1], 0, null, "left-open")).get().offset();
        System.out.println(offset);
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
