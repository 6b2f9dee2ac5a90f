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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::oneshot;

use super::{Shared, backoff};
use crate::checkers::share::{Ack, AckKind, AckOutcome, Acquisition, ShareLog, refused_before_write};
use crate::client::{ACCEPT, Client, NOT_SENT, Outcome, REJECT, RELEASE, ShareAcks, ShareFetchSpec, ShareFetched};
use crate::history::History;

/// Kafka's error codes a share member acts on.
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
const LEADER_MOVED: [i16; 4] = [3, 5, 6, 74];

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
/// instances' clients (kept, connections open, to the end) and the signal to stop.
#[derive(Default)]
pub struct Members {
    pub log: ShareLog,
    /// Records accepted, for the fault triggers.
    pub accepted: usize,
    pub done: bool,
    silent: Vec<Client>,
}

pub type SharedMembers = Arc<Mutex<Members>>;

/// One share session, with a broker.
#[derive(Debug, Default)]
struct Session {
    /// The epoch the next request carries.
    epoch: i32,
    /// The connection it lives on (`Client::connection_serial`).
    serial: u64,
    partitions: BTreeSet<i32>,
}

/// Why an instance stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Done,
    Crashed,
    Zombie,
}

struct Instance {
    history: History,
    member_id: String,
    member_epoch: i32,
    plan: Plan,
    client: Client,
    members: SharedMembers,
    rng: ChaCha8Rng,
    topic_id: [u8; 16],
    assigned: BTreeSet<i32>,
    sessions: BTreeMap<String, Session>,
    /// Acknowledgements waiting for the next request to their broker (implicit mode).
    pending: BTreeMap<String, BTreeMap<i32, BTreeMap<i64, i8>>>,
    explicit: bool,
    next_beat: tokio::time::Instant,
}

fn kind_of(t: i8) -> AckKind {
    match t {
        ACCEPT => AckKind::Accept,
        RELEASE => AckKind::Release,
        _ => AckKind::Reject,
    }
}

impl Instance {
    /// The history's next sequence number: the run's order of events, which the router
    /// records every call into.
    fn seq(&self) -> u64 {
        self.history.next_seq()
    }

    /// Beats if it is time: joins (epoch 0) when not a member.
    async fn beat(&mut self) {
        let now = tokio::time::Instant::now();
        if self.member_epoch > 0 && now < self.next_beat {
            return;
        }
        let subscribe = [self.plan.topic.clone()];
        let joining = self.member_epoch == 0;
        let sent = self.seq();
        if joining {
            self.members.lock().unwrap().log.joins.push((self.member_id.clone(), sent));
        }
        let outcome = self
            .client
            .share_group_heartbeat(
                &self.plan.group,
                &self.member_id,
                self.member_epoch,
                joining.then_some(&subscribe[..]),
            )
            .await;
        let received = self.seq();
        match outcome {
            Outcome::Ok(beat) => {
                self.member_epoch = beat.member_epoch;
                self.next_beat = now + Duration::from_millis(beat.heartbeat_interval_ms.clamp(100, 5000) as u64);
                if let Some(assignment) = beat.assignment {
                    self.assigned = assignment
                        .iter()
                        .filter(|(id, _)| *id == self.topic_id)
                        .flat_map(|(_, ps)| ps.clone())
                        .collect();
                }
            }
            Outcome::Failed(code @ (UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH)) => {
                self.fenced(code, received);
            }
            _ => self.next_beat = now + Duration::from_millis(100),
        }
    }

    /// The group said this member is no member at its epoch: it forgets its partitions and
    /// what it holds, and joins again with the same id (as KIP-848's clients do).
    fn fenced(&mut self, code: i16, received: u64) {
        let mut m = self.members.lock().unwrap();
        m.log.fences.push((self.member_id.clone(), self.member_epoch, received));
        drop(m);
        self.client.record("share-fenced", &format!("failed:{code}"), serde_json::json!({"epoch": self.member_epoch}));
        self.member_epoch = 0;
        self.assigned.clear();
        self.pending.clear();
    }

    /// The brokers leading the assigned partitions, each with its partitions.
    async fn leaders(&mut self) -> BTreeMap<String, BTreeSet<i32>> {
        let mut by_leader: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for p in self.assigned.clone() {
            if let Some(address) = self.client.leader_of(&self.plan.topic, p).await {
                by_leader.entry(address).or_default().insert(p);
            }
        }
        by_leader
    }

    /// The session with `address`, started again if its connection was replaced.
    fn session(&mut self, address: &str) -> &mut Session {
        let serial = self.client.connection_serial(address);
        let session = self.sessions.entry(address.to_string()).or_default();
        if session.epoch > 0 && session.serial != serial {
            *session = Session::default();
        }
        session
    }

    fn acks_for(&mut self, address: &str) -> Vec<ShareAcks> {
        let pending = self.pending.remove(address).unwrap_or_default();
        pending.into_iter().map(|(p, types)| ShareAcks { topic_id: self.topic_id, partition: p, types }).collect()
    }

    fn record_acks(&self, acks: &[ShareAcks], sent: u64, received: u64, outcome: impl Fn(i32) -> AckOutcome) {
        for a in acks {
            let detail = serde_json::json!({
                "member": self.member_id, "partition": a.partition, "types": a.types, "sent": sent,
                "outcome": format!("{:?}", outcome(a.partition)),
            });
            self.client.record("share-acks", "ok", detail);
        }
        let mut m = self.members.lock().unwrap();
        for a in acks {
            let o = outcome(a.partition);
            for (&offset, &t) in &a.types {
                let kind = kind_of(t);
                if o == AckOutcome::Done && kind == AckKind::Accept {
                    m.accepted += 1;
                }
                m.log.acks.push(Ack {
                    member: self.member_id.clone(),
                    partition: a.partition,
                    offset,
                    kind,
                    sent,
                    received,
                    outcome: o,
                });
            }
        }
    }

    /// A ShareFetch to `address` for `partitions`, with the acknowledgements pending for it.
    async fn fetch(&mut self, address: &str, partitions: &BTreeSet<i32>) {
        let topic_id = self.topic_id;
        let session = self.session(address);
        let opening = session.epoch == 0;
        let epoch = session.epoch;
        let add: Vec<([u8; 16], i32)> = if opening {
            partitions.iter().map(|p| (topic_id, *p)).collect()
        } else {
            partitions.difference(&session.partitions).map(|p| (topic_id, *p)).collect()
        };
        let forgotten: Vec<([u8; 16], i32)> = if opening {
            Vec::new()
        } else {
            session.partitions.difference(partitions).map(|p| (topic_id, *p)).collect()
        };
        // Acknowledgements cannot open a session: they wait for the next request.
        let acks = if opening { Vec::new() } else { self.acks_for(address) };
        let max_records = self.rng.random_range(1..=20);
        let spec = ShareFetchSpec {
            group: &self.plan.group,
            member_id: &self.member_id,
            session_epoch: epoch,
            partitions: &add,
            acks: &acks,
            forgotten: &forgotten,
            max_wait_ms: 300,
            max_records,
            acquire_mode: self.rng.random_range(0..=1),
        };
        let sent = self.seq();
        let outcome = self.client.share_fetch_on(address, &spec).await;
        let received = self.seq();
        match outcome {
            Outcome::Ok(fetched) => {
                let serial = self.client.connection_serial(address);
                let session = self.sessions.entry(address.to_string()).or_default();
                session.epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                session.serial = serial;
                session.partitions = partitions.clone();
                let codes: BTreeMap<i32, i16> =
                    fetched.partitions.iter().map(|p| (p.partition, p.acknowledge_error_code)).collect();
                self.record_acks(&acks, sent, received, |p| ack_outcome(codes.get(&p).copied().unwrap_or(0)));
                self.acquired(address, &fetched, sent, received);
            }
            Outcome::Failed(SHARE_SESSION_NOT_FOUND | INVALID_SHARE_SESSION_EPOCH) => {
                // Nothing was done: the session starts again, the acknowledgements wait.
                self.sessions.remove(address);
                self.requeue(address, acks);
            }
            Outcome::Failed(NOT_SENT) => self.requeue(address, acks),
            Outcome::Failed(code) => {
                self.record_acks(&acks, sent, received, |_| ack_outcome(code));
                if !refused_before_write(code) {
                    self.unknown_fetch(partitions, sent, received);
                }
                backoff().await;
            }
            Outcome::Indefinite => {
                // The connection is gone, and with it the session and what it held.
                self.record_acks(&acks, sent, received, |_| AckOutcome::Unknown);
                self.unknown_fetch(partitions, sent, u64::MAX);
                self.lost(address);
            }
        }
    }

    /// A fetch of `partitions` may have acquired records nobody will see, until `received`.
    fn unknown_fetch(&self, partitions: &BTreeSet<i32>, sent: u64, received: u64) {
        let mut m = self.members.lock().unwrap();
        m.log.unknown_fetches.extend(partitions.iter().map(|p| (*p, sent, received)));
    }

    fn requeue(&mut self, address: &str, acks: Vec<ShareAcks>) {
        let pending = self.pending.entry(address.to_string()).or_default();
        for a in acks {
            pending.entry(a.partition).or_default().extend(a.types);
        }
    }

    /// The connection to `address` broke: its session is over, and the broker lets go of what
    /// this member acquired on it, so nothing is left to acknowledge there.
    fn lost(&mut self, address: &str) {
        self.sessions.remove(address);
        self.pending.remove(address);
    }

    fn acquired(&mut self, address: &str, fetched: &ShareFetched, sent: u64, received: u64) {
        let mut decided: Vec<(i32, i64, i8)> = Vec::new();
        for p in &fetched.partitions {
            if LEADER_MOVED.contains(&p.error_code) {
                self.client.forget_leader(&self.plan.topic, p.partition);
            }
            if p.error_code != 0 && !refused_before_write(p.error_code) {
                // An owner whose lease ran out after it wrote answers NOT_LEADER_OR_FOLLOWER.
                self.unknown_fetch(&BTreeSet::from([p.partition]), sent, received);
            }
            if !p.records.is_empty() || p.error_code != 0 {
                let records: Vec<(i64, i16)> = p.records.iter().map(|r| (r.offset, r.delivery_count)).collect();
                let detail = serde_json::json!({
                    "member": self.member_id, "partition": p.partition, "error": p.error_code,
                    "records": records, "sent": sent,
                });
                self.client.record("share-acquired", "ok", detail);
            }
            for r in &p.records {
                self.members.lock().unwrap().log.acquisitions.push(Acquisition {
                    member: self.member_id.clone(),
                    partition: p.partition,
                    offset: r.offset,
                    delivery_count: r.delivery_count,
                    sent,
                    received,
                });
                let roll = self.rng.random_range(0..1000);
                let plan = &self.plan;
                let kind = if roll < plan.release_per_mille {
                    Some(RELEASE)
                } else if roll < plan.release_per_mille + plan.reject_per_mille {
                    Some(REJECT)
                } else if roll < plan.release_per_mille + plan.reject_per_mille + plan.forget_per_mille {
                    None
                } else {
                    Some(ACCEPT)
                };
                if let Some(t) = kind {
                    decided.push((p.partition, r.offset, t));
                }
            }
        }
        for (p, offset, t) in decided {
            self.pending.entry(address.to_string()).or_default().entry(p).or_default().insert(offset, t);
        }
    }

    /// Explicit mode: the pending acknowledgements of `address` now, by ShareAcknowledge.
    async fn acknowledge(&mut self, address: &str, final_epoch: bool) {
        let session = self.session(address);
        if session.epoch == 0 {
            return;
        }
        let epoch = if final_epoch { -1 } else { session.epoch };
        let acks = self.acks_for(address);
        if acks.is_empty() && !final_epoch {
            return;
        }
        let sent = self.seq();
        let outcome = self.client.share_acknowledge_on(address, &self.plan.group, &self.member_id, epoch, &acks).await;
        let received = self.seq();
        match outcome {
            Outcome::Ok(codes) => {
                let serial = self.client.connection_serial(address);
                let session = self.sessions.entry(address.to_string()).or_default();
                session.epoch = if final_epoch { 0 } else { session.epoch + 1 };
                session.serial = serial;
                let codes: BTreeMap<i32, i16> = codes.into_iter().map(|(_, p, code)| (p, code)).collect();
                self.record_acks(&acks, sent, received, |p| ack_outcome(codes.get(&p).copied().unwrap_or(0)));
            }
            Outcome::Failed(SHARE_SESSION_NOT_FOUND | INVALID_SHARE_SESSION_EPOCH) => {
                self.sessions.remove(address);
                self.requeue(address, acks);
            }
            Outcome::Failed(NOT_SENT) => self.requeue(address, acks),
            Outcome::Failed(code) => self.record_acks(&acks, sent, received, |_| ack_outcome(code)),
            Outcome::Indefinite => {
                self.record_acks(&acks, sent, received, |_| AckOutcome::Unknown);
                self.lost(address);
            }
        }
    }

    /// One round: a heartbeat if due, a fetch from each leader, acknowledgements at once in
    /// explicit mode.
    async fn round(&mut self) {
        self.beat().await;
        if self.member_epoch <= 0 || self.assigned.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return;
        }
        let leaders = self.leaders().await;
        if leaders.is_empty() {
            backoff().await;
        }
        // Sessions with brokers that lead none of the partitions now: what they hold goes back
        // when the session is forgotten (Apache forgets it with the connection; this member
        // simply stops using it).
        for (address, partitions) in leaders {
            self.fetch(&address, &partitions).await;
            if self.explicit {
                self.acknowledge(&address, false).await;
            }
        }
    }

    /// The last acknowledgements, sessions closed (epoch -1), and a leave.
    async fn leave(&mut self) {
        let addresses: Vec<String> = self.sessions.keys().cloned().collect();
        for address in addresses {
            self.acknowledge(&address, true).await;
        }
        if self.member_epoch > 0 {
            let _ = self.client.share_group_heartbeat(&self.plan.group, &self.member_id, -1, None).await;
        }
    }

    /// A zombie, back from a pause: acknowledges what it decided before it stopped, beats, and
    /// if told it is fenced, fetches once more on its old sessions.
    async fn come_back(&mut self) {
        let addresses: Vec<String> = self.pending.keys().cloned().collect();
        for address in addresses {
            self.acknowledge(&address, false).await;
        }
        let epoch = self.member_epoch;
        let outcome = self.client.share_group_heartbeat(&self.plan.group, &self.member_id, epoch, None).await;
        let received = self.seq();
        if let Outcome::Failed(code @ (UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH)) = outcome {
            let partitions = self.assigned.clone();
            let sessions: Vec<String> = self.sessions.keys().cloned().collect();
            self.fenced(code, received);
            // As a careless client would: its fetch thread has not heard. A few times over, so
            // that records come while it asks.
            for _ in 0..3 {
                for address in &sessions {
                    self.fetch(address, &partitions).await;
                }
            }
        }
    }
}

fn ack_outcome(code: i16) -> AckOutcome {
    match code {
        0 => AckOutcome::Done,
        code if refused_before_write(code) => AckOutcome::Refused(code),
        _ => AckOutcome::Unknown,
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
    let mut client = super::client(&world, &name);
    let topic_id = loop {
        if let Some(id) = client.topic_id(&plan.topic).await {
            break id;
        }
        backoff().await;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let explicit = rng.random_range(0..1000) < plan.explicit_per_mille;
    let history = world.lock().unwrap().history.clone();
    let mut me = Instance {
        member_id: format!("member-{name}"),
        history,
        member_epoch: 0,
        plan,
        client,
        members,
        rng,
        topic_id,
        assigned: BTreeSet::new(),
        sessions: BTreeMap::new(),
        pending: BTreeMap::new(),
        explicit,
        next_beat: tokio::time::Instant::now(),
    };
    me.client.record("share-member", "ok", serde_json::json!({"member": me.member_id, "explicit": explicit}));
    loop {
        if me.members.lock().unwrap().done {
            me.leave().await;
            return Stop::Done;
        }
        if me.rng.random_range(0..1000) < me.plan.stop_per_mille {
            let roll = me.rng.random_range(0..1000);
            if roll < me.plan.pause_per_mille {
                let away_ms = me.rng.random_range(0..=me.plan.pause_ms_max);
                me.client.record("pause", "ok", serde_json::json!({"ms": away_ms}));
                let _ = paused.send(());
                tokio::time::sleep(Duration::from_millis(away_ms)).await;
                me.come_back().await;
                return Stop::Zombie;
            }
            if roll < me.plan.pause_per_mille + me.plan.silent_per_mille {
                me.client.record("silent", "ok", serde_json::json!({}));
                let Instance { client, members, .. } = me;
                members.lock().unwrap().silent.push(client);
                return Stop::Crashed;
            }
            me.client.record("crash", "ok", serde_json::json!({}));
            return Stop::Crashed;
        }
        me.round().await;
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
