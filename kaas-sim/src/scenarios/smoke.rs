//! smoke: one broker host, one producer that writes numbered batches with acks=all and retries
//! through a crash (with torn unsynced writes on some seeds), then reads the partition back.
//! Checks: every acked batch is at its offset with its bytes (lost write, inconsistent
//! offsets); offsets are gapless; nothing appears that was never sent; a batch appears twice
//! only if an attempt of it was indefinite.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Digest, RunResult};
use crate::client::{Outcome, WireClient};
use crate::hosts::{self, BROKER_PORT};
use crate::volume::SimVolume;

const TOPIC: &str = "smoke";
/// A run that has not finished by then has failed its liveness check.
const SIM_SECONDS_MAX: u64 = 600;

/// The seed's choice of workload and faults (swarm testing).
#[derive(Debug, Clone, Copy)]
struct Knobs {
    batches: usize,
    records_per_batch: usize,
    crash_after_acks: usize,
    torn_writes: bool,
}

impl Knobs {
    fn from_seed(rng: &mut ChaCha8Rng) -> Knobs {
        let batches = rng.random_range(20..120);
        Knobs {
            batches,
            records_per_batch: rng.random_range(1..8),
            crash_after_acks: rng.random_range(1..batches),
            torn_writes: rng.random_bool(0.5),
        }
    }
}

#[derive(Default)]
struct History {
    /// batch number -> base offset, for acked batches
    acked: BTreeMap<usize, i64>,
    /// batches with at least one attempt whose outcome is unknown
    indefinite: Vec<usize>,
    /// the final read: (offset, value)
    read: Vec<(i64, Bytes)>,
    high_watermark: i64,
    events: Digest,
}

fn value(batch: usize, record: usize) -> Bytes {
    Bytes::from(format!("b{batch:05}-r{record}"))
}

async fn connect() -> WireClient {
    loop {
        if let Ok(client) = WireClient::connect("broker", BROKER_PORT).await {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn workload(knobs: Knobs, history: Arc<Mutex<History>>) -> turmoil::Result {
    let mut client = connect().await;
    loop {
        match client.create_topic(TOPIC, 1).await {
            Ok(0) | Ok(36) => break,
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(_) => client = connect().await,
        }
    }
    for batch in 0..knobs.batches {
        let values: Vec<Bytes> = (0..knobs.records_per_batch).map(|r| value(batch, r)).collect();
        loop {
            let now_ms = crate::env::EPOCH_MS + turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64;
            match client.produce(TOPIC, 0, &values, now_ms).await {
                Outcome::Ok(base) => {
                    let mut h = history.lock().unwrap();
                    h.acked.insert(batch, base);
                    h.events.feed_u64(batch as u64);
                    h.events.feed_u64(base as u64);
                    break;
                }
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Outcome::Indefinite => {
                    history.lock().unwrap().indefinite.push(batch);
                    client = connect().await;
                }
            }
        }
    }
    // Read everything back once the broker is reachable.
    let mut offset = 0;
    let mut read = Vec::new();
    let high_watermark = loop {
        match client.fetch(TOPIC, 0, offset, 100).await {
            Outcome::Ok((records, hwm)) => {
                if let Some((last, _)) = records.last() {
                    offset = last + 1;
                }
                read.extend(records);
                if offset >= hwm {
                    break hwm;
                }
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Outcome::Indefinite => client = connect().await,
        }
    };
    let mut h = history.lock().unwrap();
    for (o, v) in &read {
        h.events.feed_u64(*o as u64);
        h.events.feed(v);
    }
    h.read = read;
    h.high_watermark = high_watermark;
    Ok(())
}

fn check(knobs: &Knobs, h: &History) -> Vec<String> {
    let mut violations = Vec::new();
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
                Some(v) if **v == value(*batch, r) => {}
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
            None => violations.push(format!("phantom: {text:?} was never sent")),
            Some(b) if b >= knobs.batches => violations.push(format!("phantom: {text:?} was never sent")),
            Some(b) if n > 1 && !h.indefinite.contains(&b) => {
                violations.push(format!("duplicate: {text:?} appears {n} times without an indefinite attempt"))
            }
            Some(_) => {}
        }
    }
    violations
}

pub fn run(seed: u64) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = Knobs::from_seed(&mut rng);
    let volume = SimVolume::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(SIM_SECONDS_MAX))
        .tick_duration(Duration::from_millis(1))
        .build();
    let config = BrokerConfig { group_initial_rebalance_delay_ms: 0, ..BrokerConfig::default() };
    hosts::add_broker(&mut sim, "broker", volume.clone(), rng.random(), config);
    let history = Arc::new(Mutex::new(History::default()));
    sim.client("producer", workload(knobs, history.clone()));

    let mut violations = Vec::new();
    let mut crashed = false;
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                violations.push(format!("liveness: {e}"));
                break;
            }
        }
        if !crashed && history.lock().unwrap().acked.len() >= knobs.crash_after_acks {
            crashed = true;
            sim.crash("broker");
            let torn = knobs.torn_writes;
            volume.crash(|blocks| if torn { rng.random_range(0..=blocks) } else { 0 });
            sim.bounce("broker");
        }
    }
    let h = history.lock().unwrap();
    if violations.is_empty() {
        violations = check(&knobs, &h);
    }
    let mut trace = Digest::default();
    trace.feed_u64(h.events.finish());
    trace.feed_u64(volume.digest());
    let sim_seconds = sim.elapsed().as_secs_f64();
    trace.feed_u64(sim.elapsed().as_millis() as u64);
    RunResult { pass: violations.is_empty(), trace: trace.finish(), sim_seconds, violations }
}
