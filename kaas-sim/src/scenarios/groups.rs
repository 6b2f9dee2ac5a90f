//! groups: one broker, a topic of several partitions, producers writing numbered batches to all
//! of them, and a consumer group of several members, each member its own host
//! (`workloads::member`). Faults: the broker's (crashes, graceful restarts, pauses, stalls of
//! the volume, clock trouble), member crashes (the member's process is killed, so the group
//! waits out its session), partitions and held messages between the broker and anyone,
//! BUGGIFY. Besides the checkers every scenario runs, this one checks that no generation hands
//! a partition to two members and that no old generation's commit is taken. Half the worlds'
//! members speak KIP-848's consumer protocol (`workloads::consumer_member`): the broker assigns,
//! and the checks are that no partition is given while a live member holds it and that no
//! commit of a partition given away since is taken. In a third of the worlds drawn since the
//! online migration (`mixed`), members of both protocols share the group: each starts with one
//! (alternating by member), comes back from a crash with the other, and may leave after some
//! commits to come back with the other too, so the live group is upgraded to a consumer group
//! and downgraded back, again and again. There every member records what it holds, and the
//! consumer protocol's checks apply to all of them (a classic member's generation is then its
//! member epoch, so the classic checks by generation do not).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::common::{self, Common, FaultMix};
use super::{RunResult, World};
use crate::checkers::{self, groups as group_check};
use crate::faults::{Fault, Planned};
use crate::workloads::consumer_member;
use crate::workloads::member::{self, Ended, Group, Membership};
use crate::workloads::plain::{self, Batch};
use crate::workloads::{self, Shared, consumer};

const TOPIC: &str = "groups";
const GROUP: &str = "group-readers";
const SIM_SECONDS_MAX: u64 = 900;
const LIVENESS_MS: u64 = 120_000;
const MEMBERS_MAX: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Groups {
    pub common: Common,
    pub partitions: i32,
    pub batches: usize,
    pub records_per_batch: usize,
    pub producer_acks: Vec<i16>,
    pub members: usize,
    pub session_timeout_ms: i32,
    /// Chance in a thousand that a member stalls before a commit for longer than its session.
    pub pause_per_mille: u32,
    pub max_wait_ms: i32,
    /// The members speak KIP-848's consumer protocol instead of the classic one.
    #[serde(default)]
    pub consumer_protocol: bool,
    /// Members of both protocols share the group, which migrates between them.
    #[serde(default)]
    pub mixed: bool,
}

fn member_name(i: usize) -> String {
    format!("member-{i}")
}

impl World for Groups {
    fn draw(seed: u64) -> Groups {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let batches = rng.random_range(20..100);
        let members = rng.random_range(2..=MEMBERS_MAX);
        let mix = FaultMix { progress_max: batches, clock_steps: true, drift_ppm_max: 2000 };
        let mut common = Common::draw(&mut rng, mix);
        let mut clients: Vec<String> = (0..members).map(member_name).collect();
        clients.push("clients".into());
        common.plan = common::broker_faults(&mut rng, &common.hosts(), &clients, mix);
        for _ in 0..rng.random_range(0..=3) {
            let host = member_name(rng.random_range(0..members));
            common.plan.push(Planned { at: common::trigger(&mut rng, batches), fault: Fault::Crash { host } });
        }
        Groups {
            common,
            partitions: rng.random_range(1..=6),
            batches,
            records_per_batch: rng.random_range(1..5),
            producer_acks: (0..rng.random_range(1..=3)).map(|_| [-1, -1, 1, 0][rng.random_range(0..4)]).collect(),
            members,
            session_timeout_ms: rng.random_range(1500..6000),
            pause_per_mille: if rng.random_bool(0.5) { rng.random_range(5..=40) } else { 0 },
            max_wait_ms: [0, 20, 100][rng.random_range(0..3)],
            // Drawn last, so that the rest of a seed's world is what it was before KIP-848.
            consumer_protocol: rng.random_bool(0.5),
            // Drawn after it, for the same reason.
            mixed: rng.random_bool(1.0 / 3.0),
        }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let config = BrokerConfig {
            group_initial_rebalance_delay_ms: 0,
            group_min_session_timeout_ms: 1000,
            group_consumer_session_timeout_ms: self.session_timeout_ms,
            group_consumer_heartbeat_interval_ms: consumer_member::HEARTBEAT_INTERVAL_MS as i32,
            ..BrokerConfig::default()
        };
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        let group = Group::default();
        let coordinator = run.brokers["broker"].clone();
        for i in 0..self.members {
            let membership = Membership {
                group: GROUP.into(),
                topic: TOPIC.into(),
                partitions: self.partitions,
                producers: self.producer_acks.len(),
                session_timeout_ms: self.session_timeout_ms,
                pause_per_mille: self.pause_per_mille,
                max_wait_ms: self.max_wait_ms,
                seed: self.common.workload_seed.wrapping_add(i as u64),
                mixed: self.mixed,
            };
            let (world, group, coordinator) = (world.clone(), group.clone(), coordinator.clone());
            let (consumer_protocol, mixed) = (self.consumer_protocol, self.mixed);
            // How many times the member's host started: a mixed world's member comes back from
            // a crash speaking the other protocol.
            let starts = Arc::new(AtomicUsize::new(0));
            run.sim.host(member_name(i), move || {
                let (mut m, world, group, coordinator) =
                    (membership.clone(), world.clone(), group.clone(), coordinator.clone());
                let start = starts.fetch_add(1, Ordering::Relaxed);
                async move {
                    let mut consumer = if mixed { (i + start) % 2 == 1 } else { consumer_protocol };
                    if mixed && consumer && start == 0 {
                        // The classic members form the group first: the first consumer-protocol
                        // member to join upgrades it.
                        tokio::time::sleep(Duration::from_millis(500 + 100 * i as u64)).await;
                    }
                    loop {
                        let (name, run, world, group) = (member_name(i), m.clone(), world.clone(), group.clone());
                        let ended = match consumer {
                            true => consumer_member::member(name, run, world, group, coordinator.clone()).await,
                            false => member::member(name, run, world, group, coordinator.clone()).await,
                        };
                        if ended == Ended::Done {
                            return Ok(());
                        }
                        consumer = !consumer;
                        // Each run draws its own pauses and switch.
                        m.seed = m.seed.wrapping_add(1 << 32);
                    }
                }
            });
        }
        run.sim.client("clients", workload(self.clone(), world.clone(), group.clone()));
        let progress = || world.lock().unwrap().partitions.values().map(|p| p.produced.acked.len()).sum();
        let mut violations = run.drive(&self.common, progress, LIVENESS_MS);
        {
            let w = world.lock().unwrap();
            let g = group.lock().unwrap();
            violations.extend(w.violations.iter().cloned());
            if violations.is_empty() {
                violations = checkers::check_all(&w.partitions);
            }
            if !self.mixed {
                violations.extend(group_check::check_assignments(&g.assignments));
                violations.extend(group_check::check_fencing(&g.assignments, &g.commits));
            }
            violations.extend(group_check::check_ownership(&g.ownership));
            if self.consumer_protocol || self.mixed {
                violations.extend(group_check::check_consumer_fencing(&g.ownership, &g.commits));
            }
        }
        run.finish("groups", seed, violations)
    }
}

fn value(batch: usize, record: usize) -> Bytes {
    Bytes::from(format!("b{batch:05}-r{record}"))
}

async fn workload(g: Groups, world: Shared, group: Group) -> turmoil::Result {
    workloads::create_topic(&world, TOPIC, g.partitions).await;
    group.lock().unwrap().topic_created = true;
    let producers = g.producer_acks.len();
    let tasks: Vec<_> = (0..producers)
        .map(|id| {
            let batches = (id..g.batches)
                .step_by(producers)
                .map(|b| Batch {
                    id: b as u64,
                    partition: (b % g.partitions as usize) as i32,
                    values: (0..g.records_per_batch).map(|r| value(b, r)).collect(),
                })
                .collect();
            tokio::spawn(plain::producer(
                format!("producer-{id}"),
                TOPIC.into(),
                g.producer_acks[id],
                batches,
                world.clone(),
            ))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    while group.lock().unwrap().members_done.len() < g.members {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in 0..g.partitions {
        consumer::final_committed(&world, GROUP, TOPIC, p).await;
        consumer::final_read(&world, TOPIC, p).await;
    }
    Ok(())
}
