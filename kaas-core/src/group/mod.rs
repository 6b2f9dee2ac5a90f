//! The group coordinator actor: the classic consumer groups this broker owns and their
//! committed offsets. Membership lives in memory (members rejoin after a restart or a move of
//! the group to another broker); committed offsets are durable before they are acked, one
//! atomically replaced file per group and ownership epoch under `__cluster/groups/`.
//!
//! In a cluster a group is owned like a partition (`cluster::claims`, key `group_key`): the
//! coordinator claims a group the membership's view gives it on its first request (or when it
//! finds its file), loads it from the volume, and answers NOT_COORDINATOR for groups another
//! broker should own (COORDINATOR_LOAD_IN_PROGRESS while the old owner's claim stands). A write
//! is acked only if the lease is still valid after it.
//!
//! Transactional offsets (KIP-447) are staged per producer id in the same file and made
//! committed or dropped when the transaction coordinator ends the transaction. A staging is
//! refused if the producer's transaction ended after the coordinator verified it (the guard),
//! so no late TxnOffsetCommit can leave offsets staged that nothing will ever end.

pub mod assignor;
pub mod consumer;
pub mod embedded;
pub mod migration;
pub mod offsets;
pub mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Duration, Instant};

use crate::cluster::ownership::Ownership;
use crate::cluster::{ClusterView, Kind, MembershipHandle, group_key};
use crate::config::BrokerConfig;
use crate::env::{Clock, Env, Rng, Spawner};
use crate::error::{CoreError, CoreResult};
use crate::topics::MetadataSnapshot;
use assignor::TopicMetadata;
use consumer::{ClassicJoin, ConsumerGroup, Heartbeat, HeartbeatAnswer};
pub use offsets::CommittedOffset;
use offsets::OffsetStore;
use state::{Group, JoinAction, Reply};
pub use state::{GroupState, JoinOutcome, JoinRequest, SyncOutcome};

const QUEUE_CAPACITY: usize = 1024;
/// How long the actor sleeps when no group has a deadline.
const IDLE_TICK_MS: u64 = 1000;

pub type TopicPartition = (String, i32);

#[derive(Debug, Clone)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub group_id: String,
    /// None: the group does not exist (Kafka describes it as Dead).
    pub state: Option<GroupState>,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberDescription>,
}

pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// Apache's name of the state (a classic or a consumer group's).
    pub state: &'static str,
    /// "classic" or "consumer" (ListGroups v5).
    pub group_type: &'static str,
}

pub struct CommitRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub offsets: Vec<(TopicPartition, CommittedOffset)>,
}

/// The offsets of a partition as OffsetFetch answers them: the committed offset (None if
/// nothing is committed), or UNSTABLE_OFFSET_COMMIT when the fetch requires stable offsets and
/// a transaction has one staged.
pub type FetchedOffset = (TopicPartition, CoreResult<Option<CommittedOffset>>);

enum Command {
    /// JoinGroup; the topics name what a member of a consumer group owns.
    Join(String, JoinRequest, Arc<MetadataSnapshot>, oneshot::Sender<CoreResult<JoinOutcome>>),
    Sync {
        group_id: String,
        member_id: String,
        instance: Option<String>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
        reply: oneshot::Sender<CoreResult<SyncOutcome>>,
    },
    Heartbeat {
        group_id: String,
        member_id: String,
        instance: Option<String>,
        generation_id: i32,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    Leave {
        group_id: String,
        members: Vec<(String, Option<String>)>,
        reply: oneshot::Sender<CoreResult<Vec<CoreResult<()>>>>,
    },
    Commit(CommitRequest, oneshot::Sender<CoreResult<()>>),
    TxnGuard(oneshot::Sender<u64>),
    TxnCommit {
        request: CommitRequest,
        producer_id: i64,
        guard: u64,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    CompleteTxn {
        group_id: String,
        producer_id: i64,
        commit: bool,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    Fetch {
        group_id: String,
        partitions: Option<Vec<TopicPartition>>,
        require_stable: bool,
        reply: oneshot::Sender<CoreResult<Vec<FetchedOffset>>>,
    },
    Describe(Vec<String>, oneshot::Sender<Vec<GroupDescription>>),
    /// ConsumerGroupHeartbeat (KIP-848).
    ConsumerHeartbeat {
        group_id: String,
        heartbeat: Heartbeat,
        topics: Arc<MetadataSnapshot>,
        reply: oneshot::Sender<CoreResult<HeartbeatAnswer>>,
    },
    /// ConsumerGroupDescribe: the group as it is (None: no consumer group by that id).
    ConsumerDescribe(String, oneshot::Sender<CoreResult<Option<ConsumerGroup>>>),
    List(oneshot::Sender<Vec<GroupListing>>),
    Delete(Vec<String>, oneshot::Sender<Vec<(String, CoreResult<()>)>>),
    /// OffsetDelete: each partition's result, or the group's error.
    DeleteOffsets {
        group_id: String,
        partitions: Vec<TopicPartition>,
        reply: oneshot::Sender<CoreResult<PartitionResults>>,
    },
}

impl Command {
    /// The group a command is about, if one: the coordinator must own it to answer.
    fn group_id(&self) -> Option<String> {
        match self {
            Command::Join(group_id, ..)
            | Command::Sync { group_id, .. }
            | Command::Heartbeat { group_id, .. }
            | Command::Leave { group_id, .. }
            | Command::CompleteTxn { group_id, .. }
            | Command::Fetch { group_id, .. }
            | Command::DeleteOffsets { group_id, .. }
            | Command::ConsumerHeartbeat { group_id, .. }
            | Command::ConsumerDescribe(group_id, _) => Some(group_id.clone()),
            Command::Commit(request, _) | Command::TxnCommit { request, .. } => Some(request.group_id.clone()),
            Command::TxnGuard(_) | Command::Describe(..) | Command::List(_) | Command::Delete(..) => None,
        }
    }

    /// Answers the command with `error`, without handling it.
    fn refuse(self, error: CoreError) {
        match self {
            Command::Join(_, _, _, reply) => drop(reply.send(Err(error))),
            Command::Sync { reply, .. } => drop(reply.send(Err(error))),
            Command::Heartbeat { reply, .. } => drop(reply.send(Err(error))),
            Command::Leave { reply, .. } => drop(reply.send(Err(error))),
            Command::Commit(_, reply) => drop(reply.send(Err(error))),
            Command::TxnCommit { reply, .. } | Command::CompleteTxn { reply, .. } => drop(reply.send(Err(error))),
            Command::Fetch { reply, .. } => drop(reply.send(Err(error))),
            Command::DeleteOffsets { reply, .. } => drop(reply.send(Err(error))),
            Command::ConsumerHeartbeat { reply, .. } => drop(reply.send(Err(error))),
            Command::ConsumerDescribe(_, reply) => drop(reply.send(Err(error))),
            Command::TxnGuard(_) | Command::Describe(..) | Command::List(_) | Command::Delete(..) => {}
        }
    }
}

/// Each partition of a request and what became of it.
pub type PartitionResults = Vec<(TopicPartition, CoreResult<()>)>;

#[derive(Clone)]
pub struct GroupsHandle {
    tx: mpsc::Sender<Command>,
}

fn gone<T>() -> CoreResult<T> {
    Err(CoreError::CoordinatorNotAvailable)
}

impl GroupsHandle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.ok()?;
        rx.await.ok()
    }

    pub async fn join(
        &self,
        group_id: String,
        request: JoinRequest,
        topics: Arc<MetadataSnapshot>,
    ) -> CoreResult<JoinOutcome> {
        self.ask(|r| Command::Join(group_id, request, topics, r)).await.unwrap_or_else(gone)
    }

    pub async fn sync(
        &self,
        group_id: String,
        member_id: String,
        instance: Option<String>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> CoreResult<SyncOutcome> {
        self.ask(|reply| Command::Sync { group_id, member_id, instance, generation_id, assignments, reply })
            .await
            .unwrap_or_else(gone)
    }

    pub async fn heartbeat(
        &self,
        group_id: String,
        member_id: String,
        instance: Option<String>,
        generation_id: i32,
    ) -> CoreResult<()> {
        self.ask(|reply| Command::Heartbeat { group_id, member_id, instance, generation_id, reply })
            .await
            .unwrap_or_else(gone)
    }

    pub async fn leave(
        &self,
        group_id: String,
        members: Vec<(String, Option<String>)>,
    ) -> CoreResult<Vec<CoreResult<()>>> {
        self.ask(|reply| Command::Leave { group_id, members, reply }).await.unwrap_or_else(gone)
    }

    pub async fn commit(&self, request: CommitRequest) -> CoreResult<()> {
        self.ask(|r| Command::Commit(request, r)).await.unwrap_or_else(gone)
    }

    pub async fn fetch(
        &self,
        group_id: String,
        partitions: Option<Vec<TopicPartition>>,
        require_stable: bool,
    ) -> CoreResult<Vec<FetchedOffset>> {
        self.ask(|reply| Command::Fetch { group_id, partitions, require_stable, reply })
            .await
            .unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    /// The guard to pass to `txn_commit`: read it before the transaction coordinator verifies
    /// the producer's transaction.
    pub async fn txn_guard(&self) -> CoreResult<u64> {
        self.ask(Command::TxnGuard).await.ok_or(CoreError::CoordinatorNotAvailable)
    }

    /// TxnOffsetCommit: stages the offsets for the producer's open transaction.
    pub async fn txn_commit(&self, request: CommitRequest, producer_id: i64, guard: u64) -> CoreResult<()> {
        self.ask(|reply| Command::TxnCommit { request, producer_id, guard, reply }).await.unwrap_or_else(gone)
    }

    /// Ends the producer's staged offsets in the group: committed or dropped. Idempotent.
    pub async fn complete_txn(&self, group_id: String, producer_id: i64, commit: bool) -> CoreResult<()> {
        self.ask(|reply| Command::CompleteTxn { group_id, producer_id, commit, reply }).await.unwrap_or_else(gone)
    }

    /// ConsumerGroupHeartbeat (KIP-848); the assignor gives out the topics of `topics`.
    pub async fn consumer_heartbeat(
        &self,
        group_id: String,
        heartbeat: Heartbeat,
        topics: Arc<MetadataSnapshot>,
    ) -> CoreResult<HeartbeatAnswer> {
        self.ask(|reply| Command::ConsumerHeartbeat { group_id, heartbeat, topics, reply }).await.unwrap_or_else(gone)
    }

    pub async fn consumer_describe(&self, group_id: String) -> CoreResult<Option<ConsumerGroup>> {
        self.ask(|reply| Command::ConsumerDescribe(group_id, reply)).await.unwrap_or_else(gone)
    }

    pub async fn describe(&self, group_ids: Vec<String>) -> CoreResult<Vec<GroupDescription>> {
        self.ask(|r| Command::Describe(group_ids, r)).await.ok_or(CoreError::CoordinatorNotAvailable)
    }

    pub async fn list(&self) -> CoreResult<Vec<GroupListing>> {
        self.ask(Command::List).await.ok_or(CoreError::CoordinatorNotAvailable)
    }

    /// Removes committed offsets of a group (OffsetDelete), as Apache allows it: the group must
    /// exist, and while it has members only a consumer group's offsets of topics none of its
    /// members subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the others; NON_EMPTY_GROUP for
    /// any other protocol).
    pub async fn delete_offsets(
        &self,
        group_id: String,
        partitions: Vec<TopicPartition>,
    ) -> CoreResult<PartitionResults> {
        self.ask(|reply| Command::DeleteOffsets { group_id, partitions, reply }).await.unwrap_or_else(gone)
    }

    pub async fn delete(&self, group_ids: Vec<String>) -> CoreResult<Vec<(String, CoreResult<()>)>> {
        self.ask(|r| Command::Delete(group_ids, r)).await.ok_or(CoreError::CoordinatorNotAvailable)
    }
}

struct GroupCoordinator<E: Env> {
    env: E,
    config: Arc<BrokerConfig>,
    groups: BTreeMap<String, Group>,
    /// Consumer-protocol groups (KIP-848), in memory: a new coordinator starts them afresh.
    consumer_groups: BTreeMap<String, ConsumerGroup>,
    offsets: OffsetStore<E::Volume>,
    parked_joins: BTreeMap<(String, String), oneshot::Sender<CoreResult<JoinOutcome>>>,
    parked_syncs: BTreeMap<(String, String), oneshot::Sender<CoreResult<SyncOutcome>>>,
    /// Transactions ended so far; `last_completion` holds the number of the last one per
    /// (group, producer id). Together they are the TxnOffsetCommit guard.
    completions: u64,
    last_completion: BTreeMap<(String, i64), u64>,
    membership: MembershipHandle,
    /// The groups this broker holds: group id -> epoch and lease session.
    ownership: Ownership<E::Volume, String>,
}

/// Starts the coordinator and takes over the groups with offsets that the view gives it.
pub async fn start<E: Env>(
    env: &E,
    config: Arc<BrokerConfig>,
    membership: MembershipHandle,
) -> CoreResult<GroupsHandle> {
    let offsets = OffsetStore::new(env.volume().clone()).await?;
    let mut coordinator = GroupCoordinator {
        env: env.clone(),
        config,
        groups: BTreeMap::new(),
        consumer_groups: BTreeMap::new(),
        offsets,
        parked_joins: BTreeMap::new(),
        parked_syncs: BTreeMap::new(),
        completions: 0,
        last_completion: BTreeMap::new(),
        ownership: Ownership::new(env.volume().clone(), Kind::Group, |group_id| group_key(group_id)),
        membership,
    };
    coordinator.reconcile().await;
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    env.spawner().spawn("groups", coordinator.run(rx));
    Ok(GroupsHandle { tx })
}

/// A subscribed topic as the assignor sees it (only the topics members subscribe to are
/// looked up, not every topic there is).
fn topic_metadata(topics: &MetadataSnapshot, name: &str) -> Option<TopicMetadata> {
    let t = topics.topics.get(name)?;
    Some(TopicMetadata { topic_id: t.meta.topic_id, name: name.to_string(), partitions: t.partitions.len() as i32 })
}

/// SyncGroup from a classic member of a consumer group: what it owns at its member epoch, in
/// the consumer protocol at its subscription's version.
fn classic_sync_to_consumer_group(
    group: &mut ConsumerGroup,
    member_id: &str,
    instance: Option<String>,
    generation_id: i32,
    now: Instant,
) -> CoreResult<SyncOutcome> {
    let assigned = group.classic_sync(member_id, instance.as_deref(), generation_id, now)?;
    let member =
        group.members.values().find(|m| m.member_id == member_id || (instance.is_some() && m.instance_id == instance));
    let protocols = member.and_then(|m| m.classic.as_ref()).map(|c| c.protocols.clone()).unwrap_or_default();
    let version = migration::assignment_version(&protocols);
    Ok(SyncOutcome {
        protocol_type: "consumer".into(),
        protocol_name: protocols.first().map(|(n, _)| n.clone()).unwrap_or_default(),
        assignment: embedded::encode_assignment(&migration::by_name(&assigned, group), version),
    })
}

impl<E: Env> GroupCoordinator<E> {
    fn group_mut(&mut self, group_id: &str) -> &mut Group {
        let delay = self.config.group_initial_rebalance_delay_ms;
        self.groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id.to_string(), delay))
    }

    /// Whether this broker may answer for `group_id` now, claiming and loading it first if the
    /// view gives it the group and it does not hold it yet.
    async fn acquire(&mut self, group_id: &str) -> CoreResult<()> {
        let view: Arc<ClusterView> = self.membership.view();
        let now = self.env.clock().monotonic();
        let key = group_key(group_id);
        if !view.should_own(&key, now) {
            self.give_up(group_id).await;
            return Err(CoreError::NotCoordinator);
        }
        match self.ownership.held(group_id) {
            Some(held) if held.session == view.session => return Ok(()),
            Some(_) => self.give_up(group_id).await,
            None => {}
        }
        let claimed = match self.ownership.claim(&group_id.to_string(), &view, now).await {
            Ok(Some(claimed)) => claimed,
            Ok(None) => return Err(CoreError::CoordinatorLoadInProgress),
            Err(e) => return Err(CoreError::Storage(e.to_string())),
        };
        if let Err(e) = self.offsets.acquire(group_id, claimed.epoch).await {
            // Reported, never guessed at: the group stays unavailable, and the claim ours.
            tracing::error!(group = group_id, error = ?e, "cannot load the group's offsets");
            self.offsets.release(group_id);
            self.give_up(group_id).await;
            return Err(e);
        }
        self.groups.remove(group_id);
        let delay = self.config.group_initial_rebalance_delay_ms;
        let restored =
            self.offsets.membership(group_id).and_then(|m| Group::restore(group_id.to_string(), delay, m, now));
        match restored {
            // Carried on: its members keep their ids, generation and assignments.
            Some(group) => {
                self.groups.insert(group_id.to_string(), group);
            }
            // A group with offsets exists (Empty) whether or not it has members.
            None if self.offsets.has_offsets(group_id) => {
                self.group_mut(group_id);
            }
            None => {}
        }
        tracing::info!(group = group_id, epoch = claimed.epoch, "took over group");
        Ok(())
    }

    /// Forgets a group this broker no longer owns (its members rejoin at the new owner) and
    /// releases its claim.
    async fn give_up(&mut self, group_id: &str) {
        if self.ownership.held(group_id).is_none() {
            return;
        }
        self.offsets.release(group_id);
        self.groups.remove(group_id);
        self.consumer_groups.remove(group_id);
        let parked: Vec<(String, String)> = self.parked_joins.keys().filter(|(g, _)| g == group_id).cloned().collect();
        for k in parked {
            if let Some(tx) = self.parked_joins.remove(&k) {
                let _ = tx.send(Err(CoreError::NotCoordinator));
            }
        }
        let parked: Vec<(String, String)> = self.parked_syncs.keys().filter(|(g, _)| g == group_id).cloned().collect();
        for k in parked {
            if let Some(tx) = self.parked_syncs.remove(&k) {
                let _ = tx.send(Err(CoreError::NotCoordinator));
            }
        }
        self.ownership.release(group_id).await;
    }

    /// Gives up the groups the view moved away (or that a lapsed lease session held), and takes
    /// over those with offsets on the volume that it gives this broker.
    async fn reconcile(&mut self) {
        self.ownership.retry_releases().await;
        let view = self.membership.view();
        let now = self.env.clock().monotonic();
        let held: Vec<(String, u64)> = self.ownership.iter().map(|(g, held)| (g.clone(), held.session)).collect();
        for (group_id, session) in held {
            if !view.should_own(&group_key(&group_id), now) || session != view.session {
                self.give_up(&group_id).await;
            }
        }
        let listed = match self.offsets.listed().await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(error = ?e, "cannot list groups");
                return;
            }
        };
        for group_id in listed {
            if self.ownership.held(&group_id).is_none() && view.should_own(&group_key(&group_id), now) {
                let _ = self.acquire(&group_id).await;
            }
        }
    }

    /// After a write: the ack may go only if the lease it was made under still holds.
    async fn verify_lease(&mut self, group_id: &str) -> CoreResult<()> {
        let view = self.membership.view();
        if self.ownership.holds_in(group_id, view.session) && view.lease_valid(self.env.clock().monotonic()) {
            return Ok(());
        }
        self.give_up(group_id).await;
        Err(CoreError::NotCoordinator)
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let mut cluster = self.membership.subscribe();
        let mut membership_alive = true;
        loop {
            let deadline = self
                .groups
                .values()
                .filter_map(Group::next_deadline)
                .chain(self.consumer_groups.values().filter_map(ConsumerGroup::next_deadline))
                .min()
                .unwrap_or_else(|| self.env.clock().monotonic() + Duration::from_millis(IDLE_TICK_MS));
            let command = tokio::select! {
                biased;
                command = rx.recv() => command,
                // The membership actor is gone at shutdown: its view then never changes again.
                changed = cluster.changed(), if membership_alive => {
                    match changed {
                        Ok(()) => {
                            self.reconcile().await;
                        }
                        Err(_) => membership_alive = false,
                    }
                    continue;
                }
                _ = self.env.clock().sleep_until(deadline) => {
                    self.tick();
                    self.persist_memberships().await;
                    continue;
                }
            };
            let Some(command) = command else { return };
            if let Some(group_id) = command.group_id()
                && let Err(e) = self.acquire(&group_id).await
            {
                command.refuse(e);
                continue;
            }
            self.handle(command).await;
            self.persist_memberships().await;
        }
    }

    /// Writes the membership of every group whose rebalance ended (or that emptied) since it
    /// was last written: a new coordinator carries the group on from it.
    async fn persist_memberships(&mut self) {
        let changed: Vec<(String, state::GroupMetadata)> = self
            .groups
            .values()
            .filter_map(|g| g.metadata().map(|m| (g.group_id.clone(), m)))
            .filter(|(id, m)| self.offsets.membership(id) != Some(m))
            .collect();
        for (group_id, metadata) in changed {
            if let Err(e) = self.offsets.set_membership(&group_id, Some(metadata)).await {
                // The group goes on; a take-over before the next write finds the last one.
                tracing::warn!(group = %group_id, error = %e, "cannot persist the group's membership");
            }
        }
    }

    fn tick(&mut self) {
        let now = self.env.clock().monotonic();
        let mut replies = Vec::new();
        for group in self.groups.values_mut() {
            let mut group_replies = Vec::new();
            group.tick(now, &mut group_replies);
            group.check_invariants();
            replies.extend(group_replies.into_iter().map(|r| (group.group_id.clone(), r)));
        }
        for group in self.consumer_groups.values_mut() {
            group.tick(now);
        }
        self.deliver(replies);
        let ids: Vec<String> = self.consumer_groups.keys().cloned().collect();
        for group_id in ids {
            // Only an expiry can leave every member classic.
            self.maybe_downgrade(&group_id, true, now);
        }
    }

    fn deliver(&mut self, replies: Vec<(String, Reply)>) {
        for (group_id, reply) in replies {
            tracing::debug!(group = %group_id, ?reply, "group reply");
            match reply {
                Reply::Join(member_id, result) => {
                    if let Some(tx) = self.parked_joins.remove(&(group_id, member_id)) {
                        let _ = tx.send(result);
                    }
                }
                Reply::Sync(member_id, result) => {
                    if let Some(tx) = self.parked_syncs.remove(&(group_id, member_id)) {
                        let _ = tx.send(result);
                    }
                }
            }
        }
    }

    fn validate_join(&self, group_id: &str, req: &JoinRequest) -> CoreResult<()> {
        if group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        let c = &self.config;
        if req.session_timeout_ms < c.group_min_session_timeout_ms
            || req.session_timeout_ms > c.group_max_session_timeout_ms
        {
            return Err(CoreError::InvalidSessionTimeout);
        }
        if let Some(g) = self.groups.get(group_id)
            && req.member_id.is_empty()
            && g.members.len() >= c.group_max_size
            && self.consumer_group(group_id).is_none()
        {
            return Err(CoreError::GroupMaxSizeReached);
        }
        Ok(())
    }

    async fn handle(&mut self, command: Command) {
        let now = self.env.clock().monotonic();
        match command {
            Command::Join(group_id, request, topics, reply) => {
                tracing::debug!(group = %group_id, member = %request.member_id, "join");
                if let Err(e) = self.validate_join(&group_id, &request) {
                    let _ = reply.send(Err(e));
                    return;
                }
                if self.consumer_group(&group_id).is_some() {
                    let _ = reply.send(self.classic_join_to_consumer_group(&group_id, request, &topics, now));
                    // A classic member that took the last consumer-protocol member's place.
                    self.maybe_downgrade(&group_id, false, now);
                    return;
                }
                // An empty consumer group gives way to the classic group.
                self.consumer_groups.remove(&group_id);
                if !request.member_id.is_empty() && !self.groups.contains_key(&group_id) {
                    let _ = reply.send(Err(CoreError::UnknownMemberId));
                    return;
                }
                let unique = self.env.rng().next_u64();
                let mut replies = Vec::new();
                let group = self.group_mut(&group_id);
                let action = group.join(request, now, unique, &mut replies);
                group.check_invariants();
                match action {
                    JoinAction::Done(result) => drop(reply.send(result)),
                    JoinAction::Parked { member_id } => {
                        // A join parked twice (a client retry) answers the older one as replaced.
                        if let Some(old) = self.parked_joins.insert((group_id.clone(), member_id), reply) {
                            let _ = old.send(Err(CoreError::UnknownMemberId));
                        }
                    }
                }
                self.deliver(replies.into_iter().map(|r| (group_id.clone(), r)).collect());
            }
            Command::Sync { group_id, member_id, instance, generation_id, assignments, reply } => {
                if let Some(group) = self.consumer_groups.get_mut(&group_id).filter(|c| !c.is_empty()) {
                    let _ = reply.send(classic_sync_to_consumer_group(group, &member_id, instance, generation_id, now));
                    return;
                }
                let Some(group) = self.groups.get_mut(&group_id) else {
                    let _ = reply.send(Err(CoreError::UnknownMemberId));
                    return;
                };
                let mut replies = Vec::new();
                let answer = group.sync(&member_id, instance.as_deref(), generation_id, assignments, now, &mut replies);
                group.check_invariants();
                // The rebalance's end is durable before any member hears of its assignment.
                self.persist_memberships().await;
                match answer {
                    Some(result) => drop(reply.send(result)),
                    None => {
                        self.parked_syncs.insert((group_id.clone(), member_id), reply);
                    }
                }
                self.deliver(replies.into_iter().map(|r| (group_id.clone(), r)).collect());
            }
            Command::Heartbeat { group_id, member_id, instance, generation_id, reply } => {
                if let Some(group) = self.consumer_groups.get_mut(&group_id).filter(|c| !c.is_empty()) {
                    let _ = reply.send(group.classic_heartbeat(&member_id, instance.as_deref(), generation_id, now));
                    return;
                }
                let result = match self.groups.get_mut(&group_id) {
                    Some(group) => group.heartbeat(&member_id, instance.as_deref(), generation_id, now),
                    None => Err(CoreError::UnknownMemberId),
                };
                let _ = reply.send(result);
            }
            Command::Leave { group_id, members, reply } => {
                if let Some(group) = self.consumer_groups.get_mut(&group_id).filter(|c| !c.is_empty()) {
                    let results =
                        members.iter().map(|(id, instance)| group.classic_leave(id, instance.as_deref())).collect();
                    let _ = reply.send(Ok(results));
                    self.maybe_downgrade(&group_id, true, now);
                    return;
                }
                let Some(group) = self.groups.get_mut(&group_id) else {
                    let _ = reply.send(Err(CoreError::UnknownMemberId));
                    return;
                };
                let mut replies = Vec::new();
                let results = members
                    .iter()
                    .map(|(id, instance)| group.leave(id, instance.as_deref(), now, &mut replies))
                    .collect();
                group.check_invariants();
                let _ = reply.send(Ok(results));
                self.deliver(replies.into_iter().map(|r| (group_id.clone(), r)).collect());
            }
            Command::Commit(request, reply) => {
                let _ = reply.send(self.commit(request, now).await);
            }
            Command::TxnGuard(reply) => {
                let _ = reply.send(self.completions);
            }
            Command::TxnCommit { request, producer_id, guard, reply } => {
                let _ = reply.send(self.txn_commit(request, producer_id, guard).await);
            }
            Command::CompleteTxn { group_id, producer_id, commit, reply } => {
                self.completions += 1;
                self.last_completion.insert((group_id.clone(), producer_id), self.completions);
                let result = match self.offsets.complete_txn(&group_id, producer_id, commit).await {
                    Ok(()) => self.verify_lease(&group_id).await,
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Command::Fetch { group_id, partitions, require_stable, reply } => {
                let fetched = self.offsets.fetch(&group_id, partitions);
                let answered = fetched
                    .into_iter()
                    .map(|(tp, committed)| {
                        if require_stable && self.offsets.has_pending(&group_id, &tp) {
                            (tp, Err(CoreError::UnstableOffsetCommit))
                        } else {
                            (tp, Ok(committed))
                        }
                    })
                    .collect();
                let _ = reply.send(Ok(answered));
            }
            Command::Describe(group_ids, reply) => {
                for id in &group_ids {
                    // A group this broker cannot take over is described as having no members.
                    let _ = self.acquire(id).await;
                }
                let _ = reply.send(group_ids.iter().map(|id| self.describe(id)).collect());
            }
            Command::List(reply) => {
                let consumer = |id: &String| self.consumer_groups.get(id).filter(|c| !c.is_empty());
                let mut listing: Vec<GroupListing> = self
                    .groups
                    .values()
                    .filter(|g| consumer(&g.group_id).is_none())
                    .map(|g| GroupListing {
                        group_id: g.group_id.clone(),
                        protocol_type: g.protocol_type.clone().unwrap_or_default(),
                        state: g.state.name(),
                        group_type: "classic",
                    })
                    .collect();
                listing.extend(
                    self.consumer_groups
                        .values()
                        .filter(|c| !c.is_empty() || !self.groups.contains_key(&c.group_id))
                        .map(|c| GroupListing {
                            group_id: c.group_id.clone(),
                            protocol_type: "consumer".into(),
                            state: c.state_name(),
                            group_type: "consumer",
                        }),
                );
                listing.sort_by(|a, b| a.group_id.cmp(&b.group_id));
                let _ = reply.send(listing);
            }
            Command::ConsumerHeartbeat { group_id, heartbeat, topics, reply } => {
                let _ = reply.send(self.consumer_heartbeat(&group_id, heartbeat, &topics, now).await);
                // Only a leave can leave every member classic.
                self.maybe_downgrade(&group_id, true, now);
            }
            Command::ConsumerDescribe(group_id, reply) => {
                let _ = reply.send(Ok(self.consumer_groups.get(&group_id).cloned()));
            }
            Command::DeleteOffsets { group_id, partitions, reply } => {
                let _ = reply.send(self.delete_offsets(&group_id, partitions).await);
            }
            Command::Delete(group_ids, reply) => {
                let mut results = Vec::new();
                for id in group_ids {
                    let result = match self.acquire(&id).await {
                        Ok(()) => self.delete(&id).await,
                        Err(e) => Err(e),
                    };
                    results.push((id, result));
                }
                let _ = reply.send(results);
            }
        }
    }

    /// A ConsumerGroupHeartbeat: the group is made if it is new, and a live classic group is
    /// upgraded by a member joining it if the migration policy allows (`migration`).
    async fn consumer_heartbeat(
        &mut self,
        group_id: &str,
        heartbeat: Heartbeat,
        topics: &MetadataSnapshot,
        now: Instant,
    ) -> CoreResult<HeartbeatAnswer> {
        if group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        let topic = |name: &str| topic_metadata(topics, name);
        let mut upgraded = false;
        let group = match self.groups.get(group_id).filter(|g| !g.is_empty()) {
            Some(classic) => {
                if heartbeat.member_epoch != 0 {
                    // A member of a consumer group that is classic again (it was fenced, and the
                    // group downgraded; or the coordinator carried the classic group on after
                    // a restart): it joins again, as any member the group no longer knows.
                    // Apache answers GROUP_ID_NOT_FOUND, which the Java consumer takes as fatal.
                    return Err(CoreError::UnknownMemberId);
                }
                if !self.config.group_consumer_migration_policy.upgrades() {
                    return Err(CoreError::GroupIdNotFound);
                }
                if classic.members.len() > self.config.group_consumer_max_size {
                    return Err(CoreError::GroupIdNotFound);
                }
                upgraded = true;
                migration::upgrade(classic, &topic, now).map_err(|why| {
                    tracing::info!(group = group_id, why, "cannot upgrade the classic group");
                    CoreError::GroupIdNotFound
                })?
            }
            None if heartbeat.member_epoch != 0 && !self.consumer_groups.contains_key(group_id) => {
                // Only a join makes a group. Apache answers GROUP_ID_NOT_FOUND here; kaas keeps
                // consumer-protocol members in memory, so a member of a group this coordinator
                // no longer knows (it restarted, or took the group over) is told to join again.
                return Err(CoreError::UnknownMemberId);
            }
            // A join refused leaves no group behind.
            None => self.consumer_groups.remove(group_id).unwrap_or_else(|| ConsumerGroup::new(group_id.to_string())),
        };
        let mut group = group;
        // Drawn whether or not the member needs it, so that the draws do not depend on it.
        let fresh_id = self.new_member_id();
        let answer = group.heartbeat(heartbeat, &topic, self.consumer_settings(), now, || fresh_id);
        if upgraded {
            // The upgrade rode on the join: refused, the classic group stays as it was.
            let answer = answer?;
            self.upgraded(group_id).await;
            self.consumer_groups.insert(group_id.to_string(), group);
            return Ok(answer);
        }
        if answer.is_ok() || group.group_epoch > 0 {
            self.consumer_groups.insert(group_id.to_string(), group);
        }
        answer
    }

    fn consumer_settings(&self) -> consumer::Settings {
        consumer::Settings {
            session_timeout_ms: self.config.group_consumer_session_timeout_ms,
            max_size: self.config.group_consumer_max_size,
        }
    }

    /// The classic group `group_id` became a consumer group: the joins and syncs it parked are
    /// told to join again (now as members of the consumer group), and its classic membership
    /// is no longer what a new coordinator should carry on.
    async fn upgraded(&mut self, group_id: &str) {
        tracing::info!(group = group_id, "classic group upgraded to a consumer group");
        self.groups.remove(group_id);
        let joins: Vec<_> = self.parked_joins.keys().filter(|(g, _)| g == group_id).cloned().collect();
        for key in joins {
            if let Some(tx) = self.parked_joins.remove(&key) {
                let _ = tx.send(Err(CoreError::RebalanceInProgress));
            }
        }
        let syncs: Vec<_> = self.parked_syncs.keys().filter(|(g, _)| g == group_id).cloned().collect();
        for key in syncs {
            if let Some(tx) = self.parked_syncs.remove(&key) {
                let _ = tx.send(Err(CoreError::RebalanceInProgress));
            }
        }
        if let Err(e) = self.offsets.set_membership(group_id, None).await {
            // A take-over before the next write may carry the classic group on; its members'
            // generations are then behind, and they join again.
            tracing::warn!(group = group_id, error = %e, "cannot clear the upgraded group's classic membership");
        }
    }

    /// A consumer group whose members all speak the classic protocol goes back to being a
    /// classic group, which rebalances, if the migration policy allows. Its generation is the
    /// group epoch, before the bump of the removal that left only classic members (`removed`),
    /// as Apache converts the group instead of bumping it: the classic members' generation is
    /// then current, and their heartbeats are told REBALANCE_IN_PROGRESS, not ILLEGAL_GENERATION.
    fn maybe_downgrade(&mut self, group_id: &str, removed: bool, now: Instant) {
        let Some(group) = self.consumer_groups.get(group_id) else { return };
        if !group.all_classic()
            || !self.config.group_consumer_migration_policy.downgrades()
            || group.members.len() > self.config.group_max_size
        {
            return;
        }
        let mut replies = Vec::new();
        let generation = if removed { group.group_epoch - 1 } else { group.group_epoch };
        let delay = self.config.group_initial_rebalance_delay_ms;
        let classic = migration::downgrade(group, generation, delay, now, &mut replies);
        tracing::info!(
            group = group_id,
            generation = classic.generation_id,
            "consumer group downgraded to a classic group"
        );
        self.consumer_groups.remove(group_id);
        self.groups.insert(group_id.to_string(), classic);
        self.deliver(replies.into_iter().map(|r| (group_id.to_string(), r)).collect());
    }

    /// A JoinGroup to a consumer group: the member joins it with the subscription its
    /// consumer-protocol bytes carry and is answered at once, at its member epoch, with no
    /// leader (the coordinator assigns).
    fn classic_join_to_consumer_group(
        &mut self,
        group_id: &str,
        req: JoinRequest,
        topics: &MetadataSnapshot,
        now: Instant,
    ) -> CoreResult<JoinOutcome> {
        if req.protocol_type != "consumer" || req.protocols.is_empty() {
            return Err(CoreError::InconsistentGroupProtocol);
        }
        let (protocol_name, metadata) = req.protocols[0].clone();
        let subscription = embedded::decode_subscription(&metadata).ok_or(CoreError::InconsistentGroupProtocol)?;
        let new_member = req.member_id.is_empty();
        let member_id = match new_member {
            true => self.new_member_id(),
            false => req.member_id.clone(),
        };
        if new_member && req.require_known_member_id && req.group_instance_id.is_none() {
            return Err(CoreError::MemberIdRequired(member_id));
        }
        let topic = |name: &str| topic_metadata(topics, name);
        let join = ClassicJoin {
            member_id: member_id.clone(),
            new_member,
            instance_id: req.group_instance_id,
            rack_id: subscription.rack_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocols: req.protocols,
            subscribed_topic_names: subscription.topics.into_iter().collect(),
            owned: migration::by_id(&subscription.owned, &topic),
        };
        let settings = self.consumer_settings();
        let group = self.consumer_groups.get_mut(group_id).expect("a consumer group with members");
        let member_epoch = group.classic_join(join, &topic, settings, now)?;
        Ok(JoinOutcome {
            generation_id: member_epoch,
            protocol_type: "consumer".into(),
            protocol_name,
            leader: String::new(),
            member_id,
            members: Vec::new(),
        })
    }

    /// A member id for a new member of a consumer group.
    fn new_member_id(&self) -> String {
        let unique = [self.env.rng().next_u64(), self.env.rng().next_u64()];
        crate::hex::encode(&[unique[0].to_be_bytes(), unique[1].to_be_bytes()].concat())
    }

    /// The consumer group of `group_id` with members, if there is one: commits are checked
    /// against it rather than against a classic group.
    fn consumer_group(&self, group_id: &str) -> Option<&ConsumerGroup> {
        self.consumer_groups.get(group_id).filter(|c| !c.is_empty())
    }

    async fn commit(&mut self, request: CommitRequest, now: Instant) -> CoreResult<()> {
        if request.group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        if let Some(consumer) = self.consumer_group(&request.group_id) {
            consumer.check_commit(&request.member_id, request.generation_id)?;
        } else {
            let group = self.group_mut(&request.group_id);
            group.check_commit(&request.member_id, request.group_instance_id.as_deref(), request.generation_id)?;
            group.touch(&request.member_id, now);
        }
        if crate::buggify!("groups.slow_commit") {
            // A slow volume: the coordinator stalls with the commit neither durable nor answered.
            self.env.clock().sleep_ms(self.env.rng().below(200)).await;
        }
        let now_ms = self.env.clock().now_ms();
        self.offsets.commit(&request.group_id, request.offsets, now_ms).await?;
        self.verify_lease(&request.group_id).await
    }

    async fn txn_commit(&mut self, request: CommitRequest, producer_id: i64, guard: u64) -> CoreResult<()> {
        if request.group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        let key = (request.group_id.clone(), producer_id);
        if self.last_completion.get(&key).is_some_and(|&n| n > guard) {
            // The transaction ended after it was verified: this is a late request of it.
            return Err(CoreError::InvalidTxnState);
        }
        if let Some(consumer) = self.consumer_group(&request.group_id) {
            // TxnOffsetCommit's versions know no member epochs: a stale one is an old generation.
            consumer.check_commit(&request.member_id, request.generation_id).map_err(|e| match e {
                CoreError::StaleMemberEpoch | CoreError::FencedMemberEpoch => CoreError::IllegalGeneration,
                e => e,
            })?;
        } else {
            let group = self.group_mut(&request.group_id);
            group.check_txn_commit(&request.member_id, request.group_instance_id.as_deref(), request.generation_id)?;
        }
        let now_ms = self.env.clock().now_ms();
        self.offsets.stage(&request.group_id, producer_id, request.offsets, now_ms).await?;
        self.verify_lease(&request.group_id).await
    }

    fn describe(&self, group_id: &str) -> GroupDescription {
        let Some(g) = self.groups.get(group_id) else {
            return GroupDescription {
                group_id: group_id.to_string(),
                state: None,
                protocol_type: String::new(),
                protocol_name: String::new(),
                members: Vec::new(),
            };
        };
        let protocol_name = g.protocol_name.clone().unwrap_or_default();
        let stable = g.state == GroupState::Stable;
        let members = g
            .members
            .values()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m
                    .protocols
                    .iter()
                    .find(|(n, _)| *n == protocol_name)
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default(),
                assignment: if stable { m.assignment.clone() } else { Bytes::new() },
            })
            .collect();
        GroupDescription {
            group_id: group_id.to_string(),
            state: Some(g.state),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable { protocol_name } else { String::new() },
            members,
        }
    }

    async fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: Vec<TopicPartition>,
    ) -> CoreResult<PartitionResults> {
        let subscribed = match (self.consumer_groups.get(group_id), self.groups.get(group_id)) {
            // A consumer group's members say what they subscribe to (classic ones too).
            (Some(consumer), _) if !consumer.is_empty() => {
                Some(consumer.members.values().flat_map(|m| m.subscribed_topic_names.iter().cloned()).collect())
            }
            (_, Some(group)) if !group.is_empty() => match group.protocol_type.as_deref() {
                Some("consumer") => group.subscribed_topics(),
                _ => return Err(CoreError::NonEmptyGroup),
            },
            (None, None) => return Err(CoreError::GroupIdNotFound),
            _ => Some(BTreeSet::new()),
        };
        let refused = |(topic, _): &TopicPartition| subscribed.as_ref().is_none_or(|s| s.contains(topic));
        let deleted: Vec<TopicPartition> = partitions.iter().filter(|tp| !refused(tp)).cloned().collect();
        self.offsets.delete_offsets(group_id, &deleted).await?;
        self.verify_lease(group_id).await?;
        Ok(partitions
            .into_iter()
            .map(|tp| {
                let result = if refused(&tp) { Err(CoreError::GroupSubscribedToTopic) } else { Ok(()) };
                (tp, result)
            })
            .collect())
    }

    async fn delete(&mut self, group_id: &str) -> CoreResult<()> {
        let consumer = self.consumer_groups.get(group_id);
        if consumer.is_some_and(|c| !c.is_empty()) {
            return Err(CoreError::NonEmptyGroup);
        }
        match self.groups.get(group_id) {
            None if consumer.is_none() => return Err(CoreError::GroupIdNotFound),
            Some(g) if !g.is_empty() => return Err(CoreError::NonEmptyGroup),
            _ => {}
        }
        self.offsets.delete_group(group_id).await?;
        self.groups.remove(group_id);
        self.consumer_groups.remove(group_id);
        Ok(())
    }
}
