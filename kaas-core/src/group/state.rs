//! One classic consumer group (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) as a pure state
//! machine: time is passed in, answers to parked requests come back as `Reply` values, and the
//! actor in `mod.rs` owns the channels and the disk.
//!
//! ```text
//!              join                     all joined / rebalance timeout
//!   Empty ───────────▶ PreparingRebalance ─────────────────────────▶ CompletingRebalance
//!     ▲                 ▲    ▲     │ (no member left)                       │ leader's SyncGroup
//!     │                 │    │     ▼                                        ▼
//!     └─────────────────┼────┼── Empty ◀── last member leaves ──────────  Stable
//!                       │    └──── join / leave / session expiry ───────────┘
//!                       └───────── join / leave / session expiry (CompletingRebalance)
//! ```
//! Dead is not a state here: a deleted group is removed from the coordinator's map.

use std::collections::BTreeMap;

use bytes::Bytes;
use tokio::time::{Duration, Instant};

use crate::error::{CoreError, CoreResult};
use crate::hex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// The one place legal transitions are written down.
pub fn transition_valid(from: GroupState, to: GroupState) -> bool {
    use GroupState::*;
    matches!(
        (from, to),
        (Empty, PreparingRebalance)
            | (PreparingRebalance, CompletingRebalance)
            | (PreparingRebalance, Empty)
            | (CompletingRebalance, Stable)
            | (CompletingRebalance, PreparingRebalance)
            | (CompletingRebalance, Empty)
            | (Stable, PreparingRebalance)
            | (Stable, Empty)
    )
}

#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// (protocol name, subscription metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub awaiting_join: bool,
    pub awaiting_sync: bool,
    pub last_heard: Instant,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }
}

#[derive(Debug, Clone)]
pub struct JoinOutcome {
    pub generation_id: i32,
    pub protocol_type: String,
    pub protocol_name: String,
    pub leader: String,
    pub member_id: String,
    /// Every member's subscription, for the leader only: (member id, instance id, metadata).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

#[derive(Debug, Clone)]
pub struct SyncOutcome {
    pub protocol_type: String,
    pub protocol_name: String,
    pub assignment: Bytes,
}

/// An answer to a parked JoinGroup or SyncGroup.
#[derive(Debug)]
pub enum Reply {
    Join(String, CoreResult<JoinOutcome>),
    Sync(String, CoreResult<SyncOutcome>),
}

pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new dynamic member must first learn its id and come back with it.
    pub require_known_member_id: bool,
}

/// What a JoinGroup leads to.
pub enum JoinAction {
    /// Parked until the join phase completes; `Reply::Join` answers it.
    Parked {
        member_id: String,
    },
    Done(CoreResult<JoinOutcome>),
}

/// What a new coordinator needs to carry a stable group on, as Apache keeps it in its
/// GroupMetadata record: written at the end of every rebalance and when the group empties.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupMetadata {
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<MemberMetadata>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// (protocol name, subscription), hex.
    pub protocols: Vec<(String, String)>,
    /// Hex.
    pub assignment: String,
}

pub struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out by MEMBER_ID_REQUIRED and not yet used.
    pending_members: BTreeMap<String, Instant>,
    static_members: BTreeMap<String, String>,
    /// When the join phase ends even if some members have not rejoined.
    join_deadline: Option<Instant>,
    /// The initial-delay window of an empty group's first rebalance.
    initial_delay_until: Option<Instant>,
    initial_delay: Duration,
    member_counter: u64,
}

impl Group {
    pub fn new(group_id: String, initial_delay_ms: i64) -> Self {
        Group {
            group_id,
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            join_deadline: None,
            initial_delay_until: None,
            initial_delay: Duration::from_millis(initial_delay_ms.max(0) as u64),
            member_counter: 0,
        }
    }

    /// The group's durable metadata, in the states that end a rebalance (Stable, or Empty once
    /// it had a generation); `None` while a rebalance is under way.
    pub fn metadata(&self) -> Option<GroupMetadata> {
        match self.state {
            GroupState::Stable => {}
            GroupState::Empty if self.generation_id > 0 => {}
            _ => return None,
        }
        let members = self
            .members
            .values()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: m.protocols.iter().map(|(n, meta)| (n.clone(), hex::encode(meta))).collect(),
                assignment: hex::encode(&m.assignment),
            })
            .collect();
        Some(GroupMetadata {
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            members,
        })
    }

    /// A group carried on from its durable metadata by a new coordinator: its members keep
    /// their ids, generation and assignments, and have a session timeout from `now` to be
    /// heard from. `None` if the metadata does not describe a group that can exist.
    pub fn restore(group_id: String, initial_delay_ms: i64, metadata: &GroupMetadata, now: Instant) -> Option<Group> {
        let mut group = Group::new(group_id, initial_delay_ms);
        group.generation_id = metadata.generation_id;
        group.protocol_type = metadata.protocol_type.clone();
        group.protocol_name = metadata.protocol_name.clone();
        for m in &metadata.members {
            let protocols: Option<Vec<(String, Bytes)>> =
                m.protocols.iter().map(|(n, meta)| hex::decode(meta).map(|b| (n.clone(), Bytes::from(b)))).collect();
            let member = Member {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: protocols?,
                assignment: Bytes::from(hex::decode(&m.assignment)?),
                awaiting_join: false,
                awaiting_sync: false,
                last_heard: now,
            };
            if let Some(instance) = &member.group_instance_id {
                group.static_members.insert(instance.clone(), member.member_id.clone());
            }
            group.members.insert(member.member_id.clone(), member);
        }
        if !group.members.is_empty() {
            let leader = metadata.leader.clone().filter(|l| group.members.contains_key(l))?;
            group.leader = Some(leader);
            group.state = GroupState::Stable;
        }
        group.check_invariants();
        Some(group)
    }

    /// A consumer group whose members all speak the classic protocol again, as a classic group
    /// (the online downgrade): it starts Stable at the consumer group's epoch with the members
    /// and what they own, and rebalances at once, so that every member joins the classic way.
    pub fn downgraded(
        group_id: String,
        initial_delay_ms: i64,
        generation_id: i32,
        members: Vec<Member>,
        now: Instant,
        replies: &mut Vec<Reply>,
    ) -> Group {
        let mut group = Group::new(group_id, initial_delay_ms);
        group.generation_id = generation_id;
        group.protocol_type = Some("consumer".into());
        for member in members {
            if let Some(instance) = &member.group_instance_id {
                group.static_members.insert(instance.clone(), member.member_id.clone());
            }
            group.members.insert(member.member_id.clone(), member);
        }
        if !group.members.is_empty() {
            group.protocol_name = Some(group.select_protocol());
            group.leader = group.members.keys().next().cloned();
            group.state = GroupState::Stable;
            group.prepare_rebalance(now, replies);
        }
        group.check_invariants();
        group
    }

    fn transition(&mut self, to: GroupState) {
        assert!(
            transition_valid(self.state, to),
            "group {}: illegal transition {:?} -> {to:?}",
            self.group_id,
            self.state
        );
        self.state = to;
    }

    fn new_member_id(&mut self, client_id: &str, unique: u64) -> String {
        self.member_counter += 1;
        format!("{client_id}-{:016x}{:08x}", unique, self.member_counter)
    }

    /// The next instant at which `tick` has work to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let sessions = self
            .members
            .values()
            .filter(|m| !m.awaiting_join)
            .map(|m| m.last_heard + Duration::from_millis(m.session_timeout_ms.max(0) as u64));
        let pending = self.pending_members.values().copied();
        sessions.chain(pending).chain(self.join_deadline).chain(self.initial_delay_until).min()
    }

    fn check_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> CoreResult<()> {
        if protocol_type.is_empty() || protocols.is_empty() {
            return Err(CoreError::InconsistentGroupProtocol);
        }
        if self.members.is_empty() {
            return Ok(());
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return Err(CoreError::InconsistentGroupProtocol);
        }
        // Every member must share at least one protocol with the newcomer.
        let shared =
            protocols.iter().any(|(name, _)| self.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == name)));
        if shared { Ok(()) } else { Err(CoreError::InconsistentGroupProtocol) }
    }

    /// JoinGroup; every transition of the group ends with its invariants checked.
    pub fn join(&mut self, req: JoinRequest, now: Instant, unique: u64, replies: &mut Vec<Reply>) -> JoinAction {
        let action = self.join_unchecked(req, now, unique, replies);
        self.check_invariants();
        action
    }

    fn join_unchecked(&mut self, req: JoinRequest, now: Instant, unique: u64, replies: &mut Vec<Reply>) -> JoinAction {
        if let Err(e) = self.check_protocols(&req.protocol_type, &req.protocols) {
            return JoinAction::Done(Err(e));
        }
        if req.member_id.is_empty() {
            return self.join_new_member(req, now, unique, replies);
        }
        if let Some(instance) = &req.group_instance_id
            && let Some(current) = self.static_members.get(instance)
            && *current != req.member_id
        {
            return JoinAction::Done(Err(CoreError::FencedInstanceId));
        }
        if self.pending_members.remove(&req.member_id).is_some() {
            let member_id = req.member_id.clone();
            self.add_member(member_id.clone(), req, now, replies);
            return JoinAction::Parked { member_id };
        }
        let Some(member) = self.members.get_mut(&req.member_id) else {
            return JoinAction::Done(Err(CoreError::UnknownMemberId));
        };
        member.last_heard = now;
        let changed = member.protocols != req.protocols;
        member.protocols = req.protocols;
        member.session_timeout_ms = req.session_timeout_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        let member_id = req.member_id;
        match self.state {
            GroupState::PreparingRebalance => {
                self.members.get_mut(&member_id).expect("member").awaiting_join = true;
                self.maybe_complete_join(now, replies);
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                let is_leader = self.leader.as_deref() == Some(member_id.as_str());
                if changed || (self.state == GroupState::Stable && is_leader) {
                    self.members.get_mut(&member_id).expect("member").awaiting_join = true;
                    self.prepare_rebalance(now, replies);
                } else {
                    // A resent join of the current generation: answer it again.
                    return JoinAction::Done(Ok(self.join_outcome(&member_id)));
                }
            }
            GroupState::Empty => unreachable!("an empty group has no members"),
        }
        JoinAction::Parked { member_id }
    }

    fn join_new_member(&mut self, req: JoinRequest, now: Instant, unique: u64, replies: &mut Vec<Reply>) -> JoinAction {
        let member_id = self.new_member_id(&req.client_id, unique);
        if let Some(instance) = req.group_instance_id.clone() {
            if let Some(old) = self.static_members.get(&instance).cloned() {
                // A static member restarted: the new id takes the old one's place and
                // assignment, without a rebalance when nothing else changed.
                let mut member = self.members.remove(&old).expect("static member is a member");
                if member.awaiting_join {
                    replies.push(Reply::Join(old.clone(), Err(CoreError::FencedInstanceId)));
                }
                if member.awaiting_sync {
                    replies.push(Reply::Sync(old.clone(), Err(CoreError::FencedInstanceId)));
                }
                let changed = member.protocols != req.protocols;
                member.member_id = member_id.clone();
                member.protocols = req.protocols;
                member.last_heard = now;
                member.awaiting_sync = false;
                member.awaiting_join = false;
                member.session_timeout_ms = req.session_timeout_ms;
                member.rebalance_timeout_ms = req.rebalance_timeout_ms;
                self.members.insert(member_id.clone(), member);
                self.static_members.insert(instance, member_id.clone());
                if self.leader.as_deref() == Some(old.as_str()) {
                    self.leader = Some(member_id.clone());
                }
                if self.state == GroupState::Stable && !changed {
                    return JoinAction::Done(Ok(self.join_outcome(&member_id)));
                }
                self.members.get_mut(&member_id).expect("member").awaiting_join = true;
                if self.state == GroupState::PreparingRebalance {
                    self.maybe_complete_join(now, replies);
                } else {
                    self.prepare_rebalance(now, replies);
                }
                return JoinAction::Parked { member_id };
            }
            self.add_member(member_id.clone(), req, now, replies);
            return JoinAction::Parked { member_id };
        }
        if req.require_known_member_id {
            let session = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
            self.pending_members.insert(member_id.clone(), now + session);
            return JoinAction::Done(Err(CoreError::MemberIdRequired(member_id)));
        }
        self.add_member(member_id.clone(), req, now, replies);
        JoinAction::Parked { member_id }
    }

    fn add_member(&mut self, member_id: String, req: JoinRequest, now: Instant, replies: &mut Vec<Reply>) {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if let Some(instance) = &req.group_instance_id {
            self.static_members.insert(instance.clone(), member_id.clone());
        }
        self.members.insert(
            member_id.clone(),
            Member {
                member_id: member_id.clone(),
                group_instance_id: req.group_instance_id,
                client_id: req.client_id,
                client_host: req.client_host,
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: req.protocols,
                assignment: Bytes::new(),
                awaiting_join: true,
                awaiting_sync: false,
                last_heard: now,
            },
        );
        if self.state == GroupState::PreparingRebalance {
            // A newcomer during the initial delay extends it, up to the rebalance timeout.
            if let Some(until) = self.initial_delay_until {
                let extended = (now + self.initial_delay).min(self.join_deadline.unwrap_or(until));
                self.initial_delay_until = Some(extended.max(until));
            }
            self.maybe_complete_join(now, replies);
        } else {
            self.prepare_rebalance(now, replies);
        }
    }

    fn prepare_rebalance(&mut self, now: Instant, replies: &mut Vec<Reply>) {
        // Members waiting on SyncGroup of the generation being abandoned must rejoin.
        for member in self.members.values_mut() {
            if member.awaiting_sync {
                member.awaiting_sync = false;
                replies.push(Reply::Sync(member.member_id.clone(), Err(CoreError::RebalanceInProgress)));
            }
        }
        let rebalance_ms = self.members.values().map(|m| m.rebalance_timeout_ms.max(0) as u64).max().unwrap_or(0);
        self.join_deadline = Some(now + Duration::from_millis(rebalance_ms));
        self.initial_delay_until = if self.state == GroupState::Empty && !self.initial_delay.is_zero() {
            Some(now + self.initial_delay)
        } else {
            None
        };
        self.transition(GroupState::PreparingRebalance);
        self.maybe_complete_join(now, replies);
    }

    /// Ends the join phase once every member has rejoined (after the initial delay), or once
    /// the rebalance timeout passes, dropping the members that did not rejoin.
    fn maybe_complete_join(&mut self, now: Instant, replies: &mut Vec<Reply>) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let timed_out = self.join_deadline.is_some_and(|d| now >= d);
        let delaying = self.initial_delay_until.is_some_and(|d| now < d);
        let all_joined = self.members.values().all(|m| m.awaiting_join);
        if !(timed_out || (all_joined && !delaying && self.pending_members.is_empty())) {
            return;
        }
        if timed_out {
            let gone: Vec<String> =
                self.members.values().filter(|m| !m.awaiting_join).map(|m| m.member_id.clone()).collect();
            for member_id in gone {
                self.remove_member(&member_id);
            }
            self.pending_members.clear();
        }
        self.join_deadline = None;
        self.initial_delay_until = None;
        self.generation_id += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader = None;
            self.transition(GroupState::Empty);
            return;
        }
        self.protocol_name = Some(self.select_protocol());
        if self.leader.as_ref().is_none_or(|l| !self.members.contains_key(l)) {
            self.leader = self.members.keys().next().cloned();
        }
        self.transition(GroupState::CompletingRebalance);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for member_id in ids {
            let outcome = self.join_outcome(&member_id);
            let member = self.members.get_mut(&member_id).expect("member");
            member.awaiting_join = false;
            member.last_heard = now;
            replies.push(Reply::Join(member_id, Ok(outcome)));
        }
    }

    /// The protocol every member supports that most members prefer (Kafka's vote).
    fn select_protocol(&self) -> String {
        let first = self.members.values().next().expect("a member");
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == *n)))
            .collect();
        let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(p, _)| candidates.contains(&p)) {
                *votes.entry(name).or_default() += 1;
            }
        }
        let best = candidates.iter().max_by_key(|n| {
            (votes.get(*n).copied().unwrap_or(0), std::cmp::Reverse(candidates.iter().position(|c| c == *n)))
        });
        best.map(|s| (*s).clone()).unwrap_or_else(|| first.protocols[0].0.clone())
    }

    fn join_outcome(&self, member_id: &str) -> JoinOutcome {
        let protocol_name = self.protocol_name.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members
                .values()
                .map(|m| (m.member_id.clone(), m.group_instance_id.clone(), m.metadata_for(&protocol_name)))
                .collect()
        } else {
            Vec::new()
        };
        JoinOutcome {
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_name,
            leader,
            member_id: member_id.to_string(),
            members,
        }
    }

    fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.remove(member_id)?;
        if let Some(instance) = &member.group_instance_id
            && self.static_members.get(instance).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(instance);
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = None;
        }
        Some(member)
    }

    /// Validates a member of the current generation (SyncGroup, Heartbeat, OffsetCommit).
    fn check_member(&self, member_id: &str, instance: Option<&str>, generation_id: i32) -> CoreResult<()> {
        if let Some(instance) = instance
            && let Some(current) = self.static_members.get(instance)
            && current != member_id
        {
            return Err(CoreError::FencedInstanceId);
        }
        if !self.members.contains_key(member_id) {
            return Err(CoreError::UnknownMemberId);
        }
        if generation_id != self.generation_id {
            return Err(CoreError::IllegalGeneration);
        }
        Ok(())
    }

    /// SyncGroup: the leader's assignments complete the rebalance. Followers park until then.
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
        replies: &mut Vec<Reply>,
    ) -> Option<CoreResult<SyncOutcome>> {
        let answer = self.sync_unchecked(member_id, instance, generation_id, assignments, now, replies);
        self.check_invariants();
        answer
    }

    #[allow(clippy::too_many_arguments)]
    fn sync_unchecked(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
        replies: &mut Vec<Reply>,
    ) -> Option<CoreResult<SyncOutcome>> {
        if let Err(e) = self.check_member(member_id, instance, generation_id) {
            return Some(Err(e));
        }
        self.members.get_mut(member_id).expect("member").last_heard = now;
        match self.state {
            GroupState::Empty => Some(Err(CoreError::UnknownMemberId)),
            GroupState::PreparingRebalance => Some(Err(CoreError::RebalanceInProgress)),
            GroupState::Stable => Some(Ok(self.sync_outcome(member_id))),
            GroupState::CompletingRebalance => {
                self.members.get_mut(member_id).expect("member").awaiting_sync = true;
                if self.leader.as_deref() == Some(member_id) {
                    let assigned: BTreeMap<String, Bytes> = assignments.into_iter().collect();
                    for member in self.members.values_mut() {
                        member.assignment = assigned.get(&member.member_id).cloned().unwrap_or_default();
                    }
                    self.transition(GroupState::Stable);
                    let waiting: Vec<String> =
                        self.members.values().filter(|m| m.awaiting_sync).map(|m| m.member_id.clone()).collect();
                    for id in waiting {
                        self.members.get_mut(&id).expect("member").awaiting_sync = false;
                        replies.push(Reply::Sync(id.clone(), Ok(self.sync_outcome(&id))));
                    }
                }
                None
            }
        }
    }

    fn sync_outcome(&self, member_id: &str) -> SyncOutcome {
        SyncOutcome {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_name: self.protocol_name.clone().unwrap_or_default(),
            assignment: self.members.get(member_id).map(|m| m.assignment.clone()).unwrap_or_default(),
        }
    }

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        now: Instant,
    ) -> CoreResult<()> {
        if self.state == GroupState::Empty {
            return Err(CoreError::UnknownMemberId);
        }
        self.check_member(member_id, instance, generation_id)?;
        self.members.get_mut(member_id).expect("member").last_heard = now;
        self.check_invariants();
        match self.state {
            GroupState::PreparingRebalance => Err(CoreError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// LeaveGroup for one member (by id, or by instance id for static members).
    pub fn leave(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        now: Instant,
        replies: &mut Vec<Reply>,
    ) -> CoreResult<()> {
        let left = self.leave_unchecked(member_id, instance, now, replies);
        self.check_invariants();
        left
    }

    fn leave_unchecked(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        now: Instant,
        replies: &mut Vec<Reply>,
    ) -> CoreResult<()> {
        let member_id = match instance {
            Some(instance) => match self.static_members.get(instance) {
                Some(current) if member_id.is_empty() || current == member_id => current.clone(),
                Some(_) => return Err(CoreError::FencedInstanceId),
                None => return Err(CoreError::UnknownMemberId),
            },
            None => member_id.to_string(),
        };
        if self.pending_members.remove(&member_id).is_some() {
            return Ok(());
        }
        let Some(member) = self.remove_member(&member_id) else {
            return Err(CoreError::UnknownMemberId);
        };
        if member.awaiting_join {
            replies.push(Reply::Join(member_id.clone(), Err(CoreError::UnknownMemberId)));
        }
        if member.awaiting_sync {
            replies.push(Reply::Sync(member_id.clone(), Err(CoreError::UnknownMemberId)));
        }
        self.after_member_removed(now, replies);
        Ok(())
    }

    fn after_member_removed(&mut self, now: Instant, replies: &mut Vec<Reply>) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(now, replies),
            GroupState::PreparingRebalance => self.maybe_complete_join(now, replies),
            GroupState::Empty => {}
        }
    }

    /// Expires members whose session lapsed and ends join phases past their deadline.
    pub fn tick(&mut self, now: Instant, replies: &mut Vec<Reply>) {
        self.tick_unchecked(now, replies);
        self.check_invariants();
    }

    fn tick_unchecked(&mut self, now: Instant, replies: &mut Vec<Reply>) {
        self.pending_members.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                !m.awaiting_join && now >= m.last_heard + Duration::from_millis(m.session_timeout_ms.max(0) as u64)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in expired {
            tracing::info!(group = %self.group_id, member = %member_id, "member session expired");
            if let Some(member) = self.remove_member(&member_id)
                && member.awaiting_sync
            {
                replies.push(Reply::Sync(member_id, Err(CoreError::UnknownMemberId)));
            }
            self.after_member_removed(now, replies);
        }
        self.maybe_complete_join(now, replies);
    }

    /// OffsetCommit's membership rule, in Apache's order (`ClassicGroup.validateOffsetCommit`):
    /// an empty group takes commits of generation -1 from anyone (admin clients, standalone
    /// consumers); a commit naming a member, an instance or a generation must come from a
    /// current member of this generation; one naming none of them is refused while the group
    /// has members.
    pub fn check_commit(&self, member_id: &str, instance: Option<&str>, generation_id: i32) -> CoreResult<()> {
        if generation_id < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if crate::mutant!(CommitIgnoresGeneration) {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || instance.is_some() {
            self.check_member(member_id, instance, generation_id)?;
        } else if self.state != GroupState::Empty {
            return Err(CoreError::UnknownMemberId);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(CoreError::RebalanceInProgress);
        }
        Ok(())
    }

    /// TxnOffsetCommit's membership rule (KIP-447), as Apache's classic coordinator applies
    /// it: a commit without a member (v0-v2 clients: empty member id, generation -1) is taken
    /// as it stands; one with a member must be from a current member of this generation.
    pub fn check_txn_commit(&self, member_id: &str, instance: Option<&str>, generation_id: i32) -> CoreResult<()> {
        if let Some(instance) = instance
            && let Some(current) = self.static_members.get(instance)
            && current != member_id
        {
            return Err(CoreError::FencedInstanceId);
        }
        if !member_id.is_empty() && !self.members.contains_key(member_id) {
            return Err(CoreError::UnknownMemberId);
        }
        if generation_id >= 0 && generation_id != self.generation_id {
            return Err(CoreError::IllegalGeneration);
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.state == GroupState::Empty
    }

    /// The topics the members of a consumer-protocol group subscribe to, read from their
    /// metadata for the group's protocol; None if any member's cannot be read (then every
    /// topic counts as subscribed, as Apache counts it).
    pub fn subscribed_topics(&self) -> Option<std::collections::BTreeSet<String>> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = std::collections::BTreeSet::new();
        for member in self.members.values() {
            let (_, metadata) = member.protocols.iter().find(|(name, _)| name == protocol)?;
            let mut buf = metadata.clone();
            if buf.len() < 2 {
                return None;
            }
            let version = i16::from_be_bytes([buf[0], buf[1]]);
            let _ = bytes::Buf::get_i16(&mut buf);
            let subscription = ConsumerProtocolSubscription::decode(&mut buf, version.clamp(0, 3)).ok()?;
            topics.extend(subscription.topics.iter().map(|t| t.to_string()));
        }
        Some(topics)
    }

    pub fn touch(&mut self, member_id: &str, now: Instant) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_heard = now;
        }
    }

    pub fn check_invariants(&self) {
        if let Some(leader) = &self.leader {
            assert!(
                self.members.contains_key(leader) || self.state == GroupState::PreparingRebalance,
                "leader is a member"
            );
        }
        if self.state == GroupState::Empty {
            assert!(self.members.is_empty(), "an empty group has no members");
        }
        for (instance, id) in &self.static_members {
            assert_eq!(self.members.get(id).and_then(|m| m.group_instance_id.as_deref()), Some(instance.as_str()));
        }
        assert!(self.generation_id >= 0, "generations count up from 0");
        if self.state == GroupState::Stable || self.state == GroupState::CompletingRebalance {
            assert!(!self.members.is_empty(), "a formed generation has members");
            assert!(
                self.leader.as_ref().is_some_and(|l| self.members.contains_key(l)),
                "a formed generation has a leader"
            );
        }
        for pending in self.pending_members.keys() {
            assert!(!self.members.contains_key(pending), "a pending member is not yet a member");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A starting instant for tests that pass time in explicitly.
    fn start() -> Instant {
        Instant::now() // allow-nondeterminism: tests pass every later instant in
    }

    fn request(member_id: &str, instance: Option<&str>) -> JoinRequest {
        JoinRequest {
            member_id: member_id.to_string(),
            group_instance_id: instance.map(str::to_string),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"meta"))],
            require_known_member_id: true,
        }
    }

    /// Joins a new dynamic member the v4+ way (learn the id, rejoin with it). Returns its id.
    fn join_new(g: &mut Group, now: Instant, replies: &mut Vec<Reply>) -> String {
        let JoinAction::Done(Err(CoreError::MemberIdRequired(id))) = g.join(request("", None), now, 7, replies) else {
            panic!("a new member must learn its id first")
        };
        assert!(matches!(g.join(request(&id, None), now, 7, replies), JoinAction::Parked { .. }));
        id
    }

    fn joined(replies: &[Reply]) -> Vec<(String, i32, String)> {
        replies
            .iter()
            .filter_map(|r| match r {
                Reply::Join(id, Ok(o)) => Some((id.clone(), o.generation_id, o.leader.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_lone_member_joins_syncs_and_becomes_stable() {
        let now = start();
        let mut g = Group::new("g".into(), 0);
        let mut replies = Vec::new();
        let id = join_new(&mut g, now, &mut replies);
        assert_eq!(joined(&replies), vec![(id.clone(), 1, id.clone())]);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        replies.clear();
        let assignment = vec![(id.clone(), Bytes::from_static(b"all"))];
        let answer = g.sync(&id, None, 1, assignment, now, &mut replies);
        assert!(answer.is_none(), "the leader's sync is answered through a reply");
        assert!(
            matches!(&replies[..], [Reply::Sync(m, Ok(o))] if *m == id && o.assignment == Bytes::from_static(b"all"))
        );
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.heartbeat(&id, None, 1, now), Ok(()));
        assert_eq!(g.heartbeat(&id, None, 0, now), Err(CoreError::IllegalGeneration));
        assert_eq!(g.heartbeat("stranger", None, 1, now), Err(CoreError::UnknownMemberId));
        g.check_invariants();
    }

    #[test]
    fn a_stable_group_is_carried_on_from_its_metadata_by_a_new_coordinator() {
        let now = start();
        let mut g = Group::new("g".into(), 0);
        let mut replies = Vec::new();
        let id = join_new(&mut g, now, &mut replies);
        assert_eq!(g.metadata(), None, "nothing is durable mid-rebalance");
        g.sync(&id, None, 1, vec![(id.clone(), Bytes::from_static(b"\x00all"))], now, &mut replies);
        let metadata = g.metadata().expect("a stable group has durable metadata");
        let json = serde_json::to_string(&metadata).unwrap();
        let read: GroupMetadata = serde_json::from_str(&json).unwrap();
        let later = now + Duration::from_secs(60);
        let mut carried = Group::restore("g".into(), 0, &read, later).expect("restorable");
        assert_eq!(carried.state, GroupState::Stable);
        assert_eq!(carried.heartbeat(&id, None, 1, later), Ok(()), "same member id and generation");
        assert_eq!(carried.check_txn_commit(&id, None, 1), Ok(()));
        assert_eq!(carried.members[&id].assignment, Bytes::from_static(b"\x00all"));
        assert_eq!(carried.metadata(), Some(metadata.clone()));
        // A member that is never heard from again expires from the restore on, not before.
        carried.tick(later + Duration::from_millis(9_999), &mut replies);
        assert_eq!(carried.state, GroupState::Stable);
        // Metadata naming a leader that is no member describes no group.
        let broken = GroupMetadata { leader: Some("nobody".into()), ..metadata };
        assert!(Group::restore("g".into(), 0, &broken, later).is_none());
    }

    #[test]
    fn a_second_member_triggers_a_rebalance_that_both_finish() {
        let now = start();
        let mut g = Group::new("g".into(), 0);
        let mut replies = Vec::new();
        let a = join_new(&mut g, now, &mut replies);
        g.sync(&a, None, 1, vec![], now, &mut replies);
        replies.clear();
        let b = join_new(&mut g, now, &mut replies);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert!(joined(&replies).is_empty(), "the join waits for the old member");
        assert_eq!(g.heartbeat(&a, None, 1, now), Err(CoreError::RebalanceInProgress));
        assert_eq!(g.check_commit(&a, None, 1), Ok(()), "commits of the old generation are allowed while preparing");
        g.join(request(&a, None), now, 7, &mut replies);
        let mut done = joined(&replies);
        done.sort();
        let mut expected = vec![(a.clone(), 2, a.clone()), (b.clone(), 2, a.clone())];
        expected.sort();
        assert_eq!(done, expected, "both join generation 2 with the old leader kept");
        assert_eq!(g.check_commit(&b, None, 2), Err(CoreError::RebalanceInProgress));
        g.check_invariants();
    }

    #[test]
    fn a_silent_member_expires_and_a_missing_rejoin_times_out() {
        let t0 = start();
        let mut g = Group::new("g".into(), 0);
        let mut replies = Vec::new();
        let a = join_new(&mut g, t0, &mut replies);
        g.sync(&a, None, 1, vec![], t0, &mut replies);
        let b = join_new(&mut g, t0, &mut replies);
        // `a` keeps heartbeating but never rejoins: after the rebalance timeout `b` alone forms
        // generation 2.
        replies.clear();
        for s in [5, 10, 15, 20, 25] {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(g.heartbeat(&a, None, 1, at), Err(CoreError::RebalanceInProgress));
            g.tick(at, &mut replies);
        }
        g.tick(t0 + Duration::from_millis(29_999), &mut replies);
        assert!(joined(&replies).is_empty());
        g.tick(t0 + Duration::from_millis(30_000), &mut replies);
        assert_eq!(joined(&replies), vec![(b.clone(), 2, b.clone())]);
        assert!(!g.members.contains_key(&a));
        // `b` then stops heartbeating: its session expires and the group empties.
        replies.clear();
        let later = t0 + Duration::from_millis(30_000 + 10_000);
        g.tick(later, &mut replies);
        assert!(g.members.is_empty());
        assert_eq!(g.state, GroupState::Empty);
        assert_eq!(g.generation_id, 3);
        g.check_invariants();
    }

    #[test]
    fn a_restarted_static_member_takes_its_place_and_fences_the_old_id() {
        let now = start();
        let mut g = Group::new("g".into(), 0);
        let mut replies = Vec::new();
        let JoinAction::Parked { member_id: old } = g.join(request("", Some("pod-0")), now, 1, &mut replies) else {
            panic!("static members join without learning an id first")
        };
        g.sync(&old, Some("pod-0"), 1, vec![(old.clone(), Bytes::from_static(b"p0"))], now, &mut replies);
        assert_eq!(g.state, GroupState::Stable);
        let JoinAction::Done(Ok(outcome)) = g.join(request("", Some("pod-0")), now, 2, &mut replies) else {
            panic!("an unchanged static member rejoins without a rebalance")
        };
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(outcome.generation_id, 1);
        assert_ne!(outcome.member_id, old);
        assert_eq!(g.heartbeat(&old, Some("pod-0"), 1, now), Err(CoreError::FencedInstanceId));
        assert_eq!(g.heartbeat(&outcome.member_id, Some("pod-0"), 1, now), Ok(()));
        let answer = g.sync(&outcome.member_id, Some("pod-0"), 1, vec![], now, &mut replies);
        assert!(
            matches!(answer, Some(Ok(o)) if o.assignment == Bytes::from_static(b"p0")),
            "the assignment carries over"
        );
        assert_eq!(g.leave("", Some("pod-0"), now, &mut replies), Ok(()));
        assert_eq!(g.state, GroupState::Empty, "the last member leaving empties the group");
        assert_eq!(g.heartbeat(&outcome.member_id, Some("pod-0"), 1, now), Err(CoreError::UnknownMemberId));
        g.check_invariants();
    }

    #[test]
    fn the_initial_delay_gathers_members_before_the_first_generation() {
        let t0 = start();
        let mut g = Group::new("g".into(), 3000);
        let mut replies = Vec::new();
        let a = join_new(&mut g, t0, &mut replies);
        let b = join_new(&mut g, t0 + Duration::from_millis(1000), &mut replies);
        assert!(joined(&replies).is_empty());
        assert_eq!(g.next_deadline(), Some(t0 + Duration::from_millis(4000)), "a newcomer extends the delay");
        g.tick(t0 + Duration::from_millis(3000), &mut replies);
        assert!(joined(&replies).is_empty());
        g.tick(t0 + Duration::from_millis(4000), &mut replies);
        let members: Vec<String> = joined(&replies)
            .into_iter()
            .map(|(id, generation, _)| {
                assert_eq!(generation, 1);
                id
            })
            .collect();
        assert_eq!(members.len(), 2);
        assert!(members.contains(&a) && members.contains(&b));
    }

    #[test]
    fn protocols_must_be_shared() {
        let now = start();
        let mut g = Group::new("g".into(), 0);
        let mut replies = Vec::new();
        join_new(&mut g, now, &mut replies);
        let mut other = request("", None);
        other.protocols = vec![("sticky".into(), Bytes::new())];
        assert!(matches!(
            g.join(other, now, 1, &mut replies),
            JoinAction::Done(Err(CoreError::InconsistentGroupProtocol))
        ));
        assert!(transition_valid(GroupState::Stable, GroupState::PreparingRebalance));
        assert!(!transition_valid(GroupState::Empty, GroupState::Stable));
    }
}
