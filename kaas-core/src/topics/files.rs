//! Topic files: `__cluster/topics/<name>.json`, one per topic, made by exclusive create (of two
//! brokers racing, one wins and both end up with its topic id), replaced whole on a change and
//! read again on every heartbeat, so that every broker takes on what its peers created,
//! deleted or changed.

use std::sync::Arc;

use bytes::Bytes;

use super::{ConfigOp, CreateTopic, PARTITIONS_MAX, TopicId, TopicManager, TopicMeta, TopicState, storage};
use crate::config::validate_topic_config;
use crate::env::{Env, Rng, Volume, join};
use crate::error::{CoreError, CoreResult};
use std::sync::atomic::Ordering;

pub const TOPICS_DIR: &str = "__cluster/topics";
const TOPIC_FORMAT_VERSION: u32 = 1;
/// Kafka's limit on topic name length.
const TOPIC_NAME_MAX_LEN: usize = 249;

pub fn validate_topic_name(name: &str) -> CoreResult<()> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(CoreError::InvalidTopic(format!("Topic name \"{name}\" is illegal")));
    }
    if name.len() > TOPIC_NAME_MAX_LEN {
        return Err(CoreError::InvalidTopic(format!("Topic name is longer than {TOPIC_NAME_MAX_LEN} characters")));
    }
    if !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-') {
        return Err(CoreError::InvalidTopic(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )));
    }
    Ok(())
}

/// A topic's metadata file, by name; `None` if there is none. Read by name, it is what the
/// volume holds now, whatever this broker's snapshot says.
pub async fn read_meta<V: Volume>(volume: &V, topic: &str) -> CoreResult<Option<TopicMeta>> {
    let path = join(TOPICS_DIR, &format!("{topic}.json"));
    let Some(raw) = volume.read(&path).await.map_err(storage)? else { return Ok(None) };
    let meta: TopicMeta = serde_json::from_slice(&raw)
        .map_err(|e| CoreError::Storage(format!("{path}: unreadable topic metadata: {e}")))?;
    if meta.format_version != TOPIC_FORMAT_VERSION || meta.name != topic {
        return Err(CoreError::Storage(format!("{path}: unknown format version or name mismatch")));
    }
    if !(1..=PARTITIONS_MAX).contains(&meta.partitions) {
        return Err(CoreError::Storage(format!("{path}: {} partitions", meta.partitions)));
    }
    Ok(Some(meta))
}

impl<E: Env> TopicManager<E> {
    /// Loads the dynamic broker settings and every topic from the volume, and starts (so
    /// recovers) every partition.
    pub(super) async fn load(&mut self) -> CoreResult<()> {
        let volume = self.env.volume().clone();
        self.load_broker_configs().await?;
        self.load_group_configs().await?;
        // An unreadable binding is reported and fails closed; it does not stop the start.
        self.rescan_acls().await;
        self.rescan_quotas().await;
        volume.create_dir_all(TOPICS_DIR).await.map_err(storage)?;
        // As a rescan does before serving a peer's new topic (`durable_topics_dir`).
        volume.sync_dir(TOPICS_DIR).await.map_err(storage)?;
        for name in volume.list(TOPICS_DIR).await.map_err(storage)? {
            let Some(topic) = name.strip_suffix(".json") else {
                continue;
            };
            let Some(meta) = self.read_meta(topic).await? else { continue };
            let state = self.start_partitions(meta, 0, Vec::new()).await;
            self.topics.insert(topic.to_string(), Arc::new(state));
            self.rescan_assignments(topic).await;
        }
        self.publish();
        Ok(())
    }

    pub(super) async fn read_meta(&self, topic: &str) -> CoreResult<Option<TopicMeta>> {
        read_meta(self.env.volume(), topic).await
    }

    /// Picks up what peers did to the topics: new topics, deletions, new partitions and config
    /// changes. Names come from a listing (new topics may show late on NFS); a topic missing
    /// from it is confirmed by reading its file by name before it is dropped.
    ///
    /// One publish at the end, and broker configs read before topics: a peer's topic change
    /// made before its broker change is never seen here after it, as Apache's metadata log
    /// orders them.
    pub(super) async fn rescan(&mut self) {
        self.rescans.fetch_add(1, Ordering::AcqRel);
        let mut changed = self.rescan_broker_configs().await;
        changed |= self.rescan_group_configs().await;
        if !crate::mutant!(AclRescanSkipped) {
            changed |= self.rescan_acls().await;
        }
        if !crate::mutant!(QuotaRescanSkipped) {
            changed |= self.rescan_quotas().await;
        }
        let listed = match self.env.volume().list(TOPICS_DIR).await {
            Ok(names) => names,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list topics");
                if changed {
                    self.publish();
                }
                return;
            }
        };
        let mut names: Vec<String> = listed.iter().filter_map(|n| n.strip_suffix(".json")).map(String::from).collect();
        names.extend(self.topics.keys().cloned());
        names.sort();
        names.dedup();
        for name in names {
            changed |= self.rescan_topic(name).await;
        }
        if changed {
            self.publish();
        }
    }

    /// Reads one topic's file again and takes on what a peer changed: a creation, deletion,
    /// re-creation, new partitions or configs. Whether anything changed.
    pub(super) async fn rescan_topic(&mut self, name: String) -> bool {
        let changed = self.rescan_topic_meta(&name).await;
        self.rescan_assignments(&name).await || changed
    }

    pub(super) async fn rescan_topic_meta(&mut self, name: &str) -> bool {
        let name = name.to_string();
        let meta = match self.read_meta(&name).await {
            Ok(meta) => meta,
            Err(e) => {
                // Never guessed at: what this broker knows of the topic stands.
                tracing::warn!(topic = %name, error = %e, "unreadable topic metadata");
                return false;
            }
        };
        let known = self.topics.get(&name).cloned();
        match (meta, known) {
            (None, None) => false,
            (None, Some(state)) => {
                tracing::info!(topic = %name, "topic deleted by a peer");
                self.metrics.topic_deleted(&name);
                self.topics.remove(&name);
                self.stop_topic(&state, false).await;
                true
            }
            (Some(meta), Some(state)) if meta.topic_id != state.meta.topic_id => {
                if !self.durable_topics_dir().await {
                    return false;
                }
                self.topics.remove(&name);
                self.stop_topic(&state, false).await;
                let state = self.start_partitions(meta, 0, Vec::new()).await;
                self.topics.insert(name, Arc::new(state));
                true
            }
            (Some(meta), Some(state)) if meta != state.meta => {
                let settings = self.effective.partition_settings(&meta.configs);
                for p in &state.partitions {
                    p.set_config(settings).await;
                }
                let from = state.meta.partitions.min(meta.partitions);
                let (existing, assignments) = (state.partitions.clone(), state.assignments.clone());
                let mut state = self.start_partitions(meta, from, existing).await;
                // The same topic: its assignments hold until they are read again.
                state.assignments = assignments;
                self.topics.insert(name, Arc::new(state));
                true
            }
            (Some(_), Some(_)) => false,
            (Some(meta), None) => {
                if !self.durable_topics_dir().await {
                    return false;
                }
                let state = self.start_partitions(meta, 0, Vec::new()).await;
                self.topics.insert(name, Arc::new(state));
                true
            }
        }
    }

    /// Syncs the topics directory before a topic another broker created is served here: its
    /// creator's own sync may have failed after the entry became visible, and a topic served
    /// must not vanish when that creator crashes. Whether it synced (if not, the next rescan
    /// tries again).
    pub(super) async fn durable_topics_dir(&self) -> bool {
        match self.env.volume().sync_dir(TOPICS_DIR).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot sync the topics directory; a new topic waits");
                false
            }
        }
    }

    pub(super) async fn persist(&self, meta: &TopicMeta) -> CoreResult<()> {
        let raw = serde_json::to_vec_pretty(meta).expect("serialisable");
        let path = join(TOPICS_DIR, &format!("{}.json", meta.name));
        self.env.volume().write_atomic(&path, Bytes::from(raw)).await.map_err(storage)
    }

    pub(super) async fn create(&mut self, request: CreateTopic) -> CoreResult<TopicMeta> {
        validate_topic_name(&request.name)?;
        if self.topics.contains_key(&request.name) {
            return Err(CoreError::TopicAlreadyExists);
        }
        let partitions = if request.partitions == -1 { self.config.num_partitions } else { request.partitions };
        if !(1..=PARTITIONS_MAX).contains(&partitions) {
            return Err(CoreError::InvalidPartitions(format!(
                "Number of partitions must be between 1 and {PARTITIONS_MAX}"
            )));
        }
        let replication_factor = if request.replication_factor == -1 {
            self.config.default_replication_factor
        } else {
            request.replication_factor
        };
        if replication_factor < 1 {
            return Err(CoreError::InvalidReplicationFactor("Replication factor must be larger than 0".into()));
        }
        for (name, value) in &request.configs {
            validate_topic_config(name, value).map_err(CoreError::InvalidConfig)?;
        }
        let meta = TopicMeta {
            format_version: TOPIC_FORMAT_VERSION,
            name: request.name.clone(),
            topic_id: self.env.rng().uuid(),
            partitions,
            replication_factor,
            configs: request.configs,
        };
        if request.validate_only {
            return Ok(meta);
        }
        let raw = serde_json::to_vec_pretty(&meta).expect("serialisable");
        let path = join(TOPICS_DIR, &format!("{}.json", meta.name));
        match self.env.volume().create_exclusive(&path, Bytes::from(raw)).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A peer created it first (or a lost reply hides our own create): theirs holds.
                self.catch_up().await;
                return match self.topics.get(&meta.name) {
                    Some(t) if t.meta == meta => Ok(meta),
                    _ => Err(CoreError::TopicAlreadyExists),
                };
            }
            Err(e) => {
                // The entry may be there and read by peers already (it is never taken back),
                // only not known durable: ours if the file holds our metadata and its
                // directory syncs now. Otherwise the client's retry finds the topic there.
                let ours = matches!(self.read_meta(&meta.name).await, Ok(Some(m)) if m == meta);
                if !ours || self.env.volume().sync_dir(TOPICS_DIR).await.is_err() {
                    return Err(storage(e));
                }
            }
        }
        // A crash during an earlier delete may have left partition directories behind: each
        // partition's first owner finds them marked with the old topic id and empties them
        // (`partition::adopt_dir`). Not here: a create that stalled on the volume may return
        // after a peer already adopted this topic's file and served it.
        let state = self.start_partitions(meta.clone(), 0, Vec::new()).await;
        self.topics.insert(meta.name.clone(), Arc::new(state));
        self.publish();
        self.reconcile().await;
        tracing::info!(topic = %meta.name, partitions, "created topic");
        Ok(meta)
    }

    pub(super) async fn delete(&mut self, name: &str) -> CoreResult<TopicId> {
        if !self.config.delete_topic_enable {
            return Err(CoreError::TopicDeletionDisabled);
        }
        let Some(state) = self.topics.remove(name) else {
            return Err(CoreError::UnknownTopicOrPartition);
        };
        self.publish();
        // The metadata goes first: a crash after it leaves only stray directories, which a
        // later create of the same name removes.
        let path = join(TOPICS_DIR, &format!("{name}.json"));
        if let Err(e) = self.env.volume().remove_file(&path).await {
            // The file may be gone or not. Still there: the topic lives on, and a retry of the
            // delete finds it. Gone: its partitions stop (a create of the same name removes
            // what they leave).
            match self.read_meta(name).await {
                Ok(Some(meta)) if meta.topic_id == state.meta.topic_id => {
                    self.topics.insert(name.to_string(), state);
                    self.publish();
                }
                _ => self.stop_topic(&state, false).await,
            }
            return Err(storage(e));
        }
        if crate::crash_point!("topics.before_partition_removal") {
            crate::park_for_crash().await;
        }
        self.stop_topic(&state, true).await;
        self.assignments.remove(name).await;
        tracing::info!(topic = name, "deleted topic");
        self.metrics.topic_deleted(name);
        Ok(state.meta.topic_id)
    }

    pub(super) async fn create_partitions(&mut self, name: &str, count: i32, validate_only: bool) -> CoreResult<()> {
        self.read_before_change(name).await;
        let Some(state) = self.topics.get(name) else {
            return Err(CoreError::UnknownTopicOrPartition);
        };
        let current = state.meta.partitions;
        if count <= current {
            return Err(CoreError::InvalidPartitions(format!(
                "Topic currently has {current} partitions, which is higher than the requested {count}."
            )));
        }
        if count > PARTITIONS_MAX {
            return Err(CoreError::InvalidPartitions(format!("Number of partitions must be at most {PARTITIONS_MAX}")));
        }
        if validate_only {
            return Ok(());
        }
        let meta = TopicMeta { partitions: count, ..state.meta.clone() };
        // A stray directory of a deleted topic's partition `p` is emptied by its first owner
        // (`partition::adopt_dir`).
        self.persist(&meta).await?;
        let (existing, assignments) = (state.partitions.clone(), state.assignments.clone());
        let mut state = self.start_partitions(meta, current, existing).await;
        // Reassigned partitions stay where they were sent.
        state.assignments = assignments;
        self.topics.insert(name.to_string(), Arc::new(state));
        self.publish();
        self.reconcile().await;
        Ok(())
    }

    /// Reads a topic's file again before this broker changes it: a change a peer made since the
    /// last rescan (a reassignment, configs) is built on, not written over with what this broker
    /// saw a heartbeat ago. Two brokers changing one topic at the same moment can still race.
    pub(super) async fn read_before_change(&mut self, name: &str) {
        if self.rescan_topic(name.to_string()).await {
            self.publish();
        }
    }

    pub(super) async fn alter_configs(
        &mut self,
        name: &str,
        ops: Vec<ConfigOp>,
        validate_only: bool,
    ) -> CoreResult<()> {
        self.read_before_change(name).await;
        let Some(state) = self.topics.get(name) else {
            return Err(CoreError::UnknownTopicOrPartition);
        };
        let mut configs = state.meta.configs.clone();
        for op in ops {
            match op {
                ConfigOp::Set(k, v) => {
                    validate_topic_config(&k, &v).map_err(CoreError::InvalidConfig)?;
                    configs.insert(k, v);
                }
                ConfigOp::Delete(k) => {
                    configs.remove(&k);
                }
            }
        }
        if validate_only {
            return Ok(());
        }
        let meta = TopicMeta { configs, ..state.meta.clone() };
        self.persist(&meta).await?;
        let settings = self.effective.partition_settings(&meta.configs);
        for p in &state.partitions {
            p.set_config(settings).await;
        }
        let (partitions, assignments) = (state.partitions.clone(), state.assignments.clone());
        self.topics.insert(name.to_string(), Arc::new(TopicState { meta, partitions, assignments }));
        self.publish();
        Ok(())
    }
}
