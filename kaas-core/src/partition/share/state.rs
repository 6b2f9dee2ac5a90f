//! One share partition's in-flight window (KIP-932), pure: no I/O, no clock (time is passed in).
//! A share partition is a (share group, topic-partition); the partition actor owns its window
//! beside the log it reads, and asks this state what to deliver, records acknowledgements, and
//! writes it to the volume (`file`) before anything it changed is answered.
//!
//! Every offset below the share-partition start offset (SPSO, `start_offset`) is done
//! (acknowledged or archived); every offset from the window's end (`end_offset`) on is
//! available and was never delivered; each offset between has an entry, in one of these states:
//!
//! ```text
//!                    acquire                 accept                (window start passes it)
//!   Available ─────────────────▶ Acquired ─────────────▶ Acknowledged ──────────────▶ gone
//!       ▲   ◀──────────────────── │  │  │ reject, gap, release at the limit
//!       │      release, lock      │  │  └──────────────────────▶ Archived ──────────▶ gone
//!       │      expiry, member     │  │                              ▲
//!       │      gone               │  │ TxnShareAcknowledge (KIP-1289)│ commit (reject)
//!       │                         │  ▼                              │
//!       └────────── abort ───── TxPending ──── commit (accept) ─────┴──▶ Acknowledged
//! ```
//!
//! - KIP-1191: with a dead-letter queue configured for the group, a record rejected or at its
//!   delivery limit is Archiving first (Apache's ARCHIVING, 3), written so, and Archived once
//!   the dead-letter queue has it (`Event::DeadLettered`), or once writing it there failed for
//!   good (as Apache, which archives regardless). Gaps and control batches are archived at once.
//!
//! - A record is acquired by one member at a time, under an acquisition lock that runs out
//!   after `lock_duration_ms`; its delivery count goes up by one at every acquisition, and a
//!   record whose count reached `delivery_count_limit` is archived instead of made available
//!   again (or, if it is found available at the limit, instead of being acquired).
//! - KIP-1289: TxnShareAcknowledge moves a member's acquired records to TxPending, inside a
//!   producer's transaction. Their lock is cancelled (the transaction timeout bounds the hold
//!   now) and nothing but the transaction's end moves them: COMMIT makes them acknowledged (or
//!   archived, for a reject), ABORT makes them available again (archived at the limit, as a
//!   release is). A marker of an older producer epoch than the staging is a fenced decision and
//!   ends nothing.
//! - Offsets that hold no record to deliver (control batches, records of aborted transactions
//!   under read_committed, gaps) are archived as the window passes them.
//!
//! Every change goes through `apply`, which checks the invariants at its end.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// KIP-932's record states, with their ids on the wire and in Apache's state records, and
/// KIP-1289's TX_PENDING (5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    /// KIP-1191: on its way to the group's dead-letter queue.
    Archiving,
    Archived,
    TxPending,
}

impl RecordState {
    pub fn id(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archiving => 3,
            RecordState::Archived => 4,
            RecordState::TxPending => 5,
        }
    }

    /// Done with: the window start may pass it.
    pub fn is_terminal(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }

    /// The moves of the diagram; anything else is a bug in the caller.
    fn may_become(self, next: RecordState) -> bool {
        use RecordState::*;
        matches!(
            (self, next),
            (Available, Acquired | Archiving | Archived)
                | (Acquired, Available | Acknowledged | Archiving | Archived | TxPending)
                | (TxPending, Available | Acknowledged | Archiving | Archived)
                | (Archiving, Archived)
        )
    }
}

/// How a member acknowledges a record (ShareAcknowledge's AcknowledgeTypes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AckType {
    /// 0: the offset holds no record.
    Gap,
    /// 1: processed.
    Accept,
    /// 2: give it back, to be delivered again.
    Release,
    /// 3: never to be delivered again.
    Reject,
    /// 4: keep it, with a fresh lock (KIP-1222).
    Renew,
}

impl AckType {
    pub fn from_id(id: i8) -> Option<AckType> {
        match id {
            0 => Some(AckType::Gap),
            1 => Some(AckType::Accept),
            2 => Some(AckType::Release),
            3 => Some(AckType::Reject),
            4 => Some(AckType::Renew),
            _ => None,
        }
    }
}

/// How ShareFetch asks records to be acquired (KIP-1206).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireMode {
    /// Whole log batches, so that a client's acknowledgements line up with them: may go past
    /// `max_records` to the end of a batch.
    BatchOptimized,
    /// At most `max_records` records, splitting a batch if it must.
    RecordLimit,
}

/// A share group's settings that the window follows, as the group's configs and the broker's
/// defaults give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareSettings {
    pub lock_duration_ms: i64,
    pub delivery_count_limit: u16,
    /// Offsets in the window at most (`group.share.partition.max.record.locks`): no record
    /// past it is acquired until the start moves.
    pub max_in_flight: i64,
    /// KIP-1191: the group has a dead-letter queue (`errors.deadletterqueue.topic.name`), so
    /// what is rejected or reaches the delivery limit goes there before it is archived.
    pub dead_letter: bool,
}

/// What the pending acknowledgement of a TxPending record does when its transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Staged {
    Accept,
    Reject,
}

/// The transaction holding a TxPending record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedIn {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub outcome: Staged,
}

/// One offset of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub state: RecordState,
    pub delivery_count: u16,
    /// Who acquired it (Acquired, TxPending).
    pub member: Option<Arc<str>>,
    /// When its acquisition lock runs out (Acquired).
    pub lock_expires_ms: Option<i64>,
    /// The transaction it waits for (TxPending).
    pub staged: Option<StagedIn>,
}

impl InFlight {
    fn available(delivery_count: u16) -> InFlight {
        InFlight { state: RecordState::Available, delivery_count, member: None, lock_expires_ms: None, staged: None }
    }

    fn done(state: RecordState, delivery_count: u16) -> InFlight {
        debug_assert!(state.is_terminal());
        InFlight { state, delivery_count, member: None, lock_expires_ms: None, staged: None }
    }

    /// Done with for good, or (KIP-1191) first sent to the dead-letter queue.
    fn dead(delivery_count: u16, dead_letter: bool) -> InFlight {
        match dead_letter && !crate::mutant!(ShareDeadLetterSkipped) {
            true => InFlight {
                state: RecordState::Archiving,
                delivery_count,
                member: None,
                lock_expires_ms: None,
                staged: None,
            },
            false => InFlight::done(RecordState::Archived, delivery_count),
        }
    }

    fn acquired_by(&self, member: &str) -> bool {
        self.state == RecordState::Acquired && self.member.as_deref() == Some(member)
    }

    /// Which invariant of one entry is broken, if any.
    fn broken(&self) -> Option<&'static str> {
        let (member, lock, staged) = (self.member.is_some(), self.lock_expires_ms.is_some(), self.staged.is_some());
        let holds = match self.state {
            RecordState::Acquired => member && lock && !staged && self.delivery_count >= 1,
            RecordState::TxPending => {
                member && (!lock || crate::mutant!(SharePendingLockExpires)) && staged && self.delivery_count >= 1
            }
            RecordState::Available | RecordState::Acknowledged | RecordState::Archiving | RecordState::Archived => {
                !member && !lock && !staged
            }
        };
        (!holds).then_some("an entry's member, lock and transaction are those of its state")
    }
}

/// A batch of the log as the window sees it: its offsets, and whether it holds records to
/// deliver (a control batch does not, nor, under read_committed, an aborted transaction's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub deliverable: bool,
}

/// Offsets acquired together, with their delivery count (ShareFetch's AcquiredRecords).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquiredRange {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: u16,
}

impl AcquiredRange {
    /// Adds `range` after the last of `ranges`, as part of it when it continues it with the
    /// same delivery count: a ShareFetch answers as few ranges as it can.
    pub fn append(ranges: &mut Vec<AcquiredRange>, range: AcquiredRange) {
        match ranges.last_mut() {
            Some(r) if r.last_offset + 1 == range.first_offset && r.delivery_count == range.delivery_count => {
                r.last_offset = range.last_offset
            }
            _ => ranges.push(range),
        }
    }
}

/// One range of an acknowledgement: per offset, or one type for the whole range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub types: Vec<AckType>,
}

impl AckBatch {
    fn type_at(&self, offset: i64) -> AckType {
        match self.types.as_slice() {
            [one] => *one,
            many => many[(offset - self.first_offset) as usize],
        }
    }
}

/// Records on their way to the dead-letter queue (KIP-1191): a run of Archiving offsets with
/// one delivery count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterRange {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: u16,
}

/// Why an acknowledgement changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckError {
    /// INVALID_RECORD_STATE (121): a record of the range is not acquired by the member.
    InvalidRecordState,
    /// INVALID_REQUEST (42): the range or its types make no sense (a release inside a
    /// transaction, say).
    InvalidRequest,
}

/// Everything that changes a share partition's window.
#[derive(Debug)]
pub enum Event<'a> {
    /// `member` takes what it may of `batches` (read from the log at `next_fetch_offset`).
    Acquire { member: &'a str, batches: &'a [LogBatch], max_records: usize, mode: AcquireMode, now_ms: i64 },
    /// `member` acknowledges ranges it acquired; `renew_allowed` from ShareAcknowledge v2.
    Acknowledge { member: &'a str, batches: &'a [AckBatch], renew_allowed: bool, now_ms: i64 },
    /// Acquisition locks that ran out by `now_ms` are let go.
    Expire { now_ms: i64 },
    /// The member left, or its session ended: what it acquired is let go.
    ReleaseMember { member: &'a str },
    /// KIP-1289: `member`'s acquired records wait for the producer's transaction.
    Stage { member: &'a str, producer_id: i64, producer_epoch: i16, batches: &'a [AckBatch] },
    /// The transaction's marker: what it staged is acknowledged (commit) or let go (abort).
    CompleteTxn { producer_id: i64, producer_epoch: i16, commit: bool },
    /// Nothing below `offset` is readable any more (retention, DeleteRecords), or an admin
    /// moved the start (AlterShareGroupOffsets, on an empty group).
    StartAt { offset: i64 },
    /// The group's settings changed.
    Settings(ShareSettings),
    /// KIP-1191: the dead-letter queue has the Archiving records of the range (or writing them
    /// there failed for good): they are archived.
    DeadLettered { first_offset: i64, last_offset: i64 },
}

/// What an event did, for the caller to answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub acquired: Vec<AcquiredRange>,
    /// The result of an acknowledgement or a staging: every range of it, or none.
    pub ack: Option<Result<(), AckError>>,
    /// Whether anything that must be durable before it is answered changed (an acquisition's
    /// delivery count, an acknowledgement, a staging, a transaction's end, the start).
    pub durable_change: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareWindow {
    start_offset: i64,
    end_offset: i64,
    records: BTreeMap<i64, InFlight>,
    settings: ShareSettings,
}

impl ShareWindow {
    /// A window starting at `start_offset` (share.auto.offset.reset, or the state on the
    /// volume), nothing delivered yet.
    pub fn new(start_offset: i64, settings: ShareSettings) -> ShareWindow {
        assert!(start_offset >= 0, "a start offset is an offset");
        let window = ShareWindow { start_offset, end_offset: start_offset, records: BTreeMap::new(), settings };
        window.check_invariants();
        window
    }

    /// A window as the volume keeps it. What was acquired is available again (its lock was
    /// this broker's or a previous owner's, and is gone), with its delivery count; what waits
    /// for a transaction still does. `None`: the entries break an invariant (a damaged file).
    pub fn restore(
        start_offset: i64,
        entries: impl IntoIterator<Item = (i64, InFlight)>,
        settings: ShareSettings,
    ) -> Option<ShareWindow> {
        let mut records = BTreeMap::new();
        let mut next = start_offset;
        for (offset, mut entry) in entries {
            if offset != next {
                return None;
            }
            if entry.state == RecordState::Acquired {
                entry = InFlight::available(entry.delivery_count);
            }
            entry.broken().is_none().then_some(())?;
            records.insert(offset, entry);
            next += 1;
        }
        let mut window = ShareWindow { start_offset, end_offset: next, records, settings };
        window.advance();
        window.broken().is_none().then_some(window)
    }

    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    pub fn settings(&self) -> ShareSettings {
        self.settings
    }

    /// Every offset of the window and its entry, in order.
    pub fn entries(&self) -> impl Iterator<Item = (i64, &InFlight)> {
        self.records.iter().map(|(o, e)| (*o, e))
    }

    /// Where the next acquisition reads the log from: the first available offset of the
    /// window, or its end.
    pub fn next_fetch_offset(&self) -> i64 {
        self.records
            .iter()
            .find(|(_, e)| e.state == RecordState::Available)
            .map_or(self.end_offset, |(offset, _)| *offset)
    }

    /// Whether anything may be acquired without reading past the window's end: an available
    /// record, or room for new ones.
    pub fn can_acquire(&self) -> bool {
        self.records.values().any(|e| e.state == RecordState::Available) || self.has_room()
    }

    fn has_room(&self) -> bool {
        self.end_offset - self.start_offset < self.settings.max_in_flight
    }

    /// When the earliest acquisition lock runs out, if any record is acquired.
    pub fn next_lock_expiry_ms(&self) -> Option<i64> {
        self.records.values().filter_map(|e| e.lock_expires_ms).min()
    }

    /// The records acquired and not yet acknowledged (in-flight, for lag), and those waiting
    /// for a transaction.
    pub fn count_in(&self, state: RecordState) -> usize {
        self.records.values().filter(|e| e.state == state).count()
    }

    /// The runs of records on their way to the dead-letter queue (KIP-1191).
    pub fn dead_letters(&self) -> Vec<DeadLetterRange> {
        let mut ranges: Vec<DeadLetterRange> = Vec::new();
        for (&offset, entry) in self.records.iter().filter(|(_, e)| e.state == RecordState::Archiving) {
            match ranges.last_mut() {
                Some(r) if r.last_offset + 1 == offset && r.delivery_count == entry.delivery_count => {
                    r.last_offset = offset
                }
                _ => ranges.push(DeadLetterRange {
                    first_offset: offset,
                    last_offset: offset,
                    delivery_count: entry.delivery_count,
                }),
            }
        }
        ranges
    }

    /// The one transition of the window.
    pub fn apply(&mut self, event: Event) -> Outcome {
        let mut outcome = Outcome::default();
        match event {
            Event::Acquire { member, batches, max_records, mode, now_ms } => {
                let archived = |w: &Self| w.count_in(RecordState::Archived) + w.count_in(RecordState::Archiving);
                let archived_before = archived(self);
                outcome.acquired = self.acquire(member, batches, max_records, mode, now_ms);
                // Records archived on the way (a gap, a control batch, one at its delivery
                // limit), or sent towards the dead-letter queue, are as durable a change as
                // those acquired.
                outcome.durable_change = !outcome.acquired.is_empty() || archived(self) != archived_before;
            }
            Event::Acknowledge { member, batches, renew_allowed, now_ms } => {
                let allowed = |t: AckType| t != AckType::Renew || renew_allowed;
                let result = self.check_ranges(member, batches, allowed);
                if result.is_ok() {
                    batches.iter().for_each(|batch| self.acknowledge(member, batch, now_ms));
                }
                outcome.durable_change = result.is_ok() && !batches.is_empty();
                outcome.ack = Some(result);
            }
            Event::Expire { now_ms } => {
                let expired: Vec<i64> = self
                    .records
                    .iter()
                    .filter(|(_, e)| e.lock_expires_ms.is_some_and(|at| at <= now_ms))
                    .map(|(o, _)| *o)
                    .collect();
                for offset in expired {
                    let state = self.records[&offset].state;
                    if state == RecordState::Acquired
                        || (state == RecordState::TxPending && crate::mutant!(SharePendingLockExpires))
                    {
                        self.let_go(offset);
                        // A record let go at its delivery limit is archived, and the start may
                        // move past it: a reader of the file must see that too.
                        outcome.durable_change = true;
                    }
                }
            }
            Event::ReleaseMember { member } => {
                let held: Vec<i64> =
                    self.records.iter().filter(|(_, e)| e.acquired_by(member)).map(|(o, _)| *o).collect();
                outcome.durable_change = !held.is_empty();
                for offset in held {
                    self.let_go(offset);
                }
            }
            Event::Stage { member, producer_id, producer_epoch, batches } => {
                // A release has no place in a transaction: the records would be delivered again
                // whether it commits or not.
                let inside = |t: AckType| matches!(t, AckType::Gap | AckType::Accept | AckType::Reject);
                let result = self.check_ranges(member, batches, inside);
                if result.is_ok() {
                    batches.iter().for_each(|batch| self.stage(member, producer_id, producer_epoch, batch));
                }
                outcome.durable_change = result.is_ok() && !batches.is_empty();
                outcome.ack = Some(result);
            }
            Event::CompleteTxn { producer_id, producer_epoch, commit } => {
                outcome.durable_change = self.complete_txn(producer_id, producer_epoch, commit);
            }
            Event::StartAt { offset } => {
                outcome.durable_change = self.start_at(offset);
            }
            Event::DeadLettered { first_offset, last_offset } => {
                let sent: Vec<i64> = self
                    .records
                    .range(first_offset..=last_offset)
                    .filter(|(_, e)| e.state == RecordState::Archiving)
                    .map(|(o, _)| *o)
                    .collect();
                outcome.durable_change = !sent.is_empty();
                for offset in sent {
                    let count = self.records[&offset].delivery_count;
                    self.set(offset, InFlight::done(RecordState::Archived, count));
                }
            }
            Event::Settings(settings) => {
                assert!(settings.delivery_count_limit >= 1 && settings.max_in_flight >= 1, "settings were validated");
                self.settings = settings;
            }
        }
        self.advance();
        self.check_invariants();
        outcome
    }

    /// Moves an entry to its next state, by the diagram.
    fn set(&mut self, offset: i64, next: InFlight) {
        let entry = self.records.get_mut(&offset).expect("an offset of the window");
        assert!(entry.state.may_become(next.state), "illegal record transition {:?} -> {:?}", entry.state, next.state);
        assert!(next.delivery_count >= entry.delivery_count, "delivery counts never go back");
        *entry = next;
        debug_assert!(entry.broken().is_none(), "{offset}: {:?}", entry.broken());
    }

    /// An acquired (or staged, on abort) record goes back to the pool, or is archived once it
    /// was delivered as often as the group allows.
    fn let_go(&mut self, offset: i64) {
        let count = self.records[&offset].delivery_count;
        let next = match count >= self.settings.delivery_count_limit {
            true => InFlight::dead(count, self.settings.dead_letter),
            false => InFlight::available(count),
        };
        self.set(offset, next);
    }

    fn acquire(
        &mut self,
        member: &str,
        batches: &[LogBatch],
        max_records: usize,
        mode: AcquireMode,
        now_ms: i64,
    ) -> Vec<AcquiredRange> {
        let member: Arc<str> = Arc::from(member);
        let lock_expires_ms = now_ms.saturating_add(self.settings.lock_duration_ms);
        let mut acquired: Vec<AcquiredRange> = Vec::new();
        let mut taken = 0usize;
        for batch in batches {
            assert!(batch.base_offset <= batch.last_offset, "a batch's offsets run forward");
            // In either mode no batch is begun past the limit; a batch begun is finished only
            // in batch-optimized mode, so that acknowledgements can line up with it.
            if taken >= max_records {
                break;
            }
            // Offsets the log has no record for (compacted away, or gone below a moved start)
            // are gaps: nothing to deliver.
            while self.end_offset < batch.base_offset && self.has_room() {
                self.extend(InFlight::done(RecordState::Archived, 0));
            }
            // The window is full (the partition's lock cap): nothing past its end is taken in,
            // in this batch or the next.
            let full = |w: &Self, offset: i64| offset > w.end_offset || (offset == w.end_offset && !w.has_room());
            if full(self, batch.base_offset.max(self.start_offset)) {
                break;
            }
            for offset in batch.base_offset.max(self.start_offset)..=batch.last_offset {
                if mode == AcquireMode::RecordLimit && taken >= max_records {
                    break;
                }
                if full(self, offset) {
                    break;
                }
                if offset == self.end_offset {
                    self.extend(InFlight::available(0));
                }
                let entry = &self.records[&offset];
                if entry.state != RecordState::Available {
                    continue;
                }
                if !batch.deliverable {
                    // A control batch, or an aborted transaction's records under read_committed.
                    self.set(offset, InFlight::done(RecordState::Archived, entry.delivery_count));
                    continue;
                }
                if entry.delivery_count >= self.settings.delivery_count_limit {
                    self.set(offset, InFlight::dead(entry.delivery_count, self.settings.dead_letter));
                    continue;
                }
                let delivery_count = entry.delivery_count + 1;
                let next = InFlight {
                    state: RecordState::Acquired,
                    delivery_count,
                    member: Some(member.clone()),
                    lock_expires_ms: Some(lock_expires_ms),
                    staged: None,
                };
                self.set(offset, next);
                taken += 1;
                let range = AcquiredRange { first_offset: offset, last_offset: offset, delivery_count };
                AcquiredRange::append(&mut acquired, range);
            }
        }
        acquired
    }

    fn extend(&mut self, entry: InFlight) {
        self.records.insert(self.end_offset, entry);
        self.end_offset += 1;
    }

    /// Checks the ranges of one partition's acknowledgement, as Apache does before it changes
    /// anything: each runs forward, after the one before, with a type per offset or one for all,
    /// of the types `allowed`, and ends within the window (INVALID_REQUEST otherwise); every
    /// offset of it from the window's start on was acquired by `member` (INVALID_RECORD_STATE
    /// otherwise). Offsets below the start are done with: acknowledging them again is no error.
    fn check_ranges(
        &self,
        member: &str,
        batches: &[AckBatch],
        allowed: impl Fn(AckType) -> bool,
    ) -> Result<(), AckError> {
        let mut previous_last = -1;
        for batch in batches {
            let len = batch.last_offset.checked_sub(batch.first_offset).ok_or(AckError::InvalidRequest)?;
            let types_fit = batch.types.len() == 1 || batch.types.len() as i64 == len.saturating_add(1);
            if len < 0 || batch.first_offset < previous_last || batch.types.is_empty() || !types_fit {
                return Err(AckError::InvalidRequest);
            }
            if !batch.types.iter().all(|t| allowed(*t)) || batch.last_offset >= self.end_offset {
                return Err(AckError::InvalidRequest);
            }
            previous_last = batch.last_offset;
        }
        for batch in batches {
            for offset in batch.first_offset.max(self.start_offset)..=batch.last_offset {
                if !self.records[&offset].acquired_by(member) {
                    return Err(AckError::InvalidRecordState);
                }
            }
        }
        Ok(())
    }

    /// One checked range of an acknowledgement.
    fn acknowledge(&mut self, member: &str, batch: &AckBatch, now_ms: i64) {
        for offset in batch.first_offset.max(self.start_offset)..=batch.last_offset {
            let entry = &self.records[&offset];
            debug_assert!(entry.acquired_by(member), "checked");
            let count = entry.delivery_count;
            match batch.type_at(offset) {
                AckType::Accept => self.set(offset, InFlight::done(RecordState::Acknowledged, count)),
                AckType::Reject => self.set(offset, InFlight::dead(count, self.settings.dead_letter)),
                AckType::Gap => self.set(offset, InFlight::done(RecordState::Archived, count)),
                AckType::Release => self.let_go(offset),
                AckType::Renew => {
                    let entry = self.records.get_mut(&offset).expect("checked");
                    entry.lock_expires_ms = Some(now_ms.saturating_add(self.settings.lock_duration_ms));
                }
            }
        }
    }

    /// One checked range of a staging (KIP-1289).
    fn stage(&mut self, member: &str, producer_id: i64, producer_epoch: i16, batch: &AckBatch) {
        for offset in batch.first_offset.max(self.start_offset)..=batch.last_offset {
            let entry = &self.records[&offset];
            debug_assert!(entry.acquired_by(member), "checked");
            let outcome = match batch.type_at(offset) {
                // No record at the offset: nothing for the transaction to decide.
                AckType::Gap => {
                    self.set(offset, InFlight::done(RecordState::Archived, entry.delivery_count));
                    continue;
                }
                AckType::Accept => Staged::Accept,
                AckType::Reject => Staged::Reject,
                AckType::Release | AckType::Renew => unreachable!("checked"),
            };
            let next = InFlight {
                state: RecordState::TxPending,
                delivery_count: entry.delivery_count,
                member: entry.member.clone(),
                // The transaction holds the record now, not the lock.
                lock_expires_ms: entry.lock_expires_ms.filter(|_| crate::mutant!(SharePendingLockExpires)),
                staged: Some(StagedIn { producer_id, producer_epoch, outcome }),
            };
            self.set(offset, next);
        }
    }

    /// Whether any record was waiting for the transaction.
    fn complete_txn(&mut self, producer_id: i64, producer_epoch: i16, commit: bool) -> bool {
        let staged: Vec<(i64, StagedIn)> = self
            .records
            .iter()
            .filter_map(|(o, e)| e.staged.filter(|s| s.producer_id == producer_id).map(|s| (*o, s)))
            .collect();
        let mut changed = false;
        for (offset, staged) in staged {
            // A fenced coordinator's decision (an older epoch than the staging) ends nothing.
            if producer_epoch < staged.producer_epoch {
                continue;
            }
            let count = self.records[&offset].delivery_count;
            match (commit, staged.outcome) {
                (true, Staged::Accept) => self.set(offset, InFlight::done(RecordState::Acknowledged, count)),
                (true, Staged::Reject) => self.set(offset, InFlight::dead(count, self.settings.dead_letter)),
                (false, _) => self.let_go(offset),
            }
            changed = true;
        }
        changed
    }

    /// Moves the start to `offset` (never back): everything below it is done. Whether it moved.
    fn start_at(&mut self, offset: i64) -> bool {
        if offset <= self.start_offset {
            return false;
        }
        let kept = self.records.split_off(&offset);
        self.records = kept;
        self.start_offset = offset;
        self.end_offset = self.end_offset.max(offset);
        true
    }

    /// Passes the done records at the window's start.
    fn advance(&mut self) {
        while let Some(entry) = self.records.first_entry() {
            if !entry.get().state.is_terminal() {
                break;
            }
            entry.remove();
            self.start_offset += 1;
        }
    }

    /// Which invariant is broken, if any: what every transition leaves true, and how a state
    /// read from the volume is judged before it is trusted.
    pub fn broken(&self) -> Option<&'static str> {
        if self.start_offset < 0 || self.end_offset < self.start_offset {
            return Some("the window runs forward from a start offset");
        }
        if self.records.len() as i64 != self.end_offset - self.start_offset {
            return Some("every offset of the window has an entry");
        }
        if self.records.keys().next().is_some_and(|&first| first != self.start_offset) {
            return Some("the window's entries start at its start offset");
        }
        if self.records.values().next().is_some_and(|e| e.state.is_terminal()) {
            return Some("the start passes every record done with");
        }
        if let Some(why) = self.records.values().find_map(InFlight::broken) {
            return Some(why);
        }
        None
    }

    pub fn check_invariants(&self) {
        if let Some(why) = self.broken() {
            panic!("{why}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: ShareSettings =
        ShareSettings { lock_duration_ms: 30_000, delivery_count_limit: 3, max_in_flight: 100, dead_letter: false };

    fn batch(base_offset: i64, last_offset: i64) -> LogBatch {
        LogBatch { base_offset, last_offset, deliverable: true }
    }

    fn acquire(
        window: &mut ShareWindow,
        member: &str,
        batches: &[LogBatch],
        max_records: usize,
        now_ms: i64,
    ) -> Vec<AcquiredRange> {
        let event = Event::Acquire { member, batches, max_records, mode: AcquireMode::RecordLimit, now_ms };
        window.apply(event).acquired
    }

    fn ack(first_offset: i64, last_offset: i64, t: AckType) -> AckBatch {
        AckBatch { first_offset, last_offset, types: vec![t] }
    }

    fn acknowledge(window: &mut ShareWindow, member: &str, batches: &[AckBatch]) -> Result<(), AckError> {
        window.apply(Event::Acknowledge { member, batches, renew_allowed: true, now_ms: 0 }).ack.expect("answered")
    }

    fn range(first_offset: i64, last_offset: i64, delivery_count: u16) -> AcquiredRange {
        AcquiredRange { first_offset, last_offset, delivery_count }
    }

    #[test]
    fn a_record_is_acquired_by_one_member_at_a_time_and_accepted_ones_are_never_delivered_again() {
        let mut window = ShareWindow::new(10, SETTINGS);
        assert_eq!(acquire(&mut window, "a", &[batch(10, 14)], 3, 0), vec![range(10, 12, 1)]);
        assert_eq!(acquire(&mut window, "b", &[batch(10, 14)], 10, 0), vec![range(13, 14, 1)], "b gets the rest");
        assert_eq!(acknowledge(&mut window, "b", &[ack(10, 10, AckType::Accept)]), Err(AckError::InvalidRecordState));
        assert_eq!(acknowledge(&mut window, "a", &[ack(10, 11, AckType::Accept)]), Ok(()));
        assert_eq!(window.start_offset(), 12, "the start passes what is done");
        assert_eq!(acknowledge(&mut window, "a", &[ack(11, 11, AckType::Accept)]), Ok(()), "done already: no error");
        assert_eq!(
            acknowledge(&mut window, "a", &[ack(12, 15, AckType::Accept)]),
            Err(AckError::InvalidRequest),
            "past the window"
        );
        let backwards = [ack(12, 12, AckType::Accept), ack(10, 10, AckType::Accept)];
        assert_eq!(acknowledge(&mut window, "a", &backwards), Err(AckError::InvalidRequest));
        let mismatched = AckBatch { first_offset: 12, last_offset: 12, types: vec![AckType::Accept, AckType::Accept] };
        assert_eq!(acknowledge(&mut window, "a", &[mismatched]), Err(AckError::InvalidRequest));
        let partly_theirs = [ack(12, 12, AckType::Accept), ack(13, 13, AckType::Accept)];
        assert_eq!(acknowledge(&mut window, "a", &partly_theirs), Err(AckError::InvalidRecordState));
        assert_eq!(window.count_in(RecordState::Acquired), 3, "a refused acknowledgement changes nothing");
        assert_eq!(acquire(&mut window, "c", &[batch(10, 14)], 10, 0), vec![], "nothing is available");
    }

    #[test]
    fn released_and_expired_records_come_back_with_their_count_and_are_archived_at_the_limit() {
        let mut window = ShareWindow::new(0, SETTINGS);
        assert_eq!(acquire(&mut window, "a", &[batch(0, 1)], 10, 0), vec![range(0, 1, 1)]);
        assert_eq!(acknowledge(&mut window, "a", &[ack(0, 0, AckType::Release)]), Ok(()));
        assert_eq!(window.next_fetch_offset(), 0);
        assert_eq!(acquire(&mut window, "b", &[batch(0, 1)], 10, 100), vec![range(0, 0, 2)]);
        assert_eq!(window.next_lock_expiry_ms(), Some(30_000), "offset 1's lock runs out first");
        window.apply(Event::Expire { now_ms: 30_000 });
        assert_eq!(acquire(&mut window, "c", &[batch(0, 1)], 10, 30_050), vec![range(1, 1, 2)]);
        window.apply(Event::Expire { now_ms: 30_100 });
        assert_eq!(acquire(&mut window, "c", &[batch(0, 1)], 10, 30_200), vec![range(0, 0, 3)]);
        window.apply(Event::Expire { now_ms: 100_000 });
        assert_eq!(window.start_offset(), 1, "offset 0 was delivered 3 times: archived");
        assert_eq!(acquire(&mut window, "c", &[batch(0, 1)], 10, 100_000), vec![range(1, 1, 3)]);
    }

    #[test]
    fn with_a_dead_letter_queue_rejected_and_exhausted_records_are_archived_only_once_sent() {
        let settings = ShareSettings { dead_letter: true, ..SETTINGS };
        let mut window = ShareWindow::new(0, settings);
        assert_eq!(acquire(&mut window, "a", &[batch(0, 3)], 10, 0), vec![range(0, 3, 1)]);
        let acks = [ack(0, 0, AckType::Reject), ack(1, 1, AckType::Gap), ack(2, 2, AckType::Accept)];
        assert_eq!(acknowledge(&mut window, "a", &acks), Ok(()));
        assert_eq!(window.count_in(RecordState::Archiving), 1, "the reject waits for the queue; the gap does not");
        assert_eq!(window.start_offset(), 0, "the start waits for it too");
        // Offset 3 runs out of deliveries: released at the limit, it waits for the queue too.
        for count in 1..=3u16 {
            if count > 1 {
                assert_eq!(acquire(&mut window, "a", &[batch(3, 3)], 10, 0), vec![range(3, 3, count)]);
            }
            assert_eq!(acknowledge(&mut window, "a", &[ack(3, 3, AckType::Release)]), Ok(()));
        }
        let letters = window.dead_letters();
        let want = [
            DeadLetterRange { first_offset: 0, last_offset: 0, delivery_count: 1 },
            DeadLetterRange { first_offset: 3, last_offset: 3, delivery_count: 3 },
        ];
        assert_eq!(letters, want);
        assert_eq!(acquire(&mut window, "b", &[batch(0, 3)], 10, 0), vec![], "nothing Archiving is delivered");
        assert!(window.apply(Event::DeadLettered { first_offset: 0, last_offset: 2 }).durable_change);
        assert_eq!(window.start_offset(), 3, "archived once sent, and passed");
        assert!(!window.apply(Event::DeadLettered { first_offset: 0, last_offset: 0 }).durable_change, "once");
        window.apply(Event::DeadLettered { first_offset: 3, last_offset: 3 });
        assert_eq!((window.start_offset(), window.dead_letters()), (4, vec![]));
        // Read back from the volume, what waits for the queue still does.
        let mut window = ShareWindow::new(0, settings);
        acquire(&mut window, "a", &[batch(0, 1)], 10, 0);
        assert_eq!(acknowledge(&mut window, "a", &[ack(0, 1, AckType::Reject)]), Ok(()));
        let entries: Vec<(i64, InFlight)> = window.entries().map(|(o, e)| (o, e.clone())).collect();
        let restored = ShareWindow::restore(0, entries, settings).expect("valid");
        assert_eq!(
            restored.dead_letters(),
            vec![DeadLetterRange { first_offset: 0, last_offset: 1, delivery_count: 1 }]
        );
        // A record read back available at its limit goes towards the queue when next met, and
        // that alone is a change to write (kaas-sim share seed 34: it was not, and the start
        // stuck behind a record nobody would send).
        let at_limit = InFlight { delivery_count: 3, ..InFlight::available(0) };
        let mut window = ShareWindow::restore(0, [(0, at_limit)], settings).expect("valid");
        let event = Event::Acquire {
            member: "a",
            batches: &[batch(0, 0)],
            max_records: 10,
            mode: AcquireMode::RecordLimit,
            now_ms: 0,
        };
        let outcome = window.apply(event);
        assert!(outcome.acquired.is_empty() && outcome.durable_change);
        assert_eq!(window.dead_letters(), vec![DeadLetterRange { first_offset: 0, last_offset: 0, delivery_count: 3 }]);
    }

    #[test]
    fn staged_acknowledgements_wait_for_their_transaction_and_no_lock_moves_them() {
        let mut window = ShareWindow::new(0, SETTINGS);
        acquire(&mut window, "a", &[batch(0, 3)], 10, 0);
        let stage = |w: &mut ShareWindow, member, epoch, batches: &[AckBatch]| {
            w.apply(Event::Stage { member, producer_id: 7, producer_epoch: epoch, batches }).ack.expect("answered")
        };
        assert_eq!(stage(&mut window, "b", 1, &[ack(0, 1, AckType::Accept)]), Err(AckError::InvalidRecordState));
        assert_eq!(stage(&mut window, "a", 1, &[ack(0, 1, AckType::Release)]), Err(AckError::InvalidRequest));
        let batches = [ack(0, 1, AckType::Accept), ack(2, 2, AckType::Reject)];
        assert_eq!(stage(&mut window, "a", 1, &batches), Ok(()));
        window.apply(Event::Expire { now_ms: 1_000_000 });
        assert_eq!(window.count_in(RecordState::TxPending), 3, "the lock no longer holds them");
        assert_eq!(window.count_in(RecordState::Available), 1, "offset 3's lock ran out");
        let stale = window.apply(Event::CompleteTxn { producer_id: 7, producer_epoch: 0, commit: true });
        assert!(!stale.durable_change, "a fenced epoch's marker ends nothing");
        window.apply(Event::CompleteTxn { producer_id: 7, producer_epoch: 2, commit: true });
        assert_eq!(window.start_offset(), 3, "accepted and rejected are done");
        assert_eq!(window.next_fetch_offset(), 3);
    }

    #[test]
    fn a_committed_transactional_reject_goes_to_the_dead_letter_queue_too() {
        let settings = ShareSettings { dead_letter: true, ..SETTINGS };
        let mut window = ShareWindow::new(0, settings);
        acquire(&mut window, "a", &[batch(0, 1)], 10, 0);
        let staged = [ack(0, 0, AckType::Accept), ack(1, 1, AckType::Reject)];
        let event = Event::Stage { member: "a", producer_id: 7, producer_epoch: 1, batches: &staged };
        assert_eq!(window.apply(event).ack, Some(Ok(())));
        window.apply(Event::CompleteTxn { producer_id: 7, producer_epoch: 2, commit: true });
        assert_eq!(window.dead_letters(), vec![DeadLetterRange { first_offset: 1, last_offset: 1, delivery_count: 1 }]);
        assert_eq!(window.start_offset(), 1, "the accept is done; the reject waits for the queue");
    }

    #[test]
    fn an_aborted_transaction_gives_its_records_back() {
        let mut window = ShareWindow::new(0, SETTINGS);
        acquire(&mut window, "a", &[batch(0, 1)], 10, 0);
        window.apply(Event::Stage {
            member: "a",
            producer_id: 7,
            producer_epoch: 1,
            batches: &[ack(0, 1, AckType::Accept)],
        });
        window.apply(Event::CompleteTxn { producer_id: 7, producer_epoch: 2, commit: false });
        assert_eq!(acquire(&mut window, "b", &[batch(0, 1)], 10, 0), vec![range(0, 1, 2)]);
    }

    #[test]
    fn control_batches_and_aborted_records_are_never_delivered_and_the_window_is_bounded() {
        let settings = ShareSettings { max_in_flight: 4, ..SETTINGS };
        let mut window = ShareWindow::new(0, settings);
        let batches = [batch(0, 1), LogBatch { base_offset: 2, last_offset: 2, deliverable: false }, batch(3, 9)];
        assert_eq!(acquire(&mut window, "a", &batches, 100, 0), vec![range(0, 1, 1), range(3, 3, 1)]);
        assert_eq!(window.end_offset(), 4, "no more than four offsets in flight");
        assert_eq!(acknowledge(&mut window, "a", &[ack(0, 1, AckType::Accept), ack(3, 3, AckType::Accept)]), Ok(()));
        assert_eq!(window.start_offset(), 4, "the control batch was archived as it was passed");
        assert_eq!(acquire(&mut window, "a", &batches, 100, 0), vec![range(4, 7, 1)]);
    }

    #[test]
    fn a_full_window_takes_in_nothing_of_the_batches_after_the_one_it_filled_up_in() {
        // The cap reached inside the second batch: the third, past the window's end, must not
        // be looked up (a broker panicked on it under kaas share-copy with 1260-record batches).
        let settings = ShareSettings { max_in_flight: 4, ..SETTINGS };
        let mut window = ShareWindow::new(0, settings);
        let batches = [batch(0, 2), batch(3, 5), batch(6, 7)];
        assert_eq!(acquire(&mut window, "a", &batches, 100, 0), vec![range(0, 3, 1)]);
        assert_eq!(window.end_offset(), 4);
        assert_eq!(acknowledge(&mut window, "a", &[ack(0, 3, AckType::Accept)]), Ok(()));
        assert_eq!(acquire(&mut window, "a", &batches[1..], 100, 0), vec![range(4, 7, 1)]);
    }

    #[test]
    fn a_window_read_back_has_lost_its_locks_but_not_its_counts_or_transactions() {
        let mut window = ShareWindow::new(5, SETTINGS);
        acquire(&mut window, "a", &[batch(5, 8)], 10, 0);
        window.apply(Event::Stage {
            member: "a",
            producer_id: 7,
            producer_epoch: 1,
            batches: &[ack(6, 6, AckType::Accept)],
        });
        let entries: Vec<(i64, InFlight)> = window.entries().map(|(o, e)| (o, e.clone())).collect();
        let restored = ShareWindow::restore(window.start_offset(), entries.clone(), SETTINGS).expect("valid");
        assert_eq!(restored.count_in(RecordState::Acquired), 0);
        assert_eq!(restored.count_in(RecordState::TxPending), 1);
        assert_eq!(restored.next_fetch_offset(), 5);
        let mut shifted = entries;
        shifted[1].0 = 42;
        assert_eq!(ShareWindow::restore(5, shifted, SETTINGS), None, "a hole in the window is a damaged file");
    }

    #[test]
    fn a_start_moved_up_drops_what_lies_below_it() {
        let mut window = ShareWindow::new(0, SETTINGS);
        acquire(&mut window, "a", &[batch(0, 5)], 10, 0);
        assert!(window.apply(Event::StartAt { offset: 3 }).durable_change);
        assert_eq!((window.start_offset(), window.end_offset()), (3, 6));
        assert!(!window.apply(Event::StartAt { offset: 1 }).durable_change, "never back");
        window.apply(Event::StartAt { offset: 50 });
        assert_eq!((window.start_offset(), window.end_offset()), (50, 50));
        assert_eq!(acquire(&mut window, "a", &[batch(48, 51)], 10, 0), vec![range(50, 51, 1)]);
    }

    #[test]
    #[should_panic(expected = "illegal record transition")]
    fn an_illegal_transition_is_a_bug() {
        let mut window = ShareWindow::new(0, SETTINGS);
        window.extend(InFlight::available(0));
        window.set(0, InFlight::done(RecordState::Acknowledged, 0));
    }
}
