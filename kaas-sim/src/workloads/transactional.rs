//! A transactional producer over the wire (KIP-98): InitProducerId with its transactional id,
//! AddPartitionsToTxn, transactional batches, EndTxn, each retried as Kafka's clients retry
//! them, and every attempt recorded for the transaction checker: its values and their
//! offsets, when it began, where it opened, when its end was asked for.
//!
//! A producer with `tv2` speaks transactions v2 (KIP-890 part 2) as the Java client and
//! franz-go do: no AddPartitionsToTxn (Produce v12 adds the partition), EndTxn v5 and the
//! bumped epoch it answers, sequences from 0 under each new epoch.
//!
//! Retry policy: a retriable answer (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
//! CONCURRENT_TRANSACTIONS, KAFKA_STORAGE_ERROR) is retried after a pause, a lost connection
//! too; a fenced answer (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) ends the attempt. A broker
//! that keeps answering one retriable code `RETRIABLE_STREAK_MAX` times in a row is
//! misleading the producer (`wrong-error`), and the producer gives up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{RETRIABLE_STREAK_MAX, RETRIABLE_STREAK_MS, Shared, backoff};
use crate::checkers::transactions::{Attempt, Fate, Opened, TxnHistory};
use crate::client::{Client, Outcome, ProducerStamp};
use crate::history::outcome_name;
use crate::scenarios::common::now_ms;

// Kafka error codes the producer reacts to.
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const NOT_COORDINATOR: i16 = 16;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
pub const PRODUCER_FENCED: i16 = 90;

pub fn retriable(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_NOT_AVAILABLE
            | NOT_COORDINATOR
            | CONCURRENT_TRANSACTIONS
            | KAFKA_STORAGE_ERROR
            | crate::client::NOT_SENT
    )
}

pub fn fenced(code: i16) -> bool {
    matches!(code, PRODUCER_FENCED | INVALID_PRODUCER_EPOCH)
}

/// What the transactional producers of a run did, for the checker and the fault triggers.
#[derive(Default)]
pub struct Txns {
    pub history: TxnHistory,
    /// Transactions ended (acked either way).
    pub ended: usize,
    pub producers_done: usize,
}

pub type SharedTxns = Arc<Mutex<Txns>>;

impl Txns {
    /// Starts recording attempt `name`; its index.
    pub fn begin(&mut self, name: &str, transactional_id: &str, timeout_ms: i32) -> usize {
        self.history.attempts.push(Attempt::new(name, transactional_id, timeout_ms.max(0) as u64));
        self.history.attempts.len() - 1
    }
}

/// Counts answers with one retriable code in a row, and names the broker that never stops.
struct Streak {
    code: i16,
    count: u32,
    since: tokio::time::Instant,
}

impl Streak {
    fn new() -> Streak {
        Streak { code: 0, count: 0, since: tokio::time::Instant::now() }
    }

    /// Another retriable `code`: false once it has come too many times in a row.
    fn again(&mut self, code: i16, who: &str, op: &str, world: &Shared) -> bool {
        if code != self.code {
            (self.code, self.count, self.since) = (code, 0, tokio::time::Instant::now());
        }
        self.count += 1;
        let long = self.since.elapsed() >= std::time::Duration::from_millis(RETRIABLE_STREAK_MS);
        if self.count < RETRIABLE_STREAK_MAX || !long || code == crate::client::NOT_SENT {
            return true;
        }
        world.lock().unwrap().violations.push(format!(
            "wrong-error: {who}'s {op} was answered retriable code {code} {} times in a row; a request that can never succeed needs a fatal code",
            self.count
        ));
        false
    }
}

/// One instance of a transactional producer: its client, id and epoch, the next sequence per
/// partition, and the attempt it is in.
pub struct Producer {
    pub name: String,
    pub transactional_id: String,
    pub timeout_ms: i32,
    pub topic: String,
    pub client: Client,
    pub ids: (i64, i16),
    pub sequences: BTreeMap<i32, i32>,
    /// Partitions where a batch of this instance was acked, whatever its epoch: they know it.
    pub acked_in: BTreeSet<i32>,
    /// Transactions v2 (KIP-890 part 2).
    pub tv2: bool,
    /// Values carry their record's key (`message_of`): a compacted topic's producer.
    pub keyed: bool,
    world: Shared,
    txns: SharedTxns,
    /// The attempt being recorded, as an index into the attempts.
    attempt: Option<usize>,
}

impl Producer {
    /// A new instance: InitProducerId until it answers.
    pub async fn start(
        name: String,
        transactional_id: String,
        timeout_ms: i32,
        topic: &str,
        world: &Shared,
        txns: &SharedTxns,
    ) -> Producer {
        let client = super::client(world, &name);
        let mut p = Producer {
            name,
            transactional_id,
            timeout_ms,
            topic: topic.to_string(),
            client,
            ids: (-1, -1),
            sequences: BTreeMap::new(),
            acked_in: BTreeSet::new(),
            tv2: false,
            keyed: false,
            world: world.clone(),
            txns: txns.clone(),
            attempt: None,
        };
        p.init(None).await;
        p
    }

    pub fn world(&self) -> &Shared {
        &self.world
    }

    pub fn txns(&self) -> &SharedTxns {
        &self.txns
    }

    fn record<T>(&self, op: &str, outcome: &Outcome<T>, detail: serde_json::Value) -> u64 {
        self.world.lock().unwrap().history.record(&self.name, op, &outcome_name(outcome), detail)
    }

    fn next_seq(&self) -> u64 {
        self.world.lock().unwrap().history.next_seq()
    }

    fn with_attempt(&self, f: impl FnOnce(&mut Attempt)) {
        if let Some(i) = self.attempt {
            f(&mut self.txns.lock().unwrap().history.attempts[i]);
        }
    }

    /// Starts recording a new attempt named `name`; its index.
    pub fn begin(&mut self, name: &str) -> usize {
        let i = self.txns.lock().unwrap().begin(name, &self.transactional_id, self.timeout_ms);
        self.attempt = Some(i);
        i
    }

    /// Settles the attempt being recorded.
    pub fn settle(&mut self, fate: Fate) {
        self.with_attempt(|a| a.fate = fate);
        self.attempt = None;
        self.txns.lock().unwrap().ended += 1;
    }

    /// InitProducerId until it answers; `current` bumps the instance's own epoch (KIP-360).
    pub async fn init(&mut self, mut current: Option<(i64, i16)>) {
        let mut streak = Streak::new();
        loop {
            let sent = self.next_seq();
            self.txns.lock().unwrap().history.inits_sent.push((self.transactional_id.clone(), sent));
            let outcome = self.client.init_txn_producer(&self.transactional_id, self.timeout_ms, current).await;
            self.record("init-txn-producer", &outcome, serde_json::json!({"current": current}));
            match outcome {
                Outcome::Ok(ids) => {
                    self.ids = ids;
                    self.sequences.clear();
                    return;
                }
                // Fenced by a newer instance: start over as a new instance would.
                Outcome::Failed(code) if fenced(code) => current = None,
                Outcome::Failed(code) => {
                    if !streak.again(code, &self.name, "InitProducerId", &self.world) {
                        return;
                    }
                    backoff().await
                }
                Outcome::Indefinite => {}
            }
        }
    }

    /// AddPartitionsToTxn until it answers: Ok(()) or the error that ends the attempt. A v2
    /// producer sends none: its writes add their partitions.
    pub async fn add_partitions(&mut self, partitions: &[i32]) -> Result<(), i16> {
        let mut streak = Streak::new();
        loop {
            let sent = self.next_seq();
            let started_ms = crate::env::world_elapsed().as_millis() as u64;
            self.with_attempt(|a| {
                a.started.get_or_insert((sent, started_ms));
            });
            if self.tv2 {
                return Ok(());
            }
            let topic = self.topic.clone();
            let outcome = self.client.add_partitions_to_txn(&self.transactional_id, self.ids, &topic, partitions).await;
            self.record("add-partitions", &outcome, serde_json::json!({"partitions": partitions, "ids": self.ids}));
            match outcome {
                Outcome::Ok(()) => return Ok(()),
                Outcome::Failed(code) if retriable(code) => {
                    if !streak.again(code, &self.name, "AddPartitionsToTxn", &self.world) {
                        return Err(code);
                    }
                    backoff().await
                }
                Outcome::Failed(code) => return Err(code),
                Outcome::Indefinite => {}
            }
        }
    }

    /// One transactional batch, sent once: a failure of any kind makes the attempt abort.
    pub async fn produce(&mut self, partition: i32, values: &[Bytes]) -> Outcome<i64> {
        let held = self.hold(partition, values);
        let next_sequence = held.stamp.base_sequence + values.len() as i32;
        let outcome = self.send_held(held).await;
        if matches!(outcome, Outcome::Ok(_)) {
            self.sequences.insert(partition, next_sequence);
        }
        outcome
    }

    /// A batch of the current attempt, stamped and recorded but not sent: what a request the
    /// network delays is, until `send_held` delivers it.
    pub fn hold(&mut self, partition: i32, values: &[Bytes]) -> Held {
        self.with_attempt(|a| a.values.extend(values.iter().map(|v| (partition, v.clone(), None))));
        let base_sequence = *self.sequences.get(&partition).unwrap_or(&0);
        let stamp = ProducerStamp { producer_id: self.ids.0, producer_epoch: self.ids.1, base_sequence };
        Held { attempt: self.attempt, partition, values: values.to_vec(), stamp }
    }

    /// Sends a held batch, now, with the stamp it was given; what it was answered is recorded
    /// in the attempt it belongs to.
    pub async fn send_held(&mut self, held: Held) -> Outcome<i64> {
        let Held { attempt, partition, values, stamp } = held;
        let topic = self.topic.clone();
        let (id, tv2) = (self.transactional_id.clone(), self.tv2);
        let outcome = match self.keyed {
            true => {
                let messages: Vec<_> = values.iter().map(message_of).collect();
                self.client.produce_txn_messages(&id, &topic, partition, &messages, now_ms(), stamp, tv2).await
            }
            false => self.client.produce_txn(&id, &topic, partition, &values, now_ms(), stamp, tv2).await,
        };
        let ids = (stamp.producer_id, stamp.producer_epoch);
        let detail = serde_json::json!({"partition": partition, "ids": ids, "base_sequence": stamp.base_sequence});
        let answered = self.record("produce-txn", &outcome, detail);
        if let (Outcome::Ok(base), Some(i)) = (&outcome, attempt) {
            self.acked_in.insert(partition);
            let a = &mut self.txns.lock().unwrap().history.attempts[i];
            for (i, v) in values.iter().enumerate() {
                if let Some(slot) = a.values.iter_mut().find(|(_, sent, _)| sent == v) {
                    slot.2 = Some(base + i as i64);
                }
            }
            if !a.opened.iter().any(|o| o.partition == partition) {
                a.opened.push(Opened { partition, offset: *base, acked_seq: answered });
            }
        }
        outcome
    }

    /// EndTxn until it settles: the attempt's fate.
    pub async fn end(&mut self, commit: bool) -> Fate {
        let mut unsure = false;
        let mut streak = Streak::new();
        loop {
            let sent = self.next_seq();
            self.with_attempt(|a| {
                a.end_sent.get_or_insert(sent);
                if commit {
                    a.commit_sent.get_or_insert(sent);
                }
            });
            let outcome = match self.tv2 {
                true => self.client.end_txn_v2(&self.transactional_id, self.ids, commit).await,
                false => match self.client.end_txn(&self.transactional_id, self.ids, commit).await {
                    Outcome::Ok(()) => Outcome::Ok(self.ids),
                    Outcome::Failed(code) => Outcome::Failed(code),
                    Outcome::Indefinite => Outcome::Indefinite,
                },
            };
            self.record("end-txn", &outcome, serde_json::json!({"commit": commit, "ids": self.ids}));
            match outcome {
                Outcome::Ok(ids) => {
                    if ids != self.ids {
                        // A new epoch (v2) starts every partition's sequence at 0.
                        self.ids = ids;
                        self.sequences.clear();
                    }
                    return if commit { Fate::Committed } else { Fate::Aborted };
                }
                Outcome::Failed(code) if retriable(code) => {
                    if !streak.again(code, &self.name, "EndTxn", &self.world) {
                        return Fate::Unknown;
                    }
                    backoff().await
                }
                // Fenced: the transaction was aborted for us, unless an earlier try of this
                // commit got through before the fence.
                Outcome::Failed(code) if fenced(code) && !unsure => return Fate::Aborted,
                Outcome::Failed(_) => return Fate::Unknown,
                Outcome::Indefinite => unsure |= commit,
            }
        }
    }

    /// An idempotent (non-transactional) batch stamped with this instance's id and epoch,
    /// continuing its sequence in `partition`.
    pub async fn produce_idempotent(&mut self, partition: i32, values: &[Bytes]) -> Outcome<i64> {
        self.with_attempt(|a| a.values.extend(values.iter().map(|v| (partition, v.clone(), None))));
        let base_sequence = *self.sequences.get(&partition).unwrap_or(&0);
        let stamp = ProducerStamp { producer_id: self.ids.0, producer_epoch: self.ids.1, base_sequence };
        let topic = self.topic.clone();
        let outcome = match self.client.send_produce(&topic, partition, values, now_ms(), stamp).await {
            Ok(()) => self.client.recv_produce().await,
            Err(_) => Outcome::Failed(crate::client::NOT_SENT),
        };
        self.client.end_pipeline();
        self.record("produce-idempotent", &outcome, serde_json::json!({"partition": partition, "ids": self.ids}));
        outcome
    }
}

/// A batch stamped and recorded in its attempt but not sent yet (`Producer::hold`).
pub struct Held {
    attempt: Option<usize>,
    pub partition: i32,
    values: Vec<Bytes>,
    stamp: ProducerStamp,
}

/// The record a keyed value stands for: `KEY|id` is a value of key `KEY`, `KEY|id|del` its
/// tombstone (a null value; the id stays in the attempt, for the checker).
pub fn message_of(value: &Bytes) -> crate::client::Message {
    let text = String::from_utf8_lossy(value);
    let key = text.split('|').next().unwrap_or_default().to_string();
    let tombstone = text.ends_with("|del");
    crate::client::Message {
        key: Some(Bytes::from(key)),
        value: (!tombstone).then(|| value.clone()),
        headers: Vec::new(),
    }
}

pub fn values_of(name: &str, partition: i32, batch: usize, records: usize) -> Vec<Bytes> {
    (0..records).map(|r| Bytes::from(format!("{name}-p{partition}-b{batch}-r{r}"))).collect()
}

/// When a timed-out producer wakes up: how long it slept, and the partition it then writes to.
#[derive(Debug, Clone, Copy)]
pub struct Pause {
    pub ms: u64,
    pub extra_partition: i32,
}

/// One transaction attempt of `p` over `partitions` with the values `values(partition, batch)`,
/// committed unless `abort`; with a `pause` it goes quiet past its timeout before it ends.
/// A `late` batch of an earlier attempt is delivered after the first write, as the network
/// delivers a request it held. Returns its fate and whether the instance must bump its epoch
/// (KIP-360) before the next.
pub async fn attempt(
    p: &mut Producer,
    name: &str,
    partitions: &[i32],
    abort: bool,
    pause: Option<Pause>,
    mut late: Option<Held>,
    records: impl Fn(i32) -> usize,
) -> (Fate, bool) {
    p.begin(name);
    let settle = |p: &mut Producer, fate: Fate, must_bump: bool| {
        p.settle(fate);
        (fate, must_bump)
    };
    if let Err(code) = p.add_partitions(partitions).await {
        let fate = if fenced(code) { Fate::Aborted } else { Fate::Unknown };
        return settle(p, fate, true);
    }
    let mut failed = false;
    for (b, &partition) in partitions.iter().enumerate() {
        let values = values_of(name, partition, b, records(partition));
        if !matches!(p.produce(partition, &values).await, Outcome::Ok(_)) {
            failed = true;
            break;
        }
        if let Some(held) = late.take() {
            // Whatever it is answered, this attempt goes on: it is another's write.
            p.send_held(held).await;
        }
    }
    if let Some(pause) = pause.filter(|_| !failed) {
        // Quiet past the timeout: the reaper aborts the transaction and bumps the epoch. On
        // waking, the producer carries on into a partition it had not added yet.
        tokio::time::sleep(std::time::Duration::from_millis(pause.ms)).await;
        let extra = pause.extra_partition;
        if !partitions.contains(&extra) {
            if let Err(code) = p.add_partitions(&[extra]).await {
                let fate = if fenced(code) { Fate::Aborted } else { Fate::Unknown };
                return settle(p, fate, true);
            }
            let values = values_of(name, extra, partitions.len(), 1);
            failed |= !matches!(p.produce(extra, &values).await, Outcome::Ok(_));
        }
    }
    let fate = p.end(!(abort || failed)).await;
    let must_bump = failed || fate == Fate::Unknown;
    let fate = if failed && fate == Fate::Committed { Fate::Unknown } else { fate };
    settle(p, fate, must_bump)
}
