//! One transaction slot on the volume: a base file holding every entry of the slot, replaced
//! atomically, and the journal it names, to which each group commit appends only the entries
//! it changed (one write and one fdatasync, where replacing the base costs a new file, two
//! fsyncs and a rename: most of a transaction's kernel time). When the journal has grown past
//! `COMPACT_AT_BYTES` the next write starts a new generation: a new empty journal, then a base
//! of every entry naming it, then the old journal removed.
//!
//! Names carry the ownership epoch the slot was claimed under, so a paused former owner's late
//! writes land in files nobody reads: `slot-<n>-<epoch>.json` and
//! `slot-<n>-<epoch>.<generation>.journal` (`slot-<n>.json`, `slot-<n>.<generation>.journal`
//! for epoch 0, a broker of before cluster mode).
//!
//! A journal record is `[length u32][crc32c of the payload u32][payload]`, big-endian, the
//! payload the changed entries as JSON. Only the slot's owner appends, one record at a time,
//! and stops writing the file at its first failure, so a record that is cut short or does not
//! match its checksum can only be the last: the one being written when the writer stopped,
//! never acknowledged. Reading stops there. A bad record followed by a whole one is damage,
//! reported, never skipped; so is a base file that is torn, of an unknown format version, or
//! holding an id of another slot.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use super::state::{TxnEntry, slot};
use crate::env::{Volume, VolumeFile, join};
use crate::error::{CoreError, CoreResult};

pub const TXN_STATE_DIR: &str = "__cluster/txn_state";
/// 1: the base file alone; 2: the base file names its journal.
const FORMAT_VERSION: u32 = 2;
/// The journal size past which the next write starts a new generation. Peers read every slot
/// they do not own each heartbeat (the fence watcher), so a journal is kept small.
const COMPACT_AT_BYTES: u64 = 32 * 1024;
const RECORD_HEADER: usize = 8;

#[derive(Serialize, Deserialize)]
struct SlotFile {
    format_version: u32,
    slot: u32,
    entries: Vec<TxnEntry>,
    /// The generation of the journal whose records follow `entries` (format version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    journal: Option<u32>,
}

fn stem(slot: u32, epoch: u32) -> String {
    match epoch {
        0 => join(TXN_STATE_DIR, &format!("slot-{slot}")),
        _ => join(TXN_STATE_DIR, &format!("slot-{slot}-{epoch}")),
    }
}

pub fn base_path(slot: u32, epoch: u32) -> String {
    format!("{}.json", stem(slot, epoch))
}

fn journal_path(slot: u32, epoch: u32, generation: u32) -> String {
    format!("{}.{generation}.journal", stem(slot, epoch))
}

fn storage(e: impl std::fmt::Display) -> CoreError {
    CoreError::Storage(e.to_string())
}

/// A slot as its newest file up to some epoch holds it.
pub struct SlotRead {
    /// The epoch of the file read.
    pub epoch: u32,
    pub entries: Vec<TxnEntry>,
    /// The generation of its journal (`None`: a file of format version 1, without one).
    pub generation: Option<u32>,
}

/// Slot `n` in its newest file of an epoch up to `epoch` (`None`: no file, an empty slot).
pub async fn read_slot<V: Volume>(volume: &V, n: u32, epoch: u32) -> CoreResult<Option<SlotRead>> {
    for e in (0..=epoch).rev() {
        if let Some((entries, generation)) = read_slot_file(volume, n, e).await? {
            return Ok(Some(SlotRead { epoch: e, entries, generation }));
        }
    }
    Ok(None)
}

/// How many times a reader starts over when the journal its base named is gone: a new
/// generation replaced both meanwhile.
const READ_ATTEMPTS: usize = 3;

async fn read_slot_file<V: Volume>(volume: &V, n: u32, epoch: u32) -> CoreResult<Option<(Vec<TxnEntry>, Option<u32>)>> {
    let path = base_path(n, epoch);
    for _ in 0..READ_ATTEMPTS {
        let Some(raw) = volume.read(&path).await.map_err(storage)? else { return Ok(None) };
        let file: SlotFile = serde_json::from_slice(&raw)
            .map_err(|e| CoreError::Storage(format!("{path}: unreadable transaction state: {e}")))?;
        let known = matches!((file.format_version, file.journal), (1, None) | (2, Some(_)));
        if !known || file.slot != n {
            return Err(CoreError::Storage(format!("{path}: unknown format version or slot mismatch")));
        }
        let entries = match file.journal {
            None => file.entries,
            Some(generation) => {
                let journal = journal_path(n, epoch, generation);
                match volume.read(&journal).await.map_err(storage)? {
                    Some(records) => replay(&journal, file.entries, &records)?,
                    // Compacted since the base was read: read the new base.
                    None => continue,
                }
            }
        };
        if let Some(entry) = entries.iter().find(|e| slot(&e.transactional_id) != n) {
            return Err(CoreError::Storage(format!("{path}: {} belongs to another slot", entry.transactional_id)));
        }
        return Ok(Some((entries, file.journal)));
    }
    Err(CoreError::Storage(format!("{path}: the journal it names is missing")))
}

/// The base's entries with every whole record of the journal applied in order, each entry
/// replacing the one of its transactional id.
fn replay(path: &str, base: Vec<TxnEntry>, journal: &[u8]) -> CoreResult<Vec<TxnEntry>> {
    let mut entries: BTreeMap<String, TxnEntry> = base.into_iter().map(|e| (e.transactional_id.clone(), e)).collect();
    let mut at = 0;
    while at < journal.len() {
        let Some((payload, next)) = record_at(journal, at) else {
            if record_after(journal, at).is_some() {
                return Err(CoreError::Storage(format!("{path}: damaged record at byte {at}")));
            }
            // The record being written when its writer stopped: never acknowledged.
            crate::reach("txn slots: a journal's cut-short tail left unread");
            break;
        };
        let changed: Vec<TxnEntry> = serde_json::from_slice(payload)
            .map_err(|e| CoreError::Storage(format!("{path}: unreadable record at byte {at}: {e}")))?;
        for entry in changed {
            entries.insert(entry.transactional_id.clone(), entry);
        }
        at = next;
    }
    Ok(entries.into_values().collect())
}

/// The payload of the whole, checksum-matching record at `at`, and where the next begins.
/// Never empty: zeros, which a crash leaves where unsynced bytes were, would pass for an
/// empty record (the CRC-32C of nothing is 0).
fn record_at(journal: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let header = journal.get(at..at.checked_add(RECORD_HEADER)?)?;
    let len = u32::from_be_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_be_bytes(header[4..].try_into().ok()?);
    if len == 0 {
        return None;
    }
    let end = (at + RECORD_HEADER).checked_add(len)?;
    let payload = journal.get(at + RECORD_HEADER..end)?;
    (crc32c::crc32c(payload) == crc).then_some((payload, end))
}

/// A whole record right after the (bad) one at `at`, by that one's length field.
fn record_after(journal: &[u8], at: usize) -> Option<usize> {
    let header = journal.get(at..at.checked_add(RECORD_HEADER)?)?;
    let len = u32::from_be_bytes(header[..4].try_into().ok()?) as usize;
    let next = (at + RECORD_HEADER).checked_add(len)?;
    record_at(journal, next).map(|_| next)
}

fn record(changed: &[TxnEntry]) -> Bytes {
    let payload = serde_json::to_vec(changed).expect("serialisable");
    let mut framed = BytesMut::with_capacity(RECORD_HEADER + payload.len());
    framed.put_u32(u32::try_from(payload.len()).expect("a record under 4 GiB"));
    framed.put_u32(crc32c::crc32c(&payload));
    framed.put_slice(&payload);
    framed.freeze()
}

/// The journal of a slot this broker owns, open for appending.
pub struct Journal<F> {
    slot: u32,
    epoch: u32,
    generation: u32,
    file: F,
}

impl<F: VolumeFile> Journal<F> {
    /// Starts generation `generation` of slot `n` under `epoch`: an empty journal, then the
    /// base holding `entries` and naming it, whose directory sync makes both entries durable.
    pub async fn start<V: Volume<File = F>>(
        volume: &V,
        n: u32,
        epoch: u32,
        generation: u32,
        entries: Vec<TxnEntry>,
    ) -> CoreResult<Journal<F>> {
        let file = volume.create(&journal_path(n, epoch, generation)).await.map_err(storage)?;
        let base = SlotFile { format_version: FORMAT_VERSION, slot: n, entries, journal: Some(generation) };
        let raw = Bytes::from(serde_json::to_vec(&base).expect("serialisable"));
        volume.write_atomic(&base_path(n, epoch), raw).await.map_err(storage)?;
        Ok(Journal { slot: n, epoch, generation, file })
    }

    /// Whether the next write should start a new generation (`write` with every entry).
    pub fn compaction_due(&self) -> bool {
        self.file.len() >= COMPACT_AT_BYTES
    }

    /// Makes `changed` durable: appended as one record, or, given every entry of the slot
    /// (`compaction_due`), in the base of a new generation. On an error the journal is done
    /// with: the file's tail is unknown, and the slot is taken again from what it holds.
    pub async fn write<V: Volume<File = F>>(
        self,
        volume: &V,
        changed: &[TxnEntry],
        all: Option<Vec<TxnEntry>>,
    ) -> CoreResult<Journal<F>> {
        let Some(all) = all else {
            self.file.append(record(changed)).await.map_err(storage)?;
            self.file.sync().await.map_err(storage)?;
            return Ok(self);
        };
        let next = Journal::start(volume, self.slot, self.epoch, self.generation + 1, all).await?;
        // The new base no longer names it; a failed removal leaves a file nobody reads.
        if let Err(e) = volume.remove_file(&journal_path(self.slot, self.epoch, self.generation)).await {
            tracing::warn!(slot = self.slot, error = %e, "cannot remove a transaction slot's old journal");
        }
        Ok(next)
    }
}

/// Removes the journal of `read`, slot `n` as an older epoch (or generation) left it, once a new
/// base replaced it. Best effort: it is never read again.
pub async fn remove_journal<V: Volume>(volume: &V, n: u32, read: &SlotRead) {
    if let Some(generation) = read.generation {
        let _ = volume.remove_file(&journal_path(n, read.epoch, generation)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::state::{self, InitOutcome};

    fn entries(ids: &[&str], epoch: i16) -> Vec<TxnEntry> {
        ids.iter()
            .map(|id| {
                let Ok(InitOutcome::Ready(mut entry)) = state::init_producer_id(None, id, 60_000, 900_000, None, || 7)
                else {
                    panic!()
                };
                entry.producer_epoch = epoch;
                entry
            })
            .collect()
    }

    #[test]
    fn records_replay_in_order_a_torn_tail_is_not_read_and_damage_before_a_whole_record_is_an_error() {
        let base = entries(&["a", "b"], 0);
        let mut journal = Vec::new();
        journal.extend_from_slice(&record(&entries(&["a"], 1)));
        journal.extend_from_slice(&record(&entries(&["a", "c"], 2)));
        let whole = journal.len();
        let replayed = replay("j", base.clone(), &journal).unwrap();
        let epochs: Vec<(String, i16)> =
            replayed.iter().map(|e| (e.transactional_id.clone(), e.producer_epoch)).collect();
        assert_eq!(epochs, [("a".to_string(), 2), ("b".to_string(), 0), ("c".to_string(), 2)]);

        // A third record cut anywhere short, or with its bytes not yet all there: not read.
        let third = record(&entries(&["b"], 3));
        for cut in 1..third.len() {
            let mut torn = journal.clone();
            torn.extend_from_slice(&third[..cut]);
            assert_eq!(replay("j", base.clone(), &torn).unwrap(), replayed, "cut at {cut}");
        }
        let mut zeroed = journal.clone();
        zeroed.extend_from_slice(&third[..RECORD_HEADER]);
        zeroed.extend(std::iter::repeat_n(0u8, third.len() - RECORD_HEADER));
        assert_eq!(replay("j", base.clone(), &zeroed).unwrap(), replayed);
        // Only zeros where the third record was (a crash dropped its unsynced bytes).
        let mut zeros = journal.clone();
        zeros.extend(std::iter::repeat_n(0u8, 600));
        assert_eq!(replay("j", base.clone(), &zeros).unwrap(), replayed);

        // The first record damaged while the second is whole: reported, not skipped.
        let mut damaged = journal.clone();
        damaged[RECORD_HEADER + 3] ^= 0x20;
        let error = replay("j", base.clone(), &damaged).unwrap_err();
        assert!(matches!(error, CoreError::Storage(m) if m.contains("damaged record at byte 0")));
        // A checksum-matching record that is not JSON of entries: reported.
        let mut garbage = journal[..whole].to_vec();
        let payload = b"{not entries";
        garbage.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        garbage.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
        garbage.extend_from_slice(payload);
        assert!(replay("j", base, &garbage).is_err());
    }
}
