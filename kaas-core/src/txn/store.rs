//! The durable home of transaction state: 50 slot files, each holding every transactional id
//! that hashes to it (`state::slot`). A slot's file is named by the ownership epoch its
//! coordinator claimed it under, `__cluster/txn_state/slot-<n>-<epoch>.json` (`slot-<n>.json`
//! for epoch 0, a broker of before cluster mode): a new owner reads the newest file up to its
//! epoch and writes it under its own at once, so a paused former owner's late write lands in a
//! file nobody reads. Mutations are staged, then `flush` replaces each changed slot's file
//! atomically, once for all the mutations staged since (group commit); nothing is
//! acknowledged before that. A file that is torn, of an unknown format version, or holding an
//! id of another slot is a storage error naming it, never guessed at.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::state::{SLOTS, TxnEntry, slot};
use tokio::sync::oneshot;

use crate::env::{Spawner, Volume, join};
use crate::error::{CoreError, CoreResult};

pub const TXN_STATE_DIR: &str = "__cluster/txn_state";
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct SlotFile {
    format_version: u32,
    slot: u32,
    entries: Vec<TxnEntry>,
}

fn path(slot: u32, epoch: u32) -> String {
    if epoch == 0 {
        join(TXN_STATE_DIR, &format!("slot-{slot}.json"))
    } else {
        join(TXN_STATE_DIR, &format!("slot-{slot}-{epoch}.json"))
    }
}

fn storage(e: impl std::fmt::Display) -> CoreError {
    CoreError::Storage(e.to_string())
}

pub struct TxnStore<V: Volume> {
    volume: V,
    /// As on the volume.
    entries: BTreeMap<String, TxnEntry>,
    /// Staged since the last flush: what the coordinator sees, not yet durable.
    staged: BTreeMap<String, TxnEntry>,
    /// The epoch each slot this broker owns is written under; a slot not here is not written.
    epochs: BTreeMap<u32, u32>,
    /// Slots whose last write failed: their file may hold that write or the one before it (a
    /// failed directory fsync after the rename), so memory is no longer what the volume holds.
    failed: Vec<u32>,
}

/// The entries of slot `n` in its newest file of an epoch up to `epoch`, and that file's epoch
/// (`None`: no file, an empty slot). A damaged file is an error, never guessed at.
async fn read_slot<V: Volume>(volume: &V, n: u32, epoch: u32) -> CoreResult<Option<(u32, Vec<TxnEntry>)>> {
    for e in (0..=epoch).rev() {
        if let Some(entries) = read_slot_file(volume, n, e).await? {
            return Ok(Some((e, entries)));
        }
    }
    Ok(None)
}

/// The entry of `transactional_id` in its slot's newest file of an epoch up to `epoch`, for a
/// broker that does not coordinate the slot (the marker watcher).
pub async fn read_entry<V: Volume>(volume: &V, transactional_id: &str, epoch: u32) -> CoreResult<Option<TxnEntry>> {
    let entries = read_slot(volume, slot(transactional_id), epoch).await?.map(|(_, e)| e).unwrap_or_default();
    Ok(entries.into_iter().find(|e| e.transactional_id == transactional_id))
}

async fn read_slot_file<V: Volume>(volume: &V, n: u32, epoch: u32) -> CoreResult<Option<Vec<TxnEntry>>> {
    let path = path(n, epoch);
    let Some(raw) = volume.read(&path).await.map_err(storage)? else { return Ok(None) };
    let file: SlotFile = serde_json::from_slice(&raw)
        .map_err(|e| CoreError::Storage(format!("{path}: unreadable transaction state: {e}")))?;
    if file.format_version != FORMAT_VERSION || file.slot != n {
        return Err(CoreError::Storage(format!("{path}: unknown format version or slot mismatch")));
    }
    if let Some(entry) = file.entries.iter().find(|e| slot(&e.transactional_id) != n) {
        return Err(CoreError::Storage(format!("{path}: {} belongs to another slot", entry.transactional_id)));
    }
    Ok(Some(file.entries))
}

impl<V: Volume> TxnStore<V> {
    /// Reads every slot as its current owner last wrote it, `epochs` giving each slot's
    /// current ownership epoch: what the fences of a starting broker are made of. This broker
    /// owns none of them until it takes one (`take_slot`).
    pub async fn load(volume: V, epochs: &BTreeMap<u32, u32>) -> CoreResult<Self> {
        volume.create_dir_all(TXN_STATE_DIR).await.map_err(storage)?;
        let mut entries = BTreeMap::new();
        for n in 0..SLOTS {
            let epoch = epochs.get(&n).copied().unwrap_or(0);
            for entry in read_slot(&volume, n, epoch).await?.map(|(_, e)| e).unwrap_or_default() {
                entries.insert(entry.transactional_id.clone(), entry);
            }
        }
        Ok(TxnStore { volume, entries, staged: BTreeMap::new(), epochs: BTreeMap::new(), failed: Vec::new() })
    }

    /// Takes slot `n` over under `epoch`, as a new owner must: reads its newest file (another
    /// broker may have changed it), writes it under `epoch` and removes the files it read and
    /// skipped. Nothing of the slot may be staged.
    pub async fn take_slot(&mut self, n: u32, epoch: u32) -> CoreResult<()> {
        assert!(self.staged.keys().all(|id| slot(id) != n), "a slot is taken with nothing staged in it");
        let (from, fresh) = read_slot(&self.volume, n, epoch).await?.unwrap_or((0, Vec::new()));
        if from != epoch || epoch == 0 {
            write_slot(&self.volume, n, epoch, fresh.clone()).await?;
        }
        for e in from..epoch {
            self.volume.remove_file(&path(n, e)).await.map_err(storage)?;
        }
        self.entries.retain(|id, _| slot(id) != n);
        for entry in fresh {
            self.entries.insert(entry.transactional_id.clone(), entry);
        }
        self.epochs.insert(n, epoch);
        Ok(())
    }

    /// Reads slot `n`, which a peer coordinates under `epoch`, again: its entries as they are
    /// now, and the producers whose epoch moved up since they were last read (to fence).
    pub async fn refresh_slot(&mut self, n: u32, epoch: u32) -> CoreResult<BTreeMap<i64, i16>> {
        assert!(!self.epochs.contains_key(&n), "a slot this broker owns is not read back");
        let fresh = read_slot(&self.volume, n, epoch).await?.map(|(_, e)| e).unwrap_or_default();
        let mut bumped = BTreeMap::new();
        for entry in fresh {
            let known = self.entries.get(&entry.transactional_id);
            if known.is_none_or(|k| (k.producer_id, k.producer_epoch) != (entry.producer_id, entry.producer_epoch)) {
                bumped.insert(entry.producer_id, entry.producer_epoch);
            }
            self.entries.insert(entry.transactional_id.clone(), entry);
        }
        Ok(bumped)
    }

    /// Gives slot `n` up: its entries stay readable (for fences), and nothing of it is written.
    /// Whether something staged in it was dropped: its answers must not be sent as done.
    pub fn give_up_slot(&mut self, n: u32) -> bool {
        self.epochs.remove(&n);
        let staged = self.staged.len();
        self.staged.retain(|id, _| slot(id) != n);
        self.staged.len() != staged
    }

    /// Whether anything of slot `n` is staged and not yet flushed.
    pub fn has_staged_in(&self, n: u32) -> bool {
        self.staged.keys().any(|id| slot(id) == n)
    }

    /// The entry as last staged (durable or about to be).
    pub fn get(&self, transactional_id: &str) -> Option<&TxnEntry> {
        self.staged.get(transactional_id).or_else(|| self.entries.get(transactional_id))
    }

    /// Every entry as last staged, by transactional id.
    pub fn iter(&self) -> impl Iterator<Item = &TxnEntry> {
        let durable = self.entries.values().filter(|e| !self.staged.contains_key(&e.transactional_id));
        let mut all: Vec<&TxnEntry> = durable.chain(self.staged.values()).collect();
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        all.into_iter()
    }

    /// Stages `entry`: seen by `get` at once, durable with the next `flush`.
    pub fn stage(&mut self, entry: TxnEntry) {
        if self.entries.get(&entry.transactional_id) != Some(&entry)
            || self.staged.contains_key(&entry.transactional_id)
        {
            self.staged.insert(entry.transactional_id.clone(), entry);
        }
    }

    /// Makes every staged entry durable: each changed slot's file is replaced once, all of
    /// them at the same time. On a failure the entries of the slots not written are dropped
    /// back to what memory last knew of the volume, and those slots are listed for
    /// `take_failed_slots`: the volume may hold the failed write all the same.
    pub async fn flush<S: Spawner>(&mut self, spawner: &S) -> CoreResult<Vec<(u32, u32)>> {
        let mut slots: BTreeMap<u32, Vec<TxnEntry>> = BTreeMap::new();
        for (id, entry) in std::mem::take(&mut self.staged) {
            slots.entry(slot(&id)).or_default().push(entry);
        }
        let mut writes = Vec::new();
        let mut written_slots = Vec::new();
        for (n, changed) in slots {
            let mut slot_entries: BTreeMap<&str, &TxnEntry> = self
                .entries
                .values()
                .filter(|e| slot(&e.transactional_id) == n)
                .map(|e| (e.transactional_id.as_str(), e))
                .collect();
            for entry in &changed {
                slot_entries.insert(&entry.transactional_id, entry);
            }
            let entries: Vec<TxnEntry> = slot_entries.into_values().cloned().collect();
            let (done, written) = oneshot::channel();
            let Some(&epoch) = self.epochs.get(&n) else {
                // Given up since it was staged: the slot's new owner finishes the change.
                drop(done);
                writes.push((changed, written));
                continue;
            };
            let volume = self.volume.clone();
            spawner.spawn("txn-slot-write", async move {
                let _ = done.send(write_slot(&volume, n, epoch, entries).await);
            });
            writes.push((changed, written));
            written_slots.push((n, epoch));
        }
        let mut result = Ok(written_slots);
        for (changed, written) in writes {
            match written.await {
                Ok(Ok(())) => {
                    for entry in changed {
                        self.entries.insert(entry.transactional_id.clone(), entry);
                    }
                }
                Ok(Err(e)) => {
                    self.failed.extend(changed.first().map(|e| slot(&e.transactional_id)));
                    result = Err(e);
                }
                Err(_) => result = Err(CoreError::NotCoordinator),
            }
        }
        result
    }

    /// The slots whose write failed since the last call: the coordinator gives them up and
    /// takes them again, reading what the volume really holds.
    pub fn take_failed_slots(&mut self) -> Vec<u32> {
        let mut failed = std::mem::take(&mut self.failed);
        failed.sort_unstable();
        failed.dedup();
        failed
    }
}

async fn write_slot<V: Volume>(volume: &V, n: u32, epoch: u32, entries: Vec<TxnEntry>) -> CoreResult<()> {
    let file = SlotFile { format_version: FORMAT_VERSION, slot: n, entries };
    let raw = Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
    volume.write_atomic(&path(n, epoch), raw).await.map_err(storage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::real::{RealEnv, RealRng};
    use crate::env::{Env, Rng};
    use crate::txn::state::{self, InitOutcome};

    #[tokio::test]
    async fn entries_survive_a_take_over_a_late_write_of_an_older_epoch_is_never_read_and_a_damaged_slot_stops_the_load()
     {
        let dir = std::env::temp_dir().join(format!("kaas-txn-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let mut store = TxnStore::load(env.volume().clone(), &BTreeMap::new()).await.unwrap();
        for n in 0..SLOTS {
            store.take_slot(n, 1).await.unwrap();
        }
        let mut pid = 1 << 40;
        for i in 0..120 {
            let id = format!("txn-{i}");
            let Ok(InitOutcome::Ready(entry)) = state::init_producer_id(None, &id, 60_000, 900_000, None, || {
                pid += 1;
                pid
            }) else {
                panic!()
            };
            store.stage(entry);
        }
        let first = store.get("txn-7").unwrap().clone();
        let ongoing = state::add_partitions(&first, first.producer_id, 0, &[("t".into(), 3)], 5).unwrap();
        store.flush(env.spawner()).await.unwrap();
        store.stage(ongoing.clone());
        store.flush(env.spawner()).await.unwrap();
        let n = slot("txn-7");
        let epochs: BTreeMap<u32, u32> = (0..SLOTS).map(|n| (n, 1)).collect();
        let reloaded = TxnStore::load(env.volume().clone(), &epochs).await.unwrap();
        assert_eq!(reloaded.iter().count(), 120);
        assert_eq!(reloaded.get("txn-7"), Some(&ongoing));
        assert_eq!(reloaded.iter().cloned().collect::<Vec<_>>(), store.iter().cloned().collect::<Vec<_>>());

        // A peer takes slot n over under epoch 2; the old owner, paused, then writes under 1.
        let mut peer = TxnStore::load(env.volume().clone(), &epochs).await.unwrap();
        peer.take_slot(n, 2).await.unwrap();
        assert_eq!(peer.get("txn-7"), Some(&ongoing));
        store.stage(first.clone());
        store.flush(env.spawner()).await.unwrap();
        let epochs_now: BTreeMap<u32, u32> = (0..SLOTS).map(|s| (s, if s == n { 2 } else { 1 })).collect();
        let after = TxnStore::load(env.volume().clone(), &epochs_now).await.unwrap();
        assert_eq!(after.get("txn-7"), Some(&ongoing), "the zombie's write under epoch 1 is not read");
        // A slot given up is not written any more.
        peer.give_up_slot(n);
        peer.stage(first.clone());
        assert!(peer.flush(env.spawner()).await.is_err());

        env.volume().write_atomic(&path(n, 2), Bytes::from_static(b"{\"torn")).await.unwrap();
        let failed = TxnStore::load(env.volume().clone(), &epochs_now).await;
        assert!(matches!(failed, Err(CoreError::Storage(m)) if m.contains(&format!("slot-{n}-2.json"))));
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }
}
