//! The transaction state machine of one transactional.id, pure: every transition is a function
//! from the current entry and a request to the next entry or a Kafka error, and all of them
//! go through `TxnEntry::transition`, which refuses any move the diagram below does not have.
//!
//! ```text
//!            InitProducerId                 EndTxn / timeout            markers durable
//!   (none) ─────────────────▶ Empty ──Add*──▶ Ongoing ──▶ Prepare{Commit,Abort} ──▶ Complete{Commit,Abort}
//!                               │               ▲              ▲                          │
//!                               │               └──────────────┼──────────Add*────────────┤
//!                               └─── EndTxn v5 (abort) ────────┴──── EndTxn v5 (abort) ───┘
//! ```
//!
//! Transactions v2 (KIP-890 part 2, EndTxn v5): every EndTxn bumps the epoch, and the markers
//! carry the bumped one, so that a write of the transaction that arrives after its marker is
//! refused as fenced instead of joining the next transaction. The partitions and groups of a
//! v2 transaction are added by its writes (Produce v12, TxnOffsetCommit v5) through
//! `add_implicitly`; an abort with nothing open is allowed, and bumps the epoch too.
//!
//! The departures from the reference system that DESIGN.md lists are built in: an invalid
//! transition answers INVALID_TXN_STATE; InitProducerId v3+ validates the caller's producer id
//! and epoch (KIP-360) and a rejoin during an Ongoing transaction aborts it first; a timeout
//! above the broker's maximum is INVALID_TRANSACTION_TIMEOUT.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The ownership key of the transaction slot of `transactional_id`.
pub fn txn_key(transactional_id: &str) -> String {
    crate::cluster::txn_slot_key(slot(transactional_id))
}

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
                | (Empty | CompleteCommit | CompleteAbort, PrepareAbort)
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

pub use crate::participant::TopicPartition;
use crate::participant::{Participant, SharePartitionKey};

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
    /// Share partitions whose acknowledgements the transaction staged (KIP-1289).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub share_partitions: BTreeSet<SharePartitionKey>,
    /// When the transaction became Ongoing (coordinator wall clock), or -1.
    pub ongoing_since_ms: i64,
    /// The client's transaction version at the last EndTxn: 2 if it bumped the epoch (v5).
    #[serde(default)]
    pub transaction_version: i16,
    /// A v2 transaction prepared with its epoch used up: the producer id it completes into.
    #[serde(default = "no_producer_id")]
    pub next_producer_id: i64,
    /// The producer id before that rotation, so that a retried EndTxn is recognised.
    #[serde(default = "no_producer_id")]
    pub previous_producer_id: i64,
}

fn no_producer_id() -> i64 {
    -1
}

/// The `transaction.version` from which every EndTxn bumps the epoch.
pub const TV2: i16 = 2;

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
    /// A retry of an EndTxn that already completed: answer success (with the current producer
    /// id and epoch), change nothing.
    AlreadyComplete,
}

/// Epochs at or above this rotate to a fresh producer id instead of bumping.
pub const EPOCH_MAX: i16 = i16::MAX - 1;

/// Whether InitProducerId or the reaper could need a fresh producer id for this entry (the
/// caller allocates one beforehand; an unused one is simply skipped).
pub fn may_need_fresh_producer_id(existing: Option<&TxnEntry>) -> bool {
    existing.is_none_or(|e| e.producer_epoch >= EPOCH_MAX)
}

/// KIP-890 verification: is the partition (or group) in the producer's open transaction?
/// Asked before a transactional batch opens the transaction in a partition and before a
/// TxnOffsetCommit stages offsets.
pub fn verify(entry: &TxnEntry, producer_id: i64, producer_epoch: i16, member: &Participant) -> Result<(), TxnError> {
    entry.check_producer(producer_id, producer_epoch)?;
    let included = entry.includes(member);
    if entry.state == TxnState::Ongoing && included { Ok(()) } else { Err(TxnError::InvalidTxnState) }
}

impl TxnEntry {
    /// Whether `participant` is in the current (or prepared) transaction.
    pub fn includes(&self, participant: &Participant) -> bool {
        match participant {
            Participant::Partition(tp) => self.partitions.contains(tp),
            Participant::Group(group_id) => self.groups.contains(group_id),
            Participant::SharePartition(key) => self.share_partitions.contains(key),
        }
    }

    /// The participants of the current (or prepared) transaction, the markers it owes:
    /// partitions first, then share partitions, then groups.
    pub fn participants(&self) -> impl Iterator<Item = Participant> + '_ {
        let partitions = self.partitions.iter().cloned().map(Participant::Partition);
        let shares = self.share_partitions.iter().cloned().map(Participant::SharePartition);
        partitions.chain(shares).chain(self.groups.iter().cloned().map(Participant::Group))
    }

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
        assert!(
            self.next_producer_id == -1 || (self.state.is_prepared() && self.transaction_version >= TV2),
            "only a prepared v2 transaction rotates its producer id"
        );
        assert_ne!(self.next_producer_id, self.producer_id, "a rotation moves to another producer id");
        match self.state {
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                assert!(
                    self.partitions.is_empty() && self.groups.is_empty() && self.share_partitions.is_empty(),
                    "no markers owed outside a transaction"
                );
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
        let mut entry = if self.producer_epoch >= EPOCH_MAX {
            self.clone()
        } else {
            self.bumped(|| unreachable!("an epoch below EPOCH_MAX is bumped in place"))
        };
        // Not a bump by an EndTxn: a v2 EndTxn one epoch behind is a fenced producer's, not a retry.
        entry.transaction_version = 0;
        entry
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
            share_partitions: BTreeSet::new(),
            ongoing_since_ms: -1,
            transaction_version: 0,
            next_producer_id: -1,
            previous_producer_id: -1,
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
        next.share_partitions.clear();
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
/// markers still owed, whoever finishes the transaction. `transaction_version` is the client's
/// (2 from EndTxn v5): at 2 the prepared entry carries the bumped epoch the markers are written
/// with, or, the epoch used up, the fresh producer id it completes into
/// (`fresh_producer_id`, called only then).
pub fn end_txn(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    transaction_version: i16,
    now_ms: i64,
    fresh_producer_id: impl FnOnce() -> i64,
) -> Result<EndOutcome, TxnError> {
    if entry.transaction_version >= TV2 || transaction_version >= TV2 {
        return end_txn_v2(entry, producer_id, producer_epoch, commit, transaction_version, now_ms, fresh_producer_id);
    }
    entry.check_producer(producer_id, producer_epoch)?;
    match (entry.state, commit) {
        (TxnState::Ongoing, _) => Ok(EndOutcome::Prepared(entry.prepared(commit, 0).checked())),
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(EndOutcome::AlreadyComplete),
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(TxnError::ConcurrentTransactions),
        _ => Err(TxnError::InvalidTxnState),
    }
}

/// EndTxn where the epoch bumps at every end. The caller's epoch tells a retry apart from the
/// next end: the current epoch is a new end; one below it, a retry of the end that bumped it.
fn end_txn_v2(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    transaction_version: i16,
    now_ms: i64,
    fresh_producer_id: impl FnOnce() -> i64,
) -> Result<EndOutcome, TxnError> {
    let bumped_by_last_end = entry.transaction_version >= TV2
        && producer_id == entry.producer_id
        && i32::from(producer_epoch) + 1 == i32::from(entry.producer_epoch);
    // The last end used the epoch up and rotated the id: its retry names the old one.
    let rotated_by_last_end = entry.transaction_version >= TV2
        && producer_id == entry.previous_producer_id
        && producer_epoch == EPOCH_MAX
        && entry.producer_epoch == 0;
    if producer_id != entry.producer_id && !rotated_by_last_end {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    let retry = bumped_by_last_end || rotated_by_last_end;
    let matches_result = |state: TxnState| match state {
        TxnState::PrepareCommit | TxnState::CompleteCommit => commit,
        _ => !commit,
    };
    match entry.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort if entry.transaction_version >= TV2 => {
            if !retry && producer_epoch != entry.producer_epoch {
                return Err(TxnError::ProducerFenced);
            }
            // The epoch was bumped at the prepare, so the caller of a retry is one behind.
            if matches_result(entry.state) {
                Err(TxnError::ConcurrentTransactions)
            } else {
                Err(TxnError::InvalidTxnState)
            }
        }
        TxnState::CompleteCommit | TxnState::CompleteAbort if retry => {
            if matches_result(entry.state) {
                Ok(EndOutcome::AlreadyComplete)
            } else {
                Err(TxnError::InvalidTxnState)
            }
        }
        _ if producer_epoch != entry.producer_epoch => Err(TxnError::ProducerFenced),
        TxnState::PrepareCommit | TxnState::PrepareAbort => {
            // Prepared by a v1 end: as v1 answers it.
            if matches_result(entry.state) {
                Err(TxnError::ConcurrentTransactions)
            } else {
                Err(TxnError::InvalidTxnState)
            }
        }
        TxnState::Ongoing if transaction_version >= TV2 => {
            Ok(EndOutcome::Prepared(entry.prepared_v2(commit, now_ms, fresh_producer_id).checked()))
        }
        TxnState::Ongoing => Ok(EndOutcome::Prepared(entry.prepared(commit, transaction_version).checked())),
        // Nothing open: a v2 client that cannot tell whether its writes added anything aborts
        // anyway, and the epoch bumps as for any end.
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            if !commit && transaction_version >= TV2 =>
        {
            Ok(EndOutcome::Prepared(entry.prepared_v2(false, now_ms, fresh_producer_id).checked()))
        }
        TxnState::CompleteCommit | TxnState::CompleteAbort
            if matches_result(entry.state) && transaction_version < TV2 =>
        {
            Ok(EndOutcome::AlreadyComplete)
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => Err(TxnError::InvalidTxnState),
    }
}

impl TxnEntry {
    /// Prepare{Commit,Abort} under the same epoch (transactions v1).
    fn prepared(&self, commit: bool, transaction_version: i16) -> TxnEntry {
        let mut prepared = self.transition(if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort });
        prepared.transaction_version = transaction_version;
        prepared
    }

    /// Prepare{Commit,Abort} with the epoch bumped (transactions v2); an abort with nothing open
    /// starts it now, owing no marker.
    fn prepared_v2(&self, commit: bool, now_ms: i64, fresh_producer_id: impl FnOnce() -> i64) -> TxnEntry {
        let mut prepared = self.prepared(commit, TV2);
        if self.state != TxnState::Ongoing {
            prepared.ongoing_since_ms = now_ms.max(0);
        }
        if crate::mutant!(EndTxnWithoutEpochBump) {
            // The bug: the markers carry the epoch the transaction's writes had.
        } else if self.producer_epoch >= EPOCH_MAX {
            // No epoch is left to bump to: the markers go out under the last one, and the
            // producer continues under a fresh id once they are durable.
            prepared.next_producer_id = fresh_producer_id();
        } else {
            prepared.producer_epoch = self.producer_epoch + 1;
        }
        // The epoch before was made by an EndTxn, not an InitProducerId: none to retry.
        prepared.last_producer_epoch = -1;
        prepared
    }
}

/// The second phase, once every marker is durable: the lists are released, and a v2
/// transaction that used up its epoch moves to its fresh producer id.
pub fn complete(entry: &TxnEntry) -> TxnEntry {
    let next = match entry.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        other => panic!("illegal transaction transition {other:?} -> Complete*"),
    };
    let mut done = entry.transition(next);
    done.partitions.clear();
    done.groups.clear();
    done.share_partitions.clear();
    done.ongoing_since_ms = -1;
    if entry.next_producer_id >= 0 {
        done.previous_producer_id = entry.producer_id;
        done.producer_id = entry.next_producer_id;
        done.producer_epoch = 0;
        done.last_producer_epoch = -1;
        done.next_producer_id = -1;
    }
    done.checked()
}

/// A v2 write (Produce v12+, TxnOffsetCommit v5+) joining the producer's transaction: Ok(None)
/// if `member` is in it already, else the entry with it added (starting the transaction if
/// none is open).
pub fn add_implicitly(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    member: &Participant,
    now_ms: i64,
) -> Result<Option<TxnEntry>, TxnError> {
    if verify(entry, producer_id, producer_epoch, member).is_ok() {
        return Ok(None);
    }
    let added = match member {
        Participant::Partition(tp) => {
            add_partitions(entry, producer_id, producer_epoch, std::slice::from_ref(tp), now_ms)
        }
        Participant::Group(group_id) => add_offsets(entry, producer_id, producer_epoch, group_id, now_ms),
        Participant::SharePartition(key) => add(entry, producer_id, producer_epoch, now_ms, |e| {
            e.share_partitions.insert(key.clone());
        }),
    };
    added.map(Some)
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
        let EndOutcome::Prepared(p) = end_txn(&e, e.producer_id, 0, true, 0, 0, || unreachable!()).unwrap() else {
            panic!()
        };
        assert_eq!((p.state, p.partitions.len(), p.groups.len()), (TxnState::PrepareCommit, 2, 1), "the owed markers");
        assert_eq!(
            end_txn(&p, p.producer_id, 0, true, 0, 0, || unreachable!()),
            Err(TxnError::ConcurrentTransactions),
            "retry while prepared"
        );
        assert_eq!(end_txn(&p, p.producer_id, 0, false, 0, 0, || unreachable!()), Err(TxnError::InvalidTxnState));
        let c = complete(&p);
        assert_eq!((c.state, c.partitions.len(), c.ongoing_since_ms), (TxnState::CompleteCommit, 0, -1));
        assert_eq!(
            end_txn(&c, c.producer_id, 0, true, 0, 0, || unreachable!()),
            Ok(EndOutcome::AlreadyComplete),
            "an idempotent retry"
        );
        assert_eq!(end_txn(&c, c.producer_id, 0, false, 0, 0, || unreachable!()), Err(TxnError::InvalidTxnState));
        let next = add_partitions(&c, c.producer_id, 0, &[tp("c", 0)], 2000).unwrap();
        assert_eq!((next.partitions.len(), next.ongoing_since_ms), (1, 2000), "the next transaction starts afresh");
    }

    #[test]
    fn invalid_requests_get_kafka_errors() {
        let e = first("t");
        assert_eq!(
            end_txn(&e, e.producer_id, 0, true, 0, 0, || unreachable!()),
            Err(TxnError::InvalidTxnState),
            "EndTxn on Empty"
        );
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
            end_txn(&aborted, e.producer_id, 0, true, 0, 0, || unreachable!()),
            Err(TxnError::ProducerFenced),
            "the old producer is fenced"
        );
    }

    fn end_v2(e: &TxnEntry, epoch: i16, commit: bool) -> Result<EndOutcome, TxnError> {
        end_txn(e, e.producer_id, epoch, commit, TV2, 5_000, || 9 << 40)
    }

    fn prepared(outcome: Result<EndOutcome, TxnError>) -> TxnEntry {
        match outcome {
            Ok(EndOutcome::Prepared(entry)) => entry,
            other => panic!("not prepared: {other:?}"),
        }
    }

    #[test]
    fn a_v2_end_bumps_the_epoch_and_its_retry_is_recognised_by_the_epoch_before() {
        let e = first("t");
        let added = add_implicitly(&e, e.producer_id, 0, &Participant::Partition(tp("a", 0)), 1000).unwrap().unwrap();
        assert_eq!((added.state, added.partitions.len()), (TxnState::Ongoing, 1), "the write opened the transaction");
        assert_eq!(add_implicitly(&added, e.producer_id, 0, &Participant::Partition(tp("a", 0)), 1001), Ok(None));
        let p = prepared(end_v2(&added, 0, true));
        assert_eq!(
            (p.state, p.producer_epoch, p.partitions.len()),
            (TxnState::PrepareCommit, 1, 1),
            "markers at epoch 1"
        );
        assert_eq!(end_v2(&p, 0, true), Err(TxnError::ConcurrentTransactions), "a retry while prepared");
        let c = complete(&p);
        assert_eq!((c.state, c.producer_epoch, c.last_producer_epoch), (TxnState::CompleteCommit, 1, -1));
        assert_eq!(end_v2(&c, 0, true), Ok(EndOutcome::AlreadyComplete), "a retry after completion");
        assert_eq!(end_v2(&c, 0, false), Err(TxnError::InvalidTxnState), "a retry with the other result");
        assert_eq!(
            add_implicitly(&c, e.producer_id, 0, &Participant::Partition(tp("a", 0)), 2000),
            Err(TxnError::ProducerFenced),
            "a late write of the ended transaction cannot join the next one"
        );
        assert_eq!(
            init_producer_id(Some(&c), "t", 60_000, MAX, Some((e.producer_id, 0)), || 0),
            Err(TxnError::ProducerFenced),
            "the epoch an EndTxn replaced is not an InitProducerId to retry"
        );
        let next = add_implicitly(&c, e.producer_id, 1, &Participant::Group("g".into()), 2000).unwrap().unwrap();
        assert_eq!((next.state, next.groups.len(), next.ongoing_since_ms), (TxnState::Ongoing, 1, 2000));
    }

    #[test]
    fn a_v2_abort_with_nothing_open_bumps_the_epoch_and_owes_no_marker() {
        let e = first("t");
        assert_eq!(end_v2(&e, 0, true), Err(TxnError::InvalidTxnState), "nothing to commit");
        let p = prepared(end_v2(&e, 0, false));
        assert_eq!((p.state, p.producer_epoch, p.partitions.len()), (TxnState::PrepareAbort, 1, 0));
        let c = complete(&p);
        assert_eq!(end_v2(&c, 0, false), Ok(EndOutcome::AlreadyComplete), "its retry");
        let again = prepared(end_v2(&c, 1, false));
        assert_eq!(again.producer_epoch, 2, "a second empty abort is a new end");
        assert_eq!(end_v2(&c, 2, false), Err(TxnError::ProducerFenced), "an epoch from the future");
    }

    #[test]
    fn a_v2_end_with_its_epoch_used_up_completes_into_a_fresh_producer_id() {
        let mut e = first("t");
        e.producer_epoch = EPOCH_MAX;
        let ongoing = add_partitions(&e, e.producer_id, EPOCH_MAX, &[tp("a", 0)], 0).unwrap();
        let p = prepared(end_v2(&ongoing, EPOCH_MAX, true));
        assert_eq!(
            (p.producer_id, p.producer_epoch, p.next_producer_id),
            (e.producer_id, EPOCH_MAX, 9 << 40),
            "the markers go out under the old id"
        );
        let c = complete(&p);
        assert_eq!((c.producer_id, c.producer_epoch, c.previous_producer_id), (9 << 40, 0, e.producer_id));
        assert_eq!(
            end_txn(&c, e.producer_id, EPOCH_MAX, true, TV2, 0, || unreachable!()),
            Ok(EndOutcome::AlreadyComplete),
            "a retry under the old id"
        );
        assert_eq!(
            end_txn(&c, e.producer_id, 3, true, TV2, 0, || unreachable!()),
            Err(TxnError::InvalidProducerIdMapping)
        );
    }

    #[test]
    fn a_timeout_abort_fences_a_v2_producer_rather_than_passing_for_its_retry() {
        let e = first("t");
        let ongoing = add_implicitly(&e, e.producer_id, 0, &Participant::Partition(tp("a", 0)), 0).unwrap().unwrap();
        let c = complete(&prepared(end_v2(&ongoing, 0, true)));
        let ongoing = add_implicitly(&c, c.producer_id, 1, &Participant::Partition(tp("a", 0)), 10).unwrap().unwrap();
        let aborted = complete(&time_out(&ongoing, i64::MAX).unwrap());
        assert_eq!((aborted.state, aborted.producer_epoch), (TxnState::CompleteAbort, 2));
        assert_eq!(end_v2(&aborted, 1, true), Err(TxnError::ProducerFenced));
        assert_eq!(end_v2(&aborted, 1, false), Err(TxnError::ProducerFenced));
    }

    #[test]
    #[should_panic(expected = "illegal transaction transition")]
    fn an_illegal_transition_is_a_bug() {
        complete(&first("t"));
    }
}
