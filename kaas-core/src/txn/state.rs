//! The transaction state machine of one transactional.id, pure: every transition is a function
//! from the current entry and a request to the next entry or a Kafka error, and all of them
//! go through `TxnEntry::transition`, which refuses any move the diagram below does not have.
//!
//! ```text
//!            InitProducerId                 EndTxn / timeout            markers durable
//!   (none) ─────────────────▶ Empty ──Add*──▶ Ongoing ──▶ Prepare{Commit,Abort} ──▶ Complete{Commit,Abort}
//!                                               ▲                                         │
//!                                               └──────────────────Add*───────────────────┘
//! ```
//!
//! The departures from the reference system that DESIGN.md lists are built in: an invalid
//! transition answers INVALID_TXN_STATE; InitProducerId v3+ validates the caller's producer id
//! and epoch (KIP-360) and a rejoin during an Ongoing transaction aborts it first; a timeout
//! above the broker's maximum is INVALID_TRANSACTION_TIMEOUT.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Transaction-state slots, as Apache's `transaction.state.log.num.partitions` default.
pub const SLOTS: u32 = 50;

/// The slot of a transactional id: FNV-1a (32 bit) of its bytes, modulo `SLOTS`.
pub fn slot(transactional_id: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in transactional_id.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash % SLOTS
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    /// The moves of the diagram; anything else is a bug in the caller.
    fn may_become(self, next: TxnState) -> bool {
        use TxnState::*;
        matches!(
            (self, next),
            (Empty | CompleteCommit | CompleteAbort, Empty)
                | (Empty | Ongoing | CompleteCommit | CompleteAbort, Ongoing)
                | (Ongoing, PrepareCommit | PrepareAbort)
                | (PrepareCommit, CompleteCommit)
                | (PrepareAbort, CompleteAbort)
        )
    }

    pub fn is_prepared(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// The Kafka errors the state machine answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnError {
    /// 90: the caller's epoch is not the current one.
    ProducerFenced,
    /// 49: the caller's producer id is not the transactional id's.
    InvalidProducerIdMapping,
    /// 51: a transition is under way; retry.
    ConcurrentTransactions,
    /// 48: the request makes no sense in this state.
    InvalidTxnState,
    /// 50: the timeout is above `transaction.max.timeout.ms`, or not positive.
    InvalidTransactionTimeout,
}

pub type TopicPartition = (String, i32);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnEntry {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so that a retried InitProducerId is recognised.
    pub last_producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    pub state: TxnState,
    /// Partitions and groups of the current (or prepared) transaction: the markers it owes.
    pub partitions: BTreeSet<TopicPartition>,
    pub groups: BTreeSet<String>,
    /// When the transaction became Ongoing (coordinator wall clock), or -1.
    pub ongoing_since_ms: i64,
}

/// What InitProducerId leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// The producer may go on with this entry's id and epoch.
    Ready(TxnEntry),
    /// An Ongoing transaction must be aborted first (its epoch already bumped to fence the old
    /// producer); the caller gets CONCURRENT_TRANSACTIONS and retries.
    AbortFirst(TxnEntry),
}

/// What EndTxn leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// Prepared: write the markers, then `complete`.
    Prepared(TxnEntry),
    /// A retry of an EndTxn that already completed: answer success, change nothing.
    AlreadyComplete,
}

/// Epochs at or above this rotate to a fresh producer id instead of bumping.
pub const EPOCH_MAX: i16 = i16::MAX - 1;

/// Whether InitProducerId or the reaper could need a fresh producer id for this entry (the
/// caller allocates one beforehand; an unused one is simply skipped).
pub fn may_need_fresh_producer_id(existing: Option<&TxnEntry>) -> bool {
    existing.is_none_or(|e| e.producer_epoch >= EPOCH_MAX)
}

/// What a transactional write needs to be part of the producer's open transaction.
#[derive(Debug, Clone, Copy)]
pub enum Member<'a> {
    Partition(&'a TopicPartition),
    Group(&'a str),
}

/// KIP-890 verification: is the partition (or group) in the producer's open transaction?
/// Asked before a transactional batch opens the transaction in a partition and before a
/// TxnOffsetCommit stages offsets.
pub fn verify(entry: &TxnEntry, producer_id: i64, producer_epoch: i16, member: Member<'_>) -> Result<(), TxnError> {
    entry.check_producer(producer_id, producer_epoch)?;
    let included = match member {
        Member::Partition(tp) => entry.partitions.contains(tp),
        Member::Group(group_id) => entry.groups.contains(group_id),
    };
    if entry.state == TxnState::Ongoing && included { Ok(()) } else { Err(TxnError::InvalidTxnState) }
}

impl TxnEntry {
    /// What every transition leaves true of an entry; it returns the entry, so that each
    /// transition ends with it.
    fn checked(self) -> TxnEntry {
        assert!(self.producer_id >= 0, "a transactional id has a producer id");
        assert!(self.producer_epoch >= 0 && self.producer_epoch <= EPOCH_MAX, "the epoch is in range");
        assert!(
            self.last_producer_epoch == -1 || self.last_producer_epoch < self.producer_epoch,
            "the previous epoch is older"
        );
        assert!(self.transaction_timeout_ms > 0, "the timeout was validated");
        match self.state {
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                assert!(self.partitions.is_empty() && self.groups.is_empty(), "no markers owed outside a transaction");
                assert_eq!(self.ongoing_since_ms, -1, "no transaction is running");
            }
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort => {
                assert!(self.ongoing_since_ms >= 0, "a running transaction knows when it began");
            }
        }
        self
    }

    fn transition(&self, next: TxnState) -> TxnEntry {
        assert!(self.state.may_become(next), "illegal transaction transition {:?} -> {next:?}", self.state);
        let mut entry = self.clone();
        entry.state = next;
        entry
    }

    fn check_producer(&self, producer_id: i64, producer_epoch: i16) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if producer_epoch != self.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(())
    }

    /// The same transactional id under a new epoch (or a fresh producer id once the epoch is
    /// used up), with the old epoch remembered for retries.
    fn bumped(&self, fresh_producer_id: impl FnOnce() -> i64) -> TxnEntry {
        let mut entry = self.clone();
        if self.producer_epoch >= EPOCH_MAX {
            entry.producer_id = fresh_producer_id();
            entry.producer_epoch = 0;
            entry.last_producer_epoch = -1;
        } else {
            entry.last_producer_epoch = self.producer_epoch;
            entry.producer_epoch = self.producer_epoch + 1;
        }
        entry
    }

    /// The epoch bump of an abort the coordinator starts itself (a rejoin during a transaction,
    /// the reaper): it fences the old producer. The producer id stays, for the markers must
    /// end the batches written under it; an exhausted epoch is not bumped (the next
    /// InitProducerId rotates the id, as in Apache).
    fn bumped_for_abort(&self) -> TxnEntry {
        if self.producer_epoch >= EPOCH_MAX {
            return self.clone();
        }
        self.bumped(|| unreachable!("an epoch below EPOCH_MAX is bumped in place"))
    }
}

/// InitProducerId with a transactional id. `expected` is the caller's (producer id, epoch)
/// from v3+, or None. `fresh_producer_id` is called only if a new id is needed.
pub fn init_producer_id(
    existing: Option<&TxnEntry>,
    transactional_id: &str,
    transaction_timeout_ms: i32,
    transaction_max_timeout_ms: i32,
    expected: Option<(i64, i16)>,
    fresh_producer_id: impl FnOnce() -> i64,
) -> Result<InitOutcome, TxnError> {
    if transaction_timeout_ms <= 0 || transaction_timeout_ms > transaction_max_timeout_ms {
        return Err(TxnError::InvalidTransactionTimeout);
    }
    let Some(entry) = existing else {
        if expected.is_some() {
            // A caller that believes it has an id for an unknown transactional id is a zombie.
            return Err(TxnError::ProducerFenced);
        }
        let entry = TxnEntry {
            transactional_id: transactional_id.to_string(),
            producer_id: fresh_producer_id(),
            producer_epoch: 0,
            last_producer_epoch: -1,
            transaction_timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            ongoing_since_ms: -1,
        };
        return Ok(InitOutcome::Ready(entry.checked()));
    };
    if let Some((producer_id, producer_epoch)) = expected {
        if producer_id != entry.producer_id {
            return Err(TxnError::ProducerFenced);
        }
        if producer_epoch == entry.last_producer_epoch && !entry.state.is_prepared() && entry.state != TxnState::Ongoing
        {
            // A retry of the InitProducerId that made the current epoch: the same answer.
            return Ok(InitOutcome::Ready(entry.clone().checked()));
        }
        if producer_epoch != entry.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
    }
    match entry.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(TxnError::ConcurrentTransactions),
        TxnState::Ongoing => {
            // Fence the old producer now; the abort completes before the new one may start.
            let mut aborting = entry.bumped_for_abort().transition(TxnState::PrepareAbort);
            aborting.transaction_timeout_ms = transaction_timeout_ms;
            Ok(InitOutcome::AbortFirst(aborting.checked()))
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let mut ready = entry.bumped(fresh_producer_id).transition(TxnState::Empty);
            ready.transaction_timeout_ms = transaction_timeout_ms;
            Ok(InitOutcome::Ready(ready.checked()))
        }
    }
}

/// AddPartitionsToTxn and AddOffsetsToTxn: either starts the transaction or joins it.
fn add(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    now_ms: i64,
    extend: impl FnOnce(&mut TxnEntry),
) -> Result<TxnEntry, TxnError> {
    entry.check_producer(producer_id, producer_epoch)?;
    if entry.state.is_prepared() {
        return Err(TxnError::ConcurrentTransactions);
    }
    let starting = entry.state != TxnState::Ongoing;
    let mut next = entry.transition(TxnState::Ongoing);
    if starting {
        next.partitions.clear();
        next.groups.clear();
        next.ongoing_since_ms = now_ms;
    }
    extend(&mut next);
    assert_eq!(next.state, TxnState::Ongoing);
    Ok(next.checked())
}

pub fn add_partitions(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TopicPartition],
    now_ms: i64,
) -> Result<TxnEntry, TxnError> {
    add(entry, producer_id, producer_epoch, now_ms, |e| e.partitions.extend(partitions.iter().cloned()))
}

pub fn add_offsets(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    group_id: &str,
    now_ms: i64,
) -> Result<TxnEntry, TxnError> {
    if group_id.is_empty() {
        return Err(TxnError::InvalidTxnState);
    }
    add(entry, producer_id, producer_epoch, now_ms, |e| {
        e.groups.insert(group_id.to_string());
    })
}

/// EndTxn: the first phase. The prepared entry keeps its partitions and groups: they are the
/// markers still owed, whoever finishes the transaction.
pub fn end_txn(entry: &TxnEntry, producer_id: i64, producer_epoch: i16, commit: bool) -> Result<EndOutcome, TxnError> {
    entry.check_producer(producer_id, producer_epoch)?;
    match (entry.state, commit) {
        (TxnState::Ongoing, true) => Ok(EndOutcome::Prepared(entry.transition(TxnState::PrepareCommit).checked())),
        (TxnState::Ongoing, false) => Ok(EndOutcome::Prepared(entry.transition(TxnState::PrepareAbort).checked())),
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(EndOutcome::AlreadyComplete),
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(TxnError::ConcurrentTransactions),
        _ => Err(TxnError::InvalidTxnState),
    }
}

/// The second phase, once every marker is durable: the lists are released.
pub fn complete(entry: &TxnEntry) -> TxnEntry {
    let next = match entry.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        other => panic!("illegal transaction transition {other:?} -> Complete*"),
    };
    let mut done = entry.transition(next);
    done.partitions.clear();
    done.groups.clear();
    done.ongoing_since_ms = -1;
    done.checked()
}

/// The reaper: an Ongoing transaction past its timeout is aborted with an epoch bump, so that
/// nothing its producer still sends can land. None if it has not timed out.
pub fn time_out(entry: &TxnEntry, now_ms: i64) -> Option<TxnEntry> {
    let deadline = entry.ongoing_since_ms.saturating_add(i64::from(entry.transaction_timeout_ms));
    if entry.state != TxnState::Ongoing || now_ms < deadline {
        return None;
    }
    if crate::mutant!(ReaperWithoutEpochBump) {
        return Some(entry.transition(TxnState::PrepareAbort).checked());
    }
    let aborting = entry.bumped_for_abort().transition(TxnState::PrepareAbort).checked();
    assert!(
        aborting.producer_epoch > entry.producer_epoch || entry.producer_epoch >= EPOCH_MAX,
        "the reaper fences the producer it aborts"
    );
    Some(aborting)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: i32 = 900_000;

    fn ready(outcome: Result<InitOutcome, TxnError>) -> TxnEntry {
        match outcome {
            Ok(InitOutcome::Ready(entry)) => entry,
            other => panic!("not ready: {other:?}"),
        }
    }

    fn first(id: &str) -> TxnEntry {
        ready(init_producer_id(None, id, 60_000, MAX, None, || 7 << 40))
    }

    fn tp(topic: &str, p: i32) -> TopicPartition {
        (topic.to_string(), p)
    }

    #[test]
    fn slots_are_fnv1a_modulo_50() {
        assert_eq!(slot(""), 0x811c_9dc5 % 50);
        assert_eq!(slot("a"), 0xe40c_292c % 50, "FNV-1a 32 of \"a\" is 0xe40c292c");
        assert!((0..1000).all(|i| slot(&format!("txn-{i}")) < SLOTS));
    }

    #[test]
    fn a_commit_goes_through_prepare_and_releases_its_lists_on_complete() {
        let e = first("t");
        assert_eq!((e.producer_id, e.producer_epoch, e.state), (7 << 40, 0, TxnState::Empty));
        let e = add_partitions(&e, e.producer_id, 0, &[tp("a", 0), tp("b", 1)], 1000).unwrap();
        let e = add_offsets(&e, e.producer_id, 0, "g", 1500).unwrap();
        assert_eq!((e.state, e.ongoing_since_ms, e.partitions.len(), e.groups.len()), (TxnState::Ongoing, 1000, 2, 1));
        let EndOutcome::Prepared(p) = end_txn(&e, e.producer_id, 0, true).unwrap() else { panic!() };
        assert_eq!((p.state, p.partitions.len(), p.groups.len()), (TxnState::PrepareCommit, 2, 1), "the owed markers");
        assert_eq!(end_txn(&p, p.producer_id, 0, true), Err(TxnError::ConcurrentTransactions), "retry while prepared");
        assert_eq!(end_txn(&p, p.producer_id, 0, false), Err(TxnError::InvalidTxnState));
        let c = complete(&p);
        assert_eq!((c.state, c.partitions.len(), c.ongoing_since_ms), (TxnState::CompleteCommit, 0, -1));
        assert_eq!(end_txn(&c, c.producer_id, 0, true), Ok(EndOutcome::AlreadyComplete), "an idempotent retry");
        assert_eq!(end_txn(&c, c.producer_id, 0, false), Err(TxnError::InvalidTxnState));
        let next = add_partitions(&c, c.producer_id, 0, &[tp("c", 0)], 2000).unwrap();
        assert_eq!((next.partitions.len(), next.ongoing_since_ms), (1, 2000), "the next transaction starts afresh");
    }

    #[test]
    fn invalid_requests_get_kafka_errors() {
        let e = first("t");
        assert_eq!(end_txn(&e, e.producer_id, 0, true), Err(TxnError::InvalidTxnState), "EndTxn on Empty");
        assert_eq!(add_partitions(&e, 99, 0, &[tp("a", 0)], 0), Err(TxnError::InvalidProducerIdMapping));
        assert_eq!(add_partitions(&e, e.producer_id, 1, &[tp("a", 0)], 0), Err(TxnError::ProducerFenced));
        assert_eq!(add_offsets(&e, e.producer_id, 0, "", 0), Err(TxnError::InvalidTxnState));
        assert_eq!(init_producer_id(None, "t", MAX + 1, MAX, None, || 1), Err(TxnError::InvalidTransactionTimeout));
        assert_eq!(init_producer_id(None, "t", 0, MAX, None, || 1), Err(TxnError::InvalidTransactionTimeout));
    }

    #[test]
    fn a_rejoin_bumps_the_epoch_and_fences_the_old_producer() {
        let e = first("t");
        let again = ready(init_producer_id(Some(&e), "t", 60_000, MAX, None, || unreachable!()));
        assert_eq!((again.producer_id, again.producer_epoch, again.last_producer_epoch), (e.producer_id, 1, 0));
        assert_eq!(add_partitions(&again, e.producer_id, 0, &[tp("a", 0)], 0), Err(TxnError::ProducerFenced));
        // KIP-360: a caller with the current epoch bumps it; a retry of that bump gets the
        // same answer; a caller with an older epoch is fenced.
        let bumped = ready(init_producer_id(Some(&again), "t", 60_000, MAX, Some((e.producer_id, 1)), || 0));
        assert_eq!(bumped.producer_epoch, 2);
        let retried = ready(init_producer_id(Some(&bumped), "t", 60_000, MAX, Some((e.producer_id, 1)), || 0));
        assert_eq!(retried, bumped);
        assert_eq!(
            init_producer_id(Some(&bumped), "t", 60_000, MAX, Some((e.producer_id, 0)), || 0),
            Err(TxnError::ProducerFenced)
        );
        assert_eq!(
            init_producer_id(Some(&bumped), "t", 60_000, MAX, Some((5, 2)), || 0),
            Err(TxnError::ProducerFenced)
        );
    }

    #[test]
    fn a_rejoin_during_a_transaction_aborts_it_first() {
        let e = first("t");
        let ongoing = add_partitions(&e, e.producer_id, 0, &[tp("a", 0)], 0).unwrap();
        let Ok(InitOutcome::AbortFirst(aborting)) = init_producer_id(Some(&ongoing), "t", 60_000, MAX, None, || 0)
        else {
            panic!()
        };
        assert_eq!(
            (aborting.state, aborting.producer_epoch, aborting.partitions.len()),
            (TxnState::PrepareAbort, 1, 1)
        );
        assert_eq!(
            init_producer_id(Some(&aborting), "t", 60_000, MAX, None, || 0),
            Err(TxnError::ConcurrentTransactions),
            "until the abort completes"
        );
        assert_eq!(add_partitions(&aborting, e.producer_id, 0, &[tp("b", 0)], 0), Err(TxnError::ProducerFenced));
        let done = complete(&aborting);
        let rejoined = ready(init_producer_id(Some(&done), "t", 60_000, MAX, None, || 0));
        assert_eq!((rejoined.state, rejoined.producer_epoch), (TxnState::Empty, 2));
    }

    #[test]
    fn an_epoch_at_its_end_rotates_to_a_fresh_producer_id() {
        let mut e = first("t");
        e.producer_epoch = i16::MAX - 1;
        let rotated = ready(init_producer_id(Some(&e), "t", 60_000, MAX, None, || 8 << 40));
        assert_eq!((rotated.producer_id, rotated.producer_epoch), (8 << 40, 0));
        let ongoing = add_partitions(&e, e.producer_id, e.producer_epoch, &[tp("a", 0)], 0).unwrap();
        let Ok(InitOutcome::AbortFirst(aborting)) = init_producer_id(Some(&ongoing), "t", 60_000, MAX, None, || 9)
        else {
            panic!()
        };
        assert_eq!(
            (aborting.producer_id, aborting.producer_epoch),
            (e.producer_id, i16::MAX - 1),
            "the abort's markers are for the id its batches were written under"
        );
    }

    #[test]
    fn the_reaper_aborts_a_timed_out_transaction_with_an_epoch_bump() {
        let e = first("t");
        let ongoing = add_partitions(&e, e.producer_id, 0, &[tp("a", 0)], 1_000).unwrap();
        assert_eq!(time_out(&ongoing, 60_999), None);
        let aborted = time_out(&ongoing, 61_000).unwrap();
        assert_eq!((aborted.state, aborted.producer_epoch, aborted.partitions.len()), (TxnState::PrepareAbort, 1, 1));
        assert_eq!(time_out(&e, i64::MAX), None, "only Ongoing transactions time out");
        assert_eq!(
            end_txn(&aborted, e.producer_id, 0, true),
            Err(TxnError::ProducerFenced),
            "the old producer is fenced"
        );
    }

    #[test]
    #[should_panic(expected = "illegal transaction transition")]
    fn an_illegal_transition_is_a_bug() {
        complete(&first("t"));
    }
}
