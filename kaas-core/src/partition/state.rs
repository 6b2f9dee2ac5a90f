//! A partition's transactional bookkeeping, pure: no I/O, no clock. The actor (`actor.rs`)
//! owns the log, the mailbox and the group commit; it asks this state whether an append or a
//! marker may be written, and tells it what was written, synced, rebuilt or lost, each as an
//! `Event` taken by `PartitionState::apply`, which checks the invariants at the end.
//!
//! It holds:
//! - the producer state (`producer::state`): the idempotence window, each producer's open
//!   transaction here (the first unstable offset) and the aborted-transaction index;
//! - the coordinator's fences not yet in a snapshot, applied again whenever the producer state
//!   is rebuilt from the log (neither the log nor a snapshot holds a fence);
//! - the end guard (`participant::EndGuard`): the markers written, numbered, so that a
//!   transactional batch verified with the coordinator is refused if its producer's transaction
//!   ended after the verification (KIP-890 part 1);
//! - the transactions whose marker is written but not yet durable: until the high watermark
//!   passes the marker they hold the last stable offset at their first offset, since a crash
//!   could take the marker back.
//!
//! The share partitions of KIP-932 will sit beside it: the same partition, the same owner.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{TxnView, Watermarks};
use crate::error::CoreError;
use crate::participant::{Admission, EndGuard};
use crate::partition::log::batch::BatchHeader;
use crate::partition::log::control::Marker;
use crate::partition::producer::state::{
    self as producer, AbortedTxn, MarkerVerdict, ProducerEntry, ProducerStates, Verdict,
};

/// Where the log ends, as the actor reads it from the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEnds {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
}

/// Everything that changes a partition's transactional bookkeeping.
#[derive(Debug)]
pub enum Event<'a> {
    /// The log was opened (or reopened after a failure) and the producer state rebuilt from
    /// the last snapshot and the log's tail.
    Opened { producers: ProducerStates },
    /// A write or sync failed: the log's tail is unknown until it is reopened.
    Failed,
    /// A batch written at `base_offset` (let through by `check_append`).
    Appended { header: &'a BatchHeader, base_offset: i64 },
    /// A marker written at `offset` (let through by `check_marker`).
    MarkerWritten { producer_id: i64, producer_epoch: i16, marker: Marker, offset: i64 },
    /// The coordinator moved producers to newer epochs: their older epochs are refused.
    Fenced(&'a BTreeMap<i64, i16>),
    /// The log's high watermark is now this: the ends below it are durable.
    HighWatermark(i64),
    /// The log's start moved up (DeleteRecords, retention).
    LogStartMoved { log_start_offset: i64 },
    /// `producer.id.expiration.ms` at `now_ms`: idle producers are forgotten.
    Expire { now_ms: i64, expiration_ms: i64 },
    /// A snapshot of the producer state was written at the log's end.
    SnapshotWritten,
}

/// What to do with one batch of a produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    Append,
    /// Already in the log at this offset: answer it, write nothing.
    Duplicate {
        base_offset: i64,
    },
    Refuse(CoreError),
}

#[derive(Debug, Clone, Default)]
pub struct PartitionState {
    producers: ProducerStates,
    fences: BTreeMap<i64, i16>,
    ends: EndGuard<i64>,
    /// (marker offset, first offset) of transactions ended by a marker not yet durable.
    unsynced_ends: Vec<(i64, i64)>,
}

/// Whether transactional batches must be verified with the coordinator (KIP-890 part 1):
/// always, but for the simulation mutant that turns verification off.
pub fn verification_required() -> bool {
    !crate::mutant!(NoPartitionVerification)
}

impl PartitionState {
    pub fn producers(&self) -> &ProducerStates {
        &self.producers
    }

    /// The aborted transactions a read_committed read of `[from, to)` must be told.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.producers.aborted_between(from, to)
    }

    /// Every producer the partition remembers (DescribeProducers).
    pub fn describe_producers(&self) -> Vec<(i64, ProducerEntry)> {
        self.producers.iter().map(|(pid, e)| (*pid, e.clone())).collect()
    }

    /// May a batch with a producer id be appended? `verified` is the guard of a verification
    /// with the coordinator (`TxnView::markers_written` when it asked), for a transactional one.
    pub fn check_append(&self, header: &BatchHeader, verified: Option<u64>) -> Admit {
        assert!(header.producer_id >= 0, "only batches with a producer id are checked");
        match self.producers.check(header) {
            Verdict::Append if header.is_transactional() => match self.check_verified(header, verified) {
                Ok(()) => Admit::Append,
                Err(e) => Admit::Refuse(e),
            },
            Verdict::Append => Admit::Append,
            Verdict::Duplicate { base_offset } => Admit::Duplicate { base_offset },
            Verdict::OutOfOrderSequence => Admit::Refuse(CoreError::OutOfOrderSequenceNumber),
            Verdict::InvalidProducerEpoch => Admit::Refuse(CoreError::InvalidProducerEpoch),
            Verdict::UnknownProducerId => Admit::Refuse(CoreError::UnknownProducerId),
        }
    }

    /// A transactional batch is appended if its producer's transaction is already open here at
    /// its epoch; otherwise only under a guard from a verification after which no marker for the
    /// producer was written.
    fn check_verified(&self, header: &BatchHeader, verified: Option<u64>) -> Result<(), CoreError> {
        let producer_id = header.producer_id;
        if self.producers.ongoing_epoch(producer_id) == Some(header.producer_epoch) || !verification_required() {
            return Ok(());
        }
        match verified.map(|guard| self.ends.admits(&producer_id, guard)) {
            Some(Admission::Admitted) => Ok(()),
            // The log was reopened since: the markers the guard would be checked against may be
            // forgotten. Retriable: the producer's retry is verified afresh.
            Some(Admission::Stale) => Err(CoreError::NotEnoughReplicas),
            Some(Admission::Ended) | None => Err(CoreError::InvalidTxnState),
        }
    }

    /// May a marker of `producer_epoch` be written? Not one older than the producer's epoch:
    /// it comes from a fenced coordinator decision and must not end anything.
    pub fn check_marker(&self, producer_id: i64, producer_epoch: i16) -> Result<(), CoreError> {
        match self.producers.check_marker(producer_id, producer_epoch) {
            MarkerVerdict::Append => Ok(()),
            MarkerVerdict::InvalidProducerEpoch => Err(CoreError::InvalidProducerEpoch),
        }
    }

    /// The one transition of the bookkeeping.
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::Opened { producers } => {
                self.producers = producers;
                for (&producer_id, &producer_epoch) in &self.fences {
                    self.producers.transition(producer::Event::Fence { producer_id, producer_epoch });
                }
                // Markers before the reopen may be forgotten: older guards are not trusted.
                self.ends.forget();
                self.unsynced_ends.clear();
            }
            Event::Failed => {
                self.producers = ProducerStates::default();
                self.unsynced_ends.clear();
            }
            Event::Appended { header, base_offset } => {
                self.producers.transition(producer::Event::Batch { header, base_offset });
            }
            Event::MarkerWritten { producer_id, producer_epoch, marker, offset } => {
                if let Some(first_offset) = self.producers.ongoing_first_offset(producer_id) {
                    self.unsynced_ends.push((offset, first_offset));
                }
                self.producers.transition(producer::Event::Marker { producer_id, producer_epoch, marker, offset });
                self.ends.record_end(producer_id);
            }
            Event::Fenced(epochs) => {
                if crate::mutant!(SkipCrossPartitionFence) {
                    return;
                }
                for (&producer_id, &producer_epoch) in epochs {
                    let fenced = self.fences.entry(producer_id).or_insert(producer_epoch);
                    *fenced = (*fenced).max(producer_epoch);
                    self.producers.transition(producer::Event::Fence { producer_id, producer_epoch });
                }
            }
            Event::HighWatermark(high_watermark) => {
                self.unsynced_ends.retain(|&(marker, _)| marker >= high_watermark);
            }
            Event::LogStartMoved { log_start_offset } => {
                // Producers whose every batch is gone are forgotten, as Apache does.
                self.producers.transition(producer::Event::LogStartMoved { log_start_offset });
            }
            Event::Expire { now_ms, expiration_ms } => {
                self.producers.transition(producer::Event::Expire { now_ms, expiration_ms });
            }
            Event::SnapshotWritten => {
                // The snapshot holds every fence a producer it knows has taken; a producer it
                // does not know is not in the log, so its fence has nothing to refuse.
                let producers = &self.producers;
                self.fences.retain(|pid, epoch| producers.get(*pid).is_some_and(|e| e.producer_epoch < *epoch));
            }
        }
        self.check_own_invariants();
    }

    /// What the produce path reads before it asks the coordinator.
    pub fn txn_view(&self) -> TxnView {
        let ongoing = self.producers.ongoing().map(|(pid, entry)| (pid, entry.producer_epoch)).collect();
        TxnView { ongoing: Arc::new(ongoing), markers_written: self.ends.guard() }
    }

    /// The watermarks readers may be told. A transaction is stable only once its marker is
    /// durable: those not yet durable hold the last stable offset at their first offset.
    pub fn watermarks(&self, log: LogEnds, leader_epoch: i32) -> Watermarks {
        let high_watermark = log.high_watermark;
        let ending =
            self.unsynced_ends.iter().filter(|&&(marker, _)| marker >= high_watermark).map(|&(_, first)| first);
        let first_unstable = self.producers.first_unstable_offset().into_iter().chain(ending).min().unwrap_or(i64::MAX);
        // Records below the log start offset are gone (DeleteRecords may pass an open
        // transaction, as in Apache): the last stable offset is never below it, or readers
        // could not reach it.
        let last_stable_offset = if crate::mutant!(LsoNotClamped) {
            high_watermark
        } else {
            first_unstable.min(high_watermark).max(log.log_start_offset)
        };
        let watermarks = Watermarks {
            log_start_offset: log.log_start_offset,
            high_watermark,
            last_stable_offset,
            log_end_offset: log.log_end_offset,
            online: true,
            leader_epoch,
            owned: true,
        };
        assert!(log.log_start_offset <= last_stable_offset, "the last stable offset is a readable offset");
        assert!(last_stable_offset <= high_watermark, "the last stable offset is at most the high watermark");
        watermarks
    }

    fn check_own_invariants(&self) {
        for &(marker, first) in &self.unsynced_ends {
            assert!(first < marker, "a transaction ends after it began");
        }
        assert!(
            self.unsynced_ends.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "ends not yet durable are kept in log order"
        );
        self.ends.check_invariants();
    }

    /// The bookkeeping against the watermarks it publishes.
    pub fn check_invariants(&self, now: &Watermarks) {
        self.check_own_invariants();
        for &(marker, first) in &self.unsynced_ends {
            assert!(marker >= now.high_watermark, "an end not yet durable lies at or past the high watermark");
            assert!(
                now.last_stable_offset <= first || crate::mutant!(LsoNotClamped),
                "an end not yet durable holds the LSO"
            );
        }
        if let Some(first) = self.producers.first_unstable_offset() {
            assert!(
                now.last_stable_offset <= first.max(now.log_start_offset) || crate::mutant!(LsoNotClamped),
                "the LSO never passes an open transaction"
            );
        }
    }
}
