//! The transaction coordinator actor: owns the transactional ids of this broker (every slot,
//! until cluster mode assigns slots to brokers), drives their state machine (`state`) and
//! makes each transition durable in the slot files (`store`) before it answers. Commands are
//! handled in groups (`run`): their transitions are staged, each changed slot file is written
//! once, and only then do the answers, dispatches and fences of the group go out.
//!
//! EndTxn is two-phase. The Prepare* entry is persisted first; it keeps the partitions and
//! groups of the transaction, which is the durable list of the markers still owed. A dispatch
//! task then writes every marker into its partition log and waits until each one is durable,
//! ends the staged offsets of every group, and reports back; only then is Complete* persisted
//! and the EndTxn answered. If anything fails the entry stays prepared: the reconcile pass
//! retries it, and at start-up every prepared entry is dispatched again. Dispatching twice is
//! harmless: a second marker ends nothing, and offsets already ended are not staged any more.
//!
//! The reaper runs on the same tick and aborts Ongoing transactions past their timeout with an
//! epoch bump, so the producer that went quiet is fenced before its markers are written.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Duration, Instant};

use super::marker_queue::{self, Queued};
use super::markers;
use super::state::{self, EndOutcome, InitOutcome, TopicPartition, TxnEntry, TxnError, TxnState};
use super::store::TxnStore;
use crate::cluster::ownership::Ownership;
use crate::cluster::producer_ids::ProducerIdsHandle;
use crate::cluster::{Kind, MembershipHandle, group_key, txn_slot_key};
use crate::config::BrokerConfig;
use crate::env::{Clock, Env, Rng, Spawner};
use crate::error::{CoreError, CoreResult};
use crate::group::GroupsHandle;
use crate::participant::{Join, Participant};
use crate::topics::TopicsHandle;
use crate::txn::peers::{self, Endpoint, PeersHandle};

const QUEUE_CAPACITY: usize = 1024;
/// The wait before a failed dispatch is tried again.
const RETRY_DISPATCH_MS: u64 = 500;

/// The coordinator epoch written into markers. kaas has no coordinator failover of its own
/// yet; cluster mode will make this the slot's ownership epoch.
const COORDINATOR_EPOCH: i32 = 0;

/// The steps of EndTxn at which the simulator crashes the broker (`kaas-sim`'s txn-crash).
pub const CRASH_POINTS: [&str; 5] =
    ["txn.before_prepare", "txn.after_prepare", "txn.between_markers", "txn.before_complete", "txn.after_complete"];

/// Where an answer naming a producer id and epoch goes (InitProducerId, EndTxn).
type IdsReply = oneshot::Sender<CoreResult<(i64, i16)>>;

enum Command {
    InitProducerId {
        transactional_id: String,
        transaction_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        reply: IdsReply,
    },
    AddPartitions {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    AddOffsets {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        group_id: String,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    EndTxn {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        transaction_version: i16,
        reply: IdsReply,
    },
    Verify {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        member: Participant,
        join: Join,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    Describe(Vec<String>, oneshot::Sender<Vec<(String, CoreResult<Option<TxnEntry>>)>>),
    List(oneshot::Sender<Vec<TxnEntry>>),
    /// From a dispatch task: the markers and offsets of this prepared entry are durable (or not).
    Dispatched {
        entry: TxnEntry,
        result: CoreResult<()>,
    },
}

impl Command {
    /// The transactional id a client command is about: its slot must be this broker's.
    fn transactional_id(&self) -> Option<&str> {
        match self {
            Command::InitProducerId { transactional_id, .. }
            | Command::AddPartitions { transactional_id, .. }
            | Command::AddOffsets { transactional_id, .. }
            | Command::EndTxn { transactional_id, .. }
            | Command::Verify { transactional_id, .. } => Some(transactional_id),
            Command::Describe(..) | Command::List(_) | Command::Dispatched { .. } => None,
        }
    }

    /// Answers the command with `error` after the group's flush, without handling it.
    fn refuse(self, error: CoreError, after: &mut Vec<After>) {
        match self {
            Command::InitProducerId { reply, .. } | Command::EndTxn { reply, .. } => {
                after.push(After::Ids(reply, Err(error)))
            }
            Command::AddPartitions { reply, .. }
            | Command::AddOffsets { reply, .. }
            | Command::Verify { reply, .. } => after.push(After::Reply(reply, Err(error))),
            Command::Describe(..) | Command::List(_) | Command::Dispatched { .. } => {}
        }
    }
}

#[derive(Clone)]
pub struct TxnCoordinatorHandle {
    tx: mpsc::Sender<Command>,
}

fn gone<T>() -> CoreResult<T> {
    Err(CoreError::CoordinatorNotAvailable)
}

impl TxnCoordinatorHandle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<CoreResult<T>>) -> Command) -> CoreResult<T> {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(make(reply)).await.is_err() {
            return gone();
        }
        rx.await.unwrap_or_else(|_| gone())
    }

    /// InitProducerId with a transactional id: the (producer id, epoch) to use.
    pub async fn init_producer_id(
        &self,
        transactional_id: String,
        transaction_timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> CoreResult<(i64, i16)> {
        self.ask(|reply| Command::InitProducerId { transactional_id, transaction_timeout_ms, expected, reply }).await
    }

    pub async fn add_partitions(
        &self,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
    ) -> CoreResult<()> {
        self.ask(|reply| Command::AddPartitions { transactional_id, producer_id, producer_epoch, partitions, reply })
            .await
    }

    pub async fn add_offsets(
        &self,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        group_id: String,
    ) -> CoreResult<()> {
        self.ask(|reply| Command::AddOffsets { transactional_id, producer_id, producer_epoch, group_id, reply }).await
    }

    /// Answered once the transaction is complete (every marker and offset durable) with the
    /// producer id and epoch the producer goes on with: bumped from `transaction_version` 2.
    pub async fn end_txn(
        &self,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        transaction_version: i16,
    ) -> CoreResult<(i64, i16)> {
        self.ask(|reply| Command::EndTxn {
            transactional_id,
            producer_id,
            producer_epoch,
            commit,
            transaction_version,
            reply,
        })
        .await
    }

    /// KIP-890: Ok if `member` is in the producer's open transaction, or (`Join::Add`) is
    /// now, durably.
    pub async fn verify(
        &self,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        member: Participant,
        join: Join,
    ) -> CoreResult<()> {
        self.ask(|reply| Command::Verify { transactional_id, producer_id, producer_epoch, member, join, reply }).await
    }

    /// The entries of the named transactional ids (None: unknown), or why this broker cannot
    /// say (NOT_COORDINATOR: a peer coordinates the id).
    pub async fn describe(&self, ids: Vec<String>) -> CoreResult<Vec<(String, CoreResult<Option<TxnEntry>>)>> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Describe(ids, reply)).await.map_err(|_| CoreError::CoordinatorNotAvailable)?;
        rx.await.map_err(|_| CoreError::CoordinatorNotAvailable)
    }

    pub async fn list(&self) -> CoreResult<Vec<TxnEntry>> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::List(reply)).await.map_err(|_| CoreError::CoordinatorNotAvailable)?;
        rx.await.map_err(|_| CoreError::CoordinatorNotAvailable)
    }
}

impl From<TxnError> for CoreError {
    fn from(e: TxnError) -> Self {
        match e {
            TxnError::ProducerFenced => CoreError::ProducerFenced,
            TxnError::InvalidProducerIdMapping => CoreError::InvalidProducerIdMapping,
            TxnError::ConcurrentTransactions => CoreError::ConcurrentTransactions,
            TxnError::InvalidTxnState => CoreError::InvalidTxnState,
            TxnError::InvalidTransactionTimeout => CoreError::InvalidTransactionTimeout,
        }
    }
}

struct TxnCoordinator<E: Env> {
    env: E,
    config: Arc<BrokerConfig>,
    store: TxnStore<E::Volume>,
    topics: TopicsHandle,
    groups: GroupsHandle,
    producer_ids: ProducerIdsHandle,
    /// For dispatch tasks to report back; weak, so that dropping every handle stops the actor.
    me: mpsc::WeakSender<Command>,
    /// Transactional ids with a dispatch task running.
    dispatching: BTreeMap<String, ()>,
    /// EndTxn requests answered when their transaction completes.
    waiting: BTreeMap<String, Vec<IdsReply>>,
    next_reap: Instant,
    /// When failed dispatches are tried again, if any failed.
    retry_at: Option<Instant>,
    membership: MembershipHandle,
    peers: PeersHandle,
    /// Slots this broker coordinates now: the ownership epoch it claimed each under and the
    /// When (this broker's wall clock) each owned slot was taken: its transactions' timeouts
    /// run from then at the earliest, since their start times came from another clock.
    taken_at_ms: BTreeMap<u32, i64>,
    /// Slots this broker coordinates now: the ownership epoch it claimed each under and the
    /// lease session it claimed it in. A slot (re)gained is claimed anew and read again.
    ownership: Ownership<E::Volume, u32>,
    /// When the fence watcher next reads the peers' slot files.
    next_watch: Instant,
    /// A slot given up dropped changes staged since the last flush.
    dropped_staged: bool,
}

/// What the coordinator works with: the participants' actors, the producer id blocks, the
/// cluster, the peers, and the counts of the slots it holds.
pub struct Links {
    pub topics: TopicsHandle,
    pub groups: GroupsHandle,
    pub producer_ids: ProducerIdsHandle,
    pub membership: MembershipHandle,
    pub peers: PeersHandle,
    pub ownership_metrics: Arc<crate::metrics::OwnershipMetrics>,
}

/// Loads the slot files and starts the coordinator; prepared transactions are finished at once.
pub async fn start<E: Env>(env: &E, config: Arc<BrokerConfig>, links: Links) -> CoreResult<TxnCoordinatorHandle> {
    let Links { topics, groups, producer_ids, membership, peers, ownership_metrics } = links;
    let mut ownership =
        Ownership::new(env.volume().clone(), Kind::TxnSlot, |&slot| txn_slot_key(slot), ownership_metrics);
    let mut slot_epochs = BTreeMap::new();
    for slot in 0..state::SLOTS {
        let current = ownership.current_epoch(&slot).await;
        let current = current.map_err(|e| CoreError::Storage(format!("transaction slot {slot}: {e}")))?;
        slot_epochs.insert(slot, current);
    }
    let store = TxnStore::load(env.volume().clone(), &slot_epochs).await?;
    // Fences live in memory: after a restart every partition learns every epoch again, before
    // the broker serves anyone.
    let epochs: BTreeMap<i64, i16> = store.iter().map(|e| (e.producer_id, e.producer_epoch)).collect();
    fence_everywhere(&topics, Arc::new(epochs)).await;
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let interval = Duration::from_millis(config.transaction_cleanup_interval_ms);
    let coordinator = TxnCoordinator {
        env: env.clone(),
        config,
        store,
        topics,
        groups,
        producer_ids,
        me: tx.downgrade(),
        dispatching: BTreeMap::new(),
        waiting: BTreeMap::new(),
        next_reap: env.clock().monotonic() + interval,
        retry_at: Some(env.clock().monotonic()),
        membership,
        peers,
        taken_at_ms: BTreeMap::new(),
        ownership,
        next_watch: env.clock().monotonic(),
        dropped_staged: false,
    };
    env.spawner().spawn("txn-coordinator", coordinator.run(rx));
    Ok(TxnCoordinatorHandle { tx })
}

/// What a command leads to once the mutations of its group are durable (or failed to be).
enum After {
    /// An answer naming the producer id and epoch to go on with (InitProducerId, EndTxn).
    Ids(IdsReply, CoreResult<(i64, i16)>),
    Reply(oneshot::Sender<CoreResult<()>>, CoreResult<()>),
    Fence(i64, i16),
    Dispatch(TxnEntry),
    /// An EndTxn whose transaction is prepared: answered when it completes.
    Park(String, IdsReply),
    /// The transaction completed: answer its parked EndTxns.
    Completed(String),
}

/// Commands handled between two flushes at most.
const GROUP_COMMIT_MAX: usize = 256;

impl<E: Env> TxnCoordinator<E> {
    /// Group commit, as the partition actor does: every queued command is handled (its
    /// transition staged), the changed slot files are written once, and only then are the
    /// answers sent and the markers dispatched.
    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        loop {
            let deadline = self.retry_at.map_or(self.next_reap, |r| r.min(self.next_reap));
            let mut after = Vec::new();
            let command = tokio::select! {
                biased;
                command = rx.recv() => command,
                _ = self.env.clock().sleep_until(self.next_watch) => {
                    self.watch_fences().await;
                    continue;
                }
                _ = self.env.clock().sleep_until(deadline) => {
                    self.tick(&mut after).await;
                    self.commit(after).await;
                    continue;
                }
            };
            let Some(command) = command else { return };
            self.handle(command, &mut after).await;
            let mut handled = 1;
            while handled < GROUP_COMMIT_MAX
                && let Ok(command) = rx.try_recv()
            {
                self.handle(command, &mut after).await;
                handled += 1;
            }
            self.commit(after).await;
        }
    }

    /// Makes the staged transitions durable, then carries out what they lead to.
    async fn commit(&mut self, after: Vec<After>) {
        let preparing = after.iter().any(|a| matches!(a, After::Park(..)));
        let completing = after.iter().any(|a| matches!(a, After::Completed(_)));
        if preparing && crate::crash_point!("txn.before_prepare") {
            crate::park_for_crash().await;
        }
        let written = self.store.flush(self.env.spawner()).await;
        for slot in self.store.take_failed_slots() {
            // What the file holds is not known (a failed fsync may still have landed it, and
            // peers fence from it): the slot is given up and taken again from the file.
            tracing::warn!(slot, "a transaction slot's write failed; reading it again from the volume");
            self.give_up_slot(slot).await;
        }
        // Write, then verify: answered only if the lease held past the write, and no peer
        // claimed a newer epoch of a slot written meanwhile. Otherwise a peer may own the
        // slots by now, and finishes what was written.
        let mut flushed = written.as_ref().map(|_| ()).map_err(Clone::clone);
        if flushed.is_ok() && !self.membership.view().lease_valid(self.env.clock().monotonic()) {
            flushed = Err(CoreError::NotCoordinator);
        }
        for (slot, epoch) in written.clone().unwrap_or_default() {
            match self.ownership.current_epoch(&slot).await {
                Ok(current) if current == epoch => {}
                // A newer claim (or none readable): this broker is not the slot's coordinator.
                _ => {
                    tracing::warn!(slot, epoch, "a peer claimed a slot written under an older epoch; giving it up");
                    self.give_up_slot(slot).await;
                    flushed = Err(CoreError::NotCoordinator);
                }
            }
        }
        if std::mem::take(&mut self.dropped_staged) && flushed.is_ok() {
            flushed = Err(CoreError::NotCoordinator);
        }
        if flushed.is_ok() && preparing && crate::crash_point!("txn.after_prepare") {
            crate::park_for_crash().await;
        }
        if flushed.is_ok() && completing && crate::crash_point!("txn.after_complete") {
            crate::park_for_crash().await;
        }
        if let Err(e) = &flushed {
            tracing::warn!(error = %e, "cannot persist transaction state; the requests are answered as retriable");
            self.retry_soon();
        }
        let failed = |result: CoreResult<()>| match (&flushed, result) {
            (Err(_), Ok(())) => Err(CoreError::CoordinatorNotAvailable),
            (_, result) => result,
        };
        // A bump some live peer did not take is answered once that peer's fence watcher must
        // have read it from the slot files: until then a zombie's idempotent batch there (which
        // KIP-890 verification does not cover) could still be taken at the old epoch.
        let mut answer_at = None;
        for action in after {
            match action {
                After::Ids(reply, result) => {
                    let result = match (&flushed, result) {
                        (Err(_), Ok(_)) => Err(CoreError::CoordinatorNotAvailable),
                        (_, result) => result,
                    };
                    match answer_at {
                        Some(at) if result.is_ok() => {
                            let env = self.env.clone();
                            self.env.spawner().spawn("txn-fenced-answer", async move {
                                env.clock().sleep_until(at).await;
                                let _ = reply.send(result);
                            });
                        }
                        _ => drop(reply.send(result)),
                    }
                }
                After::Reply(reply, result) => drop(reply.send(failed(result))),
                After::Fence(..) | After::Dispatch(_) if flushed.is_err() => {}
                After::Fence(producer_id, producer_epoch) => {
                    if !self.fence(producer_id, producer_epoch).await {
                        let watch = self.config.broker_heartbeat_interval_ms + self.config.broker_lease_drift_margin_ms;
                        answer_at = Some(self.env.clock().monotonic() + Duration::from_millis(watch));
                    }
                }
                After::Dispatch(entry) => self.dispatch(entry),
                After::Park(id, reply) if flushed.is_ok() => self.waiting.entry(id).or_default().push(reply),
                After::Park(_, reply) => drop(reply.send(Err(CoreError::CoordinatorNotAvailable))),
                After::Completed(id) => {
                    let ids = self.store.get(&id).map(|e| (e.producer_id, e.producer_epoch));
                    for reply in self.waiting.remove(&id).unwrap_or_default() {
                        // A retriable answer if the completion is not durable: the client
                        // retries EndTxn and the reconcile finishes the transaction.
                        let answer = failed(Ok(())).and_then(|()| ids.ok_or(CoreError::CoordinatorNotAvailable));
                        let _ = reply.send(answer);
                    }
                }
            }
        }
    }

    fn retry_soon(&mut self) {
        let retry = self.env.clock().monotonic() + Duration::from_millis(RETRY_DISPATCH_MS);
        self.retry_at = Some(self.retry_at.map_or(retry, |r| r.min(retry)));
    }

    /// The reaper (on its interval) and the reconcile (then, and after a failed dispatch). The
    /// slots the view gives this broker are taken (read from their files) first, so that a
    /// prepared transaction of a slot gained is finished without waiting for a client.
    async fn tick(&mut self, after: &mut Vec<After>) {
        self.ownership.retry_releases().await;
        for slot in 0..state::SLOTS {
            if let Err(e) = self.own_slot(slot).await
                && !matches!(e, CoreError::NotCoordinator | CoreError::CoordinatorLoadInProgress)
            {
                tracing::warn!(slot, error = ?e, "cannot take over a transaction slot");
            }
        }
        let now = self.env.clock().monotonic();
        if now >= self.next_reap {
            self.next_reap = now + Duration::from_millis(self.config.transaction_cleanup_interval_ms);
            self.reap(after);
        }
        self.retry_at = None;
        let prepared: Vec<TxnEntry> = self
            .store
            .iter()
            .filter(|e| e.state.is_prepared() && self.coordinates(&e.transactional_id))
            .cloned()
            .collect();
        after.extend(prepared.into_iter().map(After::Dispatch));
    }

    /// Aborts every Ongoing transaction past its timeout, with an epoch bump.
    fn reap(&mut self, after: &mut Vec<After>) {
        let now_ms = self.env.clock().now_ms();
        let timed_out: Vec<TxnEntry> = self
            .store
            .iter()
            .filter(|e| self.coordinates(&e.transactional_id))
            .filter_map(|e| {
                // A transaction begun before this broker took its slot is timed from the
                // take-over: its start time is another broker's wall clock, never trusted.
                let taken_at = self.taken_at_ms.get(&state::slot(&e.transactional_id)).copied().unwrap_or(i64::MIN);
                let late_by = taken_at.saturating_sub(e.ongoing_since_ms).max(0);
                state::time_out(e, now_ms.saturating_sub(late_by))
            })
            .collect();
        for aborting in timed_out {
            tracing::info!(
                transactional_id = %aborting.transactional_id,
                producer_id = aborting.producer_id,
                producer_epoch = aborting.producer_epoch,
                "aborting a timed-out transaction"
            );
            after.push(After::Fence(aborting.producer_id, aborting.producer_epoch));
            after.push(After::Dispatch(aborting.clone()));
            self.store.stage(aborting);
        }
    }

    /// Whether this broker coordinates `slot` now: the view gives it the slot, and it claimed
    /// the slot's next epoch and read its file since it last gained it (a peer may have
    /// coordinated it meanwhile).
    async fn own_slot(&mut self, slot: u32) -> CoreResult<()> {
        let view = self.membership.view();
        let now = self.env.clock().monotonic();
        let key = txn_slot_key(slot);
        if !view.should_own(&key, now) {
            self.give_up_slot(slot).await;
            return Err(CoreError::NotCoordinator);
        }
        match self.ownership.held(&slot) {
            Some(held) if held.session == view.session => return Ok(()),
            Some(_) => self.give_up_slot(slot).await,
            None => {}
        }
        let claimed = match self.ownership.claim(&slot, &view, now).await {
            Ok(Some(claimed)) => claimed,
            // The previous coordinator has not let go yet, nor is it gone for sure.
            Ok(None) => return Err(CoreError::CoordinatorLoadInProgress),
            Err(e) => return Err(CoreError::Storage(format!("transaction slot {slot}: {e}"))),
        };
        if let Err(e) = self.store.take_slot(slot, claimed.epoch).await {
            tracing::error!(slot, error = ?e, "cannot read a transaction slot taken over");
            self.give_up_slot(slot).await;
            return Err(e);
        }
        tracing::info!(slot, epoch = claimed.epoch, "took over transaction slot");
        self.taken_at_ms.insert(slot, self.env.clock().now_ms());
        Ok(())
    }

    /// Stops coordinating `slot`: what is staged in it is dropped (its next owner finishes it),
    /// waiting EndTxns are told to look again, and the claim is released.
    async fn give_up_slot(&mut self, slot: u32) {
        if self.ownership.held(&slot).is_none() {
            return;
        }
        // A change staged in the slot since the last flush is dropped: the answers of this
        // group commit are all sent as retriable, none as done.
        self.dropped_staged |= self.store.give_up_slot(slot);
        let moved: Vec<String> = self.waiting.keys().filter(|id| state::slot(id) == slot).cloned().collect();
        for id in moved {
            for reply in self.waiting.remove(&id).unwrap_or_default() {
                let _ = reply.send(Err(CoreError::NotCoordinator));
            }
        }
        self.ownership.release(&slot).await;
    }

    /// The fence watcher: every heartbeat, reads the slots peers coordinate and fences this
    /// broker's partitions against every epoch bump it had not seen. A peer's fast-path fence
    /// may not have reached this broker (it was starting, or cut off); this is the slow path.
    async fn watch_fences(&mut self) {
        self.next_watch =
            self.env.clock().monotonic() + Duration::from_millis(self.config.broker_heartbeat_interval_ms);
        let mut bumped = BTreeMap::new();
        let peers_slots: Vec<u32> = (0..state::SLOTS).filter(|s| self.ownership.held(s).is_none()).collect();
        for slot in peers_slots {
            let epoch = match self.ownership.current_epoch(&slot).await {
                Ok(epoch) => epoch,
                Err(e) => {
                    tracing::debug!(slot, error = %e, "fence watcher cannot read a slot's claim");
                    continue;
                }
            };
            match self.store.refresh_slot(slot, epoch).await {
                Ok(changed) => bumped.extend(changed),
                Err(e) => tracing::debug!(slot, error = %e, "fence watcher cannot read a slot"),
            }
        }
        fence_everywhere(&self.topics, Arc::new(bumped)).await;
    }

    /// Whether the transactional id's slot is this broker's now, by the view alone (for the
    /// reaper and the reconcile, which must leave other brokers' transactions alone).
    fn coordinates(&self, transactional_id: &str) -> bool {
        let slot = state::slot(transactional_id);
        let view = self.membership.view();
        self.ownership.holds_in(&slot, view.session)
            && view.should_own(&txn_slot_key(slot), self.env.clock().monotonic())
    }

    async fn handle(&mut self, command: Command, after: &mut Vec<After>) {
        let now_ms = self.env.clock().now_ms();
        if let Some(transactional_id) = command.transactional_id()
            && let Err(e) = self.own_slot(state::slot(transactional_id)).await
        {
            command.refuse(e, after);
            return;
        }
        match command {
            Command::InitProducerId { transactional_id, transaction_timeout_ms, expected, reply } => {
                let result = self.init_producer_id(transactional_id, transaction_timeout_ms, expected, after).await;
                after.push(After::Ids(reply, result));
            }
            Command::AddPartitions { transactional_id, producer_id, producer_epoch, partitions, reply } => {
                let result = self.update(&transactional_id, |e| {
                    state::add_partitions(e, producer_id, producer_epoch, &partitions, now_ms)
                });
                after.push(After::Reply(reply, result));
            }
            Command::AddOffsets { transactional_id, producer_id, producer_epoch, group_id, reply } => {
                let result = self.update(&transactional_id, |e| {
                    state::add_offsets(e, producer_id, producer_epoch, &group_id, now_ms)
                });
                after.push(After::Reply(reply, result));
            }
            Command::EndTxn { transactional_id, producer_id, producer_epoch, commit, transaction_version, reply } => {
                let ended = self
                    .end_txn(&transactional_id, producer_id, producer_epoch, commit, transaction_version, after)
                    .await;
                match ended {
                    Ok(true) => after.push(After::Park(transactional_id, reply)),
                    Ok(false) => {
                        let entry = self.store.get(&transactional_id).expect("an entry that completed");
                        after.push(After::Ids(reply, Ok((entry.producer_id, entry.producer_epoch))))
                    }
                    Err(e) => after.push(After::Ids(reply, Err(e))),
                }
            }
            Command::Verify { transactional_id, producer_id, producer_epoch, member, join, reply } => {
                // Answered after the flush: the state it was checked against (or the member
                // added) is durable by then.
                let result = match join {
                    Join::Verify => match self.store.get(&transactional_id) {
                        None => Err(CoreError::InvalidProducerIdMapping),
                        Some(entry) => {
                            state::verify(entry, producer_id, producer_epoch, &member).map_err(CoreError::from)
                        }
                    },
                    Join::Add => self.update_if(&transactional_id, |e| {
                        state::add_implicitly(e, producer_id, producer_epoch, &member, now_ms)
                    }),
                };
                after.push(After::Reply(reply, result));
            }
            Command::Describe(ids, reply) => {
                let mut described = Vec::new();
                for id in ids {
                    let entry = self.own_slot(state::slot(&id)).await.map(|()| self.store.get(&id).cloned());
                    described.push((id, entry));
                }
                let _ = reply.send(described);
            }
            Command::List(reply) => {
                // The store also holds peers' slots as last read (for fences): not this
                // broker's to list.
                let _ =
                    reply.send(self.store.iter().filter(|e| self.coordinates(&e.transactional_id)).cloned().collect());
            }
            Command::Dispatched { entry, result } => self.dispatched(entry, result, after),
        }
    }

    async fn init_producer_id(
        &mut self,
        transactional_id: String,
        transaction_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        after: &mut Vec<After>,
    ) -> CoreResult<(i64, i16)> {
        let existing = self.store.get(&transactional_id).cloned();
        let fresh = if state::may_need_fresh_producer_id(existing.as_ref()) {
            Some(self.producer_ids.allocate().await?)
        } else {
            None
        };
        let outcome = state::init_producer_id(
            existing.as_ref(),
            &transactional_id,
            transaction_timeout_ms,
            self.config.transaction_max_timeout_ms,
            expected,
            || fresh.expect("allocated when it may be needed"),
        )?;
        match outcome {
            InitOutcome::Ready(entry) => {
                let answer = (entry.producer_id, entry.producer_epoch);
                if existing.as_ref() != Some(&entry) {
                    if let Some(old) = existing.filter(|old| old.producer_id == entry.producer_id) {
                        debug_assert!(entry.producer_epoch > old.producer_epoch);
                        after.push(After::Fence(entry.producer_id, entry.producer_epoch));
                    }
                    self.store.stage(entry);
                }
                Ok(answer)
            }
            InitOutcome::AbortFirst(aborting) => {
                after.push(After::Fence(aborting.producer_id, aborting.producer_epoch));
                after.push(After::Dispatch(aborting.clone()));
                self.store.stage(aborting);
                Err(CoreError::ConcurrentTransactions)
            }
        }
    }

    /// Applies a transition to an existing entry and stages it.
    fn update(
        &mut self,
        transactional_id: &str,
        transition: impl FnOnce(&TxnEntry) -> Result<TxnEntry, TxnError>,
    ) -> CoreResult<()> {
        self.update_if(transactional_id, |e| transition(e).map(Some))
    }

    /// Applies a transition that may change nothing (None) to an existing entry.
    fn update_if(
        &mut self,
        transactional_id: &str,
        transition: impl FnOnce(&TxnEntry) -> Result<Option<TxnEntry>, TxnError>,
    ) -> CoreResult<()> {
        let entry = self.store.get(transactional_id).ok_or(CoreError::InvalidProducerIdMapping)?;
        if let Some(next) = transition(entry)? {
            self.store.stage(next);
        }
        Ok(())
    }

    /// The first phase of EndTxn. Ok(true): prepared, to be dispatched once durable, and
    /// answered on completion.
    async fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        transaction_version: i16,
        after: &mut Vec<After>,
    ) -> CoreResult<bool> {
        let entry = self.store.get(transactional_id).ok_or(CoreError::InvalidProducerIdMapping)?;
        // A v2 end with the epoch used up continues under a fresh producer id.
        let fresh = match transaction_version >= state::TV2 && entry.producer_epoch >= state::EPOCH_MAX {
            true => Some(self.producer_ids.allocate().await?),
            false => None,
        };
        let entry = self.store.get(transactional_id).ok_or(CoreError::InvalidProducerIdMapping)?;
        let now_ms = self.env.clock().now_ms();
        let fresh = || fresh.expect("allocated when the epoch is used up");
        match state::end_txn(entry, producer_id, producer_epoch, commit, transaction_version, now_ms, fresh)? {
            EndOutcome::AlreadyComplete => Ok(false),
            EndOutcome::Prepared(prepared) => {
                after.push(After::Dispatch(prepared.clone()));
                self.store.stage(prepared);
                Ok(true)
            }
        }
    }

    /// Starts the task that writes a prepared entry's markers and ends its offsets, unless one
    /// is running for the id already, or the entry is no longer current.
    fn dispatch(&mut self, entry: TxnEntry) {
        if self.dispatching.contains_key(&entry.transactional_id)
            || self.store.get(&entry.transactional_id) != Some(&entry)
        {
            return;
        }
        assert!(entry.state.is_prepared(), "only a prepared transaction owes markers");
        let Some(me) = self.me.upgrade() else { return };
        self.dispatching.insert(entry.transactional_id.clone(), ());
        let env = self.env.clone();
        let to = MarkerRoutes {
            env: self.env.clone(),
            topics: self.topics.clone(),
            groups: self.groups.clone(),
            membership: self.membership.clone(),
            peers: self.peers.clone(),
        };
        self.env.spawner().spawn("txn-dispatch", async move {
            if crate::buggify!("txn.slow_dispatch") {
                // Widens the window between a durable prepare and its markers.
                env.clock().sleep_ms(env.rng().below(300)).await;
            }
            let result = if crate::buggify!("txn.dispatch_fails") {
                Err(CoreError::Storage("injected dispatch failure".into()))
            } else {
                write_markers(&to, &entry).await
            };
            let _ = me.send(Command::Dispatched { entry, result }).await;
        });
    }

    /// The second phase: stages Complete* once the markers are durable; the parked EndTxns
    /// are answered when that is durable too.
    fn dispatched(&mut self, entry: TxnEntry, result: CoreResult<()>, after: &mut Vec<After>) {
        self.dispatching.remove(&entry.transactional_id);
        let id = entry.transactional_id.clone();
        if let Err(e) = result {
            tracing::warn!(transactional_id = %id, error = %e, "transaction markers not yet durable; retrying");
            self.retry_soon();
            for reply in self.waiting.remove(&id).unwrap_or_default() {
                // Retriable: the client retries EndTxn, and the reconcile finishes the transaction.
                let _ = reply.send(Err(CoreError::CoordinatorNotAvailable));
            }
            return;
        }
        if let Some(current) = self.store.get(&id).filter(|current| **current == entry) {
            let done = state::complete(current);
            self.store.stage(done);
        }
        after.push(After::Completed(id));
    }

    /// Refuses the producer's older epochs on every partition now, whether or not its next
    /// transaction ever writes there: here, and on every live peer (fast path). A peer that
    /// does not answer in time learns it from the slot files (`watch_fences`) within a
    /// heartbeat, and a partition's next owner from those files when its broker starts.
    /// Answers whether every live peer took it.
    async fn fence(&self, producer_id: i64, producer_epoch: i16) -> bool {
        fence_everywhere(&self.topics, Arc::new(BTreeMap::from([(producer_id, producer_epoch)]))).await;
        if crate::mutant!(FenceNotSentToPeers) {
            return true;
        }
        let view = self.membership.view();
        let mut asked = Vec::new();
        for to in view.peers_with_lease() {
            asked.push(self.peers.queue_fence(to, producer_id, producer_epoch).await);
        }
        let deadline = self.env.clock().monotonic() + Duration::from_millis(FENCE_WAIT_MS);
        let mut all_took = true;
        for answer in asked {
            tokio::select! {
                biased;
                answered = answer => {
                    if !matches!(answered, Ok(Ok(()))) {
                        tracing::debug!(producer_id, producer_epoch, ?answered, "a peer did not take a fence; its watcher will");
                        all_took = false;
                    }
                }
                _ = self.env.clock().sleep_until(deadline) => {
                    all_took = false;
                    break;
                }
            }
        }
        all_took
    }
}

/// How long a fence waits for peers to apply it before the bump is answered anyway.
const FENCE_WAIT_MS: u64 = 2000;

pub(crate) async fn fence_everywhere(topics: &TopicsHandle, epochs: Arc<BTreeMap<i64, i16>>) {
    if epochs.is_empty() {
        return;
    }
    let snapshot = topics.snapshot();
    for topic in snapshot.topics.values() {
        for partition in &topic.partitions {
            partition.fence(epochs.clone()).await;
        }
    }
    // Queued on every partition above before this returns; the topics actor keeps them for
    // the partitions it starts later.
    topics.fence(epochs).await;
}

/// Writes the markers of a prepared transaction into every participant: here (`markers`, the
/// path every marker takes on the broker that owns its participant) for what this broker owns,
/// and by WriteTxnMarkers to the owner of the rest (left in the marker queue first, in case the
/// call is lost); then waits until every one is durable. Groups end last, once every
/// partition's marker is durable.
async fn write_markers<E: Env>(to: &MarkerRoutes<E>, entry: &TxnEntry) -> CoreResult<()> {
    let commit = entry.state == TxnState::PrepareCommit;
    let (local, remote) = route(to, entry).await?;
    let markers_of = |participants: Vec<Participant>| peers::Markers {
        producer_id: entry.producer_id,
        producer_epoch: entry.producer_epoch,
        commit,
        coordinator_epoch: COORDINATOR_EPOCH,
        participants,
    };
    let local = markers::queue_here(&to.topics, &markers_of(local)).await;
    let (local_partitions, local_groups): (Vec<_>, Vec<_>) = local.into_iter().partition(|d| d.is_queued());
    tracing::debug!(transactional_id = %entry.transactional_id, local = local_partitions.len(), ?remote, "writing markers");
    let mut asked = Vec::new();
    for (peer, members) in remote {
        let markers = markers_of(members.clone());
        // The entries of every peer are written at once; each call goes once its entry is
        // durable, since the peer writes only what an entry owes (`marker_queue`).
        let (done, queued) = oneshot::channel();
        let (volume, id, to_peer) = (to.env.volume().clone(), entry.transactional_id.clone(), peer.broker_id);
        to.env.spawner().spawn("marker-enqueue", async move {
            let _ = done.send(Queued::enqueue(volume, to_peer, &id, &markers).await.map(|queued| (queued, markers)));
        });
        asked.push((peer, members, queued));
    }
    let mut called = Vec::new();
    for (peer, members, queued) in asked {
        let queued = queued.await.unwrap_or_else(|_| Err(std::io::Error::other("enqueue task stopped")));
        let (queued, markers) =
            queued.map_err(|e| CoreError::Storage(format!("marker queue of broker {}: {e}", peer.broker_id)))?;
        let answer = to.peers.queue_markers(peer.clone(), markers).await;
        called.push((peer, members, queued, answer));
    }
    if !crate::mutant!(CompleteBeforeMarkersDurable) {
        let markers = local_partitions.len() + called.iter().map(|(_, m, _, _)| m.len()).sum::<usize>();
        let mut durable = 0;
        let mut first_durable = || {
            durable += 1;
            durable == 1 && markers > 1 && crate::crash_point!("txn.between_markers")
        };
        for delivery in local_partitions {
            delivery.durable(&to.groups).await.1?;
            if first_durable() {
                crate::park_for_crash().await;
            }
        }
        for (peer, members, queued, answer) in called {
            await_peer(to, &peer, &members, &queued, answer).await?;
            for _ in &members {
                if first_durable() {
                    crate::park_for_crash().await;
                }
            }
        }
    }
    for delivery in local_groups {
        delivery.durable(&to.groups).await.1?;
    }
    if crate::crash_point!("txn.before_complete") {
        crate::park_for_crash().await;
    }
    Ok(())
}

/// Where each participant of a prepared entry gets its marker: the participants this broker
/// owns (partitions first, then groups, as the entry lists them), and by peer the others. A
/// partition deleted since owes nothing.
async fn route<E: Env>(
    to: &MarkerRoutes<E>,
    entry: &TxnEntry,
) -> CoreResult<(Vec<Participant>, BTreeMap<Endpoint, Vec<Participant>>)> {
    let mut snapshot = to.topics.snapshot();
    if entry.partitions.iter().any(|(t, i)| snapshot.partition(t, *i).is_none()) {
        // A coordinator that just took the slot over may not have heard of a peer's topic yet.
        to.topics.refresh(entry.partitions.iter().map(|(t, _)| t.as_str())).await;
        snapshot = to.topics.snapshot();
    }
    let view = to.membership.view();
    let mut local = Vec::new();
    let mut remote: BTreeMap<Endpoint, Vec<Participant>> = BTreeMap::new();
    for participant in entry.participants() {
        let peer = match &participant {
            Participant::Partition((topic, index)) => {
                if snapshot.partition(topic, *index).is_none() {
                    // Deleted since, and owing nothing, only if its file says so: a topic this
                    // broker cannot serve yet (its file read, not yet adopted) still gets its marker.
                    match crate::topics::read_meta(to.env.volume(), topic).await? {
                        Some(meta) if *index < meta.partitions => return Err(CoreError::NotLeaderOrFollower),
                        _ => {}
                    }
                    tracing::info!(transactional_id = %entry.transactional_id, topic, index, "no marker for a partition deleted since");
                    continue;
                }
                snapshot.owner(topic, *index, &view).and_then(|owner| view.endpoint_of(owner))
            }
            Participant::Group(group_id) => view.peer_owning(&group_key(group_id)),
            // A share partition lives with its partition; a deleted topic's owes nothing.
            Participant::SharePartition((_, topic, index)) => match snapshot.partition(topic, *index) {
                None => continue,
                Some(_) => snapshot.owner(topic, *index, &view).and_then(|owner| view.endpoint_of(owner)),
            },
        };
        match peer {
            Some(peer) => remote.entry(peer).or_default().push(participant),
            None => local.push(participant),
        }
    }
    Ok((local, remote))
}

/// Waits until a peer's markers are durable: the peer answered the call, or (the call lost) its
/// marker watcher applied them from the queue. A refusal is an error at once: the marker's
/// owner moved, and the next dispatch routes it anew.
async fn await_peer<E: Env>(
    to: &MarkerRoutes<E>,
    peer: &Endpoint,
    members: &[Participant],
    queued: &Queued<E::Volume>,
    answer: oneshot::Receiver<Vec<(Participant, CoreResult<()>)>>,
) -> CoreResult<()> {
    let live = || to.membership.view().live.contains_key(&peer.broker_id);
    let storage = |e: std::io::Error| CoreError::Storage(format!("marker queue of broker {}: {e}", peer.broker_id));
    if crate::mutant!(MarkerQueueDeletedEarly) {
        queued.withdraw().await.map_err(storage)?;
    }
    let answers = tokio::select! {
        biased;
        answers = answer => answers.unwrap_or_default(),
        // The watcher got there first (the call is slow, or lost).
        settled = marker_queue::wait_settled(&to.env, queued, live) => return settled,
    };
    let mut answered = true;
    for member in members {
        match answers.iter().find(|(m, _)| m == member) {
            Some((_, Ok(()))) => {}
            Some((_, Err(e))) => {
                tracing::debug!(broker = peer.broker_id, ?member, error = %e, "marker refused by its owner");
                // Takes away the refusal the call left, if it left one: the next dispatch
                // queues anew.
                let _ = queued.settled().await;
                return Err(e.clone());
            }
            None => answered = false,
        }
    }
    if answered {
        queued.withdraw().await.map_err(storage)?;
    } else {
        tracing::debug!(broker = peer.broker_id, "no answer to the markers; waiting for the peer's marker watcher");
    }
    // Answered or not, done only when the watcher holds nothing of it either.
    marker_queue::wait_settled(&to.env, queued, live).await
}

/// Where a dispatch task sends a transaction's markers.
#[derive(Clone)]
struct MarkerRoutes<E: Env> {
    env: E,
    topics: TopicsHandle,
    groups: GroupsHandle,
    membership: MembershipHandle,
    peers: PeersHandle,
}
