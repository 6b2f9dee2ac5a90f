//! One batch through the cleaner, as Apache's LogCleaner decides it: a record stays if it is the
//! last of its key the offset map knows (or newer than anything the map saw), unless it is a
//! tombstone past the delete horizon; a record without a key goes (a compacted topic never took
//! one; one from before the topic was compacted is invalid there). An aborted transaction's batch
//! goes whole; a marker goes once it is removable and past the horizon (an abort marker never is:
//! `txn.rs`). A producer's last batch stays at least as its header, so its last sequence (the
//! dedupe window) survives.

use bytes::Bytes;

use super::offset_map::{OffsetMap, digest};
use super::raw::{self, RawRecord};
use super::txn::BatchFate;
use crate::partition::log::batch::BatchHeader;

/// What the cleaner knows while it cleans one segment.
#[derive(Debug, Clone, Copy)]
pub struct Cleaning<'a> {
    pub map: &'a OffsetMap,
    /// Past the delete horizon (`delete.retention.ms` since the segment's newest record):
    /// tombstones and removable markers go.
    pub drop_deletes: bool,
}

/// What became of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleaned {
    Unchanged,
    Dropped,
    Rewritten(Bytes),
}

impl Cleaned {
    /// The batch's bytes in the cleaned segment, if any.
    pub fn bytes<'a>(&'a self, original: &'a Bytes) -> Option<&'a Bytes> {
        match self {
            Cleaned::Unchanged => Some(original),
            Cleaned::Dropped => None,
            Cleaned::Rewritten(b) => Some(b),
        }
    }
}

/// Cleans one CRC-checked batch. `producers_last` says whether it is the last batch of its
/// producer in the log (kept at least as an empty batch).
pub fn clean_batch(
    header: &BatchHeader,
    data: &Bytes,
    fate: BatchFate,
    producers_last: bool,
    cx: Cleaning<'_>,
) -> Result<Cleaned, String> {
    // What is left of a batch whose records all go: its header, if it is its producer's last.
    let dropped = || if producers_last { empty(header, data) } else { Ok(Cleaned::Dropped) };
    match fate {
        BatchFate::Aborted => return dropped(),
        BatchFate::Marker { removable } if removable && cx.drop_deletes => return dropped(),
        BatchFate::Marker { .. } => return Ok(Cleaned::Unchanged),
        BatchFate::Records => {}
    }
    // Nothing past the map's end is compared: the map has not seen its keys' later records.
    if header.base_offset >= cx.map.end() {
        return Ok(Cleaned::Unchanged);
    }
    let records = raw::records(header, data)?;
    let kept: Vec<RawRecord> = records.iter().filter(|r| retained(r, cx)).cloned().collect();
    match kept.len() {
        n if n == records.len() => Ok(Cleaned::Unchanged),
        0 => dropped(),
        _ => raw::rebuild(header, data, &kept).map(Cleaned::Rewritten),
    }
}

fn retained(record: &RawRecord, cx: Cleaning<'_>) -> bool {
    let Some(key) = &record.key else { return false };
    if record.offset >= cx.map.end() {
        return true;
    }
    let latest = cx.map.latest(&digest(key)).is_none_or(|o| record.offset >= o);
    latest && !(record.tombstone && cx.drop_deletes)
}

fn empty(header: &BatchHeader, data: &Bytes) -> Result<Cleaned, String> {
    match header.records_count {
        0 => Ok(Cleaned::Unchanged),
        _ => raw::rebuild(header, data, &[]).map(Cleaned::Rewritten),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::log::batch;
    use crate::partition::log::compact::offset_map::ENTRY_BYTES;
    use crate::partition::log::compact::raw::tests::encoded;
    use kafka_protocol::records::Compression;

    fn map_of(entries: &[(&str, i64)], end: i64) -> OffsetMap {
        let mut map = OffsetMap::new(1000 * ENTRY_BYTES, 1.0, 0);
        let mut keys: Vec<_> = entries.iter().map(|(k, o)| (digest(k.as_bytes()), *o)).collect();
        keys.sort_by_key(|(_, o)| *o);
        assert!(map.add_batch(&keys, end));
        map
    }

    fn kept_keys(cleaned: &Cleaned, original: &Bytes) -> Vec<(i64, String)> {
        let Some(bytes) = cleaned.bytes(original) else { return vec![] };
        let header = batch::check(bytes).unwrap();
        raw::records(&header, bytes)
            .unwrap()
            .into_iter()
            .map(|r| (r.offset, String::from_utf8(r.key.unwrap().to_vec()).unwrap()))
            .collect()
    }

    #[test]
    fn the_last_record_of_each_key_stays() {
        let data =
            encoded(0, &[(Some("a"), Some("1")), (Some("b"), Some("2")), (Some("a"), Some("3"))], Compression::Lz4);
        let header = batch::check(&data).unwrap();
        let map = map_of(&[("a", 2), ("b", 5)], 6);
        let cx = Cleaning { map: &map, drop_deletes: false };
        let cleaned = clean_batch(&header, &data, BatchFate::Records, false, cx).unwrap();
        assert_eq!(kept_keys(&cleaned, &data), vec![(2, "a".to_string())]);
    }

    #[test]
    fn tombstones_stay_until_the_delete_horizon_and_keyless_records_go() {
        let data = encoded(0, &[(Some("a"), None), (None, Some("x")), (Some("b"), Some("2"))], Compression::None);
        let header = batch::check(&data).unwrap();
        let map = map_of(&[("a", 0), ("b", 2)], 3);
        let before =
            clean_batch(&header, &data, BatchFate::Records, false, Cleaning { map: &map, drop_deletes: false });
        assert_eq!(kept_keys(&before.unwrap(), &data), vec![(0, "a".into()), (2, "b".into())]);
        let after = clean_batch(&header, &data, BatchFate::Records, false, Cleaning { map: &map, drop_deletes: true });
        assert_eq!(kept_keys(&after.unwrap(), &data), vec![(2, "b".into())]);
    }

    #[test]
    fn nothing_past_the_map_is_touched() {
        let data = encoded(10, &[(Some("a"), Some("1")), (None, Some("x"))], Compression::None);
        let header = batch::check(&data).unwrap();
        let map = map_of(&[("a", 3)], 10);
        let cx = Cleaning { map: &map, drop_deletes: true };
        assert_eq!(clean_batch(&header, &data, BatchFate::Records, false, cx).unwrap(), Cleaned::Unchanged);
    }

    #[test]
    fn aborted_batches_and_spent_markers_go_but_a_producers_last_batch_stays_as_its_header() {
        let data = encoded(0, &[(Some("a"), Some("1"))], Compression::None);
        let header = batch::check(&data).unwrap();
        let map = map_of(&[("a", 0)], 1);
        let cx = Cleaning { map: &map, drop_deletes: false };
        assert_eq!(clean_batch(&header, &data, BatchFate::Aborted, false, cx).unwrap(), Cleaned::Dropped);
        let Cleaned::Rewritten(last) = clean_batch(&header, &data, BatchFate::Aborted, true, cx).unwrap() else {
            panic!("the producer's last batch stays")
        };
        let h = batch::check(&last).unwrap();
        assert_eq!((h.records_count, h.base_sequence, h.last_offset()), (0, header.base_sequence, 0));
        let marker = BatchFate::Marker { removable: true };
        assert_eq!(clean_batch(&header, &data, marker, false, cx).unwrap(), Cleaned::Unchanged, "horizon not passed");
        let past = Cleaning { map: &map, drop_deletes: true };
        assert_eq!(clean_batch(&header, &data, marker, false, past).unwrap(), Cleaned::Dropped);
        let kept = BatchFate::Marker { removable: false };
        assert_eq!(clean_batch(&header, &data, kept, false, past).unwrap(), Cleaned::Unchanged);
    }
}
