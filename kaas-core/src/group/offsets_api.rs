//! Committed offsets as the coordinator serves them (OffsetCommit, OffsetFetch, OffsetDelete)
//! and a group's part in transactions (KIP-447): TxnOffsetCommit stages offsets for the
//! producer's transaction, and its marker ends them (committed or dropped). A staging is refused
//! if the producer's transaction ended after the coordinator verified it (`participant::EndGuard`).

use std::collections::BTreeSet;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{CommitRequest, FetchedOffset, GroupCoordinator, GroupKind, PartitionResults, TopicPartition};
use crate::env::{Clock, Env, Rng};
use crate::error::{CoreError, CoreResult};
use crate::participant::Admission;

pub(super) enum OffsetsCommand {
    Commit(CommitRequest, oneshot::Sender<CoreResult<()>>),
    /// The end guard to read before a TxnOffsetCommit's transaction is verified.
    TxnGuard(oneshot::Sender<u64>),
    TxnCommit {
        request: CommitRequest,
        producer_id: i64,
        guard: u64,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    CompleteTxn {
        group_id: String,
        producer_id: i64,
        commit: bool,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    Fetch {
        group_id: String,
        partitions: Option<Vec<TopicPartition>>,
        require_stable: bool,
        reply: oneshot::Sender<CoreResult<Vec<FetchedOffset>>>,
    },
    /// OffsetDelete: each partition's result, or the group's error.
    DeleteOffsets {
        group_id: String,
        partitions: Vec<TopicPartition>,
        reply: oneshot::Sender<CoreResult<PartitionResults>>,
    },
}

impl OffsetsCommand {
    /// The group a command is about; the guard is the coordinator's, of no one group.
    pub(super) fn group_id(&self) -> Option<&str> {
        match self {
            OffsetsCommand::Commit(request, _) | OffsetsCommand::TxnCommit { request, .. } => Some(&request.group_id),
            OffsetsCommand::CompleteTxn { group_id, .. }
            | OffsetsCommand::Fetch { group_id, .. }
            | OffsetsCommand::DeleteOffsets { group_id, .. } => Some(group_id),
            OffsetsCommand::TxnGuard(_) => None,
        }
    }

    pub(super) fn refuse(self, error: CoreError) {
        match self {
            OffsetsCommand::Commit(_, reply) => drop(reply.send(Err(error))),
            OffsetsCommand::TxnCommit { reply, .. } | OffsetsCommand::CompleteTxn { reply, .. } => {
                drop(reply.send(Err(error)))
            }
            OffsetsCommand::Fetch { reply, .. } => drop(reply.send(Err(error))),
            OffsetsCommand::DeleteOffsets { reply, .. } => drop(reply.send(Err(error))),
            OffsetsCommand::TxnGuard(_) => {}
        }
    }
}

impl<E: Env> GroupCoordinator<E> {
    pub(super) async fn handle_offsets(&mut self, command: OffsetsCommand, now: Instant) {
        match command {
            OffsetsCommand::Commit(request, reply) => {
                let _ = reply.send(self.commit(request, now).await);
            }
            OffsetsCommand::TxnGuard(reply) => {
                let _ = reply.send(self.ends.guard());
            }
            OffsetsCommand::TxnCommit { request, producer_id, guard, reply } => {
                let _ = reply.send(self.txn_commit(request, producer_id, guard).await);
            }
            OffsetsCommand::CompleteTxn { group_id, producer_id, commit, reply } => {
                self.ends.record_end((group_id.clone(), producer_id));
                let result = match self.offsets.complete_txn(&group_id, producer_id, commit).await {
                    Ok(()) => self.verify_lease(&group_id).await,
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            OffsetsCommand::Fetch { group_id, partitions, require_stable, reply } => {
                let fetched = self.offsets.fetch(&group_id, partitions);
                let answered = fetched
                    .into_iter()
                    .map(|(tp, committed)| {
                        if require_stable && self.offsets.has_pending(&group_id, &tp) {
                            (tp, Err(CoreError::UnstableOffsetCommit))
                        } else {
                            (tp, Ok(committed))
                        }
                    })
                    .collect();
                let _ = reply.send(Ok(answered));
            }
            OffsetsCommand::DeleteOffsets { group_id, partitions, reply } => {
                let _ = reply.send(self.delete_offsets(&group_id, partitions).await);
            }
        }
    }

    async fn commit(&mut self, request: CommitRequest, now: Instant) -> CoreResult<()> {
        if request.group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        match self.kind(&request.group_id) {
            Some(GroupKind::Consumer) => {
                let consumer = self.consumer_group(&request.group_id).expect("a consumer group with members");
                consumer.check_commit(&request.member_id, request.generation_id)?;
            }
            Some(GroupKind::Classic) | None => {
                let group = self.group_mut(&request.group_id);
                group.check_commit(&request.member_id, request.group_instance_id.as_deref(), request.generation_id)?;
                group.touch(&request.member_id, now);
            }
            Some(GroupKind::Share) => return Err(CoreError::GroupIdNotFound),
        }
        if crate::buggify!("groups.slow_commit") {
            // A slow volume: the coordinator stalls with the commit neither durable nor answered.
            self.env.clock().sleep_ms(self.env.rng().below(200)).await;
        }
        let now_ms = self.env.clock().now_ms();
        self.offsets.commit(&request.group_id, request.offsets, now_ms).await?;
        self.verify_lease(&request.group_id).await
    }

    async fn txn_commit(&mut self, request: CommitRequest, producer_id: i64, guard: u64) -> CoreResult<()> {
        if request.group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        match self.ends.admits(&(request.group_id.clone(), producer_id), guard) {
            Admission::Admitted => {}
            // The transaction ended after it was verified: this is a late request of it.
            Admission::Ended => return Err(CoreError::InvalidTxnState),
            // Verified before the oldest end remembered: the producer retries, verified anew.
            Admission::Stale => return Err(CoreError::CoordinatorLoadInProgress),
        }
        match self.kind(&request.group_id) {
            Some(GroupKind::Consumer) => {
                let consumer = self.consumer_group(&request.group_id).expect("a consumer group with members");
                // A stale member epoch: TxnOffsetCommit before v6 answers it as an old generation
                // (the handler knows the version).
                consumer.check_commit(&request.member_id, request.generation_id)?;
            }
            Some(GroupKind::Classic) | None => {
                let group = self.group_mut(&request.group_id);
                let (member_id, instance) = (&request.member_id, request.group_instance_id.as_deref());
                group.check_txn_commit(member_id, instance, request.generation_id)?;
            }
            // A share group commits no offsets: its progress is its share partitions'.
            Some(GroupKind::Share) => return Err(CoreError::GroupIdNotFound),
        }
        let now_ms = self.env.clock().now_ms();
        self.offsets.stage(&request.group_id, producer_id, request.offsets, now_ms).await?;
        self.verify_lease(&request.group_id).await
    }

    async fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: Vec<TopicPartition>,
    ) -> CoreResult<PartitionResults> {
        let subscribed = match (self.consumer_groups.get(group_id), self.groups.get(group_id)) {
            // A consumer group's members say what they subscribe to (classic ones too).
            (Some(consumer), _) if !consumer.is_empty() => {
                Some(consumer.members.values().flat_map(|m| m.subscription.iter().cloned()).collect())
            }
            (_, Some(group)) if !group.is_empty() => match group.protocol_type.as_deref() {
                Some("consumer") => group.subscribed_topics(),
                _ => return Err(CoreError::NonEmptyGroup),
            },
            (None, None) => return Err(CoreError::GroupIdNotFound),
            _ => Some(BTreeSet::new()),
        };
        let refused = |(topic, _): &TopicPartition| subscribed.as_ref().is_none_or(|s| s.contains(topic));
        let deleted: Vec<TopicPartition> = partitions.iter().filter(|tp| !refused(tp)).cloned().collect();
        self.offsets.delete_offsets(group_id, &deleted).await?;
        self.verify_lease(group_id).await?;
        Ok(partitions
            .into_iter()
            .map(|tp| {
                let result = if refused(&tp) { Err(CoreError::GroupSubscribedToTopic) } else { Ok(()) };
                (tp, result)
            })
            .collect())
    }
}
