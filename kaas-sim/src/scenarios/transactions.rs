//! Transactional producers over the wire, in three scenarios that share one workload:
//! - `txn-crash`: transactions over several partitions, committed or aborted, while the broker
//!   crashes; one seed in two arms a crash point at a step of EndTxn (before the prepare is
//!   durable, after it, between two markers, after the markers before the completion is
//!   durable, after it), the rest crash it at random times;
//! - `txn-zombie`: a second instance of each transactional.id fences the first mid-stream; the
//!   first then goes on as a zombie: AddPartitions, a transactional produce to a partition its
//!   id never wrote, an idempotent produce continuing an old sequence, EndTxn(commit);
//! - `txn-timeout`: producers go quiet past their transaction timeout mid-transaction (and one
//!   vanishes): the reaper aborts them with an epoch bump, and a producer that wakes up must be
//!   fenced, not allowed to go on into a second, torn half of its transaction.
//!
//! read_committed consumers read along the whole time. After the liveness phase every partition
//! is read read_committed once more and the checker (`checkers::transactions`) looks for
//! aborted reads, lost commits, torn transactions, uncommitted reads, LSO anomalies and
//! transactions left prepared.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::RunResult;
use super::common::{self, Shared};
use crate::checkers::transactions::{self as txn_check, Attempt, CommittedSession, Fate, FinalRead};
use crate::client::{Outcome, ProducerStamp, WireClient};
use crate::faults::{self, Planned};
use crate::history::outcome_name;
use crate::hosts;
use crate::volume::SimVolume;

const TOPIC: &str = "txn";
const SIM_SECONDS_MAX: u64 = 1200;
const LIVENESS_MS: u64 = 90_000;
/// Timeout mode: the pauses past the timeout one producer takes at most.
const PAUSES_MAX: usize = 2;
/// How long the final read waits for every transaction to end before it reads what is there.
const SETTLE_MS: u64 = 60_000;

// Kafka error codes the producer reacts to.
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const KAFKA_STORAGE_ERROR: i16 = 56;
const PRODUCER_FENCED: i16 = 90;

fn retriable(code: i16) -> bool {
    matches!(code, COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR | CONCURRENT_TRANSACTIONS | KAFKA_STORAGE_ERROR)
}

fn fenced(code: i16) -> bool {
    matches!(code, PRODUCER_FENCED | INVALID_PRODUCER_EPOCH)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Crash,
    Zombie,
    Timeout,
}

#[derive(Debug, Clone)]
struct Knobs {
    mode: Mode,
    /// Data partitions; the zombie mode adds two canaries after them.
    partitions: i32,
    producers: usize,
    txns_per_producer: usize,
    abort_per_mille: u32,
    consumers: usize,
    transaction_timeout_ms: i32,
    cleanup_interval_ms: u64,
    /// Timeout mode: the chance that a producer goes quiet mid-transaction past its timeout.
    pause_per_mille: u32,
    /// Zombie mode: after how many transactions the second instance takes over.
    takeover_after: usize,
    crash_point: Option<(&'static str, u32)>,
    segment_bytes: u64,
    max_message_latency_ms: u64,
    clock_skew_ms: i64,
    faults: crate::volume::VolumeFaults,
    buggify: Option<u64>,
    plan: Vec<Planned>,
}

impl Knobs {
    fn from_seed(mode: Mode, rng: &mut ChaCha8Rng) -> Knobs {
        let producers = rng.random_range(1..=3);
        let txns_per_producer = rng.random_range(8..25);
        let crash_point = (mode == Mode::Crash && rng.random_bool(0.5)).then(|| common::crash_point(rng, 8));
        let mut plan = common::broker_faults(rng, producers * txns_per_producer);
        if crash_point.is_some() || mode != Mode::Crash && rng.random_bool(0.5) {
            // The crash point is the fault; partitions and held messages may come with it.
            plan.retain(|p| !matches!(p.fault, faults::Fault::Crash { .. }));
        }
        Knobs {
            mode,
            partitions: rng.random_range(2..=4),
            producers,
            txns_per_producer,
            abort_per_mille: rng.random_range(100..400),
            consumers: rng.random_range(1..=2),
            transaction_timeout_ms: rng.random_range(2_000..6_000),
            cleanup_interval_ms: [500, 2_000, 10_000][rng.random_range(0..3)],
            pause_per_mille: if mode == Mode::Timeout { rng.random_range(100..300) } else { 0 },
            takeover_after: rng.random_range(1..txns_per_producer),
            crash_point,
            segment_bytes: rng.random_range(2048..32_768),
            max_message_latency_ms: [1, 10, 50][rng.random_range(0..3)],
            clock_skew_ms: rng.random_range(-2000..=2000),
            faults: common::volume_faults(rng),
            buggify: rng.random_bool(0.75).then(|| rng.random()),
            plan,
        }
    }

    fn canary_txn(&self) -> i32 {
        self.partitions
    }

    fn canary_idempotent(&self) -> i32 {
        self.partitions + 1
    }

    fn all_partitions(&self) -> i32 {
        if self.mode == Mode::Zombie { self.partitions + 2 } else { self.partitions }
    }
}

#[derive(Default)]
struct Txns {
    attempts: Vec<Attempt>,
    sessions: Vec<CommittedSession>,
    finals: BTreeMap<i32, FinalRead>,
    open_at_end: Vec<(String, String)>,
    /// Transactions ended (acked either way), for fault triggers.
    ended: usize,
    producers_done: usize,
}

type SharedTxns = Arc<Mutex<Txns>>;

/// One instance of a transactional producer: its connection, id and epoch, and the next
/// sequence per partition.
struct Producer {
    name: String,
    transactional_id: String,
    timeout_ms: i32,
    client: WireClient,
    ids: (i64, i16),
    sequences: BTreeMap<i32, i32>,
    world: Shared,
}

impl Producer {
    async fn start(name: String, transactional_id: String, timeout_ms: i32, world: Shared) -> Producer {
        let client = common::connect("broker").await;
        let mut p =
            Producer { name, transactional_id, timeout_ms, client, ids: (-1, -1), sequences: BTreeMap::new(), world };
        p.init(None).await;
        p
    }

    fn record<T: std::fmt::Debug>(&self, op: &str, outcome: &Outcome<T>, detail: serde_json::Value) {
        self.world.lock().unwrap().history.record(&self.name, op, &outcome_name(outcome), detail);
    }

    async fn reconnect_if_broken(&mut self) {
        if self.client.is_broken() {
            self.client = common::connect("broker").await;
        }
    }

    /// InitProducerId until it answers; `current` bumps the instance's own epoch (KIP-360).
    async fn init(&mut self, mut current: Option<(i64, i16)>) {
        loop {
            let outcome = self.client.init_txn_producer(&self.transactional_id, self.timeout_ms, current).await;
            self.record("init-producer-id", &outcome, serde_json::json!({"current": current}));
            match outcome {
                Outcome::Ok(ids) => {
                    self.ids = ids;
                    self.sequences.clear();
                    return;
                }
                // Fenced by a newer instance: start over as a new instance would.
                Outcome::Failed(code) if fenced(code) => current = None,
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Outcome::Indefinite => self.reconnect_if_broken().await,
            }
        }
    }

    /// AddPartitionsToTxn until it answers: Ok(()) or the error that ends the attempt.
    async fn add_partitions(&mut self, partitions: &[i32]) -> Result<(), i16> {
        loop {
            let outcome = self.client.add_partitions_to_txn(&self.transactional_id, self.ids, TOPIC, partitions).await;
            self.record("add-partitions", &outcome, serde_json::json!({"partitions": partitions, "ids": self.ids}));
            match outcome {
                Outcome::Ok(()) => return Ok(()),
                Outcome::Failed(code) if retriable(code) => tokio::time::sleep(Duration::from_millis(50)).await,
                Outcome::Failed(code) => return Err(code),
                Outcome::Indefinite => self.reconnect_if_broken().await,
            }
        }
    }

    /// One transactional batch, sent once: a failure of any kind makes the attempt abort.
    async fn produce(&mut self, partition: i32, values: &[Bytes]) -> Outcome<i64> {
        let base_sequence = *self.sequences.get(&partition).unwrap_or(&0);
        let stamp = ProducerStamp { producer_id: self.ids.0, producer_epoch: self.ids.1, base_sequence };
        let outcome =
            self.client.produce_txn(&self.transactional_id, TOPIC, partition, values, common::now_ms(), stamp).await;
        let detail = serde_json::json!({"partition": partition, "ids": self.ids, "base_sequence": base_sequence});
        self.record("produce-txn", &outcome, detail);
        if let Outcome::Ok(_) = outcome {
            self.sequences.insert(partition, base_sequence + values.len() as i32);
        }
        self.reconnect_if_broken().await;
        outcome
    }

    /// EndTxn until it settles: the attempt's fate.
    async fn end(&mut self, commit: bool) -> Fate {
        let mut unsure = false;
        loop {
            let outcome = self.client.end_txn(&self.transactional_id, self.ids, commit).await;
            self.record("end-txn", &outcome, serde_json::json!({"commit": commit, "ids": self.ids}));
            match outcome {
                Outcome::Ok(()) => return if commit { Fate::Committed } else { Fate::Aborted },
                Outcome::Failed(code) if retriable(code) => tokio::time::sleep(Duration::from_millis(50)).await,
                // Fenced: the transaction was aborted for us, unless an earlier try of this
                // commit got through before the fence.
                Outcome::Failed(code) if fenced(code) && !unsure => return Fate::Aborted,
                Outcome::Failed(_) => return Fate::Unknown,
                Outcome::Indefinite => {
                    unsure |= commit;
                    self.reconnect_if_broken().await;
                }
            }
        }
    }
}

fn values_of(name: &str, partition: i32, batch: usize, records: usize) -> Vec<Bytes> {
    (0..records).map(|r| Bytes::from(format!("{name}-p{partition}-b{batch}-r{r}"))).collect()
}

/// One transaction attempt of `p` over `partitions`, committed unless `abort`; in timeout mode
/// it may go quiet past its timeout before it ends. Returns its fate and whether the instance
/// must bump its epoch (KIP-360) before the next one.
async fn attempt(
    p: &mut Producer,
    name: &str,
    partitions: &[i32],
    abort: bool,
    pause: Option<(u64, i32)>,
    txns: &SharedTxns,
    rng: &mut ChaCha8Rng,
) -> (Fate, bool) {
    let index = {
        let mut t = txns.lock().unwrap();
        t.attempts.push(Attempt { name: name.to_string(), values: Vec::new(), fate: Fate::Unknown });
        t.attempts.len() - 1
    };
    let sent = |partition: i32, values: &[Bytes]| {
        txns.lock().unwrap().attempts[index].values.extend(values.iter().map(|v| (partition, v.clone())));
    };
    if let Err(code) = p.add_partitions(partitions).await {
        let fate = if fenced(code) { Fate::Aborted } else { Fate::Unknown };
        return (fate, true);
    }
    let mut failed = false;
    for (b, &partition) in partitions.iter().enumerate() {
        let values = values_of(name, partition, b, rng.random_range(1..=3));
        sent(partition, &values);
        if !matches!(p.produce(partition, &values).await, Outcome::Ok(_)) {
            failed = true;
            break;
        }
    }
    if let Some((ms, extra)) = pause.filter(|_| !failed) {
        // Quiet past the timeout: the reaper aborts the transaction and bumps the epoch. On
        // waking, the producer carries on into a partition it had not added yet.
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if !partitions.contains(&extra) {
            match p.add_partitions(&[extra]).await {
                Err(code) => {
                    let fate = if fenced(code) { Fate::Aborted } else { Fate::Unknown };
                    return (fate, true);
                }
                Ok(()) => {
                    let values = values_of(name, extra, partitions.len(), 1);
                    sent(extra, &values);
                    failed |= !matches!(p.produce(extra, &values).await, Outcome::Ok(_));
                }
            }
        }
    }
    let fate = p.end(!(abort || failed)).await;
    let must_bump = failed || fate == Fate::Unknown;
    (if failed && fate == Fate::Committed { Fate::Unknown } else { fate }, must_bump)
}

/// One transactional id: `txns_per_producer` attempts by one instance, or (zombie mode) by
/// two, the second fencing the first, which then goes on as a zombie.
async fn producer(id: usize, knobs: Knobs, world: Shared, txns: SharedTxns, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let transactional_id = format!("tx-{id}");
    let mut p = Producer::start(
        format!("{transactional_id}.a"),
        transactional_id.clone(),
        knobs.transaction_timeout_ms,
        world.clone(),
    )
    .await;
    let gone = knobs.mode == Mode::Timeout && id == 0 && rng.random_bool(0.5);
    let mut pauses_left = PAUSES_MAX;
    for n in 0..knobs.txns_per_producer {
        if knobs.mode == Mode::Zombie && n == knobs.takeover_after {
            zombie(p, &knobs, &world, &txns, n).await;
            p = Producer::start(
                format!("{transactional_id}.b"),
                transactional_id.clone(),
                knobs.transaction_timeout_ms,
                world.clone(),
            )
            .await;
        }
        let count = rng.random_range(1..=knobs.partitions.min(3)) as usize;
        let first = rng.random_range(0..knobs.partitions);
        let mut partitions: Vec<i32> = (0..count as i32).map(|i| (first + i) % knobs.partitions).collect();
        if knobs.mode == Mode::Zombie && n == 0 {
            // The first instance writes the idempotence canary once, so that its producer
            // state there holds the old epoch for the zombie's late batch.
            partitions.push(knobs.canary_idempotent());
        }
        let abort = rng.random_range(0..1000) < knobs.abort_per_mille;
        let name = format!("{}-t{n}", p.name);
        if gone && n == knobs.txns_per_producer / 2 {
            // Vanishes mid-transaction: only the reaper can end it, and it can only abort.
            let index = {
                let mut t = txns.lock().unwrap();
                t.attempts.push(Attempt { name: name.clone(), values: Vec::new(), fate: Fate::Aborted });
                t.attempts.len() - 1
            };
            if p.add_partitions(&partitions).await.is_ok() {
                let values = values_of(&name, partitions[0], 0, 2);
                txns.lock().unwrap().attempts[index].values.extend(values.iter().map(|v| (partitions[0], v.clone())));
                p.produce(partitions[0], &values).await;
            }
            break;
        }
        let pause = (pauses_left > 0 && rng.random_range(0..1000) < knobs.pause_per_mille).then(|| {
            pauses_left -= 1;
            let ms = knobs.transaction_timeout_ms as u64 + knobs.cleanup_interval_ms + rng.random_range(500..3000);
            (ms, (first + count as i32) % knobs.partitions)
        });
        let (fate, must_bump) = attempt(&mut p, &name, &partitions, abort, pause, &txns, &mut rng).await;
        {
            let mut t = txns.lock().unwrap();
            let i = t.attempts.iter().rposition(|a| a.name == name).expect("recorded");
            t.attempts[i].fate = fate;
            t.ended += 1;
        }
        if must_bump {
            let current = p.ids;
            p.init(Some(current)).await;
        }
    }
    txns.lock().unwrap().producers_done += 1;
}

/// The fenced first instance, once the second has fenced it: every step it takes must fail.
async fn zombie(mut a: Producer, knobs: &Knobs, world: &Shared, txns: &SharedTxns, n: usize) {
    // The zombie's transaction in progress when the new instance starts.
    let name = format!("{}-t{n}-zombie", a.name);
    let index = {
        let mut t = txns.lock().unwrap();
        t.attempts.push(Attempt { name: name.clone(), values: Vec::new(), fate: Fate::Aborted });
        t.attempts.len() - 1
    };
    let first = values_of(&name, 0, 0, 1);
    txns.lock().unwrap().attempts[index].values.extend(first.iter().map(|v| (0, v.clone())));
    if a.add_partitions(&[0]).await.is_ok() {
        a.produce(0, &first).await;
    }
    // The new instance starts and fences this one: InitProducerId answered before anything
    // below is sent.
    let b = Producer::start(
        format!("{}-fencer", a.transactional_id),
        a.transactional_id.clone(),
        knobs.transaction_timeout_ms,
        world.clone(),
    )
    .await;
    drop(b);
    // Late requests of the fenced epoch. None may take effect.
    let _ = a.add_partitions(&[knobs.canary_txn()]).await;
    for (partition, b) in [(knobs.canary_txn(), 1), (1 % knobs.partitions, 2)] {
        let values = values_of(&name, partition, b, 1);
        txns.lock().unwrap().attempts[index].values.extend(values.iter().map(|v| (partition, v.clone())));
        a.produce(partition, &values).await;
    }
    // An idempotent (non-transactional) batch continuing the old epoch's sequence.
    let canary = knobs.canary_idempotent();
    let values = values_of(&name, canary, 3, 1);
    txns.lock().unwrap().attempts[index].values.extend(values.iter().map(|v| (canary, v.clone())));
    let stamp = ProducerStamp {
        producer_id: a.ids.0,
        producer_epoch: a.ids.1,
        base_sequence: *a.sequences.get(&canary).unwrap_or(&0),
    };
    if a.client.send_produce(TOPIC, canary, &values, common::now_ms(), stamp).await.is_ok() {
        let outcome = a.client.recv_produce().await;
        a.record("produce-idempotent", &outcome, serde_json::json!({"partition": canary, "ids": a.ids}));
    }
    a.reconnect_if_broken().await;
    let fate = a.end(true).await;
    a.record::<()>("zombie-end", &Outcome::Ok(()), serde_json::json!({"fate": format!("{fate:?}")}));
}

/// A read_committed consumer of one partition, from offset 0 until the producers are done.
async fn consumer(name: String, partition: i32, world: Shared, txns: SharedTxns, producers: usize) {
    let mut client = common::connect("broker").await;
    let mut session = CommittedSession { consumer: name.clone(), partition, ..Default::default() };
    let mut offset = 0;
    while txns.lock().unwrap().producers_done < producers {
        match client.fetch_committed(TOPIC, partition, offset, 100).await {
            Outcome::Ok(fetched) => {
                offset = fetched.next_offset;
                session.marks.push((fetched.last_stable_offset, fetched.high_watermark));
                session.values.extend(fetched.records.into_iter().map(|(_, v)| v));
            }
            Outcome::Failed(crate::client::CORRUPT_READ) => {
                world.lock().unwrap().violations.push(format!("corrupt-read: {name} at offset {offset}"));
                break;
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Outcome::Indefinite => {
                // A new connection is a new consumer session: the LSO may be read anew.
                txns.lock().unwrap().sessions.push(std::mem::take(&mut session));
                session = CommittedSession { consumer: name.clone(), partition, ..Default::default() };
                client = common::connect("broker").await;
            }
        }
    }
    txns.lock().unwrap().sessions.push(session);
}

/// After the producers: waits (bounded) for every partition's LSO to reach its HWM, then reads
/// each whole, read_committed, and lists the transactions.
async fn final_reads(knobs: &Knobs, txns: &SharedTxns) {
    let mut client = common::connect("broker").await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(SETTLE_MS);
    for partition in 0..knobs.all_partitions() {
        let read = common::read_committed_to_end(&mut client, TOPIC, partition, deadline).await;
        txns.lock().unwrap().finals.insert(partition, read);
    }
    // Every marker durable does not yet mean every completion is: wait for those too.
    loop {
        match client.list_transactions().await {
            Outcome::Ok(listed) => {
                let prepared = listed.iter().any(|(_, state)| state.starts_with("Prepare"));
                if !prepared || tokio::time::Instant::now() > deadline {
                    txns.lock().unwrap().open_at_end = listed;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Outcome::Indefinite => client = common::connect("broker").await,
        }
    }
}

async fn workload(knobs: Knobs, world: Shared, txns: SharedTxns, seed: u64) -> turmoil::Result {
    common::create_topic("broker", TOPIC, knobs.all_partitions()).await;
    let mut tasks = Vec::new();
    for c in 0..knobs.consumers {
        for partition in 0..knobs.all_partitions() {
            let name = format!("consumer-{c}.p{partition}");
            tasks.push(tokio::spawn(consumer(name, partition, world.clone(), txns.clone(), knobs.producers)));
        }
    }
    for id in 0..knobs.producers {
        let seed = seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        tasks.push(tokio::spawn(producer(id, knobs.clone(), world.clone(), txns.clone(), seed)));
    }
    for t in tasks {
        t.await?;
    }
    final_reads(&knobs, &txns).await;
    Ok(())
}

pub fn run(mode: Mode, scenario: &str, seed: u64) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = Knobs::from_seed(mode, &mut rng);
    let volume = SimVolume::new(rng.random(), knobs.faults);
    let mut sim = common::simulation(seed, SIM_SECONDS_MAX, knobs.max_message_latency_ms, knobs.buggify);
    kaas_core::sim::set_crash_point(knobs.crash_point);
    let config = BrokerConfig {
        log_segment_bytes: knobs.segment_bytes,
        transaction_cleanup_interval_ms: knobs.cleanup_interval_ms,
        ..BrokerConfig::default()
    };
    let control = hosts::add_broker(&mut sim, "broker", volume.clone(), rng.random(), knobs.clock_skew_ms, config);
    let world = Shared::default();
    let txns = SharedTxns::default();
    sim.client("clients", workload(knobs.clone(), world.clone(), txns.clone(), rng.random()));

    let progress = || txns.lock().unwrap().ended;
    let controls = BTreeMap::from([("broker", control)]);
    let mut violations = faults::drive(&mut sim, &volume, &controls, knobs.plan.clone(), progress, LIVENESS_MS);
    kaas_core::sim::set_crash_point(None);
    let w = world.lock().unwrap();
    let t = txns.lock().unwrap();
    violations.extend(w.violations.iter().cloned());
    if violations.is_empty() {
        violations = txn_check::check(&t.attempts, &t.sessions, &t.finals, &t.open_at_end);
    }
    common::finish(scenario, seed, &knobs, violations, &w.history, &volume, &sim)
}

pub fn run_crash(seed: u64) -> RunResult {
    run(Mode::Crash, "txn-crash", seed)
}

pub fn run_zombie(seed: u64) -> RunResult {
    run(Mode::Zombie, "txn-zombie", seed)
}

pub fn run_timeout(seed: u64) -> RunResult {
    run(Mode::Timeout, "txn-timeout", seed)
}
