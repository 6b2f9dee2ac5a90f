//! The admin APIs of groups as the coordinator serves them: DescribeGroups, ListGroups and
//! DeleteGroups, over every kind of group it holds.

use tokio::sync::oneshot;

use super::state::GroupState;
use super::{GroupCoordinator, GroupDescription, GroupKind, GroupListing, MemberDescription};
use crate::env::Env;
use crate::error::{CoreError, CoreResult};
use bytes::Bytes;

pub(super) enum AdminCommand {
    Describe(Vec<String>, oneshot::Sender<Vec<GroupDescription>>),
    List(oneshot::Sender<CoreResult<Vec<GroupListing>>>),
    Delete(Vec<String>, oneshot::Sender<Vec<(String, CoreResult<()>)>>),
}

impl<E: Env> GroupCoordinator<E> {
    /// Each named group is taken over first if this broker should own it.
    pub(super) async fn handle_admin(&mut self, command: AdminCommand) {
        match command {
            AdminCommand::Describe(group_ids, reply) => {
                for id in &group_ids {
                    // A group this broker cannot take over is described as having no members.
                    let _ = self.acquire(id).await;
                }
                let _ = reply.send(group_ids.iter().map(|id| self.describe(id)).collect());
            }
            AdminCommand::List(reply) => {
                // A group on its way here from another coordinator is listed by neither.
                if let Err(e) = self.take_over_listed().await {
                    let _ = reply.send(Err(match e {
                        CoreError::NotCoordinator => CoreError::CoordinatorLoadInProgress,
                        e => e,
                    }));
                    return;
                }
                let consumer = |id: &String| self.consumer_groups.get(id).filter(|c| !c.is_empty());
                let mut listing: Vec<GroupListing> = self
                    .groups
                    .values()
                    .filter(|g| consumer(&g.group_id).is_none())
                    .map(|g| GroupListing {
                        group_id: g.group_id.clone(),
                        protocol_type: g.protocol_type.clone().unwrap_or_default(),
                        state: g.state.name(),
                        group_type: "classic",
                    })
                    .collect();
                listing.extend(
                    self.consumer_groups
                        .values()
                        .filter(|c| !c.is_empty() || !self.groups.contains_key(&c.group_id))
                        .map(|c| GroupListing {
                            group_id: c.group_id.clone(),
                            protocol_type: "consumer".into(),
                            state: c.state_name(),
                            group_type: "consumer",
                        }),
                );
                listing.extend(self.share_groups.values().map(|g| GroupListing {
                    group_id: g.group_id.clone(),
                    protocol_type: "share".into(),
                    state: g.state_name(),
                    group_type: "share",
                }));
                listing.sort_by(|a, b| a.group_id.cmp(&b.group_id));
                let _ = reply.send(Ok(listing));
            }
            AdminCommand::Delete(group_ids, reply) => {
                let mut results = Vec::new();
                for id in group_ids {
                    let result = match self.acquire(&id).await {
                        Ok(()) => self.delete(&id).await,
                        Err(e) => Err(e),
                    };
                    results.push((id, result));
                }
                let _ = reply.send(results);
            }
        }
    }

    fn describe(&self, group_id: &str) -> GroupDescription {
        let Some(g) = self.groups.get(group_id).filter(|_| self.kind(group_id) == Some(GroupKind::Classic)) else {
            return GroupDescription {
                group_id: group_id.to_string(),
                state: None,
                other_kind: self.kind(group_id).is_some() || self.consumer_groups.contains_key(group_id),
                protocol_type: String::new(),
                protocol_name: String::new(),
                members: Vec::new(),
            };
        };
        let protocol_name = g.protocol_name.clone().unwrap_or_default();
        let stable = g.state == GroupState::Stable;
        let members = g
            .members
            .values()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m
                    .protocols
                    .iter()
                    .find(|(n, _)| *n == protocol_name)
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default(),
                assignment: if stable { m.assignment.clone() } else { Bytes::new() },
            })
            .collect();
        GroupDescription {
            group_id: group_id.to_string(),
            state: Some(g.state),
            other_kind: false,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable { protocol_name } else { String::new() },
            members,
        }
    }

    async fn delete(&mut self, group_id: &str) -> CoreResult<()> {
        if let Some(share) = self.share_groups.get(group_id) {
            if !share.is_empty() {
                return Err(CoreError::NonEmptyGroup);
            }
            self.offsets.delete_group(group_id).await?;
            self.share_groups.remove(group_id);
            return Ok(());
        }
        let consumer = self.consumer_groups.get(group_id);
        if consumer.is_some_and(|c| !c.is_empty()) {
            return Err(CoreError::NonEmptyGroup);
        }
        match self.groups.get(group_id) {
            None if consumer.is_none() => return Err(CoreError::GroupIdNotFound),
            Some(g) if !g.is_empty() => return Err(CoreError::NonEmptyGroup),
            _ => {}
        }
        self.offsets.delete_group(group_id).await?;
        self.groups.remove(group_id);
        self.consumer_groups.remove(group_id);
        Ok(())
    }
}
