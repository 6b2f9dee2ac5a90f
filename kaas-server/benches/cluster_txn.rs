//! Commit-to-visible across brokers: a librdkafka transactional producer writes one record to
//! each of 6 partitions per transaction and commits; a read_committed consumer of all 6 reads
//! along. The figure is the time from the start of `commit_transaction` until the consumer has
//! every record of that transaction, p50 and p99, with one broker and then with three brokers
//! on one data directory (where the coordinator writes most markers on peers by
//! WriteTxnMarkers), in the same run.
//!
//! `cargo bench -p kaas-server --bench cluster_txn` (KAAS_BENCH_TXNS to change the count).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Kaas;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "bench-visible";
const PARTITIONS: i32 = 6;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The partitions each transaction's records were seen in, and when the last one arrived.
type Seen = Arc<Mutex<BTreeMap<usize, (Vec<i32>, Instant)>>>;

/// Commit-to-visible latency of `txns` transactions against `bootstrap`, sorted.
fn measure(bootstrap: &str, txns: usize) -> Vec<Duration> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
        let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1));
        let created = admin.create_topics([&topic], &AdminOptions::new()).await.unwrap();
        assert!(created[0].is_ok(), "{created:?}");
    });
    let seen: Seen = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (seen, stop, bootstrap) = (seen.clone(), stop.clone(), bootstrap.to_string());
        std::thread::spawn(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("group.id", "bench-visible")
                .set("isolation.level", "read_committed")
                .set("fetch.wait.max.ms", "10")
                .set("enable.auto.commit", "false")
                .create()
                .unwrap();
            let mut assignment = TopicPartitionList::new();
            for p in 0..PARTITIONS {
                assignment.add_partition_offset(TOPIC, p, Offset::Beginning).unwrap();
            }
            consumer.assign(&assignment).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let polled = consumer.poll(Duration::from_millis(5));
                if let Some(Err(e)) = &polled {
                    eprintln!("consumer: {e}");
                }
                if let Some(Ok(m)) = polled {
                    let txn: usize = std::str::from_utf8(m.payload().unwrap()).unwrap().parse().unwrap();
                    let mut seen = seen.lock().unwrap();
                    let entry = seen.entry(txn).or_insert((Vec::new(), Instant::now()));
                    entry.0.push(m.partition());
                    entry.1 = Instant::now();
                }
            }
        })
    };
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", "bench-visible")
        .set("linger.ms", "0")
        .create()
        .unwrap();
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    let mut committed_at = Vec::with_capacity(txns);
    // A few transactions first, so that every connection and the consumer's fetches are up.
    let warm_up = 20;
    for txn in 0..txns + warm_up {
        producer.begin_transaction().unwrap();
        for p in 0..PARTITIONS {
            let payload = txn.to_string();
            producer.send(BaseRecord::<(), _>::to(TOPIC).partition(p).payload(&payload)).map_err(|(e, _)| e).unwrap();
        }
        while producer.in_flight_count() > 0 {
            producer.poll(Duration::from_millis(1));
        }
        let committing = Instant::now();
        producer.commit_transaction(timeout).unwrap();
        committed_at.push(committing);
        // The next transaction starts once this one is visible: one latency at a time.
        let deadline = Instant::now() + timeout;
        while seen.lock().unwrap().get(&txn).is_none_or(|(p, _)| p.len() < PARTITIONS as usize) {
            assert!(
                Instant::now() < deadline,
                "transaction {txn} never became visible: seen in partitions {:?}",
                seen.lock().unwrap().get(&txn).map(|(p, _)| p.clone())
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, Ordering::SeqCst);
    consumer.join().unwrap();
    let seen = seen.lock().unwrap();
    let mut latencies: Vec<Duration> =
        (warm_up..txns + warm_up).map(|t| seen[&t].1.saturating_duration_since(committed_at[t])).collect();
    latencies.sort();
    latencies
}

fn report(what: &str, latencies: &[Duration]) -> (Duration, Duration) {
    let (p50, p99) = (percentile(latencies, 0.5), percentile(latencies, 0.99));
    println!(
        "{what}: commit-to-visible p50 {:.2} ms, p99 {:.2} ms ({} transactions)",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        latencies.len()
    );
    (p50, p99)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("cluster_txn: bench");
        return;
    }
    let txns: usize = std::env::var("KAAS_BENCH_TXNS").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    let one = {
        let kaas = Kaas::start("bench-visible-1", &[]);
        measure(&kaas.bootstrap(), txns)
    };
    let three = {
        let brokers = Kaas::cluster("bench-visible-3", 3, &[]);
        // Every broker settled and owning its share before the clock starts.
        std::thread::sleep(Duration::from_secs(8));
        let bootstrap = brokers.iter().map(Kaas::bootstrap).collect::<Vec<_>>().join(",");
        measure(&bootstrap, txns)
    };
    let (p50_one, p99_one) = report("1 broker", &one);
    let (p50_three, p99_three) = report("3 brokers, one volume", &three);
    println!(
        "ratio 3 brokers / 1 broker: p50 {:.2}x, p99 {:.2}x",
        p50_three.as_secs_f64() / p50_one.as_secs_f64(),
        p99_three.as_secs_f64() / p99_one.as_secs_f64()
    );
}
