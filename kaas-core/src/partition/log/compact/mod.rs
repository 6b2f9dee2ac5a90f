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
//! - `filter`: one batch through the cleaner;
//! - `schedule`: when a log is worth a pass, and what the pass may touch.
//!
//! The I/O (segments swapped in by atomic renames, under the owner's epoch) is the partition's.

/// The crash points of a cleaning pass (the partition actor's): between a cleaned copy's sync
/// and its rename.
pub const CRASH_POINTS: [&str; 1] = ["log.clean_before_swap"];

pub mod filter;
pub mod offset_map;
pub mod raw;
pub mod schedule;
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

/// Phase one, a batch at a time: the offset map of the dirty batches (in log order, from
/// `dirty_start`), skipping what no reader sees (markers, aborted transactions).
pub struct MapBuilder {
    map: OffsetMap,
    txns: TxnTracker,
    dirty_start: i64,
}

impl MapBuilder {
    pub fn new(aborted: &[AbortedTxn], dirty_start: i64, budget_bytes: u64, load_factor: f64) -> MapBuilder {
        MapBuilder {
            map: OffsetMap::new(budget_bytes, load_factor, dirty_start),
            txns: TxnTracker::new(aborted.iter().filter(|t| t.last_offset >= dirty_start).copied().collect()),
            dirty_start,
        }
    }

    /// Adds the next batch; false when the map is full: it ends before this batch.
    pub fn add(&mut self, header: &BatchHeader, data: &Bytes) -> Result<bool, String> {
        if header.last_offset() < self.dirty_start {
            return Ok(true);
        }
        if self.txns.on_batch(header, marker_of(header, data)) != BatchFate::Records {
            self.map.skip_to(header.next_offset());
            return Ok(true);
        }
        // The header's count bounds the batch's keys: room for it is room for them.
        if !self.map.has_room_for(usize::try_from(header.records_count).unwrap_or(usize::MAX)) {
            return Ok(false);
        }
        let map = &mut self.map;
        raw::keys(header, data, |key, offset| {
            if let Some(key) = key {
                map.insert(offset_map::digest(key), offset);
            }
        })?;
        self.map.close_batch(header.next_offset());
        Ok(true)
    }

    pub fn finish(self) -> OffsetMap {
        self.map
    }
}

/// Phase one over a whole dirty part at once (stops early, at a batch, when full).
pub fn build_map<'a>(
    dirty: impl IntoIterator<Item = (&'a BatchHeader, &'a Bytes)>,
    aborted: &[AbortedTxn],
    dirty_start: i64,
    budget_bytes: u64,
    load_factor: f64,
) -> Result<OffsetMap, String> {
    let mut builder = MapBuilder::new(aborted, dirty_start, budget_bytes, load_factor);
    for (header, data) in dirty {
        if !builder.add(header, data)? {
            break;
        }
    }
    Ok(builder.finish())
}

/// Phase two, a segment at a time: the log from its start through the map's end, cleaned.
/// `drop_deletes_below` is the first offset whose segment is not yet past the delete horizon;
/// `producers_last` is each producer's last batch in the log (by its last offset), kept at
/// least as its header. Batches at or past the map's end are kept as they are.
pub struct Cleaner {
    map: OffsetMap,
    txns: TxnTracker,
    drop_deletes_below: i64,
}

impl Cleaner {
    /// A cleaner for a pass from the log's start, given every aborted transaction in it.
    pub fn new(map: OffsetMap, aborted: &[AbortedTxn], drop_deletes_below: i64) -> Cleaner {
        Cleaner { map, txns: TxnTracker::new(aborted.to_vec()), drop_deletes_below }
    }

    /// The first offset the map has not seen: where this pass's cleaning ends.
    pub fn end(&self) -> i64 {
        self.map.end()
    }

    /// The next batches of the log (a segment), cleaned.
    pub fn clean<'a>(
        &mut self,
        batches: impl IntoIterator<Item = (&'a BatchHeader, &'a Bytes)>,
        producers_last: &BTreeMap<i64, i64>,
    ) -> Result<Vec<Bytes>, String> {
        let mut out = Vec::new();
        for (header, data) in batches {
            if header.base_offset >= self.map.end() {
                out.push(data.clone());
                continue;
            }
            let fate = self.txns.on_batch(header, marker_of(header, data));
            let last =
                header.producer_id >= 0 && producers_last.get(&header.producer_id) == Some(&header.last_offset());
            let cx = Cleaning { map: &self.map, drop_deletes: header.last_offset() < self.drop_deletes_below };
            let cleaned = filter::clean_batch(header, data, fate, last, cx)?;
            out.extend(cleaned.bytes(data).cloned());
        }
        Ok(out)
    }
}

/// Phase two over the whole log at once, up to the map's end (what lies past it is left out).
pub fn clean<'a>(
    log: impl IntoIterator<Item = (&'a BatchHeader, &'a Bytes)>,
    aborted: &[AbortedTxn],
    map: &OffsetMap,
    drop_deletes_below: i64,
    producers_last: &BTreeMap<i64, i64>,
) -> Result<Vec<Bytes>, String> {
    let end = map.end();
    let mut cleaner = Cleaner::new(map.clone(), aborted, drop_deletes_below);
    cleaner.clean(log.into_iter().take_while(|(h, _)| h.base_offset < end), producers_last)
}

#[cfg(test)]
mod tests;
