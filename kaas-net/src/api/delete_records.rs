//! DeleteRecords (v0-v2): moves a partition's log start offset forward.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, RequestHeader};

use crate::connection::Context;
use crate::error;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let snapshot = ctx.broker.topics.snapshot();
    let mut topics = Vec::new();
    for t in request.topics {
        let mut partitions = Vec::new();
        for p in t.partitions {
            let result = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            let result = match snapshot.partition(&t.name.0, p.partition_index) {
                _ if !ctx.authorized(Operation::Delete, Resource::topic(&t.name.0)) => {
                    result.with_low_watermark(-1).with_error_code(ResponseError::TopicAuthorizationFailed.code())
                }
                None => result.with_low_watermark(-1).with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                Some(partition) => match partition.delete_records(p.offset).await {
                    Ok(low) => result.with_low_watermark(low),
                    Err(e) => result.with_low_watermark(-1).with_error_code(error::code(&e)),
                },
            };
            partitions.push(result);
        }
        topics.push(DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(partitions));
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
