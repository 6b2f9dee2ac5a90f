//! The partition actor: owns one partition's log and is the only writer of it. Appends from
//! many connections queue here; the actor writes every queued append, syncs once, and only then
//! answers them (group commit), so an ack always means the batch is durable.
//!
//! It also owns the partition's producer state: every batch with a producer id is checked
//! against it before it is written (a retried batch is answered with its original offset and
//! not written again), and a snapshot of it is written on each segment roll and on stop.
//!
//! Transactions: the producer state knows which producers have a transaction open here; the
//! last stable offset (LSO) is the first offset of the oldest one, or the high watermark. A
//! producer's first transactional batch of a transaction is appended only if the coordinator
//! verified that the partition is in its transaction (KIP-890 part 1) and no marker for the
//! producer was written since that verification (the guard), so a late batch can never open a
//! transaction nobody will end.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

use crate::cluster::{Claimed, ClusterView};
use crate::config::PartitionSettings;
use crate::env::{Clock, Env, Rng, Spawner};
use crate::error::{CoreError, CoreResult};
use crate::log::batch::BatchHeader;
use crate::log::control::{self, Marker};
use crate::log::records::TimestampAndOffset;
use crate::log::{DurableEnd, LogConfig, PartitionLog, cut_to_durable};
use crate::producer::snapshot;
use crate::producer::state::{AbortedTxn, Event, MarkerVerdict, ProducerEntry, ProducerStates, Verdict};

/// Commands queued per partition before senders wait.
const QUEUE_CAPACITY: usize = 1024;
/// How often a partition whose log could not be opened tries again by itself.
const REOPEN_RETRY_MS: u64 = 500;
/// Commands handled between two syncs at most, so acks are never starved by a busy queue.
const GROUP_COMMIT_MAX: usize = 512;

/// A partition's offsets as last published. `online` is false until the log has been opened
/// and while it is being reopened after a failed write: the offsets are then stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watermarks {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// The first offset of the oldest open transaction, or the high watermark.
    pub last_stable_offset: i64,
    pub log_end_offset: i64,
    pub online: bool,
    /// The ownership epoch this broker serves the partition under (Kafka's leader epoch).
    pub leader_epoch: i32,
    /// Whether this broker owns the partition now; if not, every request for it is answered
    /// NOT_LEADER_OR_FOLLOWER.
    pub owned: bool,
}

/// What the produce path needs to know before a transactional append, as last published.
#[derive(Debug, Clone, Default)]
pub struct TxnView {
    /// Producers with a transaction open here, and its epoch: their batches need no verification.
    pub ongoing: Arc<BTreeMap<i64, i16>>,
    /// Markers written so far: a verification guard. A marker for the producer numbered above
    /// the guard means its transaction ended after the verification.
    pub markers_written: u64,
}

/// An OffsetForLeaderEpoch answer: the owner's epoch now, and the largest epoch up to the one
/// asked with the offset its records end at (-1 and -1: the log holds no epoch that old).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    pub current_leader_epoch: i32,
    pub leader_epoch: i32,
    pub end_offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

/// Records read, with the watermarks of the log they were read from, and for read_committed
/// the aborted transactions in the range read.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub records: Bytes,
    pub watermarks: Watermarks,
    pub aborted: Vec<AbortedTxn>,
}

#[derive(Debug, Clone, Copy)]
pub struct AppendOutcome {
    pub base_offset: i64,
    pub log_start_offset: i64,
}

enum Command {
    Append {
        batches: Vec<(BatchHeader, Bytes)>,
        /// The `markers_written` seen before the coordinator verified the transaction.
        verified: Option<u64>,
        reply: Option<oneshot::Sender<CoreResult<AppendOutcome>>>,
    },
    WriteMarker {
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
        coordinator_epoch: i32,
        reply: oneshot::Sender<CoreResult<AppendOutcome>>,
    },
    /// Producer id -> its current epoch, from the transaction coordinator.
    Fence(Arc<BTreeMap<i64, i16>>),
    Read {
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
        reply: oneshot::Sender<CoreResult<ReadOutcome>>,
    },
    OffsetForTime {
        timestamp: i64,
        reply: oneshot::Sender<CoreResult<Option<TimestampAndOffset>>>,
    },
    MaxTimestamp {
        reply: oneshot::Sender<i64>,
    },
    EpochEnd {
        leader_epoch: i32,
        reply: oneshot::Sender<CoreResult<EpochEnd>>,
    },
    DeleteRecords {
        offset: i64,
        reply: oneshot::Sender<CoreResult<i64>>,
    },
    /// The bytes of the log's segments on the volume (DescribeLogDirs).
    SizeBytes {
        reply: oneshot::Sender<CoreResult<u64>>,
    },
    DescribeProducers {
        reply: oneshot::Sender<CoreResult<Vec<(i64, ProducerEntry)>>>,
    },
    SetConfig(PartitionSettings),
    EnforceRetention,
    /// This broker claimed the partition: open the log and serve it under `claimed.epoch`, for
    /// as long as the lease session `session` lasts.
    Own {
        claimed: Claimed,
        session: u64,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    /// Stop serving: answer what is queued, sync, snapshot and close the log. Replies once
    /// nothing more will be written, so the claim can be released.
    Disown {
        reply: oneshot::Sender<()>,
    },
    /// Syncs and stops; with `delete`, removes the partition's files first.
    Stop {
        delete: bool,
        reply: oneshot::Sender<()>,
    },
}

/// A cheap, cloneable way to talk to one partition actor.
#[derive(Clone)]
pub struct PartitionHandle {
    tx: mpsc::Sender<Command>,
    watermarks: watch::Receiver<Watermarks>,
    txn_view: watch::Receiver<TxnView>,
}

fn stopped() -> CoreError {
    CoreError::UnknownTopicOrPartition
}

impl PartitionHandle {
    pub fn watermarks(&self) -> Watermarks {
        *self.watermarks.borrow()
    }

    pub fn txn_view(&self) -> TxnView {
        self.txn_view.borrow().clone()
    }

    /// Queues an append. The returned receiver resolves once the batches are durable (or failed).
    /// Queuing happens before this returns, so appends from one connection keep their order.
    /// `verified` is the guard of a transaction the coordinator verified (`TxnView`).
    pub async fn append(
        &self,
        batches: Vec<(BatchHeader, Bytes)>,
        verified: Option<u64>,
    ) -> oneshot::Receiver<CoreResult<AppendOutcome>> {
        let (reply, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Command::Append { reply: Some(reply), .. })) =
            self.tx.send(Command::Append { batches, verified, reply: Some(reply) }).await
        {
            let _ = reply.send(Err(stopped()));
        }
        rx
    }

    /// acks=0: append without an answer.
    pub async fn append_unacknowledged(&self, batches: Vec<(BatchHeader, Bytes)>, verified: Option<u64>) {
        let _ = self.tx.send(Command::Append { batches, verified, reply: None }).await;
    }

    /// Queues a transaction marker; the receiver resolves once it is durable (or failed).
    pub async fn queue_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
        coordinator_epoch: i32,
    ) -> oneshot::Receiver<CoreResult<AppendOutcome>> {
        let (reply, rx) = oneshot::channel();
        let command = Command::WriteMarker { producer_id, producer_epoch, marker, coordinator_epoch, reply };
        if let Err(mpsc::error::SendError(Command::WriteMarker { reply, .. })) = self.tx.send(command).await {
            let _ = reply.send(Err(stopped()));
        }
        rx
    }

    /// Refuses each producer's batches of epochs below the one given from now on.
    pub async fn fence(&self, epochs: Arc<BTreeMap<i64, i16>>) {
        let _ = self.tx.send(Command::Fence(epochs)).await;
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.ok()?;
        rx.await.ok()
    }

    /// Records from `offset`, and the watermarks as of the read (not as last published, which
    /// a partition still opening has not done yet).
    pub async fn read(&self, offset: i64, max_bytes: usize, isolation: Isolation) -> CoreResult<ReadOutcome> {
        self.ask(|reply| Command::Read { offset, max_bytes, isolation, reply }).await.unwrap_or_else(|| Err(stopped()))
    }

    /// The bytes the partition's segments take on the volume.
    pub async fn size_bytes(&self) -> CoreResult<u64> {
        self.ask(|reply| Command::SizeBytes { reply }).await.unwrap_or_else(|| Err(stopped()))
    }

    /// Every producer the partition remembers, with its epoch and last batches (KIP-664).
    pub async fn describe_producers(&self) -> CoreResult<Vec<(i64, ProducerEntry)>> {
        self.ask(|reply| Command::DescribeProducers { reply }).await.unwrap_or_else(|| Err(stopped()))
    }

    /// The first record at or after `timestamp` (ListOffsets by time), with its own timestamp.
    pub async fn offset_for_time(&self, timestamp: i64) -> CoreResult<Option<TimestampAndOffset>> {
        self.ask(|reply| Command::OffsetForTime { timestamp, reply }).await.unwrap_or_else(|| Err(stopped()))
    }

    /// OffsetForLeaderEpoch: where the records of `leader_epoch` (or the newest older epoch)
    /// end, and the leader epoch this owner serves under.
    pub async fn epoch_end(&self, leader_epoch: i32) -> CoreResult<EpochEnd> {
        self.ask(|reply| Command::EpochEnd { leader_epoch, reply }).await.unwrap_or_else(|| Err(stopped()))
    }

    pub async fn max_timestamp(&self) -> CoreResult<i64> {
        self.ask(|reply| Command::MaxTimestamp { reply }).await.ok_or_else(stopped)
    }

    pub async fn delete_records(&self, offset: i64) -> CoreResult<i64> {
        self.ask(|reply| Command::DeleteRecords { offset, reply }).await.unwrap_or_else(|| Err(stopped()))
    }

    pub async fn set_config(&self, settings: PartitionSettings) {
        let _ = self.tx.send(Command::SetConfig(settings)).await;
    }

    pub async fn enforce_retention(&self) {
        let _ = self.tx.send(Command::EnforceRetention).await;
    }

    /// Opens the log and serves it under the claimed epoch.
    pub async fn own(&self, claimed: Claimed, session: u64) -> CoreResult<()> {
        self.ask(|reply| Command::Own { claimed, session, reply }).await.unwrap_or_else(|| Err(stopped()))
    }

    /// Stops serving; returns once the last write is done.
    pub async fn disown(&self) {
        self.ask(|reply| Command::Disown { reply }).await;
    }

    /// Syncs and stops the actor; with `delete`, its files are removed too.
    pub async fn stop(&self, delete: bool) {
        self.ask(|reply| Command::Stop { delete, reply }).await;
    }
}

struct PartitionActor<E: Env> {
    env: E,
    dir: String,
    config: LogConfig,
    /// None while the log could not be opened; every request then gets a storage error and the
    /// next one retries the open.
    log: Option<PartitionLog<E::Volume>>,
    watermarks: watch::Sender<Watermarks>,
    txn_view: watch::Sender<TxnView>,
    /// Markers written by this actor, the guard counter of `TxnView`.
    markers_written: u64,
    /// The number of the last marker written for each producer since the actor started.
    last_marker: BTreeMap<i64, u64>,
    /// `markers_written` when the log was last reopened: older guards are not trusted, the
    /// markers they would be checked against may be forgotten.
    reopened_at: u64,
    /// Transactions whose marker is written but not yet durable: (marker offset, first offset).
    /// Until the high watermark passes the marker they are open to readers: a crash could take
    /// the marker back.
    unsynced_ends: Vec<(i64, i64)>,
    /// Bumped whenever any partition's high watermark moves: long-polling fetches wait on it.
    data_version: watch::Sender<u64>,
    max_message_bytes: usize,
    producer_id_expiration_ms: i64,
    /// The state of every producer in the log; rebuilt whenever the log is (re)opened.
    producers: ProducerStates,
    /// Segments the log had when the last snapshot was written: more means a roll since.
    segments_at_snapshot: usize,
    /// Set by a failed write or sync: the log must be cut back to this before it is reopened,
    /// since the bytes after it may read back fine and still be gone after a crash.
    cut_before_open: Option<DurableEnd>,
    /// The coordinator's fences (producer id -> epoch) not yet in a snapshot: the producer
    /// state is rebuilt from the log and the last snapshot whenever the log is reopened, and
    /// neither holds a fence, so they are applied again after every (re)open.
    fences: BTreeMap<i64, i16>,
    /// The epoch and lease session this broker serves the partition under; `None`: it does not.
    owned: Option<Owned>,
    /// The membership's view: an ack is sent only while the lease of `owned.session` is valid.
    cluster: watch::Receiver<Arc<ClusterView>>,
    /// The id of the topic this partition belongs to, and whether its directory was checked to
    /// be this topic's (`adopt_dir`).
    topic_id: [u8; 16],
    adopted: bool,
}

/// The file in a partition directory naming the topic it belongs to.
const TOPIC_ID_FILE: &str = "topic.id";

/// Makes `dir` the directory of topic `topic_id`: a directory marked with another topic id is
/// a deleted topic's that a crash left behind, and is emptied first; an unmarked one (written
/// before directories were marked) is kept and marked.
pub async fn adopt_dir<V: crate::env::Volume>(volume: &V, dir: &str, topic_id: [u8; 16]) -> std::io::Result<()> {
    let path = crate::env::join(dir, TOPIC_ID_FILE);
    let hex = crate::hex::encode(&topic_id);
    match volume.read(&path).await? {
        Some(raw) if raw.as_ref() == hex.as_bytes() => return Ok(()),
        Some(_) if !crate::mutant!(RecreateKeepsStalePartitions) => {
            tracing::warn!(dir, "removing a deleted topic's partition directory");
            volume.remove_dir_all(dir).await?;
        }
        _ => {}
    }
    volume.create_dir_all(dir).await?;
    volume.write_atomic(&path, Bytes::from(hex)).await
}

#[derive(Debug, Clone, Copy)]
struct Owned {
    claimed: Claimed,
    session: u64,
}

/// Starts the actor of the partition at `dir`. It serves nothing until told to `own` it.
pub async fn start<E: Env>(
    env: &E,
    dir: String,
    topic_id: [u8; 16],
    settings: PartitionSettings,
    data_version: watch::Sender<u64>,
    cluster: watch::Receiver<Arc<ClusterView>>,
) -> PartitionHandle {
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let (watermarks, watermarks_rx) = watch::channel(Watermarks::default());
    let (txn_view, txn_view_rx) = watch::channel(TxnView::default());
    let mut actor = PartitionActor {
        env: env.clone(),
        dir,
        config: settings.log,
        log: None,
        watermarks,
        txn_view,
        markers_written: 0,
        last_marker: BTreeMap::new(),
        reopened_at: 0,
        unsynced_ends: Vec::new(),
        data_version,
        max_message_bytes: settings.max_message_bytes,
        producer_id_expiration_ms: settings.producer_id_expiration_ms,
        producers: ProducerStates::default(),
        segments_at_snapshot: 0,
        cut_before_open: None,
        fences: BTreeMap::new(),
        owned: None,
        cluster,
        topic_id,
        adopted: false,
    };
    actor.ensure_open().await;
    env.spawner().spawn("partition", actor.run(rx));
    PartitionHandle { tx, watermarks: watermarks_rx, txn_view: txn_view_rx }
}

impl<E: Env> PartitionActor<E> {
    /// Whether this broker may still answer as the partition's owner: it owns it, and the lease
    /// session it claimed it in is still valid (write, then verify: checked after each sync).
    fn lease_ok(&self) -> bool {
        let Some(owned) = self.owned else { return false };
        if crate::mutant!(AckWithoutLeaseCheck) {
            return true;
        }
        let view = self.cluster.borrow();
        view.session == owned.session && view.lease_valid(self.env.clock().monotonic())
    }

    async fn ensure_open(&mut self) -> Option<&mut PartitionLog<E::Volume>> {
        let owned = self.owned?;
        if self.log.is_none() {
            let volume = self.env.volume().clone();
            if !self.adopted {
                match adopt_dir(&volume, &self.dir, self.topic_id).await {
                    Ok(()) => self.adopted = true,
                    Err(e) => {
                        tracing::error!(dir = %self.dir, error = %e, "cannot check the partition directory");
                        return None;
                    }
                }
            }
            self.cut_pending().await;
            if self.cut_before_open.is_some() {
                return None;
            }
            let opened = match PartitionLog::open(volume.clone(), &self.dir, self.config, owned.claimed).await {
                Ok(log) => snapshot::restore(&volume, &log).await.map(|producers| (log, producers)),
                Err(e) => Err(e),
            };
            match opened {
                Ok((log, producers)) => {
                    self.segments_at_snapshot = log.segment_count();
                    self.producers = producers;
                    for (&producer_id, &producer_epoch) in &self.fences {
                        self.producers.transition(Event::Fence { producer_id, producer_epoch });
                    }
                    self.log = Some(log);
                    self.reopened_at = self.markers_written;
                    self.unsynced_ends.clear();
                    self.publish();
                }
                Err(e) => tracing::error!(dir = %self.dir, error = %e, "cannot open partition log"),
            }
        }
        self.log.as_mut()
    }

    fn publish(&mut self) {
        let Some(log) = &self.log else { return };
        let high_watermark = log.high_watermark();
        self.unsynced_ends.retain(|&(marker, _)| marker >= high_watermark);
        let mut now = watermarks_of(log, &self.producers, &self.unsynced_ends);
        now.leader_epoch = self.owned.map_or(0, |o| o.claimed.epoch as i32);
        now.owned = self.owned.is_some();
        let before = *self.watermarks.borrow();
        self.check_txn_bookkeeping(&now);
        assert!(
            now.high_watermark >= before.high_watermark || now.leader_epoch != before.leader_epoch,
            "the high watermark never moves back within an ownership epoch"
        );
        assert!(
            now.last_stable_offset >= before.last_stable_offset || !before.online,
            "the last stable offset never moves back"
        );
        let ongoing: BTreeMap<i64, i16> =
            self.producers.ongoing().map(|(pid, entry)| (pid, entry.producer_epoch)).collect();
        self.txn_view.send_if_modified(|view| {
            let changed = view.markers_written != self.markers_written || *view.ongoing != ongoing;
            if changed {
                *view = TxnView { ongoing: Arc::new(ongoing), markers_written: self.markers_written };
            }
            changed
        });
        if now != before {
            self.watermarks.send_replace(now);
            if now.high_watermark != before.high_watermark || now.last_stable_offset != before.last_stable_offset {
                self.data_version.send_modify(|v| *v += 1);
            }
        }
    }

    /// The partition's transactional bookkeeping, checked whenever it publishes.
    fn check_txn_bookkeeping(&self, now: &Watermarks) {
        for &(marker, first) in &self.unsynced_ends {
            assert!(first < marker, "a transaction ends after it began");
            assert!(marker >= now.high_watermark, "an end not yet durable lies at or past the high watermark");
            assert!(
                now.last_stable_offset <= first || crate::mutant!(LsoNotClamped),
                "an end not yet durable holds the LSO"
            );
        }
        assert!(self.reopened_at <= self.markers_written, "a reopen is numbered by the markers before it");
        assert!(self.last_marker.values().all(|&m| m <= self.markers_written), "markers are numbered in order");
        if let Some(first) = self.producers.first_unstable_offset() {
            assert!(
                now.last_stable_offset <= first.max(now.log_start_offset) || crate::mutant!(LsoNotClamped),
                "the LSO never passes an open transaction"
            );
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let mut acks: Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)> = Vec::new();
        loop {
            // A log that could not be opened is tried again on the next command, and on its
            // own now and then: readers of the published watermarks (ListOffsets) send none.
            let command = if self.log.is_none() && self.owned.is_some() {
                tokio::select! {
                    biased;
                    command = rx.recv() => command,
                    _ = self.env.clock().sleep_ms(REOPEN_RETRY_MS) => {
                        self.ensure_open().await;
                        continue;
                    }
                }
            } else {
                rx.recv().await
            };
            let Some(command) = command else { break };
            let mut next = Some(command);
            let mut handled = 0;
            while let Some(command) = next.take() {
                if let Command::Stop { delete, reply } = command {
                    self.finish_group(&mut acks).await;
                    self.stop(delete).await;
                    let _ = reply.send(());
                    return;
                }
                self.handle(command, &mut acks).await;
                handled += 1;
                if handled < GROUP_COMMIT_MAX {
                    next = rx.try_recv().ok();
                }
            }
            self.finish_group(&mut acks).await;
        }
        self.finish_group(&mut acks).await;
        if let Some(log) = self.log.as_mut() {
            let _ = log.sync().await;
        }
    }

    /// One sync for every append of the group, then every ack.
    async fn finish_group(&mut self, acks: &mut Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)>) {
        if crate::buggify!("partition.slow_sync") {
            // Widens the window in which appends are written but neither durable nor acked.
            self.env.clock().sleep_ms(self.env.rng().below(50)).await;
        }
        let Some(log) = self.log.as_mut() else {
            for (reply, _) in acks.drain(..) {
                let _ = reply.send(Err(CoreError::Storage("partition log unavailable".into())));
            }
            return;
        };
        if log.high_watermark() == log.log_end_offset() && acks.is_empty() {
            return;
        }
        let synced = log.sync().await;
        match synced {
            Ok(()) if !self.lease_ok() => {
                // Written and durable, but the lease ran out meanwhile: a peer may own the
                // partition already, and may not have these bytes. Nothing is published or
                // acked; the producer, told the effect is unknown, retries elsewhere.
                for (reply, _) in acks.drain(..) {
                    let _ = reply.send(Err(CoreError::NotLeaderOrFollower));
                }
            }
            Ok(()) => {
                let log = self.log.as_ref().expect("synced");
                let log_start_offset = log.log_start_offset();
                let rolled = log.segment_count() != self.segments_at_snapshot;
                self.publish();
                for (reply, outcome) in acks.drain(..) {
                    let _ = reply.send(Ok(AppendOutcome { log_start_offset, ..outcome }));
                }
                if rolled {
                    self.write_snapshot().await;
                }
            }
            Err(e) => self.fail_writes(acks, &e.to_string()).await,
        }
    }

    /// Snapshots the producer state as of the log end. Everything is synced, so the state and
    /// the log agree there. A failure only costs a longer scan on the next start.
    async fn write_snapshot(&mut self) {
        let Some(log) = &self.log else { return };
        assert_eq!(log.high_watermark(), log.log_end_offset(), "a snapshot is taken with nothing unsynced");
        let (offset, segments, epoch) = (log.log_end_offset(), log.segment_count(), log.epoch());
        match snapshot::write(self.env.volume(), &self.dir, offset, epoch, &self.producers).await {
            Ok(()) => {
                self.segments_at_snapshot = segments;
                // The snapshot holds every fence a producer it knows has taken; a producer it
                // does not know is not in the log, so its fence has nothing to refuse.
                let producers = &self.producers;
                self.fences.retain(|pid, epoch| producers.get(*pid).is_some_and(|e| e.producer_epoch < *epoch));
            }
            Err(e) => tracing::warn!(dir = %self.dir, error = %e, "cannot write the producer state snapshot"),
        }
    }

    /// After a failed write or sync the log's tail is unknown: answer every waiting append with
    /// a storage error (effect unknown), and recover the log from what is durable: it is cut
    /// back to the end of its last successful sync and reopened before it serves anyone again.
    async fn fail_writes(
        &mut self,
        acks: &mut Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)>,
        why: &str,
    ) {
        tracing::error!(dir = %self.dir, error = why, "write failed; recovering the partition log from its durable end");
        for (reply, _) in acks.drain(..) {
            let _ = reply.send(Err(CoreError::Storage(why.to_string())));
        }
        if let Some(log) = &self.log {
            // A log is only open once an earlier cut was made.
            assert!(self.cut_before_open.is_none(), "an open log has no cut pending");
            self.cut_before_open = Some(log.durable_end());
        }
        self.log = None;
        self.producers = ProducerStates::default();
        self.watermarks.send_modify(|w| w.online = false);
        // At once, not at the reopen: a process that exits first must not leave the bytes of
        // a failed sync for the next one to read back and trust.
        self.cut_pending().await;
    }

    /// Cuts the log back to its durable end if a failure left a cut pending.
    async fn cut_pending(&mut self) {
        let Some(end) = self.cut_before_open else { return };
        match cut_to_durable(self.env.volume(), &self.dir, end).await {
            Ok(()) => self.cut_before_open = None,
            Err(e) => tracing::error!(dir = %self.dir, error = %e, "cannot cut the log to its durable end; will retry"),
        }
    }

    async fn handle(
        &mut self,
        command: Command,
        acks: &mut Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)>,
    ) {
        // Fences and settings are kept whether or not the log can be opened now: losing one
        // would let a fenced producer write, or a partition run on old settings.
        let command = match command {
            Command::Fence(epochs) => {
                if !crate::mutant!(SkipCrossPartitionFence) {
                    for (&producer_id, &producer_epoch) in epochs.iter() {
                        let fenced = self.fences.entry(producer_id).or_insert(producer_epoch);
                        *fenced = (*fenced).max(producer_epoch);
                        self.producers.transition(Event::Fence { producer_id, producer_epoch });
                    }
                }
                return;
            }
            Command::Own { claimed, session, reply } => {
                tracing::debug!(dir = %self.dir, ?claimed, session, "own");
                if self.owned.is_some_and(|o| o.claimed.epoch == claimed.epoch && o.session == session) {
                    let _ = reply.send(Ok(()));
                    return;
                }
                self.finish_group(acks).await;
                self.stop(false).await;
                self.owned = Some(Owned { claimed, session });
                // A new epoch starts from what the files say: an old epoch's watermarks (a
                // zombie's, perhaps past what it acked) are no baseline for it.
                self.watermarks.send_replace(Watermarks {
                    owned: true,
                    leader_epoch: claimed.epoch as i32,
                    ..Watermarks::default()
                });
                let opened = self.ensure_open().await.is_some();
                let _ = reply.send(if opened { Ok(()) } else { Err(CoreError::Storage("cannot open the log".into())) });
                return;
            }
            Command::Disown { reply } => {
                tracing::debug!(dir = %self.dir, owned = ?self.owned, "disown");
                self.finish_group(acks).await;
                self.stop(false).await;
                self.owned = None;
                self.watermarks.send_modify(|w| {
                    w.online = false;
                    w.owned = false;
                });
                let _ = reply.send(());
                return;
            }
            Command::SetConfig(settings) => {
                if let Some(log) = self.log.as_mut() {
                    log.set_config(settings.log);
                }
                self.config = settings.log;
                self.max_message_bytes = settings.max_message_bytes;
                self.producer_id_expiration_ms = settings.producer_id_expiration_ms;
                return;
            }
            command => command,
        };
        let max_message_bytes = self.max_message_bytes;
        let now_ms = self.env.clock().now_ms();
        if !self.lease_ok() {
            reply_with(command, CoreError::NotLeaderOrFollower);
            return;
        }
        if self.ensure_open().await.is_none() {
            reply_with(command, CoreError::Storage("partition log unavailable".into()));
            return;
        }
        let log = self.log.as_mut().expect("opened");
        match command {
            Command::Append { reply: Some(reply), .. } if crate::buggify!("partition.not_leader") => {
                // A retriable refusal before anything is written, as a moving leader gives.
                let _ = reply.send(Err(CoreError::NotLeaderOrFollower));
            }
            Command::Append { batches, verified, reply } => {
                if batches.iter().any(|(h, _)| h.total_len() > max_message_bytes) {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(CoreError::MessageTooLarge));
                    }
                    return;
                }
                let mut base_offset = None;
                for (header, data) in batches {
                    if header.producer_id >= 0 {
                        let refused = match self.producers.check(&header) {
                            Verdict::Append if header.is_transactional() => {
                                verify(&self.producers, &self.last_marker, self.reopened_at, &header, verified).err()
                            }
                            Verdict::Append => None,
                            Verdict::Duplicate { base_offset: original } => {
                                tracing::trace!(dir = %self.dir, original, pid = header.producer_id, seq = header.base_sequence, "duplicate");
                                // Answered once durable, like the appends of this group: the
                                // original may still be one of them.
                                base_offset.get_or_insert(original);
                                continue;
                            }
                            Verdict::OutOfOrderSequence => Some(CoreError::OutOfOrderSequenceNumber),
                            Verdict::InvalidProducerEpoch => Some(CoreError::InvalidProducerEpoch),
                            Verdict::UnknownProducerId => Some(CoreError::UnknownProducerId),
                        };
                        if let Some(error) = refused {
                            if let Some(reply) = reply {
                                let _ = reply.send(Err(error));
                            }
                            return;
                        }
                    }
                    match log.append(&header, data).await {
                        Ok(offset) => {
                            tracing::trace!(dir = %self.dir, offset, pid = header.producer_id, seq = header.base_sequence, "appended");
                            self.producers.transition(Event::Batch { header: &header, base_offset: offset });
                            base_offset.get_or_insert(offset);
                        }
                        Err(e) => {
                            if let Some(reply) = reply {
                                acks.push((reply, AppendOutcome { base_offset: -1, log_start_offset: -1 }));
                            }
                            let why = e.to_string();
                            // Earlier appends of this group are not durable either.
                            let mut failed = std::mem::take(acks);
                            self.fail_writes(&mut failed, &why).await;
                            return;
                        }
                    }
                }
                if let Some(reply) = reply {
                    let base_offset = base_offset.expect("a produce holds at least one batch");
                    acks.push((reply, AppendOutcome { base_offset, log_start_offset: -1 }));
                }
            }
            Command::WriteMarker { producer_id, producer_epoch, marker, coordinator_epoch, reply } => {
                if self.producers.check_marker(producer_id, producer_epoch) == MarkerVerdict::InvalidProducerEpoch {
                    let _ = reply.send(Err(CoreError::InvalidProducerEpoch));
                    return;
                }
                let batch = control::marker_batch(producer_id, producer_epoch, marker, coordinator_epoch, now_ms);
                let header = crate::log::batch::check(&batch).expect("a marker is a valid batch");
                match log.append(&header, batch).await {
                    Ok(offset) => {
                        if let Some(first_offset) = self.producers.ongoing_first_offset(producer_id) {
                            self.unsynced_ends.push((offset, first_offset));
                        }
                        self.producers.transition(Event::Marker { producer_id, producer_epoch, marker, offset });
                        self.markers_written += 1;
                        self.last_marker.insert(producer_id, self.markers_written);
                        acks.push((reply, AppendOutcome { base_offset: offset, log_start_offset: -1 }));
                    }
                    Err(e) => {
                        acks.push((reply, AppendOutcome { base_offset: -1, log_start_offset: -1 }));
                        let mut failed = std::mem::take(acks);
                        self.fail_writes(&mut failed, &e.to_string()).await;
                    }
                }
            }
            Command::Read { offset, max_bytes, isolation, reply } => {
                // A short read still holds a whole batch: consumers must cope with any split.
                let max_bytes = if crate::buggify!("partition.short_read") { 1 } else { max_bytes };
                let mut watermarks = watermarks_of(log, &self.producers, &self.unsynced_ends);
                watermarks.leader_epoch = self.owned.map_or(0, |o| o.claimed.epoch as i32);
                let (upper, aborted) = match isolation {
                    Isolation::ReadUncommitted => (None, Vec::new()),
                    Isolation::ReadCommitted => {
                        let lso = watermarks.last_stable_offset;
                        (Some(lso), self.producers.aborted_between(offset, lso))
                    }
                };
                let read = log.read(offset, max_bytes, upper).await.map_err(CoreError::from);
                let _ = reply.send(read.map(|r| ReadOutcome { records: r.records, watermarks, aborted }));
            }
            Command::OffsetForTime { timestamp, reply } => {
                let _ = reply.send(log.offset_for_time(timestamp).await.map_err(CoreError::from));
            }
            Command::MaxTimestamp { reply } => {
                let _ = reply.send(log.max_timestamp());
            }
            Command::EpochEnd { leader_epoch, reply } => {
                let current = i32::try_from(log.epoch()).unwrap_or(i32::MAX);
                let found = u32::try_from(leader_epoch).ok().and_then(|e| log.end_offset_for_epoch(e));
                let (epoch, end_offset) =
                    found.map_or((-1, -1), |(e, end)| (i32::try_from(e).unwrap_or(i32::MAX), end));
                let _ = reply.send(Ok(EpochEnd { current_leader_epoch: current, leader_epoch: epoch, end_offset }));
            }
            Command::DeleteRecords { offset, reply } => {
                let result = log.delete_records(offset).await.map_err(CoreError::from);
                // Producers whose every batch is gone are forgotten, as Apache does.
                self.producers.transition(Event::LogStartMoved { log_start_offset: log.log_start_offset() });
                self.publish();
                let _ = reply.send(result);
            }
            Command::EnforceRetention => {
                let stable_end = watermarks_of(log, &self.producers, &self.unsynced_ends).last_stable_offset;
                if let Err(e) = log.enforce_retention(now_ms, stable_end).await {
                    tracing::warn!(dir = %self.dir, error = %e, "retention failed");
                }
                self.producers.transition(Event::LogStartMoved { log_start_offset: log.log_start_offset() });
                self.producers.transition(Event::Expire { now_ms, expiration_ms: self.producer_id_expiration_ms });
                self.publish();
            }
            Command::SizeBytes { reply } => {
                let _ = reply.send(Ok(log.size_bytes()));
            }
            Command::DescribeProducers { reply } => {
                let producers = self.producers.iter().map(|(pid, e)| (*pid, e.clone())).collect();
                let _ = reply.send(Ok(producers));
            }
            Command::Stop { .. } => unreachable!("handled by run"),
            Command::Fence(_) | Command::SetConfig(_) | Command::Own { .. } | Command::Disown { .. } => {
                unreachable!("handled before the log is opened")
            }
        }
    }

    async fn stop(&mut self, delete: bool) {
        self.cut_pending().await;
        if let Some(log) = self.log.as_mut()
            && log.sync().await.is_ok()
            && !delete
        {
            // A clean stop leaves a snapshot at the log end: the next start scans nothing.
            self.write_snapshot().await;
        }
        self.log = None;
        if delete {
            use crate::env::Volume;
            if let Err(e) = self.env.volume().remove_dir_all(&self.dir).await {
                tracing::error!(dir = %self.dir, error = %e, "cannot remove partition directory");
            }
        }
    }
}

/// Whether transactional batches must be verified with the coordinator (KIP-890 part 1):
/// always, but for the simulation mutant that turns verification off.
pub fn verification_required() -> bool {
    !crate::mutant!(NoPartitionVerification)
}

/// May a transactional batch be appended? Yes if its producer's transaction is already open
/// here at its epoch; otherwise only with a guard from a verification after which no marker for
/// the producer was written.
fn verify(
    producers: &ProducerStates,
    last_marker: &BTreeMap<i64, u64>,
    reopened_at: u64,
    header: &BatchHeader,
    verified: Option<u64>,
) -> CoreResult<()> {
    let producer_id = header.producer_id;
    if producers.ongoing_epoch(producer_id) == Some(header.producer_epoch) || !verification_required() {
        return Ok(());
    }
    match verified {
        // The log was reopened since: the markers the guard would be checked against may be
        // forgotten. Retriable: the producer's retry is verified afresh.
        Some(guard) if guard < reopened_at => Err(CoreError::NotEnoughReplicas),
        Some(guard) if last_marker.get(&producer_id).is_none_or(|&m| m <= guard) => Ok(()),
        _ => Err(CoreError::InvalidTxnState),
    }
}

/// The watermarks readers may be told. A transaction is stable only once its marker is
/// durable: those in `unsynced_ends` still hold the last stable offset at their first offset.
fn watermarks_of<V: crate::env::Volume>(
    log: &PartitionLog<V>,
    producers: &ProducerStates,
    unsynced_ends: &[(i64, i64)],
) -> Watermarks {
    let high_watermark = log.high_watermark();
    let ending = unsynced_ends.iter().filter(|&&(marker, _)| marker >= high_watermark).map(|&(_, first)| first);
    let first_unstable = producers.first_unstable_offset().into_iter().chain(ending).min().unwrap_or(i64::MAX);
    // Records below the log start offset are gone (DeleteRecords may pass an open transaction,
    // as in Apache): the last stable offset is never below it, or readers could not reach it.
    let last_stable_offset = if crate::mutant!(LsoNotClamped) {
        high_watermark
    } else {
        first_unstable.min(high_watermark).max(log.log_start_offset())
    };
    assert!(log.log_start_offset() <= last_stable_offset, "the last stable offset is a readable offset");
    assert!(last_stable_offset <= high_watermark, "the last stable offset is at most the high watermark");
    Watermarks {
        log_start_offset: log.log_start_offset(),
        high_watermark,
        last_stable_offset,
        log_end_offset: log.log_end_offset(),
        online: true,
        leader_epoch: 0,
        owned: true,
    }
}

fn reply_with(command: Command, error: CoreError) {
    let error = || error.clone();
    match command {
        Command::Append { reply: Some(reply), .. } => drop(reply.send(Err(error()))),
        Command::WriteMarker { reply, .. } => drop(reply.send(Err(error()))),
        Command::Read { reply, .. } => drop(reply.send(Err(error()))),
        Command::OffsetForTime { reply, .. } => drop(reply.send(Err(error()))),
        Command::DeleteRecords { reply, .. } => drop(reply.send(Err(error()))),
        Command::DescribeProducers { reply } => drop(reply.send(Err(error()))),
        Command::SizeBytes { reply } => drop(reply.send(Err(error()))),
        Command::MaxTimestamp { reply } => drop(reply.send(-1)),
        Command::EpochEnd { reply, .. } => drop(reply.send(Err(error()))),
        Command::Append { reply: None, .. }
        | Command::Fence(_)
        | Command::SetConfig(_)
        | Command::EnforceRetention
        | Command::Stop { .. } => {}
        Command::Own { reply, .. } => drop(reply.send(Err(error()))),
        Command::Disown { reply } => drop(reply.send(())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Env;
    use crate::env::real::{RealEnv, RealRng};
    use crate::log::batch::tests::make_producer_batch;

    async fn produce(partition: &PartitionHandle, batch: Bytes) -> CoreResult<i64> {
        let header = crate::log::batch::check(&batch).expect("a valid batch");
        partition.append(vec![(header, batch)], None).await.await.expect("answered").map(|o| o.base_offset)
    }

    /// Retries are recognised across a restart, whether the original lies before the snapshot
    /// taken at a segment roll, after it (found by the tail scan), or in a closed segment.
    #[tokio::test]
    async fn producer_state_survives_a_restart_through_snapshot_and_tail_scan() {
        let dir =
            std::env::temp_dir().join(format!("kaas-partition-{:x}", crate::env::Rng::next_u64(&RealRng::default())));
        let env = RealEnv::new(&dir);
        let settings = PartitionSettings {
            log: LogConfig { segment_bytes: 400, ..LogConfig::default() },
            max_message_bytes: 1 << 20,
            producer_id_expiration_ms: 86_400_000,
        };
        let (pid, now) = (1 << 40, 1_767_225_600_000);
        let batch = |seq: i32| make_producer_batch(5, now, pid, 0, seq);
        let (data_version, _) = watch::channel(0);
        let view = ClusterView::standalone(0, crate::env::Clock::monotonic(env.clock()));
        let (_cluster, cluster_rx) = watch::channel(Arc::new(view));
        let solo = |epoch| Claimed { epoch, takeover: true };
        let partition = start(&env, "t-0".into(), [7; 16], settings, data_version.clone(), cluster_rx.clone()).await;
        partition.own(solo(1), 0).await.unwrap();
        let mut offsets = Vec::new();
        for i in 0..12 {
            offsets.push(produce(&partition, batch(i * 5)).await.unwrap());
        }
        assert_eq!(produce(&partition, batch(55)).await.unwrap(), offsets[11], "a retry within the window");
        assert_eq!(produce(&partition, batch(30)).await, Err(CoreError::OutOfOrderSequenceNumber), "older than 5");
        assert_eq!(produce(&partition, batch(65)).await, Err(CoreError::OutOfOrderSequenceNumber), "a gap");
        let other = make_producer_batch(1, now, pid + 1, 0, 3);
        assert_eq!(produce(&partition, other).await, Err(CoreError::UnknownProducerId));
        // No clean stop: the state comes back from the roll's snapshot and the tail after it.
        drop(partition);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let names = crate::env::Volume::list(crate::env::Env::volume(&env), "t-0").await.unwrap();
        let snapshots = names.iter().filter(|n| n.ends_with(".snapshot"));
        assert!(snapshots.count() >= 1, "segment rolls wrote snapshots");
        let partition = start(&env, "t-0".into(), [7; 16], settings, data_version, cluster_rx).await;
        partition.own(solo(2), 0).await.unwrap();
        let end = partition.watermarks().log_end_offset;
        assert_eq!(produce(&partition, batch(55)).await.unwrap(), offsets[11]);
        assert_eq!(produce(&partition, batch(35)).await.unwrap(), offsets[7]);
        assert_eq!(partition.watermarks().log_end_offset, end, "retries wrote nothing");
        assert_eq!(
            produce(&partition, make_producer_batch(5, now, pid, 1, 3)).await,
            Err(CoreError::OutOfOrderSequenceNumber),
            "a new epoch starts at 0"
        );
        assert_eq!(produce(&partition, make_producer_batch(5, now, pid, 1, 0)).await.unwrap(), end);
        assert_eq!(produce(&partition, batch(60)).await, Err(CoreError::InvalidProducerEpoch));
        let described = partition.describe_producers().await.unwrap();
        assert_eq!(described.len(), 1);
        assert_eq!((described[0].0, described[0].1.producer_epoch, described[0].1.last_seq()), (pid, 1, Some(4)));
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }
}
