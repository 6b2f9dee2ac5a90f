//! Three `kaas` processes on one data directory, driven by librdkafka: an idempotent producer
//! (acks=all, five requests in flight) writes a numbered stream over six partitions while the
//! broker that owns the most partitions is killed with SIGKILL, and another is stopped with
//! SIGSTOP for three lease periods and then continued. Clients find the new owners by Metadata
//! as they would with Apache Kafka. Afterwards every acked record is in the log exactly once,
//! at its acked offset, in order per partition; and every broker lists all three.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Kaas;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "clustered";
const PARTITIONS: i32 = 6;
const RECORDS: usize = 20_000;
/// Short leases, so that the test takes seconds: the failover benchmark uses the defaults.
const SESSION_TIMEOUT_MS: u64 = 3000;
const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "broker.lease.drift.margin.ms=500",
    "broker.ownership.settle.ms=1000",
    "log.segment.bytes=200000",
];

fn payload(n: usize) -> String {
    format!("n{n:06}")
}

/// The owner of each partition, as Metadata from `bootstrap` says.
fn leaders(bootstrap: &str) -> BTreeMap<i32, i32> {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("client");
    let metadata = consumer.fetch_metadata(Some(TOPIC), Duration::from_secs(10)).expect("metadata");
    metadata.topics()[0].partitions().iter().map(|p| (p.id(), p.leader())).collect()
}

fn brokers_listed(bootstrap: &str) -> Vec<i32> {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("client");
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10)).expect("metadata");
    let mut ids: Vec<i32> = metadata.brokers().iter().map(|b| b.id()).collect();
    ids.sort();
    ids
}

/// Every record of a partition up to its end, as (offset, payload).
fn read_partition(bootstrap: &str, partition: i32) -> Vec<(i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "cluster-check")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    // An ownership move answers NOT_LEADER_OR_FOLLOWER for a moment; a client retries.
    let deadline = Instant::now() + Duration::from_secs(30);
    let high = loop {
        match consumer.fetch_watermarks(TOPIC, partition, Duration::from_secs(10)) {
            Ok((_, high)) => break high,
            Err(e) if Instant::now() < deadline => {
                eprintln!("partition {partition}: watermarks: {e}; retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("partition {partition}: watermarks: {e}"),
        }
    };
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC, partition, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    while out.last().is_none_or(|(o, _)| o + 1 < high) && high > 0 {
        match consumer.poll(Duration::from_secs(30)) {
            // The killed broker is still in the bootstrap list: librdkafka reports it, and goes on.
            Some(Err(e)) => eprintln!("partition {partition}: {e}; going on"),
            Some(Ok(message)) => {
                out.push((message.offset(), String::from_utf8(message.payload().unwrap().to_vec()).unwrap()));
            }
            None => panic!("partition {partition}: nothing more to read at {:?} of {high}", out.last()),
        }
    }
    out
}

/// Waits until every broker in `ids` is listed by Metadata from `bootstrap`.
fn wait_for_brokers(bootstrap: &str, ids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while brokers_listed(bootstrap) != ids {
        assert!(Instant::now() < deadline, "brokers {ids:?} never all listed: {:?}", brokers_listed(bootstrap));
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idempotent_stream_survives_sigkill_and_sigstop_of_owners_exactly_once() {
    let mut brokers = Kaas::cluster("cluster", 3, SETTINGS);
    let bootstrap: String = brokers.iter().map(|k| k.bootstrap()).collect::<Vec<_>>().join(",");
    for b in &brokers {
        wait_for_brokers(&b.bootstrap(), &[0, 1, 2]);
    }
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).create().expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create");
    assert!(created[0].is_ok(), "{created:?}");
    // Ownership settles over the three brokers.
    std::thread::sleep(Duration::from_millis(3 * SESSION_TIMEOUT_MS));
    let owners = leaders(&bootstrap);
    let mut load: BTreeMap<i32, usize> = BTreeMap::new();
    for owner in owners.values() {
        *load.entry(*owner).or_default() += 1;
    }
    assert!(load.len() >= 2, "partitions spread over the brokers: {owners:?}");
    let busiest = *load.iter().max_by_key(|(id, n)| (**n, -**id)).unwrap().0;
    let stopped = (busiest + 1) % 3;

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "120000")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .expect("producer");

    let mut pending = Vec::with_capacity(RECORDS);
    for n in 0..RECORDS {
        let partition = (n % PARTITIONS as usize) as i32;
        let text = payload(n);
        let future =
            producer.send_result(FutureRecord::<(), _>::to(TOPIC).partition(partition).payload(&text)).expect("queue");
        pending.push((n, partition, future));
        if n % 1000 == 999 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if n == RECORDS / 4 {
            brokers[busiest as usize].kill9();
        }
        if n == RECORDS / 2 {
            brokers[stopped as usize].signal("STOP");
            tokio::time::sleep(Duration::from_millis(3 * SESSION_TIMEOUT_MS)).await;
            brokers[stopped as usize].signal("CONT");
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
    producer.flush(Duration::from_secs(10)).expect("flush");
    assert!(failed.is_empty(), "{} records failed, first: {:?}", failed.len(), failed.first());

    // The killed broker's partitions moved; the stopped one is back and listed again.
    let after = leaders(&bootstrap);
    assert!(after.values().all(|&o| o != busiest), "no partition is left with the killed broker: {after:?}");
    let survivor = &brokers[stopped as usize].bootstrap();
    wait_for_brokers(survivor, &[0, 1, 2].into_iter().filter(|&id| id != busiest).collect::<Vec<_>>());

    let mut seen = 0;
    for partition in 0..PARTITIONS {
        let log = read_partition(&bootstrap, partition);
        let numbers: Vec<usize> = log.iter().map(|(_, p)| p[1..].parse().unwrap()).collect();
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

/// Counts the rebalances a librdkafka consumer goes through.
#[derive(Default)]
struct Rebalances(std::sync::atomic::AtomicUsize);

impl rdkafka::ClientContext for Rebalances {}

impl rdkafka::consumer::ConsumerContext for Rebalances {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, _: &rdkafka::consumer::Rebalance<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The broker that holds `group`'s newest claim, as the volume says.
fn group_owner(data_dir: &std::path::Path, group: &str) -> i32 {
    let dir = data_dir.join("__cluster/owners/groups").join(format!("group-{group}"));
    let newest = std::fs::read_dir(&dir)
        .expect("the group is claimed")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .max()
        .expect("a claim");
    // The claim is one line of JSON, e.g. {"format_version":1,"epoch":2,"broker_id":1,...}.
    let claim = std::fs::read_to_string(dir.join(newest)).unwrap();
    let id = claim.split("\"broker_id\":").nth(1).expect("a broker id");
    id.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

/// Apache keeps a group's generation, members and assignment durable, so that a new
/// coordinator carries a stable group on. Here the group's coordinator is SIGKILLed: the
/// consumer finds the new one and goes on heartbeating in its generation, with no rebalance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stable_group_goes_on_without_a_rebalance_when_its_coordinator_is_killed() {
    let mut brokers = Kaas::cluster("cluster-group", 3, SETTINGS);
    let bootstrap: String = brokers.iter().map(|k| k.bootstrap()).collect::<Vec<_>>().join(",");
    for b in &brokers {
        wait_for_brokers(&b.bootstrap(), &[0, 1, 2]);
    }
    std::thread::sleep(Duration::from_millis(2 * SESSION_TIMEOUT_MS));
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).create().expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new("steady", PARTITIONS, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create");
    assert!(created[0].is_ok(), "{created:?}");
    let consumer: BaseConsumer<Rebalances> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "steady")
        .set("session.timeout.ms", "30000")
        .set("heartbeat.interval.ms", "300")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .create_with_context(Rebalances::default())
        .expect("consumer");
    consumer.subscribe(&["steady"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer.assignment().unwrap().count() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "the consumer never got its assignment");
        consumer.poll(Duration::from_millis(100));
    }
    // A few heartbeats in the formed generation, then the coordinator dies.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        consumer.poll(Duration::from_millis(100));
    }
    let before = consumer.context().0.load(std::sync::atomic::Ordering::SeqCst);
    let coordinator = group_owner(&brokers[0].data_dir, "steady");
    brokers[coordinator as usize].kill9();
    // Long enough for the lease to run out, the group to move and heartbeats to reach it.
    let until = Instant::now() + Duration::from_millis(5 * SESSION_TIMEOUT_MS);
    while Instant::now() < until {
        consumer.poll(Duration::from_millis(100));
    }
    assert_ne!(group_owner(&brokers[0].data_dir, "steady"), coordinator, "the group moved");
    let after = consumer.context().0.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(after, before, "no rebalance across the coordinator's death");
    assert_eq!(consumer.assignment().unwrap().count(), PARTITIONS as usize, "the assignment is kept");
}

/// A consumer assigned to a topic the moment CreateTopics returns, on another broker than the
/// one that created it, reads every partition: a partition's owner that has not heard of the
/// topic yet reads its file when a Fetch or ListOffsets names it, instead of answering
/// UNKNOWN_TOPIC_OR_PARTITION until its next rescan (after which librdkafka may back off for
/// longer than a transaction timeout). Default leases: the rescan is seconds away.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_topic_created_on_one_broker_is_read_at_once_from_every_broker() {
    const NAME: &str = "created-elsewhere";
    let brokers = Kaas::cluster(NAME, 3, &[]);
    let all: Vec<String> = brokers.iter().map(Kaas::bootstrap).collect();
    let bootstrap = all.join(",");
    wait_for_brokers(&bootstrap, &[0, 1, 2]);
    // Every broker settled and owning its share.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &all[0]).create().unwrap();
    let topic = NewTopic::new(NAME, PARTITIONS, TopicReplication::Fixed(1));
    let created = admin.create_topics([&topic], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", NAME)
        .set("fetch.wait.max.ms", "10")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment.add_partition_offset(NAME, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    // The consumer alone first: its ListOffsets and Fetches reach owners that may not have
    // heard of the topic yet.
    let mut unknown = 0;
    let mut poll = |seen: &mut std::collections::BTreeSet<i32>| match consumer.poll(Duration::from_millis(50)) {
        Some(Ok(m)) => drop(seen.insert(m.partition())),
        Some(Err(e)) if e.to_string().contains("Unknown topic or partition") => unknown += 1,
        _ => {}
    };
    let mut seen = std::collections::BTreeSet::new();
    let alone = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < alone {
        poll(&mut seen);
    }
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
    for p in 0..PARTITIONS {
        let record = FutureRecord::<(), _>::to(NAME).partition(p).payload("x");
        producer.send(record, Duration::from_secs(10)).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < PARTITIONS as usize && Instant::now() < deadline {
        poll(&mut seen);
    }
    assert_eq!(seen.len(), PARTITIONS as usize, "partitions read: {seen:?}");
    assert_eq!(unknown, 0, "a broker answered UNKNOWN_TOPIC_OR_PARTITION for a topic created on a peer");
}
