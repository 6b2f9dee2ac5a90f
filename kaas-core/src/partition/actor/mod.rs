//! The partition actor's body: its mailbox loop, the group commit (every queued append
//! written, one sync, then every ack), the log's opening, failure and recovery, and ownership
//! (serving under a claimed epoch while the lease lasts). What may be written is the pure
//! state's to say (`state.rs`); this file does the I/O.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

mod clean;
mod share;

use super::state::{self, Admit, LogEnds, PartitionState};
use super::{AppendOutcome, Command, EpochEnd, Isolation, PartitionHandle, ReadOutcome, TxnView, Watermarks};
use crate::cluster::{Claimed, ClusterView};
use crate::config::{PartitionSettings, RecordPolicy};
use crate::env::{Clock, Env, Rng, Spawner};
use crate::error::{CoreError, CoreResult};
use crate::partition::log::batch::BatchHeader;
use crate::partition::log::control::{self, Marker};
use crate::partition::log::{DurableEnd, LogConfig, PartitionLog, cut_to_durable, validate};
use crate::partition::producer::snapshot;

/// Commands queued per partition before senders wait.
const QUEUE_CAPACITY: usize = 1024;
/// How often a partition whose log could not be opened tries again by itself.
const REOPEN_RETRY_MS: u64 = 500;
/// Commands handled between two syncs at most, so acks are never starved by a busy queue.
const GROUP_COMMIT_MAX: usize = 512;

pub(super) struct PartitionActor<E: Env> {
    env: E,
    /// The topic and partition, as the dead-letter writer names the source (KIP-1191).
    key: (String, i32),
    dir: String,
    config: LogConfig,
    /// None while the log could not be opened; every request then gets a storage error and the
    /// next one retries the open.
    log: Option<PartitionLog<E::Volume>>,
    watermarks: watch::Sender<Watermarks>,
    txn_view: watch::Sender<TxnView>,
    /// Bumped whenever any partition's high watermark moves: long-polling fetches wait on it.
    data_version: watch::Sender<u64>,
    max_message_bytes: usize,
    /// What the partition checks in (and stamps on) a producer's records.
    records: RecordPolicy,
    producer_id_expiration_ms: i64,
    /// The transactional bookkeeping: producer state (rebuilt whenever the log is (re)opened),
    /// fences, the end guard and the ends not yet durable.
    state: PartitionState,
    /// Segments the log had when the last snapshot was written: more means a roll since.
    segments_at_snapshot: usize,
    /// Set by a failed write or sync: the log must be cut back to this before it is reopened,
    /// since the bytes after it may read back fine and still be gone after a crash.
    cut_before_open: Option<DurableEnd>,
    /// The epoch and lease session this broker serves the partition under; `None`: it does not.
    owned: Option<Owned>,
    /// The membership's view: an ack is sent only while the lease of `owned.session` is valid.
    cluster: watch::Receiver<Arc<ClusterView>>,
    /// The id of the topic this partition belongs to, and whether its directory was checked to
    /// be this topic's (`adopt_dir`).
    topic_id: [u8; 16],
    adopted: bool,
    /// The share partitions of the groups consuming this partition (`share`).
    shares: share::Shares,
    /// Their transactions' ends (KIP-1289), per (group, producer id): the staging guard.
    share_ends: crate::participant::EndGuard<(String, i64)>,
    /// Share answers waiting for the group commit's writes.
    share_replies: Vec<share::ShareReply>,
    /// Groups whose last write failed: what the volume shows of them may not be durable (a
    /// failed fsync can leave a rename visible that a crash takes back), so what is read is
    /// written again before anything is answered from it.
    shares_unsure: std::collections::BTreeSet<String>,
    /// The broker's dead-letter writer (KIP-1191).
    dead_letters: crate::partition::share::DeadLetterSender,
    /// Sync durations and group commit sizes, for operators.
    log_metrics: Arc<crate::metrics::LogMetrics>,
    /// The broker's log cleaner settings, and this log's cleaning (`clean`).
    cleaner: crate::config::CleanerConfig,
    cleaning: clean::Cleaning<E::Volume>,
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
    key: (String, i32),
    dir: String,
    topic_id: [u8; 16],
    settings: PartitionSettings,
    links: super::Links,
) -> PartitionHandle {
    let super::Links { data_version, cluster, dead_letters, log_metrics, cleaner_slots } = links;
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let (watermarks, watermarks_rx) = watch::channel(Watermarks::default());
    let (txn_view, txn_view_rx) = watch::channel(TxnView::default());
    let mut actor = PartitionActor {
        env: env.clone(),
        key,
        dir,
        config: settings.log,
        log: None,
        watermarks,
        txn_view,
        data_version,
        max_message_bytes: settings.max_message_bytes,
        records: settings.records,
        producer_id_expiration_ms: settings.producer_id_expiration_ms,
        state: PartitionState::default(),
        segments_at_snapshot: 0,
        cut_before_open: None,
        owned: None,
        cluster,
        topic_id,
        adopted: false,
        shares: share::Shares::new(),
        share_ends: crate::participant::EndGuard::default(),
        share_replies: Vec::new(),
        shares_unsure: Default::default(),
        dead_letters,
        log_metrics,
        cleaner: settings.cleaner,
        cleaning: clean::Cleaning::new(cleaner_slots),
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
                    self.cleaning.reset();
                    self.state.apply(state::Event::Opened { producers });
                    self.log = Some(log);
                    self.load_checkpoint().await;
                    self.publish();
                }
                Err(e) => tracing::error!(dir = %self.dir, error = %e, "cannot open partition log"),
            }
        }
        self.log.as_mut()
    }

    /// The watermarks of the open log, as readers may be told them.
    fn watermarks_now(&self) -> Option<Watermarks> {
        let log = self.log.as_ref()?;
        let ends = LogEnds {
            log_start_offset: log.log_start_offset(),
            high_watermark: log.high_watermark(),
            log_end_offset: log.log_end_offset(),
        };
        let mut now = self.state.watermarks(ends, self.owned.map_or(0, |o| o.claimed.epoch as i32));
        now.owned = self.owned.is_some();
        Some(now)
    }

    fn publish(&mut self) {
        let Some(log) = &self.log else { return };
        self.state.apply(state::Event::HighWatermark(log.high_watermark()));
        let now = self.watermarks_now().expect("the log is open");
        let before = *self.watermarks.borrow();
        self.state.check_invariants(&now);
        assert!(
            now.high_watermark >= before.high_watermark || now.leader_epoch != before.leader_epoch,
            "the high watermark never moves back within an ownership epoch"
        );
        assert!(
            now.last_stable_offset >= before.last_stable_offset || !before.online,
            "the last stable offset never moves back"
        );
        let view = self.state.txn_view();
        self.txn_view.send_if_modified(|published| {
            let changed = published.markers_written != view.markers_written || *published.ongoing != *view.ongoing;
            if changed {
                *published = view;
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

    /// The actor's own timer: a log to open again, acquisition locks run out, a cleaner's turn.
    async fn on_wake(&mut self, acks: &mut Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)>) {
        if self.log.is_none() && self.owned.is_some() {
            self.ensure_open().await;
        }
        self.expire_shares(self.env.clock().now_ms());
        // What ran out is written now: a describe, a successor, must see it.
        if self.share_work() {
            self.finish_group(acks).await;
        }
        self.clean_turn().await;
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let mut acks: Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)> = Vec::new();
        loop {
            // A log that could not be opened is tried again on the next command, and on its
            // own now and then: readers of the published watermarks (ListOffsets) send none.
            // Share partitions' acquisition locks run out on this actor's timer too.
            let reopen = (self.log.is_none() && self.owned.is_some()).then_some(REOPEN_RETRY_MS);
            let now_ms = self.env.clock().now_ms();
            let expiry = self.next_share_expiry_ms().map(|at| at.saturating_sub(now_ms).max(0) as u64);
            // The log cleaner's next turn.
            let clean = self.next_clean_ms().map(|at| at.saturating_sub(now_ms).max(0) as u64);
            let wake_ms = reopen.into_iter().chain(expiry).chain(clean).min();
            let command = match wake_ms {
                // A cleaning pass between its buffers, due now: a timer would round up to the
                // next millisecond, a wait per buffer. Commands first, then a yield, so the
                // other tasks run between turns as they would around a timer. (Only the
                // cleaner: every turn moves its pass on or puts its next look off.)
                Some(0) if clean == Some(0) => match rx.try_recv() {
                    Ok(command) => Some(command),
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        tokio::task::yield_now().await;
                        self.on_wake(&mut acks).await;
                        continue;
                    }
                },
                Some(wake_ms) => tokio::select! {
                    biased;
                    command = rx.recv() => command,
                    _ = self.env.clock().sleep_ms(wake_ms) => {
                        self.on_wake(&mut acks).await;
                        continue;
                    }
                },
                None => rx.recv().await,
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
            // A turn of the cleaner between groups when one is due, so a busy mailbox does
            // not starve it.
            self.clean_turn().await;
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
        if self.share_work() {
            self.finish_shares().await;
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
        let started = self.env.clock().monotonic();
        let synced = log.sync().await;
        self.log_metrics
            .flush
            .observe(self.env.clock().monotonic().saturating_duration_since(started).as_micros() as u64);
        if !acks.is_empty() {
            self.log_metrics.group_commit.observe(acks.len() as u64);
        }
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
        match snapshot::write(self.env.volume(), &self.dir, offset, epoch, self.state.producers()).await {
            Ok(()) => {
                self.segments_at_snapshot = segments;
                self.state.apply(state::Event::SnapshotWritten);
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
        self.drop_log();
        // At once, not at the reopen: a process that exits first must not leave the bytes of
        // a failed sync for the next one to read back and trust.
        self.cut_pending().await;
    }

    /// Closes the log after a failure: it is read again from the volume at the next command
    /// (or the reopen timer), and serves nothing meanwhile.
    fn drop_log(&mut self) {
        self.log = None;
        self.state.apply(state::Event::Failed);
        self.watermarks.send_modify(|w| w.online = false);
    }

    /// Cuts the log back to its durable end if a failure left a cut pending.
    async fn cut_pending(&mut self) {
        let Some(end) = self.cut_before_open else { return };
        match cut_to_durable(self.env.volume(), &self.dir, end).await {
            Ok(()) => self.cut_before_open = None,
            Err(e) => tracing::error!(dir = %self.dir, error = %e, "cannot cut the log to its durable end; will retry"),
        }
    }

    /// A produce's batches, checked against the topic's record policy (and stamped with `now_ms`
    /// on a LogAppendTime topic), each checked by the state before it is written; answered (with
    /// the first batch's offset) once the group commit's sync is done.
    async fn append(
        &mut self,
        batches: Vec<(BatchHeader, Bytes)>,
        verified: Option<u64>,
        now_ms: i64,
        reply: Option<oneshot::Sender<CoreResult<AppendOutcome>>>,
        acks: &mut Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)>,
    ) {
        if batches.iter().any(|(h, _)| h.total_len() > self.max_message_bytes) {
            if let Some(reply) = reply {
                let _ = reply.send(Err(CoreError::MessageTooLarge));
            }
            return;
        }
        let batches = match validate::validate(&self.records, &self.dir, batches, now_ms) {
            Ok(batches) => batches,
            Err(refused) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(refused));
                }
                return;
            }
        };
        let log_append_time_ms = if self.records.log_append_time { now_ms } else { -1 };
        let mut base_offset = None;
        for (header, data) in batches {
            if header.producer_id >= 0 {
                let refused = match self.state.check_append(&header, verified) {
                    Admit::Append => None,
                    Admit::Duplicate { base_offset: original } => {
                        tracing::trace!(dir = %self.dir, original, pid = header.producer_id, seq = header.base_sequence, "duplicate");
                        // Answered once durable, like the appends of this group: the
                        // original may still be one of them.
                        base_offset.get_or_insert(original);
                        continue;
                    }
                    Admit::Refuse(error) => Some(error),
                };
                if let Some(error) = refused {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(error));
                    }
                    return;
                }
            }
            match self.log.as_mut().expect("opened").append(&header, data).await {
                Ok(offset) => {
                    tracing::trace!(dir = %self.dir, offset, pid = header.producer_id, seq = header.base_sequence, "appended");
                    self.state.apply(state::Event::Appended { header: &header, base_offset: offset });
                    base_offset.get_or_insert(offset);
                }
                Err(e) => {
                    if let Some(reply) = reply {
                        acks.push((reply, AppendOutcome::at(-1)));
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
            acks.push((reply, AppendOutcome { base_offset, log_append_time_ms, ..AppendOutcome::at(-1) }));
        }
    }

    /// A transaction's marker for one producer, refused if it comes from a fenced epoch;
    /// answered once the group commit's sync is done.
    async fn write_marker(
        &mut self,
        (producer_id, producer_epoch, marker, coordinator_epoch): (i64, i16, Marker, i32),
        now_ms: i64,
        reply: oneshot::Sender<CoreResult<AppendOutcome>>,
        acks: &mut Vec<(oneshot::Sender<CoreResult<AppendOutcome>>, AppendOutcome)>,
    ) {
        if let Err(e) = self.state.check_marker(producer_id, producer_epoch) {
            let _ = reply.send(Err(e));
            return;
        }
        let batch = control::marker_batch(producer_id, producer_epoch, marker, coordinator_epoch, now_ms);
        let header = crate::partition::log::batch::check(&batch).expect("a marker is a valid batch");
        match self.log.as_mut().expect("opened").append(&header, batch).await {
            Ok(offset) => {
                self.state.apply(state::Event::MarkerWritten { producer_id, producer_epoch, marker, offset });
                acks.push((reply, AppendOutcome::at(offset)));
            }
            Err(e) => {
                acks.push((reply, AppendOutcome::at(-1)));
                let mut failed = std::mem::take(acks);
                self.fail_writes(&mut failed, &e.to_string()).await;
            }
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
                self.state.apply(state::Event::Fenced(&epochs));
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
                self.forget_shares();
                self.owned = Some(Owned { claimed, session });
                // A new epoch starts from what the files say: an old epoch's watermarks (a
                // zombie's, perhaps past what it acked) are no baseline for it.
                self.watermarks.send_replace(Watermarks {
                    owned: true,
                    leader_epoch: claimed.epoch as i32,
                    ..Watermarks::default()
                });
                let opened = self.ensure_open().await.is_some();
                if opened {
                    self.take_over_shares().await;
                }
                let _ = reply.send(if opened { Ok(()) } else { Err(CoreError::Storage("cannot open the log".into())) });
                return;
            }
            Command::Disown { reply } => {
                tracing::debug!(dir = %self.dir, owned = ?self.owned, "disown");
                self.finish_group(acks).await;
                self.stop(false).await;
                self.forget_shares();
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
                self.records = settings.records;
                self.producer_id_expiration_ms = settings.producer_id_expiration_ms;
                self.cleaner = settings.cleaner;
                return;
            }
            command => command,
        };
        let now_ms = self.env.clock().now_ms();
        let zombie_shares = crate::mutant!(ShareZombieOwnerAcks) && matches!(command, Command::Share(_));
        if !self.lease_ok() && !zombie_shares {
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
            Command::Append { batches, verified, reply } => self.append(batches, verified, now_ms, reply, acks).await,
            Command::WriteMarker { producer_id, producer_epoch, marker, coordinator_epoch, reply } => {
                let marker = (producer_id, producer_epoch, marker, coordinator_epoch);
                self.write_marker(marker, now_ms, reply, acks).await;
            }
            Command::Share(command) => self.handle_share(command).await,
            Command::Read { offset, max_bytes, isolation, reply } => {
                // A short read still holds a whole batch: consumers must cope with any split.
                let max_bytes = if crate::buggify!("partition.short_read") { 1 } else { max_bytes };
                let watermarks = self.watermarks_now().expect("the log is open");
                let log = self.log.as_mut().expect("opened");
                let (upper, aborted) = match isolation {
                    Isolation::ReadUncommitted => (None, Vec::new()),
                    Isolation::ReadCommitted => {
                        let lso = watermarks.last_stable_offset;
                        (Some(lso), self.state.aborted_between(offset, lso))
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
                self.state.apply(state::Event::LogStartMoved { log_start_offset: log.log_start_offset() });
                self.publish();
                let _ = reply.send(result);
            }
            Command::EnforceRetention => {
                let stable_end = self.watermarks_now().expect("the log is open").last_stable_offset;
                let log = self.log.as_mut().expect("opened");
                if let Err(e) = log.enforce_retention(now_ms, stable_end).await {
                    tracing::warn!(dir = %self.dir, error = %e, "retention failed");
                }
                self.state.apply(state::Event::LogStartMoved { log_start_offset: log.log_start_offset() });
                let expiration_ms = self.producer_id_expiration_ms;
                self.state.apply(state::Event::Expire { now_ms, expiration_ms });
                self.publish();
            }
            Command::SizeBytes { reply } => {
                let _ = reply.send(Ok(log.size_bytes()));
            }
            Command::DescribeProducers { reply } => {
                let _ = reply.send(Ok(self.state.describe_producers()));
            }
            Command::Stop { .. } => unreachable!("handled by run"),
            Command::Fence(_) | Command::SetConfig(_) | Command::Own { .. } | Command::Disown { .. } => {
                unreachable!("handled before the log is opened")
            }
        }
    }

    async fn stop(&mut self, delete: bool) {
        self.end_pass().await;
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
        Command::Share(command) => command.refuse(error()),
    }
}
