//! The one place a kaas-core error becomes a Kafka error code.

use kaas_core::CoreError;
use kafka_protocol::ResponseError as K;

pub fn code(e: &CoreError) -> i16 {
    let kafka = match e {
        CoreError::UnknownTopicOrPartition => K::UnknownTopicOrPartition,
        CoreError::UnknownTopicId => K::UnknownTopicId,
        CoreError::NotLeaderOrFollower => K::NotLeaderOrFollower,
        CoreError::OutOfOrderSequenceNumber => K::OutOfOrderSequenceNumber,
        CoreError::InvalidProducerEpoch => K::InvalidProducerEpoch,
        CoreError::UnknownProducerId => K::UnknownProducerId,
        CoreError::TopicAlreadyExists => K::TopicAlreadyExists,
        CoreError::InvalidTopic(_) => K::InvalidTopicException,
        CoreError::InvalidPartitions(_) => K::InvalidPartitions,
        CoreError::InvalidReplicationFactor(_) => K::InvalidReplicationFactor,
        CoreError::InvalidConfig(_) => K::InvalidConfig,
        CoreError::TopicDeletionDisabled => K::TopicDeletionDisabled,
        CoreError::InvalidReplicaAssignment(_) => K::InvalidReplicaAssignment,
        CoreError::NoReassignmentInProgress => K::NoReassignmentInProgress,
        CoreError::OffsetOutOfRange => K::OffsetOutOfRange,
        CoreError::CorruptMessage => K::CorruptMessage,
        CoreError::UnsupportedForMessageFormat => K::UnsupportedForMessageFormat,
        CoreError::InvalidRecord | CoreError::RecordsRejected(_) => K::InvalidRecord,
        CoreError::InvalidRegularExpression(_) => K::InvalidRegularExpression,
        CoreError::InvalidTimestamp(_) => K::InvalidTimestamp,
        CoreError::MessageTooLarge => K::MessageTooLarge,
        CoreError::InvalidRequiredAcks => K::InvalidRequiredAcks,
        CoreError::Storage(_) => K::KafkaStorageError,
        CoreError::RequestTimedOut => K::RequestTimedOut,
        CoreError::CoordinatorNotAvailable => K::CoordinatorNotAvailable,
        CoreError::NotCoordinator => K::NotCoordinator,
        CoreError::CoordinatorLoadInProgress => K::CoordinatorLoadInProgress,
        CoreError::InvalidGroupId => K::InvalidGroupId,
        CoreError::InvalidSessionTimeout => K::InvalidSessionTimeout,
        CoreError::InconsistentGroupProtocol => K::InconsistentGroupProtocol,
        CoreError::UnknownMemberId => K::UnknownMemberId,
        CoreError::IllegalGeneration => K::IllegalGeneration,
        CoreError::RebalanceInProgress => K::RebalanceInProgress,
        CoreError::MemberIdRequired(_) => K::MemberIdRequired,
        CoreError::FencedInstanceId => K::FencedInstanceId,
        CoreError::GroupMaxSizeReached => K::GroupMaxSizeReached,
        CoreError::FencedMemberEpoch => K::FencedMemberEpoch,
        CoreError::StaleMemberEpoch => K::StaleMemberEpoch,
        CoreError::UnsupportedAssignor(_) => K::UnsupportedAssignor,
        CoreError::GroupIdNotFound => K::GroupIdNotFound,
        CoreError::InvalidRecordState => K::InvalidRecordState,
        CoreError::ShareSessionNotFound => K::ShareSessionNotFound,
        CoreError::InvalidShareSessionEpoch => K::InvalidShareSessionEpoch,
        CoreError::ShareSessionLimitReached => K::ShareSessionLimitReached,
        CoreError::NonEmptyGroup => K::NonEmptyGroup,
        CoreError::GroupSubscribedToTopic => K::GroupSubscribedToTopic,
        CoreError::InvalidRequest(_) => K::InvalidRequest,
        CoreError::InvalidProducerIdMapping => K::InvalidProducerIdMapping,
        CoreError::ProducerFenced if kaas_core::mutant!(FencedAnsweredRetriable) => K::ConcurrentTransactions,
        CoreError::ProducerFenced => K::ProducerFenced,
        CoreError::ConcurrentTransactions => K::ConcurrentTransactions,
        CoreError::InvalidTxnState => K::InvalidTxnState,
        CoreError::InvalidTransactionTimeout => K::InvalidTransactionTimeout,
        CoreError::NotEnoughReplicas => K::NotEnoughReplicas,
        CoreError::UnstableOffsetCommit => K::UnstableOffsetCommit,
        CoreError::TransactionalIdNotFound => K::TransactionalIdNotFound,
        CoreError::SecurityDisabled => K::SecurityDisabled,
        CoreError::TopicAuthorizationFailed => K::TopicAuthorizationFailed,
        CoreError::GroupAuthorizationFailed => K::GroupAuthorizationFailed,
        CoreError::ClusterAuthorizationFailed => K::ClusterAuthorizationFailed,
        CoreError::TransactionalIdAuthorizationFailed => K::TransactionalIdAuthorizationFailed,
    };
    kafka.code()
}

/// The message Kafka would put beside the code, where the API has a field for one.
pub fn message(e: &CoreError) -> Option<String> {
    match e {
        CoreError::InvalidTopic(m)
        | CoreError::InvalidPartitions(m)
        | CoreError::InvalidReplicationFactor(m)
        | CoreError::InvalidConfig(m)
        | CoreError::InvalidReplicaAssignment(m)
        | CoreError::InvalidRequest(m)
        | CoreError::InvalidRegularExpression(m)
        | CoreError::Storage(m) => Some(m.clone()),
        // Apache's RecordValidationException: its count, and the first three records' errors.
        CoreError::RecordsRejected(errors) | CoreError::InvalidTimestamp(errors) => {
            let shown: Vec<String> = errors
                .iter()
                .take(3)
                .map(|(index, why)| format!("RecordError(batchIndex={index}, message='{why}')"))
                .collect();
            Some(format!(
                "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
                errors.len(),
                shown.join(", ")
            ))
        }
        // Apache's NoReassignmentInProgressException carries the code's own message.
        CoreError::NoReassignmentInProgress => Some("No partition reassignment is in progress.".into()),
        _ => None,
    }
}

pub fn code_of<T>(result: &Result<T, CoreError>) -> i16 {
    match result {
        Ok(_) => 0,
        Err(e) => code(e),
    }
}

/// What a peer broker's error code means here: the inverse of `code` for the answers a peer
/// gives to markers and verification. A code this broker cannot place is taken as "not now",
/// which the caller retries.
pub fn from_code(code: i16) -> Result<(), CoreError> {
    if code == 0 {
        return Ok(());
    }
    let known = [
        CoreError::UnknownTopicOrPartition,
        CoreError::NotLeaderOrFollower,
        CoreError::InvalidProducerEpoch,
        CoreError::CoordinatorNotAvailable,
        CoreError::NotCoordinator,
        CoreError::CoordinatorLoadInProgress,
        CoreError::InvalidProducerIdMapping,
        CoreError::ProducerFenced,
        CoreError::ConcurrentTransactions,
        CoreError::InvalidTxnState,
        CoreError::TransactionalIdNotFound,
        CoreError::UnknownProducerId,
        CoreError::NotEnoughReplicas,
        // A refusal of the records themselves: sending them again changes nothing.
        CoreError::InvalidRecord,
        CoreError::InvalidTimestamp(Vec::new()),
        CoreError::CorruptMessage,
        CoreError::MessageTooLarge,
    ];
    Err(known.into_iter().find(|e| self::code(e) == code).unwrap_or(CoreError::CoordinatorNotAvailable))
}
