//! The owner's side of a transaction's markers: what WriteTxnMarkers from a peer coordinator
//! and the marker watcher (`marker_queue`) both do with the markers addressed to this broker.
//! Each marker goes into its partition's log, and each group's staged offsets are ended; every
//! answer comes once that is durable.

use tokio::sync::oneshot;

use crate::broker::Broker;
use crate::cluster::peers::Markers;
use crate::env::Env;
use crate::error::{CoreError, CoreResult};
use crate::group::GroupsHandle;
use crate::log::control::Marker;
use crate::partition::AppendOutcome;
use crate::topics::TopicsHandle;
use crate::txn::coordinator::TxnMember;
use crate::txn::marker_queue;

impl<E: Env> Broker<E> {
    /// Writes `markers` into the partitions and groups this broker owns (`write_markers_here`).
    pub async fn write_markers_here(&self, markers: &Markers) -> Vec<(TxnMember, CoreResult<()>)> {
        write_markers_here(&self.topics, &self.groups, markers).await
    }

    /// Writes the markers a peer coordinator's call carries, by the marker queue's rule
    /// (`marker_queue::apply_called`): only those its queued entry still owes.
    pub async fn write_called_markers(&self, markers: Markers) -> Vec<(TxnMember, CoreResult<()>)> {
        marker_queue::apply_called(&self.env, self.config.broker_id, self.topics.clone(), self.groups.clone(), markers)
            .await
    }
}

/// Writes `markers` into the partitions and groups this broker owns, all queued before any is
/// awaited (one group commit per partition); one answer per member, in order. A partition not
/// owned here answers NOT_LEADER_OR_FOLLOWER, as its actor says.
pub async fn write_markers_here(
    topics: &TopicsHandle,
    groups: &GroupsHandle,
    markers: &Markers,
) -> Vec<(TxnMember, CoreResult<()>)> {
    let snapshot = topics.snapshot();
    let marker = if markers.commit { Marker::Commit } else { Marker::Abort };
    let mut queued = Vec::new();
    for member in &markers.members {
        let pending = match member {
            TxnMember::Group(group_id) => Pending::Group(group_id.clone()),
            TxnMember::Partition((topic, index)) => match snapshot.partition(topic, *index) {
                None => Pending::Done(Err(CoreError::UnknownTopicOrPartition)),
                Some(partition) => Pending::Marker(
                    partition
                        .queue_marker(markers.producer_id, markers.producer_epoch, marker, markers.coordinator_epoch)
                        .await,
                ),
            },
        };
        queued.push((member.clone(), pending));
    }
    let mut answers = Vec::with_capacity(queued.len());
    for (member, pending) in queued {
        let result = match pending {
            Pending::Done(result) => result,
            Pending::Marker(written) => match written.await {
                Ok(written) => written.map(|_| ()),
                Err(_) => Err(CoreError::Storage("partition stopped".into())),
            },
            Pending::Group(group_id) => groups.complete_txn(group_id, markers.producer_id, markers.commit).await,
        };
        answers.push((member, result));
    }
    answers
}

enum Pending {
    Done(CoreResult<()>),
    Marker(oneshot::Receiver<CoreResult<AppendOutcome>>),
    Group(String),
}
