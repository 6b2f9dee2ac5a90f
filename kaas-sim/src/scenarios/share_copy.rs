//! The exactly-once queue (KIP-1289) and its seven corner cases, one scenario each: slots of
//! `kaas share-copy`'s copier take records from a share group on `in`, write them to `out` and
//! accept them in the same transaction, on one broker or on 3 to 5 with the coordinator, the
//! output partitions and the share partitions apart, while the world's case strikes:
//! - `kip1289-crash-before-begin`, `-crash-after-send`, `-crash-after-stage`: a copier dies at
//!   that step; its successor (same transactional id) aborts what it left;
//! - `kip1289-crash-after-commit`: the coordinator's broker dies between EndTxn(COMMIT) made
//!   durable and the markers (an armed crash point);
//! - `kip1289-zombie`: a copier pauses past its member session; with a successor it is fenced
//!   as a producer too; either way it comes back and carries on, and must be refused; in half
//!   the worlds it first joins again under its member id and stages what it acquires then
//!   under the member epoch it was fenced at, which must be refused too;
//! - `kip1289-abort`: every k-th transaction aborted on purpose;
//! - `kip1289-partial-produce`: a produce of a transaction refused while others go through.
//!
//! Afterwards (`checkers::share_copy`) the read_committed output holds each input record once,
//! the group has acknowledged everything, and the share checker's rules hold over what the
//! copiers acquired, staged and committed.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::cluster::{self, Leases};
use super::common::{self, Buggify, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers::share as share_check;
use crate::checkers::share_copy::{self as loop_check, Loop};
use crate::client::Outcome;
use crate::workloads::share_copier::{self, Case, Plan};
use crate::workloads::share_member::SharedMembers;
use crate::workloads::{self, Shared, backoff, consumer};

const INPUT: &str = "in";
const OUTPUT: &str = "out";
const GROUP: &str = "copiers";
const SIM_SECONDS_MAX: u64 = 900;
const FINISH_MS: u64 = 240_000;
const LIVENESS_MS: u64 = 300_000;
/// Apache's largest delivery count limit: a record aborted that often is archived.
const DELIVERY_COUNT_LIMIT: i32 = 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareCopy {
    pub common: Common,
    pub leases: Option<Leases>,
    pub case: Case,
    pub partitions: i32,
    pub output_partitions: i32,
    pub records_per_partition: usize,
    pub slots: i32,
    pub stop_per_mille: u32,
    pub pause_ms: (u64, u64),
    /// Zombie worlds: whether a paused copier's successor starts (and fences its producer).
    pub successor: bool,
    /// Zombie worlds: whether a zombie fenced as a member joins again under its member id and
    /// stages what it then acquires under the epoch it was fenced at (which must be refused).
    #[serde(default)]
    pub rejoin: bool,
    pub lock_duration_ms: i32,
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub transaction_timeout_ms: i32,
    pub abort_every: Option<u64>,
}

impl ShareCopy {
    fn draw_case(seed: u64, case: Case) -> ShareCopy {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let leases = rng.random_bool(0.5).then(|| Leases::draw(&mut rng));
        let partitions = rng.random_range(1..=3);
        let records_per_partition = rng.random_range(10..40);
        let mix = FaultMix {
            progress_max: partitions as usize * records_per_partition,
            clock_steps: false,
            drift_ppm_max: 1000,
        };
        let common = cluster::draw_common(&mut rng, leases.as_ref(), mix);
        let session_timeout_ms = rng.random_range(2000..=3000);
        let mut world = ShareCopy {
            common,
            leases,
            case,
            partitions,
            output_partitions: rng.random_range(1..=3),
            records_per_partition,
            slots: rng.random_range(1..=3),
            stop_per_mille: rng.random_range(100..400),
            pause_ms: (0, 0),
            successor: true,
            rejoin: false,
            lock_duration_ms: rng.random_range(2000..=5000),
            session_timeout_ms,
            heartbeat_interval_ms: session_timeout_ms / 4,
            transaction_timeout_ms: rng.random_range(5_000..=15_000),
            abort_every: None,
        };
        let mut common = world.common.clone();
        match case {
            Case::CrashBeforeBegin | Case::CrashAfterSend | Case::CrashAfterStage => {}
            Case::CrashAfterCommit => {
                let sites = ["txn.after_prepare", "txn.between_markers"];
                common.arm(common::crash_point(&mut rng, &sites, 4));
            }
            Case::Zombie => {
                // Past the member's session: only the member check stands between a zombie
                // without a successor and its staging. Some pauses outlast the locks too, so that
                // a transaction left open (staged, not ended) must hold its records by itself.
                world.successor = rng.random_bool(0.5);
                world.lock_duration_ms = rng.random_range(10_000..=15_000);
                world.pause_ms = (u64::from(session_timeout_ms as u32) + 2_000, world.lock_duration_ms as u64 + 8_000);
                world.transaction_timeout_ms = 60_000;
                world.stop_per_mille = rng.random_range(50..200);
                world.rejoin = rng.random_bool(0.5);
            }
            Case::ExplicitAbort => world.abort_every = Some(rng.random_range(2..=4)),
            Case::PartialProduce => {
                world.output_partitions = rng.random_range(2..=3);
                let mut sites: Vec<String> = common.buggify.iter().flat_map(|b| b.sites.iter().cloned()).collect();
                if !sites.iter().any(|s| s == "partition.not_leader") {
                    sites.push("partition.not_leader".to_string());
                }
                common.buggify = Some(Buggify { seed: rng.random(), sites });
            }
        }
        world.common = common;
        world
    }

    fn run_as(&self, scenario: &str, seed: u64) -> RunResult {
        let config = BrokerConfig {
            group_initial_rebalance_delay_ms: 0,
            group_share_record_lock_duration_ms: self.lock_duration_ms,
            group_share_max_record_lock_duration_ms: self.lock_duration_ms.max(60_000),
            group_share_session_timeout_ms: self.session_timeout_ms,
            group_share_heartbeat_interval_ms: self.heartbeat_interval_ms,
            group_share_delivery_count_limit: DELIVERY_COUNT_LIMIT,
            ..BrokerConfig::default()
        };
        let config = match &self.leases {
            Some(leases) => leases.apply(config),
            None => config,
        };
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let members: SharedMembers = Default::default();
        let found: std::sync::Arc<std::sync::Mutex<Loop>> = Default::default();
        run.sim.client("clients", workload(self.clone(), world.clone(), members.clone(), found.clone()));
        let accepted = || members.lock().unwrap().accepted;
        let mut violations = run.drive(&self.common, accepted, LIVENESS_MS);
        if self.case == Case::CrashAfterCommit
            && ["txn.after_prepare", "txn.between_markers"]
                .iter()
                .any(|site| kaas_core::sim::reached(&format!("crash-point {site}")) > 0)
        {
            share_copier::reach_case(Case::CrashAfterCommit, "");
        }
        violations.extend(world.lock().unwrap().violations.iter().cloned());
        if violations.is_empty() {
            let mut log = std::mem::take(&mut members.lock().unwrap().log);
            let mut l = found.lock().unwrap();
            for (&p, values) in &l.input.clone() {
                for offset in 0..values.len() as i64 {
                    if share_check::may_be_archived(&log, p, offset) {
                        l.may_be_archived.insert((p, offset));
                    }
                }
            }
            violations = loop_check::check(&l, INPUT, OUTPUT);
            // The share log's own rules, but for its end (the loop's "not-acknowledged" says it).
            log.input_end.clear();
            violations.extend(share_check::check(&log));
        }
        run.finish(scenario, seed, violations)
    }
}

async fn write_input(s: &ShareCopy, world: &Shared) -> BTreeMap<i32, i64> {
    let mut client = workloads::client(world, "input");
    let mut rng = ChaCha8Rng::seed_from_u64(s.common.workload_seed);
    let mut ends = BTreeMap::new();
    for p in 0..s.partitions {
        let mut written = 0;
        while written < s.records_per_partition {
            let n = rng.random_range(1..=4).min(s.records_per_partition - written);
            let values: Vec<Bytes> = (written..written + n).map(|i| Bytes::from(format!("job:{p}:{i}"))).collect();
            workloads::produce_until_acked(&mut client, INPUT, p, &values).await;
            written += n;
        }
        let end = workloads::log_end(&mut client, INPUT, p).await;
        ends.insert(p, end);
    }
    ends
}

async fn starts(client: &mut crate::client::Client, partitions: i32) -> Option<BTreeMap<i32, i64>> {
    let all: Vec<i32> = (0..partitions).collect();
    match client.share_group_offsets(GROUP, INPUT, &all).await {
        Outcome::Ok(offsets) => Some(offsets.into_iter().map(|(p, start, _)| (p, start)).collect()),
        _ => None,
    }
}

async fn workload(
    s: ShareCopy,
    world: Shared,
    members: SharedMembers,
    found: std::sync::Arc<std::sync::Mutex<Loop>>,
) -> turmoil::Result {
    workloads::create_topic(&world, INPUT, s.partitions).await;
    workloads::create_topic(&world, OUTPUT, s.output_partitions).await;
    let mut admin = workloads::client(&world, "admin");
    while !matches!(admin.alter_group_configs(GROUP, &[("share.auto.offset.reset", "earliest")]).await, Outcome::Ok(()))
    {
        backoff().await;
    }
    let ends = write_input(&s, &world).await;
    {
        let mut m = members.lock().unwrap();
        m.log.topic = INPUT.into();
        m.log.delivery_count_limit = DELIVERY_COUNT_LIMIT as i16;
    }
    let plan = Plan {
        group: GROUP.into(),
        input: INPUT.into(),
        output: OUTPUT.into(),
        case: s.case,
        stop_per_mille: s.stop_per_mille,
        pause_ms: s.pause_ms,
        transaction_timeout_ms: s.transaction_timeout_ms,
        abort_every: s.abort_every,
        successor: s.successor,
        rejoin: s.rejoin,
    };
    let tasks: Vec<_> = (0..s.slots)
        .map(|slot| {
            let seed = s.common.workload_seed ^ (slot as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tokio::spawn(share_copier::slot(slot, plan.clone(), world.clone(), members.clone(), seed))
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(FINISH_MS);
    let mut monitor = workloads::client(&world, "monitor");
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(starts) = starts(&mut monitor, s.partitions).await
            && ends.iter().all(|(p, end)| starts.get(p).is_some_and(|start| start >= end))
        {
            break;
        }
    }
    members.lock().unwrap().done = true;
    for t in tasks {
        t.await?;
    }
    // What the input and the output hold, and where the group ended.
    let mut input = BTreeMap::new();
    for p in 0..s.partitions {
        let (read, _, _) = consumer::read_partition(&world, INPUT, p).await;
        input.insert(p, read.into_iter().map(|(_, v)| v).collect::<Vec<Bytes>>());
    }
    let mut reader = workloads::client(&world, "final-read");
    let read_deadline = tokio::time::Instant::now() + Duration::from_millis(60_000);
    let mut output = BTreeMap::new();
    for p in 0..s.output_partitions {
        output.insert(p, consumer::read_committed_to_end(&mut reader, OUTPUT, p, read_deadline).await);
    }
    let mut final_start = BTreeMap::new();
    while tokio::time::Instant::now() < read_deadline {
        if let Some(starts) = starts(&mut monitor, s.partitions).await {
            final_start = starts;
            break;
        }
        backoff().await;
    }
    let mut l = found.lock().unwrap();
    l.input = input;
    l.input_end = ends;
    l.output = output;
    l.final_start = final_start;
    Ok(())
}

macro_rules! case_world {
    ($name:ident, $case:expr, $scenario:literal) => {
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub ShareCopy);

        impl World for $name {
            fn draw(seed: u64) -> Self {
                $name(ShareCopy::draw_case(seed, $case))
            }

            fn check(&self) -> Result<(), String> {
                if self.0.case != $case {
                    return Err(format!("a {:?} world is not a {} world", self.0.case, $scenario));
                }
                self.0.common.check()
            }

            fn common(&self) -> &Common {
                &self.0.common
            }

            fn run(&self, seed: u64) -> RunResult {
                self.0.run_as($scenario, seed)
            }
        }
    };
}

case_world!(CrashBeforeBegin, Case::CrashBeforeBegin, "kip1289-crash-before-begin");
case_world!(CrashAfterSend, Case::CrashAfterSend, "kip1289-crash-after-send");
case_world!(CrashAfterStage, Case::CrashAfterStage, "kip1289-crash-after-stage");
case_world!(CrashAfterCommit, Case::CrashAfterCommit, "kip1289-crash-after-commit");
case_world!(Zombie, Case::Zombie, "kip1289-zombie");
case_world!(ExplicitAbort, Case::ExplicitAbort, "kip1289-abort");
case_world!(PartialProduce, Case::PartialProduce, "kip1289-partial-produce");
