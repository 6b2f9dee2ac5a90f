//! The producer's APIs: InitProducerId (v0-v5) hands out producer ids (fresh ones for
//! idempotent producers, the transactional id's own from the transaction coordinator), and
//! DescribeProducers (v0, KIP-664) shows what each partition remembers of its producers.

use kaas_core::env::Env;
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
    RequestHeader,
};

use super::text;
use crate::connection::Context;
use crate::error;

/// A null or empty transactional.id asks for an idempotent producer: a fresh id at epoch 0 from
/// this broker, whoever asks and whatever producer id and epoch (v3+) it sends, as Apache does.
/// A transactional.id goes to its coordinator, with the caller's id and epoch (v3+, KIP-360)
/// when it sends them.
use kaas_core::acl::{Operation, Resource, ResourceType};
use kafka_protocol::ResponseError;

pub async fn init_producer_id<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let failed = |code: i16| {
        InitProducerIdResponse::default().with_error_code(code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
    };
    if let Some(id) = request.transactional_id.as_ref().filter(|id| !id.is_empty()) {
        if !ctx.authorized(Operation::Write, Resource::transactional_id(id)) {
            return failed(ResponseError::TransactionalIdAuthorizationFailed.code());
        }
        let expected = (request.producer_id.0 >= 0).then_some((request.producer_id.0, request.producer_epoch));
        let answer = ctx.broker.txn.init_producer_id(id.to_string(), request.transaction_timeout_ms, expected).await;
        return match answer {
            Ok((producer_id, producer_epoch)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch),
            Err(e) => failed(error::code(&e)),
        };
    }
    // KIP-679: an idempotent producer is one allowed to write somewhere (WRITE on any topic),
    // or IDEMPOTENT_WRITE on the cluster.
    let idempotent_allowed = ctx.authorized(Operation::IdempotentWrite, Resource::cluster())
        || ctx.broker.authorized_any(ctx.requester(), Operation::Write, ResourceType::Topic);
    if !idempotent_allowed {
        return failed(ResponseError::ClusterAuthorizationFailed.code());
    }
    match ctx.broker.producer_ids.allocate().await {
        Ok(producer_id) => {
            InitProducerIdResponse::default().with_producer_id(ProducerId(producer_id)).with_producer_epoch(0)
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id");
            failed(error::code(&e))
        }
    }
}

pub async fn describe_producers<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let snapshot = ctx.broker.topics.snapshot();
    let mut topics = Vec::new();
    for topic in request.topics {
        let mut partitions = Vec::new();
        for index in topic.partition_indexes {
            let answer = PartitionResponse::default().with_partition_index(index);
            let described = match snapshot.partition(&topic.name.0, index) {
                _ if !ctx.authorized(Operation::Read, Resource::topic(&topic.name.0)) => {
                    Err(kaas_core::CoreError::TopicAuthorizationFailed)
                }
                None => Err(kaas_core::CoreError::UnknownTopicOrPartition),
                Some(partition) => partition.describe_producers().await,
            };
            partitions.push(match described {
                Ok(producers) => answer.with_active_producers(
                    producers
                        .into_iter()
                        .map(|(producer_id, entry)| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(producer_id))
                                .with_producer_epoch(i32::from(entry.producer_epoch))
                                .with_last_sequence(entry.last_seq().unwrap_or(-1))
                                .with_last_timestamp(entry.last_timestamp)
                                .with_coordinator_epoch(-1)
                                .with_current_txn_start_offset(entry.current_txn_first_offset.unwrap_or(-1))
                        })
                        .collect(),
                ),
                Err(e) => {
                    answer.with_error_code(error::code(&e)).with_error_message(error::message(&e).map(|m| text(&m)))
                }
            });
        }
        topics.push(TopicResponse::default().with_name(topic.name).with_partitions(partitions));
    }
    DescribeProducersResponse::default().with_topics(topics)
}
