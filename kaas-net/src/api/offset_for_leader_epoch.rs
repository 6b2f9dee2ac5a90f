//! OffsetForLeaderEpoch (v2-v4, KIP-101 and KIP-320): where a partition's records of a leader
//! epoch end. Consumers ask it after a leader change, to check that their position is still
//! on the log (kafka-python stops fetching a partition it cannot check). A leader epoch here is
//! an ownership epoch: each take-over starts a new one at a new segment.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, RequestHeader};

use crate::connection::Context;
use crate::error;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    ctx.broker.topics.refresh(request.topics.iter().map(|t| t.topic.0.as_str())).await;
    let snapshot = ctx.broker.topics.snapshot();
    let mut topics = Vec::new();
    for t in request.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let base = EpochEndOffset::default().with_partition(p.partition).with_leader_epoch(-1).with_end_offset(-1);
            let answer = match snapshot.partition(&t.topic.0, p.partition) {
                _ if !ctx.authorized(Operation::Describe, Resource::topic(&t.topic.0)) => {
                    base.with_error_code(ResponseError::TopicAuthorizationFailed.code())
                }
                None => base.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                Some(partition) => match partition.epoch_end(p.leader_epoch).await {
                    Err(e) => base.with_error_code(error::code(&e)),
                    // KIP-320: a caller that knows a newer epoch than this owner's talks to a
                    // newer owner; one that knows an older epoch must refresh its metadata.
                    Ok(end) if p.current_leader_epoch > end.current_leader_epoch => {
                        base.with_error_code(ResponseError::UnknownLeaderEpoch.code())
                    }
                    Ok(end) if p.current_leader_epoch >= 0 && p.current_leader_epoch < end.current_leader_epoch => {
                        base.with_error_code(ResponseError::FencedLeaderEpoch.code())
                    }
                    Ok(end) => base.with_leader_epoch(end.leader_epoch).with_end_offset(end.end_offset),
                },
            };
            partitions.push(answer);
        }
        topics.push(OffsetForLeaderTopicResult::default().with_topic(t.topic).with_partitions(partitions));
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
