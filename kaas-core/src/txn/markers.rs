//! The one path by which a transaction's markers reach the participants this broker owns,
//! whoever sends them: the coordinator for its own participants, WriteTxnMarkers from a peer
//! coordinator or an admin, and the marker watcher (`marker_queue`). A partition gets a COMMIT
//! or ABORT marker in its log; a group ends the offsets the producer staged; a share partition
//! (KIP-1289) ends the acknowledgements staged in it. Every answer comes once that is durable.

use tokio::sync::oneshot;

use crate::error::{CoreError, CoreResult};
use crate::group::GroupsHandle;
use crate::participant::Participant;
use crate::partition::AppendOutcome;
use crate::partition::log::control::Marker;
use crate::partition::share::ShareCommand;
use crate::topics::TopicsHandle;
use crate::txn::peers::Markers;

/// One participant's marker on its way: queued on a partition (durable when its receiver
/// answers), or a group's end, carried out when awaited.
pub struct Delivery {
    pub participant: Participant,
    pending: Pending,
    producer_id: i64,
    commit: bool,
}

enum Pending {
    Done(CoreResult<()>),
    Marker(oneshot::Receiver<CoreResult<AppendOutcome>>),
    Share(oneshot::Receiver<CoreResult<()>>),
    Group(String),
}

impl Delivery {
    /// Whether this is queued on a partition already (a marker in its log, or its share
    /// partition's end), not a group's end.
    pub fn is_queued(&self) -> bool {
        matches!(self.participant, Participant::Partition(_) | Participant::SharePartition(_))
    }

    /// Waits until the marker is durable (a group's end: carries it out first).
    pub async fn durable(self, groups: &GroupsHandle) -> (Participant, CoreResult<()>) {
        let result = match self.pending {
            Pending::Done(result) => result,
            Pending::Marker(written) => match written.await {
                Ok(written) => written.map(|_| ()),
                Err(_) => Err(CoreError::Storage("partition stopped".into())),
            },
            Pending::Share(ended) => {
                ended.await.unwrap_or_else(|_| Err(CoreError::Storage("partition stopped".into())))
            }
            Pending::Group(group_id) => groups.complete_txn(group_id, self.producer_id, self.commit).await,
        };
        (self.participant, result)
    }
}

/// Queues `markers` on the partitions this broker owns, every one before any is awaited (one
/// group commit per partition); one delivery per participant, in order. A partition not owned
/// here answers NOT_LEADER_OR_FOLLOWER, as its actor says.
pub async fn queue_here(topics: &TopicsHandle, markers: &Markers) -> Vec<Delivery> {
    let snapshot = topics.snapshot();
    let marker = if markers.commit { Marker::Commit } else { Marker::Abort };
    let mut queued = Vec::with_capacity(markers.participants.len());
    for participant in &markers.participants {
        let pending = match participant {
            Participant::Group(group_id) => Pending::Group(group_id.clone()),
            Participant::SharePartition((group_id, topic, index)) => match snapshot.partition(topic, *index) {
                None => Pending::Done(Err(CoreError::UnknownTopicOrPartition)),
                Some(partition) => {
                    let (reply, ended) = oneshot::channel();
                    let command = ShareCommand::Complete {
                        group_id: group_id.clone(),
                        producer_id: markers.producer_id,
                        producer_epoch: markers.producer_epoch,
                        commit: markers.commit,
                        reply,
                    };
                    partition.share(command).await;
                    Pending::Share(ended)
                }
            },
            Participant::Partition((topic, index)) => match snapshot.partition(topic, *index) {
                None => Pending::Done(Err(CoreError::UnknownTopicOrPartition)),
                Some(partition) => Pending::Marker(
                    partition
                        .queue_marker(markers.producer_id, markers.producer_epoch, marker, markers.coordinator_epoch)
                        .await,
                ),
            },
        };
        let (producer_id, commit) = (markers.producer_id, markers.commit);
        queued.push(Delivery { participant: participant.clone(), pending, producer_id, commit });
    }
    assert_eq!(queued.len(), markers.participants.len(), "one delivery per participant");
    queued
}

/// Writes `markers` into the participants this broker owns (`queue_here`) and waits until each
/// is durable; one answer per participant, in order.
pub async fn write_markers_here(
    topics: &TopicsHandle,
    groups: &GroupsHandle,
    markers: &Markers,
) -> Vec<(Participant, CoreResult<()>)> {
    let mut answers = Vec::with_capacity(markers.participants.len());
    for delivery in queue_here(topics, markers).await {
        answers.push(delivery.durable(groups).await);
    }
    answers
}
