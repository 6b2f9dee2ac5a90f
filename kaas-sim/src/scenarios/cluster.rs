//! Cluster scenarios: 3 to 5 brokers on ONE data directory of the shared volume, a cluster in
//! earnest. Idempotent producers (the `idempotence` load) write to partitions whose owners the
//! faults keep moving; clients route by Metadata and move on at NOT_LEADER_OR_FOLLOWER, as real
//! clients do. Each run draws the lease settings too (session timeout, heartbeat, drift margin,
//! settle period), so short and long leases both meet the faults.
//!
//! - cluster-failover: owners crash and restart (a restarted broker waits out its old lease),
//!   stop gracefully (handing over at once), and come back to take their share after the
//!   settle period.
//! - cluster-zombie: owners paused far past their lease and resumed, mid-append or not; brokers
//!   cut off from the volume while clients still reach them; clock rate drift within the drift
//!   margin and wall clock steps. A zombie's late write must never be read or acked, and never
//!   land in the new owner's files (the volume's two-writers check).
//!
//! Checks: the log checker (every acked record at its offset, exactly once), the idempotence
//! checker (no batch twice across take-overs: the new owner rebuilds producer state from the
//! files), unique producer ids, and the volume's two-writers check.

use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::common::{self, Common, CrashPoint, FaultMix};
use super::idempotence::{Extras, Load};
use super::{RunResult, World};
use crate::checkers;
use crate::faults::{Fault, Planned, Trigger};
use crate::hosts::BrokerSpec;

/// The lease settings of one world, by their Kafka-style names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leases {
    pub session_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub drift_margin_ms: u64,
    pub settle_ms: u64,
}

impl Leases {
    pub fn draw(rng: &mut ChaCha8Rng) -> Leases {
        if rng.random_bool(0.3) {
            return Leases::defaults();
        }
        let session_timeout_ms = rng.random_range(2000..=12_000);
        Leases {
            session_timeout_ms,
            heartbeat_interval_ms: rng.random_range(session_timeout_ms / 8..=session_timeout_ms / 3),
            drift_margin_ms: rng.random_range(session_timeout_ms / 10..=session_timeout_ms / 4),
            settle_ms: [0, session_timeout_ms / 2, session_timeout_ms][rng.random_range(0..3)],
        }
    }

    /// Settings under which a flapping broker can be told from a settled one: heartbeats short
    /// against the settle period (8 to 24 of them fit in it), so that a spell back of a few
    /// heartbeats, enough for ownership to move back were the settle period zero, stays well
    /// inside it. Short sessions keep the world's simulated time down.
    fn draw_flapping(rng: &mut ChaCha8Rng) -> Leases {
        let session_timeout_ms = rng.random_range(2000..=4000);
        Leases {
            session_timeout_ms,
            heartbeat_interval_ms: rng.random_range(session_timeout_ms / 12..=session_timeout_ms / 8),
            drift_margin_ms: rng.random_range(session_timeout_ms / 10..=session_timeout_ms / 4),
            settle_ms: rng.random_range(session_timeout_ms..=2 * session_timeout_ms),
        }
    }

    fn defaults() -> Leases {
        let c = BrokerConfig::default();
        Leases {
            session_timeout_ms: c.broker_session_timeout_ms,
            heartbeat_interval_ms: c.broker_heartbeat_interval_ms,
            drift_margin_ms: c.broker_lease_drift_margin_ms,
            settle_ms: c.broker_ownership_settle_ms,
        }
    }

    pub fn config(&self) -> BrokerConfig {
        self.apply(BrokerConfig { group_initial_rebalance_delay_ms: 0, ..BrokerConfig::default() })
    }

    /// `config` with these lease settings.
    pub fn apply(&self, config: BrokerConfig) -> BrokerConfig {
        BrokerConfig {
            broker_session_timeout_ms: self.session_timeout_ms,
            broker_heartbeat_interval_ms: self.heartbeat_interval_ms,
            broker_lease_drift_margin_ms: self.drift_margin_ms,
            broker_ownership_settle_ms: self.settle_ms,
            ..config
        }
    }

    /// The largest clock rate difference the drift margin covers, parts per million, with room.
    pub fn drift_ppm_max(&self) -> i64 {
        (self.drift_margin_ms * 1_000_000 / self.session_timeout_ms / 2) as i64
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub common: Common,
    pub leases: Leases,
    pub load: Load,
}

/// 3 to 5 brokers on one data directory.
pub fn brokers(rng: &mut ChaCha8Rng) -> Vec<BrokerSpec> {
    (0..rng.random_range(3..=5))
        .map(|i| BrokerSpec {
            host: format!("kaas-{i}"),
            broker_id: i,
            seed: rng.random(),
            clock_skew_ms: rng.random_range(-5000..=5000),
            clock_drift_ppm: 0,
            data_dir: String::new(),
        })
        .collect()
}

/// A cluster world's idempotent load (2 to 6 partitions, 2 to 5 producers) and its brokers.
fn load_and_brokers(rng: &mut ChaCha8Rng) -> (Load, Vec<BrokerSpec>) {
    let partitions = rng.random_range(2..=6);
    let producers = rng.random_range(2..=5);
    let load = Load::draw(rng, producers, partitions);
    (load, brokers(rng))
}

impl Cluster {
    fn draw(seed: u64, zombie: bool) -> Cluster {
        Cluster::draw_from(&mut ChaCha8Rng::seed_from_u64(seed), zombie)
    }

    /// The world `draw` makes, from `rng` (which the caller may draw on further).
    pub fn draw_from(rng: &mut ChaCha8Rng, zombie: bool) -> Cluster {
        let leases = Leases::draw(rng);
        let (load, brokers) = load_and_brokers(rng);
        let hosts: Vec<String> = brokers.iter().map(|b| b.host.clone()).collect();
        let mix = FaultMix { progress_max: load.steps(), clock_steps: zombie, drift_ppm_max: leases.drift_ppm_max() };
        let mut common = Common::draw_with(rng, brokers, mix);
        if zombie {
            common.plan.extend(zombie_faults(rng, &hosts, &leases, load.steps()));
        }
        Cluster { common, leases, load }
    }

    fn run(&self, seed: u64, scenario: &str) -> RunResult {
        self.load.run(seed, &self.common, self.leases.config(), scenario)
    }
}

/// A world's brokers and fault plan: one broker, or (with `leases`) a cluster of 3 to 5 on one
/// data directory whose clocks drift no more than the margin covers.
pub fn draw_common(rng: &mut ChaCha8Rng, leases: Option<&Leases>, mix: FaultMix) -> Common {
    match leases {
        None => Common::draw(rng, mix),
        Some(l) => {
            let brokers = brokers(rng);
            let mut common = Common::draw_with(
                rng,
                brokers,
                FaultMix { drift_ppm_max: l.drift_ppm_max().min(mix.drift_ppm_max), ..mix },
            );
            common.plan.extend(peer_partitions(rng, &common.hosts(), l, mix.progress_max));
            common
        }
    }
}

/// A transaction world's crash point: one of the coordinator's, or in a cluster sometimes the
/// marker watcher's (visited rarely: only when a call was lost, hence its first visits).
pub fn crash_point(rng: &mut ChaCha8Rng, cluster: bool, visits_max: u32) -> CrashPoint {
    if cluster && rng.random_bool(0.3) {
        return common::crash_point(rng, &kaas_core::txn::marker_queue::CRASH_POINTS, 2);
    }
    common::crash_point(rng, &kaas_core::txn::coordinator::CRASH_POINTS, visits_max)
}

/// Half the worlds cut one or two pairs of brokers off from each other, not from the volume,
/// for up to a few leases: a coordinator's WriteTxnMarkers to a partition's owner, its fences
/// and KIP-890 verification are lost, and the marker queue carries the markers instead.
fn peer_partitions(rng: &mut ChaCha8Rng, hosts: &[String], leases: &Leases, steps: usize) -> Vec<Planned> {
    if !rng.random_bool(0.5) {
        return Vec::new();
    }
    (0..rng.random_range(1..=2))
        .map(|_| {
            let a = rng.random_range(0..hosts.len());
            let b = (a + rng.random_range(1..hosts.len())) % hosts.len();
            let ms = rng.random_range(1000..=3 * leases.session_timeout_ms);
            let fault = Fault::Partition { a: hosts[a].clone(), b: hosts[b].clone(), ms };
            Planned { at: super::common::trigger(rng, steps), fault }
        })
        .collect()
}

/// Pauses of an owner far past its lease (a SIGSTOP, a VM frozen), volume partitions longer
/// than the lease while clients still reach the broker, and clock rate changes.
pub fn zombie_faults(rng: &mut ChaCha8Rng, hosts: &[String], leases: &Leases, steps: usize) -> Vec<Planned> {
    let lease = leases.session_timeout_ms;
    let mut plan = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let host = hosts[rng.random_range(0..hosts.len())].clone();
        let ms = rng.random_range(lease / 2..=lease * 3);
        plan.push(Planned { at: super::common::trigger(rng, steps), fault: Fault::Pause { host, ms } });
    }
    if rng.random_bool(0.5) {
        let host = hosts[rng.random_range(0..hosts.len())].clone();
        let ms = rng.random_range(lease / 2..=lease * 2);
        plan.push(Planned { at: super::common::trigger(rng, steps), fault: Fault::VolumePartition { host, ms } });
    }
    if rng.random_bool(0.5) {
        let host = hosts[rng.random_range(0..hosts.len())].clone();
        let max = leases.drift_ppm_max();
        let ppm = rng.random_range(-max..=max);
        plan.push(Planned { at: super::common::trigger(rng, steps), fault: Fault::ClockRate { host, ppm } });
    }
    plan
}

/// A broker that keeps losing the volume (a flaky NFS mount, a node whose network drops out):
/// cut off `cuts` times (2 to 4) for `cut_ms` each, longer than its lease, so that its lease lapses and
/// its share moves to the peers; back for `gap_ms` between cuts, shorter than the settle period.
/// The first cut comes at `first_at_ms`, once the cluster has settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flap {
    pub host: String,
    pub broker_id: i32,
    pub cuts: usize,
    pub cut_ms: u64,
    pub gap_ms: u64,
    pub first_at_ms: u64,
}

impl Flap {
    fn draw(rng: &mut ChaCha8Rng, brokers: &[BrokerSpec], leases: &Leases) -> Flap {
        let flapper = &brokers[rng.random_range(0..brokers.len())];
        let (session, heartbeat) = (leases.session_timeout_ms, leases.heartbeat_interval_ms);
        let cut_min = session + leases.drift_margin_ms + 2 * heartbeat;
        Flap {
            host: flapper.host.clone(),
            broker_id: flapper.broker_id,
            cuts: rng.random_range(2..=4),
            cut_ms: rng.random_range(cut_min..=cut_min + session),
            gap_ms: rng.random_range(4 * heartbeat..=leases.settle_ms - 3 * heartbeat),
            first_at_ms: leases.settle_ms + 2 * session + rng.random_range(0..2000),
        }
    }

    fn plan(&self) -> Vec<Planned> {
        (0..self.cuts as u64)
            .map(|i| Planned {
                at: Trigger::Millis(self.first_at_ms + i * (self.cut_ms + self.gap_ms)),
                fault: Fault::VolumePartition { host: self.host.clone(), ms: self.cut_ms },
            })
            .collect()
    }

    /// When the last cut heals.
    fn ends_at_ms(&self) -> u64 {
        self.first_at_ms + self.cuts as u64 * self.cut_ms + (self.cuts as u64 - 1) * self.gap_ms
    }
}

/// cluster-flap: one broker cut off from the volume again and again, back each time for less
/// than the settle period; no other fault but the volume's own (sync latency, torn writes,
/// I/O errors), so that every lapse of its lease is a cut. Checks: the idempotence load's, and
/// the thrash check (`checkers::ownership`): the flapping broker gets nothing back between its
/// cuts. The clients stay until it has settled after the last cut and taken its share back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFlap {
    pub cluster: Cluster,
    pub flap: Flap,
}

impl World for ClusterFlap {
    fn draw(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let leases = Leases::draw_flapping(&mut rng);
        let (load, brokers) = load_and_brokers(&mut rng);
        let flap = Flap::draw(&mut rng, &brokers, &leases);
        let mix = FaultMix { progress_max: load.steps(), clock_steps: false, drift_ppm_max: leases.drift_ppm_max() };
        let mut common = Common::draw_with(&mut rng, brokers, mix);
        common.plan = flap.plan();
        ClusterFlap { cluster: Cluster { common, leases, load }, flap }
    }

    fn common(&self) -> &Common {
        &self.cluster.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let Cluster { common, leases, load } = &self.cluster;
        let hold_ms = self.flap.ends_at_ms() + leases.settle_ms + leases.session_timeout_ms;
        let extras = Extras { hold_ms, ..Extras::default() };
        load.run_with(seed, common, leases.config(), "cluster-flap", extras, |volume| {
            let (claims, mut violations) = checkers::ownership::claims(volume);
            violations.extend(checkers::ownership::check_flapping(&claims, self.flap.broker_id, self.flap.cuts));
            violations
        })
    }
}

macro_rules! cluster_world {
    ($name:ident, $scenario:literal, $zombie:expr) => {
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Cluster);

        impl World for $name {
            fn draw(seed: u64) -> Self {
                $name(Cluster::draw(seed, $zombie))
            }

            fn common(&self) -> &Common {
                &self.0.common
            }

            fn run(&self, seed: u64) -> RunResult {
                self.0.run(seed, $scenario)
            }
        }
    };
}

cluster_world!(ClusterFailover, "cluster-failover", false);
cluster_world!(ClusterZombie, "cluster-zombie", true);
