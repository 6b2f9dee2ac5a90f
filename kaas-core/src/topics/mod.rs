//! The topic manager actor: this broker's writer of topic metadata (`__cluster/topics/<name>.json`)
//! and the owner of every partition actor. It publishes an immutable snapshot of the topics and
//! their partition handles, which connections read to route requests without asking it.
//!
//! In a cluster every broker runs one: a topic is created by exclusive create of its file (of two
//! brokers racing, one wins and both end up with its topic id), and each broker reads the topic
//! files again on every membership heartbeat to learn of peers' creations, deletions and
//! changes. It also reconciles partition ownership against the membership's view: it claims
//! the partitions the view gives this broker (`cluster::claims`), tells their actors to serve
//! them, and disowns and releases those it should no longer own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use crate::cluster::assignments::AssignmentStore;
use crate::cluster::ownership::Ownership;
use crate::cluster::reassignment::{self, Assignment, Change, Ongoing};
use crate::cluster::{ClusterView, Kind, MembershipHandle, partition_key};
use crate::config::{BrokerConfig, validate_topic_config};
use crate::env::{Clock, Env, Rng, Spawner, Volume, join};
use crate::error::{CoreError, CoreResult};
use crate::partition::{self, PartitionHandle};

pub const TOPICS_DIR: &str = "__cluster/topics";
/// Dynamic broker settings (IncrementalAlterConfigs on the broker resource).
/// How often a client's request can make this broker look for one unknown topic's file.
const REFRESH_MS: u64 = 200;
/// Unknown topic names remembered for that, at most.
const REFRESHED_MAX: usize = 10_000;

pub const BROKER_CONFIGS_FILE: &str = "__cluster/broker-configs.json";
const BROKER_CONFIGS_FORMAT_VERSION: u32 = 1;
const TOPIC_FORMAT_VERSION: u32 = 1;
const QUEUE_CAPACITY: usize = 256;
/// Kafka's limit on topic name length.
const TOPIC_NAME_MAX_LEN: usize = 249;
/// Times a reassignment is made again on top of a peer's that came first, before it gives up.
const REASSIGN_TRIES: usize = 5;
/// Partitions of one topic; a bound on memory and open files, far above real use.
pub const PARTITIONS_MAX: i32 = 10_000;

pub use crate::cluster::TopicId;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicMeta {
    pub format_version: u32,
    pub name: String,
    pub topic_id: TopicId,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

pub struct TopicState {
    pub meta: TopicMeta,
    pub partitions: Vec<PartitionHandle>,
    /// Replica lists set by AlterPartitionReassignments, by partition (`cluster::assignments`).
    pub assignments: BTreeMap<i32, Assignment>,
}

impl TopicState {
    /// The replicas a reassignment set for partition `p`, in order; empty where none did.
    pub fn preferred(&self, p: i32) -> &[i32] {
        self.assignments.get(&p).map_or(&[], |a| a.replicas.as_slice())
    }

    /// The broker that should own partition `p` by `view`: the first live broker of its
    /// reassignment's list, else by rendezvous hash.
    pub fn owner(&self, p: i32, view: &ClusterView) -> Option<i32> {
        view.owner_preferring(&partition_dir(&self.meta.name, p), self.preferred(p))
    }
}

/// What connections route by. Replaced whole on every change.
pub struct MetadataSnapshot {
    pub topics: BTreeMap<String, Arc<TopicState>>,
    pub names_by_id: BTreeMap<TopicId, String>,
    /// Dynamic broker overrides, by Kafka name.
    pub broker_overrides: BTreeMap<String, String>,
    /// The broker configuration in force: static settings with the dynamic overrides applied.
    pub effective: Arc<BrokerConfig>,
}

#[derive(Serialize, Deserialize)]
struct BrokerConfigsFile {
    format_version: u32,
    configs: BTreeMap<String, String>,
}

impl MetadataSnapshot {
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionHandle> {
        let t = self.topics.get(topic)?;
        t.partitions.get(usize::try_from(partition).ok()?)
    }

    /// The broker that should own a partition of a known topic by `view` (`TopicState::owner`);
    /// by rendezvous hash for a topic this broker has not read yet.
    pub fn owner(&self, topic: &str, partition: i32, view: &ClusterView) -> Option<i32> {
        match self.topics.get(topic) {
            Some(t) => t.owner(partition, view),
            None => view.owner_of(&partition_dir(topic, partition)),
        }
    }
}

/// How to change one config of a topic (IncrementalAlterConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    Set(String, String),
    Delete(String),
}

pub struct CreateTopic {
    pub name: String,
    /// -1: `num.partitions`.
    pub partitions: i32,
    /// -1: `default.replication.factor`.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    pub validate_only: bool,
}

enum Command {
    Create(CreateTopic, oneshot::Sender<CoreResult<TopicMeta>>),
    Delete(String, oneshot::Sender<CoreResult<TopicId>>),
    CreatePartitions {
        name: String,
        count: i32,
        validate_only: bool,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    AlterConfigs {
        name: String,
        ops: Vec<ConfigOp>,
        validate_only: bool,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    AlterBrokerConfigs {
        ops: Vec<ConfigOp>,
        validate_only: bool,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    Reassign {
        name: String,
        changes: Vec<(i32, Change)>,
        allow_replication_factor_change: bool,
        deadline: tokio::time::Instant,
        reply: oneshot::Sender<CoreResult<Vec<CoreResult<()>>>>,
    },
    ListReassignments(Option<Vec<(String, Vec<i32>)>>, oneshot::Sender<Vec<(String, Vec<Ongoing>)>>),
    Shutdown(oneshot::Sender<()>),
    /// Producer epochs to refuse below, for every partition of this broker, those it starts
    /// later included.
    Fence(Arc<BTreeMap<i64, i16>>),
    /// Topics a client named that this broker does not know: read their files now.
    Refresh(Vec<String>, oneshot::Sender<()>),
    /// An admin read: every topic and the broker configs as the volume has them now, unless a
    /// full rescan began after the caller saw `rescans` at this count.
    RefreshAll(u64, oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct TopicsHandle {
    tx: mpsc::Sender<Command>,
    snapshot: watch::Receiver<Arc<MetadataSnapshot>>,
    /// Bumped on every high watermark move of any partition.
    pub data_version: watch::Receiver<u64>,
    /// Full rescans begun, so that admin reads asked together share one.
    rescans: Arc<AtomicU64>,
}

impl TopicsHandle {
    pub fn snapshot(&self) -> Arc<MetadataSnapshot> {
        self.snapshot.borrow().clone()
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.ok()?;
        rx.await.ok()
    }

    pub async fn create(&self, request: CreateTopic) -> CoreResult<TopicMeta> {
        self.ask(|r| Command::Create(request, r)).await.unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    pub async fn delete(&self, name: String) -> CoreResult<TopicId> {
        self.ask(|r| Command::Delete(name, r)).await.unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    pub async fn create_partitions(&self, name: String, count: i32, validate_only: bool) -> CoreResult<()> {
        self.ask(|reply| Command::CreatePartitions { name, count, validate_only, reply })
            .await
            .unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    pub async fn alter_configs(&self, name: String, ops: Vec<ConfigOp>, validate_only: bool) -> CoreResult<()> {
        self.ask(|reply| Command::AlterConfigs { name, ops, validate_only, reply })
            .await
            .unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    /// Changes dynamic broker settings; every partition picks up the new defaults.
    pub async fn alter_broker_configs(&self, ops: Vec<ConfigOp>, validate_only: bool) -> CoreResult<()> {
        self.ask(|reply| Command::AlterBrokerConfigs { ops, validate_only, reply })
            .await
            .unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    /// Sets or cancels the reassignments of partitions of topic `name`: one result per change,
    /// in order; an error of the whole (unknown topic, the volume) applies to every one. Not
    /// begun past `deadline` (REQUEST_TIMED_OUT), as Apache's controller drops a request whose
    /// timeout ran out while it waited: a client that gave up on it and went on may rely on it
    /// not taking effect later.
    pub async fn reassign(
        &self,
        name: String,
        changes: Vec<(i32, Change)>,
        allow_replication_factor_change: bool,
        deadline: tokio::time::Instant,
    ) -> CoreResult<Vec<CoreResult<()>>> {
        self.ask(|reply| Command::Reassign { name, changes, allow_replication_factor_change, deadline, reply })
            .await
            .unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    /// The reassignments in progress, of every topic or of the partitions named, by topic.
    pub async fn reassignments(&self, wanted: Option<Vec<(String, Vec<i32>)>>) -> Vec<(String, Vec<Ongoing>)> {
        self.ask(|reply| Command::ListReassignments(wanted, reply)).await.unwrap_or_default()
    }

    /// Creates the topic with broker defaults if it does not exist (auto.create.topics.enable).
    pub async fn ensure(&self, name: &str) -> CoreResult<()> {
        if self.snapshot().topics.contains_key(name) {
            return Ok(());
        }
        let request = CreateTopic {
            name: name.to_string(),
            partitions: -1,
            replication_factor: -1,
            configs: BTreeMap::new(),
            validate_only: false,
        };
        match self.create(request).await {
            Ok(_) | Err(CoreError::TopicAlreadyExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads the files of `names`, topics a client named that this broker does not know (yet),
    /// and claims what the view gives it of them: a peer's CreateTopics is served here at once,
    /// not a heartbeat later. At most once per topic name in `REFRESH_MS`.
    pub async fn refresh<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let snapshot = self.snapshot();
        // The produce path calls this on every request: nothing is allocated for known topics.
        let unknown: Vec<String> =
            names.into_iter().filter(|n| !snapshot.topics.contains_key(*n)).map(str::to_string).collect();
        if !unknown.is_empty() {
            self.ask(|reply| Command::Refresh(unknown, reply)).await;
        }
    }

    /// Topics named by id (Fetch v13+) that this broker does not know: every topic file is read
    /// again (one rescan shared with the reads asked together), as ids are not file names.
    pub async fn refresh_ids<'a>(&self, ids: impl IntoIterator<Item = &'a [u8; 16]>) {
        let snapshot = self.snapshot();
        if ids.into_iter().any(|id| !snapshot.names_by_id.contains_key(id)) {
            self.refresh_all().await;
        }
    }

    /// For admin reads (listing topics, describing configs): what peers changed is read now, so
    /// that a client sees its own CreateTopics or AlterConfigs on whichever broker it asks next,
    /// as it would from Apache's brokers, which apply the metadata log before answering much.
    pub async fn refresh_all(&self) {
        let seen = self.rescans.load(Ordering::Acquire);
        self.ask(|reply| Command::RefreshAll(seen, reply)).await;
    }

    /// Records fences for every partition this broker starts from now on too: a partition
    /// of a topic this broker learns of later must refuse a producer's fenced epochs as well.
    pub async fn fence(&self, epochs: Arc<BTreeMap<i64, i16>>) {
        let _ = self.tx.send(Command::Fence(epochs)).await;
    }

    /// Stops every partition actor after a final sync.
    pub async fn shutdown(&self) {
        self.ask(Command::Shutdown).await;
    }
}

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

/// A partition's directory on the volume, named by its ownership key.
pub fn partition_dir(topic: &str, partition: i32) -> String {
    partition_key(topic, partition)
}

struct TopicManager<E: Env> {
    env: E,
    /// The static configuration, as started.
    config: Arc<BrokerConfig>,
    /// Dynamic overrides, and the configuration with them applied.
    broker_overrides: BTreeMap<String, String>,
    effective: Arc<BrokerConfig>,
    topics: BTreeMap<String, Arc<TopicState>>,
    snapshot: watch::Sender<Arc<MetadataSnapshot>>,
    data_version: watch::Sender<u64>,
    membership: MembershipHandle,
    /// The partitions this broker holds: (topic, partition) -> epoch and lease session.
    ownership: Ownership<E::Volume, (String, i32)>,
    assignments: AssignmentStore<E::Volume>,
    /// Every fence applied on this broker (producer id -> epoch), for partitions started later.
    fences: BTreeMap<i64, i16>,
    /// When each unknown topic name was last looked up by `refresh`.
    refreshed: BTreeMap<String, tokio::time::Instant>,
    /// Full rescans begun (shared with the handles).
    rescans: Arc<AtomicU64>,
}

/// Loads every topic from the volume, opens (and so recovers) every partition, and starts the
/// manager. Returns once all partitions are open.
pub async fn start<E: Env>(
    env: &E,
    config: Arc<BrokerConfig>,
    membership: MembershipHandle,
) -> CoreResult<TopicsHandle> {
    let empty = MetadataSnapshot {
        topics: BTreeMap::new(),
        names_by_id: BTreeMap::new(),
        broker_overrides: BTreeMap::new(),
        effective: config.clone(),
    };
    let (snapshot, snapshot_rx) = watch::channel(Arc::new(empty));
    let (data_version, data_version_rx) = watch::channel(0u64);
    let mut manager = TopicManager {
        env: env.clone(),
        effective: config.clone(),
        config,
        broker_overrides: BTreeMap::new(),
        topics: BTreeMap::new(),
        snapshot,
        data_version,
        membership,
        ownership: Ownership::new(env.volume().clone(), Kind::Partition, |(topic, p)| partition_key(topic, *p)),
        assignments: AssignmentStore::new(env.volume().clone()),
        fences: BTreeMap::new(),
        refreshed: BTreeMap::new(),
        rescans: Arc::new(AtomicU64::new(0)),
    };
    let rescans = manager.rescans.clone();
    manager.load().await?;
    manager.reconcile().await;
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    env.spawner().spawn("topics", manager.run(rx));
    Ok(TopicsHandle { tx, snapshot: snapshot_rx, data_version: data_version_rx, rescans })
}

fn storage(e: std::io::Error) -> CoreError {
    CoreError::Storage(e.to_string())
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
    Ok(Some(meta))
}

impl<E: Env> TopicManager<E> {
    async fn load(&mut self) -> CoreResult<()> {
        let volume = self.env.volume().clone();
        if let Some(raw) = volume.read(BROKER_CONFIGS_FILE).await.map_err(storage)? {
            let file: BrokerConfigsFile = serde_json::from_slice(&raw)
                .map_err(|e| CoreError::Storage(format!("{BROKER_CONFIGS_FILE}: unreadable: {e}")))?;
            if file.format_version != BROKER_CONFIGS_FORMAT_VERSION {
                return Err(CoreError::Storage(format!(
                    "{BROKER_CONFIGS_FILE}: unknown format version {}",
                    file.format_version
                )));
            }
            self.effective = Arc::new(self.config.with_dynamic(&file.configs).map_err(CoreError::Storage)?);
            self.broker_overrides = file.configs;
        }
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

    async fn read_meta(&self, topic: &str) -> CoreResult<Option<TopicMeta>> {
        read_meta(self.env.volume(), topic).await
    }

    /// Picks up what peers did to the topics: new topics, deletions, new partitions and config
    /// changes. Names come from a listing (new topics may show late on NFS); a topic missing
    /// from it is confirmed by reading its file by name before it is dropped.
    ///
    /// One publish at the end, and broker configs read before topics: a peer's topic change
    /// made before its broker change is never seen here after it, as Apache's metadata log
    /// orders them.
    async fn rescan(&mut self) {
        self.rescans.fetch_add(1, Ordering::AcqRel);
        let mut changed = self.rescan_broker_configs().await;
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

    /// Takes on what peers did to the topics, then claims and gives up partitions as the
    /// view now says.
    async fn catch_up(&mut self) {
        self.rescan().await;
        self.reconcile().await;
    }

    /// Reads one topic's file again and takes on what a peer changed: a creation, deletion,
    /// re-creation, new partitions or configs. Whether anything changed.
    async fn rescan_topic(&mut self, name: String) -> bool {
        let changed = self.rescan_topic_meta(&name).await;
        self.rescan_assignments(&name).await || changed
    }

    async fn rescan_topic_meta(&mut self, name: &str) -> bool {
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
    async fn durable_topics_dir(&self) -> bool {
        match self.env.volume().sync_dir(TOPICS_DIR).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot sync the topics directory; a new topic waits");
                false
            }
        }
    }

    /// Stops a topic's partition actors, releasing those this broker owned.
    async fn stop_topic(&mut self, state: &TopicState, delete: bool) {
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
    async fn reconcile(&mut self) {
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

    async fn start_partitions(&self, meta: TopicMeta, from: i32, mut partitions: Vec<PartitionHandle>) -> TopicState {
        let settings = self.effective.partition_settings(&meta.configs);
        for p in from..meta.partitions {
            let dir = partition_dir(&meta.name, p);
            let cluster = self.membership.subscribe();
            let (data_version, topic_id) = (self.data_version.clone(), meta.topic_id);
            let partition = partition::start(&self.env, dir, topic_id, settings, data_version, cluster).await;
            if !self.fences.is_empty() {
                partition.fence(Arc::new(self.fences.clone())).await;
            }
            partitions.push(partition);
        }
        TopicState { meta, partitions, assignments: BTreeMap::new() }
    }

    /// Reads a known topic's assignments again and takes on what changed. Whether anything did.
    async fn rescan_assignments(&mut self, name: &str) -> bool {
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

    fn publish(&self) {
        let names_by_id = self.topics.values().map(|t| (t.meta.topic_id, t.meta.name.clone())).collect();
        self.snapshot.send_replace(Arc::new(MetadataSnapshot {
            topics: self.topics.clone(),
            names_by_id,
            broker_overrides: self.broker_overrides.clone(),
            effective: self.effective.clone(),
        }));
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let interval_ms = self.config.log_retention_check_interval_ms.max(1);
        let mut next_retention = self.env.clock().monotonic() + std::time::Duration::from_millis(interval_ms);
        let mut cluster = self.membership.subscribe();
        let mut membership_alive = true;
        loop {
            let command = tokio::select! {
                biased;
                command = rx.recv() => command,
                // The membership actor is gone at shutdown: its view then never changes again.
                changed = cluster.changed(), if membership_alive => {
                    match changed {
                        Ok(()) => {
                            self.catch_up().await;
                        }
                        Err(_) => membership_alive = false,
                    }
                    continue;
                }
                _ = self.env.clock().sleep_until(next_retention) => {
                    next_retention += std::time::Duration::from_millis(interval_ms);
                    for t in self.topics.values() {
                        for p in &t.partitions {
                            p.enforce_retention().await;
                        }
                    }
                    continue;
                }
            };
            match command {
                None => return,
                Some(Command::Refresh(names, reply)) => {
                    let now = self.env.clock().monotonic();
                    if self.refreshed.len() > REFRESHED_MAX {
                        self.refreshed.clear();
                    }
                    let mut changed = false;
                    for name in names {
                        if self
                            .refreshed
                            .get(&name)
                            .is_some_and(|&at| now < at + std::time::Duration::from_millis(REFRESH_MS))
                        {
                            continue;
                        }
                        self.refreshed.insert(name.clone(), now);
                        changed |= self.rescan_topic(name).await;
                    }
                    if changed {
                        self.publish();
                        self.reconcile().await;
                    }
                    let _ = reply.send(());
                }
                Some(Command::RefreshAll(seen, reply)) => {
                    // The actor is serial: a count past `seen` is a rescan begun, and finished,
                    // after the caller asked.
                    if self.rescans.load(Ordering::Acquire) == seen {
                        self.catch_up().await;
                    }
                    let _ = reply.send(());
                }
                Some(Command::Fence(epochs)) => {
                    for (&producer_id, &producer_epoch) in epochs.iter() {
                        let fenced = self.fences.entry(producer_id).or_insert(producer_epoch);
                        *fenced = (*fenced).max(producer_epoch);
                    }
                    // Also to the partitions started since the caller looked.
                    for t in self.topics.values() {
                        for p in &t.partitions {
                            p.fence(epochs.clone()).await;
                        }
                    }
                }
                Some(Command::Shutdown(reply)) => {
                    // Everything is handed over at once: released claims let peers take over
                    // without waiting for this broker's lease to run out.
                    let topics: Vec<Arc<TopicState>> = self.topics.values().cloned().collect();
                    for t in topics {
                        self.stop_topic(&t, false).await;
                    }
                    let _ = reply.send(());
                    return;
                }
                Some(Command::Create(request, reply)) => {
                    let _ = reply.send(self.create(request).await);
                }
                Some(Command::Delete(name, reply)) => {
                    let _ = reply.send(self.delete(&name).await);
                }
                Some(Command::CreatePartitions { name, count, validate_only, reply }) => {
                    let _ = reply.send(self.create_partitions(&name, count, validate_only).await);
                }
                Some(Command::AlterConfigs { name, ops, validate_only, reply }) => {
                    let _ = reply.send(self.alter_configs(&name, ops, validate_only).await);
                }
                Some(Command::AlterBrokerConfigs { ops, validate_only, reply }) => {
                    let _ = reply.send(self.alter_broker_configs(ops, validate_only).await);
                }
                Some(Command::Reassign { name, changes, allow_replication_factor_change, deadline, reply }) => {
                    let reassigned = self.reassign(&name, changes, allow_replication_factor_change, deadline);
                    let _ = reply.send(reassigned.await);
                }
                Some(Command::ListReassignments(wanted, reply)) => {
                    let _ = reply.send(self.reassignments(wanted).await);
                }
            }
        }
    }

    async fn persist(&self, meta: &TopicMeta) -> CoreResult<()> {
        let raw = serde_json::to_vec_pretty(meta).expect("serialisable");
        let path = join(TOPICS_DIR, &format!("{}.json", meta.name));
        self.env.volume().write_atomic(&path, Bytes::from(raw)).await.map_err(storage)
    }

    async fn create(&mut self, request: CreateTopic) -> CoreResult<TopicMeta> {
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

    async fn delete(&mut self, name: &str) -> CoreResult<TopicId> {
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
        Ok(state.meta.topic_id)
    }

    async fn create_partitions(&mut self, name: &str, count: i32, validate_only: bool) -> CoreResult<()> {
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

    /// Applies reassignment changes on top of the newest revision of the topic's assignments,
    /// and takes the result on. A peer that made that revision's successor first wins; the
    /// changes are then made again on top of its (`cluster::assignments`).
    async fn reassign(
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

    async fn lease_exists(&self, broker_id: i32) -> CoreResult<bool> {
        if broker_id < 0 {
            return Ok(false);
        }
        let lease = crate::cluster::lease::path(broker_id);
        Ok(self.env.volume().read(&lease).await.map_err(storage)?.is_some())
    }

    /// The reassignments in progress among `wanted` (every topic's if `None`), by topic.
    async fn reassignments(&mut self, wanted: Option<Vec<(String, Vec<i32>)>>) -> Vec<(String, Vec<Ongoing>)> {
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

    /// Reads a topic's file again before this broker changes it: a change a peer made since the
    /// last rescan (a reassignment, configs) is built on, not written over with what this broker
    /// saw a heartbeat ago. Two brokers changing one topic at the same moment can still race.
    async fn read_before_change(&mut self, name: &str) {
        if self.rescan_topic(name.to_string()).await {
            self.publish();
        }
    }

    async fn alter_configs(&mut self, name: &str, ops: Vec<ConfigOp>, validate_only: bool) -> CoreResult<()> {
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

    async fn alter_broker_configs(&mut self, ops: Vec<ConfigOp>, validate_only: bool) -> CoreResult<()> {
        let mut overrides = self.broker_overrides.clone();
        for op in ops {
            match op {
                ConfigOp::Set(k, v) => overrides.insert(k, v),
                ConfigOp::Delete(k) => overrides.remove(&k),
            };
        }
        let effective = self.config.with_dynamic(&overrides).map_err(CoreError::InvalidConfig)?;
        if validate_only {
            return Ok(());
        }
        let file = BrokerConfigsFile { format_version: BROKER_CONFIGS_FORMAT_VERSION, configs: overrides.clone() };
        let raw = serde_json::to_vec_pretty(&file).expect("serialisable");
        self.env.volume().write_atomic(BROKER_CONFIGS_FILE, Bytes::from(raw)).await.map_err(storage)?;
        self.apply_broker_configs(overrides, effective).await;
        self.publish();
        Ok(())
    }

    /// Takes dynamic broker configs on, and hands every partition its new settings.
    async fn apply_broker_configs(&mut self, overrides: BTreeMap<String, String>, effective: BrokerConfig) {
        self.broker_overrides = overrides;
        self.effective = Arc::new(effective);
        for t in self.topics.values() {
            let settings = self.effective.partition_settings(&t.meta.configs);
            for p in &t.partitions {
                p.set_config(settings).await;
            }
        }
    }

    /// A peer's AlterConfigs of the broker resource, picked up on the rescan; whether anything
    /// changed. The caller publishes, after the topics are read too.
    async fn rescan_broker_configs(&mut self) -> bool {
        let read = match self.env.volume().read(BROKER_CONFIGS_FILE).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the dynamic broker configs");
                return false;
            }
        };
        let overrides = match read.map(|raw| serde_json::from_slice::<BrokerConfigsFile>(&raw)) {
            None => BTreeMap::new(),
            Some(Ok(file)) if file.format_version == BROKER_CONFIGS_FORMAT_VERSION => file.configs,
            // Never guessed at: the configs this broker has stand.
            Some(_) => {
                tracing::warn!("{BROKER_CONFIGS_FILE}: unreadable or of an unknown format version");
                return false;
            }
        };
        if overrides == self.broker_overrides {
            return false;
        }
        match self.config.with_dynamic(&overrides) {
            Ok(effective) => {
                self.apply_broker_configs(overrides, effective).await;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "a peer's dynamic broker configs do not apply here");
                false
            }
        }
    }
}
