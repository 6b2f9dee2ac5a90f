//! The consumer protocol's group APIs (KIP-848): ConsumerGroupHeartbeat (v0-v1) and
//! ConsumerGroupDescribe (v0-v1). Each decodes, asks the group coordinator (whose consumer
//! groups are `kaas_core::group::consumer`), and encodes. Assignments name topics by id.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kaas_core::group::assignor::Assignment;
use kaas_core::group::consumer::Heartbeat;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{self as describe, DescribedGroup};
use kafka_protocol::messages::consumer_group_heartbeat_response::{self as heartbeat};
use kafka_protocol::messages::*;

use super::groups::{client_id, host_of};
use super::{text, uuid};
use crate::connection::Context;
use crate::error;

fn owned_from_wire(topics: &[consumer_group_heartbeat_request::TopicPartitions]) -> Assignment {
    let mut owned = Assignment::new();
    for t in topics {
        owned.entry(*t.topic_id.as_bytes()).or_default().extend(t.partitions.iter().copied());
    }
    owned
}

pub async fn heartbeat<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    if !ctx.authorized(Operation::Read, Resource::group(&request.group_id.0)) {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let snapshot = ctx.broker.topics.snapshot();
    let interval = kaas_core::config::group::int_of(
        snapshot.group_configs.get(request.group_id.as_str()),
        kaas_core::config::group::CONSUMER_HEARTBEAT_INTERVAL_MS,
        ctx.broker.config.group_consumer_heartbeat_interval_ms,
    );
    let hb = Heartbeat {
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: request.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: request.subscribed_topic_regex.as_ref().map(|r| r.to_string()),
        server_assignor: request.server_assignor.as_ref().map(|s| s.to_string()),
        owned: request.topic_partitions.as_deref().map(owned_from_wire),
        client_id: client_id(header),
        client_host: host_of(&ctx.peer),
    };
    if header.request_api_version >= 1 && hb.member_epoch == 0 && hb.member_id.is_empty() {
        // From v1 the member names itself.
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(text("MemberId can't be empty.")));
    }
    let answered = ctx.broker.groups.consumer_heartbeat(request.group_id.0.to_string(), hb, snapshot).await;
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
            // A member that left is told no interval, as Apache answers it.
            let interval = if answer.member_epoch < 0 { 0 } else { interval };
            ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(text(&answer.member_id)))
                .with_member_epoch(answer.member_epoch)
                .with_heartbeat_interval_ms(interval)
                .with_assignment(assignment)
        }
        Err(e) => ConsumerGroupHeartbeatResponse::default()
            .with_error_code(error::code(&e))
            .with_error_message(error::message(&e).map(|m| text(&m))),
    }
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
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
        let group = match ctx.broker.groups.consumer_describe(group_id.0.to_string()).await {
            Err(e) => {
                groups.push(described.with_error_code(error::code(&e)));
                continue;
            }
            Ok(None) => {
                let message = format!("Group {} not found.", group_id.0);
                groups.push(
                    described
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(text(&message))),
                );
                continue;
            }
            Ok(Some(group)) => group,
        };
        let members = group
            .members
            .values()
            .map(|m| {
                describe::Member::default()
                    .with_member_id(text(&m.member_id))
                    .with_instance_id(m.instance_id.as_deref().map(text))
                    .with_rack_id(m.rack_id.as_deref().map(text))
                    .with_member_epoch(m.member_epoch)
                    .with_client_id(text(&m.client_id))
                    .with_client_host(text(&m.client_host))
                    .with_subscribed_topic_names(m.subscribed_topic_names.iter().map(|n| TopicName(text(n))).collect())
                    // No regular expression: empty, as Apache answers.
                    .with_subscribed_topic_regex(Some(text(m.subscribed_topic_regex.as_deref().unwrap_or(""))))
                    .with_assignment(to_wire(&m.assigned))
                    .with_target_assignment(to_wire(group.target.get(&m.member_id).unwrap_or(&Assignment::new())))
                    // 0: a classic member of a group under migration; 1: a consumer-protocol one.
                    .with_member_type(if m.classic.is_some() { 0 } else { 1 })
            })
            .collect();
        groups.push(
            described
                .with_group_state(text(group.state_name()))
                .with_group_epoch(group.group_epoch)
                .with_assignment_epoch(group.assignment_epoch)
                .with_assignor_name(text(group.assignor()))
                .with_members(members)
                .with_authorized_operations(i32::MIN),
        );
    }
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
