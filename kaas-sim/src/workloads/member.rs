//! A consumer-group member (the classic protocol): joins, receives its partitions from the
//! leader's assignment, resumes from the committed offsets, reads, commits with its generation
//! and heartbeats; on a rebalance or a fenced commit it joins again. It may stall before a
//! commit for longer than its session (a GC pause in the client), and the commit it then sends
//! must be refused. It leaves once the whole group has caught up.
//!
//! In a world whose group migrates between the protocols (`Membership::mixed`) it speaks the
//! consumer protocol's bytes (so that the coordinator can upgrade the group, and answer it as a
//! classic member of a consumer group), records its partitions as the consumer-protocol
//! members do for `checkers::groups::check_ownership`, and may leave after some commits to come
//! back speaking the other protocol (a rolling upgrade or downgrade).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Shared, backoff};
use crate::checkers::groups::{Assignment, GroupCommit, Ownership, OwnershipEvent};
use crate::checkers::{Commit, Resume, Session};
use crate::client::{CORRUPT_READ, OFFSET_OUT_OF_RANGE, Outcome};
use crate::history::outcome_name;
use crate::hosts::BrokerControl;

pub const REBALANCE_TIMEOUT_MS: i32 = 5_000;
/// Kafka error codes that end a member's generation: it must join again.
const UNKNOWN_MEMBER_ID: i16 = 25;
const REJOIN: [i16; 3] = [22 /* ILLEGAL_GENERATION */, UNKNOWN_MEMBER_ID, 27 /* REBALANCE_IN_PROGRESS */];

/// What a member needs to know of its group.
#[derive(Debug, Clone)]
pub struct Membership {
    pub group: String,
    pub topic: String,
    pub partitions: i32,
    pub producers: usize,
    pub session_timeout_ms: i32,
    /// Chance in a thousand that the member stalls past its session before a commit.
    pub pause_per_mille: u32,
    pub max_wait_ms: i32,
    pub seed: u64,
    /// Members of both protocols share the group, and switch protocol now and then.
    pub mixed: bool,
}

/// How a member's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The whole group caught up: it left for good.
    Done,
    /// It left to come back speaking the other protocol.
    Switch,
}

/// After how many acked commits a member of a mixed world leaves to switch protocol, if it does.
pub fn switch_after(rng: &mut ChaCha8Rng, mixed: bool) -> Option<usize> {
    (mixed && rng.random_bool(0.5)).then(|| rng.random_range(3..30))
}

#[derive(Default)]
pub struct GroupState {
    pub assignments: Vec<Assignment>,
    pub commits: Vec<GroupCommit>,
    /// Partitions every member has seen committed up to a high watermark read after the last
    /// producer finished.
    pub caught_up: BTreeSet<i32>,
    pub members_done: BTreeSet<String>,
    /// Consumer-protocol members' partitions (KIP-848), for `checkers::groups`.
    pub ownership: Vec<Ownership>,
    /// The topic exists: a leader's assignment names only partitions that do, as Kafka's
    /// assignors (which assign from metadata) do.
    pub topic_created: bool,
}

pub type Group = Arc<Mutex<GroupState>>;

/// The leader's assignment: partitions dealt round-robin over the sorted member ids.
fn assign(members: &[String], partitions: i32) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = members.iter().map(|m| (m.clone(), Vec::new())).collect();
    for p in 0..partitions {
        out[p as usize % members.len()].1.push(p);
    }
    out
}

/// A member process named `name`. `coordinator` is the broker host coordinating the group:
/// its boots tell which incarnation formed a generation (generations restart with it).
pub async fn member(name: String, m: Membership, world: Shared, group: Group, coordinator: BrokerControl) -> Ended {
    let mut member_id = String::new();
    let mut rng = ChaCha8Rng::seed_from_u64(m.seed);
    let switch_after = switch_after(&mut rng, m.mixed);
    let mut acked_commits = 0;
    let mut client = super::client(&world, &name);
    let g = m.group.as_str();
    let embedded = m.mixed.then_some(m.topic.as_str());
    // Partitions as the ownership check sees them (mixed worlds only): by member id.
    let event = |member_id: &str, partition: i32, seq: u64, event: OwnershipEvent| {
        if m.mixed {
            let o = Ownership { boot: coordinator.boots(), member_id: member_id.to_string(), partition, seq, event };
            group.lock().unwrap().ownership.push(o);
        }
    };
    // An assignment of partitions that do not exist yet would be one no coordinator can read:
    // the upgrade of the group would take the member as owning nothing of them.
    while m.mixed && !group.lock().unwrap().topic_created {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut holding: Vec<i32> = Vec::new();
    // The coordinator no longer knows the member id: joining again, it asks for a new one.
    let mut forget = false;
    'join: loop {
        // Joining again: everything held is given up first (an eager protocol).
        for p in std::mem::take(&mut holding) {
            event(&member_id, p, world.lock().unwrap().history.next_seq(), OwnershipEvent::Released);
        }
        if std::mem::take(&mut forget) {
            member_id.clear();
        }
        if group.lock().unwrap().caught_up.len() == m.partitions as usize {
            group.lock().unwrap().members_done.insert(name.clone());
            return Ended::Done;
        }
        let boot = coordinator.boots();
        let sent = world.lock().unwrap().history.next_seq();
        let joined = client.join_group(g, &member_id, m.session_timeout_ms, REBALANCE_TIMEOUT_MS, embedded).await;
        world.lock().unwrap().history.record(&name, "join", &outcome_name(&joined), serde_json::json!({}));
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
        // It holds nothing as it joins, and a consumer group takes a member id it no longer
        // knows as a new member's: a new incarnation, whatever its id.
        event(&me.member_id, -1, sent, OwnershipEvent::Joined);
        member_id = me.member_id.clone();
        let assignments = if joined.members.is_empty() { Vec::new() } else { assign(&joined.members, m.partitions) };
        let sync_sent = world.lock().unwrap().history.next_seq();
        let synced = client.sync_group(g, &me, &assignments, REBALANCE_TIMEOUT_MS, embedded).await;
        let detail = serde_json::json!({"member_id": me.member_id, "generation": me.generation, "assigned": format!("{synced:?}")});
        let synced_seq = world.lock().unwrap().history.record(&name, "sync", &outcome_name(&synced), detail);
        let partitions = match synced {
            Outcome::Ok(partitions) => partitions,
            Outcome::Failed(_) => {
                backoff().await;
                continue 'join;
            }
            Outcome::Indefinite => continue 'join,
        };
        event(&member_id, -1, sync_sent, OwnershipEvent::Taken);
        for &p in &partitions {
            event(&member_id, p, synced_seq, OwnershipEvent::Given);
        }
        holding = partitions.clone();
        // Only a generation formed and handed out by one incarnation can be checked.
        if coordinator.boots() == boot {
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
            let resumed = client.committed_offset(g, &m.topic, p).await;
            let mut w = world.lock().unwrap();
            w.history.record(&name, "resume", &outcome_name(&resumed), serde_json::json!({"partition": p}));
            let Outcome::Ok(committed) = resumed else { continue 'join };
            let history = w.partitions.entry(p).or_default();
            history.resumes.push(Resume { consumer: name.clone(), sent_seq, committed });
            let start = committed.max(0);
            history.sessions.push(Session {
                consumer: name.clone(),
                start,
                records: Vec::new(),
                high_watermarks: Vec::new(),
            });
            positions.push((p, start, committed));
        }
        let mut last_heartbeat = tokio::time::Instant::now();
        loop {
            let done = group.lock().unwrap().caught_up.len() == m.partitions as usize;
            if done || switch_after.is_some_and(|n| acked_commits >= n) {
                for p in std::mem::take(&mut holding) {
                    event(&member_id, p, world.lock().unwrap().history.next_seq(), OwnershipEvent::Released);
                }
                let left = client.leave_group(g, &me).await;
                world.lock().unwrap().history.record(&name, "leave", &outcome_name(&left), serde_json::json!({}));
                if !done {
                    return Ended::Switch;
                }
                group.lock().unwrap().members_done.insert(name.clone());
                return Ended::Done;
            }
            let mut idle = true;
            for (p, position, committed) in positions.iter_mut() {
                let all_acked = world.lock().unwrap().producers_done == m.producers;
                let fetched = client.fetch(&m.topic, *p, *position, m.max_wait_ms).await;
                let last = {
                    let mut w = world.lock().unwrap();
                    let detail = match &fetched {
                        Outcome::Ok((records, hwm)) => {
                            serde_json::json!({"partition": p, "offset": position, "records": records.len(), "hwm": hwm})
                        }
                        _ => serde_json::json!({"partition": p, "offset": position}),
                    };
                    w.history.record(&name, "poll", &outcome_name(&fetched), detail);
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
                            return Ended::Done;
                        }
                        Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                            w.violations.push(format!(
                                "lost-write: partition {p}: position {position} is past the end of the log"
                            ));
                            return Ended::Done;
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
                if m.pause_per_mille > 0 && rng.random_range(0..1000) < m.pause_per_mille {
                    let pause_ms = m.session_timeout_ms as u64 + 1000;
                    world.lock().unwrap().history.record(&name, "pause", "ok", serde_json::json!({"ms": pause_ms}));
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
                let (boot, sent_seq) = (coordinator.boots(), world.lock().unwrap().history.next_seq());
                let outcome = client.commit_as(g, &me, &m.topic, *p, *position).await;
                if matches!(outcome, Outcome::Ok(())) {
                    acked_commits += 1;
                    event(&member_id, -1, sent_seq, OwnershipEvent::Taken);
                }
                if matches!(outcome, Outcome::Ok(())) && coordinator.boots() == boot {
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
                let acked_seq = w.history.record(&name, "commit", &outcome_name(&outcome), detail);
                match outcome {
                    Outcome::Ok(()) => {
                        *committed = *position;
                        let history = w.partitions.entry(*p).or_default();
                        history.commits.push(Commit { consumer: name.clone(), acked_seq, offset: *position });
                    }
                    Outcome::Failed(code) if REJOIN.contains(&code) => {
                        if code == UNKNOWN_MEMBER_ID {
                            forget = true;
                        }
                        continue 'join;
                    }
                    Outcome::Failed(_) => {}
                    Outcome::Indefinite => continue 'join,
                }
            }
            if last_heartbeat.elapsed() >= Duration::from_millis(m.session_timeout_ms as u64 / 4) {
                last_heartbeat = tokio::time::Instant::now();
                let sent = world.lock().unwrap().history.next_seq();
                match client.heartbeat(g, &me).await {
                    Outcome::Ok(()) => event(&member_id, -1, sent, OwnershipEvent::Taken),
                    Outcome::Failed(code) => {
                        if code == UNKNOWN_MEMBER_ID {
                            forget = true;
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
