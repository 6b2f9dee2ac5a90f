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

use crate::cluster::Claimed;
use crate::config::PartitionSettings;

mod actor;
pub mod cleaner_slots;
pub mod log;
pub mod producer;
pub mod share;
pub mod state;

pub use actor::{adopt_dir, start};
pub use cleaner_slots::CleanerSlots;

/// What a partition actor shares with the rest of its broker: the data version it bumps when
/// its high watermark moves (long polls wait on it), the cluster's view, and the dead-letter
/// writer its share partitions hand records to (KIP-1191).
pub struct Links {
    pub data_version: watch::Sender<u64>,
    pub cluster: watch::Receiver<Arc<crate::cluster::ClusterView>>,
    pub dead_letters: share::DeadLetterSender,
    /// The syncs' and group commits' histograms.
    pub log_metrics: Arc<crate::metrics::LogMetrics>,
    /// The broker's cleaning passes at once (`log.cleaner.threads`).
    pub cleaner_slots: CleanerSlots,
}

use crate::error::{CoreError, CoreResult};
use crate::partition::log::batch::BatchHeader;
use crate::partition::log::control::Marker;
use crate::partition::log::records::TimestampAndOffset;
use crate::partition::producer::state::{AbortedTxn, ProducerEntry};
pub use state::verification_required;

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
    /// The broker's time the batches were stamped with (a LogAppendTime topic), else -1.
    pub log_append_time_ms: i64,
}

impl AppendOutcome {
    /// Appended at `base_offset` (-1: not, or not known), nothing else said yet.
    pub fn at(base_offset: i64) -> AppendOutcome {
        AppendOutcome { base_offset, log_start_offset: -1, log_append_time_ms: -1 }
    }
}

pub(super) enum Command {
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
    /// A request about one of the partition's share partitions (KIP-932).
    Share(share::ShareCommand),
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

    /// Sends a request about one of the partition's share partitions; its reply comes on the
    /// channel the command carries (refused, NOT_LEADER_OR_FOLLOWER-like, if the actor is gone).
    pub async fn share(&self, command: share::ShareCommand) {
        if let Err(mpsc::error::SendError(Command::Share(command))) = self.tx.send(Command::Share(command)).await {
            command.refuse(stopped());
        }
    }

    /// Syncs and stops the actor; with `delete`, its files are removed too.
    pub async fn stop(&self, delete: bool) {
        self.ask(|reply| Command::Stop { delete, reply }).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterView;
    use crate::env::Env;
    use crate::env::real::{RealEnv, RealRng};
    use crate::partition::log::LogConfig;
    use crate::partition::log::batch::tests::make_producer_batch;

    async fn produce(partition: &PartitionHandle, batch: Bytes) -> CoreResult<i64> {
        let header = crate::partition::log::batch::check(&batch).expect("a valid batch");
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
            records: crate::config::RecordPolicy::default(),
            producer_id_expiration_ms: 86_400_000,
            cleaner: Default::default(),
        };
        let (pid, now) = (1 << 40, 1_767_225_600_000);
        let batch = |seq: i32| make_producer_batch(5, now, pid, 0, seq);
        let (data_version, _) = watch::channel(0);
        let view = ClusterView::standalone(0, crate::env::Clock::monotonic(env.clock()));
        let (_cluster, cluster_rx) = watch::channel(Arc::new(view));
        let solo = |epoch| Claimed { epoch, takeover: true };
        let (dead_letters, _) = mpsc::unbounded_channel();
        let links = |data_version, cluster| Links {
            data_version,
            cluster,
            dead_letters: dead_letters.clone(),
            log_metrics: Default::default(),
            cleaner_slots: Default::default(),
        };
        let key = || ("t".to_string(), 0);
        let partition =
            start(&env, key(), "t-0".into(), [7; 16], settings, links(data_version.clone(), cluster_rx.clone())).await;
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
        let partition = start(&env, key(), "t-0".into(), [7; 16], settings, links(data_version, cluster_rx)).await;
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

    /// One keyed record, `key` = `value` (a tombstone for `None`), outside any producer's state.
    fn keyed(key: &str, value: Option<&str>, timestamp: i64) -> Bytes {
        use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
        let record = Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp,
            key: Some(Bytes::from(key.to_string())),
            value: value.map(|v| Bytes::from(v.to_string())),
            headers: Default::default(),
            delete_horizon: false,
        };
        let mut buf = bytes::BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(&mut buf, &[record], &options).unwrap();
        buf.freeze()
    }

    /// Every record from offset 0: (offset, key, value).
    async fn read_all(partition: &PartitionHandle) -> Vec<(i64, String, Option<String>)> {
        use kafka_protocol::records::RecordBatchDecoder;
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let read = partition.read(offset, 1 << 20, Isolation::ReadUncommitted).await.unwrap();
            if read.records.is_empty() {
                return out;
            }
            let mut raw = read.records.clone();
            while !raw.is_empty() {
                let set = RecordBatchDecoder::decode(&mut raw).unwrap();
                for r in set.records {
                    let text = |b: Option<Bytes>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                    offset = r.offset + 1;
                    out.push((r.offset, text(r.key).unwrap(), text(r.value)));
                }
            }
        }
    }

    /// A compacted partition is cleaned by its owner while it serves: each key's last value
    /// stays at its offset, older values go, the active segment is untouched, and what a
    /// reopened log reads is the same.
    #[tokio::test]
    async fn a_compacted_partition_keeps_each_keys_last_value() {
        compacted_partition_keeps_each_keys_last_value(crate::config::CleanerConfig::default()).await;
    }

    /// The same with a read buffer smaller than a batch: a pass reads one batch a turn, and a
    /// segment's copy starts midway, after the batches that stay unchanged.
    #[tokio::test]
    async fn a_compacted_partition_is_cleaned_a_batch_at_a_time() {
        let cleaner = crate::config::CleanerConfig { io_buffer_bytes: 2, threads: 1, ..Default::default() };
        assert!(cleaner.read_bytes() < 2 * 73, "a read holds one 73-byte batch");
        compacted_partition_keeps_each_keys_last_value(cleaner).await;
    }

    async fn compacted_partition_keeps_each_keys_last_value(cleaner: crate::config::CleanerConfig) {
        let dir = std::env::temp_dir().join(format!("kaas-clean-{:x}", crate::env::Rng::next_u64(&RealRng::default())));
        let env = RealEnv::new(&dir);
        let log = LogConfig {
            segment_bytes: 300,
            cleanup: crate::config::CleanupPolicy { delete: false, compact: true },
            compaction: crate::config::Compaction { min_cleanable_dirty_ratio: 0.0, ..Default::default() },
            retention_ms: 1,
            ..LogConfig::default()
        };
        let cleaner = crate::config::CleanerConfig { backoff_ms: 5, ..cleaner };
        let settings = PartitionSettings {
            log,
            max_message_bytes: 1 << 20,
            records: crate::config::RecordPolicy { compacted: true, ..Default::default() },
            producer_id_expiration_ms: 86_400_000,
            cleaner,
        };
        let (data_version, _) = watch::channel(0);
        let view = ClusterView::standalone(0, crate::env::Clock::monotonic(env.clock()));
        let (_cluster, cluster_rx) = watch::channel(Arc::new(view));
        let (dead_letters, _) = mpsc::unbounded_channel();
        let links = |data_version, cluster| Links {
            data_version,
            cluster,
            dead_letters: dead_letters.clone(),
            log_metrics: Default::default(),
            cleaner_slots: Default::default(),
        };
        let key = || ("c".to_string(), 0);
        let partition =
            start(&env, key(), "c-0".into(), [8; 16], settings, links(data_version.clone(), cluster_rx.clone())).await;
        partition.own(Claimed { epoch: 1, takeover: false }, 0).await.unwrap();
        let now = crate::env::Clock::now_ms(env.clock());
        let (mut last, mut written) = (BTreeMap::new(), Vec::new());
        for i in 0..60 {
            let (k, v) = (format!("k{}", i % 5), format!("v{i}"));
            // The cleaner runs meanwhile: between appends, when a turn is due.
            let offset = produce(&partition, keyed(&k, Some(&v), now)).await.unwrap();
            assert_eq!(offset, i as i64);
            written.push((offset, k.clone(), Some(v.clone())));
            last.insert(k, (offset, v));
        }
        // What a caught-up cleaner leaves with the active segment at `active`: below it, each
        // key's last record below it (a newer value in the active segment is not yet seen);
        // the active segment whole.
        let model = |active: i64| -> Vec<(i64, String, Option<String>)> {
            let below = written.iter().filter(|r| r.0 < active);
            let last_below: BTreeMap<_, _> = below.map(|r| (r.1.clone(), r.0)).collect();
            written.iter().filter(|r| r.0 >= active || last_below[&r.1] == r.0).cloned().collect()
        };
        // Four 73-byte batches fill a 300-byte segment: the active one starts at 56.
        let caught_up = |kept: &Vec<_>| model(56) == *kept;
        let mut kept = Vec::new();
        for _ in 0..300 {
            kept = read_all(&partition).await;
            // Every record kept is the one written at its offset, and each key's last is there.
            for record in &kept {
                assert_eq!(&written[record.0 as usize], record, "a kept record is unchanged at its offset");
            }
            for (k, (offset, v)) in &last {
                assert!(kept.contains(&(*offset, k.clone(), Some(v.clone()))), "{k}'s last value {v} at {offset}");
            }
            if caught_up(&kept) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(caught_up(&kept), "cleaned down to each key's last value below the active segment: {kept:?}");
        assert_eq!(kept.len(), 9, "offsets 51..=54 stay: their keys' newer values are in the active segment");
        // Retention does not apply to a compact-only topic, however short.
        partition.enforce_retention().await;
        assert_eq!(partition.watermarks().log_start_offset, 0);
        // Reopened (no clean stop) by a new owner: the log reads the same, and once the old
        // active segment is closed (a take-over rolls) it is cleaned too.
        drop(partition);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let partition = start(&env, key(), "c-0".into(), [8; 16], settings, links(data_version, cluster_rx)).await;
        partition.own(Claimed { epoch: 2, takeover: true }, 0).await.unwrap();
        let mut again = Vec::new();
        for _ in 0..300 {
            again = read_all(&partition).await;
            assert!(again.iter().all(|r| kept.contains(r)), "nothing comes back: {again:?}");
            if again == model(60) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(again, written[55..]);
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }

    /// A ShareFetch is sent the batches it acquired records of, not the read around them, and
    /// an acquisition reads on, across segments, until its records are taken.
    #[tokio::test]
    async fn share_acquire_sends_only_the_batches_it_acquired() {
        use crate::partition::share::state::{AcquireMode, ShareSettings};
        use crate::partition::share::{AutoOffsetReset, ShareCommand, ShareFetched, ShareGroupConfig};
        let dir = std::env::temp_dir().join(format!("kaas-share-{:x}", crate::env::Rng::next_u64(&RealRng::default())));
        let env = RealEnv::new(&dir);
        let settings = PartitionSettings {
            log: LogConfig { segment_bytes: 2000, ..LogConfig::default() },
            max_message_bytes: 1 << 20,
            records: crate::config::RecordPolicy::default(),
            producer_id_expiration_ms: 86_400_000,
            cleaner: Default::default(),
        };
        let (data_version, _) = watch::channel(0);
        let view = ClusterView::standalone(0, crate::env::Clock::monotonic(env.clock()));
        let (_cluster, cluster) = watch::channel(Arc::new(view));
        let (dead_letters, _) = mpsc::unbounded_channel();
        let links = Links {
            data_version,
            cluster,
            dead_letters,
            log_metrics: Default::default(),
            cleaner_slots: Default::default(),
        };
        let partition = start(&env, ("t".to_string(), 0), "t-0".into(), [7; 16], settings, links).await;
        partition.own(Claimed { epoch: 1, takeover: true }, 0).await.unwrap();
        let batch = crate::partition::log::batch::tests::make_batch(0, 5, 1_767_225_600_000);
        for _ in 0..40 {
            produce(&partition, batch.clone()).await.unwrap();
        }
        let window = ShareSettings {
            lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            max_in_flight: 2000,
            dead_letter: false,
        };
        let config = ShareGroupConfig { window, read_committed: false, auto_offset_reset: AutoOffsetReset::Earliest };
        let acquire = |max_records: usize, mode: AcquireMode| {
            let partition = partition.clone();
            async move {
                let (reply, answered) = tokio::sync::oneshot::channel();
                let (group_id, member_id) = ("g".to_string(), "m".to_string());
                let max_bytes = 1 << 20;
                partition
                    .share(ShareCommand::Acquire { group_id, member_id, config, max_records, max_bytes, mode, reply })
                    .await;
                answered.await.expect("answered").expect("acquired")
            }
        };
        let offsets = |fetched: &ShareFetched| {
            let mut at = 0;
            let mut batches = Vec::new();
            while at < fetched.records.len() {
                let header = BatchHeader::parse(&fetched.records[at..]).expect("whole batches");
                batches.push((header.base_offset, header.last_offset()));
                at += header.total_len();
            }
            let acquired: Vec<(i64, i64)> = fetched.acquired.iter().map(|r| (r.first_offset, r.last_offset)).collect();
            (batches, acquired)
        };
        let first = acquire(3, AcquireMode::BatchOptimized).await;
        assert_eq!(offsets(&first), (vec![(0, 4)], vec![(0, 4)]), "one whole batch, not the segment");
        let second = acquire(7, AcquireMode::RecordLimit).await;
        assert_eq!(offsets(&second), (vec![(5, 9), (10, 14)], vec![(5, 11)]), "the batches holding 5..=11");
        // 2000-byte segments hold a few batches each: 150 records are read from many of them.
        let third = acquire(150, AcquireMode::BatchOptimized).await;
        let (batches, acquired) = offsets(&third);
        assert_eq!(acquired, vec![(12, 164)], "one range, to the end of the batch holding the 150th");
        assert_eq!((batches[0].0, batches.last().unwrap().1), (10, 164));
        assert!(batches.windows(2).all(|w| w[0].1 + 1 == w[1].0), "contiguous, across segments");
        assert_eq!(offsets(&acquire(500, AcquireMode::BatchOptimized).await).1, vec![(165, 199)], "to the end");
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }
}
