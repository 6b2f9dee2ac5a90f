//! Fetch (v4-v18) for consumers. Reads stop at the high watermark (only durable bytes are
//! served), or for read_committed (isolation 1) at the last stable offset, with the aborted
//! transactions of the range so the consumer can drop their batches; a fetch with less than `min_bytes` available waits until more arrives or
//! `max_wait_ms` passes (long polling). Fetch sessions are not kept: every answer carries
//! session id 0, which tells clients to send full fetch requests.

use std::sync::Arc;

use bytes::Bytes;

use kaas_core::broker::quotas::QuotaClient;
use kaas_core::env::{Clock, Env};
use kaas_core::partition::Isolation;
use kaas_core::quota::QuotaKey;
use kaas_core::topics::MetadataSnapshot;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, ProducerId, RequestHeader};
use tokio::time::Duration;

use super::{encode, topic};
use crate::connection::{Answer, Context};
use crate::error;
use kaas_core::acl::{Operation, Resource};
use std::collections::BTreeSet;

/// The longest a fetch may wait, whatever the client asks.
const MAX_WAIT_MS_MAX: i32 = 60_000;

pub fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    mut request: FetchRequest,
    started: tokio::time::Instant,
) -> Answer {
    // A consumer with a quota asks for no more than its quota's window lets it take at once.
    let client = ctx.quota_client(header);
    if let Some(max) = ctx.broker.quota_window_max(QuotaKey::ConsumerByteRate, client) {
        request.max_bytes = request.max_bytes.min(max.min(i32::MAX as f64) as i32);
    }
    let request_throttle = ctx.request_time(header, started);
    let quota = (ctx.principal.clone(), client.client_id.to_string(), ctx.mute.clone());
    let header = header.clone();
    let topics = ctx.broker.topics.clone();
    let clock = ctx.broker.env.clock().clone();
    let broker = ctx.broker.clone();
    // READ on each topic, as Apache checks it; a refused topic's partitions answer
    // TOPIC_AUTHORIZATION_FAILED and nothing of them is read.
    let denied: BTreeSet<String> = match ctx.broker.authorizer_enabled() {
        false => BTreeSet::new(),
        true => {
            let snapshot = ctx.broker.topics.snapshot();
            request
                .topics
                .iter()
                .filter_map(|t| match header.request_api_version >= 13 {
                    true => snapshot.names_by_id.get(t.topic_id.as_bytes()).cloned(),
                    false => Some(t.topic.0.to_string()),
                })
                .filter(|name| !ctx.authorized(Operation::Read, Resource::topic(name)))
                .collect()
        }
    };
    Answer::Later(Box::pin(async move {
        if request.session_id != 0 || request.session_epoch > 0 {
            let response = FetchResponse::default().with_error_code(ResponseError::FetchSessionIdNotFound.code());
            return encode(ApiKey::Fetch, &header, &response);
        }
        let max_wait = Duration::from_millis(request.max_wait_ms.clamp(0, MAX_WAIT_MS_MAX) as u64);
        let deadline = clock.monotonic() + max_wait;
        // A topic a peer created a moment ago is read now, not at the next rescan: a consumer
        // told UNKNOWN_TOPIC_OR_PARTITION by a partition's new owner may back off for long.
        if header.request_api_version >= 13 {
            topics.refresh_ids(request.topics.iter().map(|t| t.topic_id.as_bytes())).await;
        } else {
            topics.refresh(request.topics.iter().map(|t| t.topic.0.as_str())).await;
        }
        let mut data_version = topics.data_version.clone();
        loop {
            data_version.borrow_and_update();
            let (response, bytes) =
                read_once(&topics.snapshot(), &request, header.request_api_version, broker.owns_now(), &denied).await;
            let waited_enough = clock.monotonic() >= deadline;
            if bytes >= request.min_bytes.max(0) as usize || waited_enough || bytes > 0 && request.min_bytes <= 1 {
                let response = throttled(&broker, &quota, &header, response, bytes, request_throttle);
                return encode(ApiKey::Fetch, &header, &response);
            }
            tokio::select! {
                biased;
                changed = data_version.changed() => if changed.is_err() {
                    return encode(ApiKey::Fetch, &header, &response);
                },
                _ = clock.sleep_until(deadline) => {}
            }
        }
    }))
}

/// The answer as the client's quotas let it go: over its fetch or request quota, the records
/// are taken back from the fetch rate and the answer is empty, with the throttle time (as
/// Apache answers a throttled fetch), and the connection muted.
fn throttled<E: Env>(
    broker: &kaas_core::Broker<E>,
    (principal, client_id, mute): &(String, String, crate::throttle::Mute),
    header: &RequestHeader,
    response: FetchResponse,
    bytes: usize,
    request_throttle: u64,
) -> FetchResponse {
    let client = QuotaClient { principal, client_id };
    let bandwidth = broker.record_quota(QuotaKey::ConsumerByteRate, client, bytes as f64);
    let throttle = bandwidth.max(request_throttle);
    let mut response = match throttle {
        0 => {
            count_topic_bytes(broker, &response);
            response
        }
        _ => {
            broker.unrecord_quota(QuotaKey::ConsumerByteRate, client, bytes as f64);
            mute.extend(broker.env.clock().now_ms(), bandwidth);
            FetchResponse::default()
        }
    };
    crate::throttle::tell(&mut response, header.request_api_version, throttle);
    response
}

/// Record bytes answered, per topic, for the operators.
fn count_topic_bytes<E: Env>(broker: &kaas_core::Broker<E>, response: &FetchResponse) {
    let snapshot = broker.topics.snapshot();
    let per_topic = response.responses.iter().filter_map(|t| {
        let bytes: u64 = t.partitions.iter().map(|p| p.records.as_ref().map_or(0, |r| r.len() as u64)).sum();
        let name = match t.topic.0.is_empty() {
            true => snapshot.names_by_id.get(t.topic_id.as_bytes())?.as_str(),
            false => t.topic.0.as_str(),
        };
        Some((name, bytes))
    });
    broker.metrics.topic_bytes(false, per_topic);
}

/// One pass over the requested partitions; returns the response and the record bytes in it.
async fn read_once(
    snapshot: &Arc<MetadataSnapshot>,
    request: &FetchRequest,
    version: i16,
    lease_valid: bool,
    denied: &BTreeSet<String>,
) -> (FetchResponse, usize) {
    let mut remaining = request.max_bytes.max(0) as usize;
    let read_committed = request.isolation_level == 1 && !kaas_core::mutant!(FetchIgnoresIsolation);
    let isolation = if read_committed { Isolation::ReadCommitted } else { Isolation::ReadUncommitted };
    let mut total = 0usize;
    let mut responses = Vec::new();
    for t in &request.topics {
        let name = if version >= 13 {
            snapshot.names_by_id.get(t.topic_id.as_bytes()).cloned()
        } else {
            Some(t.topic.0.to_string())
        };
        let mut partitions = Vec::new();
        for p in &t.partitions {
            let data = PartitionData::default()
                .with_partition_index(p.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                // Null unless a read_committed read has some to tell, as Apache answers.
                .with_aborted_transactions(None)
                .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1));
            let Some(name) = &name else {
                partitions.push(data.with_error_code(ResponseError::UnknownTopicId.code()));
                continue;
            };
            if denied.contains(name) {
                partitions.push(data.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
                continue;
            }
            let Some(partition) = snapshot.partition(name, p.partition) else {
                partitions.push(data.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
                continue;
            };
            // With the response's byte budget spent, the partition is answered from its published
            // watermarks and no records; otherwise from a read, with the watermarks it saw.
            let answer = if remaining == 0 {
                let marks = partition.watermarks();
                if !marks.owned || !lease_valid {
                    Err(ResponseError::NotLeaderOrFollower.code())
                } else if marks.online {
                    Ok((Bytes::new(), marks, Vec::new()))
                } else {
                    Err(ResponseError::KafkaStorageError.code())
                }
            } else {
                let limit = (p.partition_max_bytes.max(0) as usize).min(remaining);
                partition
                    .read(p.fetch_offset, limit, isolation)
                    .await
                    .map(|r| (r.records, r.watermarks, r.aborted))
                    .map_err(|e| error::code(&e))
            };
            match answer {
                Ok((records, marks, aborted)) => {
                    remaining = remaining.saturating_sub(records.len());
                    total += records.len();
                    let aborted = (isolation == Isolation::ReadCommitted).then(|| {
                        aborted
                            .iter()
                            .map(|a| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(a.producer_id))
                                    .with_first_offset(a.first_offset)
                            })
                            .collect()
                    });
                    let data = data
                        .with_high_watermark(marks.high_watermark)
                        .with_last_stable_offset(marks.last_stable_offset)
                        .with_log_start_offset(marks.log_start_offset)
                        .with_aborted_transactions(aborted);
                    partitions.push(data.with_records(Some(records)));
                }
                Err(code) => partitions.push(data.with_error_code(code)),
            }
        }
        let response = FetchableTopicResponse::default().with_topic_id(t.topic_id).with_partitions(partitions);
        let response = if version < 13 { response.with_topic(topic(&t.topic.0)) } else { response };
        responses.push(response);
    }
    (FetchResponse::default().with_responses(responses), total)
}
