//! idempotence: idempotent producers (InitProducerId, sequence numbers, up to five produce
//! requests in flight) retry through broker crashes, graceful restarts, pauses, torn writes,
//! failed fsyncs, stalls of the volume, partitions and held messages. A retry resends the batch
//! with its original sequence, so it must never be written twice. Each producer restarts a few
//! times as a new instance with a new producer id; small segments make the broker roll and
//! snapshot its producer state often. Checks: the log checker (where every duplicate is a
//! violation, since these producers never count an attempt as indefinite), no producer id
//! handed out twice, and each instance's batches in the log gapless and in order.

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers;
use crate::volume::SimVolume;
use crate::workloads::idempotent::{self, SharedProducers};
use crate::workloads::{self, Shared, consumer};

pub const TOPIC: &str = "idempotent";
const SIM_SECONDS_MAX: u64 = 900;
const LIVENESS_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idempotence {
    pub common: Common,
    #[serde(flatten)]
    pub load: Load,
}

/// The idempotent producers' work, also run over a cluster (`cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    pub partitions: i32,
    pub producers: usize,
    pub batches_per_producer: usize,
    pub records_per_batch: usize,
    /// Each producer is this many instances in turn, each with its own producer id.
    pub instances: usize,
    pub segment_bytes: u64,
}

fn value(producer: usize, batch: usize, record: usize) -> Bytes {
    Bytes::from(format!("p{producer}-b{batch:04}-r{record}"))
}

impl Load {
    /// `producers` and `partitions` as drawn by the caller, the rest from `rng`.
    pub fn draw(rng: &mut ChaCha8Rng, producers: usize, partitions: i32) -> Load {
        Load {
            partitions,
            producers,
            batches_per_producer: rng.random_range(20..80),
            records_per_batch: rng.random_range(1..6),
            instances: rng.random_range(1..=3),
            segment_bytes: rng.random_range(1024..16_384),
        }
    }

    /// Workload steps, for progress-triggered faults.
    pub fn steps(&self) -> usize {
        self.producers * self.batches_per_producer
    }

    /// Runs the load on the clients host and checks it: every broker setting but the segment
    /// size comes from `config`.
    pub fn run(&self, seed: u64, common: &Common, config: BrokerConfig, scenario: &str) -> RunResult {
        self.run_with(seed, common, config, scenario, Extras::default(), |_| Vec::new())
    }

    /// `run`, with `extras` (a hold, more time to converge, a client beside the producers)
    /// and `check_volume` run over what the brokers left on the volume.
    pub fn run_with(
        &self,
        seed: u64,
        common: &Common,
        config: BrokerConfig,
        scenario: &str,
        extras: Extras,
        check_volume: impl FnOnce(&SimVolume) -> Vec<String>,
    ) -> RunResult {
        let config = BrokerConfig { log_segment_bytes: self.segment_bytes, ..config };
        let mut run = common::start(seed, common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(common.hosts(), &run.history);
        let producers = SharedProducers::default();
        run.sim.client("clients", workload(self.clone(), world.clone(), producers.clone(), extras.hold_ms));
        if let Some(side) = extras.side {
            run.sim.client("admin", side(world.clone()));
        }
        let progress = || world.lock().unwrap().partitions.values().map(|p| p.produced.acked.len()).sum();
        let mut violations = run.drive(common, progress, LIVENESS_MS + extras.more_liveness_ms);
        violations.extend(check_volume(&run.volume));
        let w = world.lock().unwrap();
        let p = producers.lock().unwrap();
        violations.extend(w.violations.iter().cloned());
        violations.extend(checkers::idempotence::check_producer_ids(&p.instances));
        if violations.is_empty() {
            violations = checkers::check_all(&w.partitions);
            for (partition, history) in &w.partitions {
                let name = format!("partition {partition}");
                violations.extend(checkers::idempotence::check(&name, &history.read, &p.sender_of));
            }
        }
        drop((w, p));
        run.finish(scenario, seed, violations)
    }
}

/// What a scenario adds to the load's run.
#[derive(Default)]
pub struct Extras {
    /// The clients stay until this much simulated time before their final reads, so that the
    /// brokers live through a fault plan longer than the load.
    pub hold_ms: u64,
    /// Time to converge after the last fault, beyond the load's own.
    pub more_liveness_ms: u64,
    /// A client host beside the producers (`admin`), given the world; what it finds wrong it
    /// adds to the world's violations.
    pub side: Option<Side>,
}

pub type Side = Box<dyn FnOnce(Shared) -> std::pin::Pin<Box<dyn std::future::Future<Output = turmoil::Result>>>>;

impl World for Idempotence {
    fn draw(seed: u64) -> Idempotence {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let producers = rng.random_range(1..=3);
        let batches_per_producer = rng.random_range(20..80);
        let mix = FaultMix { progress_max: producers * batches_per_producer, clock_steps: true, drift_ppm_max: 2000 };
        let load = Load {
            partitions: rng.random_range(1..=3),
            producers,
            batches_per_producer,
            records_per_batch: rng.random_range(1..6),
            instances: rng.random_range(1..=3),
            segment_bytes: rng.random_range(1024..16_384),
        };
        Idempotence { load, common: Common::draw(&mut rng, mix) }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        self.load.run(seed, &self.common, BrokerConfig::default(), "idempotence")
    }
}

async fn workload(world_: Load, world: Shared, producers: SharedProducers, hold_ms: u64) -> turmoil::Result {
    workloads::create_topic(&world, TOPIC, world_.partitions).await;
    let tasks: Vec<_> = (0..world_.producers)
        .map(|id| {
            let partition = (id % world_.partitions as usize) as i32;
            let batches = (0..world_.batches_per_producer)
                .map(|b| {
                    let values = (0..world_.records_per_batch).map(|r| value(id, b, r)).collect();
                    ((id * 1_000_000 + b) as u64, values)
                })
                .collect();
            tokio::spawn(idempotent::producer(
                format!("producer-{id}"),
                TOPIC.into(),
                partition,
                batches,
                world_.instances,
                world.clone(),
                producers.clone(),
            ))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let held = std::time::Duration::from_millis(hold_ms).saturating_sub(crate::env::world_elapsed());
    tokio::time::sleep(held).await;
    for p in 0..world_.partitions {
        consumer::final_read(&world, TOPIC, p).await;
    }
    Ok(())
}
