//! The share consumer's data APIs (KIP-932): ShareFetch (v1-v2; v2 adds the acquire modes of
//! KIP-1206 and the RENEW acknowledgement of KIP-1222) and ShareAcknowledge (v1-v2), and
//! KIP-1289's TxnShareAcknowledge (v0). Its API key is one constant, `ApiKey::TxnShareAcknowledge`
//! (95, as the draft, apache/kafka pull request 22357, assigns it until Apache does), generated
//! with its structs from the schemas in `vendor/kafka-protocol/schemas`. Each decodes and
//! calls kaas-core (`Broker::share_session`, then `share_fetch`; `txn_share_acknowledge`),
//! which keeps the share sessions and the share partitions, and encodes. The session step runs
//! as the request is read, so a connection's requests take their session epochs in order; the
//! fetch may then wait for records (`MaxWaitMs`).

use kaas_core::acl::{Operation, Resource};
use kaas_core::broker::{ShareFetchRequest, ShareRequestPartition, TxnShareAcknowledge};
use kaas_core::env::Env;
use kaas_core::participant::{Join, TxnWriter};
use kaas_core::partition::share::state::{AckBatch, AckType, AcquireMode};
use kaas_core::topics::TopicId;
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_acknowledge_response::{self as ack_response, ShareAcknowledgeTopicResponse};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::txn_share_acknowledge_response::{
    TxnShareAcknowledgePartitionResponse, TxnShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{encode, text, uuid};
use crate::connection::{Answer, Context};
use crate::error;

/// One partition's acknowledgement ranges, as kaas-core takes them: an unknown type makes the
/// partition's acknowledgement invalid (INVALID_REQUEST).
fn ack_batches(batches: impl Iterator<Item = (i64, i64, Vec<i8>)>) -> (Vec<AckBatch>, bool) {
    let mut invalid = false;
    let acks = batches
        .map(|(first_offset, last_offset, types)| {
            let types = types
                .iter()
                .map(|&t| {
                    AckType::from_id(t).unwrap_or_else(|| {
                        invalid = true;
                        AckType::Gap
                    })
                })
                .collect();
            AckBatch { first_offset, last_offset, types }
        })
        .collect();
    (acks, invalid)
}

fn fetch_request(request: ShareFetchRequest_, version: i16) -> ShareFetchRequest {
    let partitions = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                let (acks, acks_invalid) = ack_batches(batches);
                ShareRequestPartition {
                    topic_id: *t.topic_id.as_bytes(),
                    partition: p.partition_index,
                    acks,
                    acks_invalid,
                }
            })
        })
        .collect();
    let forgotten = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (*t.topic_id.as_bytes(), p)))
        .collect();
    ShareFetchRequest {
        group_id: request.group_id.as_ref().map(|g| g.0.to_string()).unwrap_or_default(),
        member_id: request.member_id.as_ref().map(|m| m.to_string()).unwrap_or_default(),
        session_epoch: request.share_session_epoch,
        max_wait_ms: request.max_wait_ms,
        max_bytes: request.max_bytes,
        max_records: request.max_records,
        mode: if version >= 2 && request.share_acquire_mode == 1 {
            AcquireMode::RecordLimit
        } else {
            AcquireMode::BatchOptimized
        },
        renew: version >= 2 && request.is_renew_ack,
        partitions,
        forgotten,
        fetch: true,
    }
}

type ShareFetchRequest_ = kafka_protocol::messages::ShareFetchRequest;

fn top_level_error(e: &CoreError) -> (i16, Option<StrBytes>) {
    (error::code(e), error::message(e).map(|m| text(&m)))
}

/// READ on the group (else the whole request is refused) and on each topic: the partitions of
/// a topic the client may not read are taken out of the request and answered
/// TOPIC_AUTHORIZATION_FAILED, as Apache answers them.
fn authorize_share<E: Env>(ctx: &Context<E>, request: &mut ShareFetchRequest) -> Result<Vec<(TopicId, i32)>, ()> {
    if !ctx.authorized(Operation::Read, Resource::group(&request.group_id)) {
        return Err(());
    }
    if !ctx.broker.authorizer_enabled() {
        return Ok(Vec::new());
    }
    let snapshot = ctx.broker.topics.snapshot();
    let readable = |id: &TopicId| {
        snapshot.names_by_id.get(id).is_none_or(|name| ctx.authorized(Operation::Read, Resource::topic(name)))
    };
    let refused: Vec<(TopicId, i32)> =
        request.partitions.iter().filter(|p| !readable(&p.topic_id)).map(|p| (p.topic_id, p.partition)).collect();
    request.partitions.retain(|p| readable(&p.topic_id));
    Ok(refused)
}

pub fn fetch<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: ShareFetchRequest_) -> Answer {
    let version = header.request_api_version;
    let mut request = fetch_request(request, version);
    let header = header.clone();
    let Ok(refused) = authorize_share(ctx, &mut request) else {
        let response = ShareFetchResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
        return Answer::Now(encode(ApiKey::ShareFetch, &header, &response));
    };
    let plan = match ctx.broker.share_session(ctx.connection_id, request) {
        Ok(plan) => plan,
        Err(e) => {
            let (code, message) = top_level_error(&e);
            let response = ShareFetchResponse::default().with_error_code(code).with_error_message(message);
            return Answer::Now(encode(ApiKey::ShareFetch, &header, &response));
        }
    };
    let broker = ctx.broker.clone();
    let listener = ctx.listener.clone();
    Answer::Later(Box::pin(async move {
        let answer = broker.share_fetch(plan).await;
        let view = broker.membership.view();
        let mut responses: Vec<ShareFetchableTopicResponse> = Vec::new();
        let mut leaders: Vec<i32> = Vec::new();
        for p in &answer.partitions {
            let (code, message) = p.error.as_ref().map_or((0, None), top_level_error);
            let (ack_code, ack_message) = match &p.ack {
                Some(Err(e)) => top_level_error(e),
                _ => (0, None),
            };
            let leader =
                p.leader.map_or(LeaderIdAndEpoch::default().with_leader_id(-1).with_leader_epoch(-1), |(id, epoch)| {
                    leaders.push(id);
                    LeaderIdAndEpoch::default().with_leader_id(id).with_leader_epoch(epoch)
                });
            let acquired = p
                .fetched
                .acquired
                .iter()
                .map(|r| {
                    AcquiredRecords::default()
                        .with_first_offset(r.first_offset)
                        .with_last_offset(r.last_offset)
                        .with_delivery_count(i16::try_from(r.delivery_count).unwrap_or(i16::MAX))
                })
                .collect();
            let data = PartitionData::default()
                .with_partition_index(p.partition)
                .with_error_code(code)
                .with_error_message(message)
                .with_acknowledge_error_code(ack_code)
                .with_acknowledge_error_message(ack_message)
                .with_current_leader(leader)
                .with_records(Some(p.fetched.records.clone()))
                .with_acquired_records(acquired);
            match responses.iter_mut().find(|t| *t.topic_id.as_bytes() == p.topic_id) {
                Some(t) => t.partitions.push(data),
                None => responses.push(
                    ShareFetchableTopicResponse::default().with_topic_id(uuid(p.topic_id)).with_partitions(vec![data]),
                ),
            }
        }
        for (topic_id, partition) in refused {
            let data = PartitionData::default()
                .with_partition_index(partition)
                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                .with_current_leader(LeaderIdAndEpoch::default().with_leader_id(-1).with_leader_epoch(-1));
            match responses.iter_mut().find(|t| *t.topic_id.as_bytes() == topic_id) {
                Some(t) => t.partitions.push(data),
                None => responses.push(
                    ShareFetchableTopicResponse::default().with_topic_id(uuid(topic_id)).with_partitions(vec![data]),
                ),
            }
        }
        leaders.sort_unstable();
        leaders.dedup();
        let node_endpoints = leaders
            .into_iter()
            .filter_map(|id| Some((id, view.live.get(&id)?.address_for(&listener)?)))
            .map(|(id, (host, port))| {
                NodeEndpoint::default().with_node_id(BrokerId(id)).with_host(text(host)).with_port(port)
            })
            .collect();
        let response = ShareFetchResponse::default()
            .with_acquisition_lock_timeout_ms(answer.lock_duration_ms)
            .with_responses(responses)
            .with_node_endpoints(node_endpoints);
        encode(ApiKey::ShareFetch, &header, &response)
    }))
}

pub fn acknowledge<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: ShareAcknowledgeRequest) -> Answer {
    let version = header.request_api_version;
    let partitions = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                let (acks, acks_invalid) = ack_batches(batches);
                ShareRequestPartition {
                    topic_id: *t.topic_id.as_bytes(),
                    partition: p.partition_index,
                    acks,
                    acks_invalid,
                }
            })
        })
        .collect();
    let mut core_request = ShareFetchRequest {
        group_id: request.group_id.as_ref().map(|g| g.0.to_string()).unwrap_or_default(),
        member_id: request.member_id.as_ref().map(|m| m.to_string()).unwrap_or_default(),
        session_epoch: request.share_session_epoch,
        max_wait_ms: 0,
        max_bytes: 0,
        max_records: 0,
        mode: AcquireMode::BatchOptimized,
        renew: version >= 2 && request.is_renew_ack,
        partitions,
        forgotten: Vec::new(),
        fetch: false,
    };
    let header = header.clone();
    let Ok(refused) = authorize_share(ctx, &mut core_request) else {
        let response =
            ShareAcknowledgeResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
        return Answer::Now(encode(ApiKey::ShareAcknowledge, &header, &response));
    };
    let plan = match ctx.broker.share_session(ctx.connection_id, core_request) {
        Ok(plan) => plan,
        Err(e) => {
            let (code, message) = top_level_error(&e);
            let response = ShareAcknowledgeResponse::default().with_error_code(code).with_error_message(message);
            return Answer::Now(encode(ApiKey::ShareAcknowledge, &header, &response));
        }
    };
    let broker = ctx.broker.clone();
    Answer::Later(Box::pin(async move {
        let answer = broker.share_fetch(plan).await;
        let mut responses: Vec<ShareAcknowledgeTopicResponse> = Vec::new();
        for p in &answer.partitions {
            let (code, message) = match (&p.error, &p.ack) {
                (Some(e), _) | (None, Some(Err(e))) => top_level_error(e),
                _ => (0, None),
            };
            let leader = ack_response::LeaderIdAndEpoch::default().with_leader_id(-1).with_leader_epoch(-1);
            let data = ack_response::PartitionData::default()
                .with_partition_index(p.partition)
                .with_error_code(code)
                .with_error_message(message)
                .with_current_leader(leader);
            match responses.iter_mut().find(|t| *t.topic_id.as_bytes() == p.topic_id) {
                Some(t) => t.partitions.push(data),
                None => responses.push(
                    ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(uuid(p.topic_id))
                        .with_partitions(vec![data]),
                ),
            }
        }
        for (topic_id, partition) in refused {
            let data = ack_response::PartitionData::default()
                .with_partition_index(partition)
                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                .with_current_leader(
                    ack_response::LeaderIdAndEpoch::default().with_leader_id(-1).with_leader_epoch(-1),
                );
            match responses.iter_mut().find(|t| *t.topic_id.as_bytes() == topic_id) {
                Some(t) => t.partitions.push(data),
                None => responses.push(
                    ShareAcknowledgeTopicResponse::default().with_topic_id(uuid(topic_id)).with_partitions(vec![data]),
                ),
            }
        }
        let response = ShareAcknowledgeResponse::default()
            .with_acquisition_lock_timeout_ms(answer.lock_duration_ms)
            .with_responses(responses);
        encode(ApiKey::ShareAcknowledge, &header, &response)
    }))
}

pub async fn txn_acknowledge<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: TxnShareAcknowledgeRequest,
) -> TxnShareAcknowledgeResponse {
    let transactional_id = request.transactional_id.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
    if transactional_id.is_empty() {
        return TxnShareAcknowledgeResponse::default().with_error_code(error::code(&CoreError::InvalidRequest(
            "TxnShareAcknowledge needs a transactional id".into(),
        )));
    }
    // As TxnOffsetCommit: WRITE on the transactional id, READ on the group, READ on every
    // topic; a refused topic refuses the whole staging (none of it is half-staged).
    let group_id = request.group_id.0.to_string();
    let snapshot = ctx.broker.topics.snapshot();
    let topic_refused = request.topics.iter().any(|t| {
        snapshot
            .names_by_id
            .get(t.topic_id.as_bytes())
            .is_some_and(|name| !ctx.authorized(Operation::Read, Resource::topic(name)))
    });
    let refused = match () {
        _ if !ctx.authorized(Operation::Write, Resource::transactional_id(&transactional_id)) => {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        }
        _ if !ctx.authorized(Operation::Read, Resource::group(&group_id)) => {
            Some(ResponseError::GroupAuthorizationFailed)
        }
        _ if topic_refused => Some(ResponseError::TopicAuthorizationFailed),
        _ => None,
    };
    if let Some(refused) = refused {
        return TxnShareAcknowledgeResponse::default().with_error_code(refused.code());
    }
    let partitions: Vec<ShareRequestPartition> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                let (acks, acks_invalid) = ack_batches(batches);
                ShareRequestPartition {
                    topic_id: *t.topic_id.as_bytes(),
                    partition: p.partition_index,
                    acks,
                    acks_invalid,
                }
            })
        })
        .collect();
    let writer = TxnWriter {
        transactional_id,
        producer_id: request.producer_id.0,
        producer_epoch: request.producer_epoch,
        join: Join::Add,
    };
    let staged: CoreResult<_> = ctx
        .broker
        .txn_share_acknowledge(TxnShareAcknowledge {
            writer,
            group_id: request.group_id.0.to_string(),
            member_id: request.member_id.to_string(),
            member_epoch: request.member_epoch,
            partitions,
        })
        .await;
    let results = match staged {
        Ok(results) => results,
        Err(e) => return TxnShareAcknowledgeResponse::default().with_error_code(error::code(&e)),
    };
    let mut responses: Vec<TxnShareAcknowledgeTopicResponse> = Vec::new();
    for (topic_id, partition, result) in results {
        let answer = TxnShareAcknowledgePartitionResponse::default()
            .with_partition_index(partition)
            .with_error_code(error::code_of(&result))
            .with_error_message(result.err().and_then(|e| error::message(&e)).map(|m| text(&m)));
        match responses.iter_mut().find(|t| *t.topic_id.as_bytes() == topic_id) {
            Some(t) => t.partitions.push(answer),
            None => responses.push(
                TxnShareAcknowledgeTopicResponse::default().with_topic_id(uuid(topic_id)).with_partitions(vec![answer]),
            ),
        }
    }
    TxnShareAcknowledgeResponse::default().with_responses(responses)
}
