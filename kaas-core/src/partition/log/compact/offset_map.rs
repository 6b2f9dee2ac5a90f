//! The cleaner's offset map: for each key of the dirty part of the log, the offset of its last
//! record, in a memory budget named by `log.cleaner.dedupe.buffer.size`.
//!
//! As Apache's, a key is held by a 16-byte digest (here the first half of its SHA-256), plus an
//! 8-byte offset: 24 bytes an entry, filled to `log.cleaner.io.buffer.load.factor` of the budget.
//! A full map ends the pass early at a batch boundary: what lies past `end` is cleaned by the next
//! pass, so a small budget means more passes, never a wrong result. The map is a hash map keyed
//! by the digest itself (already uniform, so its first bytes are the hash): no random seed, and
//! nothing iterates it, so every run decides the same. (A BTreeMap, as elsewhere, took about twice
//! the memory an entry is budgeted, and was slower.)

// The one HashMap of kaas-core: its hasher is fixed (`DigestHasher`) and it is never iterated.
#![allow(clippy::disallowed_types)]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use sha2::{Digest, Sha256};

/// Bytes an entry takes in the budget: a 16-byte digest and an 8-byte offset, as Apache counts.
pub const ENTRY_BYTES: u64 = 24;

pub type KeyDigest = [u8; 16];

pub fn digest(key: &[u8]) -> KeyDigest {
    let full = Sha256::digest(key);
    full[..16].try_into().expect("32 bytes")
}

/// Hashes a `KeyDigest` by its own bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(17) ^ u64::from_le_bytes(word);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Debug, Clone)]
pub struct OffsetMap {
    latest: HashMap<KeyDigest, i64, BuildHasherDefault<DigestHasher>>,
    capacity: usize,
    /// The first offset the map has not seen: records from here on are newer than any it knows.
    end: i64,
}

impl OffsetMap {
    /// A map for `budget_bytes` at `load_factor`, covering nothing yet from `start`.
    pub fn new(budget_bytes: u64, load_factor: f64, start: i64) -> OffsetMap {
        let capacity = ((budget_bytes / ENTRY_BYTES) as f64 * load_factor.clamp(0.1, 1.0)) as usize;
        OffsetMap { latest: HashMap::default(), capacity: capacity.max(1), end: start }
    }

    /// Whether a batch of `records` keyed records fits. An empty map takes any batch, so that
    /// every pass moves on (a batch larger than the budget overruns it by itself alone). When it
    /// does not fit, the map ends where it is.
    pub fn has_room_for(&self, records: usize) -> bool {
        self.latest.is_empty() || self.latest.len().saturating_add(records) <= self.capacity
    }

    /// One record of the batch being added (offsets increasing, at or past `end`).
    pub fn insert(&mut self, key: KeyDigest, offset: i64) {
        debug_assert!(offset >= self.end, "offsets added in order");
        self.latest.insert(key, offset);
    }

    /// The batch being added is all in: the map covers the log up to `next_offset`.
    pub fn close_batch(&mut self, next_offset: i64) {
        debug_assert!(next_offset >= self.end);
        self.end = next_offset;
    }

    /// Adds one batch's keyed records (`(key digest, offset)`) and moves `end` to `next_offset`,
    /// if they fit; else adds nothing and answers false.
    pub fn add_batch(&mut self, keys: &[(KeyDigest, i64)], next_offset: i64) -> bool {
        if !self.has_room_for(keys.len()) {
            return false;
        }
        for &(key, offset) in keys {
            self.insert(key, offset);
        }
        self.close_batch(next_offset);
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
