//! DescribeTopicPartitions (v0, KIP-966): Metadata's topic half, paged. Topics are answered in
//! name order from the cursor on, at most `response_partition_limit` partitions per answer
//! (capped by `max.request.partition.size.limit`); `next_cursor` says where the next page
//! starts. Leaders and epochs are Metadata's; kaas has no eligible leader replicas (the shared
//! volume is the only replica), so those lists are empty. As Apache does, a listing of every
//! topic leaves out what it cannot describe, and a named topic that does not exist is answered
//! with UNKNOWN_TOPIC_OR_PARTITION.

use kaas_core::env::Env;
use kaas_core::topics::validate_topic_name;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, RequestHeader,
};

use super::metadata::{Replicas, leader_of, replicas_of};
use super::{topic, uuid};
use crate::connection::Context;
use kaas_core::acl::{Operation, Resource};

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let broker = &ctx.broker;
    let every_topic = request.topics.is_empty();
    let (cursor_topic, cursor_partition) =
        request.cursor.as_ref().map_or((String::new(), 0), |c| (c.topic_name.0.to_string(), c.partition_index));
    let requested: Vec<String> = request.topics.iter().map(|t| t.name.0.to_string()).collect();
    let refuse = |code: i16| {
        let topics = requested
            .iter()
            .map(|name| {
                DescribeTopicPartitionsResponseTopic::default().with_name(Some(topic(name))).with_error_code(code)
            })
            .collect();
        DescribeTopicPartitionsResponse::default().with_topics(topics)
    };
    if cursor_partition < 0 || (!every_topic && request.cursor.is_some() && !requested.contains(&cursor_topic)) {
        // The cursor must name a valid partition, of one of the named topics if any are named.
        return refuse(ResponseError::InvalidRequest.code());
    }
    if every_topic {
        broker.topics.refresh_all().await;
    } else {
        broker.topics.refresh(requested.iter().map(String::as_str)).await;
    }
    let snapshot = broker.topics.snapshot();
    let view = broker.membership.view();
    let mut names: Vec<String> = if every_topic { snapshot.topics.keys().cloned().collect() } else { requested };
    names.retain(|name| *name >= cursor_topic);
    // Only the topics the client may DESCRIBE: the others are left out of a listing of every
    // topic and answered TOPIC_AUTHORIZATION_FAILED where named.
    let describable = |name: &str| ctx.authorized(Operation::Describe, Resource::topic(name));
    names.sort();
    names.dedup();

    let limit = request.response_partition_limit.clamp(1, broker.config.max_request_partition_size_limit.max(1));
    let mut remaining = limit;
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names {
        if remaining == 0 {
            // The previous topic ended the page exactly: the next one starts the next page.
            next_cursor = Some(Cursor::default().with_topic_name(topic(&name)).with_partition_index(0));
            break;
        }
        if !describable(&name) {
            if !every_topic {
                let code = ResponseError::TopicAuthorizationFailed.code();
                topics.push(
                    DescribeTopicPartitionsResponseTopic::default().with_name(Some(topic(&name))).with_error_code(code),
                );
            }
            continue;
        }
        let Some(state) = snapshot.topics.get(&name) else {
            if !every_topic {
                let code = match validate_topic_name(&name) {
                    Ok(()) => ResponseError::UnknownTopicOrPartition.code(),
                    Err(_) => ResponseError::InvalidTopicException.code(),
                };
                topics.push(
                    DescribeTopicPartitionsResponseTopic::default().with_name(Some(topic(&name))).with_error_code(code),
                );
            }
            continue;
        };
        let start = if name == cursor_topic { cursor_partition } else { 0 };
        let end = state.meta.partitions.min(start.saturating_add(remaining));
        let partitions: Vec<_> = (start..end)
            .map(|p| {
                let (leader, epoch) = leader_of(state, p, &view).unwrap_or((BrokerId(-1), -1));
                let Replicas { replicas, isr, offline } = match leader.0 {
                    -1 => Replicas { replicas: Vec::new(), isr: Vec::new(), offline: Vec::new() },
                    _ => replicas_of(state, p, leader, &view),
                };
                let code = if leader.0 >= 0 { 0 } else { ResponseError::LeaderNotAvailable.code() };
                DescribeTopicPartitionsResponsePartition::default()
                    .with_error_code(code)
                    .with_partition_index(p)
                    .with_leader_id(leader)
                    .with_leader_epoch(epoch)
                    .with_replica_nodes(replicas)
                    .with_isr_nodes(isr)
                    .with_offline_replicas(offline)
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
            })
            .collect();
        remaining -= partitions.len() as i32;
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic(&name)))
                .with_topic_id(uuid(state.meta.topic_id))
                .with_is_internal(false)
                .with_partitions(partitions)
                .with_topic_authorized_operations(super::topic_authorized_operations(ctx, &name)),
        );
        if end < state.meta.partitions {
            next_cursor = Some(Cursor::default().with_topic_name(topic(&name)).with_partition_index(end));
            break;
        }
    }
    DescribeTopicPartitionsResponse::default().with_topics(topics).with_next_cursor(next_cursor)
}
