//! The fault phase and the liveness phase of a run. A world's fault plan is drawn from its seed
//! and kept whole in its seed file; `drive` steps the simulation, applies each fault when its
//! trigger fires, heals partitions, held links, pauses and volume partitions when their time
//! is up, and once the last fault is over gives the workload a bounded time to finish: a run
//! that does not is a liveness violation. A run that takes too long in wall-clock time is cut
//! short as a `hang`, and a broker assertion ends the run at once.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::hosts::Brokers;
use crate::volume::SimVolume;

/// When a fault fires: after some progress of the workload (the scenario counts it, e.g. acked
/// batches), or at a simulated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    Progress(usize),
    Millis(u64),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// The process is killed: its unsynced writes are lost (torn, per the volume's faults),
    /// then it restarts and recovers from the volume.
    Crash { host: String },
    /// SIGTERM and a restart: connections close, partitions are synced, nothing is lost.
    GracefulRestart { host: String },
    /// No messages between the two hosts for a while; connections break.
    Partition { a: String, b: String, ms: u64 },
    /// Messages between the two hosts are held for a while, then delivered late.
    Hold { a: String, b: String, ms: u64 },
    /// The host stops running for a while (SIGSTOP, a long GC pause): no task of it runs,
    /// timers included, and it resumes with its memory intact. Broker hosts only.
    Pause { host: String, ms: u64 },
    /// The host cannot reach the volume for a while: its I/O calls stall, then complete late
    /// or fail.
    VolumePartition { host: String, ms: u64 },
    /// The host's wall clock steps by `ms` (NTP stepping it, a VM restored from a snapshot).
    ClockStep { host: String, ms: i64 },
    /// From now on the host's clocks, wall and monotonic, run `ppm` parts per million fast (or
    /// slow, if negative).
    ClockRate { host: String, ppm: i64 },
}

impl Fault {
    /// Every kind of fault, by its name in a world file.
    pub const KINDS: [&str; 8] =
        ["crash", "graceful-restart", "partition", "hold", "pause", "volume-partition", "clock-step", "clock-rate"];

    /// Its name in a world file.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Crash { .. } => "crash",
            Fault::GracefulRestart { .. } => "graceful-restart",
            Fault::Partition { .. } => "partition",
            Fault::Hold { .. } => "hold",
            Fault::Pause { .. } => "pause",
            Fault::VolumePartition { .. } => "volume-partition",
            Fault::ClockStep { .. } => "clock-step",
            Fault::ClockRate { .. } => "clock-rate",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub at: Trigger,
    pub fault: Fault,
}

/// A graceful stop taking longer than this is a violation: SIGTERM must end the process.
const GRACEFUL_STOP_MS_MAX: u64 = 30_000;
/// How many steps pass between two looks at the wall clock.
const WALL_CHECK_STEPS: u64 = 256;

/// How a run is bounded: its liveness window and its wall-clock budget.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Once the last fault is over, the workload must finish within this much simulated time.
    pub liveness_ms: u64,
    /// When the run is cut short as a hang.
    pub wall_deadline: Instant,
}

/// Something healing later: (at ms, what).
enum Healing {
    Link { a: String, b: String, held: bool },
    Resume(String),
    Reach(String),
}

/// Steps `sim` until its clients are done. `progress` reports the workload's progress for
/// `Trigger::Progress`; `brokers` are the broker hosts (the others, such as member hosts, can
/// only be crashed and partitioned).
pub fn drive(
    sim: &mut turmoil::Sim<'_>,
    volume: &SimVolume,
    brokers: &Brokers,
    mut plan: Vec<Planned>,
    progress: impl Fn() -> usize,
    bounds: Bounds,
) -> Vec<String> {
    let mut violations = Vec::new();
    let mut healing: Vec<(u64, Healing)> = Vec::new();
    // Hosts stopping gracefully: host -> since ms.
    let mut stopping: BTreeMap<String, u64> = BTreeMap::new();
    let mut quiet_since: Option<u64> = None;
    let mut steps = 0u64;
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                violations.push(format!("liveness: {e}"));
                break;
            }
        }
        steps += 1;
        if let Some(assertion) = crate::runner::broker_assertion() {
            violations.push(assertion);
            break;
        }
        let now_ms = sim.elapsed().as_millis() as u64;
        if steps.is_multiple_of(WALL_CHECK_STEPS) && Instant::now() > bounds.wall_deadline {
            violations.push(format!(
                "hang: the run was still going at simulated {} s when its wall-clock budget ran out",
                now_ms / 1000
            ));
            break;
        }
        if kaas_core::sim::take_crash_request() {
            // A broker reached the armed crash point (`crash_point!`): crash the brokers now.
            for host in brokers.keys() {
                crash(sim, volume, brokers, host);
                stopping.remove(host);
            }
            quiet_since = None;
        }
        let done = progress();
        while let Some(i) = plan.iter().position(|p| match p.at {
            Trigger::Progress(n) => done >= n,
            Trigger::Millis(t) => now_ms >= t,
        }) {
            let fault = plan.remove(i).fault;
            kaas_core::sim::reach(format!("fault {}", fault.kind()));
            match fault {
                Fault::Crash { host } => {
                    crash(sim, volume, brokers, &host);
                    stopping.remove(&host);
                }
                Fault::GracefulRestart { host } => {
                    if let Some(control) = brokers.get(&host) {
                        control.stop();
                        stopping.entry(host).or_insert(now_ms);
                    }
                }
                Fault::Partition { a, b, ms } => {
                    sim.partition(a.as_str(), b.as_str());
                    healing.push((now_ms + ms, Healing::Link { a, b, held: false }));
                }
                Fault::Hold { a, b, ms } => {
                    sim.hold(a.as_str(), b.as_str());
                    healing.push((now_ms + ms, Healing::Link { a, b, held: true }));
                }
                Fault::Pause { host, ms } => {
                    if let Some(control) = brokers.get(&host) {
                        control.gate.pause();
                        healing.push((now_ms + ms, Healing::Resume(host)));
                    }
                }
                Fault::VolumePartition { host, ms } => {
                    volume.stall(&host);
                    healing.push((now_ms + ms, Healing::Reach(host)));
                }
                Fault::ClockStep { host, ms } => {
                    if let Some(control) = brokers.get(&host) {
                        control.clock.step(ms);
                    }
                }
                Fault::ClockRate { host, ppm } => {
                    if let Some(control) = brokers.get(&host) {
                        control.clock.set_rate(sim.elapsed(), ppm);
                    }
                }
            }
        }
        healing.retain(|(at, what)| {
            if now_ms < *at {
                return true;
            }
            match what {
                Healing::Link { a, b, held: true } => sim.release(a.as_str(), b.as_str()),
                Healing::Link { a, b, held: false } => sim.repair(a.as_str(), b.as_str()),
                Healing::Resume(host) => brokers[host].gate.resume(),
                Healing::Reach(host) => volume.heal(host),
            }
            false
        });
        // A broker that exited (SIGTERM, or a start that failed) is started again; the kernel
        // keeps what it wrote.
        let exited: Vec<String> = brokers.keys().filter(|h| !sim.is_host_running(h.as_str())).cloned().collect();
        for host in exited {
            stopping.remove(&host);
            volume.settle(&host);
            sim.bounce(host.as_str());
        }
        if let Some((host, since)) = stopping.iter().find(|(_, since)| now_ms > **since + GRACEFUL_STOP_MS_MAX) {
            violations.push(format!(
                "liveness: {host} still running {} s after SIGTERM (since {since} ms)",
                GRACEFUL_STOP_MS_MAX / 1000
            ));
            break;
        }
        // The liveness phase: faults have stopped, so everything must converge, and soon.
        if plan.is_empty() && healing.is_empty() && stopping.is_empty() {
            let since = *quiet_since.get_or_insert(now_ms);
            if now_ms > since + bounds.liveness_ms {
                violations.push(format!("liveness: not done {} s after the last fault", bounds.liveness_ms / 1000));
                break;
            }
        }
    }
    violations
}

/// Kills `host` and starts it again. A paused host dies paused, so its gate opens for the next
/// boot; a host cut off from the volume stays cut off (its stalled calls die with it).
fn crash(sim: &mut turmoil::Sim<'_>, volume: &SimVolume, brokers: &Brokers, host: &str) {
    sim.crash(host);
    volume.crash(host);
    if let Some(control) = brokers.get(host) {
        control.gate.resume();
    }
    sim.bounce(host);
}
