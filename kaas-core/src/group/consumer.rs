//! One consumer group of the consumer protocol (KIP-848, ConsumerGroupHeartbeat) as a pure
//! state machine: time and the topics' metadata are passed in, nothing is parked (every
//! heartbeat is answered at once), and the actor in `mod.rs` owns the channels.
//!
//! The group epoch moves whenever what the assignment depends on changes (a member joins,
//! leaves or changes its subscription; a subscribed topic's partitions change); the assignor
//! (`assignor`) then computes the target assignment at that epoch. Each member converges on
//! its target by heartbeats, never owning a partition another member still owns:
//!
//! ```text
//!                  target moved, something to revoke          the member owns only what it keeps
//!   Stable ─────────────────────────────────────────▶ UnrevokedPartitions ─────────────────┐
//!     ▲  │ target moved, nothing to revoke                                                   │
//!     │  └───────────────────────────────┐                                                   ▼
//!     │        every target partition    ▼     some target partitions still owned by others
//!     └─────────────────────────── UnreleasedPartitions ◀──────────────────── (epoch = target epoch)
//! ```
//! A member moves to the target's epoch only once it has revoked what it loses, so that a
//! partition is owned by one member at a time. What a new coordinator needs to carry the group
//! on (epochs, members, what each owns and revokes, the target) is its `ConsumerGroupMetadata`,
//! which the actor writes to the volume before it answers a heartbeat that changed it (as
//! Apache's coordinator writes its records before answering): a coordinator that restarts or
//! moves restores the group from it, and its members go on at their epochs.
//!
//! During an online migration (`migration`) members that speak the classic protocol live in
//! the same group. They converge by the same rules; what differs is how they hear of it: a
//! JoinGroup is their heartbeat with what they own, its generation is their member epoch, and
//! SyncGroup hands them what they own at that epoch. A Heartbeat answers REBALANCE_IN_PROGRESS
//! when they should join again to move on.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use tokio::time::{Duration, Instant};

use super::assignor::{self, Assignment, Subscriber, TopicId, TopicMetadata};
use crate::error::{CoreError, CoreResult};
use crate::hex;

/// The member epoch of a leave, and of a static member's temporary leave.
pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    /// KIP-848's SubscribedTopicRegex (RE2 syntax, the whole name), as the member gave it.
    pub subscribed_topic_regex: Option<String>,
    /// What the member subscribes to: its names and the topics its regex matches now.
    pub subscription: BTreeSet<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    /// What the member owns at its epoch.
    pub assigned: Assignment,
    /// What it was told to give up and has not confirmed yet.
    pub pending_revocation: Assignment,
    session_deadline: Instant,
    /// While it has partitions to revoke: when it is fenced if it has not.
    revocation_deadline: Option<Instant>,
    /// The assignment changed since the member was last told it.
    assignment_unsent: bool,
    /// Set for a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat).
    pub classic: Option<ClassicMember>,
    /// Restored by a new coordinator and not heard from since.
    restored: bool,
}

/// What a member that speaks the classic protocol keeps (Apache's ClassicMemberMetadata): its
/// own session timeout, and its protocols for a downgrade back to a classic group.
#[derive(Debug, Clone)]
pub struct ClassicMember {
    pub session_timeout_ms: i32,
    /// (protocol name, subscription), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// It was told to join again: it is removed if it has not by then (its rebalance timeout).
    rejoin_deadline: Option<Instant>,
}

impl ClassicMember {
    pub fn new(session_timeout_ms: i32, protocols: Vec<(String, Bytes)>) -> ClassicMember {
        ClassicMember { session_timeout_ms, protocols, rejoin_deadline: None }
    }
}

/// A JoinGroup to a consumer group, decoded: the member's subscription and what it owns.
#[derive(Debug, Clone)]
pub struct ClassicJoin {
    /// Named by the coordinator if the member came without one (`new_member`).
    pub member_id: String,
    pub new_member: bool,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<(String, Bytes)>,
    pub subscribed_topic_names: BTreeSet<String>,
    pub owned: Assignment,
}

/// A heartbeat as the coordinator takes it (the wire's nulls as None: "unchanged").
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    /// None: unchanged; empty: none any more.
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// What the member owns now, when it says.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    /// Given when it changed since the member was last told, or when the member joined.
    pub assignment: Option<Assignment>,
}

/// A SubscribedTopicRegex as Apache matches it: RE2 syntax, against the whole topic name; one
/// that does not compile is INVALID_REGULAR_EXPRESSION.
fn topic_regex(r: &str) -> CoreResult<regex::Regex> {
    regex::Regex::new(&format!("^(?:{r})$")).map_err(|e| CoreError::InvalidRegularExpression(e.to_string()))
}

/// The settings the coordinator runs groups with (`group.consumer.*`).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub session_timeout_ms: i32,
    pub max_size: usize,
}

#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    /// The epoch of `target`.
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    pub target: BTreeMap<String, Assignment>,
    /// The subscribed topics as last seen: a change moves the group epoch.
    pub subscribed_topics: BTreeMap<String, TopicMetadata>,
}

impl ConsumerMember {
    /// A member that has just joined: epoch 0, nothing owned.
    fn fresh(member_id: String, rebalance_timeout_ms: i32, now: Instant) -> ConsumerMember {
        ConsumerMember {
            member_id,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topic_names: BTreeSet::new(),
            subscribed_topic_regex: None,
            subscription: BTreeSet::new(),
            server_assignor: None,
            rebalance_timeout_ms: rebalance_timeout_ms.max(1),
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            session_deadline: now,
            revocation_deadline: None,
            assignment_unsent: true,
            classic: None,
            restored: false,
        }
    }

    fn rejoin_deadline(&self) -> Option<Instant> {
        self.classic.as_ref().and_then(|c| c.rejoin_deadline)
    }
}

fn partitions_of(a: &Assignment) -> BTreeSet<(TopicId, i32)> {
    a.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p))).collect()
}

fn from_partitions(set: &BTreeSet<(TopicId, i32)>) -> Assignment {
    let mut a = Assignment::new();
    for (t, p) in set {
        a.entry(*t).or_default().insert(*p);
    }
    a
}

impl ConsumerGroup {
    pub fn new(group_id: String) -> ConsumerGroup {
        ConsumerGroup {
            group_id,
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            subscribed_topics: BTreeMap::new(),
        }
    }

    /// A classic group's members, as a consumer group (the online upgrade): each keeps its id
    /// and what it owns, at the classic generation as its member epoch, and that is the target
    /// until the next epoch. `members` pairs each member as it last joined with what it owns.
    /// Refused if two members own one partition.
    pub fn adopt(
        group_id: String,
        generation_id: i32,
        members: Vec<(ClassicJoin, Assignment)>,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        now: Instant,
    ) -> Result<ConsumerGroup, String> {
        let mut group = ConsumerGroup::new(group_id);
        group.group_epoch = generation_id;
        group.assignment_epoch = generation_id;
        let mut owned = BTreeSet::new();
        for (join, assigned) in members {
            if let Some(p) = partitions_of(&assigned).into_iter().find(|p| !owned.insert(*p)) {
                return Err(format!("partition {} of topic {:?} is assigned to two members", p.1, p.0));
            }
            let mut member = ConsumerMember::fresh(join.member_id.clone(), join.rebalance_timeout_ms, now);
            member.instance_id = join.instance_id;
            member.rack_id = join.rack_id;
            member.client_id = join.client_id;
            member.client_host = join.client_host;
            member.subscribed_topic_names = join.subscribed_topic_names;
            // A classic member subscribes by names alone.
            member.subscription = member.subscribed_topic_names.clone();
            member.member_epoch = generation_id;
            member.previous_member_epoch = generation_id;
            member.session_deadline = now + Duration::from_millis(join.session_timeout_ms.max(1) as u64);
            member.assignment_unsent = false;
            member.classic = Some(ClassicMember::new(join.session_timeout_ms, join.protocols));
            group.target.insert(join.member_id.clone(), assigned.clone());
            member.assigned = assigned;
            group.members.insert(join.member_id, member);
        }
        group.refresh_topics(topic);
        group.check_invariants();
        Ok(group)
    }

    /// Apache's names: Empty, Assigning, Reconciling, Stable.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.member_epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// The assignor the members ask for most (the first of `ASSIGNORS` if none asks).
    pub fn assignor(&self) -> &'static str {
        let mut votes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(name) = m.server_assignor.as_deref().and_then(|a| assignor::ASSIGNORS.iter().find(|n| **n == a))
            {
                *votes.entry(name).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)))
            .map_or(assignor::ASSIGNORS[0], |(n, _)| n)
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| [Some(m.session_deadline), m.revocation_deadline, m.rejoin_deadline()])
            .flatten()
            .min()
    }

    /// A heartbeat: joins, leaves, or moves the member on towards its target. `topic` looks a
    /// topic up by name, `all_topics` lists them (for subscriptions by regex); `new_member_id` names a member that joins without naming itself (v0).
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        all_topics: &dyn Fn() -> Vec<String>,
        settings: Settings,
        now: Instant,
        new_member_id: impl FnOnce() -> String,
    ) -> CoreResult<HeartbeatAnswer> {
        if let Some(r) = hb.subscribed_topic_regex.as_deref().filter(|r| !r.is_empty()) {
            topic_regex(r)?;
        }
        let answer = self.heartbeat_unchecked(hb, topic, all_topics, settings, now, new_member_id);
        self.check_invariants();
        answer
    }

    fn heartbeat_unchecked(
        &mut self,
        hb: Heartbeat,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        all_topics: &dyn Fn() -> Vec<String>,
        settings: Settings,
        now: Instant,
        new_member_id: impl FnOnce() -> String,
    ) -> CoreResult<HeartbeatAnswer> {
        if hb.member_epoch == LEAVE_EPOCH || hb.member_epoch == STATIC_LEAVE_EPOCH {
            if !self.members.contains_key(&hb.member_id) {
                return Err(CoreError::UnknownMemberId);
            }
            self.remove_member(&hb.member_id);
            return Ok(HeartbeatAnswer { member_id: hb.member_id, member_epoch: hb.member_epoch, assignment: None });
        }
        let session = Duration::from_millis(settings.session_timeout_ms.max(1) as u64);
        let joining = hb.member_epoch == 0;
        let member_id = if joining {
            self.join(&hb, settings, now, new_member_id)?
        } else {
            let Some(member) = self.members.get(&hb.member_id).filter(|m| m.classic.is_none()) else {
                return Err(CoreError::UnknownMemberId);
            };
            // The answer to its last heartbeat may have been lost: the epoch before is taken
            // if what it owns is still within what it has.
            let owned_within =
                hb.owned.as_ref().is_none_or(|o| partitions_of(o).is_subset(&partitions_of(&member.assigned)));
            let lost_answer = hb.member_epoch == member.previous_member_epoch && owned_within;
            if hb.member_epoch != member.member_epoch && !lost_answer {
                return Err(CoreError::FencedMemberEpoch);
            }
            if member.restored {
                crate::reach("groups: consumer member went on at its epoch after a take-over");
            }
            hb.member_id.clone()
        };
        let member = self.members.get_mut(&member_id).expect("joined or known");
        member.session_deadline = now + session;
        member.restored = false;
        let mut changed = false;
        if let Some(names) = &hb.subscribed_topic_names {
            member.subscribed_topic_names = names.iter().cloned().collect();
        }
        if let Some(r) = &hb.subscribed_topic_regex {
            member.subscribed_topic_regex = (!r.is_empty()).then(|| r.clone());
        }
        if hb.server_assignor.is_some() && hb.server_assignor != member.server_assignor {
            member.server_assignor = hb.server_assignor.clone();
            changed = true;
        }
        if hb.rebalance_timeout_ms > 0 {
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if hb.rack_id.is_some() {
            member.rack_id = hb.rack_id.clone();
        }
        changed |= joining;
        changed |= self.resolve_subscriptions(all_topics);
        changed |= self.refresh_topics(topic);
        if changed {
            // One bump for whatever this heartbeat changed, as Apache's coordinator makes it.
            self.group_epoch += 1;
        }
        if self.assignment_epoch < self.group_epoch {
            self.compute_target();
        }
        self.reconcile(&member_id, hb.owned.as_ref(), now);
        let member = self.members.get_mut(&member_id).expect("still a member");
        let assignment = (joining || member.assignment_unsent || hb.owned.is_some()).then(|| member.assigned.clone());
        member.assignment_unsent = false;
        Ok(HeartbeatAnswer { member_id, member_epoch: member.member_epoch, assignment })
    }

    /// A member joins (epoch 0): a new one, a static member taking its place back, or one that
    /// lost its state joining again under its id.
    fn join(
        &mut self,
        hb: &Heartbeat,
        settings: Settings,
        now: Instant,
        new_member_id: impl FnOnce() -> String,
    ) -> CoreResult<String> {
        if hb.subscribed_topic_names.is_none() && hb.subscribed_topic_regex.as_deref().is_none_or(str::is_empty) {
            return Err(CoreError::InvalidRequest(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request".into(),
            ));
        }
        if let Some(name) = hb.server_assignor.as_deref().filter(|a| !assignor::ASSIGNORS.contains(a)) {
            return Err(CoreError::UnsupportedAssignor(name.to_string()));
        }
        let member_id = if hb.member_id.is_empty() { new_member_id() } else { hb.member_id.clone() };
        let carried = self.take_static_place(hb.instance_id.as_deref(), &member_id);
        let rejoining = self.members.remove(&member_id).is_some();
        if carried.is_none() && !rejoining && self.members.len() >= settings.max_size {
            return Err(CoreError::GroupMaxSizeReached);
        }
        let mut member = ConsumerMember::fresh(member_id.clone(), hb.rebalance_timeout_ms, now);
        member.instance_id = hb.instance_id.clone();
        member.rack_id = hb.rack_id.clone();
        member.client_id = hb.client_id.clone();
        member.client_host = hb.client_host.clone();
        member.server_assignor = hb.server_assignor.clone();
        if let Some(old) = carried {
            self.carry_on(old, &mut member);
        }
        self.members.insert(member_id.clone(), member);
        Ok(member_id)
    }

    /// A static member back under a new id takes the old one's place: the old member leaves
    /// the group without a new epoch, and is handed back to be carried on (`carry_on`).
    fn take_static_place(&mut self, instance_id: Option<&str>, member_id: &str) -> Option<ConsumerMember> {
        let instance = instance_id?;
        let old = self
            .members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance) && m.member_id != member_id)?
            .member_id
            .clone();
        self.members.remove(&old)
    }

    /// The new member takes the old one's epoch, partitions and target.
    fn carry_on(&mut self, old: ConsumerMember, member: &mut ConsumerMember) {
        member.member_epoch = old.member_epoch;
        member.previous_member_epoch = old.previous_member_epoch;
        member.assigned = old.assigned;
        member.state = old.state;
        member.pending_revocation = old.pending_revocation;
        member.revocation_deadline = old.revocation_deadline;
        if let Some(target) = self.target.remove(&old.member_id) {
            self.target.insert(member.member_id.clone(), target);
        }
        if member.subscribed_topic_names.is_empty() && member.subscribed_topic_regex.is_none() {
            member.subscribed_topic_names = old.subscribed_topic_names;
            member.subscribed_topic_regex = old.subscribed_topic_regex;
        }
    }

    /// A JoinGroup from a member that speaks the classic protocol: it joins, or it rejoins
    /// with what it owns now (its revocations confirmed by their absence). Answers the member
    /// epoch, which is the member's generation.
    pub fn classic_join(
        &mut self,
        join: ClassicJoin,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        settings: Settings,
        now: Instant,
    ) -> CoreResult<i32> {
        let answer = self.classic_join_unchecked(join, topic, settings, now);
        self.check_invariants();
        answer
    }

    fn classic_join_unchecked(
        &mut self,
        join: ClassicJoin,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        settings: Settings,
        now: Instant,
    ) -> CoreResult<i32> {
        let member_id = join.member_id.clone();
        if self.members.get(&member_id).is_some_and(|m| m.classic.is_none()) {
            // The id of a member that speaks the consumer protocol.
            return Err(CoreError::UnknownMemberId);
        }
        let other_holder = |g: &Self| {
            join.instance_id.as_ref().is_some_and(|i| {
                g.members.values().any(|m| m.instance_id.as_ref() == Some(i) && m.member_id != member_id)
            })
        };
        if !join.new_member && other_holder(self) {
            return Err(CoreError::FencedInstanceId);
        }
        let carried = self.take_static_place(join.instance_id.as_deref(), &member_id);
        let known = self.members.contains_key(&member_id);
        if carried.is_none() && !known && self.members.len() >= settings.max_size {
            return Err(CoreError::GroupMaxSizeReached);
        }
        let mut member = match self.members.remove(&member_id) {
            Some(member) => member,
            None => ConsumerMember::fresh(member_id.clone(), join.rebalance_timeout_ms, now),
        };
        let before = match &carried {
            Some(old) => Some(old.subscribed_topic_names.clone()),
            None => known.then(|| member.subscribed_topic_names.clone()),
        };
        if let Some(old) = carried {
            self.carry_on(old, &mut member);
        }
        let mut changed = before.as_ref() != Some(&join.subscribed_topic_names);
        member.subscribed_topic_names = join.subscribed_topic_names;
        member.subscription = member.subscribed_topic_names.clone();
        member.instance_id = join.instance_id;
        if join.rack_id.is_some() {
            member.rack_id = join.rack_id;
        }
        member.client_id = join.client_id;
        member.client_host = join.client_host;
        member.server_assignor = None;
        member.rebalance_timeout_ms = join.rebalance_timeout_ms.max(1);
        member.session_deadline = now + Duration::from_millis(join.session_timeout_ms.max(1) as u64);
        member.classic = Some(ClassicMember::new(join.session_timeout_ms, join.protocols));
        self.members.insert(member_id.clone(), member);
        changed |= self.refresh_topics(topic);
        if changed {
            self.group_epoch += 1;
        }
        if self.assignment_epoch < self.group_epoch {
            self.compute_target();
        }
        self.reconcile(&member_id, Some(&join.owned), now);
        let member = self.members.get_mut(&member_id).expect("joined");
        // SyncGroup tells it; nothing else does.
        member.assignment_unsent = false;
        Ok(member.member_epoch)
    }

    /// The classic member a SyncGroup, Heartbeat or LeaveGroup names: by its instance id if it
    /// has one (another id holding it is fenced), or by its member id.
    fn classic_member(&self, member_id: &str, instance_id: Option<&str>) -> CoreResult<&ConsumerMember> {
        let member = match instance_id {
            Some(instance) => {
                let m = self
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(instance))
                    .ok_or(CoreError::UnknownMemberId)?;
                if !member_id.is_empty() && m.member_id != member_id {
                    return Err(CoreError::FencedInstanceId);
                }
                m
            }
            None => self.members.get(member_id).ok_or(CoreError::UnknownMemberId)?,
        };
        if member.classic.is_none() {
            return Err(CoreError::UnknownMemberId);
        }
        Ok(member)
    }

    /// SyncGroup from a classic member: what it owns at its epoch, unless a new epoch waits for
    /// it to join again (REBALANCE_IN_PROGRESS).
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now: Instant,
    ) -> CoreResult<Assignment> {
        let member = self.classic_member(member_id, instance_id)?;
        if generation_id != member.member_epoch {
            return Err(CoreError::IllegalGeneration);
        }
        if self.group_epoch > member.member_epoch && member.state != MemberState::UnrevokedPartitions {
            // The revoking member joins again once it has revoked; anyone else now.
            let id = member.member_id.clone();
            self.ask_to_rejoin(&id, now);
            return Err(CoreError::RebalanceInProgress);
        }
        let id = member.member_id.clone();
        self.touch_classic(&id, now);
        Ok(self.members[&id].assigned.clone())
    }

    /// Heartbeat from a classic member: REBALANCE_IN_PROGRESS when it should join again to
    /// move on (a new group epoch, partitions to revoke, or partitions it waits for now free).
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now: Instant,
    ) -> CoreResult<()> {
        let member = self.classic_member(member_id, instance_id)?;
        if generation_id != member.member_epoch {
            return Err(CoreError::IllegalGeneration);
        }
        let id = member.member_id.clone();
        let waiting_on_free = member.state == MemberState::UnreleasedPartitions && {
            let target = partitions_of(self.target.get(&id).unwrap_or(&Assignment::new()));
            let others = self.owned_by_others(&id);
            target.difference(&partitions_of(&member.assigned)).any(|p| !others.contains(p))
        };
        let rejoin = member.member_epoch < self.group_epoch
            || member.state == MemberState::UnrevokedPartitions
            || waiting_on_free;
        self.touch_classic(&id, now);
        if rejoin {
            self.ask_to_rejoin(&id, now);
            return Err(CoreError::RebalanceInProgress);
        }
        Ok(())
    }

    /// LeaveGroup from a classic member.
    pub fn classic_leave(&mut self, member_id: &str, instance_id: Option<&str>) -> CoreResult<()> {
        let id = self.classic_member(member_id, instance_id)?.member_id.clone();
        self.remove_member(&id);
        self.check_invariants();
        Ok(())
    }

    fn touch_classic(&mut self, member_id: &str, now: Instant) {
        let member = self.members.get_mut(member_id).expect("a member");
        let session = member.classic.as_ref().map_or(1, |c| c.session_timeout_ms.max(1));
        member.session_deadline = now + Duration::from_millis(session as u64);
    }

    fn ask_to_rejoin(&mut self, member_id: &str, now: Instant) {
        let member = self.members.get_mut(member_id).expect("a member");
        let timeout = Duration::from_millis(member.rebalance_timeout_ms.max(1) as u64);
        if let Some(classic) = member.classic.as_mut() {
            classic.rejoin_deadline.get_or_insert(now + timeout);
        }
    }

    /// Whether every member speaks the classic protocol (and there is one): the group can go
    /// back to being a classic group.
    pub fn all_classic(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    fn remove_member(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.group_epoch += 1;
        }
    }

    /// Whether a subscribed topic appeared, went, or has other partitions (the group epoch
    /// then moves).
    fn refresh_topics(&mut self, topic: &dyn Fn(&str) -> Option<TopicMetadata>) -> bool {
        let subscribed: BTreeSet<&String> = self.members.values().flat_map(|m| &m.subscription).collect();
        let now: BTreeMap<String, TopicMetadata> =
            subscribed.into_iter().filter_map(|name| topic(name).map(|t| (name.clone(), t))).collect();
        let changed = now != self.subscribed_topics;
        self.subscribed_topics = now;
        changed
    }

    fn compute_target(&mut self) {
        let subscribers: Vec<Subscriber<'_>> = self
            .members
            .values()
            .map(|m| Subscriber {
                member_id: &m.member_id,
                topics: &m.subscription,
                current: self.target.get(&m.member_id),
            })
            .collect();
        self.target = assignor::assign(self.assignor(), &subscribers, &self.subscribed_topics);
        self.assignment_epoch = self.group_epoch;
    }

    /// Each member's subscription from its names and its regex (matched against every topic,
    /// as Apache resolves it): whether one changed (the group epoch then moves). Topics are
    /// listed only when a member has a regex.
    fn resolve_subscriptions(&mut self, all_topics: &dyn Fn() -> Vec<String>) -> bool {
        let names = match self.members.values().any(|m| m.subscribed_topic_regex.is_some()) {
            true => all_topics(),
            false => Vec::new(),
        };
        let mut changed = false;
        for member in self.members.values_mut() {
            let mut subscription = member.subscribed_topic_names.clone();
            if let Some(re) = member.subscribed_topic_regex.as_deref().and_then(|r| topic_regex(r).ok()) {
                subscription.extend(names.iter().filter(|n| re.is_match(n)).cloned());
            }
            changed |= member.subscription != subscription;
            member.subscription = subscription;
        }
        changed
    }

    /// Everything members other than `member_id` own or have yet to give up.
    fn owned_by_others(&self, member_id: &str) -> BTreeSet<(TopicId, i32)> {
        self.members
            .values()
            .filter(|m| m.member_id != member_id)
            .flat_map(|m| partitions_of(&m.assigned).into_iter().chain(partitions_of(&m.pending_revocation)))
            .collect()
    }

    /// Moves one member towards its target as far as it may go now.
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>, now: Instant) {
        let target = partitions_of(self.target.get(member_id).unwrap_or(&Assignment::new()));
        let others = self.owned_by_others(member_id);
        let assignment_epoch = self.assignment_epoch;
        let member = self.members.get_mut(member_id).expect("a member");
        if member.state == MemberState::UnrevokedPartitions {
            let still_owned =
                owned.is_none_or(|o| !partitions_of(o).is_disjoint(&partitions_of(&member.pending_revocation)));
            if still_owned {
                return;
            }
            member.pending_revocation.clear();
            member.revocation_deadline = None;
            member.state = MemberState::Stable;
        }
        let assigned = partitions_of(&member.assigned);
        if member.member_epoch < assignment_epoch {
            let revoke: BTreeSet<_> = assigned.difference(&target).copied().collect();
            if !revoke.is_empty() {
                member.assigned = from_partitions(&assigned.intersection(&target).copied().collect());
                member.pending_revocation = from_partitions(&revoke);
                member.state = MemberState::UnrevokedPartitions;
                member.revocation_deadline = Some(now + Duration::from_millis(member.rebalance_timeout_ms as u64));
                member.assignment_unsent = true;
                return;
            }
            member.previous_member_epoch = member.member_epoch;
            member.member_epoch = assignment_epoch;
        }
        // At the target's epoch: take what is free of it.
        let wanted: BTreeSet<_> = target.difference(&assigned).copied().collect();
        let free: BTreeSet<_> = match crate::mutant!(ConsumerAssignsUnreleased) {
            true => wanted.clone(),
            false => wanted.difference(&others).copied().collect(),
        };
        if !free.is_empty() {
            let mut next = assigned.clone();
            next.extend(free.iter().copied());
            member.assigned = from_partitions(&next);
            member.assignment_unsent = true;
        }
        member.state = if wanted.len() > free.len() { MemberState::UnreleasedPartitions } else { MemberState::Stable };
    }

    /// Session timeouts and revocation deadlines: the member is removed (its partitions go to
    /// others at the next epoch).
    pub fn tick(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                [Some(m.session_deadline), m.revocation_deadline, m.rejoin_deadline()]
                    .iter()
                    .flatten()
                    .any(|d| *d <= now)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in expired {
            tracing::info!(group = %self.group_id, member = %member_id, "consumer group member expired");
            self.remove_member(&member_id);
        }
        self.check_invariants();
    }

    /// OffsetCommit from a member of this group: its id and epoch must be current. A commit
    /// with no member (an admin's) is taken only while the group is empty.
    pub fn check_commit(&self, member_id: &str, member_epoch: i32) -> CoreResult<()> {
        if member_id.is_empty() && member_epoch < 0 {
            return if self.members.is_empty() { Ok(()) } else { Err(CoreError::UnknownMemberId) };
        }
        let member = self.members.get(member_id).ok_or(CoreError::UnknownMemberId)?;
        if member.classic.is_some() && member_epoch != member.member_epoch {
            // A classic member's generation is its member epoch.
            return Err(CoreError::IllegalGeneration);
        }
        match member_epoch.cmp(&member.member_epoch) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Greater => Err(CoreError::FencedMemberEpoch),
            std::cmp::Ordering::Less => Err(CoreError::StaleMemberEpoch),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// What every transition leaves true.
    pub fn check_invariants(&self) {
        if let Some(broken) = self.broken_invariant() {
            panic!("consumer group {}: {broken}", self.group_id);
        }
    }

    /// The first invariant the group breaks, if any: asserted after every transition, and the
    /// reason a group restored from the volume is refused rather than run.
    fn broken_invariant(&self) -> Option<&'static str> {
        let mut seen = BTreeSet::new();
        for m in self.members.values() {
            if m.member_epoch > self.group_epoch {
                return Some("a member is never ahead of its group");
            }
            if self.assignment_epoch > self.group_epoch {
                return Some("the target is never ahead of the group");
            }
            if (m.state == MemberState::UnrevokedPartitions) == m.pending_revocation.is_empty() {
                return Some("a member revoking has something to revoke");
            }
            for p in partitions_of(&m.assigned).into_iter().chain(partitions_of(&m.pending_revocation)) {
                if !seen.insert(p) {
                    return Some("a partition is owned by one member at a time");
                }
            }
            if !m.subscription.is_superset(&m.subscribed_topic_names) {
                return Some("a member subscribes to the topics it names");
            }
            if m.subscribed_topic_regex.is_none() && m.subscription != m.subscribed_topic_names {
                return Some("without a regex, a member subscribes to the topics it names alone");
            }
        }
        if !self.target.keys().all(|id| self.members.contains_key(id)) {
            return Some("targets are members'");
        }
        None
    }

    /// The group as a new coordinator needs it (`ConsumerGroupMetadata`).
    pub fn metadata(&self) -> ConsumerGroupMetadata {
        ConsumerGroupMetadata {
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            members: self.members.values().map(MemberMetadata::of).collect(),
            target: self.target.iter().map(|(id, a)| (id.clone(), PartitionsMetadata::of(a))).collect(),
            subscribed_topics: self
                .subscribed_topics
                .values()
                .map(|t| SubscribedTopic {
                    topic_id: hex::encode(&t.topic_id),
                    name: t.name.clone(),
                    partitions: t.partitions,
                })
                .collect(),
        }
    }

    /// The group a coordinator wrote (`metadata`), carried on by this one at `now`: every
    /// member's session starts again (`session`, the broker's consumer session timeout), and a
    /// member still revoking has its rebalance timeout again to finish. Each member is told its
    /// assignment at its next heartbeat, whatever it was told before. Refused (with why) if the
    /// record does not decode or breaks an invariant: the group is then formed anew.
    pub fn restore(
        group_id: String,
        metadata: &ConsumerGroupMetadata,
        session: Duration,
        now: Instant,
    ) -> Result<ConsumerGroup, String> {
        let mut group = ConsumerGroup::new(group_id);
        group.group_epoch = metadata.group_epoch;
        group.assignment_epoch = metadata.assignment_epoch;
        for m in &metadata.members {
            let member = m.restore(now + session, now)?;
            if group.members.insert(member.member_id.clone(), member).is_some() {
                return Err(format!("member {} twice", m.member_id));
            }
        }
        for (member_id, partitions) in &metadata.target {
            group.target.insert(member_id.clone(), PartitionsMetadata::assignment(partitions)?);
        }
        for t in &metadata.subscribed_topics {
            let topic_id = topic_id_of(&t.topic_id)?;
            let topic = TopicMetadata { topic_id, name: t.name.clone(), partitions: t.partitions };
            group.subscribed_topics.insert(t.name.clone(), topic);
        }
        match group.broken_invariant() {
            Some(broken) => Err(broken.to_string()),
            None => Ok(group),
        }
    }
}

/// A consumer group as its coordinator writes it to the volume (Apache keeps the same in its
/// ConsumerGroupMetadata, member and target assignment records). Session deadlines are not in
/// it: they are the coordinator's clock, and start again at a take-over.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConsumerGroupMetadata {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<MemberMetadata>,
    pub target: Vec<(String, Vec<PartitionsMetadata>)>,
    pub subscribed_topics: Vec<SubscribedTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberMetadata {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    pub subscribed_topic_regex: Option<String>,
    pub subscription: BTreeSet<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned: Vec<PartitionsMetadata>,
    pub pending_revocation: Vec<PartitionsMetadata>,
    /// A member speaking the classic protocol: its session timeout and protocols (hex).
    pub classic: Option<(i32, Vec<(String, String)>)>,
}

/// One topic's partitions of an assignment (topic id in hex).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionsMetadata {
    pub topic_id: String,
    pub partitions: BTreeSet<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubscribedTopic {
    pub topic_id: String,
    pub name: String,
    pub partitions: i32,
}

fn topic_id_of(hex_id: &str) -> Result<TopicId, String> {
    hex::decode(hex_id).and_then(|b| b.try_into().ok()).ok_or_else(|| format!("bad topic id {hex_id:?}"))
}

impl PartitionsMetadata {
    fn of(a: &Assignment) -> Vec<PartitionsMetadata> {
        a.iter().map(|(t, ps)| PartitionsMetadata { topic_id: hex::encode(t), partitions: ps.clone() }).collect()
    }

    fn assignment(topics: &[PartitionsMetadata]) -> Result<Assignment, String> {
        topics.iter().map(|t| Ok((topic_id_of(&t.topic_id)?, t.partitions.clone()))).collect()
    }
}

impl MemberMetadata {
    fn of(m: &ConsumerMember) -> MemberMetadata {
        MemberMetadata {
            member_id: m.member_id.clone(),
            instance_id: m.instance_id.clone(),
            rack_id: m.rack_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            subscribed_topic_names: m.subscribed_topic_names.clone(),
            subscribed_topic_regex: m.subscribed_topic_regex.clone(),
            subscription: m.subscription.clone(),
            server_assignor: m.server_assignor.clone(),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            member_epoch: m.member_epoch,
            previous_member_epoch: m.previous_member_epoch,
            state: m.state,
            assigned: PartitionsMetadata::of(&m.assigned),
            pending_revocation: PartitionsMetadata::of(&m.pending_revocation),
            classic: m.classic.as_ref().map(|c| {
                let protocols = c.protocols.iter().map(|(name, meta)| (name.clone(), hex::encode(meta))).collect();
                (c.session_timeout_ms, protocols)
            }),
        }
    }

    fn restore(&self, session_deadline: Instant, now: Instant) -> Result<ConsumerMember, String> {
        let classic = match &self.classic {
            None => None,
            Some((session_timeout_ms, protocols)) => {
                let protocols = protocols
                    .iter()
                    .map(|(name, meta)| hex::decode(meta).map(|b| (name.clone(), Bytes::from(b))))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("member {}: bad protocol bytes", self.member_id))?;
                Some(ClassicMember::new(*session_timeout_ms, protocols))
            }
        };
        let pending_revocation = PartitionsMetadata::assignment(&self.pending_revocation)?;
        let revocation_deadline = (!pending_revocation.is_empty())
            .then(|| now + Duration::from_millis(self.rebalance_timeout_ms.max(1) as u64));
        Ok(ConsumerMember {
            member_id: self.member_id.clone(),
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_topic_names.clone(),
            subscribed_topic_regex: self.subscribed_topic_regex.clone(),
            subscription: self.subscription.clone(),
            server_assignor: self.server_assignor.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms.max(1),
            member_epoch: self.member_epoch,
            previous_member_epoch: self.previous_member_epoch,
            state: self.state,
            assigned: PartitionsMetadata::assignment(&self.assigned)?,
            pending_revocation,
            session_deadline: match &classic {
                // A classic member's own session timeout.
                Some(c) => now + Duration::from_millis(c.session_timeout_ms.max(1) as u64),
                None => session_deadline,
            },
            revocation_deadline,
            assignment_unsent: true,
            classic,
            restored: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: Settings = Settings { session_timeout_ms: 45_000, max_size: 100 };

    fn topic(name: &str) -> Option<TopicMetadata> {
        (name == "t").then(|| TopicMetadata { topic_id: [7; 16], name: "t".into(), partitions: 4 })
    }

    fn start() -> Instant {
        Instant::now() // allow-nondeterminism: tests pass every later instant in
    }

    fn join(g: &mut ConsumerGroup, id: &str, now: Instant) -> HeartbeatAnswer {
        let hb = Heartbeat {
            member_id: id.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..Heartbeat::default()
        };
        g.heartbeat(hb, &topic, &Vec::new, SETTINGS, now, || unreachable!()).unwrap()
    }

    fn beat(
        g: &mut ConsumerGroup,
        id: &str,
        epoch: i32,
        owned: Option<Assignment>,
        now: Instant,
    ) -> CoreResult<HeartbeatAnswer> {
        let hb = Heartbeat { member_id: id.into(), member_epoch: epoch, owned, ..Heartbeat::default() };
        g.heartbeat(hb, &topic, &Vec::new, SETTINGS, now, || unreachable!())
    }

    fn count(a: &Option<Assignment>) -> usize {
        a.as_ref().map_or(0, |a| a.values().map(BTreeSet::len).sum())
    }

    #[test]
    fn a_second_member_gets_partitions_only_once_the_first_revoked_them() {
        let now = start();
        let mut g = ConsumerGroup::new("g".into());
        let a = join(&mut g, "a", now);
        assert_eq!((a.member_epoch, count(&a.assignment)), (1, 4), "joined: epoch 1, everything");
        assert_eq!(g.state_name(), "Stable");
        let b = join(&mut g, "b", now);
        assert_eq!((b.member_epoch, count(&b.assignment)), (2, 0), "at the new epoch, but a still owns it all");
        assert_eq!(g.state_name(), "Reconciling");
        let a2 = beat(&mut g, "a", 1, None, now).unwrap();
        assert_eq!((a2.member_epoch, count(&a2.assignment)), (1, 2), "a keeps two, revokes two, stays at 1");
        let still = beat(&mut g, "b", 2, None, now).unwrap();
        assert_eq!(count(&still.assignment), 0, "nothing is free yet");
        let a3 = beat(&mut g, "a", 1, a2.assignment.clone(), now).unwrap();
        assert_eq!(a3.member_epoch, 2, "revoked: a moves to the target's epoch");
        let b2 = beat(&mut g, "b", 2, Some(Assignment::new()), now).unwrap();
        assert_eq!(count(&b2.assignment), 2, "b takes the two a gave up");
        assert_eq!(g.state_name(), "Stable");
        assert_eq!(beat(&mut g, "b", 1, None, now), Err(CoreError::FencedMemberEpoch));
        assert_eq!(beat(&mut g, "zz", 3, None, now), Err(CoreError::UnknownMemberId));
        assert_eq!(g.check_commit("b", 2), Ok(()));
        assert_eq!(g.check_commit("b", 1), Err(CoreError::StaleMemberEpoch));
        assert_eq!(g.check_commit("b", 3), Err(CoreError::FencedMemberEpoch));
        assert_eq!(g.check_commit("", -1), Err(CoreError::UnknownMemberId), "not while it has members");
    }

    #[test]
    fn a_group_restored_from_its_metadata_goes_on_where_it_was() {
        let now = start();
        let mut g = ConsumerGroup::new("g".into());
        join(&mut g, "a", now);
        join(&mut g, "b", now);
        let a = beat(&mut g, "a", 1, None, now).unwrap();
        assert_eq!(count(&a.assignment), 2, "a is revoking two of its four");
        // Through the volume's encoding, as a new coordinator reads it.
        let json = serde_json::to_vec(&g.metadata()).unwrap();
        let meta: ConsumerGroupMetadata = serde_json::from_slice(&json).unwrap();
        assert_eq!(meta, g.metadata());
        let later = now + Duration::from_secs(100);
        let mut r = ConsumerGroup::restore("g".into(), &meta, Duration::from_secs(45), later).unwrap();
        assert_eq!((r.group_epoch, r.state_name()), (2, "Reconciling"));
        assert!(r.members["a"].restored);
        // Sessions start again at the take-over: nobody expired for the time the group was unowned.
        r.tick(later + Duration::from_secs(1));
        assert_eq!(r.members.len(), 2);
        // a is told its assignment again, confirms the revocation, and b takes what it gave up.
        let a2 = beat(&mut r, "a", 1, None, later).unwrap();
        assert_eq!(count(&a2.assignment), 2, "a restored member hears its assignment again");
        assert!(!r.members["a"].restored, "the first heartbeat it takes is the one that goes on");
        assert_eq!(beat(&mut r, "a", 1, a2.assignment.clone(), later).unwrap().member_epoch, 2);
        let b = beat(&mut r, "b", 2, Some(Assignment::new()), later).unwrap();
        assert_eq!(count(&b.assignment), 2);
        assert_eq!(r.state_name(), "Stable");
        // A record that breaks an invariant is refused, not run.
        let mut broken = meta.clone();
        broken.members[1].assigned = broken.members[0].assigned.clone();
        assert!(ConsumerGroup::restore("g".into(), &broken, Duration::from_secs(45), later).is_err());
        let mut bad_id = meta;
        bad_id.members[0].assigned[0].topic_id = "zz".into();
        assert!(ConsumerGroup::restore("g".into(), &bad_id, Duration::from_secs(45), later).is_err());
        // The revocation deadline starts again too: a, still revoking in the record, has 30 s.
        let mut again = ConsumerGroup::restore("g".into(), &g.metadata(), Duration::from_secs(45), later).unwrap();
        again.tick(later + Duration::from_secs(29));
        assert!(again.members.contains_key("a"));
        again.tick(later + Duration::from_secs(31));
        assert!(!again.members.contains_key("a"), "fenced for not revoking within its timeout");
    }

    #[test]
    fn a_silent_member_expires_and_a_slow_revoker_is_fenced() {
        let now = start();
        let mut g = ConsumerGroup::new("g".into());
        join(&mut g, "a", now);
        join(&mut g, "b", now);
        beat(&mut g, "a", 1, None, now).unwrap();
        // a never confirms its revocation: its rebalance timeout (30 s) removes it.
        g.tick(now + Duration::from_secs(31));
        assert!(!g.members.contains_key("a"), "fenced for not revoking");
        let b = beat(&mut g, "b", 2, Some(Assignment::new()), now + Duration::from_secs(31)).unwrap();
        assert_eq!(count(&b.assignment), 4, "b gets everything once a is gone");
        g.tick(now + Duration::from_secs(31 + 46));
        assert!(g.is_empty(), "b's session expired");
        assert_eq!(g.state_name(), "Empty");
    }

    #[test]
    fn a_leave_frees_the_partitions_and_a_lost_answer_is_forgiven() {
        let now = start();
        let mut g = ConsumerGroup::new("g".into());
        let a = join(&mut g, "a", now);
        assert_eq!(beat(&mut g, "a", a.member_epoch, None, now).unwrap().member_epoch, 1);
        join(&mut g, "b", now);
        let left = beat(&mut g, "b", LEAVE_EPOCH, None, now).unwrap();
        assert_eq!(left.member_epoch, LEAVE_EPOCH);
        let again = beat(&mut g, "a", 1, None, now).unwrap();
        assert_eq!((again.member_epoch, count(&again.assignment)), (3, 0), "moved on, nothing to change");
        // The answer at epoch 3 was lost: a heartbeat at the epoch before is still taken.
        assert_eq!(beat(&mut g, "a", 1, None, now).unwrap().member_epoch, 3);
    }

    #[test]
    fn a_member_subscribed_by_regex_is_given_the_topics_it_matches_as_they_come() {
        let now = start();
        let topics = |names: &'static [&'static str]| {
            move |name: &str| {
                names.iter().position(|n| *n == name).map(|i| TopicMetadata {
                    topic_id: [i as u8 + 1; 16],
                    name: name.to_string(),
                    partitions: 1,
                })
            }
        };
        let mut g = ConsumerGroup::new("g".into());
        let hb = |epoch: i32, regex: Option<&str>| Heartbeat {
            member_id: "m".into(),
            member_epoch: epoch,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_regex: regex.map(str::to_string),
            owned: (epoch == 0).then(Assignment::new),
            ..Heartbeat::default()
        };
        let bad = g.heartbeat(
            hb(0, Some("orders-(")),
            &topics(&["orders-1"]),
            &|| vec!["orders-1".into()],
            SETTINGS,
            now,
            || unreachable!(),
        );
        assert!(matches!(bad, Err(CoreError::InvalidRegularExpression(_))), "{bad:?}");
        let only_one = || vec!["orders-1".to_string(), "payments".to_string(), "orders-1x".to_string()];
        let joined = g
            .heartbeat(
                hb(0, Some("orders-[0-9]")),
                &topics(&["orders-1", "payments", "orders-1x"]),
                &only_one,
                SETTINGS,
                now,
                || unreachable!(),
            )
            .unwrap();
        // The whole name must match: orders-1x is not subscribed.
        assert_eq!(g.members["m"].subscription, BTreeSet::from(["orders-1".to_string()]));
        assert_eq!(joined.assignment.map(|a| a.len()), Some(1));
        let both = || vec!["orders-1".to_string(), "orders-2".to_string(), "payments".to_string()];
        let epoch = g.members["m"].member_epoch;
        let later = g
            .heartbeat(
                hb(epoch, None),
                &topics(&["orders-1", "orders-2", "payments"]),
                &both,
                SETTINGS,
                now,
                || unreachable!(),
            )
            .unwrap();
        // A topic created later that the regex matches joins the subscription.
        assert_eq!(g.members["m"].subscription.len(), 2);
        assert!(later.member_epoch > epoch, "the new topic moved the group epoch");
    }
}
