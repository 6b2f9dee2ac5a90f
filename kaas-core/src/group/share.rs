//! One share group's membership (KIP-932, ShareGroupHeartbeat) as a pure state machine: time
//! and the topics' metadata are passed in, every heartbeat is answered at once, and the actor
//! (`share_api`) owns the channels. What the members consume, the share partitions, lives with
//! the partitions (`partition::share`).
//!
//! The group epoch moves whenever what the assignment depends on changes: a member joins,
//! leaves, times out or changes its subscription, or a subscribed topic's partitions change.
//! The simple assignor (`assignor::simple`) then computes the target at that epoch. Share
//! groups need no revocation: a member takes its target at its next heartbeat, and its member
//! epoch becomes the group epoch then. A heartbeat at the member's epoch, or the one before it
//! (its answer may have been lost), is accepted; any other is FENCED_MEMBER_EPOCH.
//!
//! Members live in memory, as consumer-protocol members do: after the coordinator restarts or
//! the group moves, a member's heartbeat is answered UNKNOWN_MEMBER_ID and it joins again.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::{Duration, Instant};

use super::assignor::{self, Assignment, Subscriber, TopicMetadata};
use crate::error::{CoreError, CoreResult};

/// The member epoch of a leave.
pub const LEAVE_EPOCH: i32 = -1;

/// The settings share groups run with (`group.share.*`).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub max_size: usize,
}

#[derive(Debug, Clone)]
pub struct ShareMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    /// The member's target assignment: what it consumes once it heartbeats at the group epoch.
    pub assignment: Assignment,
    deadline: Instant,
}

/// A ShareGroupHeartbeat, decoded.
#[derive(Debug, Clone)]
pub struct ShareHeartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// None: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareHeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    /// Given when the member joined, said what it subscribes to, or moved to a new epoch.
    pub assignment: Option<Assignment>,
}

#[derive(Debug, Clone)]
pub struct ShareGroup {
    pub group_id: String,
    pub group_epoch: i32,
    /// The epoch the current target was computed at.
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// The subscribed topics as the current target saw them: a change moves the group epoch.
    topics_seen: BTreeMap<String, TopicMetadata>,
    /// Members left without a heartbeat of theirs (their session ran out): the next heartbeat
    /// moves the group epoch and computes the target anew.
    members_gone: bool,
}

impl ShareGroup {
    pub fn new(group_id: String) -> ShareGroup {
        ShareGroup {
            group_id,
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            topics_seen: BTreeMap::new(),
            members_gone: false,
        }
    }

    /// The group as a new coordinator finds it: no members (they join again), its epoch as the
    /// volume kept it.
    pub fn restore(group_id: String, group_epoch: i32) -> ShareGroup {
        let group = ShareGroup { group_epoch, assignment_epoch: group_epoch, ..ShareGroup::new(group_id) };
        group.check_invariants();
        group
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Apache's name of the group's state.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() { "Empty" } else { "Stable" }
    }

    /// When the first member's session runs out, if any member is left.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.members.values().map(|m| m.deadline).min()
    }

    /// Every topic some member subscribes to.
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members.values().flat_map(|m| m.subscribed_topic_names.iter().cloned()).collect()
    }

    /// A heartbeat: a join (epoch 0), a leave (-1) or a regular one. `topic` looks a
    /// subscribed topic up.
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        settings: Settings,
        now: Instant,
    ) -> CoreResult<ShareHeartbeatAnswer> {
        let answer = match hb.member_epoch {
            LEAVE_EPOCH => self.leave(&hb.member_id, topic),
            0 => self.join(hb, topic, settings, now),
            _ => self.regular(hb, topic, settings, now),
        };
        self.check_invariants();
        answer
    }

    fn join(
        &mut self,
        hb: ShareHeartbeat,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        settings: Settings,
        now: Instant,
    ) -> CoreResult<ShareHeartbeatAnswer> {
        let subscribed: BTreeSet<String> = hb.subscribed_topic_names.unwrap_or_default().into_iter().collect();
        let deadline = now + Duration::from_millis(settings.session_timeout_ms.max(0) as u64);
        let changed = match self.members.get_mut(&hb.member_id) {
            // A member joining again (its process lost its epoch): it keeps what it has.
            Some(member) => {
                member.deadline = deadline;
                let changed = member.subscribed_topic_names != subscribed;
                member.subscribed_topic_names = subscribed;
                changed
            }
            None => {
                if self.members.len() >= settings.max_size {
                    return Err(CoreError::GroupMaxSizeReached);
                }
                let member = ShareMember {
                    member_id: hb.member_id.clone(),
                    member_epoch: 0,
                    previous_member_epoch: 0,
                    rack_id: hb.rack_id.clone(),
                    client_id: hb.client_id.clone(),
                    client_host: hb.client_host.clone(),
                    subscribed_topic_names: subscribed,
                    assignment: Assignment::new(),
                    deadline,
                };
                self.members.insert(hb.member_id.clone(), member);
                true
            }
        };
        self.maybe_reassign(changed, topic);
        Ok(self.reconcile(&hb.member_id, true))
    }

    fn regular(
        &mut self,
        hb: ShareHeartbeat,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
        settings: Settings,
        now: Instant,
    ) -> CoreResult<ShareHeartbeatAnswer> {
        let Some(member) = self.members.get_mut(&hb.member_id) else { return Err(CoreError::UnknownMemberId) };
        if hb.member_epoch != member.member_epoch && hb.member_epoch != member.previous_member_epoch {
            return Err(CoreError::FencedMemberEpoch);
        }
        member.deadline = now + Duration::from_millis(settings.session_timeout_ms.max(0) as u64);
        member.client_id = hb.client_id;
        member.client_host = hb.client_host;
        if hb.rack_id.is_some() {
            member.rack_id = hb.rack_id;
        }
        let told = hb.subscribed_topic_names.is_some();
        let mut changed = false;
        if let Some(names) = hb.subscribed_topic_names {
            let subscribed: BTreeSet<String> = names.into_iter().collect();
            changed = member.subscribed_topic_names != subscribed;
            member.subscribed_topic_names = subscribed;
        }
        self.maybe_reassign(changed, topic);
        Ok(self.reconcile(&hb.member_id, told))
    }

    fn leave(
        &mut self,
        member_id: &str,
        topic: &dyn Fn(&str) -> Option<TopicMetadata>,
    ) -> CoreResult<ShareHeartbeatAnswer> {
        if self.members.remove(member_id).is_none() {
            return Err(CoreError::UnknownMemberId);
        }
        self.maybe_reassign(true, topic);
        Ok(ShareHeartbeatAnswer { member_id: member_id.to_string(), member_epoch: LEAVE_EPOCH, assignment: None })
    }

    /// Members whose session ran out by `now` leave; their ids, in order. The target is
    /// computed anew at the next heartbeat, which has the topics' metadata.
    pub fn tick(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> =
            self.members.values().filter(|m| m.deadline <= now).map(|m| m.member_id.clone()).collect();
        for member_id in &expired {
            tracing::info!(group = %self.group_id, member = %member_id, "share group member's session timed out");
            self.members.remove(member_id);
        }
        self.members_gone |= !expired.is_empty();
        self.check_invariants();
        expired
    }

    /// Moves the group epoch and computes a new target if the members changed or a subscribed
    /// topic did.
    fn maybe_reassign(&mut self, members_changed: bool, topic: &dyn Fn(&str) -> Option<TopicMetadata>) {
        let topics: BTreeMap<String, TopicMetadata> =
            self.subscribed_topics().into_iter().filter_map(|name| topic(&name).map(|t| (name, t))).collect();
        if !members_changed && !self.members_gone && topics == self.topics_seen {
            return;
        }
        self.members_gone = false;
        self.group_epoch += 1;
        let subscribers: Vec<Subscriber<'_>> = self
            .members
            .values()
            .map(|m| Subscriber {
                member_id: &m.member_id,
                topics: &m.subscribed_topic_names,
                current: Some(&m.assignment),
            })
            .collect();
        let target = assignor::simple(&subscribers, &topics);
        for (member_id, assignment) in target {
            self.members.get_mut(&member_id).expect("a target per member").assignment = assignment;
        }
        self.topics_seen = topics;
        self.assignment_epoch = self.group_epoch;
    }

    /// The member takes the target: its epoch becomes the group's. The assignment goes in the
    /// answer when the member joined, said what it subscribes to, or moved to a new epoch.
    fn reconcile(&mut self, member_id: &str, told: bool) -> ShareHeartbeatAnswer {
        let group_epoch = self.group_epoch;
        let member = self.members.get_mut(member_id).expect("a member");
        let moved = member.member_epoch != group_epoch;
        if moved {
            member.previous_member_epoch = member.member_epoch;
            member.member_epoch = group_epoch;
        }
        ShareHeartbeatAnswer {
            member_id: member_id.to_string(),
            member_epoch: member.member_epoch,
            assignment: (told || moved).then(|| member.assignment.clone()),
        }
    }

    /// Whether `member_id` is a member at `member_epoch` (its current epoch, or the one before,
    /// whose answer it may not have had): KIP-1289's check before acknowledgements are staged.
    /// `None`: at any epoch (a share fetch, which names no epoch, acquires only for members).
    pub fn check_member(&self, member_id: &str, member_epoch: Option<i32>) -> CoreResult<()> {
        let member = self.members.get(member_id).ok_or(CoreError::UnknownMemberId)?;
        let Some(member_epoch) = member_epoch else { return Ok(()) };
        if member_epoch == member.member_epoch || member_epoch == member.previous_member_epoch && member_epoch > 0 {
            Ok(())
        } else if member_epoch < member.member_epoch {
            Err(CoreError::StaleMemberEpoch)
        } else {
            Err(CoreError::FencedMemberEpoch)
        }
    }

    pub fn check_invariants(&self) {
        assert!(self.group_epoch >= 0 && self.assignment_epoch <= self.group_epoch, "epochs run forward");
        for member in self.members.values() {
            assert!(member.member_epoch <= self.group_epoch, "no member is ahead of its group");
            assert!(member.previous_member_epoch <= member.member_epoch, "a member's epochs run forward");
            for (id, partitions) in &member.assignment {
                let topic = self.topics_seen.values().find(|t| t.topic_id == *id);
                assert!(
                    topic.is_some_and(|t| partitions.iter().all(|p| (0..t.partitions).contains(p))),
                    "assigned partitions exist"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: Settings = Settings { session_timeout_ms: 45_000, heartbeat_interval_ms: 5_000, max_size: 3 };

    fn topic(name: &str) -> Option<TopicMetadata> {
        (name == "t").then(|| TopicMetadata { topic_id: [1; 16], name: "t".into(), partitions: 2 })
    }

    fn hb(member_id: &str, member_epoch: i32, topics: Option<&[&str]>) -> ShareHeartbeat {
        ShareHeartbeat {
            member_id: member_id.into(),
            member_epoch,
            rack_id: None,
            subscribed_topic_names: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        }
    }

    #[test]
    fn members_join_share_the_partitions_and_leave() {
        let now = Instant::now(); // allow-nondeterminism: the test passes every later instant in
        let mut group = ShareGroup::new("g".into());
        let a = group.heartbeat(hb("a", 0, Some(&["t"])), &topic, SETTINGS, now).unwrap();
        assert_eq!((a.member_epoch, a.assignment.unwrap()[&[1; 16]].len()), (1, 2), "alone, a has both");
        let b = group.heartbeat(hb("b", 0, Some(&["t"])), &topic, SETTINGS, now).unwrap();
        assert_eq!(b.member_epoch, 2);
        let a = group.heartbeat(hb("a", 1, None), &topic, SETTINGS, now).unwrap();
        assert_eq!((a.member_epoch, a.assignment.unwrap()[&[1; 16]].len()), (2, 1), "a gives one up at its heartbeat");
        assert_eq!(group.heartbeat(hb("a", 2, None), &topic, SETTINGS, now).unwrap().assignment, None, "nothing new");
        assert_eq!(
            group.heartbeat(hb("a", 1, None), &topic, SETTINGS, now).unwrap().member_epoch,
            2,
            "the epoch before is fine"
        );
        assert_eq!(group.heartbeat(hb("a", 3, None), &topic, SETTINGS, now), Err(CoreError::FencedMemberEpoch));
        assert_eq!(group.heartbeat(hb("z", 2, None), &topic, SETTINGS, now), Err(CoreError::UnknownMemberId));
        let left = group.heartbeat(hb("b", LEAVE_EPOCH, None), &topic, SETTINGS, now).unwrap();
        assert_eq!(left.member_epoch, LEAVE_EPOCH);
        assert_eq!(group.group_epoch, 3);
        group.heartbeat(hb("c", 0, Some(&["t"])), &topic, SETTINGS, now).unwrap();
        group.heartbeat(hb("d", 0, Some(&["t"])), &topic, SETTINGS, now).unwrap();
        assert_eq!(
            group.heartbeat(hb("e", 0, Some(&["t"])), &topic, SETTINGS, now),
            Err(CoreError::GroupMaxSizeReached)
        );
    }

    #[test]
    fn a_member_whose_session_runs_out_leaves_and_staging_checks_the_epoch() {
        let now = Instant::now(); // allow-nondeterminism: the test passes every later instant in
        let mut group = ShareGroup::new("g".into());
        group.heartbeat(hb("a", 0, Some(&["t"])), &topic, SETTINGS, now).unwrap();
        group.heartbeat(hb("b", 0, Some(&["t"])), &topic, SETTINGS, now + Duration::from_secs(30)).unwrap();
        assert_eq!(group.check_member("a", Some(1)), Ok(()));
        assert_eq!(group.check_member("b", None), Ok(()), "a share fetch names no epoch");
        assert_eq!(group.check_member("b", Some(1)), Err(CoreError::StaleMemberEpoch));
        assert_eq!(group.check_member("b", Some(9)), Err(CoreError::FencedMemberEpoch));
        assert_eq!(group.tick(now + Duration::from_secs(46)), vec!["a".to_string()]);
        assert_eq!(group.check_member("a", Some(1)), Err(CoreError::UnknownMemberId));
        assert_eq!(group.check_member("a", None), Err(CoreError::UnknownMemberId), "nor acquires");
        let b = group.heartbeat(hb("b", 2, None), &topic, SETTINGS, now + Duration::from_secs(47)).unwrap();
        assert_eq!((b.member_epoch, b.assignment.unwrap()[&[1; 16]].len()), (3, 2), "b takes what a had");
    }
}
