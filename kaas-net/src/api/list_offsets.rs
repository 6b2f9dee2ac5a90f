//! ListOffsets (v1-v11; v10's timeout_ms waits for nothing: every answer is local): latest
//! (-1), earliest (-2), max timestamp (-3), earliest local (-4, the same as earliest: all data
//! is local), latest tiered (-5) and earliest pending upload (-6, v11: KIP-1023), none of either
//! without tiered storage, and by timestamp: the first record at or after it,
//! read inside its batch as Apache reads it, with its own timestamp. With read_committed
//! isolation (1) the readable end is the last stable offset, not the high watermark.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kaas_core::partition::PartitionHandle;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, RequestHeader};

use crate::connection::Context;
use crate::error;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const EARLIEST_PENDING_UPLOAD: i64 = -6;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    // The leader epoch exists from v4 on; below it the field must keep its default.
    let leader_epoch = if header.request_api_version >= 4 { 0 } else { -1 };
    let read_committed = request.isolation_level == 1;
    // A topic a peer created a moment ago is read now, not at the next rescan.
    ctx.broker.topics.refresh(request.topics.iter().map(|t| t.name.0.as_str())).await;
    let snapshot = ctx.broker.topics.snapshot();
    let mut topics = Vec::new();
    for t in request.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let base = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_leader_epoch(leader_epoch);
            let response = match snapshot.partition(&t.name.0, p.partition_index) {
                _ if !ctx.authorized(Operation::Describe, Resource::topic(&t.name.0)) => base
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_timestamp(-1)
                    .with_offset(-1),
                None => base
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_timestamp(-1)
                    .with_offset(-1),
                Some(partition) => lookup(ctx, partition, p.timestamp, read_committed, base).await,
            };
            partitions.push(response);
        }
        topics.push(ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions));
    }
    ListOffsetsResponse::default().with_topics(topics)
}

async fn lookup<E: Env>(
    ctx: &Context<E>,
    partition: &PartitionHandle,
    timestamp: i64,
    read_committed: bool,
    base: ListOffsetsPartitionResponse,
) -> ListOffsetsPartitionResponse {
    let marks = partition.watermarks();
    // Published offsets are answered only while the lease is valid: a broker that woke from a
    // long pause may no longer own the partition, whatever its actor last published.
    if !marks.owned || !ctx.broker.owns_now() {
        return base.with_error_code(ResponseError::NotLeaderOrFollower.code()).with_offset(-1).with_timestamp(-1);
    }
    let base = if base.leader_epoch >= 0 { base.with_leader_epoch(marks.leader_epoch) } else { base };
    if !marks.online {
        // Stale offsets would be a wrong answer; the client retries.
        return base.with_error_code(ResponseError::KafkaStorageError.code()).with_offset(-1).with_timestamp(-1);
    }
    let end = if read_committed { marks.last_stable_offset } else { marks.high_watermark };
    let found = |offset: i64, ts: i64| base.clone().with_offset(offset).with_timestamp(ts);
    match timestamp {
        LATEST => found(end, -1),
        EARLIEST | EARLIEST_LOCAL => found(marks.log_start_offset, -1),
        LATEST_TIERED | EARLIEST_PENDING_UPLOAD => found(-1, -1),
        MAX_TIMESTAMP => match partition.max_timestamp().await {
            Ok(ts) if ts >= 0 => match partition.offset_for_time(ts).await {
                Ok(Some(at)) => found(at.offset, at.timestamp),
                Ok(None) => found(-1, -1),
                Err(e) => base.with_error_code(error::code(&e)),
            },
            Ok(_) => found(-1, -1),
            Err(e) => base.with_error_code(error::code(&e)),
        },
        ts if ts < 0 => base.with_error_code(ResponseError::InvalidRequest.code()).with_offset(-1).with_timestamp(-1),
        ts => match partition.offset_for_time(ts).await {
            Ok(Some(at)) if at.offset < end => found(at.offset, at.timestamp),
            Ok(_) => found(-1, -1),
            Err(e) => base.with_error_code(error::code(&e)),
        },
    }
}
