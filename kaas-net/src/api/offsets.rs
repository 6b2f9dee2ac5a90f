//! OffsetCommit (v2-v10) and OffsetFetch (v1-v10, the batched v8+ form included; v10 names
//! topics by id, an id no topic has answered UNKNOWN_TOPIC_ID). A commit is
//! acked only once it is durable on the volume; one for a partition that does not exist is
//! refused with UNKNOWN_TOPIC_OR_PARTITION, as Apache refuses it. OffsetFetch with require_stable (v7+) answers
//! UNSTABLE_OFFSET_COMMIT for a partition with transactional offsets staged (KIP-447).

use std::collections::BTreeMap;

use kaas_core::env::{Clock, Env};
use kaas_core::group::{CommitRequest, CommittedOffset, FetchedOffset, TopicPartition};
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;

use super::{is_unknown_id, resolve_topic_ids, text, topic, topic_id_of, unknown_partitions};
use crate::connection::Context;
use crate::error;
use kaas_core::acl::{Operation, Resource};

/// Kafka's `offset.metadata.max.bytes`.
const OFFSET_METADATA_MAX_BYTES: usize = 4096;

pub async fn commit<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    mut request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    if header.request_api_version >= 10 {
        resolve_topic_ids(ctx, request.topics.iter_mut().map(|t| (&mut t.name, &t.topic_id))).await;
    }
    let group_refused = !ctx.authorized(Operation::Read, Resource::group(&request.group_id.0));
    let topic_refused: std::collections::BTreeSet<String> = request
        .topics
        .iter()
        .map(|t| t.name.0.to_string())
        .filter(|t| !is_unknown_id(t))
        .filter(|t| group_refused || !ctx.authorized(Operation::Read, Resource::topic(t)))
        .collect();
    let unknown = unknown_partitions(
        ctx,
        request
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), p.partition_index)))
            .collect(),
    )
    .await;
    let mut offsets = Vec::new();
    let mut too_large = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            if unknown.contains(&(t.name.0.to_string(), p.partition_index)) || topic_refused.contains(t.name.0.as_str())
            {
                continue;
            }
            let metadata = p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default();
            if metadata.len() > OFFSET_METADATA_MAX_BYTES {
                too_large.push((t.name.0.to_string(), p.partition_index));
                continue;
            }
            let committed = CommittedOffset {
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata,
                commit_timestamp_ms: ctx.broker.env.clock().now_ms(),
            };
            offsets.push(((t.name.0.to_string(), p.partition_index), committed));
        }
    }
    let result: CoreResult<()> = if offsets.is_empty() {
        Ok(())
    } else {
        ctx.broker
            .groups
            .commit(CommitRequest {
                group_id: request.group_id.0.to_string(),
                member_id: request.member_id.to_string(),
                group_instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
                generation_id: request.generation_id_or_member_epoch,
                offsets,
            })
            .await
    };
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let tp = (t.name.0.to_string(), p.partition_index);
                    let code = if group_refused {
                        ResponseError::GroupAuthorizationFailed.code()
                    } else if topic_refused.contains(&tp.0) {
                        ResponseError::TopicAuthorizationFailed.code()
                    } else if is_unknown_id(&tp.0) {
                        ResponseError::UnknownTopicId.code()
                    } else if unknown.contains(&tp) {
                        ResponseError::UnknownTopicOrPartition.code()
                    } else if too_large.contains(&tp) {
                        ResponseError::OffsetMetadataTooLarge.code()
                    } else {
                        error::code_of(&result)
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default().with_name(t.name).with_topic_id(t.topic_id).with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(refusals_first(topics))
}

/// The answer in Apache's order: its handler answers the partitions it refuses before asking
/// the coordinator (a topic not allowed, unknown, or an unknown partition) as it meets them, and
/// adds what the coordinator answered after, to a topic already named or as a new one.
fn refusals_first(topics: Vec<OffsetCommitResponseTopic>) -> Vec<OffsetCommitResponseTopic> {
    const REFUSED_BEFORE_THE_COORDINATOR: [ResponseError; 3] = [
        ResponseError::TopicAuthorizationFailed,
        ResponseError::UnknownTopicId,
        ResponseError::UnknownTopicOrPartition,
    ];
    let refused =
        |p: &OffsetCommitResponsePartition| REFUSED_BEFORE_THE_COORDINATOR.iter().any(|e| e.code() == p.error_code);
    let (mut first, then): (Vec<_>, Vec<_>) = topics.into_iter().partition(|t| t.partitions.iter().any(refused));
    for t in &mut first {
        let (mut partitions, committed): (Vec<_>, Vec<_>) = t.partitions.drain(..).partition(refused);
        partitions.extend(committed);
        t.partitions = partitions;
    }
    first.extend(then);
    first
}

type Fetched = CoreResult<Vec<FetchedOffset>>;
/// One topic's partitions and their committed offsets (None: nothing committed).
type TopicOffsets = (String, Vec<(i32, CoreResult<Option<CommittedOffset>>)>);

async fn fetch_group<E: Env>(
    ctx: &Context<E>,
    group_id: &str,
    wanted: Option<Vec<TopicPartition>>,
    require_stable: bool,
) -> Fetched {
    if group_id.is_empty() {
        return Err(CoreError::InvalidGroupId);
    }
    // DESCRIBE on the group; then topics the client may not DESCRIBE are left out of a fetch
    // of everything, and answered TOPIC_AUTHORIZATION_FAILED where named, as in Apache.
    if !ctx.authorized(Operation::Describe, Resource::group(group_id)) {
        return Err(CoreError::GroupAuthorizationFailed);
    }
    let named = wanted.is_some();
    let fetched = ctx.broker.groups.fetch(group_id.to_string(), wanted, require_stable).await?;
    if !ctx.broker.authorizer_enabled() {
        return Ok(fetched);
    }
    let describable = |t: &str| ctx.authorized(Operation::Describe, Resource::topic(t));
    Ok(fetched
        .into_iter()
        .filter(|((t, _), _)| named || describable(t))
        .map(|((t, p), c)| match describable(&t) {
            true => ((t, p), c),
            false => ((t, p), Err(CoreError::TopicAuthorizationFailed)),
        })
        .collect())
}

/// Groups (topic, [(partition, offset)]) in first-seen order.
fn by_topic(fetched: Vec<FetchedOffset>) -> Vec<TopicOffsets> {
    let mut out: Vec<TopicOffsets> = Vec::new();
    for ((t, p), c) in fetched {
        match out.iter_mut().find(|(name, _)| *name == t) {
            Some((_, list)) => list.push((p, c)),
            None => out.push((t, vec![(p, c)])),
        }
    }
    out
}

pub async fn fetch<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: OffsetFetchRequest,
) -> OffsetFetchResponse {
    if header.request_api_version >= 8 {
        let by_id = header.request_api_version >= 10;
        let mut groups = Vec::new();
        for mut g in request.groups {
            if let (true, Some(topics)) = (by_id, g.topics.as_mut()) {
                resolve_topic_ids(ctx, topics.iter_mut().map(|t| (&mut t.name, &t.topic_id))).await;
            }
            let ids: BTreeMap<String, uuid::Uuid> =
                g.topics.iter().flatten().map(|t| (t.name.0.to_string(), t.topic_id)).collect();
            let wanted = g.topics.map(|ts| {
                ts.into_iter()
                    .flat_map(|t| t.partition_indexes.into_iter().map(move |p| (t.name.0.to_string(), p)))
                    .collect()
            });
            let group = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
            groups.push(match fetch_group(ctx, &g.group_id.0, wanted, request.require_stable).await {
                Err(e) => group.with_error_code(error::code(&e)),
                Ok(fetched) => {
                    let topics = by_topic(fetched)
                        .into_iter()
                        .map(|(name, parts)| {
                            let id = ids.get(&name).copied().unwrap_or_else(|| topic_id_of(ctx, &name));
                            (name, id, parts)
                        })
                        // By id, a topic deleted since its offsets were committed has none.
                        .filter(|(_, id, _)| !by_id || !id.is_nil())
                        .map(|(name, id, parts)| {
                            let partitions = parts
                                .into_iter()
                                .map(|(p, c)| {
                                    let code = match is_unknown_id(&name) {
                                        true => ResponseError::UnknownTopicId.code(),
                                        false => error::code_of(&c),
                                    };
                                    let (offset, epoch, metadata) = unpack(c);
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(p)
                                        .with_error_code(code)
                                        .with_committed_offset(offset)
                                        .with_committed_leader_epoch(epoch)
                                        .with_metadata(Some(text(&metadata)))
                                })
                                .collect();
                            OffsetFetchResponseTopics::default()
                                .with_name(topic(&name))
                                .with_topic_id(id)
                                .with_partitions(partitions)
                        })
                        .collect();
                    group.with_topics(topics)
                }
            });
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = request.topics.map(|ts| {
        ts.into_iter().flat_map(|t| t.partition_indexes.into_iter().map(move |p| (t.name.0.to_string(), p))).collect()
    });
    match fetch_group(ctx, &request.group_id.0, wanted, request.require_stable).await {
        Err(e) => OffsetFetchResponse::default().with_error_code(error::code(&e)),
        Ok(fetched) => {
            let topics = by_topic(fetched)
                .into_iter()
                .map(|(name, parts)| {
                    let partitions = parts
                        .into_iter()
                        .map(|(p, c)| {
                            let code = error::code_of(&c);
                            let (offset, epoch, metadata) = unpack(c);
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(text(&metadata)))
                        })
                        .collect();
                    OffsetFetchResponseTopic::default().with_name(topic(&name)).with_partitions(partitions)
                })
                .collect();
            OffsetFetchResponse::default().with_topics(topics)
        }
    }
}

fn unpack(c: CoreResult<Option<CommittedOffset>>) -> (i64, i32, String) {
    match c {
        Ok(Some(c)) => (c.offset, c.leader_epoch, c.metadata),
        _ => (-1, -1, String::new()),
    }
}
