//! KIP-890 part 1, the partition side: a transactional batch of a producer whose transaction
//! is not open in the partition yet is appended only once the transaction's coordinator (this
//! broker or a peer, by the ownership view) has the partition in that transaction. Apache's
//! partition leaders ask the same way (AddPartitionsToTxn v4, verify_only).

use crate::broker::Broker;
use crate::cluster::txn_key;
use crate::env::Env;
use crate::error::{CoreError, CoreResult};
use crate::log::batch::BatchHeader;
use crate::partition::{self, PartitionHandle};
use crate::txn::coordinator::{Join, TxnMember};

impl<E: Env> Broker<E> {
    /// Asks the coordinator of `transactional_id`, wherever it lives, whether `member` is in
    /// the producer's open transaction (or, `Join::Add`, to add it).
    pub async fn verify_txn(
        &self,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        member: TxnMember,
        join: Join,
    ) -> CoreResult<()> {
        match self.membership.view().peer_owning(&txn_key(&transactional_id)) {
            None => self.txn.verify(transactional_id, producer_id, producer_epoch, member, join).await,
            Some(peer) => self.peers.verify(peer, transactional_id, producer_id, producer_epoch, member, join).await,
        }
    }

    /// The produce path's check before a transactional batch is queued on `partition`.
    /// Returns the guard for the append (None: the transaction is open here already), or the
    /// answer a producer expects: fenced as Produce says it, a coordinator that cannot answer
    /// now as a retriable error every client version knows.
    pub async fn verify_produce(
        &self,
        transactional_id: Option<&str>,
        tp: (String, i32),
        partition: &PartitionHandle,
        header: &BatchHeader,
        join: Join,
    ) -> CoreResult<Option<u64>> {
        // Read before the coordinator is asked: a marker written after this voids the answer.
        let view = partition.txn_view();
        if view.ongoing.get(&header.producer_id) == Some(&header.producer_epoch) || !partition::verification_required()
        {
            return Ok(None);
        }
        let Some(transactional_id) = transactional_id.filter(|t| !t.is_empty()) else {
            return Err(CoreError::InvalidTxnState);
        };
        let member = TxnMember::Partition(tp);
        match self
            .verify_txn(transactional_id.to_string(), header.producer_id, header.producer_epoch, member, join)
            .await
        {
            Ok(()) => Ok(Some(view.markers_written)),
            Err(CoreError::ProducerFenced) => Err(CoreError::InvalidProducerEpoch),
            Err(
                CoreError::ConcurrentTransactions
                | CoreError::CoordinatorNotAvailable
                | CoreError::NotCoordinator
                | CoreError::CoordinatorLoadInProgress,
            ) => Err(CoreError::NotEnoughReplicas),
            Err(e) => Err(e),
        }
    }
}
