//! A transaction participant: anything a transaction writes into and its markers end. Three
//! kinds (DESIGN.md, "Share groups"): a partition (records, ended by a COMMIT or ABORT marker in
//! its log), a group (offsets staged by TxnOffsetCommit, KIP-447) and, with KIP-1289, a share
//! partition (acknowledgements staged by TxnShareAcknowledge). Whatever the kind, a participant
//! joins a transaction the same way (`Join`, checked by the coordinator, KIP-890), refuses a
//! write whose transaction ended after it was verified (`EndGuard`), and is ended by one
//! marker-delivery path (`txn::markers`).
//!
//! This module is a leaf: the partition and group actors below the transaction coordinator use
//! it, as does the coordinator above them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub type TopicPartition = (String, i32);

/// A participant of a transaction. The serde form names the kind (`{"Partition": ["t", 0]}`):
/// marker queue entries on the volume hold it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Participant {
    Partition(TopicPartition),
    Group(String),
    /// KIP-1289: a share group's view of a partition, whose acknowledgements a transaction
    /// staged. Owned with its partition.
    SharePartition(SharePartitionKey),
}

/// A share partition: (share group, topic, partition).
pub type SharePartitionKey = (String, String, i32);

/// How a transactional write joins its producer's transaction (KIP-890).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Join {
    /// The participant must be in the open transaction already: the client added it (v1).
    Verify,
    /// The write adds the participant, opening the transaction if none is (v2: Produce v12+,
    /// TxnOffsetCommit v5+).
    Add,
}

/// The producer behind a transactional write, and how the write joins its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnWriter {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub join: Join,
}

/// Ends remembered one by one per participant actor; an older one counts as recent for every
/// key (`EndGuard::trusted_from`), so a write verified before it is told to retry.
pub const ENDS_REMEMBERED_MAX: usize = 100_000;

/// What `EndGuard::admits` says of a write verified under a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    /// An end of the writer's transaction came after the verification: the write belongs to a
    /// transaction that is over, and staging it would open one that nothing ever ends.
    Ended,
    /// The guard predates what this participant remembers (its state was rebuilt, or the
    /// oldest ends were forgotten): not known either way, so the writer verifies again.
    Stale,
}

/// A participant's transaction ends (markers written, staged offsets ended), numbered. A write
/// that opens a transaction here is verified with the coordinator first; it carries the count
/// read before it asked (`guard`), and is staged only if no end of its producer came after it.
/// `K` names the writer in this participant actor: a producer id in a partition, a (group,
/// producer id) in the group coordinator.
#[derive(Debug, Clone)]
pub struct EndGuard<K: Ord + Clone> {
    /// Ends recorded so far.
    ends: u64,
    /// The number of each key's last end, and the key of each number (to forget the oldest).
    last_end: BTreeMap<K, u64>,
    by_number: BTreeMap<u64, K>,
    /// Guards below this are not trusted.
    trusted_from: u64,
}

impl<K: Ord + Clone> Default for EndGuard<K> {
    fn default() -> Self {
        EndGuard { ends: 0, last_end: BTreeMap::new(), by_number: BTreeMap::new(), trusted_from: 0 }
    }
}

impl<K: Ord + Clone> EndGuard<K> {
    /// The guard to read before the coordinator is asked.
    pub fn guard(&self) -> u64 {
        self.ends
    }

    /// An end of `key`'s transaction here.
    pub fn record_end(&mut self, key: K) {
        self.ends += 1;
        if let Some(older) = self.last_end.insert(key.clone(), self.ends) {
            self.by_number.remove(&older);
        }
        self.by_number.insert(self.ends, key);
        while self.last_end.len() > ENDS_REMEMBERED_MAX {
            let (number, oldest) = self.by_number.pop_first().expect("as many numbers as keys");
            self.last_end.remove(&oldest);
            self.trusted_from = self.trusted_from.max(number);
        }
        self.check_invariants();
    }

    /// The participant's state was rebuilt: what it remembered of ends may be gone, so no
    /// guard read before now is trusted.
    pub fn forget(&mut self) {
        self.trusted_from = self.ends;
        self.last_end.clear();
        self.by_number.clear();
        self.check_invariants();
    }

    /// Whether a write of `key` verified under `guard` may be staged.
    pub fn admits(&self, key: &K, guard: u64) -> Admission {
        debug_assert!(guard <= self.ends, "a guard is read from this participant");
        if guard < self.trusted_from {
            return Admission::Stale;
        }
        match self.last_end.get(key) {
            Some(&end) if end > guard => Admission::Ended,
            _ => Admission::Admitted,
        }
    }

    pub fn check_invariants(&self) {
        assert!(self.trusted_from <= self.ends, "trust starts at an end recorded");
        assert_eq!(self.last_end.len(), self.by_number.len(), "each remembered end is numbered once");
        assert!(self.last_end.len() <= ENDS_REMEMBERED_MAX, "the ends remembered are bounded");
        if let Some((&newest, _)) = self.by_number.last_key_value() {
            assert!(newest <= self.ends, "ends are numbered in order");
        }
        if let Some((&oldest, _)) = self.by_number.first_key_value() {
            assert!(oldest > self.trusted_from || self.trusted_from == 0, "a remembered end is trusted");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_verified_before_its_transaction_ended_is_refused_and_one_after_is_admitted() {
        let mut ends = EndGuard::<i64>::default();
        let before = ends.guard();
        ends.record_end(7);
        assert_eq!(ends.admits(&7, before), Admission::Ended);
        assert_eq!(ends.admits(&8, before), Admission::Admitted, "another producer's end is not this one's");
        assert_eq!(ends.admits(&7, ends.guard()), Admission::Admitted);
    }

    #[test]
    fn a_guard_from_before_a_rebuild_or_an_end_forgotten_is_stale() {
        let mut ends = EndGuard::<i64>::default();
        ends.record_end(1);
        let before = ends.guard();
        ends.forget();
        assert_eq!(ends.admits(&1, before - 1), Admission::Stale);
        assert_eq!(ends.admits(&1, before), Admission::Admitted, "no end of 1 since the rebuild");
        for key in 0..=ENDS_REMEMBERED_MAX as i64 {
            ends.record_end(key);
        }
        assert_eq!(ends.admits(&5, before), Admission::Stale, "key 0's end was forgotten; 5 is refused anyway");
        assert_eq!(ends.admits(&5, ends.guard()), Admission::Admitted);
    }
}
