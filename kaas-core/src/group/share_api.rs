//! The share group APIs (KIP-932: ShareGroupHeartbeat, ShareGroupDescribe) as the coordinator
//! serves them, over the membership state of `share`, and KIP-1289's check of a member before
//! its acknowledgements are staged in a transaction. A group id belongs to one kind of group:
//! a share group's requests to a classic or consumer group, and theirs to a share group, are
//! answered GROUP_ID_NOT_FOUND, as Apache answers them.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::consumer_api::topic_metadata;
use super::share::{self, ShareGroup, ShareHeartbeat, ShareHeartbeatAnswer};
use super::{GroupCoordinator, GroupKind};
use crate::env::Env;
use crate::error::{CoreError, CoreResult};
use crate::topics::MetadataSnapshot;

pub(super) enum ShareCommand {
    /// ShareGroupHeartbeat.
    Heartbeat {
        group_id: String,
        heartbeat: ShareHeartbeat,
        topics: Arc<MetadataSnapshot>,
        reply: oneshot::Sender<CoreResult<ShareHeartbeatAnswer>>,
    },
    /// ShareGroupDescribe of one group.
    Describe(String, oneshot::Sender<CoreResult<ShareGroup>>),
    /// Whether a member is the group's at that epoch (KIP-1289's staging).
    CheckMember {
        group_id: String,
        member_id: String,
        member_epoch: Option<i32>,
        reply: oneshot::Sender<CoreResult<()>>,
    },
}

impl ShareCommand {
    pub(super) fn group_id(&self) -> &str {
        match self {
            ShareCommand::Heartbeat { group_id, .. }
            | ShareCommand::Describe(group_id, _)
            | ShareCommand::CheckMember { group_id, .. } => group_id,
        }
    }

    pub(super) fn refuse(self, error: CoreError) {
        match self {
            ShareCommand::Heartbeat { reply, .. } => drop(reply.send(Err(error))),
            ShareCommand::Describe(_, reply) => drop(reply.send(Err(error))),
            ShareCommand::CheckMember { reply, .. } => drop(reply.send(Err(error))),
        }
    }
}

impl<E: Env> GroupCoordinator<E> {
    pub(super) async fn handle_share(&mut self, command: ShareCommand, now: Instant) {
        let kind = self.kind(command.group_id());
        match command {
            ShareCommand::Heartbeat { group_id, heartbeat, topics, reply } => {
                let answer = match kind {
                    Some(GroupKind::Classic | GroupKind::Consumer) => Err(CoreError::GroupIdNotFound),
                    // Only a join makes a group.
                    None if heartbeat.member_epoch != 0 => Err(CoreError::GroupIdNotFound),
                    Some(GroupKind::Share) | None => self.share_heartbeat(&group_id, heartbeat, &topics, now).await,
                };
                let _ = reply.send(answer);
            }
            ShareCommand::Describe(group_id, reply) => {
                let described = match kind {
                    Some(GroupKind::Share) => Ok(self.share_groups[&group_id].clone()),
                    Some(GroupKind::Classic | GroupKind::Consumer) | None => Err(CoreError::GroupIdNotFound),
                };
                let _ = reply.send(described);
            }
            ShareCommand::CheckMember { group_id, member_id, member_epoch, reply } => {
                let checked = match kind {
                    Some(GroupKind::Share) => self.share_groups[&group_id].check_member(&member_id, member_epoch),
                    Some(GroupKind::Classic | GroupKind::Consumer) | None => Err(CoreError::GroupIdNotFound),
                };
                let _ = reply.send(checked);
            }
        }
    }

    async fn share_heartbeat(
        &mut self,
        group_id: &str,
        heartbeat: ShareHeartbeat,
        topics: &MetadataSnapshot,
        now: Instant,
    ) -> CoreResult<ShareHeartbeatAnswer> {
        let settings = self.share_settings();
        let topic = |name: &str| topic_metadata(topics, name);
        let group =
            self.share_groups.entry(group_id.to_string()).or_insert_with(|| ShareGroup::new(group_id.to_string()));
        let answer = group.heartbeat(heartbeat, &topic, settings, now);
        let epoch = group.group_epoch;
        // The group epoch outlives the coordinator, so that members fenced here stay fenced.
        if let Err(e) = self.offsets.set_share_epoch(group_id, Some(epoch)).await {
            tracing::warn!(group = group_id, error = %e, "cannot persist the share group's epoch");
            return Err(e);
        }
        self.verify_lease(group_id).await?;
        answer
    }

    pub(super) fn share_settings(&self) -> share::Settings {
        share::Settings {
            session_timeout_ms: self.config.group_share_session_timeout_ms,
            heartbeat_interval_ms: self.config.group_share_heartbeat_interval_ms,
            max_size: self.config.group_share_max_size,
        }
    }

    /// Share group members whose session ran out leave.
    pub(super) fn tick_share_groups(&mut self, now: Instant) {
        for group in self.share_groups.values_mut() {
            group.tick(now);
        }
    }
}
