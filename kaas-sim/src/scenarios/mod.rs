//! Scenarios: a workload, its faults and its checks over a drawn world. A world (`World`) is
//! everything a seed decides, drawn once (`World::draw`) and then run (`World::run`); a seed
//! file keeps the world whole, so a replay runs the same world whatever the drawing code has
//! become since.

pub mod acls;
pub mod cluster;
pub mod common;
pub mod compaction;
pub mod copier;
pub mod groups;
pub mod idempotence;
pub mod quotas;
pub mod reassign;
pub mod share;
pub mod share_copy;
pub mod smoke;
pub mod topics;
pub mod transactions;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// What one run of one world came to.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    pub pass: bool,
    /// A digest of everything observable: client outcomes and the final volume.
    pub trace: u64,
    pub sim_seconds: f64,
    /// Wall time the run itself took (the process around it not counted); not part of the trace.
    #[serde(default)]
    pub wall_seconds: f64,
    /// What failed, empty on a pass; each starts with its class (`lost-write: ...`).
    pub violations: Vec<String>,
    /// Where a failing run's JSONL history (every client call, outcome and time) was written.
    #[serde(default)]
    pub history: Option<String>,
    /// The cells of the corner-case matrix the run reached, and how often (`kaas-sim coverage`);
    /// not part of the trace.
    #[serde(default)]
    pub reached: std::collections::BTreeMap<String, u64>,
}

/// The class of a violation: what precedes its first colon (`lost-write`, `assertion`).
pub fn class(violation: &str) -> &str {
    violation.split(':').next().unwrap_or(violation).trim()
}

/// Everything a seed decides for a scenario.
pub trait World: Serialize + DeserializeOwned + std::fmt::Debug {
    /// Draws the world of `seed`.
    fn draw(seed: u64) -> Self;
    /// The part every world has.
    fn common(&self) -> &common::Common;
    /// Whether this build can run the world (it names no BUGGIFY site or crash point this
    /// build lacks).
    fn check(&self) -> Result<(), String> {
        self.common().check()
    }
    /// Runs the world; `seed` also seeds turmoil's own draws (message latencies).
    fn run(&self, seed: u64) -> RunResult;
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    /// The world of a seed, as JSON.
    pub draw: fn(u64) -> serde_json::Value,
    /// Runs a world given as JSON.
    pub run: fn(u64, &serde_json::Value) -> Result<RunResult, String>,
}

fn draw<W: World>(seed: u64) -> serde_json::Value {
    serde_json::to_value(W::draw(seed)).expect("a world serialises")
}

fn run<W: World>(seed: u64, world: &serde_json::Value) -> Result<RunResult, String> {
    let world: W = serde_json::from_value(world.clone()).map_err(|e| format!("the world does not fit: {e}"))?;
    world.check()?;
    Ok(world.run(seed))
}

const fn scenario<W: World>(name: &'static str, about: &'static str) -> Scenario {
    Scenario { name, about, draw: draw::<W>, run: run::<W> }
}

pub const ALL: &[Scenario] = &[
    scenario::<smoke::Smoke>(
        "smoke",
        "one broker, acks=all/1/0 producers and a committing reader over the wire; crashes, pauses, clock trouble, torn writes",
    ),
    scenario::<smoke::ClusterSmoke>(
        "cluster-smoke",
        "two broker hosts on one volume, each serving its own topic; clients route by Metadata and FindCoordinator",
    ),
    scenario::<cluster::ClusterFailover>(
        "cluster-failover",
        "3-5 brokers on one data directory; idempotent producers while owners crash, restart and hand over",
    ),
    scenario::<cluster::ClusterZombie>(
        "cluster-zombie",
        "3-5 brokers on one data directory; owners paused past their lease, cut off from the volume, clocks drifting",
    ),
    scenario::<cluster::ClusterFlap>(
        "cluster-flap",
        "3-5 brokers on one data directory; one keeps losing the volume, back each time for less than the settle period",
    ),
    scenario::<reassign::ClusterReassign>(
        "cluster-reassign",
        "the cluster-failover world with an admin reassigning partitions meanwhile: ownership moves where it is sent",
    ),
    scenario::<groups::Groups>(
        "groups",
        "a consumer group of member hosts over several partitions; broker and member crashes, rebalances",
    ),
    scenario::<idempotence::Idempotence>(
        "idempotence",
        "idempotent producers, five requests in flight, retrying through crashes: no batch written twice",
    ),
    scenario::<transactions::TxnCrash>(
        "txn-crash",
        "transactional producers and read_committed readers; the broker crashes at every step of EndTxn",
    ),
    scenario::<transactions::TxnZombie>(
        "txn-zombie",
        "a second instance fences each transactional.id; the old one's late requests must not take effect",
    ),
    scenario::<transactions::TxnTimeout>(
        "txn-timeout",
        "producers quiet past their transaction timeout, one gone: the reaper aborts and fences them",
    ),
    scenario::<transactions::TxnLateWrite>(
        "txn-late-write",
        "transactions v2 (KIP-890): a write held back past its transaction's abort arrives in the next one and must be fenced",
    ),
    scenario::<copier::Copier>(
        "txn-copier",
        "consume-transform-produce copiers committing offsets in their transactions, pausing and resuming as zombies",
    ),
    scenario::<transactions::ClusterTxn>(
        "cluster-txn",
        "the txn-crash, txn-zombie, txn-timeout and txn-late-write worlds on 3-5 brokers: coordinator, partitions and readers apart",
    ),
    scenario::<copier::ClusterCopier>(
        "cluster-copier",
        "the copier on 3-5 brokers: coordinator, group, input and output partitions on different brokers",
    ),
    scenario::<share::Share>(
        "share",
        "a share group's members on 1 or 3-5 brokers: members crash, go silent or come back as zombies; locks run out; brokers crash and pause",
    ),
    scenario::<share_copy::CrashBeforeBegin>(
        "kip1289-crash-before-begin",
        "exactly-once queue copiers (KIP-1289); a copier dies holding records, before its transaction writes anything",
    ),
    scenario::<share_copy::CrashAfterSend>(
        "kip1289-crash-after-send",
        "exactly-once queue copiers (KIP-1289); a copier dies after its outputs, before staging its acknowledgements",
    ),
    scenario::<share_copy::CrashAfterStage>(
        "kip1289-crash-after-stage",
        "exactly-once queue copiers (KIP-1289); a copier dies with its acknowledgements staged, before EndTxn",
    ),
    scenario::<share_copy::CrashAfterCommit>(
        "kip1289-crash-after-commit",
        "exactly-once queue copiers (KIP-1289); the coordinator dies after EndTxn(COMMIT) is durable, before the markers",
    ),
    scenario::<share_copy::Zombie>(
        "kip1289-zombie",
        "exactly-once queue copiers (KIP-1289); a paused copier comes back fenced (member, and producer) and carries on",
    ),
    scenario::<share_copy::ExplicitAbort>(
        "kip1289-abort",
        "exactly-once queue copiers (KIP-1289); every k-th transaction aborted on purpose, its records back to the group",
    ),
    scenario::<share_copy::PartialProduce>(
        "kip1289-partial-produce",
        "exactly-once queue copiers (KIP-1289); one produce of a transaction refused while the others succeed",
    ),
    scenario::<acls::AclPropagation>(
        "acl-propagation",
        "a DENY made and taken back through any broker while a producer writes and brokers crash, pause and lose the volume: in force everywhere within its bound",
    ),
    scenario::<quotas::QuotaPropagation>(
        "quota-propagation",
        "a client quota set and removed through any broker while brokers crash, pause and lose the volume: described (and enforced) everywhere within its bound",
    ),
    scenario::<compaction::Compaction>(
        "compaction",
        "keyed transactional and plain producers on a compacted topic, 1 or 3-5 brokers; crashes mid-clean, pauses, ownership moves",
    ),
    scenario::<topics::TopicChurn>(
        "topic-churn",
        "a topic deleted and created again under its producers, the broker crashing mid-deletion: no record outlives its topic",
    ),
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}

/// FNV-1a, for trace digests: stable across builds and platforms, unlike std's hasher.
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

impl Digest {
    pub fn feed(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }

    pub fn feed_u64(&mut self, v: u64) {
        self.feed(&v.to_le_bytes());
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}
