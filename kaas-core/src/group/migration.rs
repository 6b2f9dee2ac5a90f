//! The online migration of a live group between the classic protocol and the consumer protocol
//! (KIP-848's upgrade path; `group.consumer.migration.policy`, default `bidirectional`):
//!
//! ```text
//!               a ConsumerGroupHeartbeat joins (policy allows the upgrade)
//!   classic ────────────────────────────────────────────────────────────▶ consumer group,
//!   group   ◀──────────────────────────────────────────────────────────── classic and consumer
//!               every member left speaks the classic protocol              members in it
//!               (policy allows the downgrade): a rebalance follows
//! ```
//! An upgrade keeps every classic member with what it owns, at the classic generation as its
//! member epoch; the newcomer's join then moves the group epoch and the members converge as in
//! any consumer group (the classic ones by joining again when a heartbeat tells them to). A
//! downgrade hands the members back to a classic group that rebalances at once. Both are pure:
//! the actor in `mod.rs` swaps the groups and answers what was parked.

use bytes::Bytes;
use tokio::time::Instant;

use super::assignor::{Assignment, TopicMetadata};
use super::consumer::{ClassicJoin, ConsumerGroup};
use super::embedded::{self, Partitions};
use super::state::{Group, Member, Reply};
pub use crate::config::MigrationPolicy;

impl std::fmt::Display for MigrationPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            MigrationPolicy::Disabled => "disabled",
            MigrationPolicy::Upgrade => "upgrade",
            MigrationPolicy::Downgrade => "downgrade",
            MigrationPolicy::Bidirectional => "bidirectional",
        };
        f.write_str(name)
    }
}

/// Partitions named by topic, as topic ids; topics that no longer exist are left out.
pub fn by_id(partitions: &Partitions, topic: &dyn Fn(&str) -> Option<TopicMetadata>) -> Assignment {
    let mut a = Assignment::new();
    for (name, ps) in partitions {
        if let Some(t) = topic(name) {
            a.entry(t.topic_id).or_default().extend(ps.iter().copied().filter(|p| (0..t.partitions).contains(p)));
        }
    }
    a.retain(|_, ps| !ps.is_empty());
    a
}

/// Partitions by topic id, named; topics the group does not know by name are left out.
pub fn by_name(assignment: &Assignment, group: &ConsumerGroup) -> Partitions {
    assignment
        .iter()
        .filter_map(|(id, ps)| {
            let name = group.subscribed_topics.values().find(|t| t.topic_id == *id)?.name.clone();
            Some((name, ps.iter().copied().collect()))
        })
        .collect()
}

/// The version a member's assignment is encoded at: its subscription's, of its first protocol.
pub fn assignment_version(protocols: &[(String, Bytes)]) -> i16 {
    protocols.first().and_then(|(_, m)| embedded::decode_subscription(m)).map_or(0, |s| s.version)
}

/// The classic group `classic` as a consumer group, or why it cannot be one (its members do not
/// speak the consumer protocol, or what they say cannot be read).
pub fn upgrade(
    classic: &Group,
    topic: &dyn Fn(&str) -> Option<TopicMetadata>,
    now: Instant,
) -> Result<ConsumerGroup, String> {
    if classic.protocol_type.as_deref() != Some("consumer") {
        return Err(format!("protocol type {:?} is not the consumer protocol", classic.protocol_type));
    }
    let mut members = Vec::new();
    for m in classic.members.values() {
        // The group's protocol, or (before its first generation) the member's first choice.
        let chosen = classic.protocol_name.as_deref();
        let (_, metadata) = m
            .protocols
            .iter()
            .find(|(name, _)| Some(name.as_str()) == chosen)
            .or(m.protocols.first())
            .ok_or_else(|| format!("member {} has no protocol", m.member_id))?;
        let subscription = embedded::decode_subscription(metadata)
            .ok_or_else(|| format!("member {}'s subscription cannot be read", m.member_id))?;
        let assigned = embedded::decode_assignment(&m.assignment)
            .ok_or_else(|| format!("member {}'s assignment cannot be read", m.member_id))?;
        let join = ClassicJoin {
            member_id: m.member_id.clone(),
            new_member: false,
            instance_id: m.group_instance_id.clone(),
            rack_id: subscription.rack_id,
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            session_timeout_ms: m.session_timeout_ms,
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            protocols: m.protocols.clone(),
            subscribed_topic_names: subscription.topics.into_iter().collect(),
            owned: Assignment::new(),
        };
        let owned = match crate::mutant!(UpgradeForgetsOwned) {
            true => Assignment::new(),
            false => by_id(&assigned, topic),
        };
        members.push((join, owned));
    }
    ConsumerGroup::adopt(classic.group_id.clone(), classic.generation_id, members, topic, now)
}

/// The consumer group `group`, whose members all speak the classic protocol, as a classic group
/// at `generation_id` that is rebalancing. `replies` takes what the rebalance answers (nothing
/// is parked yet).
pub fn downgrade(
    group: &ConsumerGroup,
    generation_id: i32,
    initial_delay_ms: i64,
    now: Instant,
    replies: &mut Vec<Reply>,
) -> Group {
    let members = group
        .members
        .values()
        .filter_map(|m| {
            let classic = m.classic.as_ref()?;
            let version = assignment_version(&classic.protocols);
            Some(Member {
                member_id: m.member_id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: classic.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: classic.protocols.clone(),
                assignment: embedded::encode_assignment(&by_name(&m.assigned, group), version),
                awaiting_join: false,
                awaiting_sync: false,
                last_heard: now,
            })
        })
        .collect();
    Group::downgraded(group.group_id.clone(), initial_delay_ms, generation_id, members, now, replies)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use tokio::time::Duration;

    use super::*;
    use crate::error::CoreError;
    use crate::group::consumer::{Heartbeat, Settings};
    use crate::group::state::{GroupState, JoinAction, JoinRequest};

    const SETTINGS: Settings = Settings { session_timeout_ms: 45_000, max_size: 100 };
    const T: [u8; 16] = [7; 16];

    fn topic(name: &str) -> Option<TopicMetadata> {
        (name == "t").then(|| TopicMetadata { topic_id: T, name: "t".into(), partitions: 4 })
    }

    fn subscription(owned: &[i32]) -> Bytes {
        let owned = if owned.is_empty() { Vec::new() } else { vec![("t".to_string(), owned.to_vec())] };
        embedded::encode_subscription(&["t".into()], &owned, 1)
    }

    fn classic_join(member_id: &str, owned: &[i32]) -> JoinRequest {
        JoinRequest {
            member_id: member_id.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), subscription(owned))],
            require_known_member_id: false,
        }
    }

    fn partitions(a: &Assignment) -> BTreeSet<i32> {
        a.get(&T).cloned().unwrap_or_default()
    }

    /// A stable classic group of `a` (partitions 0, 1) and `b` (2, 3) at generation 1.
    fn stable_classic_group(now: Instant) -> (Group, String, String) {
        let mut g = Group::new("g".into(), 0);
        let mut replies = Vec::new();
        let JoinAction::Parked { member_id: a } = g.join(classic_join("", &[]), now, 1, &mut replies) else {
            panic!("parked")
        };
        let JoinAction::Parked { member_id: b } = g.join(classic_join("", &[]), now, 2, &mut replies) else {
            panic!("parked")
        };
        // The first generation formed with `a` alone; `b` made a second one.
        g.join(classic_join(&a, &[]), now, 3, &mut replies);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let leader = g.leader.clone().unwrap();
        let generation = g.generation_id;
        let half = |ps: &[i32]| embedded::encode_assignment(&vec![("t".into(), ps.to_vec())], 1);
        let assignments = vec![(a.clone(), half(&[0, 1])), (b.clone(), half(&[2, 3]))];
        g.sync(&leader, None, generation, assignments, now, &mut replies);
        let other = if leader == a { &b } else { &a };
        g.sync(other, None, generation, Vec::new(), now, &mut replies);
        assert_eq!(g.state, GroupState::Stable);
        (g, a, b)
    }

    #[test]
    fn a_live_classic_group_is_upgraded_by_a_consumer_member_and_downgraded_when_it_leaves() {
        let now = Instant::now(); // allow-nondeterminism: the test passes every later instant in
        let (classic, a, b) = stable_classic_group(now);
        let generation = classic.generation_id;
        let mut g = upgrade(&classic, &topic, now).expect("the consumer protocol's bytes read");
        assert_eq!((g.group_epoch, g.members.len()), (generation, 2));
        assert_eq!(partitions(&g.members[&a].assigned), BTreeSet::from([0, 1]), "a keeps what it owns");
        assert_eq!(g.members[&a].member_epoch, generation, "at the classic generation");
        assert_eq!(g.classic_heartbeat(&a, None, generation, now), Ok(()), "nothing moved yet");

        // A consumer-protocol member joins: a new epoch; it gets nothing the classic members own.
        let hb = Heartbeat {
            member_id: "c".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..Heartbeat::default()
        };
        let joined = g.heartbeat(hb, &topic, &Vec::new, SETTINGS, now, || unreachable!()).unwrap();
        assert_eq!(joined.member_epoch, generation + 1);
        assert!(partitions(joined.assignment.as_ref().unwrap()).is_empty(), "everything is still owned");
        assert_eq!(
            g.classic_heartbeat(&a, None, generation, now),
            Err(CoreError::RebalanceInProgress),
            "a classic member learns of the new epoch by a heartbeat"
        );
        assert_eq!(g.classic_sync(&a, None, generation, now), Err(CoreError::RebalanceInProgress));
        assert_eq!(g.check_commit(&a, generation - 1), Err(CoreError::IllegalGeneration));
        assert_eq!(g.check_commit(&a, generation), Ok(()), "its generation is still its member epoch");

        // The member that loses a partition joins again still owning both (cooperative): it
        // must first give one up. The other moves to the new epoch as it joins.
        let loses = |id: &String| partitions(&g.target[id]).len() < 2;
        let (a, b) = if loses(&a) { (a, b) } else { (b, a) };
        assert!(loses(&a), "the uniform assignor takes one partition from one of them");
        let owned_by_a: Vec<i32> = partitions(&g.members[&a].assigned).into_iter().collect();
        let rejoin = |g: &mut ConsumerGroup, id: &str, owned: &[i32]| {
            let req = classic_join(id, owned);
            let owned = by_id(&embedded::decode_subscription(&req.protocols[0].1).unwrap().owned, &topic);
            let join = ClassicJoin {
                member_id: id.into(),
                new_member: false,
                instance_id: None,
                rack_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 30_000,
                protocols: req.protocols,
                subscribed_topic_names: BTreeSet::from(["t".to_string()]),
                owned,
            };
            g.classic_join(join, &topic, SETTINGS, now).unwrap()
        };
        assert_eq!(rejoin(&mut g, &a, &owned_by_a), generation, "revoking: the epoch waits");
        let kept = g.classic_sync(&a, None, generation, now).unwrap();
        assert_eq!(partitions(&kept).len(), 1, "a keeps one of its two");
        assert_eq!(g.classic_heartbeat(&a, None, generation, now), Err(CoreError::RebalanceInProgress));
        let kept: Vec<i32> = partitions(&kept).into_iter().collect();
        assert_eq!(rejoin(&mut g, &a, &kept), generation + 1, "revoked: at the new epoch");
        assert_eq!(g.classic_sync(&a, None, generation + 1, now).map(|k| partitions(&k).len()), Ok(1));

        // The consumer member takes what a gave up, once it heartbeats.
        let beat = |g: &mut ConsumerGroup, epoch| {
            let hb = Heartbeat { member_id: "c".into(), member_epoch: epoch, ..Heartbeat::default() };
            g.heartbeat(hb, &topic, &Vec::new, SETTINGS, now, || unreachable!()).unwrap()
        };
        assert_eq!(partitions(beat(&mut g, generation + 1).assignment.as_ref().unwrap()).len(), 1);
        assert_eq!(g.state_name(), "Reconciling", "b has not joined again yet");
        let b_owns = partitions(&g.members[&b].assigned);

        // The consumer member leaves: every member left is classic, so the group goes back.
        beat(&mut g, crate::group::consumer::LEAVE_EPOCH);
        assert!(g.all_classic());
        let mut replies = Vec::new();
        let later = now + Duration::from_secs(1);
        let back = downgrade(&g, g.group_epoch - 1, 0, later, &mut replies);
        assert_eq!(back.state, GroupState::PreparingRebalance, "the classic members rebalance");
        assert_eq!(back.generation_id, g.group_epoch - 1);
        assert_eq!(back.members.keys().collect::<Vec<_>>(), g.members.keys().collect::<Vec<_>>());
        let owned = embedded::decode_assignment(&back.members[&b].assignment).unwrap();
        let b_owns: Vec<i32> = b_owns.into_iter().collect();
        assert_eq!(owned, vec![("t".to_string(), b_owns)], "b's partitions, as the consumer protocol says them");
    }

    #[test]
    fn a_group_that_does_not_speak_the_consumer_protocol_is_not_upgraded() {
        let now = Instant::now(); // allow-nondeterminism: the test passes every later instant in
        let (mut classic, a, b) = stable_classic_group(now);
        classic.members.get_mut(&a).unwrap().protocols = vec![("range".into(), Bytes::from_static(b"opaque"))];
        assert!(upgrade(&classic, &topic, now).unwrap_err().contains("cannot be read"));
        let (mut classic, a, _) = stable_classic_group(now);
        let both = embedded::encode_assignment(&vec![("t".into(), vec![2])], 1);
        classic.members.get_mut(&a).unwrap().assignment = both;
        assert!(upgrade(&classic, &topic, now).unwrap_err().contains("two members"), "{b}'s partition 2 twice");
        assert_eq!("Bidirectional".parse(), Ok(MigrationPolicy::Bidirectional));
        assert!("sideways".parse::<MigrationPolicy>().is_err());
    }
}
