//! ElectLeaders (v0-v2). A partition's leader is its owner, which the membership's view names:
//! the first live broker of its replica list where a reassignment set one. The owner is always
//! the preferred replica that can lead, so an election is never needed (ELECTION_NOT_NEEDED, as Apache answers
//! for a partition already led by its preferred replica). While ownership is moving there is
//! no owner to elect: that partition answers PREFERRED_LEADER_NOT_AVAILABLE (preferred) or
//! ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean), and the move settles by itself. Asked for every
//! partition, Apache answers only those that needed an election: none here.

use kaas_core::acl::{Operation, Resource};
use kaas_core::cluster::partition_key;
use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::*;

use super::text;
use crate::connection::Context;

/// ElectionType 0: the preferred replica; 1: unclean.
const PREFERRED: i8 = 0;

pub async fn elect<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: ElectLeadersRequest,
) -> ElectLeadersResponse {
    if !ctx.authorized(Operation::Alter, Resource::cluster()) {
        return ElectLeadersResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let Some(wanted) = request.topic_partitions else {
        return ElectLeadersResponse::default();
    };
    let broker = &ctx.broker;
    broker.topics.refresh(wanted.iter().map(|t| t.topic.0.as_str())).await;
    let snapshot = broker.topics.snapshot();
    let view = broker.membership.view();
    let results = wanted
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| {
                    let (code, message) = match snapshot.partition(&t.topic.0, p) {
                        None => (
                            ResponseError::UnknownTopicOrPartition.code(),
                            format!("No such topic or partition: {}-{p}", t.topic.0),
                        ),
                        Some(_) if view.owner_of(&partition_key(&t.topic.0, p)).is_some() => {
                            (ResponseError::ElectionNotNeeded.code(), "The partition's owner is its leader.".into())
                        }
                        Some(_) if request.election_type == PREFERRED => (
                            ResponseError::PreferredLeaderNotAvailable.code(),
                            "Ownership is moving between brokers; it settles by itself.".into(),
                        ),
                        Some(_) => (
                            ResponseError::EligibleLeadersNotAvailable.code(),
                            "Ownership is moving between brokers; it settles by itself.".into(),
                        ),
                    };
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(code)
                        .with_error_message(Some(text(&message)))
                })
                .collect();
            ReplicaElectionResult::default().with_topic(t.topic.clone()).with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default().with_replica_election_results(results)
}
