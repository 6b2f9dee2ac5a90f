//! quota-propagation: a client quota set and removed through any broker of a cluster while
//! brokers crash, pause, restart and lose the volume, and an observer asks every broker in
//! turn what quota binds the client. A change is in force on every broker within a heartbeat
//! of its answer (the bound is acl-propagation's: a lease, a pause, the network's slack), and
//! what DescribeClientQuotas answers is the snapshot the broker throttles by.
//!
//! Check: every describe sent a bound after a change was answered, and answered before the
//! next change was sent, shows that change (`quota-not-propagated`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::acls::{draw_propagation, propagation_bound_ms};
use super::cluster::Leases;
use super::common::{self, Common};
use super::{RunResult, World};
use crate::client::Outcome;
use crate::workloads::{self, Shared, backoff};

const CLIENT_ID: &str = "metered";
const RATE: f64 = 1_048_576.0;
const SIM_SECONDS_MAX: u64 = 900;
const LIVENESS_MS: u64 = 60_000;
const DESCRIBE_EVERY_MS: u64 = 200;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaPropagation {
    pub common: Common,
    pub leases: Leases,
    /// Quota set, then removed, then set...: this many changes.
    pub flips: usize,
}

impl QuotaPropagation {
    /// How long after its answer a quota change may take to be in force on every broker.
    fn bound_ms(&self) -> i64 {
        propagation_bound_ms(&self.leases)
    }
}

impl World for QuotaPropagation {
    fn draw(seed: u64) -> QuotaPropagation {
        let (leases, flips, common) = draw_propagation(&mut ChaCha8Rng::seed_from_u64(seed));
        QuotaPropagation { common, leases, flips }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let config = self.leases.apply(BrokerConfig::default());
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let log = Arc::new(Mutex::new(QuotaLog::default()));
        run.sim.client("clients", workload(self.clone(), world.clone(), log.clone()));
        let progress = || log.lock().unwrap().changes.len();
        let liveness_ms = (self.flips as u64 + 2) * 2 * self.bound_ms() as u64 + LIVENESS_MS;
        let mut violations = run.drive(&self.common, progress, liveness_ms);
        violations.extend(world.lock().unwrap().violations.iter().cloned());
        if violations.is_empty() {
            violations = log.lock().unwrap().check(self.bound_ms());
        }
        run.finish("quota-propagation", seed, violations)
    }
}

/// What the clients did, by the clients' clock.
#[derive(Default)]
struct QuotaLog {
    /// Each change: (sent, answered, set (else removed)), in order.
    changes: Vec<(i64, i64, bool)>,
    /// Each describe answered: (broker, sent, answered, quota shown).
    describes: Vec<(String, i64, i64, bool)>,
    done: bool,
}

impl QuotaLog {
    fn check(&self, bound_ms: i64) -> Vec<String> {
        let mut violations = Vec::new();
        for (host, sent, answered, shown) in &self.describes {
            // The changes in force everywhere when the describe was sent; none after it sent
            // before it was answered.
            let settled = self.changes.iter().take_while(|c| c.1.saturating_add(bound_ms) <= *sent).count();
            if self.changes.get(settled).is_some_and(|next| next.0 < *answered) {
                continue;
            }
            let expected = settled > 0 && self.changes[settled - 1].2;
            if *shown != expected {
                violations.push(format!(
                    "quota-not-propagated: {host} answered at {answered} (asked at {sent}) that the quota is {}; the \
                     change answered at {} made it {} everywhere from {}",
                    if *shown { "set" } else { "absent" },
                    if settled > 0 { self.changes[settled - 1].1 } else { 0 },
                    if expected { "set" } else { "absent" },
                    if settled > 0 { self.changes[settled - 1].1 + bound_ms } else { 0 },
                ));
            }
        }
        violations
    }
}

fn now() -> i64 {
    common::now_ms()
}

async fn workload(w: QuotaPropagation, world: Shared, log: Arc<Mutex<QuotaLog>>) -> turmoil::Result {
    let hosts = w.common.hosts();
    let mut rng = ChaCha8Rng::seed_from_u64(w.common.workload_seed);
    let observer = tokio::spawn(observe(hosts.clone(), world.clone(), log.clone()));
    let mut admin = workloads::client(&world, "quota-admin");
    for flip in 0..w.flips {
        let gap = rng.random_range(w.bound_ms() * 3 / 2..=2 * w.bound_ms()) as u64;
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let set = flip % 2 == 0;
        let sent = now();
        let mut at = rng.random_range(0..hosts.len());
        loop {
            let rate = set.then_some(RATE);
            match admin.client_quota_on(&hosts[at % hosts.len()], CLIENT_ID, rate).await {
                Outcome::Ok(()) => break,
                _ => {
                    at += 1;
                    backoff().await;
                }
            }
        }
        log.lock().unwrap().changes.push((sent, now(), set));
    }
    tokio::time::sleep(Duration::from_millis(2 * w.bound_ms() as u64)).await;
    log.lock().unwrap().done = true;
    let _ = observer.await;
    Ok(())
}

/// Asks each broker in turn what quota binds the client, until the admin is done.
async fn observe(hosts: Vec<String>, world: Shared, log: Arc<Mutex<QuotaLog>>) {
    let mut client = workloads::client(&world, "quota-observer");
    let mut k = 0usize;
    while !log.lock().unwrap().done {
        let host = &hosts[k % hosts.len()];
        let sent = now();
        if let Outcome::Ok(shown) = client.described_quota_on(host, CLIENT_ID).await {
            log.lock().unwrap().describes.push((host.clone(), sent, now(), shown.is_some()));
        }
        k += 1;
        tokio::time::sleep(Duration::from_millis(DESCRIBE_EVERY_MS)).await;
    }
}
