//! Consumer-group checks over what the members were told:
//! - split-assignment: one generation of one broker incarnation gave a partition to two members;
//! - fenced-commit: a commit sent after a later generation of the same broker incarnation was
//!   handed out (so the coordinator had moved on) was acked: the old generation was not fenced.

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
