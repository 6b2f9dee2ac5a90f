//! The partition actor's share partitions (KIP-932): one in-flight window per share group that
//! consumes the partition, loaded from the volume on its first request under this ownership
//! epoch (or started at `share.auto.offset.reset`), changed by the pure state of
//! `partition::share::state`, and written back (`partition::share::file`) in the same group
//! commit as the log's appends, before anything it changed is answered and only while the
//! lease still holds. Lock expiry runs on the actor's own timer.

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::oneshot;

use super::PartitionActor;
use crate::env::{Clock, Env};
use crate::error::{CoreError, CoreResult};
use crate::participant::Admission;
use crate::partition::Isolation;
use crate::partition::log::batch::BatchHeader;
use crate::partition::share::state::{AckError, AcquiredRange, Event, LogBatch, RecordState, ShareWindow};
use crate::partition::share::{
    AutoOffsetReset, DeadLetter, DeadLetterCause, ShareCommand, ShareFetched, ShareGroupConfig, ShareOffsets, file,
};

/// Share groups one partition keeps windows for at once, a bound on memory.
const SHARE_GROUPS_MAX: usize = 10_000;

/// What an acquisition reads of the log first; each further read is twice the one before.
const SHARE_FIRST_READ_BYTES: usize = 256 * 1024;

/// One share partition this owner serves.
pub(super) struct Share {
    window: ShareWindow,
    /// Changed since it was last written under this owner's epoch.
    dirty: bool,
    /// Archiving offsets handed to the dead-letter writer under this owner (KIP-1191): each
    /// is handed over once it is durable, and again only by a later owner.
    dead_letters_sent: BTreeSet<i64>,
}

impl Share {
    fn new(window: ShareWindow, dirty: bool) -> Share {
        Share { window, dirty, dead_letters_sent: BTreeSet::new() }
    }
}

/// An answer that waits for the group commit's share writes.
pub(super) enum ShareReply {
    Fetched(oneshot::Sender<CoreResult<ShareFetched>>, ShareFetched),
    Done(oneshot::Sender<CoreResult<()>>),
    Offsets(oneshot::Sender<CoreResult<Option<ShareOffsets>>>, Option<ShareOffsets>),
}

fn ack_error(e: AckError) -> CoreError {
    match e {
        AckError::InvalidRecordState => CoreError::InvalidRecordState,
        AckError::InvalidRequest => {
            CoreError::InvalidRequest("the acknowledgement's ranges or types are invalid".into())
        }
    }
}

/// The batches of `records` as the window sees them: a control batch holds nothing to deliver,
/// nor, under read_committed, does a batch of an aborted transaction.
fn log_batches(records: &[u8], aborted: &[crate::partition::producer::state::AbortedTxn]) -> Vec<LogBatch> {
    let mut batches = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let Ok(header) = BatchHeader::parse(&records[at..]) else { break };
        let aborted = header.is_transactional()
            && aborted.iter().any(|a| {
                a.producer_id == header.producer_id
                    && a.first_offset <= header.base_offset
                    && header.base_offset <= a.last_offset
            });
        let deliverable = !header.is_control() && !aborted;
        batches.push(LogBatch { base_offset: header.base_offset, last_offset: header.last_offset(), deliverable });
        at += header.total_len();
    }
    batches
}

/// The whole batches of `records` from the one holding `first` to the one holding `last`: what
/// a member is sent of a read (Apache slices it so too), without the batches around them.
fn batches_spanning(records: &bytes::Bytes, first: i64, last: i64) -> bytes::Bytes {
    let (mut start, mut end, mut at) = (None, 0, 0);
    while at < records.len() {
        let Ok(header) = BatchHeader::parse(&records[at..]) else { break };
        if header.base_offset > last {
            break;
        }
        let next = (at + header.total_len()).min(records.len());
        if start.is_none() && header.last_offset() >= first {
            start = Some(at);
        }
        (end, at) = (next, next);
    }
    start.map_or_else(bytes::Bytes::new, |start| records.slice(start..end))
}

impl<E: Env> PartitionActor<E> {
    pub(super) async fn handle_share(&mut self, command: ShareCommand) {
        let now_ms = self.env.clock().now_ms();
        match command {
            ShareCommand::Acquire { group_id, member_id, config, max_records, max_bytes, mode, reply } => {
                let fetched = match self.share_load(&group_id, config, true).await {
                    Ok(()) => {
                        self.share_acquire(&group_id, &member_id, config, max_records, max_bytes, mode, now_ms).await
                    }
                    Err(e) => Err(e),
                };
                match fetched {
                    Ok(fetched) => self.share_replies.push(ShareReply::Fetched(reply, fetched)),
                    Err(e) => drop(reply.send(Err(e))),
                }
            }
            ShareCommand::Acknowledge { group_id, member_id, config, batches, renew_allowed, reply } => {
                if let Err(e) = self.share_load(&group_id, config, true).await {
                    let _ = reply.send(Err(e));
                    return;
                }
                let event = Event::Acknowledge { member: &member_id, batches: &batches, renew_allowed, now_ms };
                let outcome = self.share_apply(&group_id, event);
                match outcome.ack.expect("an acknowledgement is answered") {
                    Ok(()) => self.share_replies.push(ShareReply::Done(reply)),
                    Err(e) => drop(reply.send(Err(ack_error(e)))),
                }
            }
            ShareCommand::ReleaseMember { group_id, member_id } => {
                if self.shares.contains_key(&group_id) {
                    self.share_apply(&group_id, Event::ReleaseMember { member: &member_id });
                }
            }
            ShareCommand::DeadLettered { group_id, first_offset, last_offset } => {
                // Under a later epoch the window is read again, and its Archiving records sent
                // again: the dead-letter queue gets them at least once.
                if self.share_load_existing(&group_id).await.is_ok() && self.shares.contains_key(&group_id) {
                    self.share_apply(&group_id, Event::DeadLettered { first_offset, last_offset });
                    let share = self.shares.get_mut(&group_id).expect("loaded");
                    share.dead_letters_sent.retain(|o| !(first_offset..=last_offset).contains(o));
                }
            }
            ShareCommand::Guard { reply } => {
                let _ = reply.send(self.share_ends.guard());
            }
            ShareCommand::Stage { group_id, member_id, config, producer_id, producer_epoch, batches, guard, reply } => {
                match self.share_ends.admits(&(group_id.clone(), producer_id), guard) {
                    Admission::Admitted => {}
                    // The transaction ended after it was verified: a late request of it.
                    Admission::Ended => return drop(reply.send(Err(CoreError::InvalidTxnState))),
                    // Verified before this owner's state was loaded: verified again on a retry.
                    Admission::Stale => return drop(reply.send(Err(CoreError::ConcurrentTransactions))),
                }
                if let Err(e) = self.share_load(&group_id, config, true).await {
                    let _ = reply.send(Err(e));
                    return;
                }
                let event = Event::Stage { member: &member_id, producer_id, producer_epoch, batches: &batches };
                match self.share_apply(&group_id, event).ack.expect("a staging is answered") {
                    Ok(()) => self.share_replies.push(ShareReply::Done(reply)),
                    Err(e) => drop(reply.send(Err(ack_error(e)))),
                }
            }
            ShareCommand::Complete { group_id, producer_id, producer_epoch, commit, reply } => {
                self.share_ends.record_end((group_id.clone(), producer_id));
                // A group that never consumed the partition here staged nothing in it.
                if let Err(e) = self.share_load_existing(&group_id).await {
                    let _ = reply.send(Err(e));
                    return;
                }
                if self.shares.contains_key(&group_id) && !crate::mutant!(ShareMarkersIgnored) {
                    self.share_apply(&group_id, Event::CompleteTxn { producer_id, producer_epoch, commit });
                }
                self.share_replies.push(ShareReply::Done(reply));
            }
            ShareCommand::Offsets { group_id, reply } => {
                match self.share_load_existing(&group_id).await {
                    // Answered once what it shows is written: no reader sees a start that a
                    // crash then takes back.
                    Ok(()) => {
                        let offsets = self.shares.get(&group_id).map(|s| self.share_offsets(&s.window));
                        self.share_replies.push(ShareReply::Offsets(reply, offsets));
                    }
                    Err(e) => drop(reply.send(Err(e))),
                }
            }
            ShareCommand::Reset { group_id, start_offset, config, reply } => {
                let reset = self.share_reset(&group_id, start_offset, config).await;
                match reset {
                    Ok(()) => self.share_replies.push(ShareReply::Done(reply)),
                    Err(e) => drop(reply.send(Err(e))),
                }
            }
        }
    }

    /// Applies an event to a loaded share partition, marking what must be written.
    fn share_apply(&mut self, group_id: &str, event: Event) -> crate::partition::share::state::Outcome {
        let share = self.shares.get_mut(group_id).expect("loaded");
        let before = share.window.next_fetch_offset();
        let outcome = share.window.apply(event);
        share.dirty |= outcome.durable_change;
        // Records made available again (a release, an abort) wake the fetches waiting for data.
        if share.window.next_fetch_offset() < before {
            self.data_version.send_modify(|v| *v += 1);
        }
        outcome
    }

    /// Loads the group's window if it is not yet: from the volume (the newest file of an epoch
    /// up to this owner's), or, with `create`, started at the group's `share.auto.offset.reset`.
    /// A damaged file takes the share partition offline, with the reason logged.
    async fn share_load(&mut self, group_id: &str, config: ShareGroupConfig, create: bool) -> CoreResult<()> {
        if let Some(share) = self.shares.get_mut(group_id) {
            if share.window.settings() != config.window {
                share.window.apply(Event::Settings(config.window));
            }
            return Ok(());
        }
        let Some(owned) = self.owned else { return Err(CoreError::NotLeaderOrFollower) };
        if self.log.is_none() {
            return Err(CoreError::Storage("partition log unavailable".into()));
        }
        if self.shares.len() >= SHARE_GROUPS_MAX {
            return Err(CoreError::Storage(format!(
                "{} share groups already consume this partition",
                SHARE_GROUPS_MAX
            )));
        }
        let epoch = owned.claimed.epoch;
        let read = file::read_newest(self.env.volume(), &self.dir, group_id, epoch, config.window).await;
        let (window, dirty) = match read {
            // Written again under this owner's epoch if it is an older owner's, or if it may be
            // what a failed write of this owner's left visible but not durable.
            Ok(Some((found, window))) => (window, found != epoch || self.shares_unsure.contains(group_id)),
            Ok(None) if !create => return Ok(()),
            Ok(None) => {
                // Read afresh: a group config set a moment ago on a peer may not have reached
                // this broker's snapshot yet, and the start is decided only once.
                let reset = match crate::cluster::group_configs::read(self.env.volume()).await {
                    Ok(groups) => {
                        match groups.get(group_id).and_then(|g| g.get(crate::config::group::SHARE_AUTO_OFFSET_RESET)) {
                            Some(v) if v.eq_ignore_ascii_case("earliest") => AutoOffsetReset::Earliest,
                            Some(_) => AutoOffsetReset::Latest,
                            None => config.auto_offset_reset,
                        }
                    }
                    Err(e) => return Err(e),
                };
                let log = self.log.as_ref().expect("checked above");
                let start = match reset {
                    AutoOffsetReset::Latest => log.high_watermark(),
                    AutoOffsetReset::Earliest => log.log_start_offset(),
                };
                // Written before anything is delivered: a later owner starts where this one did.
                (ShareWindow::new(start, config.window), true)
            }
            Err(e) => {
                tracing::error!(dir = %self.dir, group = group_id, error = %e, "damaged share partition state: offline");
                return Err(CoreError::Storage(format!("share partition state of group {group_id}: {e}")));
            }
        };
        // Records on their way to a dead-letter queue are handed over once written under this
        // owner's epoch.
        let archiving = window.count_in(RecordState::Archiving) > 0;
        if archiving {
            crate::reach("dead-letter sent again by a later owner");
        }
        let dirty = dirty || archiving;
        self.shares.insert(group_id.to_string(), Share::new(window, dirty));
        Ok(())
    }

    /// A new ownership epoch takes up every share partition the volume has for this partition
    /// and writes it under its own epoch at once: from then on a former owner's late write
    /// (under its older epoch) is never the newest, whoever reads.
    pub(super) async fn take_over_shares(&mut self) {
        let groups = match file::groups_listed(self.env.volume(), &self.dir).await {
            Ok(groups) => groups,
            Err(e) => {
                // Each is taken up on its group's first request instead.
                tracing::warn!(dir = %self.dir, error = %e, "cannot list share partitions at take-over");
                return;
            }
        };
        for group_id in groups {
            if let Err(e) = self.share_load_existing(&group_id).await {
                tracing::warn!(dir = %self.dir, group = %group_id, error = %e, "share partition not taken over");
            }
        }
        if self.share_work() {
            self.finish_shares().await;
        }
    }

    /// Loads the group's window only if the volume has one.
    async fn share_load_existing(&mut self, group_id: &str) -> CoreResult<()> {
        if self.shares.contains_key(group_id) {
            return Ok(());
        }
        // The settings of a window read only to be ended or described do not matter until the
        // group's next fetch brings its own.
        let config = ShareGroupConfig {
            window: crate::partition::share::state::ShareSettings {
                lock_duration_ms: 30_000,
                delivery_count_limit: u16::MAX,
                max_in_flight: i64::MAX,
                dead_letter: false,
            },
            read_committed: false,
            auto_offset_reset: AutoOffsetReset::Latest,
        };
        self.share_load(group_id, config, false).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn share_acquire(
        &mut self,
        group_id: &str,
        member_id: &str,
        config: ShareGroupConfig,
        max_records: usize,
        max_bytes: usize,
        mode: crate::partition::share::state::AcquireMode,
        now_ms: i64,
    ) -> CoreResult<ShareFetched> {
        let log = self.log.as_ref().expect("loaded with the log open");
        let log_start = log.log_start_offset();
        if self.shares[group_id].window.start_offset() < log_start {
            // Records below the log's start are gone (retention, DeleteRecords).
            self.share_apply(group_id, Event::StartAt { offset: log_start });
        }
        let share = &self.shares[group_id];
        if !share.window.can_acquire() || max_records == 0 {
            return Ok(ShareFetched::default());
        }
        let from = share.window.next_fetch_offset();
        let isolation = if config.read_committed { Isolation::ReadCommitted } else { Isolation::ReadUncommitted };
        let watermarks = self.watermarks_now().expect("the log is open");
        let (upper, aborted) = match isolation {
            Isolation::ReadUncommitted => (None, Vec::new()),
            Isolation::ReadCommitted => {
                let lso = watermarks.last_stable_offset;
                (Some(lso), self.state.aborted_between(from, lso))
            }
        };
        // The log is read a little at a time, doubling, until the records are acquired: a
        // member asking for 500 records is not sent (nor read) the partition's max bytes.
        let max_bytes = max_bytes.max(1);
        let (mut at, mut read_bytes, mut read_total) = (from, SHARE_FIRST_READ_BYTES, 0usize);
        let (mut records_left, mut bytes_left) = (max_records, max_bytes);
        let mut sent: Vec<bytes::Bytes> = Vec::new();
        let mut acquired_all: Vec<AcquiredRange> = Vec::new();
        while records_left > 0 && bytes_left > 0 && read_total < max_bytes {
            let log = self.log.as_ref().expect("the log is open");
            let read = log.read(at, read_bytes.min(max_bytes - read_total), upper).await.map_err(CoreError::from)?;
            let batches = log_batches(&read.records, &aborted);
            let Some(last) = batches.last() else { break };
            (at, read_total, read_bytes) = (last.last_offset + 1, read_total + read.records.len(), read_bytes * 2);
            let event =
                Event::Acquire { member: member_id, batches: &batches, max_records: records_left, mode, now_ms };
            let acquired = self.share_apply(group_id, event).acquired;
            if let (Some(first), Some(last)) = (acquired.first(), acquired.last()) {
                let records = batches_spanning(&read.records, first.first_offset, last.last_offset);
                let taken: i64 = acquired.iter().map(|r| r.last_offset - r.first_offset + 1).sum();
                records_left = records_left.saturating_sub(taken as usize);
                bytes_left = bytes_left.saturating_sub(records.len());
                sent.push(records);
                for range in acquired {
                    AcquiredRange::append(&mut acquired_all, range);
                }
            }
            if !self.shares[group_id].window.can_acquire() {
                break;
            }
        }
        let records = match sent.len() {
            0 => bytes::Bytes::new(),
            1 => sent.pop().expect("one"),
            _ => sent.concat().into(),
        };
        Ok(ShareFetched { records, acquired: acquired_all })
    }

    fn share_offsets(&self, window: &ShareWindow) -> ShareOffsets {
        let high_watermark = self.log.as_ref().map_or(window.end_offset(), |l| l.high_watermark());
        let done_in_window = window.entries().filter(|(_, e)| e.state.is_terminal()).count() as i64;
        let lag = (high_watermark - window.start_offset() - done_in_window).max(0);
        ShareOffsets { start_offset: window.start_offset(), lag }
    }

    async fn share_reset(
        &mut self,
        group_id: &str,
        start_offset: Option<i64>,
        config: ShareGroupConfig,
    ) -> CoreResult<()> {
        self.shares.remove(group_id);
        match start_offset {
            None => file::remove_all(self.env.volume(), &self.dir, group_id)
                .await
                .map_err(|e| CoreError::Storage(e.to_string())),
            Some(start) => {
                self.shares.insert(group_id.to_string(), Share::new(ShareWindow::new(start, config.window), true));
                Ok(())
            }
        }
    }

    /// Lets go of the records whose acquisition lock ran out.
    pub(super) fn expire_shares(&mut self, now_ms: i64) {
        if crate::mutant!(ShareLockIgnored) {
            return;
        }
        let expiring: Vec<String> = self
            .shares
            .iter()
            .filter(|(_, s)| s.window.next_lock_expiry_ms().is_some_and(|at| at <= now_ms))
            .map(|(g, _)| g.clone())
            .collect();
        for group_id in expiring {
            self.share_apply(&group_id, Event::Expire { now_ms });
        }
    }

    /// When the earliest acquisition lock of any share partition runs out.
    pub(super) fn next_share_expiry_ms(&self) -> Option<i64> {
        if crate::mutant!(ShareLockIgnored) {
            return None;
        }
        self.shares.values().filter_map(|s| s.window.next_lock_expiry_ms()).min()
    }

    /// Whether the group commit has share work: windows to write or answers to send.
    pub(super) fn share_work(&self) -> bool {
        !self.share_replies.is_empty() || self.shares.values().any(|s| s.dirty)
    }

    /// The group commit's share part: every changed window written under this owner's epoch,
    /// while the lease holds, then the answers, if it held past the writes. A failed write answers
    /// with a storage error (effect unknown) and keeps the window it could not write, to be
    /// written at the next commit.
    pub(super) async fn finish_shares(&mut self) {
        let Some(owned) = self.owned else {
            for reply in self.share_replies.drain(..) {
                reply.fail(CoreError::NotLeaderOrFollower);
            }
            return;
        };
        let epoch = owned.claimed.epoch;
        if !self.lease_ok() && !crate::mutant!(ShareZombieOwnerAcks) {
            // The lease ran out since the commands were taken: a successor may have read the
            // files already, so nothing is written, and the windows are read again if asked.
            self.shares.retain(|_, s| !s.dirty);
            for reply in self.share_replies.drain(..) {
                reply.fail(CoreError::NotLeaderOrFollower);
            }
            return;
        }
        if crate::mutant!(ShareAckBeforeDurable) {
            for reply in self.share_replies.drain(..) {
                reply.send();
            }
        }
        let mut failed: Option<String> = None;
        let dirty: Vec<String> = self.shares.iter().filter(|(_, s)| s.dirty).map(|(g, _)| g.clone()).collect();
        let mut written = Vec::new();
        for group_id in dirty {
            let window = &self.shares[&group_id].window;
            match file::write(self.env.volume(), &self.dir, &group_id, epoch, window).await {
                Ok(()) => {
                    self.shares.get_mut(&group_id).expect("dirty").dirty = false;
                    self.shares_unsure.remove(&group_id);
                    written.push(group_id);
                }
                Err(e) => {
                    tracing::error!(dir = %self.dir, group = %group_id, error = %e, "cannot write a share partition's state");
                    // The window stays as it is, still to be written: the volume has this state
                    // or the one before, never a later one, while reading it back would hand
                    // out again what live members hold (an acquisition is not in the file).
                    self.shares_unsure.insert(group_id);
                    failed = Some(e.to_string());
                }
            }
        }
        for group_id in written {
            file::remove_older(self.env.volume(), &self.dir, &group_id, epoch).await;
            self.send_dead_letters(&group_id);
        }
        let refusal = match failed {
            Some(why) => Some(CoreError::Storage(why)),
            None if !self.lease_ok() && !crate::mutant!(ShareZombieOwnerAcks) => Some(CoreError::NotLeaderOrFollower),
            None => None,
        };
        for reply in self.share_replies.drain(..) {
            match &refusal {
                Some(e) => reply.fail(e.clone()),
                None => reply.send(),
            }
        }
    }

    /// Hands the group's durable Archiving records not yet handed over to the dead-letter
    /// writer (KIP-1191).
    fn send_dead_letters(&mut self, group_id: &str) {
        let share = self.shares.get_mut(group_id).expect("written");
        let limit = share.window.settings().delivery_count_limit;
        for range in share.window.dead_letters() {
            if (range.first_offset..=range.last_offset).all(|o| share.dead_letters_sent.contains(&o)) {
                continue;
            }
            share.dead_letters_sent.extend(range.first_offset..=range.last_offset);
            // As Apache tells them apart when it resumes: by the count.
            let cause = match range.delivery_count >= limit {
                true => DeadLetterCause::DeliveryCountExceeded,
                false => DeadLetterCause::Rejected,
            };
            let (topic, partition) = self.key.clone();
            let letter = DeadLetter { topic, partition, group_id: group_id.to_string(), range, cause };
            // No writer (a broker in a unit test): the records stay Archiving.
            let _ = self.dead_letters.send(letter);
        }
    }

    /// A new ownership epoch (or none): the windows are read again from the volume when next
    /// asked for, and guards read before are not trusted.
    pub(super) fn forget_shares(&mut self) {
        self.shares.clear();
        // A new epoch writes whatever it reads under its own name anyway.
        self.shares_unsure.clear();
        self.share_ends.forget();
    }
}

impl ShareReply {
    fn send(self) {
        match self {
            ShareReply::Fetched(reply, fetched) => drop(reply.send(Ok(fetched))),
            ShareReply::Done(reply) => drop(reply.send(Ok(()))),
            ShareReply::Offsets(reply, offsets) => drop(reply.send(Ok(offsets))),
        }
    }

    fn fail(self, error: CoreError) {
        match self {
            ShareReply::Fetched(reply, _) => drop(reply.send(Err(error))),
            ShareReply::Done(reply) => drop(reply.send(Err(error))),
            ShareReply::Offsets(reply, _) => drop(reply.send(Err(error))),
        }
    }
}

/// The share partitions of a partition actor.
pub(super) type Shares = BTreeMap<String, Share>;
