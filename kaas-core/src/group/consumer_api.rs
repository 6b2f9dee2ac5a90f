//! The consumer group protocol's APIs (KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe)
//! as the coordinator serves them, and the online migration of a live group between the
//! classic and the consumer protocol (`migration`): a classic group upgraded by a consumer
//! heartbeat, a consumer group whose members are all classic downgraded, and the classic
//! members of a consumer group served by it.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::assignor::TopicMetadata;
use super::consumer::{self, ClassicJoin, ConsumerGroup, Heartbeat, HeartbeatAnswer};
use super::{GroupCoordinator, GroupKind, JoinOutcome, JoinRequest, SyncOutcome, embedded, migration};
use crate::config::group as group_config;
use crate::env::{Env, Rng};
use crate::error::{CoreError, CoreResult};
use crate::topics::MetadataSnapshot;

pub(super) enum ConsumerCommand {
    /// ConsumerGroupHeartbeat (KIP-848).
    Heartbeat {
        group_id: String,
        heartbeat: Box<Heartbeat>,
        topics: Arc<MetadataSnapshot>,
        reply: oneshot::Sender<CoreResult<HeartbeatAnswer>>,
    },
    /// ConsumerGroupDescribe: the group as it is (None: no consumer group by that id).
    Describe(String, oneshot::Sender<CoreResult<Option<ConsumerGroup>>>),
}

impl ConsumerCommand {
    pub(super) fn group_id(&self) -> &str {
        match self {
            ConsumerCommand::Heartbeat { group_id, .. } | ConsumerCommand::Describe(group_id, _) => group_id,
        }
    }

    pub(super) fn refuse(self, error: CoreError) {
        match self {
            ConsumerCommand::Heartbeat { reply, .. } => drop(reply.send(Err(error))),
            ConsumerCommand::Describe(_, reply) => drop(reply.send(Err(error))),
        }
    }
}

/// A subscribed topic as the assignor sees it (only the topics members subscribe to are
/// looked up, not every topic there is).
pub(super) fn topic_metadata(topics: &MetadataSnapshot, name: &str) -> Option<TopicMetadata> {
    let t = topics.topics.get(name)?;
    Some(TopicMetadata { topic_id: t.meta.topic_id, name: name.to_string(), partitions: t.partitions.len() as i32 })
}

/// SyncGroup from a classic member of a consumer group: what it owns at its member epoch, in
/// the consumer protocol at its subscription's version.
pub(super) fn classic_sync_to_consumer_group(
    group: &mut ConsumerGroup,
    member_id: &str,
    instance: Option<String>,
    generation_id: i32,
    now: Instant,
) -> CoreResult<SyncOutcome> {
    let assigned = group.classic_sync(member_id, instance.as_deref(), generation_id, now)?;
    let member =
        group.members.values().find(|m| m.member_id == member_id || (instance.is_some() && m.instance_id == instance));
    let protocols = member.and_then(|m| m.classic.as_ref()).map(|c| c.protocols.clone()).unwrap_or_default();
    let version = migration::assignment_version(&protocols);
    Ok(SyncOutcome {
        protocol_type: "consumer".into(),
        protocol_name: protocols.first().map(|(n, _)| n.clone()).unwrap_or_default(),
        assignment: embedded::encode_assignment(&migration::by_name(&assigned, group), version),
    })
}

impl<E: Env> GroupCoordinator<E> {
    pub(super) async fn handle_consumer(&mut self, command: ConsumerCommand, now: Instant) {
        match command {
            // "Group ... is not a consumer group", as Apache answers.
            ConsumerCommand::Heartbeat { group_id, reply, .. } if self.kind(&group_id) == Some(GroupKind::Share) => {
                let _ = reply.send(Err(CoreError::GroupIdNotFound));
            }
            ConsumerCommand::Heartbeat { group_id, heartbeat, topics, reply } => {
                let answer = self.consumer_heartbeat(&group_id, *heartbeat, &topics, now).await;
                // Only a leave can leave every member classic.
                self.maybe_downgrade(&group_id, true, now);
                // Durable before it is answered, as Apache's records are: a new coordinator
                // never knows less than a member was told.
                let answer = self.persist_consumer_group(&group_id).await.and(answer);
                let _ = reply.send(answer);
            }
            ConsumerCommand::Describe(group_id, reply) => {
                let _ = reply.send(Ok(self.consumer_groups.get(&group_id).cloned()));
            }
        }
    }

    /// A ConsumerGroupHeartbeat: the group is made if it is new, and a live classic group is
    /// upgraded by a member joining it if the migration policy allows (`migration`).
    async fn consumer_heartbeat(
        &mut self,
        group_id: &str,
        heartbeat: Heartbeat,
        topics: &MetadataSnapshot,
        now: Instant,
    ) -> CoreResult<HeartbeatAnswer> {
        if group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        let topic = |name: &str| topic_metadata(topics, name);
        let mut upgraded = false;
        let group = match self.groups.get(group_id).filter(|g| !g.is_empty()) {
            Some(classic) => {
                if heartbeat.member_epoch != 0 {
                    // A member of a consumer group that is classic again (it was fenced, and the
                    // group downgraded; or the coordinator carried the classic group on after
                    // a restart): it joins again, as any member the group no longer knows.
                    // Apache answers GROUP_ID_NOT_FOUND, which the Java consumer takes as fatal.
                    return Err(CoreError::UnknownMemberId);
                }
                if !self.config.group_consumer_migration_policy.upgrades() {
                    return Err(CoreError::GroupIdNotFound);
                }
                if classic.members.len() > self.config.group_consumer_max_size {
                    return Err(CoreError::GroupIdNotFound);
                }
                upgraded = true;
                migration::upgrade(classic, &topic, now).map_err(|why| {
                    tracing::info!(group = group_id, why, "cannot upgrade the classic group");
                    CoreError::GroupIdNotFound
                })?
            }
            None if heartbeat.member_epoch != 0 && !self.consumer_groups.contains_key(group_id) => {
                // Only a join makes a group. Apache answers GROUP_ID_NOT_FOUND here; a member of
                // a group this coordinator does not know (deleted, or its state refused at a
                // take-over) is told to join again, as the Java consumer does after a fence.
                return Err(CoreError::UnknownMemberId);
            }
            // A join refused leaves no group behind.
            None => self.consumer_groups.remove(group_id).unwrap_or_else(|| ConsumerGroup::new(group_id.to_string())),
        };
        let mut group = group;
        // Drawn whether or not the member needs it, so that the draws do not depend on it.
        let fresh_id = self.new_member_id();
        let all_topics = || topics.topics.keys().cloned().collect();
        let settings = self.consumer_settings(topics, group_id);
        let answer = group.heartbeat(heartbeat, &topic, &all_topics, settings, now, || fresh_id);
        if upgraded {
            // The upgrade rode on the join: refused, the classic group stays as it was.
            let answer = answer?;
            self.upgraded(group_id).await;
            self.consumer_groups.insert(group_id.to_string(), group);
            return Ok(answer);
        }
        if answer.is_ok() || group.group_epoch > 0 {
            self.consumer_groups.insert(group_id.to_string(), group);
        }
        answer
    }

    /// The settings `group_id` runs with: its group configs (`consumer.session.timeout.ms`) over
    /// the broker's `group.consumer.*`.
    pub(super) fn consumer_settings(&self, topics: &MetadataSnapshot, group_id: &str) -> consumer::Settings {
        let own = topics.group_configs.get(group_id);
        consumer::Settings {
            session_timeout_ms: group_config::int_of(
                own,
                group_config::CONSUMER_SESSION_TIMEOUT_MS,
                self.config.group_consumer_session_timeout_ms,
            ),
            max_size: self.config.group_consumer_max_size,
        }
    }

    /// The classic group `group_id` became a consumer group: the joins and syncs it parked are
    /// told to join again (now as members of the consumer group), and its classic membership
    /// is no longer what a new coordinator should carry on.
    async fn upgraded(&mut self, group_id: &str) {
        tracing::info!(group = group_id, "classic group upgraded to a consumer group");
        self.groups.remove(group_id);
        let joins: Vec<_> = self.parked_joins.keys().filter(|(g, _)| g == group_id).cloned().collect();
        for key in joins {
            if let Some(tx) = self.parked_joins.remove(&key) {
                let _ = tx.send(Err(CoreError::RebalanceInProgress));
            }
        }
        let syncs: Vec<_> = self.parked_syncs.keys().filter(|(g, _)| g == group_id).cloned().collect();
        for key in syncs {
            if let Some(tx) = self.parked_syncs.remove(&key) {
                let _ = tx.send(Err(CoreError::RebalanceInProgress));
            }
        }
        if let Err(e) = self.offsets.set_membership(group_id, None).await {
            // A take-over before the next write may carry the classic group on; its members'
            // generations are then behind, and they join again.
            tracing::warn!(group = group_id, error = %e, "cannot clear the upgraded group's classic membership");
        }
    }

    /// A consumer group whose members all speak the classic protocol goes back to being a
    /// classic group, which rebalances, if the migration policy allows. Its generation is the
    /// group epoch, before the bump of the removal that left only classic members (`removed`),
    /// as Apache converts the group instead of bumping it: the classic members' generation is
    /// then current, and their heartbeats are told REBALANCE_IN_PROGRESS, not ILLEGAL_GENERATION.
    pub(super) fn maybe_downgrade(&mut self, group_id: &str, removed: bool, now: Instant) {
        let Some(group) = self.consumer_groups.get(group_id) else { return };
        if !group.all_classic()
            || !self.config.group_consumer_migration_policy.downgrades()
            || group.members.len() > self.config.group_max_size
        {
            return;
        }
        let mut replies = Vec::new();
        let generation = if removed { group.group_epoch - 1 } else { group.group_epoch };
        let delay = self.config.group_initial_rebalance_delay_ms;
        let classic = migration::downgrade(group, generation, delay, now, &mut replies);
        tracing::info!(
            group = group_id,
            generation = classic.generation_id,
            "consumer group downgraded to a classic group"
        );
        self.consumer_groups.remove(group_id);
        self.groups.insert(group_id.to_string(), classic);
        self.deliver(replies.into_iter().map(|r| (group_id.to_string(), r)).collect());
    }

    /// A JoinGroup to a consumer group: the member joins it with the subscription its
    /// consumer-protocol bytes carry and is answered at once, at its member epoch, with no
    /// leader (the coordinator assigns).
    pub(super) fn classic_join_to_consumer_group(
        &mut self,
        group_id: &str,
        req: JoinRequest,
        topics: &MetadataSnapshot,
        now: Instant,
    ) -> CoreResult<JoinOutcome> {
        if req.protocol_type != "consumer" || req.protocols.is_empty() {
            return Err(CoreError::InconsistentGroupProtocol);
        }
        let (protocol_name, metadata) = req.protocols[0].clone();
        let subscription = embedded::decode_subscription(&metadata).ok_or(CoreError::InconsistentGroupProtocol)?;
        let new_member = req.member_id.is_empty();
        let member_id = match new_member {
            true => self.new_member_id(),
            false => req.member_id.clone(),
        };
        if new_member && req.require_known_member_id && req.group_instance_id.is_none() {
            return Err(CoreError::MemberIdRequired(member_id));
        }
        let topic = |name: &str| topic_metadata(topics, name);
        let join = ClassicJoin {
            member_id: member_id.clone(),
            new_member,
            instance_id: req.group_instance_id,
            rack_id: subscription.rack_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocols: req.protocols,
            subscribed_topic_names: subscription.topics.into_iter().collect(),
            owned: migration::by_id(&subscription.owned, &topic),
        };
        let settings = self.consumer_settings(topics, group_id);
        let group = self.consumer_groups.get_mut(group_id).expect("a consumer group with members");
        let member_epoch = group.classic_join(join, &topic, settings, now)?;
        Ok(JoinOutcome {
            generation_id: member_epoch,
            protocol_type: "consumer".into(),
            protocol_name,
            leader: String::new(),
            member_id,
            members: Vec::new(),
        })
    }

    /// A member id for a new member of a consumer group.
    pub(super) fn new_member_id(&self) -> String {
        let unique = [self.env.rng().next_u64(), self.env.rng().next_u64()];
        crate::hex::encode(&[unique[0].to_be_bytes(), unique[1].to_be_bytes()].concat())
    }

    /// The consumer group of `group_id` with members, if there is one: commits are checked
    /// against it rather than against a classic group.
    pub(super) fn consumer_group(&self, group_id: &str) -> Option<&ConsumerGroup> {
        self.consumer_groups.get(group_id).filter(|c| !c.is_empty())
    }
}
