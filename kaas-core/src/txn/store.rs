//! The durable home of transaction state: 50 slot files, `__cluster/txn_state/slot-<n>.json`,
//! each holding every transactional id that hashes to it (`state::slot`). Each mutation
//! replaces its slot's file atomically before it is acknowledged; a restart reads the files and
//! replays nothing. A file that is torn, of an unknown format version, or holding an id of
//! another slot stops the load with a storage error naming it.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::state::{SLOTS, TxnEntry, slot};
use crate::env::{Volume, join};
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
    entries: BTreeMap<String, TxnEntry>,
}

impl<V: Volume> TxnStore<V> {
    pub async fn load(volume: V) -> CoreResult<Self> {
        volume.create_dir_all(TXN_STATE_DIR).await.map_err(storage)?;
        let mut entries = BTreeMap::new();
        for n in 0..SLOTS {
            let path = path(n);
            let Some(raw) = volume.read(&path).await.map_err(storage)? else { continue };
            let file: SlotFile = serde_json::from_slice(&raw)
                .map_err(|e| CoreError::Storage(format!("{path}: unreadable transaction state: {e}")))?;
            if file.format_version != FORMAT_VERSION || file.slot != n {
                return Err(CoreError::Storage(format!("{path}: unknown format version or slot mismatch")));
            }
            for entry in file.entries {
                if slot(&entry.transactional_id) != n {
                    return Err(CoreError::Storage(format!(
                        "{path}: {} belongs to another slot",
                        entry.transactional_id
                    )));
                }
                entries.insert(entry.transactional_id.clone(), entry);
            }
        }
        Ok(TxnStore { volume, entries })
    }

    pub fn get(&self, transactional_id: &str) -> Option<&TxnEntry> {
        self.entries.get(transactional_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &TxnEntry> {
        self.entries.values()
    }

    /// Makes `entry` durable (its whole slot file replaced), then current.
    pub async fn put(&mut self, entry: TxnEntry) -> CoreResult<()> {
        let n = slot(&entry.transactional_id);
        let mut slot_entries: Vec<TxnEntry> = self
            .entries
            .values()
            .filter(|e| slot(&e.transactional_id) == n && e.transactional_id != entry.transactional_id)
            .cloned()
            .collect();
        slot_entries.push(entry.clone());
        slot_entries.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        let file = SlotFile { format_version: FORMAT_VERSION, slot: n, entries: slot_entries };
        let raw = Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
        self.volume.write_atomic(&path(n), raw).await.map_err(storage)?;
        self.entries.insert(entry.transactional_id.clone(), entry);
        Ok(())
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
            store.put(entry).await.unwrap();
        }
        let first = store.get("txn-7").unwrap().clone();
        let ongoing = state::add_partitions(&first, first.producer_id, 0, &[("t".into(), 3)], 5).unwrap();
        store.put(ongoing.clone()).await.unwrap();
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
