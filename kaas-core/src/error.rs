//! The errors kaas-core answers with. kaas-net maps each to one Kafka error code in one place;
//! nothing here knows the wire. Each says whether its effect is unknown (a retry may find the
//! operation done) or none (nothing happened), which is what the simulator's checker needs.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    // Topics and partitions.
    UnknownTopicOrPartition,
    /// 100: a request named a topic by an id no topic has.
    UnknownTopicId,
    /// This broker does not lead the partition now; retriable, nothing was written.
    NotLeaderOrFollower,
    /// A producer's batch does not continue its sequence.
    OutOfOrderSequenceNumber,
    /// A producer's batch carries an epoch older than the partition has seen.
    InvalidProducerEpoch,
    /// The partition has no state for the producer and its batch does not start a sequence.
    UnknownProducerId,
    TopicAlreadyExists,
    InvalidTopic(String),
    InvalidPartitions(String),
    InvalidReplicationFactor(String),
    InvalidConfig(String),
    TopicDeletionDisabled,
    /// 39: a reassignment's replica list names no broker, an unknown one, or one twice.
    InvalidReplicaAssignment(String),
    /// 85: a cancel of a partition that no reassignment is moving.
    NoReassignmentInProgress,
    // The log.
    OffsetOutOfRange,
    CorruptMessage,
    UnsupportedForMessageFormat,
    InvalidRecord,
    /// 87: records a partition refused one by one (a compacted topic's record without a key),
    /// each by its index in its batch, with why; nothing of the request was appended.
    RecordsRejected(Vec<(i32, String)>),
    /// 32: records whose timestamps are out of the topic's bounds, the same way.
    InvalidTimestamp(Vec<(i32, String)>),
    MessageTooLarge,
    /// Produce with acks other than -1, 0 or 1.
    InvalidRequiredAcks,
    /// 7: an admin request's timeout ran out before it was carried out; nothing was changed.
    RequestTimedOut,
    /// The volume failed; the effect of a write that got this is unknown.
    Storage(String),
    // Groups.
    CoordinatorNotAvailable,
    /// 16: another broker coordinates this group or transactional id; retriable.
    NotCoordinator,
    /// 14: this broker is taking the group over; retriable.
    CoordinatorLoadInProgress,
    InvalidGroupId,
    InvalidSessionTimeout,
    InconsistentGroupProtocol,
    UnknownMemberId,
    IllegalGeneration,
    RebalanceInProgress,
    /// JoinGroup v4+ from a new member: rejoin with this member id.
    MemberIdRequired(String),
    FencedInstanceId,
    GroupMaxSizeReached,
    GroupIdNotFound,
    /// 121: a record acknowledged is not acquired by the member (KIP-932).
    InvalidRecordState,
    /// 122: no share session of the member on this broker.
    ShareSessionNotFound,
    /// 123: a share session's epoch is not the one expected.
    InvalidShareSessionEpoch,
    /// 133: this broker keeps as many share sessions as it may.
    ShareSessionLimitReached,
    NonEmptyGroup,
    /// OffsetDelete of a topic a member of the group subscribes to.
    GroupSubscribedToTopic,
    /// 110: a consumer-protocol member's epoch is not its current one (nor the one before).
    FencedMemberEpoch,
    /// 113: an offset commit under an older member epoch than the member's.
    StaleMemberEpoch,
    /// 130: a SubscribedTopicRegex that does not compile (KIP-848).
    InvalidRegularExpression(String),
    /// 112: no server assignor by that name.
    UnsupportedAssignor(String),
    /// The request is well-formed but not valid here.
    InvalidRequest(String),
    // Transactions.
    /// 49: the producer id is not the transactional id's.
    InvalidProducerIdMapping,
    /// 90: a newer epoch of the producer exists.
    ProducerFenced,
    /// 51: a transition of the transaction is under way; retry.
    ConcurrentTransactions,
    /// 48: the request makes no sense in the transaction's state, or a transactional batch
    /// for a partition that is not in the producer's transaction.
    InvalidTxnState,
    /// 50: the timeout is above `transaction.max.timeout.ms`.
    InvalidTransactionTimeout,
    /// 19: retriable; a transactional batch's verification went stale before its append.
    NotEnoughReplicas,
    /// 88: OffsetFetch with require_stable while a transactional commit is pending.
    UnstableOffsetCommit,
    /// 105: no such transactional id (DescribeTransactions).
    TransactionalIdNotFound,
    /// 54: the ACL APIs with no authorizer configured.
    SecurityDisabled,
    /// 29, 30, 31, 53: the ACLs refuse the principal this (topic, group, cluster,
    /// transactional id).
    TopicAuthorizationFailed,
    GroupAuthorizationFailed,
    ClusterAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
}

impl CoreError {
    /// True when a request that got this error may nevertheless have taken effect.
    pub fn effect_unknown(&self) -> bool {
        matches!(self, CoreError::Storage(_))
    }
}

impl std::fmt::Display for CoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

pub type CoreResult<T> = Result<T, CoreError>;
