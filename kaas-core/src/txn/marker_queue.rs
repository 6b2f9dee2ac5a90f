//! The durable marker queue and its watcher (DESIGN.md, "Cross-broker markers"). Before a
//! coordinator sends WriteTxnMarkers to a peer it leaves the same markers in
//! `__cluster/marker_queue/to-<peer>/<pid>-<epoch>.json`, so that they reach the peer's logs
//! through the volume when the call is lost (brokers cut off from each other, not from the
//! volume). The peer's marker watcher looks on every heartbeat.
//!
//! One rule makes a late or repeated marker harmless: a queued entry is applied only while the
//! slot file still shows its transaction prepared with the same producer id, epoch and result.
//! The call applies its markers by the same rule: it takes the entry (`.calling`), which the
//! coordinator writes before it calls, and writes nothing when it finds none. Until that
//! transaction completes, no next one can write to its partitions (AddPartitionsToTxn and
//! KIP-890 verification answer CONCURRENT_TRANSACTIONS), so a second marker of it finds nothing
//! to end. And it completes only once no entry of it is in any queue: the watcher takes an entry
//! by renaming it to `.applying`, a call by renaming it to `.calling`, and either removes it only
//! once every marker is durable; the coordinator, answered by the call, removes the `.json` and
//! then waits for no `.applying` or `.calling` to be left. An entry whose transaction is no
//! longer prepared is stale (a coordinator that died before its clean-up, a zombie's late write)
//! and removed unapplied.
//!
//! A watcher that does not own a member of its entry any more writes the markers it can and
//! turns the entry into `.refused`; its coordinator, finding that, takes it away and routes the
//! markers anew (to the members' new owners) on its next dispatch.

use std::io;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use crate::cluster::ClusterView;
use crate::cluster::claims::{Claims, Kind};
use crate::env::{Clock, Env, Spawner, Volume, join};
use crate::error::{CoreError, CoreResult};
use crate::group::GroupsHandle;
use crate::participant::Participant;
use crate::topics::TopicsHandle;
use crate::txn::markers::write_markers_here;
use crate::txn::peers::Markers;
use crate::txn::state::TxnState;
use crate::txn::state::txn_key;
use crate::txn::store;

pub const MARKER_QUEUE_DIR: &str = "__cluster/marker_queue";
const FORMAT_VERSION: u32 = 1;
/// Where the simulator may crash the watcher: an entry taken, none of its markers written.
pub const CRASH_POINTS: [&str; 1] = ["txn.queue_taken"];
/// How often a coordinator whose call got no answer looks whether the watcher applied it.
const POLL_MS: u64 = 100;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct QueueFile {
    format_version: u32,
    transactional_id: String,
    markers: Markers,
}

fn dir(to: i32) -> String {
    join(MARKER_QUEUE_DIR, &format!("to-{to}"))
}

fn queued_path(to: i32, markers: &Markers) -> String {
    join(&dir(to), &format!("{}-{}.json", markers.producer_id, markers.producer_epoch))
}

fn applying(queued: &str) -> String {
    format!("{}.applying", queued.strip_suffix(".json").unwrap_or(queued))
}

fn calling(queued: &str) -> String {
    format!("{}.calling", queued.strip_suffix(".json").unwrap_or(queued))
}

/// A refusal's name, from a taken entry (`.applying` or `.calling`).
fn refused(taken: &str) -> String {
    let stem = taken.strip_suffix(".applying").or_else(|| taken.strip_suffix(".calling")).unwrap_or(taken);
    format!("{stem}.refused")
}

/// Whether the error says the marker's member is owned elsewhere (for now).
fn not_mine(e: &CoreError) -> bool {
    matches!(e, CoreError::NotLeaderOrFollower | CoreError::UnknownTopicOrPartition | CoreError::NotCoordinator)
}

/// The coordinator's side: what it leaves for broker `to`, and how it learns the entry is done.
pub struct Queued<V: Volume> {
    volume: V,
    path: String,
}

impl<V: Volume> Queued<V> {
    /// Leaves `markers` for broker `to`, durably. The call that carries them may go before it
    /// is written: the entry only has to be durable before the coordinator waits on it.
    pub async fn enqueue(volume: V, to: i32, transactional_id: &str, markers: &Markers) -> io::Result<Self> {
        let file = QueueFile {
            format_version: FORMAT_VERSION,
            transactional_id: transactional_id.to_string(),
            markers: markers.clone(),
        };
        volume.create_dir_all(&dir(to)).await?;
        let path = queued_path(to, markers);
        volume.write_atomic(&path, Bytes::from(serde_json::to_vec(&file).expect("serialisable"))).await?;
        Ok(Queued { volume, path })
    }

    /// The call was answered: the entry is no longer needed. The watcher may have taken it
    /// already; `settled` tells when it is done with it.
    pub async fn withdraw(&self) -> io::Result<()> {
        self.volume.remove_file(&self.path).await
    }

    /// Whether nothing of the entry is left: the watcher applied it, or it was withdrawn. A
    /// refusal is taken away, and is an error: the next dispatch routes the markers anew.
    pub async fn settled(&self) -> CoreResult<bool> {
        let storage = |e: io::Error| CoreError::Storage(format!("{}: {e}", self.path));
        let applying = applying(&self.path);
        let refused = refused(&applying);
        if self.volume.read(&refused).await.map_err(storage)?.is_some() {
            self.volume.remove_file(&refused).await.map_err(storage)?;
            return Err(CoreError::NotLeaderOrFollower);
        }
        for path in [&self.path, &applying, &calling(&self.path)] {
            if self.volume.read(path).await.map_err(storage)?.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Waits, `POLL_MS` apart, until `queued` is settled; gives up (retriably) once `live` says
/// the peer it is addressed to is gone, since only its watcher, or the marker's next route,
/// ends it.
pub async fn wait_settled<E: Env, V: Volume>(env: &E, queued: &Queued<V>, live: impl Fn() -> bool) -> CoreResult<()> {
    let mut polls = 0u64;
    loop {
        if queued.settled().await? {
            return Ok(());
        }
        polls += 1;
        if polls.is_multiple_of(50) {
            tracing::debug!(path = queued.path, polls, "still waiting for the marker watcher");
        }
        if !live() {
            return Err(CoreError::CoordinatorNotAvailable);
        }
        env.clock().sleep_ms(POLL_MS).await;
    }
}

/// Applies taken entries by the rule above; the watcher's and the calls' side alike.
struct Applier<E: Env> {
    env: E,
    broker_id: i32,
    topics: TopicsHandle,
    groups: GroupsHandle,
    claims: Claims<E::Volume>,
}

/// The marker watcher of one broker.
struct Watcher<E: Env> {
    applier: Applier<E>,
}

/// Hands what a previous run of this broker left taken by a call (`.calling`) to the watcher:
/// no call of this run holds it. Runs before the broker serves anything.
pub async fn recover<E: Env>(env: &E, broker_id: i32) -> CoreResult<()> {
    let volume = env.volume();
    let mine = dir(broker_id);
    let storage = |e: io::Error| CoreError::Storage(format!("{mine}: {e}"));
    for name in volume.list(&mine).await.map_err(storage)? {
        if let Some(stem) = name.strip_suffix(".calling") {
            let from = join(&mine, &name);
            volume.rename(&from, &join(&mine, &format!("{stem}.applying"))).await.map_err(storage)?;
        }
    }
    Ok(())
}

/// Starts the marker watcher: it applies what the queue holds for this broker on every
/// heartbeat (each new view), until the membership actor stops or the returned sender is
/// dropped (the broker is).
pub fn start<E: Env>(
    env: &E,
    broker_id: i32,
    topics: TopicsHandle,
    groups: GroupsHandle,
    mut view: watch::Receiver<Arc<ClusterView>>,
) -> oneshot::Sender<()> {
    let (stop, mut stopped) = oneshot::channel::<()>();
    let mut watcher = Watcher { applier: Applier::new(env, broker_id, topics, groups) };
    env.spawner().spawn("marker-watcher", async move {
        loop {
            tokio::select! {
                biased;
                _ = &mut stopped => return,
                changed = view.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            watcher.apply_queued().await;
        }
    });
    stop
}

/// A peer coordinator's WriteTxnMarkers call, applied by the watcher's rule: its entry is taken
/// (`.calling`), applied while its transaction is still prepared, and removed once every marker
/// is durable, so the coordinator, waiting for the entry to go, cannot complete the transaction
/// while this call may still write. A call that finds no entry writes nothing: the watcher holds
/// it, or it is done and the call is late (under transactions v1 the next transaction has the
/// same producer id and epoch, and a late COMMIT would end it). It answers success for members
/// its entry does not name, which it owes nothing. Runs in a task of its own: a caller that goes
/// away does not leave the entry taken.
pub async fn apply_called<E: Env>(
    env: &E,
    broker_id: i32,
    topics: TopicsHandle,
    groups: GroupsHandle,
    markers: Markers,
) -> Vec<(Participant, CoreResult<()>)> {
    let (reply, answer) = oneshot::channel();
    let mut applier = Applier::new(env, broker_id, topics, groups);
    env.spawner().spawn("marker-call", async move {
        let _ = reply.send(applier.apply_call(&markers).await);
    });
    answer.await.unwrap_or_else(|_| Vec::new())
}

impl<E: Env> Watcher<E> {
    async fn apply_queued(&mut self) {
        let volume = self.applier.env.volume().clone();
        let mine = dir(self.applier.broker_id);
        let names = match volume.list(&mine).await {
            Ok(names) => names,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return tracing::warn!(error = %e, "cannot list the marker queue"),
        };
        tracing::trace!(?names, "marker queue");
        for name in names {
            let path = join(&mine, &name);
            let taken = if name.ends_with(".json") {
                let taken = applying(&path);
                match volume.rename(&path, &taken).await {
                    Ok(()) => taken,
                    // Withdrawn by its coordinator, or taken by its call, meanwhile.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        tracing::warn!(path, error = %e, "cannot take a queued marker");
                        continue;
                    }
                }
            } else if name.ends_with(".applying") {
                // Taken before a crash, or not applicable yet: tried again. (A `.calling` entry
                // is its call's until it ends; `recover` hands over those of a previous run.)
                path
            } else {
                continue;
            };
            if let Err(e) = self.applier.apply_one(&taken).await {
                tracing::debug!(path = taken, error = %e, "queued markers not applied yet");
            }
        }
    }
}

impl<E: Env> Applier<E> {
    fn new(env: &E, broker_id: i32, topics: TopicsHandle, groups: GroupsHandle) -> Self {
        Applier { env: env.clone(), broker_id, topics, groups, claims: Claims::new(env.volume().clone()) }
    }

    /// `apply_called`'s body: the answers to the call, one per member it names.
    async fn apply_call(&mut self, markers: &Markers) -> Vec<(Participant, CoreResult<()>)> {
        let volume = self.env.volume().clone();
        let queued = queued_path(self.broker_id, markers);
        let taken = calling(&queued);
        let owed = match volume.rename(&queued, &taken).await {
            Ok(()) => match self.apply_one(&taken).await {
                Ok(answers) => answers,
                Err(e) => {
                    // Kept: the watcher tries it again, and the coordinator waits for it.
                    if let Err(e) = volume.rename(&taken, &applying(&queued)).await {
                        tracing::warn!(path = taken, error = %e, "cannot hand a called entry to the watcher");
                    }
                    return markers.participants.iter().map(|m| (m.clone(), Err(e.clone()))).collect();
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::debug!(path = queued, "a call finds no queued entry: the watcher has it, or the call is late");
                Vec::new()
            }
            Err(e) => {
                let e = CoreError::Storage(format!("{queued}: {e}"));
                return markers.participants.iter().map(|m| (m.clone(), Err(e.clone()))).collect();
            }
        };
        markers
            .participants
            .iter()
            .map(|member| match owed.iter().find(|(m, _)| m == member) {
                Some((_, result)) => (member.clone(), result.clone()),
                None => (member.clone(), Ok(())),
            })
            .collect()
    }

    /// Applies one taken entry, or removes it if it is stale (no answers then); kept, and an
    /// error, when any marker is not durable; turned into `.refused` when a member is owned
    /// elsewhere, the answers saying which.
    async fn apply_one(&mut self, path: &str) -> CoreResult<Vec<(Participant, CoreResult<()>)>> {
        let volume = self.env.volume().clone();
        let storage = |e: io::Error| CoreError::Storage(format!("{path}: {e}"));
        let Some(raw) = volume.read(path).await.map_err(storage)? else { return Ok(Vec::new()) };
        let file = match serde_json::from_slice::<QueueFile>(&raw) {
            Ok(file) if file.format_version == FORMAT_VERSION => file,
            // Reported, and removed: the coordinator, finding no answer, routes the markers again.
            _ => {
                tracing::error!(path, "damaged or unknown marker queue entry; removed");
                volume.remove_file(path).await.map_err(storage)?;
                return Ok(Vec::new());
            }
        };
        if !self.still_prepared(&file).await? {
            tracing::debug!(
                path,
                transactional_id = file.transactional_id,
                "a queued entry of a transaction no longer prepared; removed"
            );
            volume.remove_file(path).await.map_err(storage)?;
            return Ok(Vec::new());
        }
        if crate::crash_point!("txn.queue_taken") {
            crate::park_for_crash().await;
        }
        let answers = write_markers_here(&self.topics, &self.groups, &file.markers).await;
        if let Some((member, Err(e))) = answers.iter().find(|(_, r)| r.as_ref().is_err_and(|e| !not_mine(e))) {
            tracing::debug!(path, ?member, error = %e, "a queued marker is not durable; kept");
            return Err(e.clone());
        }
        if answers.iter().any(|(_, r)| r.is_err()) {
            tracing::debug!(path, "a queued marker's member is owned elsewhere now; refused");
            volume.rename(path, &refused(path)).await.map_err(storage)?;
            volume.sync_dir(&dir(self.broker_id)).await.map_err(storage)?;
            return Ok(answers);
        }
        tracing::debug!(path, "queued markers applied");
        volume.remove_file(path).await.map_err(storage)?;
        Ok(answers)
    }

    /// Whether the entry's transaction is still prepared, as its slot's newest file says.
    async fn still_prepared(&mut self, file: &QueueFile) -> CoreResult<bool> {
        let epoch = self
            .claims
            .current(Kind::TxnSlot, &txn_key(&file.transactional_id))
            .await
            .map_err(|e| CoreError::Storage(e.to_string()))?
            .map_or(0, |c| c.epoch);
        let entry = store::read_entry(self.env.volume(), &file.transactional_id, epoch).await?;
        let m = &file.markers;
        let result = if m.commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
        Ok(entry.is_some_and(|e| {
            e.state == result && (e.producer_id, e.producer_epoch) == (m.producer_id, m.producer_epoch)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Broker;
    use crate::config::BrokerConfig;
    use crate::env::Rng;
    use crate::env::real::{RealEnv, RealRng};

    #[tokio::test]
    async fn the_watcher_removes_an_entry_whose_transaction_is_not_prepared_and_a_refusal_is_an_error() {
        let dir = std::env::temp_dir().join(format!("kaas-queue-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let config = BrokerConfig {
            broker_heartbeat_interval_ms: 50,
            broker_session_timeout_ms: 1000,
            ..BrokerConfig::default()
        };
        let broker = Broker::start(env.clone(), config).await.unwrap();
        let markers = commit_of_t0();
        // No slot file knows "tx": a late write of a coordinator long gone. Never applied.
        let queued = Queued::enqueue(env.volume().clone(), 0, "tx", &markers).await.unwrap();
        assert!(!queued.settled().await.unwrap());
        let mut settled = false;
        for _ in 0..100 {
            if queued.settled().await.unwrap() {
                settled = true;
                break;
            }
            env.clock().sleep_ms(20).await;
        }
        assert!(settled, "the watcher removes a stale entry");

        // A watcher that owns a member no more refuses the entry: the coordinator routes anew.
        let refused_path = refused(&applying(&queued.path));
        env.volume().write_atomic(&refused_path, Bytes::from_static(b"{}")).await.unwrap();
        assert!(matches!(queued.settled().await, Err(CoreError::NotLeaderOrFollower)));
        assert_eq!(env.volume().read(&refused_path).await.unwrap(), None, "a refusal is taken away once seen");
        assert!(queued.settled().await.unwrap());
        broker.shutdown().await;
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }

    #[tokio::test]
    async fn a_peer_call_writes_only_what_its_entry_owes_and_an_admin_call_writes_as_asked() {
        let dir = std::env::temp_dir().join(format!("kaas-queue-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let broker = Broker::start(env.clone(), BrokerConfig::default()).await.unwrap();
        broker.topics.ensure("t").await.unwrap();
        let markers = commit_of_t0();
        let high_watermark =
            || broker.topics.snapshot().partition("t", 0).expect("partition").watermarks().high_watermark;
        // A late call: its entry was applied and removed long ago. It is answered, and writes
        // nothing (a COMMIT would end whatever transaction the producer has open now).
        let answers = broker.write_called_markers(markers.clone()).await;
        assert!(answers.iter().all(|(_, r)| r.is_ok()), "{answers:?}");
        assert_eq!(answers.len(), 1);
        assert_eq!(high_watermark(), 0, "a call without an entry writes no marker");
        assert!(env.volume().list(&super::dir(0)).await.unwrap().is_empty(), "nothing is left taken");
        // An admin's WriteTxnMarkers (an abort of a hanging transaction) is written as asked.
        let answers = broker.write_markers_here(&markers).await;
        assert!(answers.iter().all(|(_, r)| r.is_ok()), "{answers:?}");
        assert_eq!(high_watermark(), 1, "the marker is written");
        broker.shutdown().await;
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }

    /// A COMMIT marker of producer 7, epoch 3, for partition t-0.
    fn commit_of_t0() -> Markers {
        Markers {
            producer_id: 7,
            producer_epoch: 3,
            commit: true,
            coordinator_epoch: 0,
            participants: vec![Participant::Partition(("t".into(), 0))],
        }
    }
}
