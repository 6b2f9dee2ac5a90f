//! The share group membership APIs (KIP-932): ShareGroupHeartbeat (v1) and ShareGroupDescribe
//! (v1). Each decodes, asks the group coordinator (whose share groups are
//! `kaas_core::group::share`), and encodes. Assignments name topics by id.

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
