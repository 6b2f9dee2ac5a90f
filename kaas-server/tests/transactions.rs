//! Transactions against librdkafka: commit and abort as read_committed consumers see them,
//! zombie fencing, the timeout reaper, and a consume-transform-produce copier that commits its
//! input offsets with `send_offsets_to_transaction`, abandoned mid-transaction and restarted
//! while the broker is killed with SIGKILL, whose read_committed output holds every input
//! exactly once.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Kaas;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

type TxnProducer = ThreadedProducer<DefaultProducerContext>;

const T: Duration = Duration::from_secs(30);

async fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new(name, partitions, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create");
    assert!(created[0].is_ok(), "{created:?}");
}

fn transactional_producer(bootstrap: &str, transactional_id: &str, extra: &[(&str, &str)]) -> TxnProducer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", transactional_id)
        .set("linger.ms", "1")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200");
    for (k, v) in extra {
        config.set(*k, *v);
    }
    let producer: TxnProducer = config.create().expect("producer");
    producer.init_transactions(T).expect("init_transactions");
    producer
}

fn send(producer: &TxnProducer, topic: &str, partition: i32, payload: &str) {
    producer.send(BaseRecord::<(), _>::to(topic).partition(partition).payload(payload)).expect("queue");
}

/// Every record of the topic's partitions up to their end for the isolation level, as payloads
/// per partition in offset order.
fn read_all(bootstrap: &str, topic: &str, partitions: i32, isolation: &str) -> BTreeMap<i32, Vec<String>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "txn-check")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut out: BTreeMap<i32, Vec<String>> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let mut at_end = std::collections::BTreeSet::new();
    let deadline = Instant::now() + T;
    while at_end.len() < partitions as usize {
        assert!(Instant::now() < deadline, "{topic}: did not reach the end of every partition");
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("consume: {e}"),
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.get_mut(&m.partition())
                    .unwrap()
                    .push(String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap());
            }
        }
    }
    out
}

fn flat(read: &BTreeMap<i32, Vec<String>>) -> Vec<String> {
    let mut all: Vec<String> = read.values().flatten().cloned().collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_sees_committed_transactions_whole_and_aborted_ones_never() {
    let kaas = Kaas::start("txn-commit-abort", &[]);
    let bootstrap = kaas.bootstrap();
    create_topic(&bootstrap, "out", 2).await;
    let producer = transactional_producer(&bootstrap, "writer", &[]);
    for (txn, commit) in [("a", true), ("b", false), ("c", true)] {
        producer.begin_transaction().unwrap();
        for i in 0..10 {
            send(&producer, "out", i % 2, &format!("{txn}{i}"));
        }
        producer.flush(T).unwrap();
        if commit { producer.commit_transaction(T).unwrap() } else { producer.abort_transaction(T).unwrap() }
    }
    // An open transaction holds read_committed readers back at its first offset.
    producer.begin_transaction().unwrap();
    send(&producer, "out", 0, "open0");
    send(&producer, "out", 1, "open1");
    producer.flush(T).unwrap();

    let committed = read_all(&bootstrap, "out", 2, "read_committed");
    let expected: Vec<String> = ["a", "c"].iter().flat_map(|t| (0..10).map(move |i| format!("{t}{i}"))).collect();
    assert_eq!(flat(&committed), expected, "committed transactions whole, the aborted one and the open one not");
    assert_eq!(committed[&0], ["a0", "a2", "a4", "a6", "a8", "c0", "c2", "c4", "c6", "c8"], "in offset order");
    let uncommitted = read_all(&bootstrap, "out", 2, "read_uncommitted");
    assert_eq!(flat(&uncommitted).len(), 32, "read_uncommitted sees every record, aborted and open ones too");

    producer.commit_transaction(T).unwrap();
    let committed = read_all(&bootstrap, "out", 2, "read_committed");
    assert_eq!(flat(&committed).len(), 22, "the last transaction is visible once committed");
}

/// DeleteRecords past every batch of a producer removes its state, as in Apache; its next
/// batch continues its sequence (not 0) and must be taken, or librdkafka aborts the
/// transaction with UNKNOWN_PRODUCER_ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_goes_on_after_delete_records_removes_the_producers_batches() {
    let kaas = Kaas::start("txn-after-delete-records", &[]);
    let bootstrap = kaas.bootstrap();
    create_topic(&bootstrap, "dr", 1).await;
    let producer = transactional_producer(&bootstrap, "deleted-under", &[]);
    producer.begin_transaction().unwrap();
    for i in 0..6 {
        send(&producer, "dr", 0, &format!("before{i}"));
        producer.flush(T).unwrap();
    }
    producer.commit_transaction(T).unwrap();
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).create().expect("admin");
    let mut cut = TopicPartitionList::new();
    cut.add_partition_offset("dr", 0, Offset::Offset(7)).unwrap();
    let deleted = admin.delete_records(&cut, &AdminOptions::new()).await.unwrap();
    assert_eq!(deleted.find_partition("dr", 0).unwrap().offset(), Offset::Offset(7), "6 records and a marker gone");

    producer.begin_transaction().unwrap();
    send(&producer, "dr", 0, "after");
    producer.flush(T).unwrap();
    producer.commit_transaction(T).expect("the transaction after DeleteRecords commits");
    assert_eq!(flat(&read_all(&bootstrap, "dr", 1, "read_committed")), ["after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_instance_fences_the_first_and_aborts_its_transaction() {
    let kaas = Kaas::start("txn-zombie", &[]);
    let bootstrap = kaas.bootstrap();
    create_topic(&bootstrap, "out", 2).await;
    let zombie = transactional_producer(&bootstrap, "copier", &[]);
    zombie.begin_transaction().unwrap();
    send(&zombie, "out", 0, "zombie0");
    zombie.flush(T).unwrap();

    // The new instance's InitProducerId bumps the epoch and aborts the zombie's transaction.
    let fresh = transactional_producer(&bootstrap, "copier", &[]);
    fresh.begin_transaction().unwrap();
    send(&fresh, "out", 1, "fresh1");
    fresh.flush(T).unwrap();
    fresh.commit_transaction(T).unwrap();

    // The zombie's late writes and its commit are refused.
    send(&zombie, "out", 1, "zombie1");
    let _ = zombie.flush(Duration::from_secs(5));
    let committed = zombie.commit_transaction(T);
    let fatal = match &committed {
        Err(KafkaError::Transaction(e)) => e.is_fatal() || e.code() == RDKafkaErrorCode::ProducerFenced,
        _ => false,
    };
    assert!(fatal, "the zombie is fenced: {committed:?}");

    let read = read_all(&bootstrap, "out", 2, "read_committed");
    assert_eq!(flat(&read), ["fresh1"], "nothing of the fenced epoch is visible");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_aborts_a_transaction_past_its_timeout() {
    let kaas = Kaas::start("txn-timeout", &["transaction.abort.timed.out.transaction.cleanup.interval.ms=200"]);
    let bootstrap = kaas.bootstrap();
    create_topic(&bootstrap, "out", 1).await;
    let producer = transactional_producer(&bootstrap, "slow", &[("transaction.timeout.ms", "1500")]);
    producer.begin_transaction().unwrap();
    send(&producer, "out", 0, "late");
    producer.flush(T).unwrap();
    // The producer goes quiet past its timeout; the reaper aborts and fences it.
    std::thread::sleep(Duration::from_millis(3000));
    let committed = producer.commit_transaction(T);
    assert!(committed.is_err(), "a timed-out transaction cannot commit: {committed:?}");

    let read = read_all(&bootstrap, "out", 1, "read_committed");
    assert!(flat(&read).is_empty(), "the aborted record is never read: {read:?}");
    // The abort marker moved the last stable offset past the record: nothing holds readers.
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
    let (_, high) = consumer.fetch_watermarks("out", 0, T).unwrap();
    assert_eq!(high, 2, "the record and its ABORT marker");
}

const INPUTS: usize = 3000;
const IN_PARTITIONS: i32 = 3;

/// How one copier instance ended.
enum Ended {
    /// Every input's offset is committed.
    Done,
    /// Abandoned mid-transaction, as a crash would leave it.
    Abandoned,
}

/// One copier instance: consumes `in` from the group's committed offsets (read_committed) and,
/// per transaction, writes a copy of each record to the same partition of `out` and commits the
/// input offsets with `send_offsets_to_transaction`. It abandons its transaction number
/// `abandon_at` without ending it. Any error ends the instance; the next one fences it.
fn copier(bootstrap: &str, abandon_at: usize) -> Result<Ended, KafkaError> {
    let producer = {
        let producer: TxnProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("transactional.id", "copier")
            .set("transaction.timeout.ms", "10000")
            .set("linger.ms", "1")
            .set("reconnect.backoff.ms", "20")
            .set("reconnect.backoff.max.ms", "200")
            .create()?;
        producer.init_transactions(T)?;
        producer
    };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "copier")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..IN_PARTITIONS {
        assignment.add_partition_offset("in", p, Offset::Stored)?;
    }
    consumer.assign(&assignment)?;
    let per_partition = (INPUTS / IN_PARTITIONS as usize) as i64;
    let mut idle_since = Instant::now();
    for txn in 0.. {
        let mut batch = Vec::new();
        let until = Instant::now() + Duration::from_millis(200);
        while batch.len() < 20 && Instant::now() < until {
            // Poll errors are the broker coming and going; the client recovers on its own.
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(20)) {
                let payload = String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap();
                batch.push((m.partition(), m.offset(), payload));
            }
        }
        if batch.is_empty() {
            if idle_since.elapsed() > Duration::from_secs(2) {
                let committed = consumer.committed(T)?;
                let at_end = committed.elements().iter().all(|e| e.offset() == Offset::Offset(per_partition));
                if at_end {
                    return Ok(Ended::Done);
                }
                idle_since = Instant::now();
            }
            continue;
        }
        idle_since = Instant::now();
        producer.begin_transaction()?;
        let mut next = TopicPartitionList::new();
        for (p, offset, payload) in &batch {
            send(&producer, "out", *p, &format!("copy-{payload}"));
            next.add_partition_offset("in", *p, Offset::Offset(offset + 1))?;
        }
        // Odd instances abandon with their offsets already staged, even ones before.
        if txn == abandon_at && abandon_at.is_multiple_of(2) {
            let _ = producer.flush(Duration::from_secs(1));
            return Ok(Ended::Abandoned);
        }
        let group = consumer.group_metadata().expect("group metadata");
        producer.send_offsets_to_transaction(&next, &group, T)?;
        if txn == abandon_at {
            let _ = producer.flush(Duration::from_secs(1));
            return Ok(Ended::Abandoned);
        }
        producer.commit_transaction(T)?;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copier_killed_mid_stream_with_the_broker_copies_each_input_exactly_once() {
    let kaas = Kaas::start("txn-copier", &[]);
    let bootstrap = kaas.bootstrap();
    copy_while_restarting(vec![kaas], bootstrap, Duration::from_millis(1000)).await;
}

/// Short leases, so that a broker's things move within seconds of its death.
const CLUSTER_SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "broker.lease.drift.margin.ms=500",
    "broker.ownership.settle.ms=1000",
];

/// The copier against three brokers on one volume: the transaction coordinator, the group and
/// the partitions of `in` and `out` are spread over them by ownership, so markers and
/// verification cross brokers, and brokers are killed and restarted one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copier_across_three_brokers_copies_each_input_exactly_once_while_brokers_are_killed() {
    let brokers = Kaas::cluster("txn-cluster", 3, CLUSTER_SETTINGS);
    let bootstrap = brokers.iter().map(Kaas::bootstrap).collect::<Vec<_>>().join(",");
    copy_while_restarting(brokers, bootstrap, Duration::from_millis(5000)).await;
}

/// Copies `INPUTS` records with copier instances (four abandon a transaction) while the
/// brokers are SIGKILLed and restarted in turn every `every`, then checks the read_committed
/// output: each input exactly once, in input order.
async fn copy_while_restarting(brokers: Vec<Kaas>, bootstrap: String, every: Duration) {
    create_topic(&bootstrap, "in", IN_PARTITIONS).await;
    create_topic(&bootstrap, "out", IN_PARTITIONS).await;
    let input: ThreadedProducer<DefaultProducerContext> =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("enable.idempotence", "true").create().unwrap();
    for n in 0..INPUTS {
        let payload = format!("n{n:05}");
        send_plain(&input, (n % IN_PARTITIONS as usize) as i32, &payload);
    }
    input.flush(T).unwrap();
    drop(input);

    let brokers = std::sync::Arc::new(std::sync::Mutex::new(brokers));
    let copying = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let killer = {
        let (brokers, copying) = (brokers.clone(), copying.clone());
        std::thread::spawn(move || {
            let mut kills = 0;
            while kills < 4 && copying.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(every);
                let mut brokers = brokers.lock().unwrap();
                let count = brokers.len();
                brokers[kills % count].restart();
                kills += 1;
            }
            kills
        })
    };
    let copied = {
        let bootstrap = bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            let (mut abandoned, mut failed) = (0, Vec::new());
            for _ in 0..100 {
                // The first four instances to get that far abandon their 4th, 6th, 3rd and 8th
                // transaction (an instance the broker's death stops earlier does not count);
                // the later ones run to the end.
                let abandon_at = [3, 5, 2, 7].get(abandoned).copied().unwrap_or(usize::MAX);
                match copier(&bootstrap, abandon_at) {
                    Ok(Ended::Done) => return (abandoned, failed),
                    Ok(Ended::Abandoned) => abandoned += 1,
                    Err(e) => failed.push(e.to_string()),
                }
            }
            panic!("the copier never finished: {failed:?}");
        })
    };
    let (abandoned, failed) = copied.await.unwrap();
    copying.store(false, std::sync::atomic::Ordering::SeqCst);
    let kills = killer.join().unwrap();
    eprintln!(
        "copier: {abandoned} instances abandoned, {} failed with the broker ({failed:?}), {kills} kills",
        failed.len()
    );
    assert!(kills >= 2 && abandoned == 4, "the copier ran through kills ({kills}) and abandonments ({abandoned})");

    let out = read_all(&bootstrap, "out", IN_PARTITIONS, "read_committed");
    for p in 0..IN_PARTITIONS {
        let expected: Vec<String> =
            (p as usize..INPUTS).step_by(IN_PARTITIONS as usize).map(|n| format!("copy-n{n:05}")).collect();
        assert_eq!(out[&p].len(), expected.len(), "partition {p}: duplicates or losses");
        assert_eq!(out[&p], expected, "partition {p}: each input once, in input order");
    }
}

fn send_plain(producer: &ThreadedProducer<DefaultProducerContext>, partition: i32, payload: &str) {
    producer.send(BaseRecord::<(), _>::to("in").partition(partition).payload(payload)).expect("queue");
}

fn kaas_transactions(bootstrap: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["admin", "--bootstrap-server", bootstrap, "transactions"])
        .args(args)
        .output()
        .expect("run kaas admin transactions");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_lists_a_hanging_transaction_and_aborts_it() {
    let kaas = Kaas::start("txn-operator", &[]);
    let bootstrap = kaas.bootstrap();
    create_topic(&bootstrap, "out", 1).await;
    let hanging = transactional_producer(&bootstrap, "stuck", &[("transaction.timeout.ms", "900000")]);
    hanging.begin_transaction().unwrap();
    send(&hanging, "out", 0, "never");
    hanging.flush(T).unwrap();

    let (ok, listed) = kaas_transactions(&bootstrap, &["list"]);
    assert!(ok, "{listed}");
    let row = listed.lines().find(|l| l.starts_with("stuck")).unwrap_or_else(|| panic!("{listed}"));
    assert!(row.contains("Ongoing") && row.ends_with("out-0"), "{row}");

    let (ok, aborted) = kaas_transactions(&bootstrap, &["abort", "--transactional-id", "stuck"]);
    assert!(ok && aborted.lines().any(|l| l.starts_with("stuck") && l.contains("Ongoing")), "{aborted}");
    let (_, listed) = kaas_transactions(&bootstrap, &["list"]);
    // Aborted, then ready for a new instance under a newer epoch, as a rejoin leaves it.
    let row = listed.lines().find(|l| l.starts_with("stuck")).unwrap_or_else(|| panic!("{listed}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[3..5], ["2", "Empty"], "epoch and state: {listed}");
    assert!(hanging.commit_transaction(T).is_err(), "the stuck producer is fenced");
    let read = read_all(&bootstrap, "out", 1, "read_committed");
    assert!(flat(&read).is_empty(), "the aborted record is never read: {read:?}");

    let (ok, unknown) = kaas_transactions(&bootstrap, &["abort", "--transactional-id", "nobody"]);
    assert!(!ok && unknown.contains("TransactionalIdNotFound"), "{unknown}");
}
