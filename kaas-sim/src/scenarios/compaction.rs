//! compaction: a compacted topic (`cleanup.policy=compact`) on one broker or 3 to 5, written
//! with keyed records: transactional producers committing and aborting (values and
//! tombstones), and a plain producer beside them, over a few keys each, in small segments that
//! the log cleaner cleans while they write. Brokers crash (one world in three at the cleaner's
//! own crash point, between a cleaned copy's sync and its rename), pause past their lease and
//! lose the volume, so cleaning passes are cut off and partitions move to owners that clean
//! them again.
//!
//! At the end every partition is read read_committed and `checkers::compaction` holds it to
//! the writes: no record moved, invented or resurrected from an aborted transaction, each key's
//! last committed value there (or something newer of its key), the active segment untouched.
//! Then, in worlds whose `delete.retention.ms` can run out within the run, a filler of a key of
//! its own closes the segments the tombstones lie in and makes the log dirty again, round after
//! round, until the tombstones are gone, as they must be once a pass has cleaned them and their
//! retention ran out (tombstone-kept otherwise).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::cluster::{self, Leases};
use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers::compaction::{self as compaction_check, FinalLog, Read, Write};
use crate::checkers::transactions::Fate;
use crate::client::Outcome;
use crate::volume::SimVolume;
use crate::workloads::transactional::{Producer, SharedTxns, message_of};
use crate::workloads::{self, Shared, backoff};

const TOPIC: &str = "compacted";
const SIM_SECONDS_MAX: u64 = 900;
const LIVENESS_MS: u64 = 90_000;
/// How long the final read waits for every transaction to end.
const SETTLE_MS: u64 = 60_000;
/// Rounds of fillers, each followed by the retention and a few of the cleaner's turns, before a
/// tombstone still there is one kept for good; more where a tiny offset map makes passes short
/// (a pass may cover one batch: a round has three passes at least).
const TOMBSTONE_ROUNDS: usize = 6;
/// The longest `delete.retention.ms` whose tombstones the run waits to see go.
const TOMBSTONE_WAIT_MAX_MS: i64 = 5000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub common: Common,
    /// A cluster of 3 to 5 brokers on one volume; `None`: one broker.
    pub leases: Option<Leases>,
    pub partitions: i32,
    pub producers: usize,
    pub txns_per_producer: usize,
    pub abort_per_mille: u32,
    pub plain_writes: usize,
    /// Keys per producer (each producer, and the plain one, has keys of its own).
    pub keys: usize,
    pub tombstone_per_mille: u32,
    pub segment_bytes: u64,
    pub min_cleanable_ratio: f64,
    pub cleaner_backoff_ms: u64,
    pub delete_retention_ms: i64,
    /// The offset map's budget in entries: a small one cleans in many passes.
    pub dedupe_entries: u64,
    pub transaction_timeout_ms: i32,
    /// `log.cleaner.threads`: with one, the partitions take turns.
    #[serde(default = "one_thread")]
    pub cleaner_threads: u32,
    /// `log.cleaner.io.buffer.size`: a small one reads a batch a turn, and starts a copy midway
    /// through a segment.
    #[serde(default = "whole_segments")]
    pub cleaner_io_buffer: u64,
}

/// What a world drawn before the two settings ran with.
fn one_thread() -> u32 {
    1
}

fn whole_segments() -> u64 {
    512 << 10
}

impl World for Compaction {
    fn draw(seed: u64) -> Compaction {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let leases = rng.random_bool(0.5).then(|| Leases::draw(&mut rng));
        let producers = rng.random_range(1..=2);
        let txns_per_producer = rng.random_range(6..20);
        let plain_writes = rng.random_range(10..40);
        let mix = FaultMix {
            progress_max: producers * txns_per_producer + plain_writes,
            clock_steps: false,
            drift_ppm_max: 1000,
        };
        let mut common = cluster::draw_common(&mut rng, leases.as_ref(), mix);
        if let Some(l) = &leases
            && rng.random_bool(0.5)
        {
            common.plan.extend(cluster::zombie_faults(&mut rng, &common.hosts(), l, mix.progress_max));
        }
        if rng.random_bool(0.35) {
            common.arm(common::crash_point(&mut rng, &kaas_core::partition::log::compact::CRASH_POINTS, 6));
        }
        Compaction {
            common,
            leases,
            partitions: rng.random_range(1..=2),
            producers,
            txns_per_producer,
            abort_per_mille: rng.random_range(150..450),
            plain_writes,
            keys: rng.random_range(2..=6),
            tombstone_per_mille: rng.random_range(0..200),
            segment_bytes: rng.random_range(300..1500),
            min_cleanable_ratio: [0.0, 0.1, 0.5][rng.random_range(0..3)],
            cleaner_backoff_ms: rng.random_range(20..1000),
            delete_retention_ms: [0, 500, 5000, 86_400_000][rng.random_range(0..4)],
            dedupe_entries: [2, 5, 1000][rng.random_range(0..3)],
            transaction_timeout_ms: rng.random_range(4_000..10_000),
            cleaner_threads: rng.random_range(1..=2),
            cleaner_io_buffer: [256, 2048, 512 << 10][rng.random_range(0..3)],
        }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let config = BrokerConfig {
            log_segment_bytes: self.segment_bytes,
            log_cleanup_policy: "compact".into(),
            log_cleaner_backoff_ms: self.cleaner_backoff_ms,
            log_cleaner_min_cleanable_ratio: self.min_cleanable_ratio,
            log_cleaner_delete_retention_ms: self.delete_retention_ms,
            // The map's budget is per pass: the setting is shared among the threads.
            log_cleaner_dedupe_buffer_size: self.dedupe_entries * 24 * u64::from(self.cleaner_threads),
            log_cleaner_threads: self.cleaner_threads,
            log_cleaner_io_buffer_size: self.cleaner_io_buffer,
            log_cleaner_io_buffer_load_factor: 1.0,
            ..BrokerConfig::default()
        };
        let config = match &self.leases {
            Some(leases) => leases.apply(config),
            None => config,
        };
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let txns = SharedTxns::default();
        let state = Shared2::default();
        let workload = workload(self.clone(), world.clone(), txns.clone(), state.clone(), run.volume.clone());
        run.sim.client("clients", workload);
        let progress = || {
            let state = state.lock().unwrap();
            txns.lock().unwrap().ended + state.plain_acked + state.fillers_acked
        };
        let mut violations = run.drive(&self.common, progress, LIVENESS_MS);
        violations.extend(world.lock().unwrap().violations.iter().cloned());
        if violations.is_empty() {
            let txns = txns.lock().unwrap();
            let state = state.lock().unwrap();
            let mut writes = state.plain.clone();
            for a in &txns.history.attempts {
                for (partition, id, offset) in &a.values {
                    writes.push(Write::of(*partition, id, *offset, a.fate, true));
                }
            }
            violations = compaction_check::check(&writes, &state.finals);
            violations.extend(state.tombstones_kept.iter().cloned());
        }
        run.finish("compaction", seed, violations)
    }
}

/// What the plain producer and the final read leave for the checker.
#[derive(Default)]
struct State {
    plain: Vec<Write>,
    plain_acked: usize,
    finals: BTreeMap<i32, FinalLog>,
    fillers_acked: usize,
    /// tombstone-kept violations of the liveness rounds.
    tombstones_kept: Vec<String>,
}

type Shared2 = std::sync::Arc<std::sync::Mutex<State>>;

/// A value of `key` (a tombstone with `tombstone`), unique by `name`.
fn value(key: &str, name: &str, tombstone: bool) -> Bytes {
    Bytes::from(format!("{key}|{name}{}", if tombstone { "|del" } else { "" }))
}

/// One transactional producer: `txns_per_producer` transactions over its own keys, each
/// committed or aborted as drawn, a failed write aborting it.
async fn producer(id: usize, t: Compaction, world: Shared, txns: SharedTxns, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let transactional_id = format!("tx-{id}");
    let mut p = Producer::start(
        format!("{transactional_id}.a"),
        transactional_id,
        t.transaction_timeout_ms,
        TOPIC,
        &world,
        &txns,
    )
    .await;
    p.keyed = true;
    for n in 0..t.txns_per_producer {
        let name = format!("{}-t{n}", p.name);
        let partitions: Vec<i32> = (0..t.partitions).filter(|_| rng.random_bool(0.7)).collect();
        let partitions = if partitions.is_empty() { vec![rng.random_range(0..t.partitions)] } else { partitions };
        p.begin(&name);
        let mut wrote = p.add_partitions(&partitions).await.is_ok();
        for &partition in &partitions {
            if !wrote {
                break;
            }
            let values: Vec<Bytes> = (0..rng.random_range(1..=4))
                .map(|r| {
                    let key = format!("t{id}k{}", rng.random_range(0..t.keys));
                    let tombstone = rng.random_range(0..1000) < t.tombstone_per_mille;
                    value(&key, &format!("{name}-p{partition}-r{r}"), tombstone)
                })
                .collect();
            wrote &= matches!(p.produce(partition, &values).await, Outcome::Ok(_));
        }
        let commit = wrote && rng.random_range(0..1000) >= t.abort_per_mille;
        let fate = p.end(commit).await;
        p.settle(fate);
        if !wrote || fate == Fate::Unknown {
            let current = p.ids;
            p.init(Some(current)).await;
        }
    }
    txns.lock().unwrap().producers_done += 1;
}

/// The plain producer: one keyed record a batch, outside any producer state, each retried until
/// acked; every try is a write of its own (an unanswered one may have landed).
async fn plain(t: Compaction, world: Shared, state: Shared2, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut client = workloads::client(&world, "plain");
    for n in 0..t.plain_writes {
        let partition = rng.random_range(0..t.partitions);
        let key = format!("pk{}", rng.random_range(0..t.keys));
        let tombstone = rng.random_range(0..1000) < t.tombstone_per_mille;
        for attempt in 0.. {
            let id = value(&key, &format!("plain-{n}-a{attempt}"), tombstone);
            let outcome = client.produce_messages(TOPIC, partition, &[message_of(&id)], common::now_ms()).await;
            let acked = match outcome {
                Outcome::Ok(offset) => Some(offset),
                _ => None,
            };
            // Refused outright (not a storage error): never written.
            let maybe = !matches!(outcome, Outcome::Failed(code) if code != crate::client::KAFKA_STORAGE_ERROR);
            {
                let mut s = state.lock().unwrap();
                if acked.is_some() || maybe {
                    let fate = if acked.is_some() { Fate::Committed } else { Fate::Unknown };
                    s.plain.push(Write::of(partition, &id, acked, fate, false));
                }
                s.plain_acked += usize::from(acked.is_some());
            }
            if acked.is_some() {
                break;
            }
            backoff().await;
        }
    }
}

async fn workload(
    t: Compaction,
    world: Shared,
    txns: SharedTxns,
    state: Shared2,
    volume: SimVolume,
) -> turmoil::Result {
    workloads::create_topic(&world, TOPIC, t.partitions).await;
    let producers: Vec<_> = (0..t.producers)
        .map(|id| {
            let seed = t.common.workload_seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tokio::spawn(producer(id, t.clone(), world.clone(), txns.clone(), seed))
        })
        .collect();
    let plain = tokio::spawn(plain(t.clone(), world.clone(), state.clone(), t.common.workload_seed ^ 0x5eed));
    for p in producers {
        p.await?;
    }
    plain.await?;
    // The cleaner's passes run on: give them a few turns before the read.
    tokio::time::sleep(Duration::from_millis(3 * t.cleaner_backoff_ms + 2000)).await;
    let mut client = workloads::client(&world, "final-read");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(SETTLE_MS);
    for partition in 0..t.partitions {
        let before = active_base(&volume, partition);
        let records = match read_all(&mut client, partition, deadline).await {
            Ok(records) => records,
            Err(why) => {
                world.lock().unwrap().violations.push(why);
                Vec::new()
            }
        };
        let after = active_base(&volume, partition);
        let active_base = before.filter(|&b| Some(b) == after);
        state.lock().unwrap().finals.insert(partition, FinalLog { records, active_base });
    }
    if t.delete_retention_ms <= TOMBSTONE_WAIT_MAX_MS {
        let kept = tombstones_go(&t, &world, &state).await;
        state.lock().unwrap().tombstones_kept = kept;
    }
    Ok(())
}

/// The liveness rounds: fillers (one key of their own; every other round enough to fill two
/// segments, so the tombstones' segments close, else one) on every partition, then the
/// retention and a few cleaner turns, until no tombstone written before the first filler is
/// read. Answers what is still there after the last round.
async fn tombstones_go(t: &Compaction, world: &Shared, state: &Shared2) -> Vec<String> {
    let mut client = workloads::client(world, "fillers");
    // Where each partition's fillers begin: every tombstone below was written by the run.
    let mut below: BTreeMap<i32, i64> = BTreeMap::new();
    let mut rounds = TOMBSTONE_ROUNDS;
    let mut kept = Vec::new();
    let mut round = 0;
    while round < rounds {
        let fillers = if round % 2 == 0 { 2 * t.segment_bytes as usize / 60 + 2 } else { 1 };
        for partition in 0..t.partitions {
            for n in 0..fillers {
                let id = value("fill", &format!("p{partition}-r{round}-{n}"), false);
                let offset = loop {
                    match client.produce_messages(TOPIC, partition, &[message_of(&id)], common::now_ms()).await {
                        Outcome::Ok(offset) => break offset,
                        _ => backoff().await,
                    }
                };
                below.entry(partition).or_insert(offset);
                state.lock().unwrap().fillers_acked += 1;
            }
        }
        if round == 0 {
            let batches = below.values().max().copied().unwrap_or(0);
            rounds = rounds.max(TOMBSTONE_ROUNDS + usize::try_from(batches / 3).unwrap_or(0));
        }
        let wait = t.delete_retention_ms as u64 + 3 * t.cleaner_backoff_ms + 2000;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        kept.clear();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(SETTLE_MS);
        for (&partition, &below) in &below {
            let Ok(records) = read_all(&mut client, partition, deadline).await else { continue };
            for r in records.iter().filter(|r| r.tombstone && r.offset < below) {
                kept.push(format!(
                    "tombstone-kept: p{partition} {}'s tombstone at {} is there after {} rounds of \
                     {} ms past its delete.retention.ms",
                    r.key,
                    r.offset,
                    round + 1,
                    wait
                ));
            }
        }
        if kept.is_empty() {
            break;
        }
        round += 1;
    }
    kept
}

/// The base offset of the partition's active segment: its newest `.log` file.
fn active_base(volume: &SimVolume, partition: i32) -> Option<i64> {
    let dir = format!("{TOPIC}-{partition}");
    let files = volume.files_under(&dir);
    let bases = files.iter().filter_map(|(path, _)| {
        let name = path.rsplit('/').next()?.strip_suffix(".log")?;
        name.split('-').next()?.parse::<i64>().ok()
    });
    bases.max()
}

/// The whole partition, read_committed, once every transaction has ended (or the deadline).
async fn read_all(
    client: &mut crate::client::Client,
    partition: i32,
    deadline: tokio::time::Instant,
) -> Result<Vec<Read>, String> {
    let mut records = Vec::new();
    let mut offset = 0;
    let mut stuck = 0;
    loop {
        match client.fetch_committed(TOPIC, partition, offset, 100).await {
            Outcome::Ok(f) if f.next_offset == offset && offset < f.last_stable_offset => {
                // Nothing comes back below the LSO: a gap a fetch cannot get past.
                stuck += 1;
                if stuck > 100 {
                    return Err(format!("read-stuck: p{partition} answers nothing at {offset}, below its LSO"));
                }
                backoff().await
            }
            Outcome::Ok(f) => {
                stuck = 0;
                for ((at, value), (key, tombstone)) in f.records.iter().zip(&f.keys) {
                    let key = key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default();
                    records.push(Read { offset: *at, key, tombstone: *tombstone, value: value.clone() });
                }
                offset = f.next_offset;
                let settled = f.last_stable_offset == f.high_watermark;
                if offset >= f.last_stable_offset && (settled || tokio::time::Instant::now() > deadline) {
                    return Ok(records);
                }
                if offset >= f.last_stable_offset {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            _ => backoff().await,
        }
    }
}
