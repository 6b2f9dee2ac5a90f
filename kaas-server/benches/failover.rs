//! Failover benchmark: three kaas processes on one data directory at default settings
//! (`broker.session.timeout.ms` 9000, heartbeat 2000, drift margin 1000, settle 6000). A
//! producer writes one acks=all record to each of 6 partitions every 20 ms. The broker owning
//! the most partitions is then killed with SIGKILL; the figure is the seconds from the kill until
//! every partition it owned has acked a write on a survivor. The same again with SIGSTOP (the
//! process paused, then continued). Then produce throughput (1 KiB records, acks=all) of one
//! broker alone against the three-broker cluster on the same disk.
//!
//! `cargo bench -p kaas-server --bench failover`. Apache Kafka's KRaft default for the same
//! detection is a 9 s broker session timeout (`broker.session.timeout.ms`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Kaas;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

const PARTITIONS: i32 = 6;

fn leaders(bootstrap: &str, topic: &str) -> BTreeMap<i32, i32> {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("client");
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    metadata.topics()[0].partitions().iter().map(|p| (p.id(), p.leader())).collect()
}

async fn create(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create");
    assert!(created[0].is_ok(), "{created:?}");
}

fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "300000")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .set("topic.metadata.refresh.interval.ms", "200")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer")
}

/// Seconds from the fault (`fault` runs it at t0) until each of `victim`'s partitions has
/// acked a record sent after t0.
async fn failover(brokers: &mut [Kaas], bootstrap: &str, topic: &str, fault: &str) -> (f64, usize) {
    let owners = leaders(bootstrap, topic);
    let mut load: BTreeMap<i32, usize> = BTreeMap::new();
    for o in owners.values() {
        *load.entry(*o).or_default() += 1;
    }
    let victim = *load.iter().max_by_key(|(id, n)| (**n, -**id)).unwrap().0;
    let moved: Vec<i32> = owners.iter().filter(|(_, o)| **o == victim).map(|(p, _)| *p).collect();
    let producer = producer(bootstrap);
    let first_ack: Arc<Mutex<BTreeMap<i32, Instant>>> = Arc::default();
    let t0 = Instant::now() + Duration::from_secs(2);
    let mut faulted = false;
    let mut pending = Vec::new();
    while Instant::now() < t0 + Duration::from_secs(60) {
        if !faulted && Instant::now() >= t0 {
            match fault {
                "SIGKILL" => brokers[victim as usize].kill9(),
                _ => brokers[victim as usize].signal("STOP"),
            }
            faulted = true;
        }
        for p in 0..PARTITIONS {
            let sent = Instant::now();
            let future =
                producer.send_result(FutureRecord::<(), _>::to(topic).partition(p).payload("x")).expect("queue");
            let first_ack = first_ack.clone();
            pending.push(tokio::spawn(async move {
                if let Ok(Ok(_)) = future.await
                    && sent >= t0
                {
                    first_ack.lock().unwrap().entry(p).or_insert_with(Instant::now);
                }
            }));
        }
        if faulted && moved.iter().all(|p| first_ack.lock().unwrap().contains_key(p)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let acks = first_ack.lock().unwrap().clone();
    let worst =
        moved.iter().map(|p| acks.get(p).map_or(f64::INFINITY, |t| (*t - t0).as_secs_f64())).fold(0.0, f64::max);
    if fault != "SIGKILL" {
        brokers[victim as usize].signal("CONT");
    }
    producer.flush(Duration::from_secs(30)).ok();
    println!(
        "failover {fault}: broker {victim} owned partitions {moved:?}; all took acks=all writes on the survivors after {worst:.2} s"
    );
    (worst, victim as usize)
}

async fn throughput(bootstrap: &str, topic: &str, records: usize) -> f64 {
    let producer = producer(bootstrap);
    let value = vec![0x61u8; 1024];
    let started = Instant::now();
    let mut pending = Vec::with_capacity(records);
    for n in 0..records {
        let record = FutureRecord::<(), _>::to(topic).partition((n % PARTITIONS as usize) as i32).payload(&value);
        pending.push(producer.send_result(record).expect("queue"));
        if pending.len() >= 10_000 {
            for f in pending.drain(..) {
                f.await.expect("future").expect("acked");
            }
        }
    }
    for f in pending {
        f.await.expect("future").expect("acked");
    }
    (records * 1024) as f64 / started.elapsed().as_secs_f64() / 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let records: usize = std::env::var("KAAS_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let mut brokers = Kaas::cluster("failover-bench", 3, &[]);
    let bootstrap: String = brokers.iter().map(|k| k.bootstrap()).collect::<Vec<_>>().join(",");
    // Let the three settle (each joins, holds its lease for the settle period, takes its share).
    tokio::time::sleep(Duration::from_secs(12)).await;
    create(&bootstrap, "kill").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (kill, victim) = failover(&mut brokers, &bootstrap, "kill", "SIGKILL").await;
    // Back as a new process: it waits out its old lease, then settles and takes its share.
    brokers[victim].restart();
    tokio::time::sleep(Duration::from_secs(10)).await;
    create(&bootstrap, "stop").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (stop, _) = failover(&mut brokers, &bootstrap, "stop", "SIGSTOP").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    create(&bootstrap, "throughput").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let three = throughput(&bootstrap, "throughput", records).await;
    drop(brokers);
    let single = Kaas::start("failover-bench-single", &[]);
    create(&single.bootstrap(), "throughput").await;
    let one = throughput(&single.bootstrap(), "throughput", records).await;
    println!(
        "failover: SIGKILL {kill:.2} s, SIGSTOP {stop:.2} s (Apache KRaft's default detection: 9 s session timeout)"
    );
    println!(
        "produce 1 KiB acks=all, {records} records: one broker {one:.1} MB/s, three brokers {three:.1} MB/s ({:.2}x)",
        three / one
    );
}
