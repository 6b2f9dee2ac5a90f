//! The topic manager actor: this broker's writer of topic metadata and the owner of every
//! partition actor. It publishes an immutable snapshot of the topics and their partition
//! handles, which connections read to route requests without asking it. This file holds the
//! actor (its handle, mailbox and loop); its four jobs have a file each:
//!
//! - `files`: the topic files on the volume, created, changed, deleted, and read again on every
//!   heartbeat to take on what peers did;
//! - `supervision`: the partition actors, and which of them this broker serves, by claims;
//! - `reassign`: partition reassignments and the replica lists they set;
//! - `broker_configs`: the dynamic broker settings.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use crate::cluster::assignments::AssignmentStore;
use crate::cluster::ownership::Ownership;
use crate::cluster::reassignment::{Assignment, Change, Ongoing};
use crate::cluster::{ClusterView, Kind, MembershipHandle, partition_key};
use crate::config::BrokerConfig;
use crate::env::{Clock, Env, Spawner};
use crate::error::{CoreError, CoreResult};
use crate::partition::PartitionHandle;

mod acls;
mod broker_configs;
mod files;
mod group_configs;
pub mod quotas;
mod reassign;
mod supervision;

pub use crate::cluster::group_configs::{GROUP_CONFIGS_FILE, GroupConfigs};
pub use broker_configs::BROKER_CONFIGS_FILE;
pub use files::{TOPICS_DIR, read_meta, validate_topic_name};

/// How often a client's request can make this broker look for one unknown topic's file.
const REFRESH_MS: u64 = 200;
/// Unknown topic names remembered for that, at most.
const REFRESHED_MAX: usize = 10_000;

const QUEUE_CAPACITY: usize = 256;
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
    /// Each group's configs (the GROUP resource), over the broker's defaults.
    pub group_configs: Arc<GroupConfigs>,
    /// The broker configuration in force: static settings with the dynamic overrides applied.
    pub effective: Arc<BrokerConfig>,
    /// The ACL bindings in force, as last read from the volume.
    pub acls: Arc<crate::acl::authorizer::AclSet>,
    /// The client quotas in force, as last read from the volume.
    pub quotas: Arc<crate::quota::ClientQuotas>,
    /// Quota files that could not be read at the last rescan.
    pub quota_files_unreadable: usize,
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
    AlterGroupConfigs {
        group_id: String,
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
    /// The group configs as the volume has them now (a share session opening).
    RefreshGroupConfigs(oneshot::Sender<()>),
    CreateAcls(Vec<crate::acl::AclBinding>, oneshot::Sender<Vec<CoreResult<()>>>),
    DeleteAcls(Vec<crate::acl::AclFilter>, oneshot::Sender<Vec<CoreResult<Vec<crate::acl::AclBinding>>>>),
    AlterQuotas {
        alterations: Vec<(crate::quota::QuotaEntity, Vec<crate::quota::QuotaOp>)>,
        validate_only: bool,
        reply: oneshot::Sender<Vec<quotas::AlterOutcome>>,
    },
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

    /// Changes a group's configs (the GROUP resource); every broker takes them on within a
    /// heartbeat.
    pub async fn alter_group_configs(
        &self,
        group_id: String,
        ops: Vec<ConfigOp>,
        validate_only: bool,
    ) -> CoreResult<()> {
        self.ask(|reply| Command::AlterGroupConfigs { group_id, ops, validate_only, reply })
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

    /// The group configs read again now: a share session opened on this broker right after
    /// the group's configs were altered on a peer (the lock duration, the delivery limit, the
    /// isolation level) works under them, not under the ones the last rescan saw.
    pub async fn refresh_group_configs(&self) {
        self.ask(Command::RefreshGroupConfigs).await;
    }

    /// CreateAcls: per binding, written or why not.
    pub async fn create_acls(&self, bindings: Vec<crate::acl::AclBinding>) -> CoreResult<Vec<CoreResult<()>>> {
        self.ask(|reply| Command::CreateAcls(bindings, reply)).await.ok_or(CoreError::CoordinatorNotAvailable)
    }

    /// AlterClientQuotas: per entity, altered, refused or why not stored.
    pub async fn alter_quotas(
        &self,
        alterations: Vec<(crate::quota::QuotaEntity, Vec<crate::quota::QuotaOp>)>,
        validate_only: bool,
    ) -> CoreResult<Vec<quotas::AlterOutcome>> {
        self.ask(|reply| Command::AlterQuotas { alterations, validate_only, reply })
            .await
            .ok_or(CoreError::CoordinatorNotAvailable)
    }

    /// DeleteAcls: per filter, the bindings deleted or why not.
    pub async fn delete_acls(
        &self,
        filters: Vec<crate::acl::AclFilter>,
    ) -> CoreResult<Vec<CoreResult<Vec<crate::acl::AclBinding>>>> {
        self.ask(|reply| Command::DeleteAcls(filters, reply)).await.ok_or(CoreError::CoordinatorNotAvailable)
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

/// A partition's directory on the volume, named by its ownership key.
pub fn partition_dir(topic: &str, partition: i32) -> String {
    partition_key(topic, partition)
}

pub(super) struct TopicManager<E: Env> {
    env: E,
    /// The static configuration, as started.
    config: Arc<BrokerConfig>,
    /// Dynamic overrides, and the configuration with them applied.
    broker_overrides: BTreeMap<String, String>,
    effective: Arc<BrokerConfig>,
    group_configs: Arc<GroupConfigs>,
    /// The ACL binding files read, and the set they make.
    acl_files: crate::cluster::acls::AclFiles,
    acls: Arc<crate::acl::authorizer::AclSet>,
    quotas: Arc<crate::quota::ClientQuotas>,
    quota_files_unreadable: usize,
    topics: BTreeMap<String, Arc<TopicState>>,
    snapshot: watch::Sender<Arc<MetadataSnapshot>>,
    data_version: watch::Sender<u64>,
    /// The broker's dead-letter writer, for the partitions' share partitions (KIP-1191).
    dead_letters: crate::partition::share::DeadLetterSender,
    /// How many of its partitions the broker cleans at once (`log.cleaner.threads`).
    cleaner_slots: crate::partition::CleanerSlots,
    /// What operators see: the partitions' logs count their syncs into it.
    metrics: Arc<crate::metrics::BrokerMetrics>,
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
    dead_letters: crate::partition::share::DeadLetterSender,
    metrics: Arc<crate::metrics::BrokerMetrics>,
) -> CoreResult<TopicsHandle> {
    let empty = MetadataSnapshot {
        topics: BTreeMap::new(),
        names_by_id: BTreeMap::new(),
        broker_overrides: BTreeMap::new(),
        group_configs: Arc::new(GroupConfigs::new()),
        effective: config.clone(),
        acls: Arc::default(),
        quotas: Arc::default(),
        quota_files_unreadable: 0,
    };
    let (snapshot, snapshot_rx) = watch::channel(Arc::new(empty));
    let (data_version, data_version_rx) = watch::channel(0u64);
    let mut manager = TopicManager {
        env: env.clone(),
        effective: config.clone(),
        config,
        broker_overrides: BTreeMap::new(),
        group_configs: Arc::new(GroupConfigs::new()),
        acl_files: Default::default(),
        acls: Arc::default(),
        quotas: Arc::default(),
        quota_files_unreadable: 0,
        topics: BTreeMap::new(),
        snapshot,
        data_version,
        dead_letters,
        cleaner_slots: Default::default(),
        membership,
        ownership: Ownership::new(
            env.volume().clone(),
            Kind::Partition,
            |(topic, p)| partition_key(topic, *p),
            metrics.ownership(Kind::Partition.name()),
        ),
        metrics,
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

pub(super) fn storage(e: std::io::Error) -> CoreError {
    CoreError::Storage(e.to_string())
}

impl<E: Env> TopicManager<E> {
    /// Takes on what peers did to the topics, then claims and gives up partitions as the
    /// view now says.
    pub(super) async fn catch_up(&mut self) {
        self.rescan().await;
        self.reconcile().await;
    }

    pub(super) fn publish(&self) {
        let names_by_id: BTreeMap<TopicId, String> =
            self.topics.values().map(|t| (t.meta.topic_id, t.meta.name.clone())).collect();
        assert_eq!(names_by_id.len(), self.topics.len(), "a topic id names one topic");
        for (name, t) in &self.topics {
            assert_eq!(*name, t.meta.name, "a topic is known by its own name");
            assert_eq!(t.partitions.len(), t.meta.partitions as usize, "an actor for every partition");
        }
        self.snapshot.send_replace(Arc::new(MetadataSnapshot {
            topics: self.topics.clone(),
            names_by_id,
            broker_overrides: self.broker_overrides.clone(),
            group_configs: self.group_configs.clone(),
            effective: self.effective.clone(),
            acls: self.acls.clone(),
            quotas: self.quotas.clone(),
            quota_files_unreadable: self.quota_files_unreadable,
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
                Some(Command::CreateAcls(bindings, reply)) => {
                    let _ = reply.send(self.create_acls(bindings).await);
                }
                Some(Command::DeleteAcls(filters, reply)) => {
                    let _ = reply.send(self.delete_acls(filters).await);
                }
                Some(Command::AlterQuotas { alterations, validate_only, reply }) => {
                    let _ = reply.send(self.alter_quotas(alterations, validate_only).await);
                }
                Some(Command::RefreshGroupConfigs(reply)) => {
                    if self.rescan_group_configs().await {
                        self.publish();
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
                Some(Command::AlterGroupConfigs { group_id, ops, validate_only, reply }) => {
                    let _ = reply.send(self.alter_group_configs(&group_id, ops, validate_only).await);
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
}
