//! What every world has (`Common`): its broker hosts, the volume's faults and seed, the
//! network's latency, the BUGGIFY sites it enables, an armed crash point, the fault plan and
//! the workload's seed; how those are drawn, how a simulation is built from them, and how a
//! finished run becomes a `RunResult`.

use std::collections::BTreeSet;
use std::time::Duration;

use kaas_core::BrokerConfig;
use kaas_core::sim::BuggifyPlan;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::RunResult;
use crate::faults::{self, Bounds, Fault, Planned, Trigger};
use crate::history::History;
use crate::hosts::{self, BrokerSpec, Brokers};
use crate::volume::{SimVolume, Torn, VolumeFaults};

/// The BUGGIFY part of a world: the sites it enables and the seed of their fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buggify {
    pub seed: u64,
    pub sites: Vec<String>,
}

/// A crash point armed in a world: the broker crashes at the `visit`th visit of `site`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashPoint {
    pub site: String,
    pub visit: u32,
}

/// Every crash point of the broker a world may arm.
pub fn crash_point_sites() -> impl Iterator<Item = &'static str> {
    let cluster = kaas_core::txn::marker_queue::CRASH_POINTS.into_iter();
    let cleaner = kaas_core::partition::log::compact::CRASH_POINTS.into_iter();
    kaas_core::txn::coordinator::CRASH_POINTS
        .into_iter()
        .chain(cluster)
        .chain(["topics.before_partition_removal"])
        .chain(cleaner)
}

/// The part of a world every scenario has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Common {
    pub brokers: Vec<BrokerSpec>,
    pub volume_seed: u64,
    pub volume: VolumeFaults,
    /// The network's largest message latency.
    pub max_message_latency_ms: u64,
    pub buggify: Option<Buggify>,
    pub crash_point: Option<CrashPoint>,
    pub plan: Vec<Planned>,
    /// Seeds the workload's own choices (which producer aborts, when a copier pauses).
    pub workload_seed: u64,
}

/// How rough a world's faults may be: some workloads cannot tell a broker's clock step from a
/// broker bug, so they leave it out.
#[derive(Debug, Clone, Copy)]
pub struct FaultMix {
    /// Workload steps a progress trigger may wait for.
    pub progress_max: usize,
    pub clock_steps: bool,
    /// Largest rate drift of a broker's clocks, parts per million.
    pub drift_ppm_max: i64,
}

impl Common {
    /// One broker host named "broker" and the usual fault plan against it and `clients`.
    pub fn draw(rng: &mut ChaCha8Rng, mix: FaultMix) -> Common {
        let broker = rng.random();
        let brokers = BrokerSpec::single(broker, rng.random_range(-5000..=5000));
        Common::draw_with(rng, brokers, mix)
    }

    /// `brokers` and a fault plan against any of them.
    pub fn draw_with(rng: &mut ChaCha8Rng, mut brokers: Vec<BrokerSpec>, mix: FaultMix) -> Common {
        for b in &mut brokers {
            b.clock_drift_ppm = if mix.drift_ppm_max > 0 && rng.random_bool(0.3) {
                rng.random_range(-mix.drift_ppm_max..=mix.drift_ppm_max)
            } else {
                0
            };
        }
        let hosts: Vec<String> = brokers.iter().map(|b| b.host.clone()).collect();
        Common {
            volume_seed: rng.random(),
            volume: volume_faults(rng),
            max_message_latency_ms: [1, 10, 50, 100][rng.random_range(0..4)],
            buggify: buggify(rng),
            crash_point: None,
            plan: broker_faults(rng, &hosts, &["clients".to_string()], mix),
            workload_seed: rng.random(),
            brokers,
        }
    }

    pub fn hosts(&self) -> Vec<String> {
        self.brokers.iter().map(|b| b.host.clone()).collect()
    }

    /// Arms a crash point: the plan's other crashes go, partitions and the like stay.
    pub fn arm(&mut self, point: CrashPoint) {
        self.plan.retain(|p| !matches!(p.fault, Fault::Crash { .. }));
        self.crash_point = Some(point);
    }

    /// Whether this build has every BUGGIFY site and crash point the world names.
    pub fn check(&self) -> Result<(), String> {
        for site in self.buggify.iter().flat_map(|b| &b.sites) {
            if BuggifyPlan::site(site).is_none() {
                return Err(format!("the world enables BUGGIFY site {site}, which this build does not have"));
            }
        }
        if let Some(point) = &self.crash_point
            && !crash_point_sites().any(|s| s == point.site)
        {
            return Err(format!("the world arms crash point {}, which this build does not have", point.site));
        }
        Ok(())
    }

    fn buggify_plan(&self) -> Option<BuggifyPlan> {
        let b = self.buggify.as_ref()?;
        let sites: BTreeSet<&'static str> = b.sites.iter().filter_map(|s| BuggifyPlan::site(s)).collect();
        Some(BuggifyPlan { seed: b.seed, sites })
    }
}

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

/// Each BUGGIFY site enabled with this chance in a world that turns BUGGIFY on.
const SITE_ENABLED: f64 = 0.25;

pub fn buggify(rng: &mut ChaCha8Rng) -> Option<Buggify> {
    if !rng.random_bool(0.75) {
        return None;
    }
    let seed = rng.random();
    let sites = kaas_core::sim::BUGGIFY_SITES.iter().filter(|_| rng.random_bool(SITE_ENABLED)).map(|s| s.to_string());
    Some(Buggify { seed, sites: sites.collect() })
}

/// A fault trigger: after some of `progress_max` steps of the workload, or within 3 s.
pub fn trigger(rng: &mut ChaCha8Rng, progress_max: usize) -> Trigger {
    if rng.random_bool(0.5) {
        Trigger::Progress(rng.random_range(1..=progress_max.max(1)))
    } else {
        Trigger::Millis(rng.random_range(50..3000))
    }
}

fn pick<'a>(rng: &mut ChaCha8Rng, hosts: &'a [String]) -> &'a String {
    &hosts[rng.random_range(0..hosts.len())]
}

/// Faults against the broker hosts: 1 to 3 crashes, sometimes a graceful restart; up to 2
/// partitions or held-message spells between a broker and a client host; sometimes a pause
/// (SIGSTOP), a spell without the volume, a clock step or a change of clock rate.
pub fn broker_faults(rng: &mut ChaCha8Rng, brokers: &[String], clients: &[String], mix: FaultMix) -> Vec<Planned> {
    let mut plan: Vec<Planned> = (0..rng.random_range(1..=3))
        .map(|_| Planned {
            at: trigger(rng, mix.progress_max),
            fault: Fault::Crash { host: pick(rng, brokers).clone() },
        })
        .collect();
    if rng.random_bool(0.3) {
        let host = pick(rng, brokers).clone();
        plan.push(Planned { at: trigger(rng, mix.progress_max), fault: Fault::GracefulRestart { host } });
    }
    for _ in 0..rng.random_range(0..=2) {
        let at = Trigger::Millis(rng.random_range(50..3000));
        let ms = rng.random_range(100..3000);
        let (a, b) = (pick(rng, brokers).clone(), pick(rng, clients).clone());
        let fault = if rng.random_bool(0.5) { Fault::Partition { a, b, ms } } else { Fault::Hold { a, b, ms } };
        plan.push(Planned { at, fault });
    }
    if rng.random_bool(0.2) {
        let fault = Fault::Pause { host: pick(rng, brokers).clone(), ms: rng.random_range(100..6000) };
        plan.push(Planned { at: trigger(rng, mix.progress_max), fault });
    }
    if rng.random_bool(0.2) {
        let fault = Fault::VolumePartition { host: pick(rng, brokers).clone(), ms: rng.random_range(100..4000) };
        plan.push(Planned { at: trigger(rng, mix.progress_max), fault });
    }
    if mix.clock_steps && rng.random_bool(0.2) {
        let fault = Fault::ClockStep { host: pick(rng, brokers).clone(), ms: rng.random_range(-10_000..=10_000) };
        plan.push(Planned { at: trigger(rng, mix.progress_max), fault });
    }
    if mix.drift_ppm_max > 0 && rng.random_bool(0.2) {
        let ppm = rng.random_range(-mix.drift_ppm_max..=mix.drift_ppm_max);
        let fault = Fault::ClockRate { host: pick(rng, brokers).clone(), ppm };
        plan.push(Planned { at: trigger(rng, mix.progress_max), fault });
    }
    plan
}

/// A crash point for a world: one of `sites`, at its `1..=visits_max`th visit.
pub fn crash_point(rng: &mut ChaCha8Rng, sites: &[&str], visits_max: u32) -> CrashPoint {
    let site = sites[rng.random_range(0..sites.len())].to_string();
    CrashPoint { site, visit: rng.random_range(1..=visits_max) }
}

/// A simulation being run: turmoil, the shared volume, the broker hosts, and the history.
pub struct Run<'a> {
    pub sim: turmoil::Sim<'a>,
    pub volume: SimVolume,
    pub brokers: Brokers,
    pub history: History,
    seconds_max: u64,
}

/// Builds the simulation of `common`: 1 ms ticks, the world's network latency, its BUGGIFY
/// sites and crash point switched on, its broker hosts started with `config`.
pub fn start<'a>(seed: u64, common: &Common, seconds_max: u64, config: &BrokerConfig) -> Run<'a> {
    kaas_core::sim::set_buggify(common.buggify_plan().as_ref());
    let point = common.crash_point.as_ref().map(|p| {
        let site = crash_point_sites().find(|s| *s == p.site).expect("checked by Common::check");
        (site, p.visit)
    });
    kaas_core::sim::set_crash_point(point);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(seconds_max))
        .tick_duration(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(common.max_message_latency_ms))
        .build();
    let volume = SimVolume::new(common.volume_seed, common.volume);
    let brokers = hosts::add_brokers(&mut sim, &common.brokers, &volume, config);
    let history = History::default();
    crate::runner::watch_history(&history);
    Run { sim, volume, brokers, history, seconds_max }
}

impl Run<'_> {
    /// Steps the simulation through `common`'s fault plan and the liveness phase.
    pub fn drive(&mut self, common: &Common, progress: impl Fn() -> usize, liveness_ms: u64) -> Vec<String> {
        let bounds = Bounds { liveness_ms, wall_deadline: crate::runner::wall_deadline() };
        faults::drive(&mut self.sim, &self.volume, &self.brokers, common.plan.clone(), progress, bounds)
    }

    /// The result of the finished run: the volume's own violations added, the history kept if
    /// anything failed, the trace digested from the history, the volume and the simulated time.
    pub fn finish(self, scenario: &str, seed: u64, mut violations: Vec<String>) -> RunResult {
        kaas_core::sim::set_buggify(None);
        kaas_core::sim::set_crash_point(None);
        violations.extend(self.volume.violations());
        let history = crate::runner::keep_history(&self.history, &violations, scenario, seed);
        let mut trace = super::Digest::default();
        trace.feed_u64(self.history.digest());
        trace.feed_u64(self.volume.digest());
        trace.feed_u64(self.sim.elapsed().as_millis() as u64);
        debug_assert!(self.sim.elapsed().as_secs() <= self.seconds_max + 1, "the simulation stops at its duration");
        RunResult {
            pass: violations.is_empty(),
            trace: trace.finish(),
            sim_seconds: self.sim.elapsed().as_secs_f64(),
            wall_seconds: 0.0,
            violations,
            history,
            reached: Default::default(),
        }
    }
}

/// The wall clock of the clients, for record timestamps.
pub fn now_ms() -> i64 {
    crate::env::EPOCH_MS + crate::env::world_elapsed().as_millis() as i64
}
