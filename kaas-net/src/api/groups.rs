//! The classic group protocol: JoinGroup (v0-v9), SyncGroup (v0-v5), Heartbeat (v0-v4),
//! LeaveGroup (v0-v5), DescribeGroups (v0-v6), ListGroups (v0-v5), DeleteGroups (v0-v2),
//! OffsetDelete (v0).
//! JoinGroup and SyncGroup park in the group coordinator until the rebalance moves on, so they
//! answer later and do not hold up the connection's other requests.

use kaas_core::CoreError;
use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kaas_core::group::JoinRequest;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;

use super::{encode, text};
use crate::connection::{Answer, Context};
use crate::error;

pub(super) fn client_id(header: &RequestHeader) -> String {
    header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default()
}

pub(super) fn host_of(peer: &str) -> String {
    match peer.rsplit_once(':') {
        Some((host, _)) => format!("/{}", host.trim_start_matches('[').trim_end_matches(']')),
        None => peer.to_string(),
    }
}

/// Whether the client may take part in the group (READ), as JoinGroup, SyncGroup, Heartbeat,
/// LeaveGroup and OffsetCommit require.
pub fn may_read_group<E: Env>(ctx: &Context<E>, group_id: &str) -> bool {
    ctx.authorized(Operation::Read, Resource::group(group_id))
}

pub fn join<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: JoinGroupRequest) -> Answer {
    if !may_read_group(ctx, &request.group_id.0) {
        let refused = JoinGroupResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code())
            .with_member_id(request.member_id);
        return Answer::Now(encode(ApiKey::JoinGroup, header, &refused));
    }
    let version = header.request_api_version;
    let groups = ctx.broker.groups.clone();
    let rebalance_timeout_ms = if version == 0 { request.session_timeout_ms } else { request.rebalance_timeout_ms };
    let join = JoinRequest {
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.map(|s| s.to_string()),
        client_id: client_id(header),
        client_host: host_of(&ctx.peer),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type: request.protocol_type.to_string(),
        protocols: request.protocols.into_iter().map(|p| (p.name.to_string(), p.metadata)).collect(),
        require_known_member_id: version >= 4,
    };
    let group_id = request.group_id.0.to_string();
    let requested_member = request.member_id;
    let topics = ctx.broker.topics.snapshot();
    let header = header.clone();
    Answer::Later(Box::pin(async move {
        let response = match groups.join(group_id, join, topics).await {
            Ok(outcome) => {
                let members = outcome
                    .members
                    .into_iter()
                    .map(|(member_id, instance, metadata)| {
                        JoinGroupResponseMember::default()
                            .with_member_id(text(&member_id))
                            .with_group_instance_id(instance.map(|i| text(&i)))
                            .with_metadata(metadata)
                    })
                    .collect();
                let response = JoinGroupResponse::default()
                    .with_generation_id(outcome.generation_id)
                    .with_protocol_name(Some(text(&outcome.protocol_name)))
                    .with_leader(text(&outcome.leader))
                    .with_member_id(text(&outcome.member_id))
                    .with_members(members);
                if version >= 7 { response.with_protocol_type(Some(text(&outcome.protocol_type))) } else { response }
            }
            Err(e) => {
                let member_id = match &e {
                    CoreError::MemberIdRequired(id) => text(id),
                    _ => requested_member,
                };
                let response = JoinGroupResponse::default()
                    .with_error_code(error::code(&e))
                    .with_generation_id(-1)
                    .with_member_id(member_id)
                    .with_leader(text(""));
                if version >= 7 {
                    response.with_protocol_name(None)
                } else {
                    response.with_protocol_name(Some(text("")))
                }
            }
        };
        encode(ApiKey::JoinGroup, &header, &response)
    }))
}

pub fn sync<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: SyncGroupRequest) -> Answer {
    if !may_read_group(ctx, &request.group_id.0) {
        let refused = SyncGroupResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
        return Answer::Now(encode(ApiKey::SyncGroup, header, &refused));
    }
    let version = header.request_api_version;
    let groups = ctx.broker.groups.clone();
    let header = header.clone();
    Answer::Later(Box::pin(async move {
        let assignments = request.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect();
        let result = groups
            .sync(
                request.group_id.0.to_string(),
                request.member_id.to_string(),
                request.group_instance_id.map(|s| s.to_string()),
                request.generation_id,
                assignments,
            )
            .await;
        let response = match result {
            Ok(outcome) => {
                let mismatch = request.protocol_type.as_ref().is_some_and(|t| t.as_str() != outcome.protocol_type)
                    || request.protocol_name.as_ref().is_some_and(|n| n.as_str() != outcome.protocol_name);
                if version >= 5 && mismatch {
                    SyncGroupResponse::default().with_error_code(ResponseError::InconsistentGroupProtocol.code())
                } else {
                    let response = SyncGroupResponse::default().with_assignment(outcome.assignment);
                    if version >= 5 {
                        response
                            .with_protocol_type(Some(text(&outcome.protocol_type)))
                            .with_protocol_name(Some(text(&outcome.protocol_name)))
                    } else {
                        response
                    }
                }
            }
            Err(e) => SyncGroupResponse::default().with_error_code(error::code(&e)),
        };
        encode(ApiKey::SyncGroup, &header, &response)
    }))
}

pub async fn heartbeat<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: HeartbeatRequest,
) -> HeartbeatResponse {
    if !may_read_group(ctx, &request.group_id.0) {
        return HeartbeatResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let result = ctx
        .broker
        .groups
        .heartbeat(
            request.group_id.0.to_string(),
            request.member_id.to_string(),
            request.group_instance_id.map(|s| s.to_string()),
            request.generation_id,
        )
        .await;
    HeartbeatResponse::default().with_error_code(error::code_of(&result))
}

pub async fn leave<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: LeaveGroupRequest) -> LeaveGroupResponse {
    if !may_read_group(ctx, &request.group_id.0) {
        return LeaveGroupResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let batched = header.request_api_version >= 3;
    let members: Vec<(String, Option<String>)> = if batched {
        request
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|s| s.to_string())))
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    match ctx.broker.groups.leave(request.group_id.0.to_string(), members.clone()).await {
        Err(e) => LeaveGroupResponse::default().with_error_code(error::code(&e)),
        Ok(results) if !batched => LeaveGroupResponse::default().with_error_code(error::code_of(&results[0])),
        Ok(results) => {
            let responses = members
                .into_iter()
                .zip(results)
                .map(|((member_id, instance), result)| {
                    MemberResponse::default()
                        .with_member_id(text(&member_id))
                        .with_group_instance_id(instance.map(|i| text(&i)))
                        .with_error_code(error::code_of(&result))
                })
                .collect();
            LeaveGroupResponse::default().with_members(responses)
        }
    }
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let version = header.request_api_version;
    // Groups the client may not DESCRIBE are answered GROUP_AUTHORIZATION_FAILED, unasked.
    let (allowed, refused): (Vec<GroupId>, Vec<GroupId>) =
        request.groups.iter().cloned().partition(|g| ctx.authorized(Operation::Describe, Resource::group(g)));
    let refused: Vec<DescribedGroup> = refused
        .into_iter()
        .map(|g| {
            DescribedGroup::default().with_group_id(g).with_error_code(ResponseError::GroupAuthorizationFailed.code())
        })
        .collect();
    let request = request.with_groups(allowed);
    let ids = request.groups.iter().map(|g| g.0.to_string()).collect();
    let groups: Vec<DescribedGroup> = match ctx.broker.groups.describe(ids).await {
        Ok(descriptions) => descriptions
            .into_iter()
            .map(|d| {
                let members = d
                    .members
                    .into_iter()
                    .map(|m| {
                        DescribedGroupMember::default()
                            .with_member_id(text(&m.member_id))
                            .with_group_instance_id(m.group_instance_id.map(|i| text(&i)))
                            .with_client_id(text(&m.client_id))
                            .with_client_host(text(&m.client_host))
                            .with_member_metadata(m.metadata)
                            .with_member_assignment(m.assignment)
                    })
                    .collect();
                let described = DescribedGroup::default()
                    .with_group_id(GroupId(text(&d.group_id)))
                    .with_group_state(text(d.state.map(|s| s.name()).unwrap_or("Dead")))
                    .with_protocol_type(text(&d.protocol_type))
                    .with_protocol_data(text(&d.protocol_name))
                    .with_members(members);
                // v6 (KIP-1043) says that a group that is not a classic group is not found.
                let message = match d.other_kind {
                    true => format!("Group {} is not a classic group.", d.group_id),
                    false => format!("Group {} not found.", d.group_id),
                };
                match d.state {
                    None if version >= 6 => described
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(text(&message))),
                    _ => described,
                }
            })
            .collect(),
        Err(e) => request
            .groups
            .into_iter()
            .map(|g| DescribedGroup::default().with_group_id(g).with_error_code(error::code(&e)))
            .collect(),
    };
    DescribeGroupsResponse::default().with_groups(groups.into_iter().chain(refused).collect())
}

pub async fn list<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: ListGroupsRequest) -> ListGroupsResponse {
    let version = header.request_api_version;
    let listing = match ctx.broker.groups.list().await {
        Ok(listing) => listing,
        Err(e) => return ListGroupsResponse::default().with_error_code(error::code(&e)),
    };
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = request.types_filter.iter().map(|s| s.to_lowercase()).collect();
    // DESCRIBE on the cluster lists every group; otherwise those the client may DESCRIBE.
    let all = ctx.authorized(Operation::Describe, Resource::cluster());
    let groups = listing
        .into_iter()
        .filter(|g| all || ctx.authorized(Operation::Describe, Resource::group(&g.group_id)))
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .map(|g| {
            let listed = ListedGroup::default()
                .with_group_id(GroupId(text(&g.group_id)))
                .with_protocol_type(text(&g.protocol_type));
            let listed = if version >= 4 { listed.with_group_state(text(g.state)) } else { listed };
            if version >= 5 { listed.with_group_type(text(g.group_type)) } else { listed }
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

pub async fn delete<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let (allowed, refused): (Vec<GroupId>, Vec<GroupId>) =
        request.groups_names.iter().cloned().partition(|g| ctx.authorized(Operation::Delete, Resource::group(g)));
    let refused: Vec<DeletableGroupResult> = refused
        .into_iter()
        .map(|g| {
            DeletableGroupResult::default()
                .with_group_id(g)
                .with_error_code(ResponseError::GroupAuthorizationFailed.code())
        })
        .collect();
    let request = request.with_groups_names(allowed);
    let ids = request.groups_names.iter().map(|g| g.0.to_string()).collect();
    let results: Vec<DeletableGroupResult> = match ctx.broker.groups.delete(ids).await {
        Ok(results) => results
            .into_iter()
            .map(|(id, r)| {
                // v3's error_message: the cause, where kaas has one to give.
                DeletableGroupResult::default()
                    .with_group_id(GroupId(text(&id)))
                    .with_error_code(error::code_of(&r))
                    .with_error_message(r.err().as_ref().and_then(error::message).map(|m| text(&m)))
            })
            .collect(),
        Err(e) => request
            .groups_names
            .into_iter()
            .map(|g| {
                DeletableGroupResult::default()
                    .with_group_id(g)
                    .with_error_code(error::code(&e))
                    .with_error_message(error::message(&e).map(|m| text(&m)))
            })
            .collect(),
    };
    DeleteGroupsResponse::default().with_results(results.into_iter().chain(refused).collect())
}

/// OffsetDelete (v0): partitions that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION
/// here; the coordinator checks the group (it must exist; while it has members, only a
/// consumer group's offsets of topics no member subscribes to go). A group-level error is the
/// whole answer, as in Apache.
pub async fn delete_offsets<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
    // DELETE on the group, then READ on each topic, as Apache checks.
    if !ctx.authorized(Operation::Delete, Resource::group(&request.group_id.0)) {
        return OffsetDeleteResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let readable = |t: &str| ctx.authorized(Operation::Read, Resource::topic(t));
    let wanted: Vec<(String, i32)> = request
        .topics
        .iter()
        .filter(|t| readable(&t.name.0))
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), p.partition_index)))
        .collect();
    let unknown = super::unknown_partitions(ctx, wanted.clone()).await;
    let known = wanted.into_iter().filter(|tp| !unknown.contains(tp)).collect();
    let results = match ctx.broker.groups.delete_offsets(request.group_id.0.to_string(), known).await {
        Ok(results) => results,
        Err(e) => return OffsetDeleteResponse::default().with_error_code(error::code(&e)),
    };
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let mut partitions: Vec<OffsetDeleteResponsePartition> = t
                .partitions
                .iter()
                .map(|p| {
                    let tp = (t.name.0.to_string(), p.partition_index);
                    let code = match results.iter().find(|(r, _)| *r == tp) {
                        _ if !readable(&tp.0) => ResponseError::TopicAuthorizationFailed.code(),
                        Some((_, result)) => error::code_of(result),
                        None => ResponseError::UnknownTopicOrPartition.code(),
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            // Apache lists the partitions it refused itself before the coordinator's answers.
            partitions.sort_by_key(|p| p.error_code != ResponseError::UnknownTopicOrPartition.code());
            OffsetDeleteResponseTopic::default().with_name(t.name.clone()).with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
