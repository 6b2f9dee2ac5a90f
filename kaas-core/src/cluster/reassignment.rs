//! Partition reassignments (AlterPartitionReassignments, ListPartitionReassignments) on a shared
//! volume. No data moves: the volume is the only replica. A reassignment sets a partition's
//! replica list, and the first broker of the list that may own things owns the partition
//! (`ClusterView::owner_preferring`); the move itself is the ordinary hand-over, a release and
//! a claim of the next ownership epoch. The lists live in revisions on the volume
//! (`cluster::assignments`), which every broker reads again on each heartbeat, so each learns of
//! a change within one.
//!
//! A reassignment is in progress while no broker of its list holds the partition's claim: the
//! old owner has not let go yet, or every broker of the list is down (the partition then stays
//! with the owner the rendezvous hash names, and the reassignment shows until one comes back).
//! Cancelling one in progress restores the list before it, as Apache reverts to the original
//! replicas.
//!
//! The rules here are pure; the topic manager reads the claims and writes the revisions.

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, CoreResult};

/// A partition's replica list, set by a reassignment, in order of preference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub replicas: Vec<i32>,
    /// The list before this one (empty: none was set, the rendezvous hash chose), restored if
    /// the reassignment is cancelled before it completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous: Vec<i32>,
}

/// What AlterPartitionReassignments asks of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Move to these replicas.
    Reassign(Vec<i32>),
    /// Cancel the reassignment in progress (a null replica list).
    Cancel,
}

/// One partition's state as the rules need it.
#[derive(Debug, Clone, Copy)]
pub struct Partition<'a> {
    /// Its assignment, if one was ever set.
    pub assignment: Option<&'a Assignment>,
    /// The broker holding its claim unreleased, if any.
    pub holder: Option<i32>,
    /// Its owner by the view now.
    pub owner: Option<i32>,
}

impl Partition<'_> {
    /// Its replicas as Metadata reports them: the assignment's, else the owner alone.
    pub fn replicas(&self) -> Vec<i32> {
        match self.assignment {
            Some(a) => a.replicas.clone(),
            None => self.owner.into_iter().collect(),
        }
    }

    /// Whether a reassignment of it is in progress: one was set and no broker of its list holds
    /// the partition.
    pub fn in_progress(&self) -> bool {
        self.assignment.is_some_and(|a| !self.holder.is_some_and(|h| a.replicas.contains(&h)))
    }
}

/// The assignment a partition has after `change`; `None` when it has none (the rendezvous hash
/// chooses). Apache's checks: a non-empty list of registered brokers, none twice, the same
/// length as now unless `allow_replication_factor_change` (KIP-860), and a cancel only of a
/// reassignment in progress.
/// `registered` says whether a broker id is known to the cluster (has a lease on the volume).
pub fn apply(
    partition: Partition<'_>,
    change: Change,
    allow_replication_factor_change: bool,
    registered: impl Fn(i32) -> bool,
) -> CoreResult<Option<Assignment>> {
    let target = match change {
        Change::Cancel if !partition.in_progress() => return Err(CoreError::NoReassignmentInProgress),
        Change::Cancel => {
            let previous = partition.assignment.map(|a| a.previous.clone()).unwrap_or_default();
            return Ok((!previous.is_empty()).then_some(Assignment { replicas: previous, previous: Vec::new() }));
        }
        Change::Reassign(target) => target,
    };
    validate(&target, registered)?;
    let current = partition.replicas();
    if !allow_replication_factor_change && target.len() != current.len() {
        return Err(CoreError::InvalidReplicationFactor(format!(
            "The replication factor is changed from {} to {}",
            current.len(),
            target.len()
        )));
    }
    // A new target while one is in progress keeps the list from before both, as Apache keeps
    // the original replicas: a cancel goes back to where the partition was.
    let previous = match partition.assignment {
        Some(a) if partition.in_progress() => a.previous.clone(),
        Some(a) => a.replicas.clone(),
        None => Vec::new(),
    };
    if partition.assignment.is_some_and(|a| a.replicas == target) {
        return Ok(partition.assignment.cloned());
    }
    Ok(Some(Assignment { replicas: target, previous }))
}

fn validate(target: &[i32], registered: impl Fn(i32) -> bool) -> CoreResult<()> {
    if target.is_empty() {
        return Err(CoreError::InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = target.to_vec();
    sorted.sort_unstable();
    for (i, &broker) in sorted.iter().enumerate() {
        if !registered(broker) {
            return Err(CoreError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {broker}, but no such broker is registered."
            )));
        }
        if i > 0 && sorted[i - 1] == broker {
            return Err(CoreError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes the broker {broker} more than once."
            )));
        }
    }
    Ok(())
}

/// A reassignment in progress as ListPartitionReassignments reports it: every replica old and
/// new, the ones being added and the ones being removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ongoing {
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// Partition `index`'s reassignment, if one is in progress. Where it came from is the list
/// before it or, if none was set, the broker holding the partition.
pub fn ongoing(index: i32, partition: Partition<'_>) -> Option<Ongoing> {
    if !partition.in_progress() {
        return None;
    }
    let assignment = partition.assignment?;
    let from = if assignment.previous.is_empty() {
        partition.holder.into_iter().collect()
    } else {
        assignment.previous.clone()
    };
    let adding: Vec<i32> = assignment.replicas.iter().copied().filter(|b| !from.contains(b)).collect();
    let removing: Vec<i32> = from.iter().copied().filter(|b| !assignment.replicas.contains(b)).collect();
    let replicas = assignment.replicas.iter().chain(&removing).copied().collect();
    Some(Ongoing { partition: index, replicas, adding, removing })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brokers 0 and 5 have leases on the volume; 7 is unknown.
    fn view() -> impl Fn(i32) -> bool + Copy {
        |b| b == 0 || b == 5
    }

    fn partition(assignment: Option<&Assignment>, holder: Option<i32>) -> Partition<'_> {
        Partition { assignment, holder, owner: Some(0) }
    }

    #[test]
    fn apache_checks_a_target() {
        let v = view();
        let p = partition(None, Some(0));
        let invalid = |r: CoreResult<Option<Assignment>>| matches!(r, Err(CoreError::InvalidReplicaAssignment(_)));
        assert!(invalid(apply(p, Change::Reassign(vec![]), true, v)));
        assert!(invalid(apply(p, Change::Reassign(vec![7]), true, v)));
        assert!(invalid(apply(p, Change::Reassign(vec![0, 0]), true, v)));
        assert!(matches!(apply(p, Change::Cancel, true, v), Err(CoreError::NoReassignmentInProgress)));
        let set = apply(p, Change::Reassign(vec![0]), false, v).unwrap().unwrap();
        assert_eq!(set, Assignment { replicas: vec![0], previous: vec![] });
    }

    #[test]
    fn a_reassignment_completes_when_a_listed_broker_holds_the_partition() {
        let a = Assignment { replicas: vec![2, 3], previous: vec![] };
        assert!(partition(Some(&a), Some(1)).in_progress());
        assert!(partition(Some(&a), None).in_progress());
        assert!(!partition(Some(&a), Some(3)).in_progress());
        let ongoing = ongoing(4, partition(Some(&a), Some(1))).unwrap();
        assert_eq!(ongoing, Ongoing { partition: 4, replicas: vec![2, 3, 1], adding: vec![2, 3], removing: vec![1] });
        assert_eq!(super::ongoing(4, partition(Some(&a), Some(2))), None);
    }

    #[test]
    fn a_cancel_restores_the_list_from_before() {
        let v = view();
        let moving = Assignment { replicas: vec![0], previous: vec![5] };
        let back = apply(partition(Some(&moving), Some(5)), Change::Cancel, true, v).unwrap();
        assert_eq!(back, Some(Assignment { replicas: vec![5], previous: vec![] }));
        let from_hash = Assignment { replicas: vec![0], previous: vec![] };
        assert_eq!(apply(partition(Some(&from_hash), Some(5)), Change::Cancel, true, v).unwrap(), None);
        // Done: nothing to cancel.
        let done = partition(Some(&from_hash), Some(0));
        assert!(matches!(apply(done, Change::Cancel, true, v), Err(CoreError::NoReassignmentInProgress)));
    }

    #[test]
    fn the_replication_factor_holds_unless_allowed_to_change() {
        let v = view();
        let a = Assignment { replicas: vec![0], previous: vec![] };
        let p = partition(Some(&a), Some(0));
        match apply(p, Change::Reassign(vec![0, 5]), false, v) {
            Err(CoreError::InvalidReplicationFactor(m)) => {
                assert_eq!(m, "The replication factor is changed from 1 to 2")
            }
            other => panic!("{other:?}"),
        }
        // A registered broker that is not live is a valid target.
        let both = apply(p, Change::Reassign(vec![5, 0]), true, v).unwrap();
        assert_eq!(both, Some(Assignment { replicas: vec![5, 0], previous: vec![0] }));
        // The same list again changes nothing and is no error.
        assert_eq!(apply(p, Change::Reassign(vec![0]), false, v).unwrap(), Some(a.clone()));
    }
}
