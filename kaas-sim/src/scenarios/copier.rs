//! txn-copier: consume-transform-produce copiers (KIP-447, `workloads::copier`). Each copier
//! slot owns some partitions of `in` and copies every record to the same partition of `out`
//! in transactions that also commit the input offsets. Copier instances crash or pause at
//! random steps (a paused one comes back as a zombie and carries on where it stopped), while
//! the broker crashes too, sometimes at an armed step of EndTxn.
//!
//! Afterwards the read_committed output must hold exactly one copy of each input record
//! (invariant 6, `checkers::copier`): a missing copy is an input offset committed without its
//! output, a second copy an output committed without its offset. The group's final committed
//! offsets must be the end of the input, and the output's LSO its HWM.

use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::cluster::{self, Leases};
use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers::copier as copy_check;
use crate::client::Outcome;
use crate::workloads::copier::{self, Plan, SharedProgress};
use crate::workloads::{self, Shared, backoff, consumer};

const INPUT: &str = "in";
const OUTPUT: &str = "out";
const GROUP: &str = "copiers";
const SIM_SECONDS_MAX: u64 = 1200;
const LIVENESS_MS: u64 = 90_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Copier {
    pub common: Common,
    pub partitions: i32,
    pub records_per_partition: usize,
    pub slots: i32,
    /// Per mille: the chance that an instance stops at a given step of a transaction.
    pub stop_per_mille: u32,
    /// Per mille: the chance that a stop is a pause, after which the instance comes back.
    pub pause_per_mille: u32,
    pub transaction_timeout_ms: i32,
    pub segment_bytes: u64,
    /// A cluster world (`cluster-copier`): the coordinator, the group and the partitions of
    /// `in` and `out` spread over 3 to 5 brokers on one data directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<Leases>,
    /// The slots whose copiers speak transactions v2 (KIP-890 part 2); the rest v1.
    #[serde(default)]
    pub tv2_slots: Vec<i32>,
}

impl Copier {
    fn draw_on(seed: u64, cluster: bool) -> Copier {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let leases = cluster.then(|| Leases::draw(&mut rng));
        let partitions = rng.random_range(1..=3);
        let records_per_partition = rng.random_range(20..80);
        let armed = rng.random_bool(0.5);
        let crash_point = armed.then(|| cluster::crash_point(&mut rng, cluster, 10));
        let mix = FaultMix {
            progress_max: partitions as usize * records_per_partition,
            clock_steps: false,
            drift_ppm_max: 1000,
        };
        let mut common = cluster::draw_common(&mut rng, leases.as_ref(), mix);
        if let Some(point) = crash_point {
            common.arm(point);
        }
        let slots = rng.random_range(1..=partitions);
        Copier {
            common,
            partitions,
            records_per_partition,
            slots,
            stop_per_mille: rng.random_range(10..60),
            pause_per_mille: rng.random_range(0..600),
            transaction_timeout_ms: rng.random_range(3_000..10_000),
            segment_bytes: rng.random_range(2048..32_768),
            leases,
            // Drawn last, so that the rest of a seed's world is what it was before v2.
            tv2_slots: (0..slots).filter(|_| rng.random_bool(0.5)).collect(),
        }
    }

    fn run_as(&self, scenario: &str, seed: u64) -> RunResult {
        let config = BrokerConfig { log_segment_bytes: self.segment_bytes, ..BrokerConfig::default() };
        let config = match &self.leases {
            Some(leases) => leases.apply(config),
            None => config,
        };
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let progress = SharedProgress::default();
        run.sim.client("clients", workload(self.clone(), world.clone(), progress.clone()));
        let copied = || progress.lock().unwrap().copied;
        let mut violations = run.drive(&self.common, copied, LIVENESS_MS);
        violations.extend(world.lock().unwrap().violations.iter().cloned());
        if violations.is_empty() {
            violations = copy_check::check(&progress.lock().unwrap().copies, INPUT, OUTPUT);
        }
        run.finish(scenario, seed, violations)
    }
}

impl World for Copier {
    fn draw(seed: u64) -> Copier {
        Copier::draw_on(seed, false)
    }

    fn check(&self) -> Result<(), String> {
        if self.leases.is_some() {
            return Err("a cluster world is not a txn-copier world".into());
        }
        self.common.check()
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        self.run_as("txn-copier", seed)
    }
}

/// `cluster-copier`: the copier on a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClusterCopier(pub Copier);

impl World for ClusterCopier {
    fn draw(seed: u64) -> Self {
        ClusterCopier(Copier::draw_on(seed, true))
    }

    fn check(&self) -> Result<(), String> {
        if self.0.leases.is_none() {
            return Err("a one-broker world is not a cluster-copier world".into());
        }
        self.0.common.check()
    }

    fn common(&self) -> &Common {
        &self.0.common
    }

    fn run(&self, seed: u64) -> RunResult {
        self.0.run_as("cluster-copier", seed)
    }
}

async fn write_input(c: &Copier, world: &Shared, progress: &SharedProgress) {
    let mut client = workloads::client(world, "input");
    for p in 0..c.partitions {
        for i in 0..c.records_per_partition {
            let value = Bytes::from(format!("in:{p}:{i}"));
            loop {
                match client.produce(INPUT, p, std::slice::from_ref(&value), common::now_ms()).await {
                    Outcome::Ok(_) => break,
                    Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    Outcome::Indefinite => {}
                }
            }
        }
        // The input as it is: an indefinite attempt may have written a record twice.
        let (read, hwm, _) = consumer::read_partition(world, INPUT, p).await;
        let mut pr = progress.lock().unwrap();
        pr.copies.input.insert(p, read.iter().map(|(o, _)| *o).collect());
        pr.copies.input_end.insert(p, hwm);
    }
}

async fn final_reads(c: &Copier, world: &Shared, progress: &SharedProgress) {
    let mut client = workloads::client(world, "final-read");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(60_000);
    for p in 0..c.partitions {
        let read = consumer::read_committed_to_end(&mut client, OUTPUT, p, deadline).await;
        let committed = loop {
            match client.committed_offsets_stable(GROUP, INPUT, &[p]).await {
                Outcome::Ok(o) => break o[0],
                _ => backoff().await,
            }
        };
        let mut pr = progress.lock().unwrap();
        pr.copies.output.insert(p, read);
        pr.copies.committed_at_end.insert(p, committed);
    }
}

async fn workload(c: Copier, world: Shared, progress: SharedProgress) -> turmoil::Result {
    workloads::create_topic(&world, INPUT, c.partitions).await;
    workloads::create_topic(&world, OUTPUT, c.partitions).await;
    write_input(&c, &world, &progress).await;
    let plan = Plan {
        input: INPUT.into(),
        output: OUTPUT.into(),
        group: GROUP.into(),
        partitions: c.partitions,
        slots: c.slots,
        stop_per_mille: c.stop_per_mille,
        pause_per_mille: c.pause_per_mille,
        pause_ms_max: 2000,
        transaction_timeout_ms: c.transaction_timeout_ms,
        tv2_slots: c.tv2_slots.clone(),
    };
    let tasks: Vec<_> = (0..c.slots)
        .map(|s| {
            let seed = c.common.workload_seed ^ (s as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tokio::spawn(copier::slot(s, plan.clone(), world.clone(), progress.clone(), seed))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    final_reads(&c, &world, &progress).await;
    Ok(())
}
