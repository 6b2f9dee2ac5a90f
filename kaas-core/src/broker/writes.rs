//! The broker's writes into transaction participants, orchestrated here so that a Kafka handler
//! decodes, makes one call and encodes: a Produce's records into a partition, a
//! TxnOffsetCommit's offsets into a group. A transactional write that opens its producer's
//! transaction in a participant is verified first with the transaction's coordinator, wherever
//! it lives (KIP-890; `Join::Add` from transactions v2 adds the participant instead), under a
//! guard read before asking (`participant::EndGuard`): if the transaction ended meanwhile, the
//! write is refused rather than opening a transaction nobody will end.

use bytes::Bytes;
use tokio::sync::oneshot;

use super::Broker;
use crate::env::Env;
use crate::error::{CoreError, CoreResult};
use crate::group::CommitRequest;
use crate::participant::{Join, Participant, TxnWriter};
use crate::partition::log::batch::{self, BatchHeader};
use crate::partition::{self, AppendOutcome, PartitionHandle};
use crate::topics::MetadataSnapshot;
use crate::txn::state::txn_key;

/// One partition's answer to a Produce: known at once (refused before anything was queued, or
/// acks=0), or once the append is durable.
pub enum Produced {
    Done(CoreResult<AppendOutcome>),
    Waiting(oneshot::Receiver<CoreResult<AppendOutcome>>),
}

impl Produced {
    /// The outcome, and whether the partition took the append (rather than a check before it).
    pub async fn outcome(self) -> (CoreResult<AppendOutcome>, bool) {
        match self {
            Produced::Done(result) => (result, false),
            Produced::Waiting(rx) => (rx.await.unwrap_or(Err(CoreError::Storage("partition stopped".into()))), true),
        }
    }
}

/// What a Produce request says of all its partitions.
#[derive(Debug, Clone)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    /// `Join::Add` from Produce v12 (transactions v2).
    pub join: Join,
    pub acks: i16,
}

/// A TxnOffsetCommit: offsets staged in a group for the producer's transaction (KIP-447).
pub struct TxnOffsetCommit {
    pub writer: TxnWriter,
    pub commit: CommitRequest,
}

impl<E: Env> Broker<E> {
    /// One partition's records of a Produce: checked (the batches, and one batch per partition
    /// from an idempotent producer, as Apache takes them), verified if they open a transaction
    /// here, and queued on the partition before this returns, so that appends from one
    /// connection keep their order. `topic` is None for a topic id no topic has (Produce v13).
    pub async fn produce(
        &self,
        snapshot: &MetadataSnapshot,
        request: &ProduceRequest,
        topic: Option<&str>,
        index: i32,
        records: Option<Bytes>,
    ) -> Produced {
        if !matches!(request.acks, -1..=1) {
            return Produced::Done(Err(CoreError::InvalidRequiredAcks));
        }
        let Some(topic) = topic else { return Produced::Done(Err(CoreError::UnknownTopicId)) };
        let Some(partition) = snapshot.partition(topic, index) else {
            return Produced::Done(Err(CoreError::UnknownTopicOrPartition));
        };
        let Some(records) = records else { return Produced::Done(Err(CoreError::CorruptMessage)) };
        let batches = match batch::split_produced(&records) {
            Ok(batches) => batches,
            Err(e) => return Produced::Done(Err(e.into())),
        };
        if batches.len() > 1 && batches.iter().any(|(h, _)| h.producer_id >= 0) {
            return Produced::Done(Err(CoreError::InvalidRecord));
        }
        let guard = match batches.iter().find(|(h, _)| h.is_transactional()) {
            None => None,
            Some((header, _)) => {
                match self.verify_produce(request, (topic.to_string(), index), partition, header).await {
                    Ok(guard) => guard,
                    Err(e) => return Produced::Done(Err(e)),
                }
            }
        };
        if request.acks == 0 {
            partition.append_unacknowledged(batches, guard).await;
            return Produced::Done(Ok(AppendOutcome::at(-1)));
        }
        Produced::Waiting(partition.append(batches, guard).await)
    }

    /// The produce path's check before a transactional batch is queued on `partition`: the
    /// guard for the append (None: the transaction is open here already), or the answer a
    /// producer expects: fenced as Produce says it, a coordinator that cannot answer now as a
    /// retriable error every client version knows.
    async fn verify_produce(
        &self,
        request: &ProduceRequest,
        tp: (String, i32),
        partition: &PartitionHandle,
        header: &BatchHeader,
    ) -> CoreResult<Option<u64>> {
        // Read before the coordinator is asked: a marker written after this voids the answer.
        let view = partition.txn_view();
        if view.ongoing.get(&header.producer_id) == Some(&header.producer_epoch) || !partition::verification_required()
        {
            return Ok(None);
        }
        let Some(transactional_id) = request.transactional_id.clone().filter(|t| !t.is_empty()) else {
            return Err(CoreError::InvalidTxnState);
        };
        let writer = TxnWriter {
            transactional_id,
            producer_id: header.producer_id,
            producer_epoch: header.producer_epoch,
            join: request.join,
        };
        match self.join_txn(&writer, Participant::Partition(tp)).await {
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

    /// TxnOffsetCommit: the producer's transaction must hold the group (from transactions v2
    /// the commit adds it), and the member be current in the group (KIP-447).
    pub async fn txn_offset_commit(&self, request: TxnOffsetCommit) -> CoreResult<()> {
        if request.commit.group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        // Read before the coordinator is asked: an end of the transaction after this voids the answer.
        let guard = self.groups.txn_guard().await?;
        let group = Participant::Group(request.commit.group_id.clone());
        self.join_txn(&request.writer, group).await?;
        self.groups.txn_commit(request.commit, request.writer.producer_id, guard).await
    }

    /// Asks the coordinator of the writer's transactional id, here or on a peer, whether
    /// `participant` is in the producer's open transaction (or, `Join::Add`, to add it).
    pub async fn join_txn(&self, writer: &TxnWriter, participant: Participant) -> CoreResult<()> {
        let TxnWriter { transactional_id, producer_id, producer_epoch, join } = writer.clone();
        match self.membership.view().peer_owning(&txn_key(&transactional_id)) {
            None => self.txn.verify(transactional_id, producer_id, producer_epoch, participant, join).await,
            Some(peer) => {
                self.peers.verify(peer, transactional_id, producer_id, producer_epoch, participant, join).await
            }
        }
    }
}
