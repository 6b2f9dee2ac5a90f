//! The durable home of transaction state: 50 slots, each holding every transactional id that
//! hashes to it (`state::slot`), kept on the volume as `slot_file` lays them out. A slot's
//! files are named by the ownership epoch its coordinator claimed it under: a new owner reads
//! the newest up to its epoch and starts its own at once, so a paused former owner's late
//! write lands in a file nobody reads. Mutations are staged, then `flush` makes each changed
//! slot durable, once for all the mutations staged since (group commit); nothing is
//! acknowledged before that. A completion may be staged to wait (`stage_lazily`): it rides with
//! the next write of its slot, which the transaction's next step makes anyway.

use std::collections::{BTreeMap, BTreeSet};

use super::slot_file::{self, Journal, TXN_STATE_DIR, read_slot};
use super::state::{SLOTS, TxnEntry, slot};
use tokio::sync::oneshot;

use crate::env::{Spawner, Volume};
use crate::error::{CoreError, CoreResult};

pub struct TxnStore<V: Volume> {
    volume: V,
    /// As on the volume.
    entries: BTreeMap<String, TxnEntry>,
    /// Staged since the last flush: what the coordinator sees, not yet durable.
    staged: BTreeMap<String, TxnEntry>,
    /// The staged entries that wait for a flush writing their slot anyway (`stage_lazily`).
    lazy: BTreeSet<String>,
    /// The journal of each slot this broker owns, written under the epoch it was claimed
    /// under; a slot not here is not written. Out of the map while a flush writes it.
    journals: BTreeMap<u32, Journal<V::File>>,
    /// The epoch each slot this broker owns is written under.
    epochs: BTreeMap<u32, u32>,
    /// Slots whose last write failed: their files may hold that write or not (a failed fsync
    /// may have landed all the same), so memory is no longer what the volume holds.
    failed: Vec<u32>,
}

/// The entry of `transactional_id` in its slot's newest file of an epoch up to `epoch`, for a
/// broker that does not coordinate the slot (the marker watcher).
pub async fn read_entry<V: Volume>(volume: &V, transactional_id: &str, epoch: u32) -> CoreResult<Option<TxnEntry>> {
    let entries = read_slot(volume, slot(transactional_id), epoch).await?.map(|r| r.entries).unwrap_or_default();
    Ok(entries.into_iter().find(|e| e.transactional_id == transactional_id))
}

impl<V: Volume> TxnStore<V> {
    /// Reads every slot as its current owner last wrote it, `epochs` giving each slot's
    /// current ownership epoch: what the fences of a starting broker are made of. This broker
    /// owns none of them until it takes one (`take_slot`).
    pub async fn load(volume: V, epochs: &BTreeMap<u32, u32>) -> CoreResult<Self> {
        volume.create_dir_all(TXN_STATE_DIR).await.map_err(|e| CoreError::Storage(e.to_string()))?;
        let mut entries = BTreeMap::new();
        for n in 0..SLOTS {
            let epoch = epochs.get(&n).copied().unwrap_or(0);
            for entry in read_slot(&volume, n, epoch).await?.map(|r| r.entries).unwrap_or_default() {
                entries.insert(entry.transactional_id.clone(), entry);
            }
        }
        Ok(TxnStore {
            volume,
            entries,
            staged: BTreeMap::new(),
            lazy: BTreeSet::new(),
            journals: BTreeMap::new(),
            epochs: BTreeMap::new(),
            failed: Vec::new(),
        })
    }

    /// Takes slot `n` over under `epoch`, as a new owner must: reads its newest files (another
    /// broker may have changed them), starts a journal under `epoch` from what they hold and
    /// removes the files it read and skipped. Nothing of the slot may be staged.
    pub async fn take_slot(&mut self, n: u32, epoch: u32) -> CoreResult<()> {
        assert!(self.staged.keys().all(|id| slot(id) != n), "a slot is taken with nothing staged in it");
        self.journals.remove(&n);
        let read = read_slot(&self.volume, n, epoch).await?;
        let fresh = read.as_ref().map(|r| r.entries.clone()).unwrap_or_default();
        let generation = match &read {
            Some(r) if r.epoch == epoch => r.generation.map_or(0, |g| g + 1),
            _ => 0,
        };
        let journal = Journal::start(&self.volume, n, epoch, generation, fresh.clone()).await?;
        if let Some(read) = &read {
            slot_file::remove_journal(&self.volume, n, read).await;
        }
        let from = read.as_ref().map_or(0, |r| r.epoch);
        for e in from..epoch {
            self.volume
                .remove_file(&slot_file::base_path(n, e))
                .await
                .map_err(|e| CoreError::Storage(e.to_string()))?;
        }
        self.journals.insert(n, journal);
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
        let fresh = read_slot(&self.volume, n, epoch).await?.map(|r| r.entries).unwrap_or_default();
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
    /// Whether something staged in it was dropped that an answer waits for (a lazy completion
    /// was answered already; the slot's next owner completes it again).
    pub fn give_up_slot(&mut self, n: u32) -> bool {
        self.epochs.remove(&n);
        self.journals.remove(&n);
        let lazy = &self.lazy;
        let dropped_eager = self.staged.keys().any(|id| slot(id) == n && !lazy.contains(id));
        self.staged.retain(|id, _| slot(id) != n);
        self.lazy.retain(|id| slot(id) != n);
        dropped_eager
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
            if self.lazy.remove(&entry.transactional_id) {
                crate::reach("txn slots: a completion written with its producer's next step");
            }
            self.staged.insert(entry.transactional_id.clone(), entry);
        }
    }

    /// Stages `entry` to wait: seen by `get` at once, durable with the next `flush` that writes
    /// its slot anyway, or the next `flush(all)`. For a completion, whose markers are durable
    /// already: if the broker stops first, the slot's file still says prepared and the
    /// transaction is completed again, which is harmless (a second marker ends nothing).
    ///
    /// Not in a slot this broker no longer owns (a dispatch that ended after the slot was
    /// given up): nothing would write it, and its next owner completes the transaction itself.
    pub fn stage_lazily(&mut self, entry: TxnEntry) {
        let id = entry.transactional_id.clone();
        if !self.epochs.contains_key(&slot(&id)) {
            return;
        }
        if !self.staged.contains_key(&id) || self.lazy.contains(&id) {
            self.lazy.insert(id.clone());
        }
        self.staged.insert(id, entry);
    }

    /// Whether a lazily staged entry waits for a write.
    pub fn has_lazy(&self) -> bool {
        !self.lazy.is_empty()
    }

    /// How many lazily staged entries wait for a write.
    pub fn lazy_count(&self) -> usize {
        self.lazy.len()
    }

    /// Makes the staged entries durable: each changed slot's file is replaced once, all of
    /// them at the same time. A slot whose only changes are lazy is left for later unless
    /// `all`. On a failure the entries of the slots not written are dropped back to what
    /// memory last knew of the volume, and those slots are listed for `take_failed_slots`: the
    /// volume may hold the failed write all the same.
    pub async fn flush<S: Spawner>(&mut self, spawner: &S, all: bool) -> CoreResult<Vec<(u32, u32)>> {
        let eager: BTreeSet<u32> =
            self.staged.keys().filter(|id| !self.lazy.contains(*id)).map(|id| slot(id)).collect();
        let mut slots: BTreeMap<u32, Vec<TxnEntry>> = BTreeMap::new();
        for (id, entry) in std::mem::take(&mut self.staged) {
            let n = slot(&id);
            if all || eager.contains(&n) {
                if self.lazy.remove(&id) {
                    crate::reach(match eager.contains(&n) {
                        true => "txn slots: a completion written with another id's change in its slot",
                        false => "txn slots: a completion written on its own",
                    });
                }
                slots.entry(n).or_default().push(entry);
            } else {
                self.staged.insert(id, entry);
            }
        }
        let mut writes = Vec::new();
        let mut written_slots = Vec::new();
        for (n, changed) in slots {
            let (done, written) = oneshot::channel();
            let (Some(&epoch), Some(journal)) = (self.epochs.get(&n), self.journals.remove(&n)) else {
                // Given up since it was staged: the slot's new owner finishes the change.
                drop(done);
                writes.push((n, changed, written));
                continue;
            };
            let all = journal.compaction_due().then(|| {
                let mut slot_entries: BTreeMap<&str, &TxnEntry> = self
                    .entries
                    .values()
                    .filter(|e| slot(&e.transactional_id) == n)
                    .map(|e| (e.transactional_id.as_str(), e))
                    .collect();
                for entry in &changed {
                    slot_entries.insert(&entry.transactional_id, entry);
                }
                slot_entries.into_values().cloned().collect()
            });
            let (volume, record) = (self.volume.clone(), changed.clone());
            spawner.spawn("txn-slot-write", async move {
                let _ = done.send(journal.write(&volume, &record, all).await);
            });
            writes.push((n, changed, written));
            written_slots.push((n, epoch));
        }
        let mut result = Ok(written_slots);
        for (n, changed, written) in writes {
            match written.await {
                Ok(Ok(journal)) => {
                    // Unless the slot was given up and taken again meanwhile (not while a
                    // flush runs: the coordinator awaits it).
                    self.journals.entry(n).or_insert(journal);
                    for entry in changed {
                        self.entries.insert(entry.transactional_id.clone(), entry);
                    }
                }
                Ok(Err(e)) => {
                    self.failed.push(n);
                    result = Err(e);
                }
                Err(_) => {
                    // Owned without a journal (a write of it failed unnoticed): taken again.
                    if self.epochs.contains_key(&n) {
                        self.failed.push(n);
                    }
                    result = Err(CoreError::NotCoordinator);
                }
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
        store.flush(env.spawner(), true).await.unwrap();
        store.stage(ongoing.clone());
        store.flush(env.spawner(), true).await.unwrap();
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
        store.flush(env.spawner(), true).await.unwrap();
        let epochs_now: BTreeMap<u32, u32> = (0..SLOTS).map(|s| (s, if s == n { 2 } else { 1 })).collect();
        let after = TxnStore::load(env.volume().clone(), &epochs_now).await.unwrap();
        assert_eq!(after.get("txn-7"), Some(&ongoing), "the zombie's write under epoch 1 is not read");
        // A slot given up is not written any more.
        peer.give_up_slot(n);
        peer.stage(first.clone());
        assert!(peer.flush(env.spawner(), true).await.is_err());

        env.volume().write_atomic(&slot_file::base_path(n, 2), bytes::Bytes::from_static(b"{\"torn")).await.unwrap();
        let failed = TxnStore::load(env.volume().clone(), &epochs_now).await;
        assert!(matches!(failed, Err(CoreError::Storage(m)) if m.contains(&format!("slot-{n}-2.json"))));
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }

    /// Many group commits of one slot: the journal grows, starts new generations, and what a
    /// reader (a restart, a peer) gets is always what was last flushed; old journals are gone.
    #[tokio::test]
    async fn a_slot_reads_back_as_flushed_across_journal_generations() {
        let dir = std::env::temp_dir().join(format!("kaas-txn-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let mut store = TxnStore::load(env.volume().clone(), &BTreeMap::new()).await.unwrap();
        let ids: Vec<String> = (0..).map(|i| format!("gen-{i}")).filter(|id| slot(id) == 3).take(4).collect();
        store.take_slot(3, 1).await.unwrap();
        let epochs = BTreeMap::from([(3, 1)]);
        let mut pid = 1 << 40;
        for round in 0..400 {
            let id = &ids[round % ids.len()];
            let Ok(InitOutcome::Ready(mut entry)) = state::init_producer_id(None, id, 60_000, 900_000, None, || {
                pid += 1;
                pid
            }) else {
                panic!()
            };
            entry.transaction_timeout_ms = round as i32 + 1;
            store.stage(entry);
            store.flush(env.spawner(), false).await.unwrap();
            if round % 97 == 0 || round == 399 {
                let reloaded = TxnStore::load(env.volume().clone(), &epochs).await.unwrap();
                assert_eq!(reloaded.iter().cloned().collect::<Vec<_>>(), store.iter().cloned().collect::<Vec<_>>());
            }
        }
        let journals: Vec<String> = env
            .volume()
            .list(TXN_STATE_DIR)
            .await
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with("slot-3-") && n.ends_with(".journal"))
            .collect();
        assert_eq!(journals.len(), 1, "one journal left: {journals:?}");
        assert_ne!(journals[0], "slot-3-1.0.journal", "400 commits made new generations");
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }

    /// Two ids of one slot and one of another: a lazy completion waits until its slot is written
    /// anyway, or until a flush of everything.
    #[tokio::test]
    async fn a_lazy_completion_rides_with_the_next_write_of_its_slot() {
        let dir = std::env::temp_dir().join(format!("kaas-txn-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let mut store = TxnStore::load(env.volume().clone(), &BTreeMap::new()).await.unwrap();
        for n in 0..SLOTS {
            store.take_slot(n, 1).await.unwrap();
        }
        let a = "lazy-a".to_string();
        let b = (0..).map(|i| format!("lazy-b{i}")).find(|id| slot(id) == slot(&a)).unwrap();
        let c = (0..).map(|i| format!("lazy-c{i}")).find(|id| slot(id) != slot(&a)).unwrap();
        let mut pid = 1 << 40;
        let mut prepared = BTreeMap::new();
        for id in [&a, &b, &c] {
            let Ok(InitOutcome::Ready(entry)) = state::init_producer_id(None, id, 60_000, 900_000, None, || {
                pid += 1;
                pid
            }) else {
                panic!()
            };
            let ongoing = state::add_partitions(&entry, entry.producer_id, 0, &[("t".into(), 0)], 5).unwrap();
            let Ok(state::EndOutcome::Prepared(p)) = state::end_txn(&ongoing, entry.producer_id, 0, true, 0, 6, || 0)
            else {
                panic!()
            };
            store.stage(p.clone());
            prepared.insert(id.clone(), p);
        }
        store.flush(env.spawner(), false).await.unwrap();
        let epochs: BTreeMap<u32, u32> = (0..SLOTS).map(|n| (n, 1)).collect();
        let on_volume = |id: &str| {
            let (volume, epochs, id) = (env.volume().clone(), epochs.clone(), id.to_string());
            async move { TxnStore::load(volume, &epochs).await.unwrap().get(&id).cloned().unwrap() }
        };

        let done: BTreeMap<_, _> = prepared.iter().map(|(id, p)| (id.clone(), state::complete(p))).collect();
        for id in [&a, &c] {
            store.stage_lazily(done[id].clone());
        }
        assert!(store.has_lazy());
        assert_eq!(store.get(&a), Some(&done[&a]), "seen at once");
        assert_eq!(store.flush(env.spawner(), false).await.unwrap(), Vec::new(), "nothing eager: nothing written");
        assert_eq!(on_volume(&a).await, prepared[&a]);

        // b's eager change writes slot(a), a's completion with it; c's slot waits.
        store.stage(done[&b].clone());
        assert_eq!(store.flush(env.spawner(), false).await.unwrap(), vec![(slot(&a), 1)]);
        assert_eq!((on_volume(&a).await, on_volume(&b).await), (done[&a].clone(), done[&b].clone()));
        assert_eq!(on_volume(&c).await, prepared[&c]);
        assert!(store.has_lazy());
        // Given up, a lazy completion is no answer's loss; flushing everything writes the rest.
        assert!(!store.give_up_slot(slot(&c)));
        // A completion of a slot no longer owned is not staged (taking the slot back asserts
        // that nothing of it is).
        store.stage_lazily(done[&c].clone());
        assert!(!store.has_lazy());
        store.take_slot(slot(&c), 2).await.unwrap();
        assert!(!store.has_lazy());
        store.stage_lazily(done[&c].clone());
        store.flush(env.spawner(), true).await.unwrap();
        assert!(!store.has_lazy());
        let epochs: BTreeMap<u32, u32> = (0..SLOTS).map(|n| (n, if n == slot(&c) { 2 } else { 1 })).collect();
        let reloaded = TxnStore::load(env.volume().clone(), &epochs).await.unwrap();
        assert_eq!(reloaded.get(&c), Some(&done[&c]));
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }
}
