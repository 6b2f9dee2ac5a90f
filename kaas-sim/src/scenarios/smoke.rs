//! smoke: one broker host and one partition. Producers write numbered batches with acks=all
//! (or 1 or 0, per producer) and retry through crashes, graceful restarts, partitions and held
//! messages; a consumer reads as it goes, resuming from its committed offset after every broken
//! connection and committing what it read; at the end the partition is read back whole and
//! every checker of `crate::checkers` runs over the history.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::RunResult;
use super::common::{self, Batch, Shared};
use crate::checkers::{self, Commit, Resume, Session};
use crate::client::{CORRUPT_READ, OFFSET_OUT_OF_RANGE, Outcome};
use crate::faults::{self, Planned};
use crate::history::outcome_name;
use crate::hosts;
use crate::volume::{SimVolume, VolumeFaults};

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
    /// The acks of each producer (batch i is written by producer i % producers).
    producer_acks: Vec<i16>,
    /// The consumer's fetch max_wait_ms: 0 polls, more long-polls.
    consumer_max_wait_ms: i32,
    /// The network's largest message latency.
    max_message_latency_ms: u64,
    /// How far the broker's wall clock is off.
    clock_skew_ms: i64,
    faults: VolumeFaults,
    /// The seed of the broker's BUGGIFY sites, or none to leave them off.
    buggify: Option<u64>,
    plan: Vec<Planned>,
}

impl Knobs {
    fn from_seed(rng: &mut ChaCha8Rng) -> Knobs {
        let batches = rng.random_range(20..120);
        let producers = rng.random_range(1..=3);
        // Mostly acks=all; acks=1 is as durable here (the volume is the replica); acks=0 is
        // fire and forget, so its batches are indefinite.
        let producer_acks = (0..producers).map(|_| [-1, -1, 1, 0][rng.random_range(0..4)]).collect();
        let plan = common::broker_faults(rng, batches);
        Knobs {
            batches,
            records_per_batch: rng.random_range(1..8),
            value_padding: if rng.random_bool(0.5) { rng.random_range(0..400) } else { 0 },
            producer_acks,
            consumer_max_wait_ms: [0, 10, 50][rng.random_range(0..3)],
            max_message_latency_ms: [1, 10, 100][rng.random_range(0..3)],
            clock_skew_ms: rng.random_range(-5000..=5000),
            faults: common::volume_faults(rng),
            buggify: rng.random_bool(0.75).then(|| rng.random()),
            plan,
        }
    }
}

fn value(batch: usize, record: usize, padding: usize) -> Bytes {
    Bytes::from(format!("b{batch:05}-r{record}-{}", "p".repeat(padding)))
}

/// Producer `id`'s share of the batches: batch i is written by producer i % producers.
fn batches_of(id: usize, knobs: &Knobs) -> Vec<Batch> {
    (id..knobs.batches)
        .step_by(knobs.producer_acks.len())
        .map(|b| Batch {
            id: b as u64,
            partition: 0,
            values: (0..knobs.records_per_batch).map(|r| value(b, r, knobs.value_padding)).collect(),
        })
        .collect()
}

/// Reads from the committed offset, commits what it read, and starts over from the committed
/// offset after every broken connection, until the producers are done and it has caught up.
async fn consumer(knobs: Knobs, world: Shared) {
    let producers = knobs.producer_acks.len();
    'session: loop {
        let mut client = common::connect("broker").await;
        let sent_seq = world.lock().unwrap().history.next_seq();
        let resumed = client.committed_offset(GROUP, TOPIC, 0).await;
        let committed = {
            let mut w = world.lock().unwrap();
            let detail = match resumed {
                Outcome::Ok(o) => serde_json::json!({"committed": o}),
                _ => serde_json::json!({}),
            };
            w.history.record("consumer", "offset-fetch", &outcome_name(&resumed), detail);
            match resumed {
                Outcome::Ok(offset) => {
                    w.partitions.entry(0).or_default().resumes.push(Resume {
                        consumer: "consumer".into(),
                        sent_seq,
                        committed: offset,
                    });
                    offset
                }
                _ => continue 'session,
            }
        };
        let mut position = committed.max(0);
        world.lock().unwrap().partitions.entry(0).or_default().sessions.push(Session {
            consumer: "consumer".into(),
            start: position,
            records: Vec::new(),
            high_watermarks: Vec::new(),
        });
        loop {
            // Caught up means: nothing left at a high watermark read after the last ack.
            let all_acked = world.lock().unwrap().producers_done == producers;
            let fetched = client.fetch(TOPIC, 0, position, knobs.consumer_max_wait_ms).await;
            let last = {
                let mut w = world.lock().unwrap();
                let detail = match &fetched {
                    Outcome::Ok((records, hwm)) => {
                        serde_json::json!({"offset": position, "records": records.len(), "hwm": hwm})
                    }
                    _ => serde_json::json!({"offset": position}),
                };
                w.history.record("consumer", "fetch", &outcome_name(&fetched), detail);
                match fetched {
                    Outcome::Ok((records, hwm)) => {
                        let session = w.partitions.entry(0).or_default().sessions.last_mut().expect("started");
                        session.high_watermarks.push(hwm);
                        session.records.extend(records.iter().cloned());
                        if all_acked && records.is_empty() && position >= hwm {
                            return;
                        }
                        records.last().map(|(offset, _)| *offset)
                    }
                    Outcome::Failed(CORRUPT_READ) => {
                        w.violations.push(format!("corrupt-read: the batch at offset {position} failed its CRC"));
                        return;
                    }
                    Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                        // Only consumed offsets are committed, so the log lost what was read.
                        w.violations.push(format!("lost-write: position {position} is past the end of the log"));
                        return;
                    }
                    Outcome::Failed(_) => None,
                    Outcome::Indefinite => continue 'session,
                }
            };
            let Some(last) = last else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            position = last + 1;
            let committed = client.commit_offset(GROUP, TOPIC, 0, position).await;
            let mut w = world.lock().unwrap();
            let detail = serde_json::json!({"offset": position});
            let acked_seq = w.history.record("consumer", "commit", &outcome_name(&committed), detail);
            match committed {
                Outcome::Ok(()) => w.partitions.entry(0).or_default().commits.push(Commit {
                    consumer: "consumer".into(),
                    acked_seq,
                    offset: position,
                }),
                Outcome::Failed(_) => {}
                Outcome::Indefinite => continue 'session,
            }
        }
    }
}

async fn workload(knobs: Knobs, world: Shared) -> turmoil::Result {
    common::create_topic("broker", TOPIC, 1).await;
    let producers: Vec<_> = (0..knobs.producer_acks.len())
        .map(|id| {
            let name = format!("producer-{id}");
            tokio::spawn(common::producer(name, TOPIC, knobs.producer_acks[id], batches_of(id, &knobs), world.clone()))
        })
        .collect();
    let consuming = tokio::spawn(consumer(knobs.clone(), world.clone()));
    for p in producers {
        p.await?;
    }
    consuming.await?;
    common::final_committed("broker", GROUP, TOPIC, 0, &world).await;
    let (read, hwm, corrupt) = common::read_partition("broker", TOPIC, 0).await;
    let mut w = world.lock().unwrap();
    w.violations.extend(corrupt);
    w.partitions.entry(0).or_default().read = read;
    w.partitions.entry(0).or_default().high_watermark = hwm;
    Ok(())
}

pub fn run(seed: u64) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = Knobs::from_seed(&mut rng);
    let volume = SimVolume::new(rng.random(), knobs.faults);
    let mut sim = common::simulation(seed, SIM_SECONDS_MAX, knobs.max_message_latency_ms, knobs.buggify);
    let config = BrokerConfig { group_initial_rebalance_delay_ms: 0, ..BrokerConfig::default() };
    let control = hosts::add_broker(&mut sim, "broker", volume.clone(), rng.random(), knobs.clock_skew_ms, config);
    let world = Shared::default();
    sim.client("clients", workload(knobs.clone(), world.clone()));

    let progress = || world.lock().unwrap().partitions.get(&0).map_or(0, |p| p.produced.acked.len());
    let controls = BTreeMap::from([("broker", control)]);
    let mut violations = faults::drive(&mut sim, &volume, &controls, knobs.plan.clone(), progress, LIVENESS_MS);
    let w = world.lock().unwrap();
    violations.extend(w.violations.iter().cloned());
    if violations.is_empty() {
        // Only a run that finished has a final read to check against.
        violations = checkers::check_all(&w.partitions);
    }
    common::finish("smoke", seed, &knobs, violations, &w.history, &volume, &sim)
}
