//! Calls to peer brokers: the transaction coordinator's markers to a participant's owner
//! (WriteTxnMarkers), and a participant owner's KIP-890 verification with the coordinator of a
//! transactional id (AddPartitionsToTxn: verify_only, or an add for a v2 write). kaas-core says
//! what to ask and of whom; the wire client that asks is kaas-net's (`kaas_net::peers`), attached when a server
//! starts. Without one (a broker in a unit test) every call fails at once, retriably.
//!
//! A group is named on the wire as the pseudo-topic `__consumer_offsets/<group id>`,
//! partition 0: '/' is in no topic name, so it never meets a real partition. A fence (a
//! producer's epoch bumped by its coordinator) travels as a marker naming no partition, which
//! an Apache broker would take as a marker with nothing to write: the peer refuses the older
//! epochs on every partition it owns.
//!
//! A peer's calls carry the client id `kaas-broker-<id>`. Its markers are written only as the
//! marker queue's entry still owes them (`marker_queue::apply_called`); WriteTxnMarkers from any
//! other client (an admin's abort of a hanging transaction) is written as asked.

use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

pub use crate::cluster::Endpoint;
use crate::error::{CoreError, CoreResult};
use crate::participant::{Join, Participant};

/// Calls queued for the wire client before it refuses more.
const QUEUED_MAX: usize = 1024;
const GROUP_PSEUDO_TOPIC: &str = "__consumer_offsets/";
const SHARE_PSEUDO_TOPIC: &str = "__share_group_state/";
const CLIENT_ID_PREFIX: &str = "kaas-broker-";

/// The client id of broker `broker_id`'s calls to its peers.
pub fn client_id(broker_id: i32) -> String {
    format!("{CLIENT_ID_PREFIX}{broker_id}")
}

/// The markers of one transaction that one peer owes: for its partitions and its groups.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Markers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    /// In the order the coordinator lists them; on the volume as `members` (its first name).
    #[serde(alias = "members")]
    pub participants: Vec<Participant>,
}

pub enum PeerCall {
    /// Answered once every partition the peer owns refuses the producer's older epochs.
    Fence { to: Endpoint, producer_id: i64, producer_epoch: i16, reply: oneshot::Sender<CoreResult<()>> },
    /// Answered Ok once every marker is durable on the peer.
    WriteMarkers { to: Endpoint, markers: Markers, reply: oneshot::Sender<Vec<(Participant, CoreResult<()>)>> },
    /// Answered Ok if the member is the share group's at that epoch (KIP-1289's staging), as the
    /// group's coordinator says.
    CheckShareMember {
        to: Endpoint,
        group_id: String,
        member_id: String,
        member_epoch: Option<i32>,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    /// Answered Ok once the peer reset one of the share partitions it owns: to a new start
    /// offset, or (`start_offset` None) forgotten (AlterShareGroupOffsets, DeleteShareGroupOffsets).
    ResetShare {
        to: Endpoint,
        group_id: String,
        topic: String,
        partition: i32,
        start_offset: Option<i64>,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    /// Answered with the high watermark of each partition asked that the peer owns (a group's
    /// lag, for the operators' gauges).
    HighWatermarks { to: Endpoint, partitions: Vec<(String, i32)>, reply: oneshot::Sender<Vec<((String, i32), i64)>> },
    /// Answered with one of the share partitions the peer owns, as its window has it: the start
    /// offset and lag (DescribeShareGroupOffsets), or `None` if the group never consumed it.
    DescribeShare {
        to: Endpoint,
        group_id: String,
        topic: String,
        partition: i32,
        reply: oneshot::Sender<CoreResult<Option<crate::partition::share::ShareOffsets>>>,
    },
    /// Answered Ok once the peer appended `records` (one batch, no producer) to a partition it
    /// owns: a share group's dead letters (KIP-1191), sent as a Produce with acks=-1.
    Produce {
        to: Endpoint,
        topic: String,
        partition: i32,
        records: bytes::Bytes,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    /// Answered Ok if `member` is in the producer's open transaction (or, `Join::Add`, added).
    Verify {
        to: Endpoint,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        member: Participant,
        join: Join,
        reply: oneshot::Sender<CoreResult<()>>,
    },
}

#[derive(Clone, Default)]
pub struct PeersHandle {
    tx: Arc<OnceLock<mpsc::Sender<PeerCall>>>,
}

impl PeersHandle {
    /// The queue of calls for the wire client to serve; `None` if one is attached already.
    pub fn attach(&self) -> Option<mpsc::Receiver<PeerCall>> {
        let (tx, rx) = mpsc::channel(QUEUED_MAX);
        self.tx.set(tx).ok().map(|()| rx)
    }

    /// Queues a call; the receiver fails (its sender dropped) if no wire client takes it.
    async fn queue<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> PeerCall) -> oneshot::Receiver<T> {
        let (reply, rx) = oneshot::channel();
        if let Some(tx) = self.tx.get() {
            let _ = tx.send(make(reply)).await;
        }
        rx
    }

    /// Queues `markers` for the peer; the receiver gets the answer per member, in the order
    /// given, once the peer answered (or fails if the call got no answer).
    pub async fn queue_markers(
        &self,
        to: Endpoint,
        markers: Markers,
    ) -> oneshot::Receiver<Vec<(Participant, CoreResult<()>)>> {
        self.queue(|reply| PeerCall::WriteMarkers { to, markers, reply }).await
    }

    /// Queues a fence for the peer; the receiver resolves once the peer applied it.
    pub async fn queue_fence(
        &self,
        to: Endpoint,
        producer_id: i64,
        producer_epoch: i16,
    ) -> oneshot::Receiver<CoreResult<()>> {
        self.queue(|reply| PeerCall::Fence { to, producer_id, producer_epoch, reply }).await
    }

    pub async fn verify(
        &self,
        to: Endpoint,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        member: Participant,
        join: Join,
    ) -> CoreResult<()> {
        let call = |reply| PeerCall::Verify { to, transactional_id, producer_id, producer_epoch, member, join, reply };
        self.queue(call).await.await.unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }
}

impl PeersHandle {
    /// Asks the owner of a share partition to reset it (AlterShareGroupOffsets,
    /// DeleteShareGroupOffsets).
    pub async fn reset_share_partition(
        &self,
        to: Endpoint,
        group_id: &str,
        topic: &str,
        partition: i32,
        start_offset: Option<i64>,
    ) -> CoreResult<()> {
        let (group_id, topic) = (group_id.to_string(), topic.to_string());
        let call = |reply| PeerCall::ResetShare { to, group_id, topic, partition, start_offset, reply };
        self.queue(call).await.await.unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    /// One share partition's start offset and lag, as its owner on a peer has them.
    pub async fn describe_share_partition(
        &self,
        to: Endpoint,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> CoreResult<Option<crate::partition::share::ShareOffsets>> {
        let (group_id, topic) = (group_id.to_string(), topic.to_string());
        let call = |reply| PeerCall::DescribeShare { to, group_id, topic, partition, reply };
        self.queue(call).await.await.unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    /// The high watermarks of partitions a peer owns; those it did not answer for are left out.
    pub async fn high_watermarks(
        &self,
        to: Endpoint,
        partitions: Vec<(String, i32)>,
    ) -> CoreResult<Vec<((String, i32), i64)>> {
        let call = |reply| PeerCall::HighWatermarks { to, partitions, reply };
        self.queue(call).await.await.map_err(|_| CoreError::CoordinatorNotAvailable)
    }

    /// Appends `records` to a partition a peer owns (KIP-1191's dead letters).
    pub async fn produce(&self, to: Endpoint, topic: &str, partition: i32, records: bytes::Bytes) -> CoreResult<()> {
        let topic = topic.to_string();
        let call = |reply| PeerCall::Produce { to, topic, partition, records, reply };
        self.queue(call).await.await.unwrap_or(Err(CoreError::NotLeaderOrFollower))
    }

    /// Whether `member_id` is a member of the share group at `member_epoch` (`None`: at any),
    /// by its coordinator on a peer.
    pub async fn check_share_member(
        &self,
        to: Endpoint,
        group_id: &str,
        member_id: &str,
        member_epoch: Option<i32>,
    ) -> CoreResult<()> {
        let (group_id, member_id) = (group_id.to_string(), member_id.to_string());
        let call = |reply| PeerCall::CheckShareMember { to, group_id, member_id, member_epoch, reply };
        self.queue(call).await.await.unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }
}

/// A transaction member as a (topic, partition) on the wire.
pub fn member_on_wire(member: &Participant) -> (String, i32) {
    match member {
        Participant::Partition((topic, partition)) => (topic.clone(), *partition),
        Participant::Group(group_id) => (format!("{GROUP_PSEUDO_TOPIC}{group_id}"), 0),
        Participant::SharePartition((group_id, topic, partition)) => {
            (format!("{SHARE_PSEUDO_TOPIC}{topic}/{group_id}"), *partition)
        }
    }
}

/// The member a (topic, partition) of a peer's request names.
pub fn member_from_wire(topic: &str, partition: i32) -> Participant {
    if let Some(group_id) = topic.strip_prefix(GROUP_PSEUDO_TOPIC).filter(|_| partition == 0) {
        return Participant::Group(group_id.to_string());
    }
    // A topic name has no '/': what follows the first is the group id, whatever it holds.
    if let Some((topic, group_id)) = topic.strip_prefix(SHARE_PSEUDO_TOPIC).and_then(|rest| rest.split_once('/')) {
        return Participant::SharePartition((group_id.to_string(), topic.to_string(), partition));
    }
    Participant::Partition((topic.to_string(), partition))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_cross_the_wire_unchanged_and_no_topic_is_taken_for_a_group() {
        let share = Participant::SharePartition(("g/x".into(), "t".into(), 2));
        for member in [Participant::Partition(("t".into(), 3)), Participant::Group("g/with/slashes".into()), share] {
            let (topic, partition) = member_on_wire(&member);
            assert_eq!(format!("{:?}", member_from_wire(&topic, partition)), format!("{member:?}"));
        }
        assert!(crate::topics::validate_topic_name("__consumer_offsets/g").is_err());
    }

    #[tokio::test]
    async fn without_a_wire_client_a_call_fails_at_once_and_retriably() {
        let peers = PeersHandle::default();
        let to = Endpoint { broker_id: 1, host: "h".into(), port: 9092 };
        let verified = peers.verify(to, "t".into(), 1, 0, Participant::Group("g".into()), Join::Verify).await;
        assert_eq!(verified, Err(CoreError::CoordinatorNotAvailable));
        assert!(peers.attach().is_some());
        assert!(peers.attach().is_none(), "one wire client per broker");
    }
}
