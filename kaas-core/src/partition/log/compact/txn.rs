//! What a batch is to the cleaner with transactions in the log, read in offset order (Apache's
//! CleanedTransactionMetadata): an aborted transaction's records are dropped, a committed one's
//! are cleaned like any others, and a commit marker stays while any batch of its transaction is
//! left in the log; once none is, it may go too, but only past the delete horizon (a consumer
//! that read the transaction's records must still find its end). An abort marker stays for good:
//! the aborted index still names its transaction.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::partition::log::batch::BatchHeader;
use crate::partition::log::control::Marker;
use crate::partition::producer::state::AbortedTxn;

/// What the cleaner may do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFate {
    /// Records outside any transaction, or of a committed one: each kept or not by its key.
    Records,
    /// A record batch of an aborted transaction: dropped whole.
    Aborted,
    /// A marker: `removable` when no batch of its transaction is left in the log.
    Marker { removable: bool },
}

#[derive(Debug, Default)]
pub struct TxnTracker {
    /// The aborted transactions from the log's aborted index not reached yet, by first offset.
    aborted: VecDeque<AbortedTxn>,
    /// Producers inside an aborted transaction: its marker's offset, and whether a batch of it
    /// was seen in this pass.
    ongoing_aborted: BTreeMap<i64, (i64, bool)>,
    /// Producers inside a transaction that is not aborted (a batch of it was seen).
    ongoing_committed: BTreeSet<i64>,
}

impl TxnTracker {
    /// A tracker for a pass from the log's start, given the aborted transactions it holds.
    pub fn new(mut aborted: Vec<AbortedTxn>) -> TxnTracker {
        aborted.sort_by_key(|t| (t.first_offset, t.producer_id));
        TxnTracker { aborted: aborted.into(), ..TxnTracker::default() }
    }

    /// The fate of the next batch of the log; `marker` is what a control batch holds.
    pub fn on_batch(&mut self, header: &BatchHeader, marker: Option<Marker>) -> BatchFate {
        while self.aborted.front().is_some_and(|t| t.first_offset <= header.last_offset()) {
            let txn = self.aborted.pop_front().expect("front");
            self.ongoing_aborted.insert(txn.producer_id, (txn.last_offset, false));
        }
        let producer = header.producer_id;
        // A marker an earlier pass removed ends its transaction all the same: a batch past it
        // belongs to the producer's next one.
        if self.ongoing_aborted.get(&producer).is_some_and(|&(marker, _)| marker < header.base_offset) {
            self.ongoing_aborted.remove(&producer);
        }
        if header.is_control() {
            return match marker {
                Some(Marker::Abort) => {
                    // Kept, always: the partition's aborted index still names its transaction,
                    // and a read_committed reader given that entry skips the producer's
                    // transactional records until it meets this marker. Apache drops the entry
                    // with the marker; kaas keeps both, a batch per aborted transaction.
                    self.ongoing_aborted.remove(&producer);
                    BatchFate::Marker { removable: false }
                }
                Some(Marker::Commit) => BatchFate::Marker { removable: !self.ongoing_committed.remove(&producer) },
                // A control batch the cleaner does not know: kept.
                None => BatchFate::Marker { removable: false },
            };
        }
        if !header.is_transactional() {
            return BatchFate::Records;
        }
        if let Some((_, seen)) = self.ongoing_aborted.get_mut(&producer) {
            *seen = true;
            return BatchFate::Aborted;
        }
        if crate::mutant!(CleanCommittedAsAborted) {
            return BatchFate::Aborted;
        }
        self.ongoing_committed.insert(producer);
        BatchFate::Records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(base_offset: i64, producer_id: i64, transactional: bool, control: bool) -> BatchHeader {
        let attributes = (if transactional { 0x10 } else { 0 }) | (if control { 0x20 } else { 0 });
        BatchHeader {
            base_offset,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: 0,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: 0,
            base_sequence: 0,
            records_count: 1,
        }
    }

    #[test]
    fn aborted_records_go_and_markers_stay_while_their_transaction_has_batches() {
        // Producer 1 aborts [0, 2] (marker at 2), producer 2 commits [1, 3], a plain batch at 4;
        // producer 1's next transaction at 5 commits at 6.
        let aborted = vec![AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 2 }];
        let mut t = TxnTracker::new(aborted);
        assert_eq!(t.on_batch(&header(0, 1, true, false), None), BatchFate::Aborted);
        assert_eq!(t.on_batch(&header(1, 2, true, false), None), BatchFate::Records);
        assert_eq!(t.on_batch(&header(2, 1, true, true), Some(Marker::Abort)), BatchFate::Marker { removable: false });
        assert_eq!(t.on_batch(&header(3, 2, true, true), Some(Marker::Commit)), BatchFate::Marker { removable: false });
        assert_eq!(t.on_batch(&header(4, 3, false, false), None), BatchFate::Records);
        assert_eq!(t.on_batch(&header(5, 1, true, false), None), BatchFate::Records, "a new transaction");
        assert_eq!(t.on_batch(&header(6, 1, true, true), Some(Marker::Commit)), BatchFate::Marker { removable: false });
    }

    #[test]
    fn a_marker_whose_batches_are_gone_may_go() {
        // An earlier pass dropped the aborted records at 0 and the committed ones at 1.
        let aborted = vec![AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 2 }];
        let mut t = TxnTracker::new(aborted);
        let abort = t.on_batch(&header(2, 1, true, true), Some(Marker::Abort));
        assert_eq!(abort, BatchFate::Marker { removable: false }, "an abort marker stays for its index entry");
        assert_eq!(t.on_batch(&header(3, 2, true, true), Some(Marker::Commit)), BatchFate::Marker { removable: true });
        assert_eq!(t.on_batch(&header(4, 2, true, true), None), BatchFate::Marker { removable: false }, "unknown kept");
    }

    #[test]
    fn a_removed_abort_marker_still_ends_its_transaction() {
        // Producer 1 aborted [0, 2]; a pass removed both its records and its marker. Its next
        // transaction, at 5, is not aborted.
        let aborted = vec![AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 2 }];
        let mut t = TxnTracker::new(aborted);
        assert_eq!(t.on_batch(&header(3, 2, false, false), None), BatchFate::Records);
        assert_eq!(t.on_batch(&header(5, 1, true, false), None), BatchFate::Records);
    }
}
