//! The idempotent producer against librdkafka (`enable.idempotence=true`, acks=all, five
//! requests in flight): a numbered stream is produced while the broker is killed with SIGKILL
//! and restarted several times. librdkafka resends its in-flight batches with their original
//! sequence numbers after each restart; the broker must recognise the ones it had already
//! written, from producer state rebuilt from its snapshot and the log tail. Afterwards every
//! acked record is in the log exactly once, at its acked offset, in order per partition.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Kaas;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "idempotent";
const PARTITIONS: i32 = 3;
const RECORDS: usize = 30_000;
const KILLS: usize = 5;

fn payload(n: usize) -> String {
    format!("n{n:06}")
}

/// Every record of a partition up to its end, as (offset, payload).
fn read_partition(bootstrap: &str, partition: i32) -> Vec<(i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "idempotence-check")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let (_, high) = consumer.fetch_watermarks(TOPIC, partition, Duration::from_secs(10)).expect("watermarks");
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC, partition, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    while out.last().is_none_or(|(o, _)| o + 1 < high) && high > 0 {
        if let Some(message) = consumer.poll(Duration::from_secs(10)) {
            let message = message.expect("consume");
            let text = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            out.push((message.offset(), text));
        } else {
            panic!("partition {partition}: nothing more to read at {:?} of {high}", out.last());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idempotent_stream_survives_sigkill_restarts_exactly_once() {
    let kaas = Kaas::start("idempotence", &["log.segment.bytes=200000"]);
    let bootstrap = kaas.bootstrap();
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).create().expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create");
    assert!(created[0].is_ok(), "{created:?}");

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("linger.ms", "2")
        .set("batch.num.messages", "200")
        .set("message.timeout.ms", "120000")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .create()
        .expect("producer");

    // The broker is killed and restarted while the stream is in flight.
    let kaas = Arc::new(std::sync::Mutex::new(kaas));
    let producing = Arc::new(AtomicBool::new(true));
    let killer = {
        let (kaas, producing) = (kaas.clone(), producing.clone());
        std::thread::spawn(move || {
            let mut kills = 0;
            while kills < KILLS && producing.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(250));
                kaas.lock().unwrap().restart();
                kills += 1;
            }
            kills
        })
    };

    let mut pending = Vec::with_capacity(RECORDS);
    for n in 0..RECORDS {
        let partition = (n % PARTITIONS as usize) as i32;
        let text = payload(n);
        let future =
            producer.send_result(FutureRecord::<(), _>::to(TOPIC).partition(partition).payload(&text)).expect("queue");
        pending.push((n, partition, future));
        if n % 2000 == 1999 {
            // Pace the stream so that the kills land in the middle of it.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut acked: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    let mut failed = Vec::new();
    for (n, partition, future) in pending {
        match future.await.expect("delivery future") {
            Ok(delivery) => {
                assert_eq!(delivery.partition, partition);
                assert!(acked.insert((partition, delivery.offset), n).is_none(), "two records acked at one offset");
            }
            Err((e, _)) => failed.push((n, e.to_string())),
        }
    }
    producing.store(false, Ordering::SeqCst);
    let kills = killer.join().unwrap();
    assert!(kills >= 2, "the broker was killed {kills} times during the stream");
    producer.flush(Duration::from_secs(10)).expect("flush");
    assert!(failed.is_empty(), "{} records failed, first: {:?}", failed.len(), failed.first());

    let mut seen = 0;
    for partition in 0..PARTITIONS {
        let log = read_partition(&bootstrap, partition);
        let numbers: Vec<usize> = log.iter().map(|(_, p)| p[1..].parse().unwrap()).collect();
        // Exactly once and in order: the partition's numbers are its share of 0..RECORDS.
        let expected: Vec<usize> = (partition as usize..RECORDS).step_by(PARTITIONS as usize).collect();
        assert_eq!(numbers.len(), expected.len(), "partition {partition}: duplicates or losses");
        assert_eq!(numbers, expected, "partition {partition}: out of order");
        for (offset, text) in &log {
            if let Some(n) = acked.get(&(partition, *offset)) {
                assert_eq!(text, &payload(*n), "partition {partition} offset {offset} holds another record");
                seen += 1;
            }
        }
    }
    assert_eq!(seen, RECORDS, "every acked record is at its acked offset");
}
