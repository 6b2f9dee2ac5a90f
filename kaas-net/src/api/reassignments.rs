//! AlterPartitionReassignments (v0-v1) and ListPartitionReassignments (v0). On a shared volume
//! a reassignment moves ownership, not data: the partition's owner becomes the first live
//! broker of the new replica list, by the ordinary hand-over (`kaas_core::cluster::reassignment`).
//! Each partition is answered on its own, with Apache's error codes and messages.

use kaas_core::CoreError;
use kaas_core::acl::{Operation, Resource};
use kaas_core::cluster::reassignment::Change;
use kaas_core::env::{Clock, Env};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::*;

use super::{text, topic};
use crate::connection::Context;
use crate::error;

const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Each partition's change is made unless the request's timeout ran out before the broker got
/// to it (REQUEST_TIMED_OUT, nothing changed).
pub async fn alter<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    if !ctx.authorized(Operation::Alter, Resource::cluster()) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let topics = &ctx.broker.topics;
    let allow = request.allow_replication_factor_change;
    // A client that sends no timeout gets Kafka's default request.timeout.ms, not none at all.
    let timeout_ms = if request.timeout_ms > 0 { request.timeout_ms as u64 } else { DEFAULT_TIMEOUT_MS };
    let timeout = std::time::Duration::from_millis(timeout_ms);
    let deadline = ctx.broker.env.clock().monotonic() + timeout;
    let mut responses = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let name = t.name.0.to_string();
        let indexes: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
        let changes = t
            .partitions
            .into_iter()
            .map(|p| {
                let change = match p.replicas {
                    Some(replicas) => Change::Reassign(replicas.into_iter().map(|b| b.0).collect()),
                    None => Change::Cancel,
                };
                (p.partition_index, change)
            })
            .collect();
        // Apache's messages: the topic unknown, or only the partition.
        let (results, unknown) = match topics.reassign(name.clone(), changes, allow, deadline).await {
            Ok(results) => (results, format!("Unable to find partition {name}:")),
            Err(e) => {
                (indexes.iter().map(|_| Err(e.clone())).collect(), format!("Unable to find a topic named {name}."))
            }
        };
        let partitions = indexes
            .into_iter()
            .zip(results)
            .map(|(p, result)| {
                let response = ReassignablePartitionResponse::default().with_partition_index(p);
                match result {
                    Ok(()) => response,
                    Err(CoreError::UnknownTopicOrPartition) => {
                        let message = if unknown.ends_with(':') { format!("{unknown}{p}.") } else { unknown.clone() };
                        response
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(Some(text(&message)))
                    }
                    Err(e) => response
                        .with_error_code(error::code(&e))
                        .with_error_message(error::message(&e).map(|m| text(&m))),
                }
            })
            .collect();
        responses.push(ReassignableTopicResponse::default().with_name(topic(&name)).with_partitions(partitions));
    }
    AlterPartitionReassignmentsResponse::default().with_allow_replication_factor_change(allow).with_responses(responses)
}

pub async fn list<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    if !ctx.authorized(Operation::Describe, Resource::cluster()) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let wanted =
        request.topics.map(|list| list.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect());
    let ongoing = ctx.broker.topics.reassignments(wanted).await;
    let topics = ongoing
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|o| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(o.partition)
                        .with_replicas(o.replicas.into_iter().map(BrokerId).collect())
                        .with_adding_replicas(o.adding.into_iter().map(BrokerId).collect())
                        .with_removing_replicas(o.removing.into_iter().map(BrokerId).collect())
                })
                .collect();
            OngoingTopicReassignment::default().with_name(topic(&name)).with_partitions(partitions)
        })
        .collect();
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
