//! The classic group protocol's APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as the
//! coordinator serves them. Each request is served by the kind of its group
//! (`GroupCoordinator::kind`): a classic group by its state machine (`state`), a consumer group
//! with classic members in it by the consumer protocol (`consumer_api`, during a migration).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::consumer_api::classic_sync_to_consumer_group;
use super::state::{Group, JoinAction};
use super::{GroupCoordinator, GroupKind, JoinOutcome, JoinRequest, SyncOutcome};
use crate::env::{Env, Rng};
use crate::error::{CoreError, CoreResult};
use crate::topics::MetadataSnapshot;

pub(super) enum ClassicCommand {
    /// JoinGroup; the topics name what a member of a consumer group owns.
    Join(String, JoinRequest, Arc<MetadataSnapshot>, oneshot::Sender<CoreResult<JoinOutcome>>),
    Sync {
        group_id: String,
        member_id: String,
        instance: Option<String>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
        reply: oneshot::Sender<CoreResult<SyncOutcome>>,
    },
    Heartbeat {
        group_id: String,
        member_id: String,
        instance: Option<String>,
        generation_id: i32,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    Leave {
        group_id: String,
        members: Vec<(String, Option<String>)>,
        reply: oneshot::Sender<CoreResult<Vec<CoreResult<()>>>>,
    },
}

impl ClassicCommand {
    pub(super) fn group_id(&self) -> &str {
        match self {
            ClassicCommand::Join(group_id, ..)
            | ClassicCommand::Sync { group_id, .. }
            | ClassicCommand::Heartbeat { group_id, .. }
            | ClassicCommand::Leave { group_id, .. } => group_id,
        }
    }

    pub(super) fn refuse(self, error: CoreError) {
        match self {
            ClassicCommand::Join(_, _, _, reply) => drop(reply.send(Err(error))),
            ClassicCommand::Sync { reply, .. } => drop(reply.send(Err(error))),
            ClassicCommand::Heartbeat { reply, .. } => drop(reply.send(Err(error))),
            ClassicCommand::Leave { reply, .. } => drop(reply.send(Err(error))),
        }
    }
}

impl<E: Env> GroupCoordinator<E> {
    pub(super) async fn handle_classic(&mut self, command: ClassicCommand, now: Instant) {
        let kind = self.kind(command.group_id());
        match command {
            ClassicCommand::Join(group_id, request, topics, reply) => {
                tracing::debug!(group = %group_id, member = %request.member_id, "join");
                if let Err(e) = self.validate_join(&group_id, &request) {
                    let _ = reply.send(Err(e));
                    return;
                }
                match kind {
                    Some(GroupKind::Consumer) => {
                        let _ = reply.send(self.classic_join_to_consumer_group(&group_id, request, &topics, now));
                        // A classic member that took the last consumer-protocol member's place.
                        self.maybe_downgrade(&group_id, false, now);
                    }
                    Some(GroupKind::Classic) | None => self.classic_join(group_id, request, now, reply),
                    // "Group ... is not a classic group", as Apache answers.
                    Some(GroupKind::Share) => drop(reply.send(Err(CoreError::GroupIdNotFound))),
                }
            }
            ClassicCommand::Sync { group_id, member_id, instance, generation_id, assignments, reply } => match kind {
                Some(GroupKind::Consumer) => {
                    let group = self.consumer_groups.get_mut(&group_id).expect("a consumer group");
                    let _ = reply.send(classic_sync_to_consumer_group(group, &member_id, instance, generation_id, now));
                }
                Some(GroupKind::Classic) | None => {
                    let sync = (member_id, instance, generation_id, assignments);
                    self.classic_sync(group_id, sync, now, reply).await;
                }
                Some(GroupKind::Share) => drop(reply.send(Err(CoreError::GroupIdNotFound))),
            },
            ClassicCommand::Heartbeat { group_id, member_id, instance, generation_id, reply } => {
                let result = match kind {
                    Some(GroupKind::Consumer) => {
                        let group = self.consumer_groups.get_mut(&group_id).expect("a consumer group");
                        group.classic_heartbeat(&member_id, instance.as_deref(), generation_id, now)
                    }
                    Some(GroupKind::Classic) => {
                        let group = self.groups.get_mut(&group_id).expect("a classic group");
                        group.heartbeat(&member_id, instance.as_deref(), generation_id, now)
                    }
                    None => Err(CoreError::UnknownMemberId),
                    Some(GroupKind::Share) => Err(CoreError::GroupIdNotFound),
                };
                let _ = reply.send(result);
            }
            ClassicCommand::Leave { group_id, members, reply } => match kind {
                Some(GroupKind::Consumer) => {
                    let group = self.consumer_groups.get_mut(&group_id).expect("a consumer group");
                    let results =
                        members.iter().map(|(id, instance)| group.classic_leave(id, instance.as_deref())).collect();
                    let _ = reply.send(Ok(results));
                    self.maybe_downgrade(&group_id, true, now);
                }
                Some(GroupKind::Classic) => {
                    let group = self.groups.get_mut(&group_id).expect("a classic group");
                    let mut replies = Vec::new();
                    let results = members
                        .iter()
                        .map(|(id, instance)| group.leave(id, instance.as_deref(), now, &mut replies))
                        .collect();
                    group.check_invariants();
                    let _ = reply.send(Ok(results));
                    self.deliver(replies.into_iter().map(|r| (group_id.clone(), r)).collect());
                }
                None => drop(reply.send(Err(CoreError::UnknownMemberId))),
                Some(GroupKind::Share) => drop(reply.send(Err(CoreError::GroupIdNotFound))),
            },
        }
    }

    /// A JoinGroup to a classic group (made if new): answered at once, or parked until the
    /// rebalance it joins ends.
    fn classic_join(
        &mut self,
        group_id: String,
        request: JoinRequest,
        now: Instant,
        reply: oneshot::Sender<CoreResult<JoinOutcome>>,
    ) {
        // An empty consumer group gives way to the classic group.
        self.consumer_groups.remove(&group_id);
        if !request.member_id.is_empty() && !self.groups.contains_key(&group_id) {
            let _ = reply.send(Err(CoreError::UnknownMemberId));
            return;
        }
        let unique = self.env.rng().next_u64();
        let mut replies = Vec::new();
        let group = self.group_mut(&group_id);
        let action = group.join(request, now, unique, &mut replies);
        group.check_invariants();
        match action {
            JoinAction::Done(result) => drop(reply.send(result)),
            JoinAction::Parked { member_id } => {
                // A join parked twice (a client retry) answers the older one as replaced.
                if let Some(old) = self.parked_joins.insert((group_id.clone(), member_id), reply) {
                    let _ = old.send(Err(CoreError::UnknownMemberId));
                }
            }
        }
        self.deliver(replies.into_iter().map(|r| (group_id.clone(), r)).collect());
    }

    /// A SyncGroup to a classic group: the leader's assignments are taken, and every member is
    /// answered once the rebalance's end is durable.
    async fn classic_sync(
        &mut self,
        group_id: String,
        (member_id, instance, generation_id, assignments): (String, Option<String>, i32, Vec<(String, Bytes)>),
        now: Instant,
        reply: oneshot::Sender<CoreResult<SyncOutcome>>,
    ) {
        let Some(group) = self.groups.get_mut(&group_id) else {
            let _ = reply.send(Err(CoreError::UnknownMemberId));
            return;
        };
        let mut replies = Vec::new();
        let answer = group.sync(&member_id, instance.as_deref(), generation_id, assignments, now, &mut replies);
        group.check_invariants();
        // The rebalance's end is durable before any member hears of its assignment.
        self.persist_memberships().await;
        match answer {
            Some(result) => drop(reply.send(result)),
            None => {
                self.parked_syncs.insert((group_id.clone(), member_id), reply);
            }
        }
        self.deliver(replies.into_iter().map(|r| (group_id.clone(), r)).collect());
    }

    pub(super) fn validate_join(&self, group_id: &str, req: &JoinRequest) -> CoreResult<()> {
        if group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        let c = &self.config;
        if req.session_timeout_ms < c.group_min_session_timeout_ms
            || req.session_timeout_ms > c.group_max_session_timeout_ms
        {
            return Err(CoreError::InvalidSessionTimeout);
        }
        if let Some(g) = self.groups.get(group_id)
            && req.member_id.is_empty()
            && g.members.len() >= c.group_max_size
            && self.consumer_group(group_id).is_none()
        {
            return Err(CoreError::GroupMaxSizeReached);
        }
        Ok(())
    }

    pub(super) fn group_mut(&mut self, group_id: &str) -> &mut Group {
        let delay = self.config.group_initial_rebalance_delay_ms;
        self.groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id.to_string(), delay))
    }
}
