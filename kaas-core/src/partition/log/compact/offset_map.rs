//! The cleaner's offset map: for each key of the dirty part of the log, the offset of its last
//! record, in a memory budget named by `log.cleaner.dedupe.buffer.size`.
//!
//! As Apache's, a key is held by a 16-byte digest (here the first half of its SHA-256), plus an
//! 8-byte offset: 24 bytes an entry, filled to `log.cleaner.io.buffer.load.factor` of the budget.
//! A full map ends the pass early at a batch boundary: what lies past `end` is cleaned by the next
//! pass, so a small budget means more passes, never a wrong result. The map is a BTreeMap, so its
//! order (and any iteration) is the same in every run.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Bytes an entry takes in the budget: a 16-byte digest and an 8-byte offset, as Apache counts.
pub const ENTRY_BYTES: u64 = 24;

pub type KeyDigest = [u8; 16];

pub fn digest(key: &[u8]) -> KeyDigest {
    let full = Sha256::digest(key);
    full[..16].try_into().expect("32 bytes")
}

#[derive(Debug, Clone)]
pub struct OffsetMap {
    latest: BTreeMap<KeyDigest, i64>,
    capacity: usize,
    /// The first offset the map has not seen: records from here on are newer than any it knows.
    end: i64,
}

impl OffsetMap {
    /// A map for `budget_bytes` at `load_factor`, covering nothing yet from `start`.
    pub fn new(budget_bytes: u64, load_factor: f64, start: i64) -> OffsetMap {
        let capacity = ((budget_bytes / ENTRY_BYTES) as f64 * load_factor.clamp(0.1, 1.0)) as usize;
        OffsetMap { latest: BTreeMap::new(), capacity: capacity.max(1), end: start }
    }

    /// Adds one batch's keyed records (`(key digest, offset)`, offsets increasing, all at or past
    /// `end`) and moves `end` to `next_offset`; or, when they might not fit, adds nothing and
    /// answers false: the map ends where it is. An empty map takes any batch, so that every pass
    /// moves on (a batch larger than the budget overruns it by itself alone).
    pub fn add_batch(&mut self, keys: &[(KeyDigest, i64)], next_offset: i64) -> bool {
        if self.latest.len() + keys.len() > self.capacity && !self.latest.is_empty() {
            return false;
        }
        for &(key, offset) in keys {
            debug_assert!(offset >= self.end, "offsets added in order");
            self.latest.insert(key, offset);
        }
        debug_assert!(next_offset >= self.end);
        self.end = next_offset;
        true
    }

    /// Moves `end` past a batch that holds no key the map keeps (a control batch, an aborted
    /// transaction's records).
    pub fn skip_to(&mut self, next_offset: i64) {
        self.end = self.end.max(next_offset);
    }

    /// The offset of the last record of `key` the map has seen.
    pub fn latest(&self, key: &KeyDigest) -> Option<i64> {
        self.latest.get(key).copied()
    }

    pub fn end(&self) -> i64 {
        self.end
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_offset_of_each_key_wins_and_a_full_map_stops_at_a_batch() {
        // Room for 4 entries.
        let mut map = OffsetMap::new(4 * ENTRY_BYTES, 1.0, 10);
        let (a, b, c) = (digest(b"a"), digest(b"b"), digest(b"c"));
        assert!(map.add_batch(&[(a, 10), (b, 11), (a, 12)], 13));
        assert_eq!((map.latest(&a), map.latest(&b), map.end()), (Some(12), Some(11), 13));
        map.skip_to(15);
        assert!(map.add_batch(&[(c, 15)], 16));
        assert!(!map.add_batch(&[(digest(b"d"), 16), (digest(b"e"), 17)], 18), "two more do not fit");
        assert_eq!((map.end(), map.len()), (16, 3), "nothing of the refused batch");
        assert!(map.add_batch(&[], 20), "an empty batch always fits");
        let mut tiny = OffsetMap::new(ENTRY_BYTES, 1.0, 0);
        assert!(tiny.add_batch(&[(a, 0), (b, 1)], 2), "an empty map takes a batch larger than its budget");
        assert!(!tiny.add_batch(&[(c, 2)], 3));
        assert_eq!(map.latest(&digest(b"d")), None);
        assert_ne!(digest(b"a"), digest(b"b"));
    }
}
