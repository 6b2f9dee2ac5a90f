//! Transactional producers over the wire (`workloads::transactional`), in three scenarios that
//! share one workload:
//! - `txn-crash`: transactions over several partitions, committed or aborted, while the broker
//!   crashes; one world in two arms a crash point at a step of EndTxn (before the prepare is
//!   durable, after it, between two markers, after the markers before the completion is
//!   durable, after it), the rest crash it at random times;
//! - `txn-zombie`: a second instance of each transactional.id fences the first mid-stream; the
//!   first then goes on as a zombie: AddPartitions, a transactional produce to a partition its
//!   id never wrote, an idempotent produce continuing an old sequence, EndTxn(commit). None of
//!   it may take effect, and each refusal must be one a client stops on (fatal, not retriable);
//! - `txn-timeout`: producers go quiet past their transaction timeout mid-transaction (and one
//!   vanishes): the reaper aborts them with an epoch bump, and a producer that wakes up must be
//!   fenced, not allowed to go on into a second, torn half of its transaction;
//! - `txn-late-write`: KIP-890's case. Transactions v2 producers hold back a write to a
//!   partition their transaction has not written yet, abort (as a client whose write timed
//!   out does), and the held write arrives during the next transaction. The abort bumped the
//!   epoch, so it must be refused; had it not, the write would join the next transaction and
//!   be committed with it.
//!
//! Each producer speaks transactions v1 or v2 (KIP-890 part 2: no AddPartitionsToTxn, EndTxn
//! v5 bumping the epoch), as the world draws it.
//!
//! read_committed consumers read along the whole time. Some worlds keep a small retention, so
//! segments are deleted under open transactions' feet. After the liveness phase every
//! partition is read read_committed once more and the checker (`checkers::transactions`) looks
//! for aborted reads, lost commits, torn transactions, uncommitted reads, LSO anomalies and
//! transactions left prepared.

use std::time::Duration;

use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::cluster::{self, Leases};
use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers::transactions::{self as txn_check, Fate};
use crate::client::Outcome;
use crate::workloads::transactional::{self, Pause, Producer, SharedTxns, values_of};
use crate::workloads::{self, Shared, backoff, consumer};

const TOPIC: &str = "txn";
const SIM_SECONDS_MAX: u64 = 1200;
const LIVENESS_MS: u64 = 90_000;
/// Timeout mode: the pauses past the timeout one producer takes at most.
const PAUSES_MAX: usize = 2;
/// How long the final read waits for every transaction to end before it reads what is there.
const SETTLE_MS: u64 = 60_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Crash,
    Zombie,
    Timeout,
    LateWrite,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub common: Common,
    pub mode: Mode,
    /// Data partitions; the zombie mode adds two canaries after them.
    pub partitions: i32,
    pub producers: usize,
    pub txns_per_producer: usize,
    pub abort_per_mille: u32,
    pub consumers: usize,
    pub transaction_timeout_ms: i32,
    pub cleanup_interval_ms: u64,
    /// Timeout mode: the chance that a producer goes quiet mid-transaction past its timeout.
    pub pause_per_mille: u32,
    /// Zombie mode: after how many transactions the second instance takes over.
    pub takeover_after: usize,
    pub segment_bytes: u64,
    /// `retention.bytes` of the topic's partitions (-1: none), checked every 200 ms.
    pub retention_bytes: i64,
    /// A cluster world (`cluster-txn`): 3 to 5 brokers on one data directory with these lease
    /// settings, so that the coordinator, the partitions and the readers' brokers differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<Leases>,
    /// Per transactional id: whether its producers speak transactions v2.
    #[serde(default)]
    pub tv2: Vec<bool>,
}

impl Txn {
    fn draw(mode: Mode, seed: u64) -> Txn {
        Txn::draw_on(mode, seed, false)
    }

    fn draw_on(mode: Mode, seed: u64, cluster: bool) -> Txn {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let leases = cluster.then(|| Leases::draw(&mut rng));
        let producers = rng.random_range(1..=3);
        let txns_per_producer = rng.random_range(8..25);
        let armed = mode == Mode::Crash && rng.random_bool(0.5);
        let crash_point = armed.then(|| cluster::crash_point(&mut rng, cluster, 8));
        // No clock steps: a step forward is the reaper's cue, which the LSO check cannot tell
        // from a broker bug. Slow drift it allows for.
        let mix = FaultMix { progress_max: producers * txns_per_producer, clock_steps: false, drift_ppm_max: 1000 };
        let mut common = cluster::draw_common(&mut rng, leases.as_ref(), mix);
        match crash_point {
            Some(point) => common.arm(point),
            // Zombie and timeout worlds: half of them without broker crashes.
            None if mode != Mode::Crash && rng.random_bool(0.5) => {
                common.plan.retain(|p| !matches!(p.fault, crate::faults::Fault::Crash { .. }))
            }
            None => {}
        }
        // A world with retention keeps small segments and little of them, so that segments
        // roll and go while transactions are open in them.
        let retained = rng.random_bool(if mode == Mode::Timeout { 0.6 } else { 0.3 });
        let (segment_bytes, retention_bytes) = if retained {
            let segment_bytes = rng.random_range(1024..4096);
            (segment_bytes, rng.random_range(segment_bytes..3 * segment_bytes) as i64)
        } else {
            (rng.random_range(2048..32_768), -1)
        };
        Txn {
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
            segment_bytes,
            retention_bytes,
            common,
            leases,
            // Drawn last, so that the rest of a seed's world is what it was before v2.
            tv2: (0..producers).map(|_| mode == Mode::LateWrite || rng.random_bool(0.5)).collect(),
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

    fn run(&self, scenario: &str, seed: u64) -> RunResult {
        let config = BrokerConfig {
            log_segment_bytes: self.segment_bytes,
            log_retention_bytes: self.retention_bytes,
            log_retention_check_interval_ms: 200,
            transaction_cleanup_interval_ms: self.cleanup_interval_ms,
            ..BrokerConfig::default()
        };
        let config = match &self.leases {
            Some(leases) => leases.apply(config),
            None => config,
        };
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let txns = SharedTxns::default();
        run.sim.client("clients", workload(self.clone(), world.clone(), txns.clone()));
        let progress = || txns.lock().unwrap().ended;
        let mut violations = run.drive(&self.common, progress, LIVENESS_MS);
        violations.extend(world.lock().unwrap().violations.iter().cloned());
        if violations.is_empty() {
            violations = txn_check::check(&txns.lock().unwrap().history);
        }
        run.finish(scenario, seed, violations)
    }
}

macro_rules! txn_world {
    ($name:ident, $mode:expr, $scenario:literal) => {
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Txn);

        impl World for $name {
            fn draw(seed: u64) -> Self {
                $name(Txn::draw($mode, seed))
            }

            fn check(&self) -> Result<(), String> {
                if self.0.mode != $mode || self.0.leases.is_some() {
                    return Err(format!("a {:?} world is not a {} world", self.0.mode, $scenario));
                }
                self.0.common.check()
            }

            fn common(&self) -> &Common {
                &self.0.common
            }

            fn run(&self, seed: u64) -> RunResult {
                self.0.run($scenario, seed)
            }
        }
    };
}

txn_world!(TxnCrash, Mode::Crash, "txn-crash");
txn_world!(TxnZombie, Mode::Zombie, "txn-zombie");
txn_world!(TxnTimeout, Mode::Timeout, "txn-timeout");
txn_world!(TxnLateWrite, Mode::LateWrite, "txn-late-write");

/// `cluster-txn`: the four modes above, drawn per seed, on a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClusterTxn(pub Txn);

impl World for ClusterTxn {
    fn draw(seed: u64) -> Self {
        let mode = [Mode::Crash, Mode::Zombie, Mode::Timeout, Mode::LateWrite][(seed % 4) as usize];
        ClusterTxn(Txn::draw_on(mode, seed, true))
    }

    fn check(&self) -> Result<(), String> {
        if self.0.leases.is_none() {
            return Err("a one-broker world is not a cluster-txn world".into());
        }
        self.0.common.check()
    }

    fn common(&self) -> &Common {
        &self.0.common
    }

    fn run(&self, seed: u64) -> RunResult {
        self.0.run("cluster-txn", seed)
    }
}

/// One transactional id: `txns_per_producer` attempts by one instance, or (zombie mode) by
/// two, the second fencing the first, which then goes on as a zombie.
async fn producer(id: usize, t: Txn, world: Shared, txns: SharedTxns, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let transactional_id = format!("tx-{id}");
    let start = |suffix: &str| {
        Producer::start(
            format!("{transactional_id}.{suffix}"),
            transactional_id.clone(),
            t.transaction_timeout_ms,
            TOPIC,
            &world,
            &txns,
        )
    };
    let tv2 = t.tv2.get(id).copied().unwrap_or(false);
    let mut p = start("a").await;
    p.tv2 = tv2;
    let gone = t.mode == Mode::Timeout && id == 0 && rng.random_bool(0.5);
    let mut late = None;
    let mut pauses_left = PAUSES_MAX;
    for n in 0..t.txns_per_producer {
        if t.mode == Mode::Zombie && n == t.takeover_after {
            zombie(p, &t, n).await;
            p = start("b").await;
            // The successor speaks the other version: an id moves from v1 clients to v2 ones
            // (or back), and a zombie of either kind is fenced by the other.
            p.tv2 = !tv2;
        }
        let count = rng.random_range(1..=t.partitions.min(3)) as usize;
        let first = rng.random_range(0..t.partitions);
        let mut partitions: Vec<i32> = (0..count as i32).map(|i| (first + i) % t.partitions).collect();
        if t.mode == Mode::Zombie && n == 0 {
            // The first instance writes the idempotence canary once, so that its producer
            // state there holds the old epoch for the zombie's late batch.
            partitions.push(t.canary_idempotent());
        }
        let abort = rng.random_range(0..1000) < t.abort_per_mille;
        let name = format!("{}-t{n}", p.name);
        if gone && n == t.txns_per_producer / 2 {
            // Vanishes mid-transaction: only the reaper can end it, and it can only abort.
            p.begin(&name);
            if p.add_partitions(&partitions).await.is_ok() {
                let values = values_of(&name, partitions[0], 0, 2);
                p.produce(partitions[0], &values).await;
            }
            p.settle(Fate::Aborted);
            break;
        }
        let pause = (pauses_left > 0 && rng.random_range(0..1000) < t.pause_per_mille).then(|| {
            pauses_left -= 1;
            let ms = t.transaction_timeout_ms as u64 + t.cleanup_interval_ms + rng.random_range(500..3000);
            Pause { ms, extra_partition: (first + count as i32) % t.partitions }
        });
        let records: Vec<usize> = (0..t.all_partitions()).map(|_| rng.random_range(1..=3)).collect();
        if t.mode == Mode::LateWrite && late.is_none() && n + 1 < t.txns_per_producer && rng.random_bool(0.5) {
            // Write, hold back one more write to a partition not written yet, and abort.
            partitions.truncate((t.partitions - 1) as usize);
            let spare = (0..t.partitions).find(|q| !partitions.contains(q)).expect("a partition left");
            p.begin(&name);
            let mut wrote = true;
            for (b, &partition) in partitions.iter().enumerate() {
                let values = values_of(&name, partition, b, records[partition as usize]);
                wrote &= matches!(p.produce(partition, &values).await, Outcome::Ok(_));
            }
            late = wrote.then(|| p.hold(spare, &values_of(&name, spare, partitions.len(), 1)));
            let fate = p.end(false).await;
            p.settle(fate);
            if !wrote || fate == Fate::Unknown {
                let current = p.ids;
                p.init(Some(current)).await;
            }
            continue;
        }
        let held = late.take();
        if let Some(held) = &held {
            // The next transaction writes elsewhere: the late write is the only one there.
            partitions.retain(|&q| q != held.partition);
            if partitions.is_empty() {
                partitions.push((held.partition + 1) % t.partitions);
            }
        }
        let (_, must_bump) =
            transactional::attempt(&mut p, &name, &partitions, abort, pause, held, |p| records[p as usize]).await;
        if must_bump {
            let current = p.ids;
            p.init(Some(current)).await;
        }
    }
    txns.lock().unwrap().producers_done += 1;
}

/// The fenced first instance, once the second has fenced it: every step it takes must fail.
async fn zombie(mut a: Producer, t: &Txn, n: usize) {
    // The zombie's transaction in progress when the new instance starts.
    let name = format!("{}-t{n}-zombie", a.name);
    a.begin(&name);
    let first = values_of(&name, 0, 0, 1);
    if a.add_partitions(&[0]).await.is_ok() {
        a.produce(0, &first).await;
    }
    // The new instance starts and fences this one: InitProducerId answered before anything
    // below is sent.
    let world = a.world().clone();
    let txns = a.txns().clone();
    let fencer = Producer::start(
        format!("{}-fencer", a.transactional_id),
        a.transactional_id.clone(),
        t.transaction_timeout_ms,
        TOPIC,
        &world,
        &txns,
    )
    .await;
    drop(fencer);
    // Late requests of the fenced epoch. None may take effect.
    let _ = a.add_partitions(&[t.canary_txn()]).await;
    for (partition, b) in [(t.canary_txn(), 1), (1 % t.partitions, 2)] {
        let values = values_of(&name, partition, b, 1);
        a.produce(partition, &values).await;
    }
    // An idempotent (non-transactional) batch continuing the old epoch's sequence, where the
    // partition knows this producer: only there can the broker know it is fenced (a partition
    // that never saw the producer id takes its first idempotent batch, as Apache's does).
    let canary = t.canary_idempotent();
    if a.acked_in.contains(&canary) {
        let values = values_of(&name, canary, 3, 1);
        a.produce_idempotent(canary, &values).await;
    }
    a.end(true).await;
    a.settle(Fate::Aborted);
}

async fn workload(t: Txn, world: Shared, txns: SharedTxns) -> turmoil::Result {
    workloads::create_topic(&world, TOPIC, t.all_partitions()).await;
    let mut consumers = Vec::new();
    for c in 0..t.consumers {
        for partition in 0..t.all_partitions() {
            let name = format!("consumer-{c}.p{partition}");
            let done = {
                let (txns, producers) = (txns.clone(), t.producers);
                move || txns.lock().unwrap().producers_done >= producers
            };
            consumers.push(tokio::spawn(consumer::read_committed(name, TOPIC.into(), partition, world.clone(), done)));
        }
    }
    let producers: Vec<_> = (0..t.producers)
        .map(|id| {
            let seed = t.common.workload_seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tokio::spawn(producer(id, t.clone(), world.clone(), txns.clone(), seed))
        })
        .collect();
    for p in producers {
        p.await?;
    }
    for c in consumers {
        let sessions = c.await?;
        txns.lock().unwrap().history.sessions.extend(sessions);
    }
    final_reads(&t, &world, &txns).await;
    Ok(())
}

/// After the producers: waits (bounded) for every partition's LSO to reach its HWM, then reads
/// each whole, read_committed, and lists the transactions.
async fn final_reads(t: &Txn, world: &Shared, txns: &SharedTxns) {
    let mut client = workloads::client(world, "final-read");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(SETTLE_MS);
    for partition in 0..t.all_partitions() {
        let read = consumer::read_committed_to_end(&mut client, TOPIC, partition, deadline).await;
        txns.lock().unwrap().history.finals.insert(partition, read);
    }
    // Every marker durable does not yet mean every completion is: wait for those too.
    loop {
        match client.list_transactions().await {
            Outcome::Ok(listed) => {
                let prepared = listed.iter().any(|(_, state)| state.starts_with("Prepare"));
                if !prepared || tokio::time::Instant::now() > deadline {
                    txns.lock().unwrap().history.open_at_end = listed;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => backoff().await,
        }
    }
}
