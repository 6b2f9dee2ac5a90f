//! Share group members (KIP-932) over the wire, as real share consumers behave: a member joins
//! by ShareGroupHeartbeat and keeps beating, keeps a share session with each broker leading one
//! of its partitions (epoch 0 opens it, each request carries the next, a replaced connection
//! starts it again), acquires records by ShareFetch and acknowledges them, accepting most,
//! releasing or rejecting some, and forgetting a few (their locks run out). It acknowledges
//! either on its next ShareFetch (implicit mode, as the Java client does by default) or at once
//! by ShareAcknowledge (explicit mode).
//!
//! A member slot runs instances in turn. An instance stops in one of three ways:
//! - a crash: its process is gone, its connections close, and the brokers let go of what it
//!   held;
//! - going silent: its connections stay open but nothing more comes on them (a hung process):
//!   only acquisition locks and the session timeout free what it held;
//! - a pause: it comes back as a zombie, acknowledges what it held, heartbeats, and, told it is
//!   fenced, fetches once more on its old sessions as a careless client would (the broker must
//!   give it nothing), then stops.
//!
//! Everything acquired and acknowledged goes into the `ShareLog` for `checkers::share`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kaas_client::share_consumer::{Delivery, Seen, ShareConsumer, ShareObserver, refused_before_write};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::oneshot;

use super::{Shared, backoff};
use crate::checkers::share::{Ack, AckKind, AckOutcome, Acquisition, ShareLog};
use crate::client::{ACCEPT, REJECT, RELEASE, ShareAcks};
use crate::history::History;

/// What the members are to do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub group: String,
    pub topic: String,
    pub partitions: i32,
    /// Per mille, at each round of an instance: that it stops.
    pub stop_per_mille: u32,
    /// Per mille of stops: a pause (it comes back as a zombie), a silence; the rest crash.
    pub pause_per_mille: u32,
    pub silent_per_mille: u32,
    pub pause_ms_max: u64,
    /// Per mille of acquired records: released, rejected, forgotten; the rest accepted.
    pub release_per_mille: u32,
    pub reject_per_mille: u32,
    pub forget_per_mille: u32,
    /// Per mille of instances that acknowledge by ShareAcknowledge rather than on their next
    /// ShareFetch.
    pub explicit_per_mille: u32,
}

/// What the members share with the scenario: the log, the progress count, the silent
/// instances (kept, connections open, to the end) and the signal to stop.
#[derive(Default)]
pub struct Members {
    pub log: ShareLog,
    /// Records accepted, for the fault triggers.
    pub accepted: usize,
    pub done: bool,
    silent: Vec<ShareConsumer>,
}

pub type SharedMembers = Arc<Mutex<Members>>;

/// Hears a share consumer for the checker: every call placed in the run's history order.
pub struct Observer {
    pub members: SharedMembers,
    pub history: History,
}

fn kind_of(t: i8) -> AckKind {
    match t {
        ACCEPT => AckKind::Accept,
        RELEASE => AckKind::Release,
        _ => AckKind::Reject,
    }
}

impl ShareObserver for Observer {
    fn mark(&mut self) -> u64 {
        self.history.next_seq()
    }

    fn joining(&mut self, member_id: &str, sent: u64) {
        self.members.lock().unwrap().log.joins.push((member_id.to_string(), sent));
    }

    fn fenced(&mut self, member_id: &str, epoch: i32, received: u64) {
        self.members.lock().unwrap().log.fences.push((member_id.to_string(), epoch, received));
    }

    fn fetched(&mut self, member_id: &str, partitions: &BTreeSet<i32>, sent: u64, seen: Seen, acquired: &[Delivery]) {
        let received = self.history.next_seq();
        let mut m = self.members.lock().unwrap();
        match seen {
            Seen::Ok => m.log.acquisitions.extend(acquired.iter().map(|d| Acquisition {
                member: member_id.to_string(),
                partition: d.partition,
                offset: d.record.offset,
                delivery_count: d.record.delivery_count,
                sent,
                received,
            })),
            Seen::Failed(code) if refused_before_write(code) => {}
            // A refusal that can follow a write (an owner whose lease ran out after writing).
            Seen::Failed(_) => m.log.unknown_fetches.extend(partitions.iter().map(|p| (*p, sent, received))),
            // A paused broker may act on it after its client gave up.
            Seen::Lost => m.log.unknown_fetches.extend(partitions.iter().map(|p| (*p, sent, u64::MAX))),
        }
    }

    fn partition_failed(&mut self, _member_id: &str, partition: i32, _code: i16, sent: u64) {
        let received = self.history.next_seq();
        self.members.lock().unwrap().log.unknown_fetches.push((partition, sent, received));
    }

    fn acknowledged(&mut self, member_id: &str, acks: &[ShareAcks], sent: u64, seen: &dyn Fn(i32) -> Seen) {
        let received = self.history.next_seq();
        let mut m = self.members.lock().unwrap();
        for a in acks {
            let outcome = match seen(a.partition) {
                Seen::Ok => AckOutcome::Done,
                Seen::Failed(code) if refused_before_write(code) => AckOutcome::Refused(code),
                Seen::Failed(_) | Seen::Lost => AckOutcome::Unknown,
            };
            for (&offset, &t) in &a.types {
                let kind = kind_of(t);
                if outcome == AckOutcome::Done && kind == AckKind::Accept {
                    m.accepted += 1;
                }
                m.log.acks.push(Ack {
                    member: member_id.to_string(),
                    partition: a.partition,
                    offset,
                    kind,
                    sent,
                    received,
                    outcome,
                });
            }
        }
    }
}

/// Why an instance stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Done,
    Crashed,
    Zombie,
}

/// What an instance does with one delivery: an acknowledgement type, or nothing (its lock
/// runs out).
fn decide(rng: &mut ChaCha8Rng, plan: &Plan) -> Option<i8> {
    let roll = rng.random_range(0..1000);
    if roll < plan.release_per_mille {
        Some(RELEASE)
    } else if roll < plan.release_per_mille + plan.reject_per_mille {
        Some(REJECT)
    } else if roll < plan.release_per_mille + plan.reject_per_mille + plan.forget_per_mille {
        None
    } else {
        Some(ACCEPT)
    }
}

/// A zombie, back from a pause: acknowledges what it decided before it stopped, beats, and
/// if told it is fenced, fetches on its old sessions as a careless client would (its fetch
/// thread has not heard), a few times over so that records come while it asks.
async fn come_back(consumer: &mut ShareConsumer, observer: &mut Observer) {
    consumer.acknowledge_now(false, observer).await;
    let partitions = consumer.assigned().clone();
    let brokers = consumer.session_brokers();
    consumer.beat(observer).await;
    if consumer.member_epoch == 0 {
        for _ in 0..3 {
            for broker in &brokers {
                consumer.fetch_from(broker, &partitions, observer).await;
            }
        }
    }
}

/// One instance of a member slot, from joining to its stop.
async fn instance(
    name: String,
    plan: Plan,
    world: Shared,
    members: SharedMembers,
    seed: u64,
    paused: oneshot::Sender<()>,
) -> Stop {
    let history = world.lock().unwrap().history.clone();
    let mut observer = Observer { members: members.clone(), history };
    let client = super::client(&world, &name);
    let mut consumer = ShareConsumer::new(client, &plan.group, &plan.topic, &format!("member-{name}"));
    consumer.max_wait_ms = 300;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let explicit = rng.random_range(0..1000) < plan.explicit_per_mille;
    let detail = serde_json::json!({"member": consumer.member_id, "explicit": explicit});
    consumer.client.record("share-member", "ok", detail);
    loop {
        if members.lock().unwrap().done {
            consumer.close(&mut observer).await;
            return Stop::Done;
        }
        if rng.random_range(0..1000) < plan.stop_per_mille {
            let roll = rng.random_range(0..1000);
            if roll < plan.pause_per_mille {
                let away_ms = rng.random_range(0..=plan.pause_ms_max);
                consumer.client.record("pause", "ok", serde_json::json!({"ms": away_ms}));
                let _ = paused.send(());
                tokio::time::sleep(Duration::from_millis(away_ms)).await;
                come_back(&mut consumer, &mut observer).await;
                return Stop::Zombie;
            }
            if roll < plan.pause_per_mille + plan.silent_per_mille {
                consumer.client.record("silent", "ok", serde_json::json!({}));
                members.lock().unwrap().silent.push(consumer);
                return Stop::Crashed;
            }
            consumer.client.record("crash", "ok", serde_json::json!({}));
            return Stop::Crashed;
        }
        consumer.max_records = rng.random_range(1..=20);
        consumer.acquire_mode = rng.random_range(0..=1);
        let deliveries = consumer.poll(&mut observer).await;
        if deliveries.is_empty() && consumer.member_epoch == 0 {
            backoff().await;
        }
        for d in &deliveries {
            if let Some(kind) = decide(&mut rng, &plan) {
                consumer.acknowledge(d, kind);
            }
        }
        if explicit {
            consumer.acknowledge_now(false, &mut observer).await;
        }
    }
}

/// One member slot: instances in turn until the scenario says done; a paused instance's
/// successor starts while it is away, and the slot waits for its zombies too.
pub async fn slot(slot: i32, plan: Plan, world: Shared, members: SharedMembers, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut zombies = Vec::new();
    for n in 0.. {
        let name = format!("share-{slot}.{n}");
        let (paused, mut paused_rx) = oneshot::channel();
        let mut running =
            tokio::spawn(instance(name, plan.clone(), world.clone(), members.clone(), rng.random(), paused));
        tokio::select! {
            biased;
            stop = &mut running => {
                if matches!(stop, Ok(Stop::Done)) {
                    break;
                }
            }
            Ok(()) = &mut paused_rx => zombies.push(running),
        }
        if members.lock().unwrap().done {
            break;
        }
    }
    for z in zombies {
        let _ = z.await;
    }
}

/// Ends the silent instances' connections (the run is over).
pub fn release_silent(members: &SharedMembers) {
    members.lock().unwrap().silent.clear();
}
