//! smoke: producers write numbered batches with acks=all (or 1 or 0, per producer) and retry
//! through crashes, graceful restarts, pauses, clock steps and drift, partitions between the
//! clients and the broker or the broker and the volume, and held messages; a consumer reads as
//! it goes, resuming from its committed offset after every broken connection and committing
//! what it read; at the end the partition is read back whole and every checker of
//! `crate::checkers` runs over the history.
//!
//! cluster-smoke: the same over two broker hosts on one volume, each with a data directory of
//! its own and serving its own topic and group (kaas has no cluster mode yet): each workload's
//! clients bootstrap from their broker and find leaders and coordinators by Metadata and
//! FindCoordinator. Faults hit either broker. It shows the several-broker plumbing at work:
//! named broker hosts, the router, faults on any of them, one shared volume.

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers;
use crate::hosts::BrokerSpec;
use crate::workloads::plain::{self, Batch};
use crate::workloads::{self, Shared, consumer};

/// A run that has not finished by then has failed its liveness check.
const SIM_SECONDS_MAX: u64 = 600;
/// Once the last fault is over, the workload must finish within this much simulated time.
const LIVENESS_MS: u64 = 60_000;

/// What one topic's producers and consumer do (swarm testing: the seed chooses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    pub batches: usize,
    pub records_per_batch: usize,
    /// Bytes of padding in each value, so that batches span several disk blocks.
    pub value_padding: usize,
    /// The acks of each producer (batch i is written by producer i % producers).
    pub producer_acks: Vec<i16>,
    /// The consumer's fetch max_wait_ms: 0 polls, more long-polls.
    pub consumer_max_wait_ms: i32,
}

impl Load {
    fn draw(rng: &mut ChaCha8Rng) -> Load {
        let producers = rng.random_range(1..=3);
        Load {
            batches: rng.random_range(20..120),
            records_per_batch: rng.random_range(1..8),
            value_padding: [0, 0, rng.random_range(0..400), rng.random_range(400..1500)][rng.random_range(0..4)],
            // Mostly acks=all; acks=1 is as durable here (the volume is the replica); acks=0 is
            // fire and forget, so its batches are indefinite.
            producer_acks: (0..producers).map(|_| [-1, -1, 1, 0][rng.random_range(0..4)]).collect(),
            consumer_max_wait_ms: [0, 10, 50][rng.random_range(0..3)],
        }
    }

    /// Producer `id`'s share of the batches: batch i is written by producer i % producers.
    fn batches_of(&self, tag: &str, id: usize) -> Vec<Batch> {
        (id..self.batches)
            .step_by(self.producer_acks.len())
            .map(|b| Batch {
                id: b as u64,
                partition: 0,
                values: (0..self.records_per_batch)
                    .map(|r| Bytes::from(format!("{tag}b{b:05}-r{r}-{}", "p".repeat(self.value_padding))))
                    .collect(),
            })
            .collect()
    }
}

/// One topic's workload: producers, a committing consumer, then the final reads.
async fn load(topic: String, group: String, load: Load, world: Shared) {
    workloads::create_topic(&world, &topic, 1).await;
    let producers: Vec<_> = (0..load.producer_acks.len())
        .map(|id| {
            let name = format!("{topic}.producer-{id}");
            let batches = load.batches_of(&format!("{topic}:"), id);
            tokio::spawn(plain::producer(name, topic.clone(), load.producer_acks[id], batches, world.clone()))
        })
        .collect();
    let name = format!("{topic}.consumer");
    let producers_count = load.producer_acks.len();
    let consuming = tokio::spawn(consumer::committing(
        name,
        topic.clone(),
        group.clone(),
        0,
        producers_count,
        load.consumer_max_wait_ms,
        world.clone(),
    ));
    for p in producers {
        let _ = p.await;
    }
    let _ = consuming.await;
    consumer::final_committed(&world, &group, &topic, 0).await;
    consumer::final_read(&world, &topic, 0).await;
}

/// Every check of one topic's workload.
fn check(world: &Shared) -> Vec<String> {
    let w = world.lock().unwrap();
    let mut violations = w.violations.clone();
    if violations.is_empty() {
        // Only a run that finished has a final read to check against.
        violations = checkers::check_all(&w.partitions);
    }
    violations
}

fn acked(world: &Shared) -> usize {
    world.lock().unwrap().partitions.get(&0).map_or(0, |p| p.produced.acked.len())
}

fn mix(load: &Load) -> FaultMix {
    FaultMix { progress_max: load.batches, clock_steps: true, drift_ppm_max: 2000 }
}

fn config() -> BrokerConfig {
    BrokerConfig { group_initial_rebalance_delay_ms: 0, ..BrokerConfig::default() }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Smoke {
    pub common: Common,
    pub load: Load,
}

impl World for Smoke {
    fn draw(seed: u64) -> Smoke {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let load = Load::draw(&mut rng);
        Smoke { common: Common::draw(&mut rng, mix(&load)), load }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config());
        let world = workloads::shared(self.common.hosts(), &run.history);
        let (w, l) = (world.clone(), self.load.clone());
        run.sim.client("clients", async move {
            load("smoke".into(), "smoke-readers".into(), l, w).await;
            Ok(())
        });
        let mut violations = run.drive(&self.common, || acked(&world), LIVENESS_MS);
        if violations.is_empty() {
            violations = check(&world);
        }
        run.finish("smoke", seed, violations)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSmoke {
    pub common: Common,
    /// Each broker's topic load, by broker.
    pub loads: Vec<Load>,
}

impl World for ClusterSmoke {
    fn draw(seed: u64) -> ClusterSmoke {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let loads = vec![Load::draw(&mut rng), Load::draw(&mut rng)];
        let brokers = (0..2)
            .map(|i| BrokerSpec {
                host: format!("broker-{i}"),
                broker_id: i,
                seed: rng.random(),
                clock_skew_ms: rng.random_range(-5000..=5000),
                clock_drift_ppm: 0,
                data_dir: format!("kaas-{i}"),
            })
            .collect();
        let common = Common::draw_with(&mut rng, brokers, mix(&loads[0]));
        ClusterSmoke { common, loads }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config());
        let worlds: Vec<Shared> =
            self.common.hosts().into_iter().map(|host| workloads::shared(vec![host], &run.history)).collect();
        let (ws, loads) = (worlds.clone(), self.loads.clone());
        run.sim.client("clients", async move {
            let tasks: Vec<_> = ws
                .iter()
                .zip(loads)
                .enumerate()
                .map(|(i, (w, l))| tokio::spawn(load(format!("smoke-{i}"), format!("readers-{i}"), l, w.clone())))
                .collect();
            for t in tasks {
                let _ = t.await;
            }
            Ok(())
        });
        let progress = || worlds.iter().map(acked).sum();
        let mut violations = run.drive(&self.common, progress, LIVENESS_MS);
        if violations.is_empty() {
            for (i, world) in worlds.iter().enumerate() {
                violations.extend(check(world).into_iter().map(|v| {
                    let (class, rest) = v.split_once(':').unwrap_or((&v, ""));
                    format!("{class}: broker-{i}'s topic:{rest}")
                }));
            }
        }
        run.finish("cluster-smoke", seed, violations)
    }
}
