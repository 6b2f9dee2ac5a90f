//! `ShareCopier`: an exactly-once queue copier (KIP-1289). It takes records from a share group
//! on the input topic, writes each (same key, value and headers) to the output topic and
//! accepts its input inside the same transaction: one transaction per poll, transactions v2
//! (Produce v12 adds the output partitions, EndTxn v5 bumps the epoch), the acknowledgements
//! staged by TxnShareAcknowledge with the share partitions' leaders. A commit makes the outputs
//! visible and the inputs acknowledged together; an abort hides the outputs and gives the inputs
//! back to the group.
//!
//! The steps are the corner cases of KIP-1289 (`Step`): a `CopyHooks` hears each and may stop
//! the copier there (the simulator crashes or pauses it); `kaas share-copy` runs it with none.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::share_consumer::{
    Delivery, FENCED_MEMBER_EPOCH, ShareConsumer, ShareObserver, UNKNOWN_MEMBER_ID, accepts_by_broker,
};
use crate::{Message, NOT_SENT, Outcome, ProducerStamp, RELEASE};

/// Kafka's codes the copier acts on.
const PRODUCER_FENCED: i16 = 90;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const CONCURRENT_TRANSACTIONS: i16 = 51;
/// Codes after which a coordinator call is tried again.
const RETRIABLE: [i16; 5] = [14, 15, 16, CONCURRENT_TRANSACTIONS, NOT_SENT];
/// Produce errors a producer waits out: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
/// REQUEST_TIMED_OUT, NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), KAFKA_STORAGE_ERROR,
/// and a request never sent.
const PRODUCE_RETRIABLE: [i16; 8] = [3, 6, 7, 13, 19, 20, 56, NOT_SENT];
/// Tries of one produce before the transaction is given up (about 20 s): `CopyConfig`'s
/// default.
pub const PRODUCE_TRIES: u32 = 200;
/// Tries of a retriable coordinator call before the copier gives up.
const TRIES_MAX: u32 = 200;

/// What to copy, and how.
#[derive(Debug, Clone)]
pub struct CopyConfig {
    pub group: String,
    pub input: String,
    pub output: String,
    pub transactional_id: String,
    /// The copier's member id in the share group.
    pub member_id: String,
    /// Stop after this many records copied (committed).
    pub max_records: Option<u64>,
    /// Abort every k-th transaction on purpose: its records come back.
    pub abort_every: Option<u64>,
    /// Stop after this long without a record.
    pub idle_exit_ms: u64,
    pub transaction_timeout_ms: i32,
    /// Records one poll may take.
    pub poll_records: i32,
    /// Tries of one produce that failed retriably before its transaction is given up (0:
    /// aborted at the first failure).
    pub produce_tries: u32,
}

/// The points of a transaction where a copier may stop (KIP-1289's corner cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Records taken, nothing of the transaction written yet.
    Polled,
    /// The outputs written, the acknowledgements not yet staged.
    Produced,
    /// The acknowledgements staged, EndTxn not yet sent.
    Staged,
    /// EndTxn sent (before its answer is read).
    Ending,
}

/// Whether the copier goes on from a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Go {
    On,
    Stop,
}

/// One transaction as the copier made it.
#[derive(Debug, Clone, Default)]
pub struct TxnReport {
    /// 1 for the copier's first transaction.
    pub number: u64,
    pub ids: (i64, i16),
    pub member_epoch: i32,
    /// The input records: (partition, offset, delivery count).
    pub inputs: Vec<(i32, i64, i16)>,
    /// Whether every output was written and every acknowledgement staged.
    pub staged: bool,
    /// Whether it was to commit (false: an abort, on purpose or after a failure).
    pub commit: bool,
    /// The output partitions it wrote to, and how many of them were written before one failed.
    pub outputs: usize,
    pub written: usize,
    /// Where its parts were, as the copier's routes knew them once it staged.
    pub placement: Placement,
    /// Why a write or a staging failed (what the broker answered), if one did.
    pub failure: Option<String>,
}

/// Which brokers a transaction's parts were on: its coordinator, its output partitions' leaders,
/// and the share partitions its inputs came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub coordinator: Option<String>,
    pub outputs: BTreeSet<String>,
    pub shares: BTreeSet<String>,
}

/// How a transaction ended, as EndTxn answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    Committed,
    Aborted,
    /// The producer was fenced (another instance of the transactional id): it ended, aborted,
    /// without this copier.
    Fenced,
    /// No answer to be had: it may have committed.
    Unknown,
}

/// Hears the copier's steps; the defaults go on and ignore.
pub trait CopyHooks: Send {
    fn at<'a>(&'a mut self, _step: Step, _txn: &'a TxnReport) -> Pin<Box<dyn Future<Output = Go> + Send + 'a>> {
        Box::pin(async { Go::On })
    }
    /// A transaction ended (or was given up as `end`).
    fn ended(&mut self, _txn: &TxnReport, _end: TxnEnd) {}
    /// A TxnShareAcknowledge was sent at `sent` (the observer's mark) and came to `staged`.
    fn staging(&mut self, _txn: &TxnReport, _sent: u64, _staged: bool) {}
}

/// Hooks that go on through every step.
pub struct NoHooks;
impl CopyHooks for NoHooks {}

/// What a copier did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    pub copied: u64,
    pub committed: u64,
    pub aborted: u64,
    /// Whether it stopped because a hook said so.
    pub stopped: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyError {
    /// Another instance of the transactional id took over.
    Fenced,
    /// A call failed past its retries.
    Failed(String),
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyError::Fenced => write!(f, "fenced: another copier with this transactional id took over"),
            CopyError::Failed(why) => write!(f, "{why}"),
        }
    }
}

fn fenced(code: i16) -> bool {
    code == PRODUCER_FENCED || code == INVALID_PRODUCER_EPOCH
}

/// The copier: a share consumer and a transactional producer in one client.
pub struct ShareCopier {
    pub consumer: ShareConsumer,
    pub config: CopyConfig,
    ids: (i64, i16),
    sequences: BTreeMap<i32, i32>,
    output_partitions: i32,
    report: CopyReport,
    transactions: u64,
}

/// The output partition of a delivery: input partition and offset spread over the output's
/// partitions (a share group keeps no order to preserve), so that one poll's records, however
/// few input partitions they came from, make a transaction of several output partitions.
fn output_partition(d: &Delivery, partitions: i32) -> i32 {
    ((i64::from(d.partition) + d.record.offset).rem_euclid(i64::from(partitions.max(1)))) as i32
}

impl ShareCopier {
    pub fn new(consumer: ShareConsumer, config: CopyConfig) -> ShareCopier {
        ShareCopier {
            consumer,
            config,
            ids: (-1, -1),
            sequences: BTreeMap::new(),
            output_partitions: 0,
            report: CopyReport::default(),
            transactions: 0,
        }
    }

    pub fn ids(&self) -> (i64, i16) {
        self.ids
    }

    /// After a failure whose effect is unknown (an EndTxn without an answer): the next `run`
    /// starts with InitProducerId, which finishes or aborts whatever the last transaction left
    /// open. What it had acquired and not staged comes back when its locks run out.
    pub fn start_over(&mut self) {
        self.ids = (-1, -1);
        self.sequences.clear();
    }

    /// The producer's id and epoch (InitProducerId, which also aborts what an earlier
    /// instance of the transactional id left open), and the output's partition count.
    pub async fn init(&mut self) -> Result<(), CopyError> {
        let tid = self.config.transactional_id.clone();
        let timeout = self.config.transaction_timeout_ms;
        let mut tries = 0;
        self.ids = loop {
            match self.consumer.client.init_txn_producer(&tid, timeout, None).await {
                Outcome::Ok(ids) => break ids,
                Outcome::Failed(code) if fenced(code) => return Err(CopyError::Fenced),
                Outcome::Failed(code) if !RETRIABLE.contains(&code) => {
                    return Err(CopyError::Failed(format!("InitProducerId: error {code}")));
                }
                _ if tries >= TRIES_MAX => return Err(CopyError::Failed("InitProducerId: no answer".into())),
                _ => tries += 1,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let output = self.config.output.clone();
        for _ in 0..TRIES_MAX {
            if let Some(n) = self.consumer.client.partition_count(&output).await {
                self.output_partitions = n;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(CopyError::Failed(format!("the output topic {output} cannot be found")))
    }

    /// Copies until `max_records` are copied, `idle_exit_ms` passes without a record, or a hook
    /// stops it.
    pub async fn run(
        &mut self,
        hooks: &mut dyn CopyHooks,
        observer: &mut dyn ShareObserver,
    ) -> Result<CopyReport, CopyError> {
        if self.ids.0 < 0 {
            self.init().await?;
        }
        self.consumer.max_records = self.config.poll_records;
        let mut last_records = tokio::time::Instant::now();
        loop {
            if self.config.max_records.is_some_and(|max| self.report.copied >= max) {
                break;
            }
            let deliveries = self.consumer.poll(observer).await;
            if deliveries.is_empty() {
                if last_records.elapsed() >= Duration::from_millis(self.config.idle_exit_ms) {
                    break;
                }
                continue;
            }
            last_records = tokio::time::Instant::now();
            match self.transaction(&deliveries, hooks, observer).await? {
                Go::On => {}
                Go::Stop => {
                    self.report.stopped = true;
                    return Ok(self.report.clone());
                }
            }
        }
        self.consumer.close(observer).await;
        Ok(self.report.clone())
    }

    /// One transaction over `deliveries`.
    async fn transaction(
        &mut self,
        deliveries: &[Delivery],
        hooks: &mut dyn CopyHooks,
        observer: &mut dyn ShareObserver,
    ) -> Result<Go, CopyError> {
        self.transactions += 1;
        let mut txn = TxnReport {
            number: self.transactions,
            ids: self.ids,
            member_epoch: self.consumer.member_epoch,
            inputs: deliveries.iter().map(|d| (d.partition, d.record.offset, d.record.delivery_count)).collect(),
            staged: false,
            outputs: 0,
            written: 0,
            placement: Placement::default(),
            failure: None,
            commit: !self.config.abort_every.is_some_and(|k| k > 0 && self.transactions.is_multiple_of(k)),
        };
        if hooks.at(Step::Polled, &txn).await == Go::Stop {
            return Ok(Go::Stop);
        }
        let produced = self.produce(deliveries, &mut txn).await?;
        if hooks.at(Step::Produced, &txn).await == Go::Stop {
            return Ok(Go::Stop);
        }
        let staged = produced && self.stage(deliveries, &mut txn, hooks, observer).await?;
        txn.staged = staged;
        txn.placement = self.placement(deliveries);
        txn.commit &= staged;
        if hooks.at(Step::Staged, &txn).await == Go::Stop {
            return Ok(Go::Stop);
        }
        if hooks.at(Step::Ending, &txn).await == Go::Stop {
            return Ok(Go::Stop);
        }
        let end = self.end(txn.commit).await;
        hooks.ended(&txn, end);
        match end {
            TxnEnd::Committed => {
                self.report.copied += deliveries.len() as u64;
                self.report.committed += 1;
            }
            TxnEnd::Aborted => self.report.aborted += 1,
            TxnEnd::Fenced => return Err(CopyError::Fenced),
            TxnEnd::Unknown => return Err(CopyError::Failed("EndTxn: no answer".into())),
        }
        if !staged {
            // What was not staged is still this member's: given back now, not at its lock's end.
            for d in deliveries {
                self.consumer.acknowledge(d, RELEASE);
            }
        }
        Ok(Go::On)
    }

    /// Writes each delivery's message to the output, partition by partition: whether all were
    /// written.
    async fn produce(&mut self, deliveries: &[Delivery], txn: &mut TxnReport) -> Result<bool, CopyError> {
        let n = self.output_partitions.max(1);
        let mut by_partition: BTreeMap<i32, Vec<Message>> = BTreeMap::new();
        for d in deliveries {
            by_partition.entry(output_partition(d, n)).or_default().push(d.record.message.clone());
        }
        txn.outputs = by_partition.len();
        let tid = self.config.transactional_id.clone();
        let output = self.config.output.clone();
        for (p, messages) in by_partition {
            let base_sequence = *self.sequences.get(&p).unwrap_or(&0);
            let stamp = ProducerStamp { producer_id: self.ids.0, producer_epoch: self.ids.1, base_sequence };
            let now_ms = self.consumer.client.now_ms();
            // A partition moving or a broker restarting is waited out, as a Kafka producer
            // waits it out within delivery.timeout.ms: the same batch at the same sequence, which
            // the partition takes once however often it comes. Aborting instead would deliver
            // the records again at once, towards their delivery limit.
            let mut tries = 0;
            let outcome = loop {
                let outcome =
                    self.consumer.client.produce_txn_messages(&tid, &output, p, &messages, now_ms, stamp, true).await;
                let again = match &outcome {
                    Outcome::Failed(code) => PRODUCE_RETRIABLE.contains(code),
                    Outcome::Indefinite => true,
                    Outcome::Ok(_) => false,
                };
                if !again || tries >= self.config.produce_tries {
                    break outcome;
                }
                tries += 1;
                self.consumer.client.forget_leader(&output, p);
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            match outcome {
                Outcome::Ok(_) => {
                    self.sequences.insert(p, base_sequence + messages.len() as i32);
                    txn.written += 1;
                }
                Outcome::Failed(code) if fenced(code) => return Err(CopyError::Fenced),
                // Written or not, the transaction is aborted: its outputs are never read.
                Outcome::Failed(code) => {
                    txn.failure = Some(format!("Produce to {output}-{p}: error {code} after {tries} retries"));
                    return Ok(false);
                }
                Outcome::Indefinite => {
                    txn.failure = Some(format!("Produce to {output}-{p}: no answer after {tries} retries"));
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Where the transaction's parts are, as this copier's routes know them.
    fn placement(&self, deliveries: &[Delivery]) -> Placement {
        let client = &self.consumer.client;
        let n = self.output_partitions.max(1);
        Placement {
            coordinator: client.known_coordinator(1, &self.config.transactional_id).map(str::to_string),
            outputs: deliveries
                .iter()
                .filter_map(|d| client.known_leader(&self.config.output, output_partition(d, n)))
                .map(str::to_string)
                .collect(),
            shares: deliveries.iter().map(|d| d.broker.clone()).collect(),
        }
    }

    /// Stages the deliveries' acceptance with the brokers they came from: whether all were.
    async fn stage(
        &mut self,
        deliveries: &[Delivery],
        txn: &mut TxnReport,
        hooks: &mut dyn CopyHooks,
        observer: &mut dyn ShareObserver,
    ) -> Result<bool, CopyError> {
        let by_broker = accepts_by_broker(deliveries, self.consumer.topic_id().unwrap_or_default());
        let tid = self.config.transactional_id.clone();
        let group = self.config.group.clone();
        let member = (self.consumer.member_id.clone(), self.consumer.member_epoch);
        for (broker, acks) in by_broker {
            let sent = observer.mark();
            let outcome = self
                .consumer
                .client
                .txn_share_acknowledge_on(&broker, &tid, self.ids, &group, (&member.0, member.1), &acks)
                .await;
            let staged = matches!(&outcome, Outcome::Ok(codes) if codes.iter().all(|(_, _, c)| *c == 0));
            hooks.staging(txn, sent, staged);
            if !staged {
                txn.failure = Some(format!("TxnShareAcknowledge on {broker}: {outcome:?}"));
            }
            match outcome {
                Outcome::Ok(_) if staged => {}
                Outcome::Failed(code) if fenced(code) => return Err(CopyError::Fenced),
                Outcome::Failed(UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH) => {
                    self.consumer.fenced();
                    return Ok(false);
                }
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// EndTxn v5, retried while the coordinator is busy or unreachable (a retry of an end that
    /// went through is answered as done).
    async fn end(&mut self, commit: bool) -> TxnEnd {
        let tid = self.config.transactional_id.clone();
        for _ in 0..TRIES_MAX {
            match self.consumer.client.end_txn_v2(&tid, self.ids, commit).await {
                Outcome::Ok(next) => {
                    if next != self.ids {
                        self.ids = next;
                        self.sequences.clear();
                    }
                    return if commit { TxnEnd::Committed } else { TxnEnd::Aborted };
                }
                Outcome::Failed(code) if fenced(code) => return TxnEnd::Fenced,
                Outcome::Failed(code) if RETRIABLE.contains(&code) => {}
                Outcome::Failed(_) => return TxnEnd::Unknown,
                Outcome::Indefinite => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        TxnEnd::Unknown
    }
}
