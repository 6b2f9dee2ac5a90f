//! A consumer-group member of the consumer protocol (KIP-848): it heartbeats, and the
//! coordinator tells it its partitions. It gives up what it is told to (committing its position
//! first), says so in its next heartbeat, takes what it is given (resuming from the committed
//! offsets), reads, and commits with its member epoch. Fenced (FENCED_MEMBER_EPOCH,
//! UNKNOWN_MEMBER_ID), it drops everything and joins again. It may stall past its session (a GC
//! pause), after which its commits must be refused. It leaves once the whole group has caught up.
//!
//! It records what the consumer-protocol checks need (`checkers::groups`): each partition given
//! and given up, each heartbeat that was taken or fenced, and each commit acked.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::Shared;
use super::member::{Ended, Group, Membership, switch_after};
use crate::checkers::groups::{GroupCommit, Ownership, OwnershipEvent};
use crate::checkers::{Commit, Resume, Session};
use crate::client::{Beat, CORRUPT_READ, Member, OFFSET_OUT_OF_RANGE, Outcome};
use crate::history::outcome_name;
use crate::hosts::BrokerControl;

const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const STALE_MEMBER_EPOCH: i16 = 113;
/// How often a member heartbeats (the broker's `group.consumer.heartbeat.interval.ms` in these
/// worlds).
pub const HEARTBEAT_INTERVAL_MS: u64 = 250;

struct Owned {
    partition: i32,
    position: i64,
    committed: i64,
}

/// A member process named `name` (its member id too).
pub async fn member(name: String, m: Membership, world: Shared, group: Group, coordinator: BrokerControl) -> Ended {
    let mut rng = ChaCha8Rng::seed_from_u64(m.seed);
    let switch_after = switch_after(&mut rng, m.mixed);
    let mut acked_commits = 0;
    let mut client = super::client(&world, &name);
    let g = m.group.as_str();
    let record = |op: &str, outcome: &str, detail: serde_json::Value| {
        world.lock().unwrap().history.record(&name, op, outcome, detail)
    };
    let event = |partition: i32, seq: u64, event: OwnershipEvent| {
        let o = Ownership { boot: coordinator.boots(), member_id: name.clone(), partition, seq, event };
        group.lock().unwrap().ownership.push(o);
    };
    'join: loop {
        let mut epoch = 0;
        let mut topic_id = [0u8; 16];
        let mut owned: Vec<Owned> = Vec::new();
        // What the member holds changed since it last said: the next heartbeat says it.
        let mut report = true;
        let mut next_beat = tokio::time::Instant::now();
        loop {
            let done = group.lock().unwrap().caught_up.len() == m.partitions as usize;
            if done || switch_after.is_some_and(|n| acked_commits >= n) {
                for o in &owned {
                    event(o.partition, world.lock().unwrap().history.next_seq(), OwnershipEvent::Released);
                }
                let left = client.consumer_heartbeat(g, &name, -1, None, None).await;
                record("leave", &outcome_name(&left), serde_json::json!({}));
                if !done {
                    return Ended::Switch;
                }
                group.lock().unwrap().members_done.insert(name.clone());
                return Ended::Done;
            }
            if tokio::time::Instant::now() >= next_beat {
                next_beat = tokio::time::Instant::now() + Duration::from_millis(HEARTBEAT_INTERVAL_MS);
                let holding: Vec<i32> = owned.iter().map(|o| o.partition).collect();
                let said = [(topic_id, holding.clone())];
                let subscribe = (epoch == 0).then_some(m.topic.as_str());
                let sent = world.lock().unwrap().history.next_seq();
                let beat = client.consumer_heartbeat(g, &name, epoch, subscribe, report.then_some(&said[..])).await;
                let detail = serde_json::json!({"epoch": epoch, "holding": holding, "reported": report});
                let answered = record("consumer-heartbeat", &outcome_name(&beat), detail);
                match beat {
                    Outcome::Ok(Beat { member_epoch, assignment, .. }) => {
                        report = false;
                        // A member when it was sent: a new one (holding nothing of an earlier
                        // incarnation's), or still the one it was.
                        event(-1, sent, if epoch == 0 { OwnershipEvent::Joined } else { OwnershipEvent::Taken });
                        epoch = member_epoch;
                        if let Some(assignment) = assignment {
                            let mut given: BTreeSet<i32> = BTreeSet::new();
                            for (id, partitions) in assignment {
                                topic_id = id;
                                given.extend(partitions);
                            }
                            // Give up first: commit the position, then drop it.
                            let mut kept = Vec::new();
                            for mut o in std::mem::take(&mut owned) {
                                if given.contains(&o.partition) {
                                    kept.push(o);
                                    continue;
                                }
                                commit(&mut client, &world, &group, &coordinator, &name, g, &m, epoch, &mut o).await;
                                report = true;
                                // Given up once the next heartbeat says so: from when it is sent.
                                event(o.partition, world.lock().unwrap().history.next_seq(), OwnershipEvent::Released);
                            }
                            owned = kept;
                            for p in given {
                                if owned.iter().any(|o| o.partition == p) {
                                    continue;
                                }
                                event(p, answered, OwnershipEvent::Given);
                                let sent_seq = world.lock().unwrap().history.next_seq();
                                let resumed = client.committed_offset(g, &m.topic, p).await;
                                record("resume", &outcome_name(&resumed), serde_json::json!({"partition": p}));
                                let Outcome::Ok(committed) = resumed else {
                                    // Not resumable now: hand it back by joining again.
                                    for o in &owned {
                                        event(o.partition, sent_seq, OwnershipEvent::Released);
                                    }
                                    event(p, sent_seq, OwnershipEvent::Released);
                                    leave_quietly(&mut client, g, &name).await;
                                    continue 'join;
                                };
                                let start = committed.max(0);
                                {
                                    let mut w = world.lock().unwrap();
                                    let history = w.partitions.entry(p).or_default();
                                    history.resumes.push(Resume { consumer: name.clone(), sent_seq, committed });
                                    history.sessions.push(Session {
                                        consumer: name.clone(),
                                        start,
                                        records: Vec::new(),
                                        high_watermarks: Vec::new(),
                                    });
                                }
                                owned.push(Owned { partition: p, position: start, committed });
                                report = true;
                            }
                        }
                    }
                    Outcome::Failed(UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH) => {
                        // Removed: everything it held is gone; join again.
                        event(-1, answered, OwnershipEvent::Fenced);
                        continue 'join;
                    }
                    Outcome::Failed(_) | Outcome::Indefinite => {
                        // The answer may have been lost with an assignment in it: the next
                        // heartbeat is a full one (it says what it holds), which the coordinator
                        // answers with the whole assignment, as Kafka's clients do.
                        report = true;
                        next_beat = tokio::time::Instant::now() + Duration::from_millis(50);
                    }
                }
            }
            let mut idle = true;
            for o in owned.iter_mut() {
                let p = o.partition;
                let all_acked = world.lock().unwrap().producers_done == m.producers;
                let fetched = client.fetch(&m.topic, p, o.position, m.max_wait_ms).await;
                let caught_up = {
                    let mut w = world.lock().unwrap();
                    w.history.record(&name, "poll", &outcome_name(&fetched), serde_json::json!({"partition": p}));
                    match fetched {
                        Outcome::Ok((records, hwm)) => {
                            let sessions = &mut w.partitions.entry(p).or_default().sessions;
                            let session = sessions.iter_mut().rev().find(|s| s.consumer == name).expect("started");
                            session.high_watermarks.push(hwm);
                            session.records.extend(records.iter().cloned());
                            let caught_up = all_acked
                                && records.is_empty()
                                && o.position >= hwm
                                && o.committed.max(0) == o.position;
                            if let Some((last, _)) = records.last() {
                                idle = false;
                                o.position = last + 1;
                            }
                            caught_up
                        }
                        Outcome::Failed(CORRUPT_READ) => {
                            w.violations.push(format!("corrupt-read: partition {p}: a batch failed its CRC"));
                            return Ended::Done;
                        }
                        Outcome::Failed(OFFSET_OUT_OF_RANGE) => {
                            w.violations.push(format!("lost-write: partition {p}: a position past the end of the log"));
                            return Ended::Done;
                        }
                        Outcome::Failed(_) | Outcome::Indefinite => false,
                    }
                };
                if caught_up {
                    group.lock().unwrap().caught_up.insert(p);
                }
                if o.committed.max(0) >= o.position {
                    continue;
                }
                if m.pause_per_mille > 0 && rng.random_range(0..1000) < m.pause_per_mille {
                    let pause_ms = m.session_timeout_ms as u64 + 1000;
                    record("pause", "ok", serde_json::json!({"ms": pause_ms}));
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
                let before = o.committed;
                let refused = commit(&mut client, &world, &group, &coordinator, &name, g, &m, epoch, o).await;
                if o.committed != before {
                    acked_commits += 1;
                }
                match refused {
                    Some(UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH) => {
                        next_beat = tokio::time::Instant::now();
                    }
                    Some(STALE_MEMBER_EPOCH) => next_beat = tokio::time::Instant::now(),
                    _ => {}
                }
            }
            if idle {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Commits a partition's position under the member's epoch; the refusal's code, if refused.
#[allow(clippy::too_many_arguments)]
async fn commit(
    client: &mut crate::client::Client,
    world: &Shared,
    group: &Group,
    coordinator: &BrokerControl,
    name: &str,
    g: &str,
    m: &Membership,
    epoch: i32,
    o: &mut Owned,
) -> Option<i16> {
    if o.committed.max(0) >= o.position {
        return None;
    }
    let me = Member { member_id: name.to_string(), generation: epoch };
    let (boot, sent_seq) = (coordinator.boots(), world.lock().unwrap().history.next_seq());
    let outcome = client.commit_as(g, &me, &m.topic, o.partition, o.position).await;
    if matches!(outcome, Outcome::Ok(())) && coordinator.boots() == boot {
        let commit =
            GroupCommit { boot, generation: epoch, member_id: name.to_string(), partition: o.partition, sent_seq };
        group.lock().unwrap().commits.push(commit);
    }
    let mut w = world.lock().unwrap();
    let detail = serde_json::json!({"partition": o.partition, "offset": o.position, "epoch": epoch});
    let acked_seq = w.history.record(name, "commit", &outcome_name(&outcome), detail);
    match outcome {
        Outcome::Ok(()) => {
            o.committed = o.position;
            let history = w.partitions.entry(o.partition).or_default();
            history.commits.push(Commit { consumer: name.to_string(), acked_seq, offset: o.position });
            None
        }
        Outcome::Failed(code) => Some(code),
        Outcome::Indefinite => None,
    }
}

/// Leaves the group, whatever the answer (a member that cannot resume joins again after).
async fn leave_quietly(client: &mut crate::client::Client, g: &str, name: &str) {
    let _ = client.consumer_heartbeat(g, name, -1, None, None).await;
}
