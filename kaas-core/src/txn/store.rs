//! The durable home of transaction state: 50 slot files, `__cluster/txn_state/slot-<n>.json`,
//! each holding every transactional id that hashes to it (`state::slot`). Mutations are staged,
//! then `flush` replaces each changed slot's file atomically, once for all the mutations staged
//! since (group commit); nothing is acknowledged before that. A restart reads the files and
//! replays nothing. A file that is torn, of an unknown format version, or holding an id of
//! another slot stops the load with a storage error naming it.

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

fn path(slot: u32) -> String {
    join(TXN_STATE_DIR, &format!("slot-{slot}.json"))
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
}

/// The entries of slot `n` as its file holds them; a damaged file is an error, never guessed at.
async fn read_slot<V: Volume>(volume: &V, n: u32) -> CoreResult<Vec<TxnEntry>> {
    let path = path(n);
    let Some(raw) = volume.read(&path).await.map_err(storage)? else { return Ok(Vec::new()) };
    let file: SlotFile = serde_json::from_slice(&raw)
        .map_err(|e| CoreError::Storage(format!("{path}: unreadable transaction state: {e}")))?;
    if file.format_version != FORMAT_VERSION || file.slot != n {
        return Err(CoreError::Storage(format!("{path}: unknown format version or slot mismatch")));
    }
    if let Some(entry) = file.entries.iter().find(|e| slot(&e.transactional_id) != n) {
        return Err(CoreError::Storage(format!("{path}: {} belongs to another slot", entry.transactional_id)));
    }
    Ok(file.entries)
}

impl<V: Volume> TxnStore<V> {
    pub async fn load(volume: V) -> CoreResult<Self> {
        volume.create_dir_all(TXN_STATE_DIR).await.map_err(storage)?;
        let mut entries = BTreeMap::new();
        for n in 0..SLOTS {
            for entry in read_slot(&volume, n).await? {
                entries.insert(entry.transactional_id.clone(), entry);
            }
        }
        Ok(TxnStore { volume, entries, staged: BTreeMap::new() })
    }

    /// Reads slot `n` from its file again, as a new owner of the slot must: another broker may
    /// have changed it since. Nothing of the slot may be staged.
    pub async fn reload_slot(&mut self, n: u32) -> CoreResult<()> {
        assert!(self.staged.keys().all(|id| slot(id) != n), "a slot is reloaded with nothing staged in it");
        let fresh = read_slot(&self.volume, n).await?;
        self.entries.retain(|id, _| slot(id) != n);
        for entry in fresh {
            self.entries.insert(entry.transactional_id.clone(), entry);
        }
        Ok(())
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
    /// back to what the volume holds.
    pub async fn flush<S: Spawner>(&mut self, spawner: &S) -> CoreResult<()> {
        let mut slots: BTreeMap<u32, Vec<TxnEntry>> = BTreeMap::new();
        for (id, entry) in std::mem::take(&mut self.staged) {
            slots.entry(slot(&id)).or_default().push(entry);
        }
        let mut writes = Vec::new();
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
            let file = SlotFile { format_version: FORMAT_VERSION, slot: n, entries };
            let raw = Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
            let (done, written) = oneshot::channel();
            let volume = self.volume.clone();
            spawner.spawn("txn-slot-write", async move {
                let _ = done.send(volume.write_atomic(&path(n), raw).await);
            });
            writes.push((changed, written));
        }
        let mut result = Ok(());
        for (changed, written) in writes {
            match written.await {
                Ok(Ok(())) => {
                    for entry in changed {
                        self.entries.insert(entry.transactional_id.clone(), entry);
                    }
                }
                Ok(Err(e)) => result = Err(storage(e)),
                Err(_) => result = Err(CoreError::Storage("slot write stopped".into())),
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::real::{RealEnv, RealRng};
    use crate::env::{Env, Rng};
    use crate::txn::state::{self, InitOutcome};

    #[tokio::test]
    async fn entries_survive_a_reload_and_a_damaged_slot_stops_it() {
        let dir = std::env::temp_dir().join(format!("kaas-txn-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let mut store = TxnStore::load(env.volume().clone()).await.unwrap();
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
        let reloaded = TxnStore::load(env.volume().clone()).await.unwrap();
        assert_eq!(reloaded.iter().count(), 120);
        assert_eq!(reloaded.get("txn-7"), Some(&ongoing));
        assert_eq!(reloaded.iter().cloned().collect::<Vec<_>>(), store.iter().cloned().collect::<Vec<_>>());
        let n = slot("txn-7");
        env.volume().write_atomic(&path(n), Bytes::from_static(b"{\"torn")).await.unwrap();
        let failed = TxnStore::load(env.volume().clone()).await;
        assert!(matches!(failed, Err(CoreError::Storage(m)) if m.contains(&format!("slot-{n}.json"))));
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }
}
