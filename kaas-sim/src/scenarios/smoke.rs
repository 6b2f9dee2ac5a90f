//! smoke: one broker host; a producer writes numbered batches with acks=all and retries through
//! crashes (torn writes, slow fsyncs on some seeds); a consumer reads as it goes, resuming from
//! its committed offset after every reconnect and committing what it read; at the end the
//! partition is read back whole. Checks, in the spirit of Jepsen's Kafka checker:
//! - lost-write: an acked batch is not at its offset with its bytes;
//! - inconsistent-offsets: a record read at one offset is later a different one, or gone;
//! - gap / phantom / duplicate: offsets are gapless; nothing appears that was never sent; a
//!   batch appears twice only if an attempt of it was indefinite;
//! - nonmonotonic-hwm: the high watermark a consumer sees moves back;
//! - commit-backwards: a committed offset read back is below one acked earlier;
//! - poll-skip: the consumer never saw some offset below the final high watermark.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Digest, RunResult};
use crate::client::{CORRUPT_READ, KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE, Outcome, WireClient};
use crate::hosts::{self, BROKER_PORT};
use crate::volume::{SimVolume, Torn, VolumeFaults};

const TOPIC: &str = "smoke";
const GROUP: &str = "smoke-readers";
/// A run that has not finished by then has failed its liveness check.
const SIM_SECONDS_MAX: u64 = 600;
/// Once the last fault is over, the workload must finish within this much simulated time.
const LIVENESS_MS: u64 = 60_000;

/// The seed's choice of workload and faults (swarm testing).
#[derive(Debug, Clone)]
struct Knobs {
    batches: usize,
    records_per_batch: usize,
    /// Bytes of padding in each value, so that batches span several disk blocks.
    value_padding: usize,
    /// Producers writing at once (batch i is written by producer i % producers).
    producers: usize,
    /// When to crash the broker, each once.
    crashes: Vec<CrashAt>,
    /// The consumer's fetch max_wait_ms: 0 polls, more long-polls.
    consumer_max_wait_ms: i32,
    /// The network's largest message latency.
    max_message_latency_ms: u64,
    /// Network partitions between the broker and the clients: (start ms, length ms).
    partitions: Vec<(u64, u64)>,
    /// How far the broker's wall clock is off.
    clock_skew_ms: i64,
    faults: VolumeFaults,
    /// The seed of the broker's BUGGIFY sites, or none to leave them off.
    buggify: Option<u64>,
}

/// A crash trigger: after a number of acked batches, or at a simulated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum CrashAt {
    Acks(usize),
    Millis(u64),
}

impl Knobs {
    fn from_seed(rng: &mut ChaCha8Rng) -> Knobs {
        let batches = rng.random_range(20..120);
        let crash_count = rng.random_range(1..=3);
        let crashes = (0..crash_count)
            .map(|_| {
                if rng.random_bool(0.5) {
                    CrashAt::Acks(rng.random_range(1..=batches))
                } else {
                    CrashAt::Millis(rng.random_range(50..3000))
                }
            })
            .collect();
        let torn = match rng.random_range(0..3) {
            0 => Torn::None,
            1 => Torn::Prefix,
            _ => Torn::Scattered,
        };
        let sync_latency_ms_max = if rng.random_bool(0.7) { rng.random_range(1..=8) } else { 0 };
        Knobs {
            batches,
            records_per_batch: rng.random_range(1..8),
            value_padding: if rng.random_bool(0.5) { rng.random_range(0..400) } else { 0 },
            producers: rng.random_range(1..=3),
            crashes,
            consumer_max_wait_ms: [0, 10, 50][rng.random_range(0..3)],
            max_message_latency_ms: [1, 10, 100][rng.random_range(0..3)],
            partitions: (0..rng.random_range(0..=2))
                .map(|_| (rng.random_range(50..3000), rng.random_range(100..3000)))
                .collect(),
            clock_skew_ms: rng.random_range(-5000..=5000),
            faults: VolumeFaults {
                torn,
                sync_latency_ms_max,
                io_error_per_mille: if rng.random_bool(0.3) { rng.random_range(1..=20) } else { 0 },
            },
            buggify: rng.random_bool(0.75).then(|| rng.random()),
        }
    }
}

#[derive(Default)]
struct History {
    /// batch number -> base offset, for acked batches
    acked: BTreeMap<usize, i64>,
    /// batches with at least one attempt whose outcome is unknown
    indefinite: BTreeSet<usize>,
    producers_done: usize,
    producers: usize,
    /// every record the consumer was served: (offset, value)
    consumed: Vec<(i64, Bytes)>,
    /// every high watermark the consumer was told, in order
    hwms: Vec<i64>,
    /// offsets acked as committed, and what the consumer found committed when it resumed
    commits_acked: Vec<i64>,
    violations: Vec<String>,
    /// the final read: (offset, value)
    read: Vec<(i64, Bytes)>,
    high_watermark: i64,
    events: Digest,
    /// Every client call and its outcome, in order, for the JSONL history of a failing seed.
    log: Vec<serde_json::Value>,
}

impl History {
    fn record(&mut self, client: &str, op: &str, outcome: &str, detail: serde_json::Value) {
        let t_ms = turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64;
        self.log
            .push(serde_json::json!({"t_ms": t_ms, "client": client, "op": op, "outcome": outcome, "detail": detail}));
    }
}

fn outcome_name<T>(outcome: &Outcome<T>) -> String {
    match outcome {
        Outcome::Ok(_) => "ok".into(),
        Outcome::Failed(code) => format!("failed:{code}"),
        Outcome::Indefinite => "indefinite".into(),
    }
}

fn value(batch: usize, record: usize, padding: usize) -> Bytes {
    Bytes::from(format!("b{batch:05}-r{record}-{}", "p".repeat(padding)))
}

async fn connect() -> WireClient {
    loop {
        if let Ok(client) = WireClient::connect("broker", BROKER_PORT).await {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn now_ms() -> i64 {
    crate::env::EPOCH_MS + turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

async fn create_topic() {
    let mut client = connect().await;
    loop {
        match client.create_topic(TOPIC, 1).await {
            Ok(0) | Ok(36) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(_) => client = connect().await,
        }
    }
}

async fn producer(id: usize, knobs: Knobs, history: Arc<Mutex<History>>) {
    let name = format!("producer-{id}");
    let mut client = connect().await;
    for batch in (id..knobs.batches).step_by(knobs.producers) {
        let values: Vec<Bytes> = (0..knobs.records_per_batch).map(|r| value(batch, r, knobs.value_padding)).collect();
        loop {
            let outcome = client.produce(TOPIC, 0, &values, now_ms()).await;
            let base = if let Outcome::Ok(base) = outcome { base } else { -1 };
            history.lock().unwrap().record(
                &name,
                "produce",
                &outcome_name(&outcome),
                serde_json::json!({"batch": batch, "base_offset": base}),
            );
            match outcome {
                Outcome::Ok(base) => {
                    let mut h = history.lock().unwrap();
                    h.acked.insert(batch, base);
                    h.events.feed_u64(batch as u64);
                    h.events.feed_u64(base as u64);
                    break;
                }
                Outcome::Failed(KAFKA_STORAGE_ERROR) => {
                    // The volume failed mid-write: the batch may or may not be in the log.
                    history.lock().unwrap().indefinite.insert(batch);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Outcome::Indefinite => {
                    history.lock().unwrap().indefinite.insert(batch);
                    client = connect().await;
                }
            }
        }
    }
    history.lock().unwrap().producers_done += 1;
}

/// Reads from the committed offset, commits what it read, and starts over from the committed
/// offset after every broken connection, until the producer is done and it has caught up.
async fn consumer(max_wait_ms: i32, history: Arc<Mutex<History>>) {
    'session: loop {
        let mut client = connect().await;
        let resumed = client.committed_offset(GROUP, TOPIC, 0).await;
        let detail =
            if let Outcome::Ok(o) = resumed { serde_json::json!({"committed": o}) } else { serde_json::json!({}) };
        history.lock().unwrap().record("consumer", "offset-fetch", &outcome_name(&resumed), detail);
        let committed = match resumed {
            Outcome::Ok(offset) => offset,
            _ => continue 'session,
        };
        {
            let mut h = history.lock().unwrap();
            if let Some(&last) = h.commits_acked.last()
                && committed < last
            {
                h.violations.push(format!("commit-backwards: resumed at {committed} after {last} was acked"));
            }
        }
        let mut position = committed.max(0);
        loop {
            // Caught up means: nothing left at a high watermark read after the last ack.
            let all_acked = {
                let h = history.lock().unwrap();
                h.producers_done == h.producers
            };
            let fetched = client.fetch(TOPIC, 0, position, max_wait_ms).await;
            let detail = match &fetched {
                Outcome::Ok((records, hwm)) => {
                    serde_json::json!({"offset": position, "records": records.len(), "hwm": hwm})
                }
                _ => serde_json::json!({"offset": position}),
            };
            history.lock().unwrap().record("consumer", "fetch", &outcome_name(&fetched), detail);
            let (records, hwm) = match fetched {
                Outcome::Ok(answer) => answer,
                Outcome::Failed(CORRUPT_READ) => {
                    let mut h = history.lock().unwrap();
                    h.violations.push(format!("corrupt-read: the batch at offset {position} failed its CRC"));
                    return;
                }
                Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                    // Only consumed offsets are committed, so the log lost what was read.
                    let mut h = history.lock().unwrap();
                    h.violations.push(format!("lost-write: position {position} is past the end of the log"));
                    return;
                }
                Outcome::Failed(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                Outcome::Indefinite => continue 'session,
            };
            let caught_up = {
                let mut h = history.lock().unwrap();
                h.hwms.push(hwm);
                for (offset, v) in &records {
                    h.events.feed_u64(*offset as u64);
                    h.consumed.push((*offset, v.clone()));
                }
                all_acked && records.is_empty() && position >= hwm
            };
            if caught_up {
                return;
            }
            if let Some((last, _)) = records.last() {
                position = last + 1;
                let committed = client.commit_offset(GROUP, TOPIC, 0, position).await;
                history.lock().unwrap().record(
                    "consumer",
                    "commit",
                    &outcome_name(&committed),
                    serde_json::json!({"offset": position}),
                );
                match committed {
                    Outcome::Ok(()) => history.lock().unwrap().commits_acked.push(position),
                    Outcome::Failed(_) => {}
                    Outcome::Indefinite => continue 'session,
                }
            }
        }
    }
}

/// Reads the whole partition once the producer and consumer are done.
async fn final_read(history: Arc<Mutex<History>>) -> (Vec<(i64, Bytes)>, i64) {
    let mut client = connect().await;
    let mut offset = 0;
    let mut read = Vec::new();
    loop {
        match client.fetch(TOPIC, 0, offset, 100).await {
            Outcome::Ok((records, hwm)) => {
                if let Some((last, _)) = records.last() {
                    offset = last + 1;
                }
                read.extend(records);
                if offset >= hwm {
                    let mut h = history.lock().unwrap();
                    for (o, v) in &read {
                        h.events.feed_u64(*o as u64);
                        h.events.feed(v);
                    }
                    return (read, hwm);
                }
            }
            Outcome::Failed(CORRUPT_READ) => {
                let mut h = history.lock().unwrap();
                h.violations.push(format!("corrupt-read: the batch at offset {offset} failed its CRC"));
                return (read, offset);
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Outcome::Indefinite => client = connect().await,
        }
    }
}

async fn workload(knobs: Knobs, history: Arc<Mutex<History>>) -> turmoil::Result {
    create_topic().await;
    history.lock().unwrap().producers = knobs.producers;
    let producers: Vec<_> =
        (0..knobs.producers).map(|id| tokio::spawn(producer(id, knobs.clone(), history.clone()))).collect();
    let consuming = tokio::spawn(consumer(knobs.consumer_max_wait_ms, history.clone()));
    for p in producers {
        p.await?;
    }
    consuming.await?;
    let (read, hwm) = final_read(history.clone()).await;
    let mut h = history.lock().unwrap();
    h.read = read;
    h.high_watermark = hwm;
    Ok(())
}

fn check(knobs: &Knobs, h: &History) -> Vec<String> {
    let mut violations = h.violations.clone();
    let by_offset: BTreeMap<i64, &Bytes> = h.read.iter().map(|(o, v)| (*o, v)).collect();
    if by_offset.len() != h.read.len() {
        violations.push("inconsistent-offsets: two records read at one offset".into());
    }
    for (expected, (offset, _)) in h.read.iter().enumerate() {
        if *offset != expected as i64 {
            violations.push(format!("gap: offset {offset} read where {expected} was next"));
            break;
        }
    }
    if h.high_watermark != h.read.len() as i64 {
        violations.push(format!("hwm {} but {} records readable", h.high_watermark, h.read.len()));
    }
    for (batch, base) in &h.acked {
        for r in 0..knobs.records_per_batch {
            let offset = base + r as i64;
            match by_offset.get(&offset) {
                Some(v) if **v == value(*batch, r, knobs.value_padding) => {}
                Some(v) => violations
                    .push(format!("lost-write: offset {offset} holds {v:?}, acked as batch {batch} record {r}")),
                None => violations.push(format!("lost-write: acked batch {batch} missing at offset {offset}")),
            }
        }
    }
    let mut copies: BTreeMap<&Bytes, usize> = BTreeMap::new();
    for (_, v) in &h.read {
        *copies.entry(v).or_default() += 1;
    }
    for (v, n) in copies {
        let text = String::from_utf8_lossy(v);
        let batch: Option<usize> =
            text.strip_prefix('b').and_then(|s| s.split('-').next()).and_then(|s| s.parse().ok());
        match batch {
            Some(b) if b < knobs.batches && (n == 1 || h.indefinite.contains(&b)) => {}
            Some(b) if b < knobs.batches => {
                violations.push(format!("duplicate: {text:?} appears {n} times without an indefinite attempt"))
            }
            _ => violations.push(format!("phantom: {text:?} was never sent")),
        }
    }
    for (offset, v) in &h.consumed {
        if by_offset.get(offset) != Some(&v) {
            violations.push(format!(
                "inconsistent-offsets: consumed {v:?} at offset {offset}, which the log no longer holds"
            ));
            break;
        }
    }
    if let Some(w) = h.hwms.windows(2).find(|w| w[1] < w[0]) {
        violations.push(format!("nonmonotonic-hwm: the consumer saw the high watermark go from {} to {}", w[0], w[1]));
    }
    let seen: BTreeSet<i64> = h.consumed.iter().map(|(o, _)| *o).collect();
    if let Some(missed) = (0..h.high_watermark).find(|o| !seen.contains(o)) {
        violations.push(format!("poll-skip: the consumer never saw offset {missed}"));
    }
    violations
}

pub fn run(seed: u64) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = Knobs::from_seed(&mut rng);
    let volume = SimVolume::new(rng.random(), knobs.faults);
    kaas_core::sim::set_buggify(knobs.buggify);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(SIM_SECONDS_MAX))
        .tick_duration(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(knobs.max_message_latency_ms))
        .build();
    let config = BrokerConfig { group_initial_rebalance_delay_ms: 0, ..BrokerConfig::default() };
    hosts::add_broker(&mut sim, "broker", volume.clone(), rng.random(), knobs.clock_skew_ms, config);
    let history = Arc::new(Mutex::new(History::default()));
    sim.client("clients", workload(knobs.clone(), history.clone()));

    let mut violations = Vec::new();
    let mut pending_crashes = knobs.crashes.clone();
    // (at ms, partition or repair), in time order.
    let mut network: Vec<(u64, bool)> =
        knobs.partitions.iter().flat_map(|&(at, len)| [(at, true), (at + len, false)]).collect();
    network.sort_unstable();
    let mut network = network.into_iter().peekable();
    let mut quiet_since: Option<u64> = None;
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                violations.push(format!("liveness: {e}"));
                break;
            }
        }
        let acked = history.lock().unwrap().acked.len();
        let now_ms = sim.elapsed().as_millis() as u64;
        let due = pending_crashes.iter().position(|c| match *c {
            CrashAt::Acks(n) => acked >= n,
            CrashAt::Millis(t) => now_ms >= t,
        });
        while let Some((_, partition)) = network.next_if(|&(at, _)| now_ms >= at) {
            if partition {
                sim.partition("broker", "clients");
            } else {
                sim.repair("broker", "clients");
            }
        }
        if let Some(i) = due {
            pending_crashes.remove(i);
            sim.crash("broker");
            volume.crash("broker");
            sim.bounce("broker");
        }
        // The liveness phase: faults have stopped, so everything must converge, and soon.
        if pending_crashes.is_empty() && network.peek().is_none() {
            let since = *quiet_since.get_or_insert(now_ms);
            if now_ms > since + LIVENESS_MS {
                violations.push(format!("liveness: not done {} s after the last fault", LIVENESS_MS / 1000));
                break;
            }
        }
    }
    let h = history.lock().unwrap();
    if violations.is_empty() {
        violations = check(&knobs, &h);
    }
    violations.extend(volume.violations());
    let history_file = if violations.is_empty() { None } else { write_history(seed, &knobs, &h.log) };
    let mut trace = Digest::default();
    trace.feed_u64(h.events.finish());
    trace.feed_u64(volume.digest());
    trace.feed_u64(sim.elapsed().as_millis() as u64);
    let options = format!("{knobs:?} buggify_sites={:?}", kaas_core::sim::buggify_enabled());
    kaas_core::sim::set_buggify(None);
    RunResult {
        options,
        pass: violations.is_empty(),
        trace: trace.finish(),
        sim_seconds: sim.elapsed().as_secs_f64(),
        violations,
        history: history_file,
    }
}

/// Writes a failing seed's history as JSONL under target/sim-history/; returns its path.
fn write_history(seed: u64, knobs: &Knobs, log: &[serde_json::Value]) -> Option<String> {
    let dir = std::path::Path::new("target/sim-history");
    std::fs::create_dir_all(dir).ok()?;
    let path = dir.join(format!("smoke-{seed}.jsonl"));
    let mut text = serde_json::json!({"knobs": format!("{knobs:?}")}).to_string();
    text.push('\n');
    for line in log {
        text.push_str(&line.to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).ok()?;
    Some(path.display().to_string())
}
