//! The fault phase and the liveness phase of a run. A scenario plans its faults from the seed;
//! `drive` steps the simulation, applies each fault when its trigger fires, heals partitions
//! and held links when their time is up, and once the last fault is over gives the workload a
//! bounded time to finish: a run that does not is a liveness violation.

use std::collections::BTreeMap;

use crate::hosts::BrokerControl;
use crate::volume::SimVolume;

/// When a fault fires: after some progress of the workload (the scenario counts it, e.g. acked
/// batches), or at a simulated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Progress(usize),
    Millis(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The process is killed: its unsynced writes are lost (torn, per the volume's faults),
    /// then it restarts and recovers from the volume.
    Crash { host: &'static str },
    /// SIGTERM and a restart: connections close, partitions are synced, nothing is lost.
    GracefulRestart { host: &'static str },
    /// No messages between the two hosts for a while; connections break.
    Partition { a: &'static str, b: &'static str, ms: u64 },
    /// Messages between the two hosts are held for a while, then delivered late.
    Hold { a: &'static str, b: &'static str, ms: u64 },
}

#[derive(Debug, Clone)]
pub struct Planned {
    pub at: Trigger,
    pub fault: Fault,
}

/// A graceful stop taking longer than this is a violation: SIGTERM must end the process.
const GRACEFUL_STOP_MS_MAX: u64 = 30_000;

/// Steps `sim` until its clients are done. `progress` reports the workload's progress for
/// `Trigger::Progress`; `controls` names the broker hosts that can stop gracefully.
pub fn drive(
    sim: &mut turmoil::Sim<'_>,
    volume: &SimVolume,
    controls: &BTreeMap<&'static str, BrokerControl>,
    mut plan: Vec<Planned>,
    progress: impl Fn() -> usize,
    liveness_ms: u64,
) -> Vec<String> {
    let mut violations = Vec::new();
    // Links to heal: (at ms, a, b, held rather than partitioned).
    let mut healing: Vec<(u64, &'static str, &'static str, bool)> = Vec::new();
    // Hosts stopping gracefully: host -> since ms.
    let mut stopping: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut quiet_since: Option<u64> = None;
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                violations.push(format!("liveness: {e}"));
                break;
            }
        }
        let now_ms = sim.elapsed().as_millis() as u64;
        if kaas_core::sim::take_crash_request() {
            // A broker reached the armed crash point (`crash_point!`): crash the brokers now.
            for &host in controls.keys() {
                sim.crash(host);
                volume.crash(host);
                stopping.remove(host);
                sim.bounce(host);
            }
            quiet_since = None;
        }
        let done = progress();
        while let Some(i) = plan.iter().position(|p| match p.at {
            Trigger::Progress(n) => done >= n,
            Trigger::Millis(t) => now_ms >= t,
        }) {
            match plan.remove(i).fault {
                Fault::Crash { host } => {
                    sim.crash(host);
                    volume.crash(host);
                    stopping.remove(host);
                    sim.bounce(host);
                }
                Fault::GracefulRestart { host } => {
                    if let Some(control) = controls.get(host) {
                        control.stop();
                        stopping.entry(host).or_insert(now_ms);
                    }
                }
                Fault::Partition { a, b, ms } => {
                    sim.partition(a, b);
                    healing.push((now_ms + ms, a, b, false));
                }
                Fault::Hold { a, b, ms } => {
                    sim.hold(a, b);
                    healing.push((now_ms + ms, a, b, true));
                }
            }
        }
        healing.retain(|&(at, a, b, held)| {
            if now_ms < at {
                return true;
            }
            if held {
                sim.release(a, b);
            } else {
                sim.repair(a, b);
            }
            false
        });
        let stopped: Vec<&'static str> = stopping.keys().copied().filter(|h| !sim.is_host_running(*h)).collect();
        for host in stopped {
            stopping.remove(host);
            volume.settle(host);
            sim.bounce(host);
        }
        if let Some((host, since)) = stopping.iter().find(|(_, since)| now_ms > *since + GRACEFUL_STOP_MS_MAX) {
            violations.push(format!(
                "liveness: {host} still running {} s after SIGTERM (since {since} ms)",
                GRACEFUL_STOP_MS_MAX / 1000
            ));
            break;
        }
        // The liveness phase: faults have stopped, so everything must converge, and soon.
        if plan.is_empty() && healing.is_empty() && stopping.is_empty() {
            let since = *quiet_since.get_or_insert(now_ms);
            if now_ms > since + liveness_ms {
                violations.push(format!("liveness: not done {} s after the last fault", liveness_ms / 1000));
                break;
            }
        }
    }
    violations
}
