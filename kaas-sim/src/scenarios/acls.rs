//! acl-propagation: ACLs made and taken back through any broker of a cluster while a producer
//! writes, brokers crash, pause, restart and lose the volume. The brokers run with ACLs in force
//! and `allow.everyone.if.no.acl.found`; a standing ALLOW of everything on the topic keeps
//! Metadata open, and an admin flips a DENY of WRITE to the clients' principal (ANONYMOUS)
//! on and off, through a broker drawn each time, waiting past the propagation bound between
//! flips. Every change is in force on every broker within a heartbeat of its answer; the bound
//! the checker allows adds a lease (a paused owner resumed within its lease answers before its
//! next rescan) and the network's slack.
//!
//! Checks: no produce sent a bound after a DENY was answered, and answered before that DENY's
//! removal was sent, succeeded (`acl-not-enforced`); no produce was refused
//! TOPIC_AUTHORIZATION_FAILED unless a DENY may have been in force on its broker
//! (`acl-refused-wrongly`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use kaas_core::acl::authorizer::AuthorizerSettings;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::cluster::{self, Leases};
use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::client::Outcome;
use crate::workloads::{self, Shared, backoff};

const TOPIC: &str = "guarded";
const PRINCIPAL: &str = "User:ANONYMOUS";
const ALL: i8 = 2;
const WRITE: i8 = 4;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const SIM_SECONDS_MAX: u64 = 900;
const LIVENESS_MS: u64 = 60_000;
/// The longest pause the fault plan draws (`common::broker_faults`).
const PAUSE_MAX_MS: u64 = 6000;
/// A produce at most this often: enough to land in every window the checker draws.
const PRODUCE_EVERY_MS: u64 = 150;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclPropagation {
    pub common: Common,
    pub leases: Leases,
    pub partitions: i32,
    /// DENY made, then taken back, then made...: this many changes.
    pub flips: usize,
}

/// How long after its answer a change read on every rescan (an ACL, a client quota) may take
/// to be in force on every broker: a heartbeat's rescan, after a lease (a paused owner resumed
/// within its lease answers before its next rescan) and the network's slack.
pub(super) fn propagation_bound_ms(l: &Leases) -> i64 {
    (l.session_timeout_ms.max(PAUSE_MAX_MS) + 2 * l.heartbeat_interval_ms + 2000) as i64
}

/// A propagation world's draw: leases, how many changes (2 to 4), and brokers with faults.
pub(super) fn draw_propagation(rng: &mut ChaCha8Rng) -> (Leases, usize, Common) {
    let leases = Leases::draw(rng);
    let flips = rng.random_range(2..=4);
    let brokers = cluster::brokers(rng);
    let mix = FaultMix { progress_max: flips, clock_steps: false, drift_ppm_max: leases.drift_ppm_max() };
    let common = Common::draw_with(rng, brokers, mix);
    (leases, flips, common)
}

impl AclPropagation {
    /// How long after its answer an ACL change may take to be in force on every broker.
    fn bound_ms(&self) -> i64 {
        propagation_bound_ms(&self.leases)
    }
}

impl World for AclPropagation {
    fn draw(seed: u64) -> AclPropagation {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (leases, flips, common) = draw_propagation(&mut rng);
        AclPropagation { common, leases, partitions: rng.random_range(1..=4), flips }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let authorizer =
            AuthorizerSettings { enabled: true, allow_everyone_if_no_acl_found: true, ..Default::default() };
        let config = self.leases.apply(BrokerConfig { authorizer, ..BrokerConfig::default() });
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let log = Arc::new(Mutex::new(AclLog::default()));
        run.sim.client("clients", workload(self.clone(), world.clone(), log.clone()));
        let progress = || log.lock().unwrap().flips.len();
        // The admin waits up to two bounds between flips, then two more before it stops.
        let liveness_ms = (self.flips as u64 + 2) * 2 * self.bound_ms() as u64 + LIVENESS_MS;
        let mut violations = run.drive(&self.common, progress, liveness_ms);
        violations.extend(world.lock().unwrap().violations.iter().cloned());
        if violations.is_empty() {
            violations = log.lock().unwrap().check(self.bound_ms());
        }
        run.finish("acl-propagation", seed, violations)
    }
}

/// What the clients did, by the clients' clock.
#[derive(Default)]
struct AclLog {
    /// Each DENY change: (sent, answered, made (else taken back)), in order.
    flips: Vec<(i64, i64, bool)>,
    /// Each produce: (sent, answered, error code; None: no answer).
    produces: Vec<(i64, i64, Option<i16>)>,
    done: bool,
}

impl AclLog {
    fn check(&self, bound_ms: i64) -> Vec<String> {
        // Each DENY's life: made (sent, answered), taken back (sent, answered; never: MAX).
        let mut denies: Vec<(i64, i64, i64, i64)> = Vec::new();
        for &(sent, answered, made) in &self.flips {
            match made {
                true => denies.push((sent, answered, i64::MAX, i64::MAX)),
                false => {
                    let last = denies.last_mut().expect("a DENY is taken back after it is made");
                    (last.2, last.3) = (sent, answered);
                }
            }
        }
        let mut violations = Vec::new();
        for &(sent, answered, code) in &self.produces {
            match code {
                Some(0) => {
                    if let Some(d) = denies.iter().find(|d| d.1.saturating_add(bound_ms) <= sent && answered <= d.2) {
                        violations.push(format!(
                            "acl-not-enforced: a produce sent at {sent} succeeded at {answered}; a DENY answered at {} was \
                             in force on every broker from {} and not taken back before {}",
                            d.1,
                            d.1 + bound_ms,
                            d.2
                        ));
                    }
                }
                Some(TOPIC_AUTHORIZATION_FAILED)
                    if !denies.iter().any(|d| d.0 <= answered && sent <= d.3.saturating_add(bound_ms)) =>
                {
                    violations.push(format!(
                        "acl-refused-wrongly: a produce sent at {sent} was refused TOPIC_AUTHORIZATION_FAILED at \
                         {answered}, with no DENY in force then"
                    ));
                }
                _ => {}
            }
        }
        violations
    }
}

fn now() -> i64 {
    common::now_ms()
}

/// One ACL change, through `host` first and any broker after a failure, until answered.
async fn change(client: &mut crate::client::Client, hosts: &[String], mut at: usize, made: bool, allow: bool) -> i64 {
    let operation = if allow { ALL } else { WRITE };
    let principal = if allow { "User:*" } else { PRINCIPAL };
    loop {
        match client.topic_acl_on(&hosts[at % hosts.len()], made, TOPIC, principal, operation, allow).await {
            Outcome::Ok(()) => return now(),
            _ => {
                at += 1;
                backoff().await;
            }
        }
    }
}

async fn workload(w: AclPropagation, world: Shared, log: Arc<Mutex<AclLog>>) -> turmoil::Result {
    let hosts = w.common.hosts();
    let mut rng = ChaCha8Rng::seed_from_u64(w.common.workload_seed);
    workloads::create_topic(&world, TOPIC, w.partitions).await;
    let mut admin = workloads::client(&world, "acl-admin");
    // Everything allowed on the topic, so that a DENY of WRITE is the only refusal.
    change(&mut admin, &hosts, 0, true, true).await;
    let producer = tokio::spawn(produce(w.partitions, world.clone(), log.clone()));
    for flip in 0..w.flips {
        let gap = rng.random_range(w.bound_ms() * 3 / 2..=2 * w.bound_ms()) as u64;
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let made = flip % 2 == 0;
        let sent = now();
        let answered = change(&mut admin, &hosts, rng.random_range(0..hosts.len()), made, false).await;
        log.lock().unwrap().flips.push((sent, answered, made));
    }
    tokio::time::sleep(Duration::from_millis(2 * w.bound_ms() as u64)).await;
    log.lock().unwrap().done = true;
    let _ = producer.await;
    Ok(())
}

/// Produces one record at a time, round the partitions, until the admin is done.
async fn produce(partitions: i32, world: Shared, log: Arc<Mutex<AclLog>>) {
    let mut client = workloads::client(&world, "producer");
    let mut k = 0i64;
    while !log.lock().unwrap().done {
        let partition = (k % i64::from(partitions)) as i32;
        let sent = now();
        let outcome = client.produce(TOPIC, partition, &[Bytes::from(format!("r{k}"))], sent).await;
        let code = match outcome {
            Outcome::Ok(_) => Some(0),
            Outcome::Failed(code) => Some(code),
            Outcome::Indefinite => None,
        };
        log.lock().unwrap().produces.push((sent, now(), code));
        k += 1;
        tokio::time::sleep(Duration::from_millis(PRODUCE_EVERY_MS)).await;
    }
}
