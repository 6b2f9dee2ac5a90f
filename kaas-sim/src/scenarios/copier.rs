//! txn-copier: consume-transform-produce copiers (KIP-447). Each copier slot owns some
//! partitions of `in` and copies every record to the same partition of `out` in transactions
//! that also commit the input offsets (AddOffsetsToTxn, TxnOffsetCommit). Copier instances
//! crash at random steps and restart (the new instance fences the old one; some old ones go on
//! as zombies), while the broker crashes too, sometimes at an armed step of EndTxn.
//!
//! Afterwards the read_committed output must hold exactly one copy of each input record
//! (invariant 6): a missing copy is an input offset committed without its output, a second
//! copy an output committed without its offset. The group's final committed offsets must be
//! the end of the input, and the output's LSO its HWM.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::RunResult;
use super::common::{self, Shared};
use crate::checkers::transactions as txn_check;
use crate::client::{Outcome, ProducerStamp, WireClient};
use crate::faults::{self, Planned};
use crate::history::outcome_name;
use crate::hosts;
use crate::volume::SimVolume;

const INPUT: &str = "in";
const OUTPUT: &str = "out";
const GROUP: &str = "copiers";
const SIM_SECONDS_MAX: u64 = 1200;
const LIVENESS_MS: u64 = 90_000;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const STORAGE: i16 = 56;

#[derive(Debug, Clone)]
struct Knobs {
    partitions: i32,
    records_per_partition: usize,
    slots: i32,
    /// Per mille: the chance that an instance crashes at a given step of a transaction.
    crash_per_mille: u32,
    /// Per mille: the chance that a crashed instance lives on as a zombie.
    zombie_per_mille: u32,
    transaction_timeout_ms: i32,
    crash_point: Option<(&'static str, u32)>,
    segment_bytes: u64,
    max_message_latency_ms: u64,
    clock_skew_ms: i64,
    faults: crate::volume::VolumeFaults,
    buggify: Option<u64>,
    plan: Vec<Planned>,
}

impl Knobs {
    fn from_seed(rng: &mut ChaCha8Rng) -> Knobs {
        let partitions = rng.random_range(1..=3);
        let records_per_partition = rng.random_range(20..80);
        let crash_point = rng.random_bool(0.5).then(|| common::crash_point(rng, 10));
        let mut plan = common::broker_faults(rng, partitions as usize * records_per_partition);
        if crash_point.is_some() {
            plan.retain(|p| !matches!(p.fault, faults::Fault::Crash { .. }));
        }
        Knobs {
            partitions,
            records_per_partition,
            slots: rng.random_range(1..=partitions),
            crash_per_mille: rng.random_range(10..60),
            zombie_per_mille: rng.random_range(0..600),
            transaction_timeout_ms: rng.random_range(3_000..10_000),
            crash_point,
            segment_bytes: rng.random_range(2048..32_768),
            max_message_latency_ms: [1, 10, 50][rng.random_range(0..3)],
            clock_skew_ms: rng.random_range(-2000..=2000),
            faults: common::volume_faults(rng),
            buggify: rng.random_bool(0.75).then(|| rng.random()),
            plan,
        }
    }
}

#[derive(Default)]
struct Copies {
    /// The input as written: offsets per partition.
    input: BTreeMap<i32, Vec<i64>>,
    input_end: BTreeMap<i32, i64>,
    /// Input records copied by committed transactions, as the copiers count them (progress).
    copied: usize,
    output: BTreeMap<i32, txn_check::FinalRead>,
    committed_at_end: BTreeMap<i32, i64>,
}

type SharedCopies = Arc<Mutex<Copies>>;

fn copy_of(partition: i32, offset: i64) -> Bytes {
    Bytes::from(format!("copy:{partition}:{offset}"))
}

/// Why an instance stopped.
enum Stop {
    /// Its partitions are copied to the end and committed.
    Done,
    /// It crashed (deliberately) mid-transaction, or a step failed: the next instance takes
    /// over. A crashed instance may live on as a zombie with what it had.
    Crashed(Option<Zombie>),
}

/// What a crashed instance holds when it comes back as a zombie: its connection, its id and
/// epoch, and the input offsets of its unfinished transaction.
struct Zombie {
    name: String,
    client: WireClient,
    ids: (i64, i16),
    offsets: Vec<(i32, i64)>,
}

/// Records and retries a call while the broker answers that a transition is under way.
macro_rules! retrying {
    ($world:expr, $name:expr, $ids:expr, $op:literal, $call:expr) => {{
        let mut tries = 0;
        loop {
            let outcome = $call;
            let detail = serde_json::json!({"ids": $ids});
            $world.lock().unwrap().history.record(&$name, $op, &outcome_name(&outcome), detail);
            match outcome {
                Outcome::Failed(CONCURRENT_TRANSACTIONS | COORDINATOR_NOT_AVAILABLE | UNSTABLE_OFFSET_COMMIT)
                    if tries < 100 =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                other => break other,
            }
        }
    }};
}

/// One copier instance of `slot`: copies its partitions from the group's committed offsets.
async fn instance(
    name: String,
    slot: i32,
    knobs: &Knobs,
    world: &Shared,
    copies: &SharedCopies,
    rng: &mut ChaCha8Rng,
) -> Stop {
    let tid = format!("copier-{slot}");
    let mine: Vec<i32> = (0..knobs.partitions).filter(|p| p % knobs.slots == slot).collect();
    let mut client = common::connect("broker").await;
    let timeout = knobs.transaction_timeout_ms;
    let init = retrying!(world, name, (), "init-producer-id", client.init_txn_producer(&tid, timeout, None).await);
    let Outcome::Ok(ids) = init else { return Stop::Crashed(None) };
    let committed =
        retrying!(world, name, ids, "offset-fetch-stable", client.committed_offsets_stable(GROUP, INPUT, &mine).await);
    let Outcome::Ok(committed) = committed else { return Stop::Crashed(None) };
    let mut positions: BTreeMap<i32, i64> = mine.iter().copied().zip(committed.into_iter().map(|o| o.max(0))).collect();
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    loop {
        let ends = copies.lock().unwrap().input_end.clone();
        if positions.iter().all(|(p, o)| *o >= ends[p]) {
            return Stop::Done;
        }
        // Read a few records of each partition not yet at its end.
        let mut batch: Vec<(i32, Vec<i64>, i64)> = Vec::new();
        for (&p, &from) in &positions {
            if from >= ends[&p] {
                continue;
            }
            match client.fetch_committed(INPUT, p, from, 50).await {
                Outcome::Ok(fetched) => {
                    let offsets: Vec<i64> = fetched.records.iter().take(5).map(|(o, _)| *o).collect();
                    let next = offsets.last().map_or(fetched.next_offset, |o| o + 1);
                    if next > from {
                        batch.push((p, offsets, next));
                    }
                }
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Outcome::Indefinite => return Stop::Crashed(None),
            }
        }
        if batch.is_empty() {
            continue;
        }
        let offsets: Vec<(i32, i64)> = batch.iter().map(|(p, _, next)| (*p, *next)).collect();
        let crash = |rng: &mut ChaCha8Rng| rng.random_range(0..1000) < knobs.crash_per_mille;
        let crashed = |client: WireClient, rng: &mut ChaCha8Rng| {
            let lives_on = rng.random_range(0..1000) < knobs.zombie_per_mille;
            let zombie = Zombie { name: format!("{name}-zombie"), client, ids, offsets: offsets.clone() };
            Stop::Crashed(lives_on.then_some(zombie))
        };
        let partitions: Vec<i32> = batch.iter().map(|(p, _, _)| *p).collect();
        let added = retrying!(
            world,
            name,
            ids,
            "add-partitions",
            client.add_partitions_to_txn(&tid, ids, OUTPUT, &partitions).await
        );
        if !matches!(added, Outcome::Ok(())) {
            return Stop::Crashed(None);
        }
        if crash(rng) {
            return crashed(client, rng);
        }
        for (p, offsets, _) in &batch {
            if offsets.is_empty() {
                continue;
            }
            let values: Vec<Bytes> = offsets.iter().map(|o| copy_of(*p, *o)).collect();
            let base_sequence = *sequences.get(p).unwrap_or(&0);
            let stamp = ProducerStamp { producer_id: ids.0, producer_epoch: ids.1, base_sequence };
            let outcome = client.produce_txn(&tid, OUTPUT, *p, &values, common::now_ms(), stamp).await;
            let detail = serde_json::json!({"partition": p, "ids": ids, "base_sequence": base_sequence});
            world.lock().unwrap().history.record(&name, "produce-txn", &outcome_name(&outcome), detail);
            if !matches!(outcome, Outcome::Ok(_)) {
                return Stop::Crashed(None);
            }
            sequences.insert(*p, base_sequence + values.len() as i32);
        }
        if crash(rng) {
            return crashed(client, rng);
        }
        let added = retrying!(world, name, ids, "add-offsets", client.add_offsets_to_txn(&tid, ids, GROUP).await);
        if !matches!(added, Outcome::Ok(())) {
            return Stop::Crashed(None);
        }
        let staged = retrying!(
            world,
            name,
            ids,
            "txn-offset-commit",
            client.txn_offset_commit(&tid, ids, GROUP, INPUT, &offsets).await
        );
        if !matches!(staged, Outcome::Ok(())) {
            return Stop::Crashed(None);
        }
        if crash(rng) {
            return crashed(client, rng);
        }
        // EndTxn is retried through lost connections: a retry of a commit that went through
        // is answered as done.
        loop {
            let outcome = client.end_txn(&tid, ids, true).await;
            world.lock().unwrap().history.record(
                &name,
                "end-txn",
                &outcome_name(&outcome),
                serde_json::json!({"ids": ids}),
            );
            match outcome {
                Outcome::Ok(()) => break,
                Outcome::Failed(CONCURRENT_TRANSACTIONS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR | STORAGE) => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Outcome::Failed(_) => return Stop::Crashed(None),
                Outcome::Indefinite => client = common::connect("broker").await,
            }
        }
        let copied: usize = batch.iter().map(|(_, offsets, _)| offsets.len()).sum();
        copies.lock().unwrap().copied += copied;
        for (p, _, next) in batch {
            positions.insert(p, next);
        }
    }
}

/// A crashed instance that comes back after its successor started and tries to finish its
/// transaction: stage its offsets and commit. If any of it took effect, the output would hold
/// copies twice or the offsets skip copies, which the checker sees.
async fn zombie(mut z: Zombie, slot: i32, world: Shared, late_ms: u64) {
    tokio::time::sleep(Duration::from_millis(late_ms)).await;
    let tid = format!("copier-{slot}");
    let record = |op: &str, outcome: &Outcome<()>| {
        world.lock().unwrap().history.record(&z.name, op, &outcome_name(outcome), serde_json::json!({"ids": z.ids}));
    };
    // Its old connection may be gone with a broker crash: a zombie reconnects like anyone.
    if z.client.is_broken() {
        z.client = common::connect("broker").await;
    }
    let added = z.client.add_offsets_to_txn(&tid, z.ids, GROUP).await;
    record("zombie-add-offsets", &added);
    if z.client.is_broken() {
        z.client = common::connect("broker").await;
    }
    let staged = z.client.txn_offset_commit(&tid, z.ids, GROUP, INPUT, &z.offsets).await;
    record("zombie-txn-offset-commit", &staged);
    if z.client.is_broken() {
        z.client = common::connect("broker").await;
    }
    let ended = z.client.end_txn(&tid, z.ids, true).await;
    record("zombie-end-txn", &ended);
}

async fn slot(slot: i32, knobs: Knobs, world: Shared, copies: SharedCopies, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut zombies = Vec::new();
    for n in 0.. {
        let name = format!("copier-{slot}.{n}");
        match instance(name.clone(), slot, &knobs, &world, &copies, &mut rng).await {
            Stop::Done => break,
            Stop::Crashed(None) => {}
            Stop::Crashed(Some(z)) => {
                zombies.push(tokio::spawn(zombie(z, slot, world.clone(), rng.random_range(0..2000))));
            }
        }
    }
    for z in zombies {
        let _ = z.await;
    }
}

async fn write_input(knobs: &Knobs, copies: &SharedCopies) {
    let mut client = common::connect("broker").await;
    for p in 0..knobs.partitions {
        for i in 0..knobs.records_per_partition {
            let value = Bytes::from(format!("in:{p}:{i}"));
            loop {
                match client.produce(INPUT, p, std::slice::from_ref(&value), common::now_ms()).await {
                    Outcome::Ok(_) => break,
                    Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    Outcome::Indefinite => client = common::connect("broker").await,
                }
            }
        }
        // The input as it is: an indefinite attempt may have written a record twice.
        let (read, hwm, _) = common::read_partition("broker", INPUT, p).await;
        let mut c = copies.lock().unwrap();
        c.input.insert(p, read.iter().map(|(o, _)| *o).collect());
        c.input_end.insert(p, hwm);
    }
}

async fn final_reads(knobs: &Knobs, copies: &SharedCopies) {
    let mut client = common::connect("broker").await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(60_000);
    for p in 0..knobs.partitions {
        let read = common::read_committed_to_end(&mut client, OUTPUT, p, deadline).await;
        let committed = loop {
            match client.committed_offsets_stable(GROUP, INPUT, &[p]).await {
                Outcome::Ok(o) => break o[0],
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Outcome::Indefinite => client = common::connect("broker").await,
            }
        };
        let mut c = copies.lock().unwrap();
        c.output.insert(p, read);
        c.committed_at_end.insert(p, committed);
    }
}

async fn workload(knobs: Knobs, world: Shared, copies: SharedCopies, seed: u64) -> turmoil::Result {
    common::create_topic("broker", INPUT, knobs.partitions).await;
    common::create_topic("broker", OUTPUT, knobs.partitions).await;
    write_input(&knobs, &copies).await;
    let tasks: Vec<_> = (0..knobs.slots)
        .map(|s| {
            let seed = seed ^ (s as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tokio::spawn(slot(s, knobs.clone(), world.clone(), copies.clone(), seed))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    final_reads(&knobs, &copies).await;
    Ok(())
}

/// Exactly one copy of each input offset; the committed offsets at the input's end.
fn check(copies: &Copies) -> Vec<String> {
    let mut violations = Vec::new();
    for (p, offsets) in &copies.input {
        let Some(out) = copies.output.get(p) else { continue };
        if out.last_stable_offset < out.high_watermark {
            violations.push(format!(
                "lso-stuck: {OUTPUT}-{p}: last stable offset {} below the high watermark {}",
                out.last_stable_offset, out.high_watermark
            ));
        }
        let mut count: BTreeMap<&[u8], usize> = BTreeMap::new();
        for (_, v) in &out.values {
            *count.entry(v.as_ref()).or_default() += 1;
        }
        for o in offsets {
            match count.get(copy_of(*p, *o).as_ref()).copied().unwrap_or(0) {
                1 => {}
                0 => violations.push(format!("offset-without-output: {INPUT}-{p} offset {o} was never copied")),
                n => violations.push(format!("output-without-offset: {INPUT}-{p} offset {o} copied {n} times")),
            }
        }
        let end = copies.input_end[p];
        let committed = copies.committed_at_end.get(p).copied().unwrap_or(-1);
        if committed != end {
            violations.push(format!("offsets-not-committed: {INPUT}-{p}: committed {committed}, input ends at {end}"));
        }
    }
    violations
}

pub fn run(seed: u64) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = Knobs::from_seed(&mut rng);
    let volume = SimVolume::new(rng.random(), knobs.faults);
    let mut sim = common::simulation(seed, SIM_SECONDS_MAX, knobs.max_message_latency_ms, knobs.buggify);
    kaas_core::sim::set_crash_point(knobs.crash_point);
    let config = BrokerConfig { log_segment_bytes: knobs.segment_bytes, ..BrokerConfig::default() };
    let control = hosts::add_broker(&mut sim, "broker", volume.clone(), rng.random(), knobs.clock_skew_ms, config);
    let world = Shared::default();
    let copies = SharedCopies::default();
    sim.client("clients", workload(knobs.clone(), world.clone(), copies.clone(), rng.random()));
    let progress = || copies.lock().unwrap().copied;
    let controls = BTreeMap::from([("broker", control)]);
    let mut violations = faults::drive(&mut sim, &volume, &controls, knobs.plan.clone(), progress, LIVENESS_MS);
    kaas_core::sim::set_crash_point(None);
    let w = world.lock().unwrap();
    violations.extend(w.violations.iter().cloned());
    if violations.is_empty() {
        violations = check(&copies.lock().unwrap());
    }
    common::finish("txn-copier", seed, &knobs, violations, &w.history, &volume, &sim)
}
