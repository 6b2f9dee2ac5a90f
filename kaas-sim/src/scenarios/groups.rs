//! groups: one broker, a topic of several partitions, producers writing numbered batches to all
//! of them, and a consumer group of several members, each member its own host. Members join,
//! receive their partitions from the leader's assignment, resume from the committed offsets,
//! read, commit with their generation and heartbeat; on a rebalance or a fenced commit they
//! rejoin. Faults: broker crashes and graceful restarts, member crashes (the member's process
//! is killed, so the group waits out its session), partitions and held messages between the
//! broker and anyone, BUGGIFY. Besides the checkers every scenario runs, this one checks that
//! no generation hands a partition to two members.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::RunResult;
use super::common::{self, Batch, Shared};
use crate::checkers::{self, Commit, Resume, Session};
use crate::client::{CORRUPT_READ, OFFSET_OUT_OF_RANGE, Outcome};
use crate::faults::{self, Fault, Planned, Trigger};
use crate::history::outcome_name;
use crate::hosts::{self, BrokerControl};
use crate::volume::{SimVolume, VolumeFaults};

const TOPIC: &str = "groups";
const GROUP: &str = "group-readers";
const SIM_SECONDS_MAX: u64 = 900;
const LIVENESS_MS: u64 = 120_000;
const REBALANCE_TIMEOUT_MS: i32 = 5_000;
/// Kafka error codes that end a member's generation: it must join again.
const UNKNOWN_MEMBER_ID: i16 = 25;
const REJOIN: [i16; 3] = [22 /* ILLEGAL_GENERATION */, UNKNOWN_MEMBER_ID, 27 /* REBALANCE_IN_PROGRESS */];
const MEMBER_NAMES: [&str; 4] = ["member-0", "member-1", "member-2", "member-3"];

#[derive(Debug, Clone)]
struct Knobs {
    partitions: i32,
    batches: usize,
    records_per_batch: usize,
    producer_acks: Vec<i16>,
    members: usize,
    session_timeout_ms: i32,
    /// Chance in a thousand that a member stalls before a commit for longer than its session
    /// (a GC pause): its group moves on, and the commit it then sends must be refused.
    pause_per_mille: u32,
    member_seed: u64,
    max_wait_ms: i32,
    max_message_latency_ms: u64,
    clock_skew_ms: i64,
    faults: VolumeFaults,
    buggify: Option<u64>,
    plan: Vec<Planned>,
}

impl Knobs {
    fn from_seed(rng: &mut ChaCha8Rng) -> Knobs {
        let batches = rng.random_range(20..100);
        let members = rng.random_range(2..=MEMBER_NAMES.len());
        let mut plan = Vec::new();
        for _ in 0..rng.random_range(0..=2) {
            plan.push(Planned { at: common::trigger(rng, batches), fault: Fault::Crash { host: "broker" } });
        }
        if rng.random_bool(0.3) {
            plan.push(Planned { at: common::trigger(rng, batches), fault: Fault::GracefulRestart { host: "broker" } });
        }
        for _ in 0..rng.random_range(0..=3) {
            let host = MEMBER_NAMES[rng.random_range(0..members)];
            plan.push(Planned { at: common::trigger(rng, batches), fault: Fault::Crash { host } });
        }
        for _ in 0..rng.random_range(0..=3) {
            let at = Trigger::Millis(rng.random_range(50..5000));
            let ms = rng.random_range(100..8000);
            let other = if rng.random_bool(0.3) { "clients" } else { MEMBER_NAMES[rng.random_range(0..members)] };
            let fault = if rng.random_bool(0.5) {
                Fault::Partition { a: "broker", b: other, ms }
            } else {
                Fault::Hold { a: "broker", b: other, ms }
            };
            plan.push(Planned { at, fault });
        }
        Knobs {
            partitions: rng.random_range(1..=6),
            batches,
            records_per_batch: rng.random_range(1..5),
            producer_acks: (0..rng.random_range(1..=3)).map(|_| [-1, -1, 1, 0][rng.random_range(0..4)]).collect(),
            members,
            session_timeout_ms: rng.random_range(1500..6000),
            pause_per_mille: if rng.random_bool(0.5) { rng.random_range(5..=40) } else { 0 },
            member_seed: rng.random(),
            max_wait_ms: [0, 20, 100][rng.random_range(0..3)],
            max_message_latency_ms: [1, 10, 50][rng.random_range(0..3)],
            clock_skew_ms: rng.random_range(-5000..=5000),
            faults: common::volume_faults(rng),
            buggify: rng.random_bool(0.75).then(|| rng.random()),
            plan,
        }
    }
}

/// One member's view of one generation, as SyncGroup handed it out.
#[derive(Debug, Clone)]
struct Assignment {
    /// Which incarnation of the broker formed the generation: generations restart with it.
    boot: u64,
    generation: i32,
    member_id: String,
    partitions: Vec<i32>,
    /// History sequence number of the SyncGroup answer.
    synced_seq: u64,
}

/// An acked commit, with the generation it was made in.
#[derive(Debug, Clone)]
struct GroupCommit {
    boot: u64,
    generation: i32,
    member_id: String,
    partition: i32,
    /// History sequence number at which the request was sent.
    sent_seq: u64,
}

#[derive(Default)]
struct GroupState {
    assignments: Vec<Assignment>,
    commits: Vec<GroupCommit>,
    /// Partitions every member has seen committed up to a high watermark read after the last
    /// producer finished.
    caught_up: BTreeSet<i32>,
    members_done: BTreeSet<&'static str>,
}

type Group = Arc<Mutex<GroupState>>;

/// The leader's assignment: partitions dealt round-robin over the sorted member ids.
fn assign(members: &[String], partitions: i32) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = members.iter().map(|m| (m.clone(), Vec::new())).collect();
    for p in 0..partitions {
        out[p as usize % members.len()].1.push(p);
    }
    out
}

/// A member process: joins, consumes its partitions, commits, heartbeats; rejoins whenever its
/// generation ends; leaves once the whole group has caught up.
async fn member(name: &'static str, knobs: Knobs, world: Shared, group: Group, broker: BrokerControl) {
    let producers = knobs.producer_acks.len();
    let mut member_id = String::new();
    // The member's own dice (pauses), drawn from the seed.
    let index = MEMBER_NAMES.iter().position(|n| *n == name).expect("a member name") as u64;
    let mut rng = ChaCha8Rng::seed_from_u64(knobs.member_seed.wrapping_add(index));
    'join: loop {
        if group.lock().unwrap().caught_up.len() == knobs.partitions as usize {
            group.lock().unwrap().members_done.insert(name);
            return;
        }
        let mut client = common::connect("broker").await;
        let boot = broker.boots();
        let joined = client.join_group(GROUP, &member_id, knobs.session_timeout_ms, REBALANCE_TIMEOUT_MS).await;
        world.lock().unwrap().history.record(name, "join", &outcome_name(&joined), serde_json::json!({}));
        let joined = match joined {
            Outcome::Ok(joined) => joined,
            Outcome::Failed(code) => {
                if code == UNKNOWN_MEMBER_ID {
                    member_id.clear();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue 'join;
            }
            Outcome::Indefinite => continue 'join,
        };
        let me = joined.member;
        member_id = me.member_id.clone();
        let assignments =
            if joined.members.is_empty() { Vec::new() } else { assign(&joined.members, knobs.partitions) };
        let synced = client.sync_group(GROUP, &me, &assignments, REBALANCE_TIMEOUT_MS).await;
        let detail = serde_json::json!({"member_id": me.member_id, "generation": me.generation, "assigned": format!("{synced:?}")});
        let synced_seq = world.lock().unwrap().history.record(name, "sync", &outcome_name(&synced), detail);
        let partitions = match synced {
            Outcome::Ok(partitions) => partitions,
            Outcome::Failed(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'join;
            }
            Outcome::Indefinite => continue 'join,
        };
        // Only a generation formed and handed out by one incarnation can be checked.
        if broker.boots() == boot {
            group.lock().unwrap().assignments.push(Assignment {
                boot,
                generation: me.generation,
                member_id: me.member_id.clone(),
                partitions: partitions.clone(),
                synced_seq,
            });
        }
        // (partition, position, committed by this member)
        let mut positions: Vec<(i32, i64, i64)> = Vec::new();
        for &p in &partitions {
            let sent_seq = world.lock().unwrap().history.next_seq();
            let resumed = client.committed_offset(GROUP, TOPIC, p).await;
            let mut w = world.lock().unwrap();
            w.history.record(name, "offset-fetch", &outcome_name(&resumed), serde_json::json!({"partition": p}));
            let Outcome::Ok(committed) = resumed else { continue 'join };
            let history = w.partitions.entry(p).or_default();
            history.resumes.push(Resume { consumer: name.into(), sent_seq, committed });
            let start = committed.max(0);
            history.sessions.push(Session {
                consumer: name.into(),
                start,
                records: Vec::new(),
                high_watermarks: Vec::new(),
            });
            positions.push((p, start, committed));
        }
        let mut last_heartbeat = tokio::time::Instant::now();
        loop {
            if group.lock().unwrap().caught_up.len() == knobs.partitions as usize {
                let left = client.leave_group(GROUP, &me).await;
                world.lock().unwrap().history.record(name, "leave", &outcome_name(&left), serde_json::json!({}));
                group.lock().unwrap().members_done.insert(name);
                return;
            }
            let mut idle = true;
            for (p, position, committed) in positions.iter_mut() {
                let all_acked = world.lock().unwrap().producers_done == producers;
                let fetched = client.fetch(TOPIC, *p, *position, knobs.max_wait_ms).await;
                let last = {
                    let mut w = world.lock().unwrap();
                    let detail = match &fetched {
                        Outcome::Ok((records, hwm)) => {
                            serde_json::json!({"partition": p, "offset": position, "records": records.len(), "hwm": hwm})
                        }
                        _ => serde_json::json!({"partition": p, "offset": position}),
                    };
                    w.history.record(name, "fetch", &outcome_name(&fetched), detail);
                    match fetched {
                        Outcome::Ok((records, hwm)) => {
                            let session = w
                                .partitions
                                .entry(*p)
                                .or_default()
                                .sessions
                                .iter_mut()
                                .rev()
                                .find(|s| s.consumer == name)
                                .expect("started");
                            session.high_watermarks.push(hwm);
                            session.records.extend(records.iter().cloned());
                            if all_acked && records.is_empty() && *position >= hwm && (*committed).max(0) == *position {
                                drop(w);
                                group.lock().unwrap().caught_up.insert(*p);
                            }
                            records.last().map(|(offset, _)| *offset)
                        }
                        Outcome::Failed(CORRUPT_READ) => {
                            w.violations.push(format!(
                                "corrupt-read: partition {p}: the batch at offset {position} failed its CRC"
                            ));
                            return;
                        }
                        Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                            w.violations.push(format!(
                                "lost-write: partition {p}: position {position} is past the end of the log"
                            ));
                            return;
                        }
                        Outcome::Failed(_) => None,
                        Outcome::Indefinite => continue 'join,
                    }
                };
                if let Some(last) = last {
                    idle = false;
                    *position = last + 1;
                }
                // Also retries a commit that failed: the group cannot finish on an old one.
                if (*committed).max(0) >= *position {
                    continue;
                }
                if knobs.pause_per_mille > 0 && rng.random_range(0..1000) < knobs.pause_per_mille {
                    let pause_ms = knobs.session_timeout_ms as u64 + 1000;
                    world.lock().unwrap().history.record(name, "pause", "ok", serde_json::json!({"ms": pause_ms}));
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
                let (boot, sent_seq) = (broker.boots(), world.lock().unwrap().history.next_seq());
                let outcome = client.commit_as(GROUP, &me, TOPIC, *p, *position).await;
                if matches!(outcome, Outcome::Ok(())) && broker.boots() == boot {
                    let commit = GroupCommit {
                        boot,
                        generation: me.generation,
                        member_id: me.member_id.clone(),
                        partition: *p,
                        sent_seq,
                    };
                    group.lock().unwrap().commits.push(commit);
                }
                let mut w = world.lock().unwrap();
                let detail = serde_json::json!({"partition": p, "offset": position, "generation": me.generation});
                let acked_seq = w.history.record(name, "commit", &outcome_name(&outcome), detail);
                match outcome {
                    Outcome::Ok(()) => {
                        *committed = *position;
                        let history = w.partitions.entry(*p).or_default();
                        history.commits.push(Commit { consumer: name.into(), acked_seq, offset: *position });
                    }
                    Outcome::Failed(code) if REJOIN.contains(&code) => {
                        if code == UNKNOWN_MEMBER_ID {
                            member_id.clear();
                        }
                        continue 'join;
                    }
                    Outcome::Failed(_) => {}
                    Outcome::Indefinite => continue 'join,
                }
            }
            if last_heartbeat.elapsed() >= Duration::from_millis(knobs.session_timeout_ms as u64 / 4) {
                last_heartbeat = tokio::time::Instant::now();
                match client.heartbeat(GROUP, &me).await {
                    Outcome::Ok(()) => {}
                    Outcome::Failed(code) => {
                        world.lock().unwrap().history.record(
                            name,
                            "heartbeat",
                            &format!("failed:{code}"),
                            serde_json::json!({}),
                        );
                        if code == UNKNOWN_MEMBER_ID {
                            member_id.clear();
                        }
                        continue 'join;
                    }
                    Outcome::Indefinite => continue 'join,
                }
            }
            if idle {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

fn value(batch: usize, record: usize) -> Bytes {
    Bytes::from(format!("b{batch:05}-r{record}"))
}

async fn workload(knobs: Knobs, world: Shared, group: Group) -> turmoil::Result {
    common::create_topic("broker", TOPIC, knobs.partitions).await;
    let producers = knobs.producer_acks.len();
    let tasks: Vec<_> = (0..producers)
        .map(|id| {
            let batches = (id..knobs.batches)
                .step_by(producers)
                .map(|b| Batch {
                    id: b as u64,
                    partition: (b % knobs.partitions as usize) as i32,
                    values: (0..knobs.records_per_batch).map(|r| value(b, r)).collect(),
                })
                .collect();
            tokio::spawn(common::producer(
                format!("producer-{id}"),
                TOPIC,
                knobs.producer_acks[id],
                batches,
                world.clone(),
            ))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    while group.lock().unwrap().members_done.len() < knobs.members {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in 0..knobs.partitions {
        common::final_committed("broker", GROUP, TOPIC, p, &world).await;
        let (read, hwm, corrupt) = common::read_partition("broker", TOPIC, p).await;
        let mut w = world.lock().unwrap();
        w.violations.extend(corrupt);
        let history = w.partitions.entry(p).or_default();
        history.read = read;
        history.high_watermark = hwm;
    }
    Ok(())
}

/// split-assignment: one generation of one broker incarnation gave a partition to two members.
fn check_assignments(assignments: &[Assignment]) -> Vec<String> {
    let mut owner: BTreeMap<(u64, i32, i32), &str> = BTreeMap::new();
    let mut violations = Vec::new();
    for a in assignments {
        for p in &a.partitions {
            let first = *owner.entry((a.boot, a.generation, *p)).or_insert(&a.member_id);
            if first != a.member_id {
                violations.push(format!(
                    "split-assignment: generation {} gave partition {p} to {first} and {}",
                    a.generation, a.member_id
                ));
            }
        }
    }
    violations
}

/// fenced-commit: a commit sent after a later generation of the same broker incarnation was
/// handed out (so the coordinator had moved on) was acked: the old generation was not fenced.
fn check_fencing(assignments: &[Assignment], commits: &[GroupCommit]) -> Vec<String> {
    let mut violations = Vec::new();
    for c in commits {
        let later =
            assignments.iter().find(|a| a.boot == c.boot && a.generation > c.generation && a.synced_seq < c.sent_seq);
        if let Some(a) = later {
            violations.push(format!(
                "fenced-commit: {} committed partition {} in generation {} after generation {} was handed out",
                c.member_id, c.partition, c.generation, a.generation
            ));
        }
    }
    violations
}

pub fn run(seed: u64) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = Knobs::from_seed(&mut rng);
    let volume = SimVolume::new(rng.random(), knobs.faults);
    let mut sim = common::simulation(seed, SIM_SECONDS_MAX, knobs.max_message_latency_ms, knobs.buggify);
    let config = BrokerConfig {
        group_initial_rebalance_delay_ms: 0,
        group_min_session_timeout_ms: 1000,
        ..BrokerConfig::default()
    };
    let control = hosts::add_broker(&mut sim, "broker", volume.clone(), rng.random(), knobs.clock_skew_ms, config);
    let world = Shared::default();
    let group = Group::default();
    for &name in &MEMBER_NAMES[..knobs.members] {
        let (knobs, world, group, control) = (knobs.clone(), world.clone(), group.clone(), control.clone());
        sim.host(name, move || {
            let (knobs, world, group, control) = (knobs.clone(), world.clone(), group.clone(), control.clone());
            async move {
                member(name, knobs, world, group, control).await;
                Ok(())
            }
        });
    }
    sim.client("clients", workload(knobs.clone(), world.clone(), group.clone()));

    let progress = || world.lock().unwrap().partitions.values().map(|p| p.produced.acked.len()).sum();
    let controls = BTreeMap::from([("broker", control)]);
    let mut violations = faults::drive(&mut sim, &volume, &controls, knobs.plan.clone(), progress, LIVENESS_MS);
    let w = world.lock().unwrap();
    let g = group.lock().unwrap();
    violations.extend(w.violations.iter().cloned());
    if violations.is_empty() {
        violations = checkers::check_all(&w.partitions);
    }
    violations.extend(check_assignments(&g.assignments));
    violations.extend(check_fencing(&g.assignments, &g.commits));
    common::finish("groups", seed, &knobs, violations, &w.history, &volume, &sim)
}
