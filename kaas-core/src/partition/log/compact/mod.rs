//! Log compaction (`cleanup.policy=compact`), the pure part: which records of a log a cleaning
//! pass keeps, transactions included, as Apache's LogCleaner decides it.
//!
//! A pass reads the dirty part of the log (from where the last pass ended to the first offset it
//! may not clean: the active segment's base and the last stable offset, whichever is lower) into
//! an offset map of bounded size, then rewrites the log from its start up to the map's end: each
//! key's last record stays at its offset, earlier ones go; an aborted transaction's records go;
//! markers, and tombstones, stay until the delete horizon. Offsets never change and a producer's
//! last batch keeps its header, so fetch positions, the LSO and the dedupe window are untouched.
//!
//! - `raw`: a batch's stored records, and a batch rebuilt from some of them;
//! - `offset_map`: key digest to last offset, in a named memory budget;
//! - `txn`: what a batch is to the cleaner with transactions in the log;
//! - `filter`: one batch through the cleaner.
//!
//! The I/O (segments swapped in by atomic renames, under the owner's epoch) is the partition's.

pub mod filter;
pub mod offset_map;
pub mod raw;
pub mod txn;

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::partition::log::batch::BatchHeader;
use crate::partition::log::control::{self, Marker};
use crate::partition::producer::state::AbortedTxn;
use filter::Cleaning;
use offset_map::OffsetMap;
use txn::{BatchFate, TxnTracker};

/// The marker a control batch holds, if it is one the cleaner knows.
fn marker_of(header: &BatchHeader, data: &Bytes) -> Option<Marker> {
    header.is_control().then(|| control::parse_marker(data).map(|(_, m, _)| m)).flatten()
}

/// Phase one: the offset map of the dirty batches (in log order, from `dirty_start`), skipping
/// what no reader sees (markers, aborted transactions). Stops early, at a batch, when full.
pub fn build_map<'a>(
    dirty: impl IntoIterator<Item = (&'a BatchHeader, &'a Bytes)>,
    aborted: &[AbortedTxn],
    dirty_start: i64,
    budget_bytes: u64,
    load_factor: f64,
) -> Result<OffsetMap, String> {
    let mut map = OffsetMap::new(budget_bytes, load_factor, dirty_start);
    let mut txns = TxnTracker::new(aborted.iter().filter(|t| t.last_offset >= dirty_start).copied().collect());
    for (header, data) in dirty {
        if header.last_offset() < dirty_start {
            continue;
        }
        if txns.on_batch(header, marker_of(header, data)) != BatchFate::Records {
            map.skip_to(header.next_offset());
            continue;
        }
        let keys: Vec<_> = raw::records(header, data)?
            .into_iter()
            .filter_map(|r| r.key.map(|k| (offset_map::digest(&k), r.offset)))
            .collect();
        if !map.add_batch(&keys, header.next_offset()) {
            break;
        }
    }
    Ok(map)
}

/// Phase two: the log from its start through the map's end, cleaned. `drop_deletes_below` is the
/// first offset whose segment is not yet past the delete horizon; `producers_last` is each
/// producer's last batch in the log (by its last offset), kept at least as its header. Batches at
/// or past the map's end are the caller's to keep as they are.
pub fn clean<'a>(
    log: impl IntoIterator<Item = (&'a BatchHeader, &'a Bytes)>,
    aborted: &[AbortedTxn],
    map: &OffsetMap,
    drop_deletes_below: i64,
    producers_last: &BTreeMap<i64, i64>,
) -> Result<Vec<Bytes>, String> {
    let mut txns = TxnTracker::new(aborted.to_vec());
    let mut out = Vec::new();
    for (header, data) in log {
        if header.base_offset >= map.end() {
            break;
        }
        let fate = txns.on_batch(header, marker_of(header, data));
        let last = header.producer_id >= 0 && producers_last.get(&header.producer_id) == Some(&header.last_offset());
        let cx = Cleaning { map, drop_deletes: header.last_offset() < drop_deletes_below };
        let cleaned = filter::clean_batch(header, data, fate, last, cx)?;
        out.extend(cleaned.bytes(data).cloned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
