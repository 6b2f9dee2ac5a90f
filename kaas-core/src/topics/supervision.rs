//! Partition supervision: the topic manager starts a partition actor for every partition of
//! every topic, and, as the membership's view says, claims the partitions it gives this broker
//! (`cluster::ownership`), tells their actors to serve them, and disowns and releases the
//! others.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{PARTITIONS_MAX, TopicManager, TopicMeta, TopicState, partition_dir};
use crate::cluster::ClusterView;
use crate::env::{Clock, Env};
use crate::partition::{self, PartitionHandle};

impl<E: Env> TopicManager<E> {
    /// Stops a topic's partition actors, releasing those this broker owned.
    pub(super) async fn stop_topic(&mut self, state: &TopicState, delete: bool) {
        for (p, handle) in state.partitions.iter().enumerate() {
            let key = (state.meta.name.clone(), p as i32);
            if self.ownership.held(&key).is_some() {
                handle.disown().await;
                self.ownership.release(&key).await;
            }
            handle.stop(delete).await;
        }
    }

    /// Claims the partitions the view gives this broker and serves them; disowns and releases
    /// those it gives another broker, and everything of a lease session that lapsed.
    pub(super) async fn reconcile(&mut self) {
        self.ownership.retry_releases().await;
        let view: Arc<ClusterView> = self.membership.view();
        let now = self.env.clock().monotonic();
        let topics: Vec<Arc<TopicState>> = self.topics.values().cloned().collect();
        tracing::debug!(topics = topics.len(), valid = view.lease_valid(now), owners = ?view.owners(), "reconcile");
        for state in topics {
            for (p, handle) in state.partitions.iter().enumerate() {
                let key = (state.meta.name.clone(), p as i32);
                let dir = partition_dir(&key.0, key.1);
                let want = view.should_own_preferring(&dir, state.preferred(key.1), now);
                match self.ownership.held(&key) {
                    Some(held) if !want || held.session != view.session => {
                        handle.disown().await;
                        self.ownership.release(&key).await;
                        tracing::info!(partition = %dir, epoch = held.epoch, "handed over");
                    }
                    None if want => match self.ownership.claim(&key, &view, now).await {
                        Ok(Some(claimed)) => {
                            if let Err(e) = handle.own(claimed, view.session).await {
                                tracing::warn!(partition = %dir, error = %e, "claimed, but cannot open the log yet");
                            }
                            tracing::info!(partition = %dir, epoch = claimed.epoch, takeover = claimed.takeover, "took ownership");
                        }
                        Ok(None) => tracing::debug!(partition = %dir, "held by another broker"),
                        Err(e) => tracing::warn!(partition = %dir, error = %e, "cannot claim a partition"),
                    },
                    _ => {}
                }
            }
        }
    }

    pub(super) async fn start_partitions(
        &self,
        meta: TopicMeta,
        from: i32,
        mut partitions: Vec<PartitionHandle>,
    ) -> TopicState {
        assert!((1..=PARTITIONS_MAX).contains(&meta.partitions), "a topic's partition count was checked");
        assert_eq!(partitions.len(), usize::try_from(from).expect("from a count"), "partitions start where they end");
        let settings = self.effective.partition_settings(&meta.configs);
        for p in from..meta.partitions {
            let dir = partition_dir(&meta.name, p);
            let links = partition::Links {
                data_version: self.data_version.clone(),
                cluster: self.membership.subscribe(),
                dead_letters: self.dead_letters.clone(),
                log_metrics: self.metrics.log.clone(),
                cleaner_slots: self.cleaner_slots.clone(),
            };
            let key = (meta.name.clone(), p);
            let partition = partition::start(&self.env, key, dir, meta.topic_id, settings, links).await;
            if !self.fences.is_empty() {
                partition.fence(Arc::new(self.fences.clone())).await;
            }
            partitions.push(partition);
        }
        assert_eq!(partitions.len(), meta.partitions as usize, "an actor for every partition");
        TopicState { meta, partitions, assignments: BTreeMap::new() }
    }
}
