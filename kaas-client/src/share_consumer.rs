//! `ShareConsumer`: a member of a share group (KIP-932), as the Java client's is, over a
//! `Client`. It joins and keeps beating (ShareGroupHeartbeat), keeps one share session per
//! broker leading its partitions (epoch 0 opens one, each request carries the next, a replaced
//! connection starts it again) and acquires records by ShareFetch. Acknowledgements go either
//! on its next ShareFetch (`acknowledge`, then `poll`) or at once (`acknowledge_now`); KIP-1289's
//! transactional acknowledgements are `ShareCopier`'s.
//!
//! What it sends and sees is told to a `ShareObserver` (the simulator's checker records it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::{ACCEPT, Acquired, Client, NOT_SENT, Outcome, ShareAcks, ShareFetchSpec, ShareFetched};

pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const FENCED_MEMBER_EPOCH: i16 = 110;
pub const SHARE_SESSION_NOT_FOUND: i16 = 122;
pub const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
/// Codes that say a partition's leader is elsewhere or unknown.
const LEADER_MOVED: [i16; 4] = [3, 5, 6, 74];

/// One record a poll returned, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub partition: i32,
    pub record: Acquired,
    /// The broker it was acquired from, where its acknowledgement must go.
    pub broker: String,
}

/// The acceptance of `deliveries`, per broker they came from (where it must go), per partition.
pub fn accepts_by_broker(deliveries: &[Delivery], topic_id: [u8; 16]) -> BTreeMap<String, Vec<ShareAcks>> {
    let mut by_broker: BTreeMap<String, BTreeMap<i32, ShareAcks>> = BTreeMap::new();
    for d in deliveries {
        by_broker
            .entry(d.broker.clone())
            .or_default()
            .entry(d.partition)
            .or_insert_with(|| ShareAcks::new(topic_id, d.partition))
            .types
            .insert(d.record.offset, ACCEPT);
    }
    by_broker.into_iter().map(|(broker, acks)| (broker, acks.into_values().collect())).collect()
}

/// What came of a call, for an observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Ok,
    /// Refused with a code.
    Failed(i16),
    /// The answer was lost: it may or may not have taken effect.
    Lost,
}

/// Hears what a share consumer does, for checking; every method has a default that ignores it.
pub trait ShareObserver: Send {
    /// Before a call is sent: a position in the caller's order of events, if it keeps one.
    fn mark(&mut self) -> u64 {
        0
    }
    /// A join (epoch 0) heartbeat was sent at `sent`.
    fn joining(&mut self, _member_id: &str, _sent: u64) {}
    /// The group said the member is no member at `epoch`.
    fn fenced(&mut self, _member_id: &str, _epoch: i32, _received: u64) {}
    /// A ShareFetch of `partitions` sent at `sent` came to `seen` and acquired `acquired`.
    fn fetched(
        &mut self,
        _member_id: &str,
        _partitions: &BTreeSet<i32>,
        _sent: u64,
        _seen: Seen,
        _acquired: &[Delivery],
    ) {
    }
    /// A partition of a ShareFetch sent at `sent` answered an error (`code`) that may follow a
    /// write.
    fn partition_failed(&mut self, _member_id: &str, _partition: i32, _code: i16, _sent: u64) {}
    /// Acknowledgements sent at `sent`, per partition, came to `seen` (per partition).
    fn acknowledged(&mut self, _member_id: &str, _acks: &[ShareAcks], _sent: u64, _seen: &dyn Fn(i32) -> Seen) {}
}

/// An observer that hears nothing.
pub struct Unobserved;
impl ShareObserver for Unobserved {}

/// One share session, with one broker.
#[derive(Debug, Default)]
struct Session {
    /// The epoch the next request carries.
    epoch: i32,
    /// The connection it lives on (`Client::connection_serial`).
    serial: u64,
    partitions: BTreeSet<i32>,
}

/// A share group member consuming one topic.
pub struct ShareConsumer {
    pub client: Client,
    pub group: String,
    pub topic: String,
    pub member_id: String,
    pub member_epoch: i32,
    topic_id: Option<[u8; 16]>,
    assigned: BTreeSet<i32>,
    sessions: BTreeMap<String, Session>,
    /// Acknowledgements waiting for the next request to their broker.
    pending: BTreeMap<String, BTreeMap<i32, BTreeMap<i64, i8>>>,
    next_beat: tokio::time::Instant,
    /// ShareFetch's wait for records and its record budget; KIP-1206's acquire mode.
    pub max_wait_ms: i32,
    pub max_records: i32,
    pub acquire_mode: i8,
}

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

/// Codes a broker refuses an acknowledgement or acquisition with before anything is written.
pub fn refused_before_write(code: i16) -> bool {
    matches!(code, 121 | 42 | 122 | 123 | 3 | 100 | NOT_SENT)
}

impl ShareConsumer {
    /// A member `member_id` (KIP-1082: the client names itself) of `group` on `topic`.
    pub fn new(client: Client, group: &str, topic: &str, member_id: &str) -> ShareConsumer {
        ShareConsumer {
            client,
            group: group.to_string(),
            topic: topic.to_string(),
            member_id: member_id.to_string(),
            member_epoch: 0,
            topic_id: None,
            assigned: BTreeSet::new(),
            sessions: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_beat: tokio::time::Instant::now(),
            max_wait_ms: 500,
            max_records: 500,
            acquire_mode: 0,
        }
    }

    pub fn topic_id(&self) -> Option<[u8; 16]> {
        self.topic_id
    }

    pub fn assigned(&self) -> &BTreeSet<i32> {
        &self.assigned
    }

    /// Beats if it is time (joins when not a member). `Ok(false)`: not a member now.
    pub async fn beat(&mut self, observer: &mut dyn ShareObserver) -> bool {
        if self.topic_id.is_none() {
            self.topic_id = self.client.topic_id(&self.topic).await;
            if self.topic_id.is_none() {
                return false;
            }
        }
        let now = tokio::time::Instant::now();
        if self.member_epoch > 0 && now < self.next_beat {
            return true;
        }
        let subscribe = [self.topic.clone()];
        let joining = self.member_epoch == 0;
        let sent = observer.mark();
        if joining {
            observer.joining(&self.member_id, sent);
        }
        let subscribed = joining.then_some(&subscribe[..]);
        let outcome =
            self.client.share_group_heartbeat(&self.group, &self.member_id, self.member_epoch, subscribed).await;
        let received = observer.mark();
        match outcome {
            Outcome::Ok(beat) => {
                self.member_epoch = beat.member_epoch;
                self.next_beat = now + Duration::from_millis(beat.heartbeat_interval_ms.clamp(100, 5000) as u64);
                if let (Some(assignment), Some(id)) = (beat.assignment, self.topic_id) {
                    self.assigned =
                        assignment.iter().filter(|(t, _)| *t == id).flat_map(|(_, ps)| ps.clone()).collect();
                }
            }
            Outcome::Failed(code @ (UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH)) => {
                observer.fenced(&self.member_id, self.member_epoch, received);
                self.client.record(
                    "share-fenced",
                    &format!("failed:{code}"),
                    serde_json::json!({"epoch": self.member_epoch}),
                );
                self.fenced();
            }
            _ => self.next_beat = now + Duration::from_millis(100),
        }
        self.member_epoch > 0
    }

    /// The group said this member is no member: it forgets its partitions and what it was to
    /// acknowledge, and joins again with the same id (as KIP-848's clients do).
    pub fn fenced(&mut self) {
        self.member_epoch = 0;
        self.assigned.clear();
        self.pending.clear();
    }

    /// The brokers leading the assigned partitions, each with its partitions.
    pub async fn leaders(&mut self) -> BTreeMap<String, BTreeSet<i32>> {
        let mut by_leader: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for p in self.assigned.clone() {
            if let Some(address) = self.client.leader_of(&self.topic, p).await {
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

    /// Queues an acknowledgement of `delivery` for the next request to its broker.
    pub fn acknowledge(&mut self, delivery: &Delivery, kind: i8) {
        self.pending
            .entry(delivery.broker.clone())
            .or_default()
            .entry(delivery.partition)
            .or_default()
            .insert(delivery.record.offset, kind);
    }

    fn take_acks(&mut self, address: &str) -> Vec<ShareAcks> {
        let topic_id = self.topic_id.unwrap_or_default();
        let pending = self.pending.remove(address).unwrap_or_default();
        pending.into_iter().map(|(p, types)| ShareAcks { topic_id, partition: p, types }).collect()
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

    /// One ShareFetch to `address` for `partitions`, carrying the acknowledgements queued for
    /// it: what it acquired.
    pub async fn fetch_from(
        &mut self,
        address: &str,
        partitions: &BTreeSet<i32>,
        observer: &mut dyn ShareObserver,
    ) -> Vec<Delivery> {
        let Some(topic_id) = self.topic_id else { return Vec::new() };
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
        let acks = if opening { Vec::new() } else { self.take_acks(address) };
        let spec = ShareFetchSpec {
            group: &self.group,
            member_id: &self.member_id,
            session_epoch: epoch,
            partitions: &add,
            acks: &acks,
            forgotten: &forgotten,
            max_wait_ms: self.max_wait_ms,
            max_records: self.max_records,
            acquire_mode: self.acquire_mode,
        };
        let sent = observer.mark();
        let outcome = self.client.share_fetch_on(address, &spec).await;
        match outcome {
            Outcome::Ok(fetched) => {
                let serial = self.client.connection_serial(address);
                let session = self.sessions.entry(address.to_string()).or_default();
                session.epoch = next_epoch(epoch);
                session.serial = serial;
                session.partitions = partitions.clone();
                let codes: BTreeMap<i32, i16> =
                    fetched.partitions.iter().map(|p| (p.partition, p.acknowledge_error_code)).collect();
                observer
                    .acknowledged(&self.member_id, &acks, sent, &|p| seen_code(codes.get(&p).copied().unwrap_or(0)));
                let deliveries = self.deliveries(address, &fetched, sent, observer);
                observer.fetched(&self.member_id, partitions, sent, Seen::Ok, &deliveries);
                deliveries
            }
            Outcome::Failed(code @ (SHARE_SESSION_NOT_FOUND | INVALID_SHARE_SESSION_EPOCH)) => {
                // Nothing was done: the session starts again, the acknowledgements wait.
                self.sessions.remove(address);
                self.requeue(address, acks);
                observer.fetched(&self.member_id, partitions, sent, Seen::Failed(code), &[]);
                Vec::new()
            }
            Outcome::Failed(NOT_SENT) => {
                self.requeue(address, acks);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Vec::new()
            }
            Outcome::Failed(code) => {
                observer.acknowledged(&self.member_id, &acks, sent, &|_| seen_code(code));
                observer.fetched(&self.member_id, partitions, sent, Seen::Failed(code), &[]);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Vec::new()
            }
            Outcome::Indefinite => {
                observer.acknowledged(&self.member_id, &acks, sent, &|_| Seen::Lost);
                observer.fetched(&self.member_id, partitions, sent, Seen::Lost, &[]);
                self.lost(address);
                Vec::new()
            }
        }
    }

    fn deliveries(
        &mut self,
        address: &str,
        fetched: &ShareFetched,
        sent: u64,
        observer: &mut dyn ShareObserver,
    ) -> Vec<Delivery> {
        let mut out = Vec::new();
        for p in &fetched.partitions {
            if LEADER_MOVED.contains(&p.error_code) {
                self.client.forget_leader(&self.topic, p.partition);
            }
            if p.error_code != 0 && !refused_before_write(p.error_code) {
                observer.partition_failed(&self.member_id, p.partition, p.error_code, sent);
            }
            if !p.records.is_empty() || p.error_code != 0 {
                let records: Vec<(i64, i16)> = p.records.iter().map(|r| (r.offset, r.delivery_count)).collect();
                let detail = serde_json::json!({
                    "member": self.member_id, "partition": p.partition, "error": p.error_code, "records": records,
                });
                self.client.record("share-acquired", "ok", detail);
            }
            out.extend(p.records.iter().map(|r| Delivery {
                partition: p.partition,
                record: r.clone(),
                broker: address.to_string(),
            }));
        }
        out
    }

    /// A heartbeat if due, then a ShareFetch from each leader of the assigned partitions: what
    /// they acquired.
    pub async fn poll(&mut self, observer: &mut dyn ShareObserver) -> Vec<Delivery> {
        if !self.beat(observer).await || self.assigned.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Vec::new();
        }
        let leaders = self.leaders().await;
        if leaders.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut out = Vec::new();
        for (address, partitions) in leaders {
            out.extend(self.fetch_from(&address, &partitions, observer).await);
        }
        out
    }

    /// The queued acknowledgements of every broker now, by ShareAcknowledge; with `close`, the
    /// sessions end too (epoch -1).
    pub async fn acknowledge_now(&mut self, close: bool, observer: &mut dyn ShareObserver) {
        let mut addresses: BTreeSet<String> = self.pending.keys().cloned().collect();
        if close {
            addresses.extend(self.sessions.keys().cloned());
        }
        for address in addresses {
            let session = self.session(&address);
            if session.epoch == 0 {
                continue;
            }
            let epoch = if close { -1 } else { session.epoch };
            let acks = self.take_acks(&address);
            if acks.is_empty() && !close {
                continue;
            }
            let sent = observer.mark();
            let outcome = self.client.share_acknowledge_on(&address, &self.group, &self.member_id, epoch, &acks).await;
            match outcome {
                Outcome::Ok(codes) => {
                    let serial = self.client.connection_serial(&address);
                    let session = self.sessions.entry(address.clone()).or_default();
                    session.epoch = if close { 0 } else { next_epoch(session.epoch) };
                    session.serial = serial;
                    let codes: BTreeMap<i32, i16> = codes.into_iter().map(|(_, p, code)| (p, code)).collect();
                    observer.acknowledged(&self.member_id, &acks, sent, &|p| {
                        seen_code(codes.get(&p).copied().unwrap_or(0))
                    });
                }
                Outcome::Failed(SHARE_SESSION_NOT_FOUND | INVALID_SHARE_SESSION_EPOCH) => {
                    self.sessions.remove(&address);
                    self.requeue(&address, acks);
                }
                Outcome::Failed(NOT_SENT) => self.requeue(&address, acks),
                Outcome::Failed(code) => observer.acknowledged(&self.member_id, &acks, sent, &|_| seen_code(code)),
                Outcome::Indefinite => {
                    observer.acknowledged(&self.member_id, &acks, sent, &|_| Seen::Lost);
                    self.lost(&address);
                }
            }
        }
    }

    /// Leaves: the last acknowledgements, the sessions closed, and a leave heartbeat.
    pub async fn close(&mut self, observer: &mut dyn ShareObserver) {
        self.acknowledge_now(true, observer).await;
        if self.member_epoch > 0 {
            let _ = self.client.share_group_heartbeat(&self.group, &self.member_id, -1, None).await;
            self.member_epoch = 0;
        }
    }

    /// Every queued acknowledgement, as accepts of what was delivered (a convenience for
    /// implicit acknowledgement).
    pub fn accept_all(&mut self, deliveries: &[Delivery]) {
        for d in deliveries {
            self.acknowledge(d, ACCEPT);
        }
    }

    /// The sessions' brokers, for a careless client that fetches on after a fence.
    pub fn session_brokers(&self) -> Vec<String> {
        self.sessions.keys().cloned().collect()
    }
}

fn seen_code(code: i16) -> Seen {
    if code == 0 { Seen::Ok } else { Seen::Failed(code) }
}
