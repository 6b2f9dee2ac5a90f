//! The share group membership APIs (KIP-932): ShareGroupHeartbeat (v1) and ShareGroupDescribe
//! (v1). Each decodes, asks the group coordinator (whose share groups are
//! `kaas_core::group::share`), and encodes. Assignments name topics by id.

use kaas_core::CoreError;
use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kaas_core::group::ShareHeartbeat;
use kaas_core::group::assignor::Assignment;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_group_describe_response::{self as describe, DescribedGroup};
use kafka_protocol::messages::share_group_heartbeat_response as heartbeat;
use kafka_protocol::messages::*;

use super::groups::{client_id, host_of};
use super::{text, uuid};
use crate::connection::Context;
use crate::error;

/// The request's own mistakes, as Apache words them (INVALID_REQUEST).
fn invalid(request: &ShareGroupHeartbeatRequest) -> Option<&'static str> {
    if request.member_id.is_empty() {
        return Some("MemberId can't be empty.");
    }
    if request.group_id.0.is_empty() {
        return Some("GroupId can't be empty.");
    }
    if request.rack_id.as_ref().is_some_and(|r| r.is_empty()) {
        return Some("RackId can't be empty.");
    }
    match request.member_epoch {
        0 if request.subscribed_topic_names.as_ref().is_none_or(|t| t.is_empty()) => {
            Some("SubscribedTopicNames must be set in first request.")
        }
        e if e < kaas_core::group::share::LEAVE_EPOCH => Some("MemberEpoch is invalid."),
        _ => None,
    }
}

pub async fn heartbeat<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    if !ctx.authorized(Operation::Read, Resource::group(&request.group_id.0)) {
        return ShareGroupHeartbeatResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    if let Some(why) = invalid(&request) {
        return ShareGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(text(why)));
    }
    let hb = ShareHeartbeat {
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        rack_id: request.rack_id.as_ref().map(|s| s.to_string()),
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.iter().map(|n| n.0.to_string()).collect()),
        client_id: client_id(header),
        client_host: host_of(&ctx.peer),
    };
    let group_id = request.group_id.0.to_string();
    // A topic a peer created a moment ago is assigned now, not at the next rescan.
    if let Some(names) = &hb.subscribed_topic_names {
        ctx.broker.topics.refresh(names.iter().map(String::as_str)).await;
    }
    let answered = ctx.broker.groups.share_heartbeat(group_id.clone(), hb, ctx.broker.topics.snapshot()).await;
    match answered {
        Ok(answer) => {
            let assignment = answer.assignment.map(|a| {
                let topics = a
                    .iter()
                    .map(|(id, ps)| {
                        heartbeat::TopicPartitions::default()
                            .with_topic_id(uuid(*id))
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect();
                heartbeat::Assignment::default().with_topic_partitions(topics)
            });
            let interval = match answer.member_epoch < 0 {
                true => 0,
                false => ctx.broker.config.group_share_heartbeat_interval_ms,
            };
            ShareGroupHeartbeatResponse::default()
                .with_member_id(Some(text(&answer.member_id)))
                .with_member_epoch(answer.member_epoch)
                .with_heartbeat_interval_ms(interval)
                .with_assignment(assignment)
        }
        Err(e) => {
            let message = match e {
                kaas_core::CoreError::GroupIdNotFound => Some(format!("Group {group_id} is not a share group.")),
                ref e => error::message(e),
            };
            ShareGroupHeartbeatResponse::default()
                .with_error_code(error::code(&e))
                .with_error_message(message.map(|m| text(&m)))
        }
    }
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    let snapshot = ctx.broker.topics.snapshot();
    let name_of = |id: &[u8; 16]| snapshot.names_by_id.get(id).cloned().unwrap_or_default();
    let to_wire = |a: &Assignment| {
        let topics = a
            .iter()
            .map(|(id, ps)| {
                describe::TopicPartitions::default()
                    .with_topic_id(uuid(*id))
                    .with_topic_name(TopicName(text(&name_of(id))))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect();
        describe::Assignment::default().with_topic_partitions(topics)
    };
    let mut groups = Vec::new();
    for group_id in &request.group_ids {
        let described = DescribedGroup::default().with_group_id(group_id.clone());
        if !ctx.authorized(Operation::Describe, Resource::group(&group_id.0)) {
            groups.push(described.with_error_code(ResponseError::GroupAuthorizationFailed.code()));
            continue;
        }
        let group = match ctx.broker.groups.share_describe(group_id.0.to_string()).await {
            Ok(group) => group,
            Err(kaas_core::CoreError::GroupIdNotFound) => {
                let message = format!("Group {} is not a share group.", group_id.0);
                groups.push(
                    described
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(text(&message))),
                );
                continue;
            }
            Err(e) => {
                groups.push(described.with_error_code(error::code(&e)));
                continue;
            }
        };
        let members = group
            .members
            .values()
            .map(|m| {
                describe::Member::default()
                    .with_member_id(text(&m.member_id))
                    .with_rack_id(m.rack_id.as_deref().map(text))
                    .with_member_epoch(m.member_epoch)
                    .with_client_id(text(&m.client_id))
                    .with_client_host(text(&m.client_host))
                    .with_subscribed_topic_names(m.subscribed_topic_names.iter().map(|n| TopicName(text(n))).collect())
                    .with_assignment(to_wire(&m.assignment))
            })
            .collect();
        groups.push(
            described
                .with_group_state(text(group.state_name()))
                .with_group_epoch(group.group_epoch)
                .with_assignment_epoch(group.assignment_epoch)
                .with_assignor_name(text("simple"))
                .with_members(members)
                .with_authorized_operations(i32::MIN),
        );
    }
    ShareGroupDescribeResponse::default().with_groups(groups)
}

/// A partition's answer as Apache's share offsets answers carry it: the error code and, if the
/// error has one, its message.
fn error_of(result: &kaas_core::CoreResult<()>) -> (i16, Option<kafka_protocol::protocol::StrBytes>) {
    (error::code_of(result), result.as_ref().err().and_then(error::message).map(|m| text(&m)))
}

pub async fn describe_offsets<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    use describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup as Group, DescribeShareGroupOffsetsResponsePartition as Partition,
        DescribeShareGroupOffsetsResponseTopic as Topic,
    };
    let mut groups = Vec::new();
    for g in &request.groups {
        let topics =
            g.topics.as_ref().map(|ts| ts.iter().map(|t| (t.topic_name.0.to_string(), t.partitions.clone())).collect());
        let group = Group::default().with_group_id(g.group_id.clone());
        if !ctx.authorized(Operation::Describe, Resource::group(&g.group_id.0)) {
            groups.push(group.with_error_code(ResponseError::GroupAuthorizationFailed.code()));
            continue;
        }
        let from_peer = ctx.from_broker;
        let described = match ctx.broker.describe_share_offsets(&g.group_id.0, topics, from_peer).await {
            Ok(described) => described,
            Err(e) => {
                let (code, message) = error_of(&Err(e));
                groups.push(group.with_error_code(code).with_error_message(message));
                continue;
            }
        };
        let topics = described
            .into_iter()
            .map(|(name, id, partitions)| {
                let describable = ctx.authorized(Operation::Describe, Resource::topic(&name));
                let partitions = partitions
                    .into_iter()
                    .map(|(p, offsets)| {
                        (p, if describable { offsets } else { Err(CoreError::TopicAuthorizationFailed) })
                    })
                    .map(|(p, offsets)| {
                        let base = Partition::default().with_partition_index(p).with_leader_epoch(-1);
                        match offsets {
                            Ok(Some(o)) => base.with_start_offset(o.start_offset).with_lag(o.lag),
                            // Never consumed by the group: no start offset, as Apache answers.
                            Ok(None) => base.with_start_offset(-1).with_lag(-1),
                            Err(e) => {
                                let (code, message) = error_of(&Err(e));
                                base.with_start_offset(-1)
                                    .with_lag(-1)
                                    .with_error_code(code)
                                    .with_error_message(message)
                            }
                        }
                    })
                    .collect();
                Topic::default()
                    .with_topic_name(TopicName(text(&name)))
                    .with_topic_id(uuid(id))
                    .with_partitions(partitions)
            })
            .collect();
        groups.push(group.with_topics(topics));
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

pub async fn alter_offsets<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    use alter_share_group_offsets_response::{
        AlterShareGroupOffsetsResponsePartition as Partition, AlterShareGroupOffsetsResponseTopic as Topic,
    };
    // READ on the group and on every topic, as Apache checks.
    let refused = match () {
        _ if !ctx.authorized(Operation::Read, Resource::group(&request.group_id.0)) => {
            Some(ResponseError::GroupAuthorizationFailed.code())
        }
        _ if request.topics.iter().any(|t| !ctx.authorized(Operation::Read, Resource::topic(&t.topic_name.0))) => {
            Some(ResponseError::TopicAuthorizationFailed.code())
        }
        _ => None,
    };
    if let Some(code) = refused {
        return AlterShareGroupOffsetsResponse::default().with_error_code(code);
    }
    let mut partitions = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            // -1 forgets the share partition: a peer's DeleteShareGroupOffsets (`kaas_net::peers`).
            let start = (p.start_offset != super::FORGET_SHARE_PARTITION).then_some(p.start_offset);
            partitions.push((t.topic_name.0.to_string(), p.partition_index, start));
        }
    }
    let invalid = partitions.iter().any(|(_, _, s)| s.is_some_and(|s| s < 0));
    let results = match invalid {
        true => Err(kaas_core::CoreError::InvalidRequest("a start offset is never negative".into())),
        false => ctx.broker.reset_share_offsets(&request.group_id.0, partitions).await,
    };
    let results = match results {
        Ok(results) => results,
        Err(e) => {
            let (code, message) = error_of(&Err(e));
            return AlterShareGroupOffsetsResponse::default().with_error_code(code).with_error_message(message);
        }
    };
    let snapshot = ctx.broker.topics.snapshot();
    let mut topics: Vec<Topic> = Vec::new();
    for (name, p, result) in results {
        let (code, message) = error_of(&result);
        let partition = Partition::default().with_partition_index(p).with_error_code(code).with_error_message(message);
        match topics.iter_mut().find(|t| t.topic_name.0.as_str() == name) {
            Some(t) => t.partitions.push(partition),
            None => {
                let id = snapshot.topics.get(&name).map_or([0; 16], |s| s.meta.topic_id);
                topics.push(
                    Topic::default()
                        .with_topic_name(TopicName(text(&name)))
                        .with_topic_id(uuid(id))
                        .with_partitions(vec![partition]),
                );
            }
        }
    }
    AlterShareGroupOffsetsResponse::default().with_responses(topics)
}

pub async fn delete_offsets<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    use delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as Topic;
    // DELETE on the group and READ on every topic, as Apache checks.
    let refused = match () {
        _ if !ctx.authorized(Operation::Delete, Resource::group(&request.group_id.0)) => {
            Some(ResponseError::GroupAuthorizationFailed.code())
        }
        _ if request.topics.iter().any(|t| !ctx.authorized(Operation::Read, Resource::topic(&t.topic_name.0))) => {
            Some(ResponseError::TopicAuthorizationFailed.code())
        }
        _ => None,
    };
    if let Some(code) = refused {
        return DeleteShareGroupOffsetsResponse::default().with_error_code(code);
    }
    let snapshot = ctx.broker.topics.snapshot();
    let mut partitions = Vec::new();
    let mut unknown = Vec::new();
    for t in &request.topics {
        let name = t.topic_name.0.to_string();
        match snapshot.topics.get(&name) {
            Some(state) => partitions.extend((0..state.meta.partitions).map(|p| (name.clone(), p, None))),
            None => unknown.push(name),
        }
    }
    let results = match ctx.broker.reset_share_offsets(&request.group_id.0, partitions).await {
        Ok(results) => results,
        Err(e) => {
            let (code, message) = error_of(&Err(e));
            return DeleteShareGroupOffsetsResponse::default().with_error_code(code).with_error_message(message);
        }
    };
    let mut topics: Vec<Topic> = Vec::new();
    for t in &request.topics {
        let name = t.topic_name.0.to_string();
        let result = match unknown.contains(&name) {
            true => Err(kaas_core::CoreError::UnknownTopicOrPartition),
            // The topic's result: its first partition's error, if any failed.
            false => results
                .iter()
                .filter(|(n, _, _)| *n == name)
                .map(|(_, _, r)| r.clone())
                .find(Result::is_err)
                .unwrap_or(Ok(())),
        };
        let (code, message) = error_of(&result);
        let id = snapshot.topics.get(&name).map_or([0; 16], |s| s.meta.topic_id);
        topics.push(
            Topic::default()
                .with_topic_name(TopicName(text(&name)))
                .with_topic_id(uuid(id))
                .with_error_code(code)
                .with_error_message(message),
        );
    }
    DeleteShareGroupOffsetsResponse::default().with_responses(topics)
}
