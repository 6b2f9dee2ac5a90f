//! Per-partition producer state: the idempotence check that runs in the partition actor before
//! every append of a batch carrying a producer id. Pure: no I/O, no clock; the actor feeds it
//! batch headers and offsets, and the snapshot and the log tail rebuild it after a restart.
//!
//! For each producer id it keeps the epoch and the sequence ranges of the last
//! `BATCHES_RETAINED` batches (the client's max.in.flight.requests.per.connection), and
//! classifies an incoming batch as Apache Kafka's `ProducerAppendInfo` does:
//! - the same epoch and exactly the sequence range of a retained batch: a duplicate, answered
//!   with that batch's offset and not written again;
//! - an epoch below the producer's: INVALID_PRODUCER_EPOCH;
//! - a new epoch must start at sequence 0 (unless the producer is unknown);
//! - the same epoch must continue at the last sequence + 1 (wrapping after i32::MAX), else
//!   OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - a producer this partition forgot (expired, or every batch of it deleted by retention or
//!   DeleteRecords) may go on at any sequence, as Apache (2.5+, KIP-360) lets it: its client
//!   relies on that after a DeleteRecords;
//! - a producer this partition never knew must start at sequence 0, else UNKNOWN_PRODUCER_ID.
//!   Apache accepts any sequence there too, which lets a producer whose first batch failed get
//!   its second one written: a gap that no retry can fill. kaas keeps the older answer (Kafka
//!   1.0 to 2.4), which clients handle by starting a new epoch, so that a producer's log stays
//!   gapless wherever nothing removed its state (DESIGN.md, invariant 2). It can tell the two
//!   apart because it remembers the ids it forgot (the newest `FORGOTTEN_MAX` of them; any id
//!   at or below an older one counts as forgotten too).
//!
//! It also follows transactions as Apache's `ProducerStateManager` does: a producer's first
//! transactional batch opens its transaction in this partition (the first unstable offset),
//! a COMMIT or ABORT marker closes it, and an aborted one is remembered with its offset range
//! for read_committed fetches (the aborted-transaction index).
//!
//! Every change is an `Event` taken by `ProducerStates::transition`, in one place, which checks
//! the invariants of what it touched at the end; `check_invariants` checks all of them (the
//! take-over path, after filling the state from the snapshot and the log tail).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::partition::log::batch::BatchHeader;
use crate::partition::log::control::Marker;

/// Batches remembered per producer: the Java client's default max.in.flight.
pub const BATCHES_RETAINED: usize = 5;
/// Forgotten producer ids remembered one by one, per partition.
pub const FORGOTTEN_MAX: usize = 1000;

/// One appended batch of a producer, as the dedupe window remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerEntry {
    pub producer_epoch: i16,
    /// Oldest first, at most `BATCHES_RETAINED`.
    pub batches: VecDeque<BatchMetadata>,
    /// The max timestamp of the producer's last batch: idle producers expire from it.
    pub last_timestamp: i64,
    /// The offset of the producer's first batch in its open transaction, if one is open here.
    #[serde(default)]
    pub current_txn_first_offset: Option<i64>,
}

/// A transaction that ended with an ABORT marker: read_committed consumers skip the producer's
/// batches from `first_offset` up to the marker at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// What a marker does to the producer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerVerdict {
    Append,
    /// The marker's epoch is older than the producer's: it comes from a fenced coordinator
    /// decision and must not end anything.
    InvalidProducerEpoch,
}

impl ProducerEntry {
    pub fn last_seq(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_seq)
    }

    /// Which invariant of one producer is broken, if any: what every transition leaves true.
    fn broken(&self, window: usize) -> Option<&'static str> {
        let batches_forward = self.batches.iter().all(|b| b.base_offset <= b.last_offset);
        let in_order = self.batches.iter().zip(self.batches.iter().skip(1)).all(|(a, b)| a.last_offset < b.base_offset);
        let txn_starts_before_last = match (self.current_txn_first_offset, self.batches.back()) {
            (Some(first), Some(last)) => first <= last.last_offset,
            _ => true,
        };
        [
            (self.producer_epoch >= 0, "a producer epoch is never negative"),
            (self.batches.len() <= window, "the dedupe window is bounded"),
            (batches_forward, "a batch's offsets run forward"),
            (in_order, "a producer's batches are in log order"),
            (txn_starts_before_last, "an open transaction starts at or before the producer's last batch"),
        ]
        .into_iter()
        .find_map(|(holds, invariant)| (!holds).then_some(invariant))
    }

    fn check_invariants(&self, window: usize) {
        if let Some(invariant) = self.broken(window) {
            panic!("{invariant}");
        }
    }
}

/// Everything that changes a partition's producer state.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A batch appended at `base_offset`: from a produce that `check` let through, or from the
    /// log while rebuilding, where whatever is in the log wins.
    Batch { header: &'a BatchHeader, base_offset: i64 },
    /// A marker appended at `offset` (let through by `check_marker`, or read from the log).
    Marker { producer_id: i64, producer_epoch: i16, marker: Marker, offset: i64 },
    /// The coordinator moved the producer to a newer epoch without a marker (a rejoin).
    Fence { producer_id: i64, producer_epoch: i16 },
    /// `producer.id.expiration.ms` at `now_ms`: idle producers are forgotten.
    Expire { now_ms: i64, expiration_ms: i64 },
    /// The log's start moved up to `log_start_offset` (DeleteRecords, retention).
    LogStartMoved { log_start_offset: i64 },
    /// The state was rebuilt from a log whose start had moved, with no snapshot: which
    /// producers had batches below it is not known, so any of them may have been forgotten.
    HistoryLost,
}

/// What to do with an incoming producer batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Append,
    /// Already in the log at this offset: answer it, write nothing.
    Duplicate {
        base_offset: i64,
    },
    OutOfOrderSequence,
    InvalidProducerEpoch,
    /// A producer never known here, at a first sequence other than 0.
    UnknownProducerId,
}

/// The sequence of the last record of a batch: sequences wrap to 0 after i32::MAX.
pub fn last_sequence(base_sequence: i32, last_offset_delta: i32) -> i32 {
    let last = i64::from(base_sequence) + i64::from(last_offset_delta);
    if last > i64::from(i32::MAX) { (last - i64::from(i32::MAX) - 1) as i32 } else { last as i32 }
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    i64::from(next_seq) == i64::from(last_seq) + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStates {
    producers: BTreeMap<i64, ProducerEntry>,
    /// Aborted transactions, oldest first, until retention removes their batches.
    #[serde(default)]
    aborted: Vec<AbortedTxn>,
    /// Producers whose state was removed (expiry, their batches deleted), newest `FORGOTTEN_MAX`.
    #[serde(default)]
    forgotten: BTreeSet<i64>,
    /// Every id at or below this may have been forgotten without being in `forgotten`: the
    /// set overflowed, or the state was rebuilt without its history (-1: none). A snapshot
    /// written before this field existed has lost its history.
    #[serde(default = "history_lost")]
    forgotten_up_to: i64,
    /// How many batches each producer keeps: `BATCHES_RETAINED` but for a simulation mutant.
    #[serde(skip)]
    window_override: Option<usize>,
}

fn history_lost() -> i64 {
    i64::MAX
}

impl Default for ProducerStates {
    fn default() -> ProducerStates {
        ProducerStates {
            producers: BTreeMap::new(),
            aborted: Vec::new(),
            forgotten: BTreeSet::new(),
            forgotten_up_to: -1,
            window_override: None,
        }
    }
}

impl ProducerStates {
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&i64, &ProducerEntry)> {
        self.producers.iter()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    fn window(&self) -> usize {
        if crate::mutant!(DedupeWindowOfOne) { 1 } else { self.window_override.unwrap_or(BATCHES_RETAINED) }
    }

    /// Takes one event; whether anything changed (a fence of a producer already fenced, or an
    /// expiry that forgets nobody, changes nothing).
    pub fn transition(&mut self, event: Event) -> bool {
        let changed = match event {
            Event::Batch { header, base_offset } => self.on_batch(header, base_offset),
            Event::Marker { producer_id, producer_epoch, marker, offset } => {
                self.on_marker(producer_id, producer_epoch, marker, offset)
            }
            Event::Fence { producer_id, producer_epoch } => self.on_fence(producer_id, producer_epoch),
            Event::Expire { now_ms, expiration_ms } => self.on_expire(now_ms, expiration_ms),
            Event::LogStartMoved { log_start_offset } => self.on_log_start_moved(log_start_offset),
            Event::HistoryLost => {
                let changed = self.forgotten_up_to != i64::MAX;
                self.forgotten_up_to = i64::MAX;
                changed
            }
        };
        // What the event touched; the whole state with debug assertions on (the simulator).
        match event {
            Event::Batch { header, .. } => self.check_producer(header.producer_id),
            Event::Marker { producer_id, .. } | Event::Fence { producer_id, .. } => self.check_producer(producer_id),
            Event::Expire { .. } | Event::LogStartMoved { .. } | Event::HistoryLost => self.check_forgotten(),
        }
        self.check_aborted_tail();
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
        changed
    }

    /// What every transition leaves true, of every producer and of the aborted index.
    pub fn check_invariants(&self) {
        if let Some(invariant) = self.broken() {
            panic!("{invariant}");
        }
    }

    /// Which invariant is broken, if any: how a state read from a file (a snapshot) is judged
    /// before it is trusted.
    pub fn broken(&self) -> Option<&'static str> {
        let window = self.window();
        if let Some(invariant) = self.producers.values().find_map(|e| e.broken(window)) {
            return Some(invariant);
        }
        if let Some(invariant) = self.forgotten_broken() {
            return Some(invariant);
        }
        if !self.aborted.iter().all(|a| a.first_offset < a.last_offset) {
            return Some("an aborted range ends at its marker");
        }
        if !self.aborted.windows(2).all(|pair| pair[0].last_offset < pair[1].last_offset) {
            return Some("aborted transactions are kept in marker order");
        }
        None
    }

    fn forgotten_broken(&self) -> Option<&'static str> {
        if self.forgotten.len() > FORGOTTEN_MAX {
            return Some("the forgotten producers are bounded");
        }
        if self.forgotten.iter().any(|pid| self.producers.contains_key(pid)) {
            return Some("a forgotten producer has no state");
        }
        None
    }

    fn check_forgotten(&self) {
        if let Some(invariant) = self.forgotten_broken() {
            panic!("{invariant}");
        }
    }

    /// Whether this partition may once have had state for `producer_id` and removed it.
    fn may_have_forgotten(&self, producer_id: i64) -> bool {
        producer_id <= self.forgotten_up_to || self.forgotten.contains(&producer_id)
    }

    /// Remembers that `producer_id`'s state was removed; the oldest id makes room.
    fn forget(&mut self, producer_id: i64) {
        self.forgotten.insert(producer_id);
        while self.forgotten.len() > FORGOTTEN_MAX {
            let oldest = self.forgotten.pop_first().expect("not empty");
            self.forgotten_up_to = self.forgotten_up_to.max(oldest);
        }
    }

    fn check_producer(&self, producer_id: i64) {
        if let Some(entry) = self.producers.get(&producer_id) {
            entry.check_invariants(self.window());
        }
    }

    /// The newest aborted range, the only one a transition adds.
    fn check_aborted_tail(&self) {
        if let Some(a) = self.aborted.last() {
            assert!(a.first_offset < a.last_offset, "an aborted range ends at its marker");
        }
        if let [.., before, last] = self.aborted.as_slice() {
            assert!(before.last_offset < last.last_offset, "aborted transactions are kept in marker order");
        }
    }

    /// Classifies a batch with a producer id (`header.producer_id >= 0`) before it is appended.
    pub fn check(&self, header: &BatchHeader) -> Verdict {
        debug_assert!(header.producer_id >= 0);
        let Some(entry) = self.producers.get(&header.producer_id) else {
            return match header.base_sequence == 0 || self.may_have_forgotten(header.producer_id) {
                true => Verdict::Append,
                false => Verdict::UnknownProducerId,
            };
        };
        let first_seq = header.base_sequence;
        let last_seq = last_sequence(first_seq, header.last_offset_delta);
        if header.producer_epoch == entry.producer_epoch
            && let Some(dup) = entry.batches.iter().find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
        {
            return Verdict::Duplicate { base_offset: dup.base_offset };
        }
        if header.producer_epoch < entry.producer_epoch {
            return Verdict::InvalidProducerEpoch;
        }
        if header.producer_epoch != entry.producer_epoch {
            return if first_seq == 0 { Verdict::Append } else { Verdict::OutOfOrderSequence };
        }
        match entry.last_seq() {
            Some(last) if !in_sequence(last, first_seq) => Verdict::OutOfOrderSequence,
            _ => Verdict::Append,
        }
    }

    fn on_batch(&mut self, header: &BatchHeader, base_offset: i64) -> bool {
        if header.producer_id < 0 {
            return false;
        }
        let window = self.window();
        self.forgotten.remove(&header.producer_id);
        let entry = self.producers.entry(header.producer_id).or_insert_with(|| ProducerEntry {
            producer_epoch: header.producer_epoch,
            batches: VecDeque::new(),
            last_timestamp: header.max_timestamp,
            current_txn_first_offset: None,
        });
        if header.is_transactional() {
            entry.current_txn_first_offset.get_or_insert(base_offset);
        }
        if header.producer_epoch != entry.producer_epoch {
            // A new epoch starts a new sequence: the old window means nothing for it.
            entry.producer_epoch = header.producer_epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(BatchMetadata {
            first_seq: header.base_sequence,
            last_seq: last_sequence(header.base_sequence, header.last_offset_delta),
            base_offset,
            last_offset: base_offset + i64::from(header.last_offset_delta),
            max_timestamp: header.max_timestamp,
        });
        while entry.batches.len() > window {
            entry.batches.pop_front();
        }
        entry.last_timestamp = entry.last_timestamp.max(header.max_timestamp);
        true
    }

    /// Classifies a marker of `producer_epoch` before it is appended.
    pub fn check_marker(&self, producer_id: i64, producer_epoch: i16) -> MarkerVerdict {
        match self.producers.get(&producer_id) {
            Some(entry) if producer_epoch < entry.producer_epoch => MarkerVerdict::InvalidProducerEpoch,
            _ => MarkerVerdict::Append,
        }
    }

    /// The producer's open transaction here (if any) ends, and an aborted one joins the index.
    /// A marker of a newer epoch (a coordinator that fenced the producer) moves the producer to
    /// it: the old epoch is fenced here too, and the new one starts its sequence at 0.
    fn on_marker(&mut self, producer_id: i64, producer_epoch: i16, marker: Marker, offset: i64) -> bool {
        self.forgotten.remove(&producer_id);
        let entry = self.producers.entry(producer_id).or_insert_with(|| ProducerEntry {
            producer_epoch,
            batches: VecDeque::new(),
            last_timestamp: -1,
            current_txn_first_offset: None,
        });
        if producer_epoch > entry.producer_epoch {
            entry.producer_epoch = producer_epoch;
            entry.batches.clear();
        }
        if let Some(first_offset) = entry.current_txn_first_offset.take()
            && marker == Marker::Abort
        {
            assert!(first_offset < offset, "a transaction's marker follows its batches");
            self.aborted.push(AbortedTxn { producer_id, first_offset, last_offset: offset });
        }
        assert!(self.producers[&producer_id].current_txn_first_offset.is_none(), "a marker ends the transaction");
        true
    }

    /// Batches of older epochs are refused from now on. Nothing happens to an unknown producer,
    /// one already at `producer_epoch` or later, or one with a transaction open here (its
    /// marker moves it).
    fn on_fence(&mut self, producer_id: i64, producer_epoch: i16) -> bool {
        match self.producers.get_mut(&producer_id) {
            Some(entry) if entry.producer_epoch < producer_epoch && entry.current_txn_first_offset.is_none() => {
                entry.producer_epoch = producer_epoch;
                entry.batches.clear();
                assert!(entry.batches.is_empty() && entry.producer_epoch == producer_epoch, "fenced to the new epoch");
                true
            }
            _ => false,
        }
    }

    /// The first offset of the producer's transaction open in this partition, if any.
    pub fn ongoing_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.producers.get(&producer_id)?.current_txn_first_offset
    }

    /// The epoch of a producer whose transaction is open in this partition.
    pub fn ongoing_epoch(&self, producer_id: i64) -> Option<i16> {
        let entry = self.producers.get(&producer_id)?;
        entry.current_txn_first_offset.map(|_| entry.producer_epoch)
    }

    /// The first offset of the oldest open transaction: the last stable offset is never past it.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.producers.values().filter_map(|e| e.current_txn_first_offset).min()
    }

    /// The producers with an open transaction here, and its first offset.
    pub fn ongoing(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().filter(|(_, e)| e.current_txn_first_offset.is_some()).map(|(pid, e)| (*pid, e))
    }

    /// The aborted transactions whose range meets `[from, to)`: what a read_committed fetch of
    /// that range must be told.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.aborted.iter().filter(|a| a.last_offset >= from && a.first_offset < to).copied().collect()
    }

    /// Forgets producers idle (by their batches' timestamps) for `expiration_ms`; never one
    /// with an open transaction.
    fn on_expire(&mut self, now_ms: i64, expiration_ms: i64) -> bool {
        self.forget_where(|e| now_ms.saturating_sub(e.last_timestamp) >= expiration_ms)
    }

    /// Removes, and remembers as forgotten, every producer `gone` picks that has no
    /// transaction open here; whether there was one.
    fn forget_where(&mut self, gone: impl Fn(&ProducerEntry) -> bool) -> bool {
        let ids: Vec<i64> = self
            .producers
            .iter()
            .filter(|(_, e)| e.current_txn_first_offset.is_none() && gone(e))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in &ids {
            self.producers.remove(pid);
            self.forget(*pid);
        }
        !ids.is_empty()
    }

    /// Forgets the producers whose every batch lies below `log_start_offset`, as Apache does
    /// when it removes their segments, and the aborted transactions that ended there.
    fn on_log_start_moved(&mut self, log_start_offset: i64) -> bool {
        let forgot = self.forget_where(|e| e.batches.back().is_some_and(|b| b.last_offset < log_start_offset));
        let aborted = self.aborted.len();
        self.aborted.retain(|a| a.last_offset >= log_start_offset);
        assert!(
            self.producers.values().all(|e| e.current_txn_first_offset.is_some()
                || e.batches.back().is_none_or(|b| b.last_offset >= log_start_offset)),
            "no producer is kept whose batches are all gone"
        );
        forgot || aborted != self.aborted.len()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The header of a batch of `records` records from a producer.
    pub(crate) fn batch(producer_id: i64, producer_epoch: i16, base_sequence: i32, records: i32) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 100,
            partition_leader_epoch: -1,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 1000,
            max_timestamp: 1000,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count: records,
        }
    }

    #[test]
    fn a_retry_within_the_window_is_a_duplicate_with_its_original_offset() {
        let mut states = ProducerStates::default();
        for (i, seq) in [0, 3, 6, 9, 12, 15].iter().enumerate() {
            let b = batch(7, 0, *seq, 3);
            assert_eq!(states.check(&b), Verdict::Append);
            states.transition(Event::Batch { header: &b, base_offset: 100 + 3 * i as i64 });
        }
        assert_eq!(states.check(&batch(7, 0, 3, 3)), Verdict::Duplicate { base_offset: 103 });
        assert_eq!(states.check(&batch(7, 0, 15, 3)), Verdict::Duplicate { base_offset: 115 });
        assert_eq!(states.check(&batch(7, 0, 0, 3)), Verdict::OutOfOrderSequence, "older than the 5 retained");
        assert_eq!(states.check(&batch(7, 0, 4, 2)), Verdict::OutOfOrderSequence, "a different range");
        assert_eq!(states.check(&batch(7, 0, 19, 1)), Verdict::OutOfOrderSequence, "a gap");
        assert_eq!(states.check(&batch(7, 0, 18, 1)), Verdict::Append);
    }

    #[test]
    fn epochs_fence_and_restart_the_sequence() {
        let mut states = ProducerStates::default();
        states.transition(Event::Batch { header: &batch(7, 3, 0, 5), base_offset: 0 });
        assert_eq!(states.check(&batch(7, 2, 5, 1)), Verdict::InvalidProducerEpoch);
        assert_eq!(states.check(&batch(7, 4, 5, 1)), Verdict::OutOfOrderSequence, "a new epoch starts at 0");
        assert_eq!(states.check(&batch(7, 4, 0, 1)), Verdict::Append);
        states.transition(Event::Batch { header: &batch(7, 4, 0, 1), base_offset: 5 });
        assert_eq!(states.check(&batch(7, 3, 0, 5)), Verdict::InvalidProducerEpoch, "the old duplicate is fenced too");
        assert_eq!(states.get(7).unwrap().batches.len(), 1);
    }

    #[test]
    fn an_unknown_producer_starts_at_zero_and_sequences_wrap() {
        let mut states = ProducerStates::default();
        assert_eq!(states.check(&batch(9, 0, 4, 2)), Verdict::UnknownProducerId);
        assert_eq!(states.check(&batch(9, 0, 0, 2)), Verdict::Append);
        // Rebuilding from the log takes whatever the log holds.
        let b = batch(9, 0, i32::MAX - 1, 2);
        states.transition(Event::Batch { header: &b, base_offset: 10 });
        assert_eq!(states.get(9).unwrap().last_seq(), Some(i32::MAX));
        assert_eq!(states.check(&batch(9, 0, 1, 1)), Verdict::OutOfOrderSequence);
        assert_eq!(states.check(&batch(9, 0, 0, 1)), Verdict::Append, "wraps to 0 after i32::MAX");
        assert_eq!(last_sequence(i32::MAX, 2), 1);
    }

    fn transactional(producer_id: i64, producer_epoch: i16, base_sequence: i32, records: i32) -> BatchHeader {
        BatchHeader { attributes: 0x10, ..batch(producer_id, producer_epoch, base_sequence, records) }
    }

    #[test]
    fn transactions_hold_the_first_unstable_offset_until_their_marker() {
        let mut states = ProducerStates::default();
        states.transition(Event::Batch { header: &transactional(1, 0, 0, 2), base_offset: 10 });
        states.transition(Event::Batch { header: &transactional(2, 0, 0, 1), base_offset: 12 });
        states.transition(Event::Batch { header: &transactional(1, 0, 2, 1), base_offset: 13 });
        assert_eq!(states.first_unstable_offset(), Some(10));
        assert_eq!((states.ongoing_epoch(1), states.ongoing_first_offset(2)), (Some(0), Some(12)));
        states.transition(Event::Marker { producer_id: 1, producer_epoch: 0, marker: Marker::Abort, offset: 14 });
        assert_eq!(states.first_unstable_offset(), Some(12), "the oldest open transaction now");
        assert_eq!(
            states.aborted_between(0, 100),
            vec![AbortedTxn { producer_id: 1, first_offset: 10, last_offset: 14 }]
        );
        assert!(states.aborted_between(15, 100).is_empty() && states.aborted_between(0, 10).is_empty());
        states.transition(Event::Marker { producer_id: 2, producer_epoch: 0, marker: Marker::Commit, offset: 15 });
        assert_eq!(states.first_unstable_offset(), None);
        assert_eq!(states.aborted_between(0, 100).len(), 1, "a commit is not indexed");
        // A marker of a newer epoch (the coordinator fenced the producer) moves it there.
        assert_eq!(states.check_marker(2, 0), MarkerVerdict::Append);
        states.transition(Event::Marker { producer_id: 2, producer_epoch: 3, marker: Marker::Abort, offset: 16 });
        assert_eq!(states.check(&transactional(2, 0, 1, 1)), Verdict::InvalidProducerEpoch);
        assert_eq!(states.check_marker(2, 2), MarkerVerdict::InvalidProducerEpoch);
        // The fence bumps a producer with no open transaction, and only upwards.
        let fence = |states: &mut ProducerStates, producer_id, producer_epoch| {
            states.transition(Event::Fence { producer_id, producer_epoch })
        };
        assert!(fence(&mut states, 1, 4) && !fence(&mut states, 1, 2) && !fence(&mut states, 99, 1));
        assert_eq!(states.check(&batch(1, 3, 3, 1)), Verdict::InvalidProducerEpoch);
        states.transition(Event::LogStartMoved { log_start_offset: 15 });
        assert!(states.aborted_between(0, 100).is_empty(), "retention forgets aborted transactions");
    }

    #[test]
    fn idle_producers_expire_and_deleted_ones_are_forgotten() {
        let mut states = ProducerStates::default();
        states.transition(Event::Batch { header: &batch(1, 0, 0, 1), base_offset: 0 });
        let mut late = batch(2, 0, 0, 1);
        late.max_timestamp = 5000;
        states.transition(Event::Batch { header: &late, base_offset: 1 });
        let known = states.len();
        assert!(states.transition(Event::Expire { now_ms: 1000 + 3000, expiration_ms: 3000 }));
        assert_eq!(states.len(), known - 1);
        assert!(states.get(1).is_none() && states.get(2).is_some());
        states.transition(Event::LogStartMoved { log_start_offset: 2 });
        assert!(states.is_empty());
    }

    /// A producer whose state was removed goes on at its own sequence, as Apache lets it
    /// (its client never learns of the removal); one never known must still start at 0.
    #[test]
    fn a_forgotten_producer_continues_at_any_sequence_a_stranger_starts_at_zero() {
        let mut states = ProducerStates::default();
        states.transition(Event::Batch { header: &batch(7, 0, 0, 5), base_offset: 0 });
        states.transition(Event::LogStartMoved { log_start_offset: 5 });
        assert!(states.get(7).is_none());
        assert_eq!(states.check(&batch(7, 0, 5, 1)), Verdict::Append);
        assert_eq!(states.check(&batch(8, 0, 5, 1)), Verdict::UnknownProducerId);
        // Known again from its next batch: the usual checks apply.
        states.transition(Event::Batch { header: &batch(7, 0, 5, 1), base_offset: 5 });
        assert_eq!(states.check(&batch(7, 0, 9, 1)), Verdict::OutOfOrderSequence);
        // Expiry forgets too, and a snapshot keeps what was forgotten.
        let mut late = batch(9, 0, 0, 1);
        late.max_timestamp = 9000;
        states.transition(Event::Batch { header: &late, base_offset: 6 });
        states.transition(Event::Expire { now_ms: 9000 + 1, expiration_ms: 1 });
        let restored =
            crate::partition::producer::snapshot::decode(&crate::partition::producer::snapshot::encode(&states))
                .unwrap();
        assert_eq!(restored.check(&batch(9, 0, 1, 1)), Verdict::Append);
        assert_eq!(restored.check(&batch(10, 0, 1, 1)), Verdict::UnknownProducerId);
    }

    /// Past `FORGOTTEN_MAX` the oldest ids are remembered as a bound; a state rebuilt with no
    /// history (no snapshot, the log start moved) counts every producer as possibly forgotten.
    #[test]
    fn forgotten_ids_are_bounded_and_a_lost_history_forgets_everyone() {
        let mut states = ProducerStates::default();
        let count = FORGOTTEN_MAX as i64 + 10;
        for pid in 0..count {
            states.transition(Event::Batch { header: &batch(pid, 0, 0, 1), base_offset: pid });
        }
        states.transition(Event::LogStartMoved { log_start_offset: count });
        assert!(states.is_empty());
        assert_eq!(states.forgotten.len(), FORGOTTEN_MAX);
        assert_eq!(states.check(&batch(3, 0, 1, 1)), Verdict::Append);
        assert_eq!(states.check(&batch(count - 1, 0, 1, 1)), Verdict::Append);
        assert_eq!(states.check(&batch(count, 0, 1, 1)), Verdict::UnknownProducerId);
        let mut rebuilt = ProducerStates::default();
        assert_eq!(rebuilt.check(&batch(3, 0, 1, 1)), Verdict::UnknownProducerId);
        assert!(rebuilt.transition(Event::HistoryLost));
        assert_eq!(rebuilt.check(&batch(3, 0, 1, 1)), Verdict::Append);
    }
}
