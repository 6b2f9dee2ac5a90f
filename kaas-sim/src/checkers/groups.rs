//! Consumer-group checks over what the members were told:
//! - split-assignment: one generation of one broker incarnation gave a partition to two members;
//!   for the consumer protocol (KIP-848), a partition was given to a member while another still
//!   held it and was still a member (a heartbeat it sent afterwards was taken);
//! - fenced-commit: a commit sent after a later generation of the same broker incarnation was
//!   handed out (so the coordinator had moved on) was acked: the old generation was not fenced;
//!   for the consumer protocol, a commit of a partition acked after it was given to another
//!   member (and not back).

use std::collections::BTreeMap;

/// One member's view of one generation, as SyncGroup handed it out.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// Which incarnation of the broker formed the generation: generations restart with it.
    pub boot: u64,
    pub generation: i32,
    pub member_id: String,
    pub partitions: Vec<i32>,
    /// History sequence number of the SyncGroup answer.
    pub synced_seq: u64,
}

/// An acked commit, with the generation it was made in.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    pub boot: u64,
    pub generation: i32,
    pub member_id: String,
    pub partition: i32,
    /// History sequence number at which the request was sent.
    pub sent_seq: u64,
}

/// What a consumer-protocol member saw of its partitions (KIP-848).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnershipEvent {
    /// A heartbeat answer gave it the partition (at the answer).
    Given,
    /// It gave the partition up (from just before the heartbeat that says so).
    Released,
    /// A heartbeat it sent (at the send) was taken: it was a member then. Partition -1.
    Taken,
    /// A heartbeat answer said it is no member any more (at the answer). Partition -1.
    Fenced,
    /// It joined (a heartbeat at epoch 0, at the send): a new incarnation (after a crash, a
    /// fence) holds nothing of the old one's. Partition -1.
    Joined,
}

#[derive(Debug, Clone)]
pub struct Ownership {
    pub boot: u64,
    pub member_id: String,
    pub partition: i32,
    /// History sequence number of the event.
    pub seq: u64,
    pub event: OwnershipEvent,
}

/// KIP-848: no partition is given to a member while another member, still a member, holds it.
pub fn check_ownership(events: &[Ownership]) -> Vec<String> {
    let mut events: Vec<&Ownership> = events.iter().collect();
    events.sort_by_key(|e| (e.boot, e.seq));
    let mut violations = Vec::new();
    let mut boot = None;
    let mut holders: BTreeMap<i32, std::collections::BTreeSet<&str>> = BTreeMap::new();
    // (holder, partition, given to): the holder must turn out to have been removed.
    let mut pending: Vec<(&str, i32, &str)> = Vec::new();
    for e in events {
        if boot != Some(e.boot) {
            // Members live in the coordinator's memory: a new incarnation starts afresh.
            (boot, holders, pending) = (Some(e.boot), BTreeMap::new(), Vec::new());
        }
        let member = e.member_id.as_str();
        match e.event {
            OwnershipEvent::Given => {
                let held = holders.entry(e.partition).or_default();
                pending.extend(held.iter().filter(|h| **h != member).map(|h| (*h, e.partition, member)));
                held.insert(member);
            }
            OwnershipEvent::Released => {
                holders.entry(e.partition).or_default().remove(member);
            }
            OwnershipEvent::Fenced | OwnershipEvent::Joined => {
                holders.values_mut().for_each(|h| {
                    h.remove(member);
                });
                pending.retain(|(holder, ..)| *holder != member);
            }
            OwnershipEvent::Taken => {
                for (holder, partition, given_to) in pending.iter().filter(|(h, ..)| *h == member) {
                    violations.push(format!(
                        "split-assignment: partition {partition} was given to {given_to} while {holder} held it and was still a member"
                    ));
                }
                pending.retain(|(holder, ..)| *holder != member);
            }
        }
    }
    violations
}

/// KIP-848: a commit acked of a partition given to another member since it was last given to
/// the committer.
pub fn check_consumer_fencing(events: &[Ownership], commits: &[GroupCommit]) -> Vec<String> {
    let mut violations = Vec::new();
    for c in commits {
        let given = |e: &&Ownership| {
            e.boot == c.boot && e.partition == c.partition && e.event == OwnershipEvent::Given && e.seq < c.sent_seq
        };
        let last_own = events.iter().filter(given).filter(|e| e.member_id == c.member_id).map(|e| e.seq).max();
        let other = events.iter().filter(given).find(|e| e.member_id != c.member_id && Some(e.seq) > last_own);
        if let Some(e) = other {
            violations.push(format!(
                "fenced-commit: {} committed partition {} (epoch {}) after it was given to {}",
                c.member_id, c.partition, c.generation, e.member_id
            ));
        }
    }
    violations
}

pub fn check_assignments(assignments: &[Assignment]) -> Vec<String> {
    let mut owner: BTreeMap<(u64, i32, i32), &str> = BTreeMap::new();
    let mut violations = Vec::new();
    for a in assignments {
        for p in &a.partitions {
            let first = *owner.entry((a.boot, a.generation, *p)).or_insert(&a.member_id);
            if first != a.member_id {
                violations.push(format!(
                    "split-assignment: generation {} gave partition {p} to {first} and {}",
                    a.generation, a.member_id
                ));
            }
        }
    }
    violations
}

pub fn check_fencing(assignments: &[Assignment], commits: &[GroupCommit]) -> Vec<String> {
    let mut violations = Vec::new();
    for c in commits {
        let later =
            assignments.iter().find(|a| a.boot == c.boot && a.generation > c.generation && a.synced_seq < c.sent_seq);
        if let Some(a) = later {
            violations.push(format!(
                "fenced-commit: {} committed partition {} in generation {} after generation {} was handed out",
                c.member_id, c.partition, c.generation, a.generation
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assigned(boot: u64, generation: i32, member: &str, partitions: &[i32], synced_seq: u64) -> Assignment {
        Assignment { boot, generation, member_id: member.into(), partitions: partitions.to_vec(), synced_seq }
    }

    #[test]
    fn a_partition_given_twice_in_one_generation_is_named() {
        let fine = [assigned(1, 1, "a", &[0], 1), assigned(1, 1, "b", &[1], 2), assigned(1, 2, "b", &[0, 1], 3)];
        assert!(check_assignments(&fine).is_empty());
        assert!(
            check_assignments(&[assigned(1, 1, "a", &[0], 1), assigned(2, 1, "b", &[0], 9)]).is_empty(),
            "another boot"
        );
        let found = check_assignments(&[assigned(1, 1, "a", &[0, 1], 1), assigned(1, 1, "b", &[1], 2)]);
        assert!(found[0].starts_with("split-assignment: generation 1 gave partition 1 to a and b"), "{found:?}");
    }

    fn owned(member: &str, partition: i32, seq: u64, event: OwnershipEvent) -> Ownership {
        Ownership { boot: 1, member_id: member.into(), partition, seq, event }
    }

    #[test]
    fn a_partition_given_while_a_live_member_holds_it_is_named() {
        use OwnershipEvent::*;
        let handed_over =
            [owned("a", 0, 1, Given), owned("a", 0, 5, Released), owned("b", 0, 7, Given), owned("a", -1, 8, Taken)];
        assert!(check_ownership(&handed_over).is_empty());
        let removed = [owned("a", 0, 1, Given), owned("b", 0, 7, Given), owned("a", -1, 9, Fenced)];
        assert!(check_ownership(&removed).is_empty(), "a was a zombie, removed by the coordinator");
        let restarted =
            [owned("a", 0, 1, Given), owned("a", -1, 5, Joined), owned("b", 0, 7, Given), owned("a", -1, 9, Taken)];
        assert!(check_ownership(&restarted).is_empty(), "a crashed and joined again: it holds nothing");
        let split = [owned("a", 0, 1, Given), owned("b", 0, 7, Given), owned("a", -1, 8, Taken)];
        let found = check_ownership(&split);
        assert!(found[0].starts_with("split-assignment: partition 0 was given to b while a"), "{found:?}");
        let commit = |member: &str, sent_seq| GroupCommit {
            boot: 1,
            generation: 3,
            member_id: member.into(),
            partition: 0,
            sent_seq,
        };
        assert!(check_consumer_fencing(&handed_over, &[commit("a", 4), commit("b", 9)]).is_empty());
        let found = check_consumer_fencing(&handed_over, &[commit("a", 9)]);
        assert!(found[0].starts_with("fenced-commit: a committed partition 0"), "{found:?}");
    }

    #[test]
    fn a_commit_of_an_old_generation_after_a_new_one_is_named() {
        let assignments = [assigned(1, 1, "a", &[0], 1), assigned(1, 2, "b", &[0], 5)];
        let commit =
            |generation, sent_seq| GroupCommit { boot: 1, generation, member_id: "a".into(), partition: 0, sent_seq };
        assert!(check_fencing(&assignments, &[commit(1, 4), commit(2, 6)]).is_empty());
        let found = check_fencing(&assignments, &[commit(1, 6)]);
        assert!(found[0].starts_with("fenced-commit"), "{found:?}");
    }
}
