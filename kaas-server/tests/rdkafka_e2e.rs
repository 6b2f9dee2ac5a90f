//! End to end with librdkafka (the rdkafka crate), a client nobody here wrote: topics made by
//! the admin client, compressed acks=all produce, a rebalancing two-member group committing
//! offsets, a SIGKILL of the broker, and consumption resuming from the committed offsets; with
//! the classic group protocol, and again with KIP-848's (`group.protocol=consumer`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Kaas;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

const TOPIC: &str = "e2e";
const PARTITIONS: i32 = 6;
/// Records per codec per round; two rounds, four codecs: 12,000 records.
const PER_CODEC: usize = 1500;
const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];

type Record = (i32, i64);

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin client")
}

async fn produce_round(bootstrap: &str, round: usize) -> BTreeMap<Record, String> {
    let mut acked = BTreeMap::new();
    for codec in CODECS {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("compression.codec", codec)
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let mut pending = Vec::new();
        for i in 0..PER_CODEC {
            let payload = format!("{round}-{codec}-{i:05}-{}", "x".repeat(i % 200));
            let key = format!("k{i}");
            let future = producer.send_result(FutureRecord::to(TOPIC).key(&key).payload(&payload)).expect("queue");
            pending.push((payload, future));
        }
        for (payload, future) in pending {
            let delivery = future.await.expect("delivery future").expect("acked");
            assert!(
                acked.insert((delivery.partition, delivery.offset), payload).is_none(),
                "two records at one offset"
            );
        }
    }
    acked
}

/// Commits what the application has processed before a partition is taken away, so that a
/// rebalance hands over exactly where processing stopped.
struct CommitOnRevoke;
impl ClientContext for CommitOnRevoke {}
impl ConsumerContext for CommitOnRevoke {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(_) = rebalance {
            let _ = consumer.commit_consumer_state(CommitMode::Sync);
        }
    }
}

/// Commits the stored positions; "no offset stored" only means nothing is new since the last
/// commit (for instance the one made on revocation).
fn commit(consumer: &StreamConsumer<CommitOnRevoke>) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => {}
        Err(rdkafka::error::KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => panic!("commit failed: {e}"),
    }
}

fn group_consumer(bootstrap: &str, group: &str, protocol: &str) -> StreamConsumer<CommitOnRevoke> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("group.protocol", protocol)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false");
    if protocol == "classic" {
        // The consumer protocol's timeouts are the broker's (group.consumer.*).
        config.set("session.timeout.ms", "10000").set("heartbeat.interval.ms", "500");
    }
    let consumer: StreamConsumer<CommitOnRevoke> = config.create_with_context(CommitOnRevoke).expect("consumer");
    consumer.subscribe(&[TOPIC]).expect("subscribe");
    consumer
}

/// Consumes until `stop` says so, recording every record seen.
async fn consume(
    consumer: &StreamConsumer<CommitOnRevoke>,
    seen: &Mutex<Vec<(Record, String)>>,
    until: impl Fn(usize) -> bool,
) {
    loop {
        let count = seen.lock().unwrap().len();
        if until(count) {
            return;
        }
        let message = match tokio::time::timeout(Duration::from_millis(200), consumer.recv()).await {
            Err(_) => continue,
            // librdkafka reports lost connections to the application too (the broker is
            // restarting): it reconnects by itself, and the phase's deadline still holds.
            Ok(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
            ))) => continue,
            Ok(message) => message.expect("consume"),
        };
        let payload = String::from_utf8(message.payload().expect("payload").to_vec()).unwrap();
        seen.lock().unwrap().push(((message.partition(), message.offset()), payload));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn produce_consume_commit_kill9_resume() {
    produce_consume_commit_kill9_resume_with("classic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn produce_consume_commit_kill9_resume_kip848() {
    produce_consume_commit_kill9_resume_with("consumer").await;
}

async fn produce_consume_commit_kill9_resume_with(protocol: &str) {
    let settings = ["group.initial.rebalance.delay.ms=200", "group.consumer.heartbeat.interval.ms=500"];
    let mut kaas = Kaas::start(&format!("e2e-{protocol}"), &settings);
    let bootstrap = kaas.bootstrap();

    let created = admin(&bootstrap)
        .create_topics(&[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(3))], &AdminOptions::new())
        .await
        .expect("create topics");
    assert!(created[0].is_ok(), "{created:?}");
    let again = admin(&bootstrap)
        .create_topics(&[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create topics");
    assert!(again[0].is_err(), "a second create of the same topic fails");

    // Round 1, consumed by a group of two that rebalances when the second member joins.
    let round1 = produce_round(&bootstrap, 1).await;
    assert_eq!(round1.len(), PER_CODEC * CODECS.len());
    let partitions: BTreeSet<i32> = round1.keys().map(|(p, _)| *p).collect();
    assert_eq!(partitions.len(), PARTITIONS as usize, "keys spread over every partition");
    let seen_a = Arc::new(Mutex::new(Vec::new()));
    let first = group_consumer(&bootstrap, "g1", protocol);
    consume(&first, &seen_a, |n| n >= 500).await;
    let second = group_consumer(&bootstrap, "g1", protocol);
    let assigned = |c: &StreamConsumer<CommitOnRevoke>| c.assignment().map(|a| a.count()).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = |n: usize| {
        assert!(Instant::now() < deadline, "phase A stalled at {n} records");
        n >= round1.len() && assigned(&first) > 0 && assigned(&second) > 0
    };
    tokio::join!(consume(&first, &seen_a, done), consume(&second, &seen_a, done));
    let (n1, n2) = (assigned(&first), assigned(&second));
    assert_eq!(n1 + n2, PARTITIONS as usize, "the two members split the partitions: {n1} + {n2}");
    commit(&first);
    commit(&second);
    drop(first);
    drop(second);

    // Round 2 is produced and acked, then the broker is killed with SIGKILL and restarted.
    let round2 = produce_round(&bootstrap, 2).await;
    let mut acked = round1.clone();
    acked.extend(round2.clone());
    assert_eq!(acked.len(), 2 * PER_CODEC * CODECS.len());
    kaas.restart();

    // The group resumes from its committed offsets: exactly round 2 is left to consume.
    let seen_b = Arc::new(Mutex::new(Vec::new()));
    let resumed = group_consumer(&bootstrap, "g1", protocol);
    let deadline = Instant::now() + Duration::from_secs(60);
    consume(&resumed, &seen_b, |n| {
        assert!(Instant::now() < deadline, "phase B stalled at {n} records");
        n >= round2.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let extra = tokio::time::timeout(Duration::from_millis(500), resumed.recv()).await;
    assert!(
        extra.is_err(),
        "nothing past round 2 is delivered: {:?}",
        extra.map(|m| m.map(|m| (m.partition(), m.offset())))
    );
    let b_records: BTreeMap<Record, String> = seen_b.lock().unwrap().iter().cloned().collect();
    assert_eq!(b_records, round2, "after the restart the group reads exactly what it had not committed");

    let a = seen_a.lock().unwrap().clone();
    let b = seen_b.lock().unwrap().clone();
    let mut all: BTreeMap<Record, String> = BTreeMap::new();
    for (record, payload) in a.iter().chain(b.iter()) {
        assert!(all.insert(*record, payload.clone()).is_none(), "record {record:?} consumed twice");
    }
    assert_eq!(all.len(), acked.len(), "every acked record is consumed once across the restart");
    assert_eq!(all, acked, "each offset holds the payload that was acked for it");

    // A plain read of every partition after the crash finds the same log.
    let reader: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning).unwrap();
    }
    reader.assign(&tpl).unwrap();
    let mut reread = BTreeMap::new();
    while reread.len() < acked.len() {
        let message = tokio::time::timeout(Duration::from_secs(30), reader.recv())
            .await
            .expect("reread in time")
            .expect("consume");
        let payload = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
        reread.insert((message.partition(), message.offset()), payload);
    }
    assert_eq!(reread, acked);
    for p in 0..PARTITIONS {
        let (low, high) = reader.fetch_watermarks(TOPIC, p, Timeout::After(Duration::from_secs(10))).unwrap();
        let count = acked.keys().filter(|(q, _)| *q == p).count() as i64;
        assert_eq!((low, high), (0, count), "watermarks of partition {p}");
    }
}
