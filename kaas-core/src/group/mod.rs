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

mod admin;
pub mod assignor;
mod classic_api;
pub mod consumer;
mod consumer_api;
pub mod embedded;
pub mod migration;
pub mod offsets;
mod offsets_api;
pub mod share;
mod share_api;
pub mod state;

use admin::AdminCommand;
use classic_api::ClassicCommand;
use consumer_api::ConsumerCommand;
use offsets_api::OffsetsCommand;
pub use share::{ShareGroup, ShareHeartbeat, ShareHeartbeatAnswer};
use share_api::ShareCommand;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Duration, Instant};

use crate::cluster::ownership::Ownership;
use crate::cluster::{ClusterView, Kind, MembershipHandle, group_key};
use crate::config::BrokerConfig;
use crate::env::{Clock, Env, Spawner};
use crate::error::{CoreError, CoreResult};
use crate::participant::EndGuard;
use crate::topics::MetadataSnapshot;
use consumer::{ConsumerGroup, Heartbeat, HeartbeatAnswer};
pub use offsets::CommittedOffset;
use offsets::OffsetStore;
use state::{Group, Reply};
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
    /// None: no classic group by that id (Kafka describes it as Dead).
    pub state: Option<GroupState>,
    /// The id is another kind of group's (a consumer or a share group).
    pub other_kind: bool,
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

/// What the coordinator is asked, by protocol; each family is served by a file of its own.
enum Command {
    /// JoinGroup, SyncGroup, Heartbeat, LeaveGroup (`classic_api`).
    Classic(ClassicCommand),
    /// ConsumerGroupHeartbeat, ConsumerGroupDescribe (`consumer_api`).
    Consumer(ConsumerCommand),
    /// Committed and transactional offsets (`offsets_api`).
    Offsets(OffsetsCommand),
    /// ShareGroupHeartbeat, ShareGroupDescribe, KIP-1289's member check (`share_api`).
    Share(ShareCommand),
    /// DescribeGroups, ListGroups, DeleteGroups (`admin`).
    Admin(AdminCommand),
}

impl Command {
    /// The group a command is about, if one: the coordinator must own it to answer.
    fn group_id(&self) -> Option<String> {
        match self {
            Command::Classic(c) => Some(c.group_id().to_string()),
            Command::Consumer(c) => Some(c.group_id().to_string()),
            Command::Offsets(c) => c.group_id().map(str::to_string),
            Command::Share(c) => Some(c.group_id().to_string()),
            Command::Admin(_) => None,
        }
    }

    /// Answers the command with `error`, without handling it.
    fn refuse(self, error: CoreError) {
        match self {
            Command::Classic(c) => c.refuse(error),
            Command::Consumer(c) => c.refuse(error),
            Command::Offsets(c) => c.refuse(error),
            Command::Share(c) => c.refuse(error),
            Command::Admin(_) => {}
        }
    }
}

/// The protocol that serves a group's members now (`GroupCoordinator::kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// A classic group (JoinGroup and SyncGroup), with or without members.
    Classic,
    /// A consumer group (KIP-848) with members, classic ones too during a migration.
    Consumer,
    /// A share group (KIP-932), with or without members: the id stays a share group's.
    Share,
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
        self.ask(|r| Command::Classic(ClassicCommand::Join(group_id, request, topics, r))).await.unwrap_or_else(gone)
    }

    pub async fn sync(
        &self,
        group_id: String,
        member_id: String,
        instance: Option<String>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> CoreResult<SyncOutcome> {
        self.ask(|reply| {
            Command::Classic(ClassicCommand::Sync { group_id, member_id, instance, generation_id, assignments, reply })
        })
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
        self.ask(|reply| {
            Command::Classic(ClassicCommand::Heartbeat { group_id, member_id, instance, generation_id, reply })
        })
        .await
        .unwrap_or_else(gone)
    }

    pub async fn leave(
        &self,
        group_id: String,
        members: Vec<(String, Option<String>)>,
    ) -> CoreResult<Vec<CoreResult<()>>> {
        self.ask(|reply| Command::Classic(ClassicCommand::Leave { group_id, members, reply }))
            .await
            .unwrap_or_else(gone)
    }

    pub async fn commit(&self, request: CommitRequest) -> CoreResult<()> {
        self.ask(|r| Command::Offsets(OffsetsCommand::Commit(request, r))).await.unwrap_or_else(gone)
    }

    pub async fn fetch(
        &self,
        group_id: String,
        partitions: Option<Vec<TopicPartition>>,
        require_stable: bool,
    ) -> CoreResult<Vec<FetchedOffset>> {
        self.ask(|reply| Command::Offsets(OffsetsCommand::Fetch { group_id, partitions, require_stable, reply }))
            .await
            .unwrap_or(Err(CoreError::CoordinatorNotAvailable))
    }

    /// The guard to pass to `txn_commit`: read it before the transaction coordinator verifies
    /// the producer's transaction.
    pub async fn txn_guard(&self) -> CoreResult<u64> {
        self.ask(|reply| Command::Offsets(OffsetsCommand::TxnGuard(reply)))
            .await
            .ok_or(CoreError::CoordinatorNotAvailable)
    }

    /// TxnOffsetCommit: stages the offsets for the producer's open transaction.
    pub async fn txn_commit(&self, request: CommitRequest, producer_id: i64, guard: u64) -> CoreResult<()> {
        self.ask(|reply| Command::Offsets(OffsetsCommand::TxnCommit { request, producer_id, guard, reply }))
            .await
            .unwrap_or_else(gone)
    }

    /// Ends the producer's staged offsets in the group: committed or dropped. Idempotent.
    pub async fn complete_txn(&self, group_id: String, producer_id: i64, commit: bool) -> CoreResult<()> {
        self.ask(|reply| Command::Offsets(OffsetsCommand::CompleteTxn { group_id, producer_id, commit, reply }))
            .await
            .unwrap_or_else(gone)
    }

    /// ConsumerGroupHeartbeat (KIP-848); the assignor gives out the topics of `topics`.
    pub async fn consumer_heartbeat(
        &self,
        group_id: String,
        heartbeat: Heartbeat,
        topics: Arc<MetadataSnapshot>,
    ) -> CoreResult<HeartbeatAnswer> {
        self.ask(|reply| {
            Command::Consumer(ConsumerCommand::Heartbeat { group_id, heartbeat: Box::new(heartbeat), topics, reply })
        })
        .await
        .unwrap_or_else(gone)
    }

    /// ShareGroupHeartbeat (KIP-932); the assignor gives out the topics of `topics`.
    pub async fn share_heartbeat(
        &self,
        group_id: String,
        heartbeat: ShareHeartbeat,
        topics: Arc<MetadataSnapshot>,
    ) -> CoreResult<ShareHeartbeatAnswer> {
        self.ask(|reply| Command::Share(ShareCommand::Heartbeat { group_id, heartbeat, topics, reply }))
            .await
            .unwrap_or_else(gone)
    }

    /// ShareGroupDescribe: the share group as it is (GROUP_ID_NOT_FOUND: no share group by that id).
    pub async fn share_describe(&self, group_id: String) -> CoreResult<ShareGroup> {
        self.ask(|reply| Command::Share(ShareCommand::Describe(group_id, reply))).await.unwrap_or_else(gone)
    }

    /// Whether `member_id` is a member of share group `group_id` at `member_epoch` (KIP-1289).
    pub async fn share_check_member(
        &self,
        group_id: String,
        member_id: String,
        member_epoch: Option<i32>,
    ) -> CoreResult<()> {
        self.ask(|reply| Command::Share(ShareCommand::CheckMember { group_id, member_id, member_epoch, reply }))
            .await
            .unwrap_or_else(gone)
    }

    pub async fn consumer_describe(&self, group_id: String) -> CoreResult<Option<ConsumerGroup>> {
        self.ask(|reply| Command::Consumer(ConsumerCommand::Describe(group_id, reply))).await.unwrap_or_else(gone)
    }

    pub async fn describe(&self, group_ids: Vec<String>) -> CoreResult<Vec<GroupDescription>> {
        self.ask(|r| Command::Admin(AdminCommand::Describe(group_ids, r)))
            .await
            .ok_or(CoreError::CoordinatorNotAvailable)
    }

    pub async fn list(&self) -> CoreResult<Vec<GroupListing>> {
        self.ask(|reply| Command::Admin(AdminCommand::List(reply))).await.ok_or(CoreError::CoordinatorNotAvailable)?
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
        self.ask(|reply| Command::Offsets(OffsetsCommand::DeleteOffsets { group_id, partitions, reply }))
            .await
            .unwrap_or_else(gone)
    }

    pub async fn delete(&self, group_ids: Vec<String>) -> CoreResult<Vec<(String, CoreResult<()>)>> {
        self.ask(|r| Command::Admin(AdminCommand::Delete(group_ids, r))).await.ok_or(CoreError::CoordinatorNotAvailable)
    }
}

struct GroupCoordinator<E: Env> {
    env: E,
    config: Arc<BrokerConfig>,
    groups: BTreeMap<String, Group>,
    /// Consumer-protocol groups (KIP-848), in memory: a new coordinator starts them afresh.
    consumer_groups: BTreeMap<String, ConsumerGroup>,
    /// Share groups (KIP-932): their members in memory, their epoch on the volume.
    share_groups: BTreeMap<String, ShareGroup>,
    offsets: OffsetStore<E::Volume>,
    parked_joins: BTreeMap<(String, String), oneshot::Sender<CoreResult<JoinOutcome>>>,
    parked_syncs: BTreeMap<(String, String), oneshot::Sender<CoreResult<SyncOutcome>>>,
    /// The ends of transactions' staged offsets, numbered per (group, producer id): the
    /// TxnOffsetCommit guard.
    ends: EndGuard<(String, i64)>,
    membership: MembershipHandle,
    /// The groups this broker holds: group id -> epoch and lease session.
    ownership: Ownership<E::Volume, String>,
}

/// Starts the coordinator and takes over the groups with offsets that the view gives it.
pub async fn start<E: Env>(
    env: &E,
    config: Arc<BrokerConfig>,
    membership: MembershipHandle,
    ownership_metrics: Arc<crate::metrics::OwnershipMetrics>,
) -> CoreResult<GroupsHandle> {
    let offsets = OffsetStore::new(env.volume().clone()).await?;
    let mut coordinator = GroupCoordinator {
        env: env.clone(),
        config,
        groups: BTreeMap::new(),
        consumer_groups: BTreeMap::new(),
        share_groups: BTreeMap::new(),
        offsets,
        parked_joins: BTreeMap::new(),
        parked_syncs: BTreeMap::new(),
        ends: EndGuard::default(),
        ownership: Ownership::new(env.volume().clone(), Kind::Group, |group_id| group_key(group_id), ownership_metrics),
        membership,
    };
    coordinator.reconcile().await;
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    env.spawner().spawn("groups", coordinator.run(rx));
    Ok(GroupsHandle { tx })
}

impl<E: Env> GroupCoordinator<E> {
    /// Which protocol serves `group_id`'s members now: a consumer group with members (its
    /// classic members included, during a migration), else a classic group (a group with
    /// offsets is one, Empty); None when there is neither (an empty consumer group gives way to
    /// a classic join).
    fn kind(&self, group_id: &str) -> Option<GroupKind> {
        if self.share_groups.contains_key(group_id) {
            return Some(GroupKind::Share);
        }
        match (self.consumer_groups.get(group_id), self.groups.contains_key(group_id)) {
            (Some(consumer), _) if !consumer.is_empty() => Some(GroupKind::Consumer),
            (_, true) => Some(GroupKind::Classic),
            _ => None,
        }
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
        if let Some(epoch) = self.offsets.share_epoch(group_id) {
            // A share group: its members join again, at epochs above the last one it had.
            self.share_groups.insert(group_id.to_string(), ShareGroup::restore(group_id.to_string(), epoch));
            tracing::info!(group = group_id, epoch = claimed.epoch, "took over share group");
            return Ok(());
        }
        match self.stored_consumer_group(group_id, now) {
            // Carried on: its members keep their ids, epochs and assignments.
            Some(Ok(group)) => {
                crate::reach("groups: consumer group carried on by a new coordinator");
                self.consumer_groups.insert(group_id.to_string(), group);
                tracing::info!(group = group_id, epoch = claimed.epoch, "took over consumer group");
                return Ok(());
            }
            Some(Err(why)) => {
                tracing::warn!(group = group_id, why, "consumer group state refused: its members join again")
            }
            None => {}
        }
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
        self.share_groups.remove(group_id);
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
        if let Err(e) = self.take_over_listed().await {
            tracing::debug!(error = ?e, "not every group of this broker's is taken over yet");
        }
    }

    /// Takes over the groups with offsets on the volume that the view gives this broker. Err
    /// while one of them cannot be taken over yet (its former coordinator still holds it): a
    /// listing of this broker's groups would leave it out, so it waits, as Apache's answers
    /// COORDINATOR_LOAD_IN_PROGRESS while it loads a coordinator partition.
    async fn take_over_listed(&mut self) -> CoreResult<()> {
        let listed = self.offsets.listed().await.inspect_err(|e| tracing::warn!(error = ?e, "cannot list groups"))?;
        let (view, now) = (self.membership.view(), self.env.clock().monotonic());
        let mut outcome = Ok(());
        for group_id in listed {
            if self.ownership.held(&group_id).is_none() && view.should_own(&group_key(&group_id), now) {
                // On its way here: the former coordinator has not let it go yet. (Unreadable:
                // offline with its reason logged, and the others go on.)
                if let Err(e @ (CoreError::CoordinatorLoadInProgress | CoreError::NotCoordinator)) =
                    self.acquire(&group_id).await
                {
                    outcome = Err(e);
                }
            }
        }
        outcome
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
                .chain(self.share_groups.values().filter_map(ShareGroup::next_deadline))
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
                    let changed = self.tick();
                    self.persist_memberships().await;
                    for group_id in changed {
                        let _ = self.persist_consumer_group(&group_id).await;
                    }
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
            let group_id = command.group_id();
            self.handle(command).await;
            self.persist_memberships().await;
            if let Some(group_id) = group_id {
                // Heartbeats wrote theirs before answering; this is for the rest: deletes, and
                // classic members of a consumer group, answered before the write (a take-over
                // in between finds them a generation ahead: fenced, they join again).
                let _ = self.persist_consumer_group(&group_id).await;
            }
        }
    }

    /// Writes a consumer group's state if it changed since it was last written (None once it
    /// is no consumer group: downgraded or deleted), so that a new coordinator carries it on.
    /// If the write fails, the group goes back to what was last written (as Apache reverts
    /// its in-memory state when a write to its log fails) and the caller answers an error, so
    /// no member acts on what a new coordinator would not know.
    pub(super) async fn persist_consumer_group(&mut self, group_id: &str) -> CoreResult<()> {
        if self.ownership.held(group_id).is_none() {
            return Ok(());
        }
        let metadata = self.consumer_groups.get(group_id).map(ConsumerGroup::metadata);
        if self.offsets.consumer_group(group_id) == metadata.as_ref() {
            return Ok(());
        }
        let written = metadata.is_some();
        let Err(e) = self.offsets.set_consumer_group(group_id, metadata).await else {
            return Ok(());
        };
        tracing::warn!(group = %group_id, error = %e, "cannot persist the consumer group: back to its last state");
        // A group gone (downgraded, deleted) stays gone; its record is rewritten at the next change.
        if written {
            self.revert_consumer_group(group_id);
        }
        Err(CoreError::CoordinatorNotAvailable)
    }

    /// The consumer group as it was last written, carried on from `now` (None: it never was;
    /// an error: the record is refused).
    fn stored_consumer_group(&self, group_id: &str, now: Instant) -> Option<Result<ConsumerGroup, String>> {
        let session = Duration::from_millis(self.config.group_consumer_session_timeout_ms.max(1) as u64);
        let metadata = self.offsets.consumer_group(group_id)?;
        Some(ConsumerGroup::restore(group_id.to_string(), metadata, session, now))
    }

    /// The consumer group as it was last written (none if it never was).
    fn revert_consumer_group(&mut self, group_id: &str) {
        match self.stored_consumer_group(group_id, self.env.clock().monotonic()) {
            Some(Ok(group)) => {
                self.consumer_groups.insert(group_id.to_string(), group);
            }
            _ => {
                self.consumer_groups.remove(group_id);
            }
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

    /// Expiries and timers; answers the consumer groups that changed (to be written).
    fn tick(&mut self) -> Vec<String> {
        let now = self.env.clock().monotonic();
        let mut replies = Vec::new();
        for group in self.groups.values_mut() {
            let mut group_replies = Vec::new();
            group.tick(now, &mut group_replies);
            group.check_invariants();
            replies.extend(group_replies.into_iter().map(|r| (group.group_id.clone(), r)));
        }
        let mut changed = Vec::new();
        for group in self.consumer_groups.values_mut() {
            let epoch = group.group_epoch;
            group.tick(now);
            if group.group_epoch != epoch {
                changed.push(group.group_id.clone());
            }
        }
        self.tick_share_groups(now);
        self.deliver(replies);
        for group_id in &changed {
            // Only an expiry can leave every member classic.
            self.maybe_downgrade(group_id, true, now);
        }
        changed
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

    async fn handle(&mut self, command: Command) {
        let now = self.env.clock().monotonic();
        match command {
            Command::Classic(command) => self.handle_classic(command, now).await,
            Command::Consumer(command) => self.handle_consumer(command, now).await,
            Command::Offsets(command) => self.handle_offsets(command, now).await,
            Command::Share(command) => self.handle_share(command, now).await,
            Command::Admin(command) => self.handle_admin(command).await,
        }
    }
}
