//! Produce (v3-v13; v0-v2 advertised and refused; v13 names topics by id). Batches are checked
//! (header, CRC, magic) and queued on their partition actors in request order before this
//! returns; the answer waits for the fsync of every partition (acks=1 and acks=all alike: the
//! volume is the replica).
//!
//! Each partition's records go to `Broker::produce`, which checks them, verifies a batch that
//! opens a transaction with its coordinator (KIP-890 part 1) and queues them before it returns:
//! the request after this one on the connection must not overtake it. From v12 the client uses
//! transactions v2 (KIP-890 part 2): it sends no AddPartitionsToTxn, and the verification adds
//! the partition to the transaction instead (`Join::Add`).

use bytes::{Buf, BufMut, Bytes};
use kaas_core::acl::{Operation, Resource};
use kaas_core::broker::Produced;
use kaas_core::env::Env;
use kaas_core::participant::Join;
use kaas_core::quota::QuotaKey;
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, RequestHeader};

use super::{encode, raw_header, text};
use crate::connection::{Answer, Context, Response};
use crate::error;

/// A topic of the request as named (by name, or from v13 by id), the name it resolved to (None:
/// an id no topic has), and its partitions' answers with their record bytes.
type TopicPending = (kafka_protocol::messages::TopicName, uuid::Uuid, Option<String>, Vec<(i32, Produced, u64)>);

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: ProduceRequest,
    request_size: usize,
    started: tokio::time::Instant,
) -> Result<Answer, String> {
    let acks = request.acks;
    let version = header.request_api_version;
    let produce = kaas_core::broker::ProduceRequest {
        transactional_id: request.transactional_id.as_ref().map(|t| t.to_string()),
        join: if version >= 12 { Join::Add } else { Join::Verify },
        acks,
    };
    // A topic a peer created a moment ago is read now, not at the next rescan.
    if version >= 13 {
        ctx.broker.topics.refresh_ids(request.topic_data.iter().map(|t| t.topic_id.as_bytes())).await;
    } else {
        ctx.broker.topics.refresh(request.topic_data.iter().map(|t| t.name.0.as_str())).await;
    }
    let snapshot = ctx.broker.topics.snapshot();
    // As Apache: WRITE on the transactional id first (the whole request), then WRITE on each
    // topic; nothing of a refused one is appended.
    let txn_refused = produce
        .transactional_id
        .as_deref()
        .is_some_and(|id| !ctx.authorized(Operation::Write, Resource::transactional_id(id)));
    let mut topics: Vec<TopicPending> = Vec::new();
    for topic_data in request.topic_data {
        let name = match version >= 13 {
            true => snapshot.names_by_id.get(topic_data.topic_id.as_bytes()).cloned(),
            false => Some(topic_data.name.0.to_string()),
        };
        let refused = match &name {
            _ if txn_refused => Some(CoreError::TransactionalIdAuthorizationFailed),
            Some(name) if !ctx.authorized(Operation::Write, Resource::topic(name)) => {
                Some(CoreError::TopicAuthorizationFailed)
            }
            _ => None,
        };
        let mut partitions = Vec::new();
        for data in topic_data.partition_data {
            let bytes = data.records.as_ref().map_or(0, |r| r.len() as u64);
            let produced = match &refused {
                Some(e) => Produced::Done(Err(e.clone())),
                None => ctx.broker.produce(&snapshot, &produce, name.as_deref(), data.index, data.records).await,
            };
            partitions.push((data.index, produced, bytes));
        }
        topics.push((topic_data.name, topic_data.topic_id, name, partitions));
    }
    // The client's produce quota counts the whole request, its request quota the time spent
    // queueing it; over either, the connection is muted for the longer, even with acks=0.
    let bandwidth = ctx.broker.record_quota(QuotaKey::ProducerByteRate, ctx.quota_client(header), request_size as f64);
    ctx.mute(bandwidth);
    let throttle = bandwidth.max(ctx.request_time(header, started));
    if acks == 0 {
        return Ok(Answer::Now(Response::Nothing));
    }
    let header = header.clone();
    let metrics = ctx.broker.metrics.clone();
    Ok(Answer::Later(Box::pin(async move {
        let mut responses = Vec::new();
        for (name, topic_id, resolved, partitions) in topics {
            let resolved = resolved.unwrap_or_default();
            let mut partition_responses = Vec::new();
            let mut appended_bytes = 0;
            for (index, produced, bytes) in partitions {
                // Only an append the partition refused (a sequence, an epoch) tells its log start,
                // looked up then: an error is rare, a produce is not.
                let (result, appended) = produced.outcome().await;
                let log_start = || {
                    let partition = snapshot.partition(&resolved, index).filter(|_| appended);
                    partition.map_or(-1, |p| p.watermarks().log_start_offset)
                };
                // UNKNOWN_PRODUCER_ID came with Kafka 1.0 (Produce v5); older clients know only
                // the out-of-order answer.
                let result = match result {
                    Err(CoreError::UnknownProducerId) if version < 5 => Err(CoreError::OutOfOrderSequenceNumber),
                    other => other,
                };
                if result.is_ok() {
                    appended_bytes += bytes;
                }
                partition_responses.push(partition_response(index, result, log_start));
            }
            metrics.topic_bytes(true, [(resolved.as_str(), appended_bytes)]);
            responses.push(
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_topic_id(topic_id)
                    .with_partition_responses(partition_responses),
            );
        }
        let mut response = ProduceResponse::default().with_responses(responses);
        crate::throttle::tell(&mut response, version, throttle);
        encode(ApiKey::Produce, &header, &response)
    })))
}

/// An error of the producer's own batch (its sequence, its epoch) found by the partition carries
/// its log start offset, as Apache's does; one found before the append (the partition, the
/// request, the transaction's verification) does not.
fn partition_response(
    index: i32,
    result: CoreResult<kaas_core::partition::AppendOutcome>,
    log_start: impl FnOnce() -> i64,
) -> PartitionProduceResponse {
    let base = PartitionProduceResponse::default().with_index(index).with_log_append_time_ms(-1);
    match result {
        Ok(outcome) => base
            .with_base_offset(outcome.base_offset)
            .with_log_start_offset(outcome.log_start_offset)
            .with_log_append_time_ms(outcome.log_append_time_ms),
        Err(e) => {
            // Records refused one by one are named in record_errors (v8+), as Apache names them.
            let record_errors = match &e {
                CoreError::RecordsRejected(errors) | CoreError::InvalidTimestamp(errors) => errors
                    .iter()
                    .map(|(index, why)| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(*index)
                            .with_batch_index_error_message(Some(text(why)))
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let log_start = match e {
                CoreError::OutOfOrderSequenceNumber
                | CoreError::UnknownProducerId
                | CoreError::InvalidProducerEpoch
                | CoreError::ProducerFenced => log_start(),
                _ => -1,
            };
            base.with_error_code(error::code(&e))
                .with_record_errors(record_errors)
                .with_base_offset(-1)
                .with_log_start_offset(log_start)
                .with_error_message(error::message(&e).map(|m| text(&m)))
        }
    }
}

/// Produce v0-v2: Kafka 4 advertises them (for librdkafka's sake) and answers every partition
/// with UNSUPPORTED_VERSION. The message crate has no v0-v2 structs, so both directions are
/// written out here: request `acks timeout [topic [partition records]]`, response
/// `[topic [partition error base_offset (v2: log_append_time)]] (v1+: throttle_time)`.
pub fn refuse_old_version(header: &RequestHeader, body: &mut Bytes) -> Result<Response, String> {
    let version = header.request_api_version;
    let short = || "truncated produce request".to_string();
    let string = |b: &mut Bytes| -> Result<Bytes, String> {
        if b.remaining() < 2 {
            return Err(short());
        }
        let len = b.get_i16();
        if len < 0 || b.remaining() < len as usize {
            return Err(short());
        }
        Ok(b.split_to(len as usize))
    };
    if body.remaining() < 10 {
        return Err(short());
    }
    let acks = body.get_i16();
    body.advance(4);
    let topic_count = body.get_i32();
    let mut out = raw_header(header.correlation_id);
    out.put_i32(topic_count.max(0));
    for _ in 0..topic_count.max(0) {
        let name = string(body)?;
        if body.remaining() < 4 {
            return Err(short());
        }
        let partition_count = body.get_i32();
        out.put_i16(name.len() as i16);
        out.put_slice(&name);
        out.put_i32(partition_count.max(0));
        for _ in 0..partition_count.max(0) {
            if body.remaining() < 8 {
                return Err(short());
            }
            let partition = body.get_i32();
            let records_len = body.get_i32();
            if records_len > 0 {
                if body.remaining() < records_len as usize {
                    return Err(short());
                }
                body.advance(records_len as usize);
            }
            out.put_i32(partition);
            out.put_i16(ResponseError::UnsupportedVersion.code());
            out.put_i64(-1);
            if version >= 2 {
                out.put_i64(-1);
            }
        }
    }
    if version >= 1 {
        out.put_i32(0);
    }
    Ok(if acks == 0 {
        Response::Nothing
    } else {
        Response::Frame(out.freeze(), vec![ResponseError::UnsupportedVersion.code()])
    })
}
