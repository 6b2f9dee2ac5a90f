//! What the scenarios share: the seed's choice of volume faults and fault triggers, the shared
//! record of what clients did, and the client steps every workload takes (connect, create the
//! topic, produce numbered batches, read a partition back whole).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::checkers::{PartitionHistory, Resume};
use crate::client::{CORRUPT_READ, KAFKA_STORAGE_ERROR, Outcome, WireClient};
use crate::faults::{Fault, Planned, Trigger};
use crate::history::{History, outcome_name};
use crate::hosts::BROKER_PORT;
use crate::volume::{Torn, VolumeFaults};

pub fn volume_faults(rng: &mut ChaCha8Rng) -> VolumeFaults {
    let torn = match rng.random_range(0..3) {
        0 => Torn::None,
        1 => Torn::Prefix,
        _ => Torn::Scattered,
    };
    VolumeFaults {
        torn,
        sync_latency_ms_max: if rng.random_bool(0.7) { rng.random_range(1..=8) } else { 0 },
        io_error_per_mille: if rng.random_bool(0.3) { rng.random_range(1..=20) } else { 0 },
    }
}

/// A fault trigger: after some of `progress_max` steps of the workload, or within 3 s.
pub fn trigger(rng: &mut ChaCha8Rng, progress_max: usize) -> Trigger {
    if rng.random_bool(0.5) {
        Trigger::Progress(rng.random_range(1..=progress_max))
    } else {
        Trigger::Millis(rng.random_range(50..3000))
    }
}

/// Faults between the broker and the `clients` host: 1 to 3 crashes, sometimes a graceful
/// restart, and up to 2 partitions or held-message spells in the first 3 s.
pub fn broker_faults(rng: &mut ChaCha8Rng, progress_max: usize) -> Vec<Planned> {
    let mut plan: Vec<Planned> = (0..rng.random_range(1..=3))
        .map(|_| Planned { at: trigger(rng, progress_max), fault: Fault::Crash { host: "broker" } })
        .collect();
    if rng.random_bool(0.3) {
        plan.push(Planned { at: trigger(rng, progress_max), fault: Fault::GracefulRestart { host: "broker" } });
    }
    for _ in 0..rng.random_range(0..=2) {
        let at = Trigger::Millis(rng.random_range(50..3000));
        let ms = rng.random_range(100..3000);
        let fault = if rng.random_bool(0.5) {
            Fault::Partition { a: "broker", b: "clients", ms }
        } else {
            Fault::Hold { a: "broker", b: "clients", ms }
        };
        plan.push(Planned { at, fault });
    }
    plan
}

pub async fn connect(host: &str) -> WireClient {
    loop {
        if let Ok(client) = WireClient::connect(host, BROKER_PORT).await {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The wall clock of the clients, for record timestamps.
pub fn now_ms() -> i64 {
    crate::env::EPOCH_MS + turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

pub async fn create_topic(host: &str, topic: &str, partitions: i32) {
    let mut client = connect(host).await;
    loop {
        match client.create_topic(topic, partitions).await {
            Ok(0) | Ok(36) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(_) => client = connect(host).await,
        }
    }
}

/// Reads a whole partition once the workload is done: its records, the high watermark, and a
/// violation if a batch failed its CRC.
pub async fn read_partition(host: &str, topic: &str, partition: i32) -> (Vec<(i64, Bytes)>, i64, Option<String>) {
    let mut client = connect(host).await;
    let mut offset = 0;
    let mut read = Vec::new();
    loop {
        match client.fetch(topic, partition, offset, 100).await {
            Outcome::Ok((records, hwm)) => {
                if let Some((last, _)) = records.last() {
                    offset = last + 1;
                }
                read.extend(records);
                if offset >= hwm {
                    return (read, hwm, None);
                }
            }
            Outcome::Failed(CORRUPT_READ) => {
                let corrupt =
                    format!("corrupt-read: partition {partition}: the batch at offset {offset} failed its CRC");
                return (read, offset, Some(corrupt));
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Outcome::Indefinite => client = connect(host).await,
        }
    }
}

/// A crash point for the seed: one of the EndTxn steps, at its `1..=visits_max`th visit.
pub fn crash_point(rng: &mut ChaCha8Rng, visits_max: u32) -> (&'static str, u32) {
    let sites = kaas_core::txn::coordinator::CRASH_POINTS;
    (sites[rng.random_range(0..sites.len())], rng.random_range(1..=visits_max))
}

/// Reads a partition read_committed from offset 0 on `client`, once the workload is done,
/// until its last stable offset reaches its high watermark (or `deadline` passes: then what
/// is stable). Reconnects as needed.
pub async fn read_committed_to_end(
    client: &mut WireClient,
    topic: &str,
    partition: i32,
    deadline: tokio::time::Instant,
) -> crate::checkers::transactions::FinalRead {
    let mut read = crate::checkers::transactions::FinalRead::default();
    let mut offset = 0;
    loop {
        match client.fetch_committed(topic, partition, offset, 100).await {
            Outcome::Ok(f) => {
                offset = f.next_offset;
                read.values.extend(f.records);
                (read.last_stable_offset, read.high_watermark) = (f.last_stable_offset, f.high_watermark);
                let settled = f.last_stable_offset == f.high_watermark;
                if offset >= f.last_stable_offset && (settled || tokio::time::Instant::now() > deadline) {
                    return read;
                }
                if offset >= f.last_stable_offset {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Outcome::Indefinite => *client = connect("broker").await,
        }
    }
}

/// What the clients did and saw, shared between their tasks (and hosts) and the checkers.
#[derive(Default)]
pub struct World {
    pub history: History,
    pub partitions: BTreeMap<i32, PartitionHistory>,
    pub producers_done: usize,
    /// Anomalies a client saw directly (a corrupt read, a position past the log end).
    pub violations: Vec<String>,
}

pub type Shared = Arc<Mutex<World>>;

/// One batch a producer writes: its id (unique in the run), partition and values.
#[derive(Debug, Clone)]
pub struct Batch {
    pub id: u64,
    pub partition: i32,
    pub values: Vec<Bytes>,
}

/// Writes `batches` in order with `acks`, retrying each until acked (acks=0: sent once).
pub async fn producer(name: String, topic: &'static str, acks: i16, batches: Vec<Batch>, world: Shared) {
    let mut client = connect("broker").await;
    for batch in batches {
        world
            .lock()
            .unwrap()
            .partitions
            .entry(batch.partition)
            .or_default()
            .produced
            .sent
            .insert(batch.id, batch.values.clone());
        loop {
            let outcome = client.produce_acks(topic, batch.partition, &batch.values, now_ms(), acks).await;
            {
                let mut w = world.lock().unwrap();
                let base = if let Outcome::Ok(base) = outcome { base } else { -1 };
                let detail = serde_json::json!({
                    "batch": batch.id, "partition": batch.partition, "acks": acks, "base_offset": base
                });
                w.history.record(&name, "produce", &outcome_name(&outcome), detail);
                let produced = &mut w.partitions.entry(batch.partition).or_default().produced;
                match outcome {
                    Outcome::Ok(base) => {
                        produced.acked.insert(batch.id, base);
                    }
                    // The volume failed mid-write, or no answer came: the batch may be in the log.
                    Outcome::Failed(KAFKA_STORAGE_ERROR) | Outcome::Indefinite => {
                        produced.indefinite.insert(batch.id);
                    }
                    Outcome::Failed(_) => {}
                }
            }
            match outcome {
                Outcome::Ok(_) => break,
                // acks=0 never knows, so it never retries; a dead connection is replaced.
                Outcome::Indefinite if acks == 0 => {
                    if client.is_broken() {
                        client = connect("broker").await;
                    }
                    break;
                }
                Outcome::Indefinite => client = connect("broker").await,
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    if acks == 0 {
        // A connection answers in order, so once a fetch on it is answered, every acks=0 batch
        // sent before it has reached its partition: consumers will see it.
        let _ = client.fetch(topic, 0, 0, 0).await;
    }
    world.lock().unwrap().producers_done += 1;
}

/// Reads the group's committed offset of `partition` once the workload is done, as a last
/// resume: it must not be below any commit acked before.
pub async fn final_committed(host: &str, group: &str, topic: &str, partition: i32, world: &Shared) {
    let mut client = connect(host).await;
    loop {
        let sent_seq = world.lock().unwrap().history.next_seq();
        let outcome = client.committed_offset(group, topic, partition).await;
        {
            let mut w = world.lock().unwrap();
            let detail = serde_json::json!({"partition": partition});
            w.history.record("final-read", "offset-fetch", &outcome_name(&outcome), detail);
            if let Outcome::Ok(committed) = outcome {
                let resume = Resume { consumer: "final-read".into(), sent_seq, committed };
                w.partitions.entry(partition).or_default().resumes.push(resume);
                return;
            }
        }
        if client.is_broken() {
            client = connect(host).await;
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A simulation with the scenarios' shared settings: 1 ms ticks, the seed's network latency,
/// and BUGGIFY switched on (or off) as the knobs say.
pub fn simulation<'a>(
    seed: u64,
    seconds_max: u64,
    max_message_latency_ms: u64,
    buggify: Option<u64>,
) -> turmoil::Sim<'a> {
    kaas_core::sim::set_buggify(buggify);
    turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(seconds_max))
        .tick_duration(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(max_message_latency_ms))
        .build()
}

/// The result of a finished run: the volume's own violations added, the history kept if
/// anything failed, the trace digested from the history, the volume and the simulated time.
pub fn finish(
    scenario: &str,
    seed: u64,
    knobs: &impl std::fmt::Debug,
    mut violations: Vec<String>,
    history: &History,
    volume: &crate::volume::SimVolume,
    sim: &turmoil::Sim<'_>,
) -> super::RunResult {
    violations.extend(volume.violations());
    let options = format!("{knobs:?} buggify_sites={:?}", kaas_core::sim::buggify_enabled());
    kaas_core::sim::set_buggify(None);
    let kept = history.keep(&violations, scenario, seed, &options);
    let mut trace = super::Digest::default();
    trace.feed_u64(history.digest.finish());
    trace.feed_u64(volume.digest());
    trace.feed_u64(sim.elapsed().as_millis() as u64);
    super::RunResult {
        pass: violations.is_empty(),
        trace: trace.finish(),
        sim_seconds: sim.elapsed().as_secs_f64(),
        violations,
        history: kept,
        options,
    }
}
