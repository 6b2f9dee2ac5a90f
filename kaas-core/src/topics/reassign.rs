//! Partition reassignments (AlterPartitionReassignments): the replica lists on the volume
//! (`cluster::assignments`), changed by revision, and the reassignments still in progress. The
//! rules are `cluster::reassignment`'s; this is the topic manager's side.

use std::sync::Arc;

use super::{TopicManager, TopicState, partition_dir, storage};
use crate::cluster::reassignment::{self, Change, Ongoing};
use crate::env::{Clock, Env, Volume};
use crate::error::{CoreError, CoreResult};

/// Times a reassignment is made again on top of a peer's that came first, before it gives up.
const REASSIGN_TRIES: usize = 5;

impl<E: Env> TopicManager<E> {
    /// Applies reassignment changes on top of the newest revision of the topic's assignments,
    /// and takes the result on. A peer that made that revision's successor first wins; the
    /// changes are then made again on top of its (`cluster::assignments`).
    pub(super) async fn reassign(
        &mut self,
        name: &str,
        changes: Vec<(i32, Change)>,
        allow_replication_factor_change: bool,
        deadline: tokio::time::Instant,
    ) -> CoreResult<Vec<CoreResult<()>>> {
        let timed_out = |env: &E| env.clock().monotonic() >= deadline;
        if timed_out(&self.env) {
            return Err(CoreError::RequestTimedOut);
        }
        self.read_before_change(name).await;
        let Some(state) = self.topics.get(name).cloned() else { return Err(CoreError::UnknownTopicOrPartition) };
        let (partitions, topic_id) = (state.meta.partitions, state.meta.topic_id);
        let view = self.membership.view();
        // Registered: a lease on the volume, as this broker has read it or reads it now (a
        // broker just started has not read its peers' yet).
        let mut registered = std::collections::BTreeSet::new();
        for change in &changes {
            if let (_, Change::Reassign(target)) = change {
                for &b in target {
                    if !registered.contains(&b) && (view.registered(b) || self.lease_exists(b).await?) {
                        registered.insert(b);
                    }
                }
            }
        }
        for _ in 0..REASSIGN_TRIES {
            let (revision, mut assignments) = self.assignments.read(name, topic_id).await.map_err(storage)?;
            let mut results = Vec::with_capacity(changes.len());
            let mut changed = false;
            for (p, change) in changes.iter().cloned() {
                if !(0..partitions).contains(&p) {
                    results.push(Err(CoreError::UnknownTopicOrPartition));
                    continue;
                }
                let key = partition_dir(name, p);
                let holder = self.ownership.holder(&(name.to_string(), p)).await.map_err(storage)?;
                let assignment = assignments.get(&p);
                let preferred = assignment.map_or(&[][..], |a| a.replicas.as_slice());
                let owner = view.owner_preferring(&key, preferred);
                let partition = reassignment::Partition { assignment, holder, owner };
                let registered = |b| registered.contains(&b);
                match reassignment::apply(partition, change, allow_replication_factor_change, registered) {
                    Ok(next) if next.as_ref() == assignment => results.push(Ok(())),
                    Ok(next) => {
                        changed = true;
                        match next {
                            Some(a) => assignments.insert(p, a),
                            None => assignments.remove(&p),
                        };
                        results.push(Ok(()));
                    }
                    Err(e) => results.push(Err(e)),
                }
            }
            if !changed {
                // Perhaps made by an earlier try of this request whose reply said it failed.
                self.assignments.sync(name).await.map_err(storage)?;
                return Ok(results);
            }
            // Reads of the volume may have stalled past the deadline: nothing is written then.
            if timed_out(&self.env) {
                return Err(CoreError::RequestTimedOut);
            }
            let written = self.assignments.write(name, topic_id, revision + 1, assignments.clone());
            if written.await.map_err(storage)? {
                tracing::info!(topic = name, revision = revision + 1, ?assignments, "reassigned");
                if self.rescan_assignments(name).await {
                    self.publish();
                    self.reconcile().await;
                }
                return Ok(results);
            }
        }
        Err(CoreError::Storage(format!("the assignments of topic {name} keep changing under this request; try again")))
    }

    pub(super) async fn lease_exists(&self, broker_id: i32) -> CoreResult<bool> {
        if broker_id < 0 {
            return Ok(false);
        }
        let lease = crate::cluster::lease::path(broker_id);
        Ok(self.env.volume().read(&lease).await.map_err(storage)?.is_some())
    }

    /// The reassignments in progress among `wanted` (every topic's if `None`), by topic.
    pub(super) async fn reassignments(
        &mut self,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<(String, Vec<Ongoing>)> {
        self.catch_up().await;
        let view = self.membership.view();
        let wanted: Vec<(Arc<TopicState>, Option<Vec<i32>>)> = match wanted {
            None => self.topics.values().map(|t| (t.clone(), None)).collect(),
            Some(list) => {
                list.into_iter().filter_map(|(n, ps)| Some((self.topics.get(&n)?.clone(), Some(ps)))).collect()
            }
        };
        let mut found = Vec::new();
        for (state, partitions) in wanted {
            let partitions = partitions.unwrap_or_else(|| state.assignments.keys().copied().collect());
            let mut ongoing = Vec::new();
            for p in partitions {
                let Some(assignment) = state.assignments.get(&p) else { continue };
                let key = partition_dir(&state.meta.name, p);
                let holder = match self.ownership.holder(&(state.meta.name.clone(), p)).await {
                    Ok(holder) => holder,
                    Err(e) => {
                        tracing::warn!(partition = %key, error = %e, "cannot read a partition's claim");
                        None
                    }
                };
                let owner = state.owner(p, &view);
                let partition = reassignment::Partition { assignment: Some(assignment), holder, owner };
                ongoing.extend(reassignment::ongoing(p, partition));
            }
            if !ongoing.is_empty() {
                found.push((state.meta.name.clone(), ongoing));
            }
        }
        found
    }

    /// Reads a known topic's assignments again and takes on what changed. Whether anything did.
    pub(super) async fn rescan_assignments(&mut self, name: &str) -> bool {
        let Some(state) = self.topics.get(name).cloned() else { return false };
        let assignments = match self.assignments.read(name, state.meta.topic_id).await {
            Ok((_, assignments)) => assignments,
            Err(e) => {
                // Never guessed at: what this broker knows stands.
                tracing::warn!(topic = %name, error = %e, "unreadable partition assignments");
                return false;
            }
        };
        if assignments == state.assignments {
            return false;
        }
        let (meta, partitions) = (state.meta.clone(), state.partitions.clone());
        self.topics.insert(name.to_string(), Arc::new(TopicState { meta, partitions, assignments }));
        true
    }
}
