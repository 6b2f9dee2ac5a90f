//! The compaction checker: a compacted topic, read read_committed at the end, against every
//! write of the run. Compaction may take away a record only when a newer record of its key
//! stays (or a tombstone's delete retention ran out); it may never move, invent or resurrect
//! one. Classes:
//! - record-moved: a record read that was not written there (another offset, another key, a
//!   value nobody wrote);
//! - aborted-read: a record of an aborted transaction read read_committed (the cleaner dropped
//!   its marker, or its place in the aborted index, and kept the records);
//! - cleaned-above-lso: a key's last committed value is gone, and a write of the key that was
//!   aborted later lies past it: the cleaner took a transaction still open for a newer value;
//! - txn-record-lost: a key's last committed value, written in a committed transaction, is gone
//!   with nothing newer of its key to stand for it;
//! - last-value-lost: the same for a value written outside any transaction;
//! - active-segment-cleaned: a committed record in the active segment (which no pass may touch)
//!   is gone.
//!
//! The scenario adds a liveness class of its own (`scenarios::compaction`): tombstone-kept, a
//! tombstone still read long after its delete retention ran out and passes cleaned its segment.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::transactions::Fate;

/// One record written (or perhaps written) to the topic.
#[derive(Debug, Clone)]
pub struct Write {
    pub partition: i32,
    /// Its value as sent (`workloads::transactional::message_of`): unique in the run.
    pub id: Bytes,
    pub key: String,
    pub tombstone: bool,
    /// Where it was acked; `None`: no answer said.
    pub offset: Option<i64>,
    pub fate: Fate,
    pub transactional: bool,
}

impl Write {
    /// A write from its sent value (`KEY|id` or `KEY|id|del`).
    pub fn of(partition: i32, id: &Bytes, offset: Option<i64>, fate: Fate, transactional: bool) -> Write {
        let text = String::from_utf8_lossy(id);
        Write {
            partition,
            id: id.clone(),
            key: text.split('|').next().unwrap_or_default().to_string(),
            tombstone: text.ends_with("|del"),
            offset,
            fate,
            transactional,
        }
    }
}

/// A record read back: offset, key, whether a tombstone, and its value (empty for a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub offset: i64,
    pub key: String,
    pub tombstone: bool,
    pub value: Bytes,
}

/// What the end of a run saw of one partition.
#[derive(Debug, Clone, Default)]
pub struct FinalLog {
    pub records: Vec<Read>,
    /// The active segment's base offset, read from the volume before and after the read (`None`
    /// when the two differ: a roll in between, and the check is skipped).
    pub active_base: Option<i64>,
}

pub fn check(writes: &[Write], finals: &BTreeMap<i32, FinalLog>) -> Vec<String> {
    let mut violations = Vec::new();
    for (&partition, log) in finals {
        let writes: Vec<&Write> = writes.iter().filter(|w| w.partition == partition).collect();
        check_reads(partition, &writes, &log.records, &mut violations);
        check_last_values(partition, &writes, &log.records, &mut violations);
        if let Some(active) = log.active_base {
            for w in writes.iter().filter(|w| w.fate == Fate::Committed) {
                let Some(offset) = w.offset.filter(|&o| o >= active) else { continue };
                if !log.records.iter().any(|r| r.offset == offset) {
                    violations.push(format!(
                        "active-segment-cleaned: p{partition} offset {offset} ({}) is gone from the active segment at {active}",
                        String::from_utf8_lossy(&w.id)
                    ));
                }
            }
        }
    }
    violations
}

/// Each record read is one written there, and not an aborted one.
fn check_reads(partition: i32, writes: &[&Write], reads: &[Read], violations: &mut Vec<String>) {
    for r in reads {
        // A tombstone carries no value: any tombstone of its key. A value is its write's id
        // (each try of a plain write is a write of its own: one unanswered may have landed).
        let candidates = writes.iter().filter(|w| if r.tombstone { w.tombstone } else { w.id == r.value });
        // Written there, or somewhere no answer said.
        let fitting: Vec<_> = candidates.filter(|w| w.key == r.key && w.offset.is_none_or(|o| o == r.offset)).collect();
        if fitting.is_empty() {
            violations.push(format!(
                "record-moved: p{partition} offset {} holds {} {}, which no write put there",
                r.offset,
                r.key,
                if r.tombstone { "(tombstone)".into() } else { String::from_utf8_lossy(&r.value).into_owned() }
            ));
        } else if fitting.iter().all(|w| w.fate == Fate::Aborted) {
            violations.push(format!(
                "aborted-read: p{partition} offset {} ({}) was written by an aborted transaction",
                r.offset, r.key
            ));
        }
    }
}

/// Each key's last committed write is there, unless something newer of its key may stand for
/// it.
fn check_last_values(partition: i32, writes: &[&Write], reads: &[Read], violations: &mut Vec<String>) {
    let mut last: BTreeMap<&str, &Write> = BTreeMap::new();
    for w in writes.iter().filter(|w| w.fate == Fate::Committed && w.offset.is_some()) {
        let newer = last.get(w.key.as_str()).is_none_or(|l| l.offset < w.offset);
        if newer {
            last.insert(&w.key, w);
        }
    }
    for (key, l) in last {
        let at = l.offset.expect("known");
        if reads.iter().any(|r| r.offset == at || (r.key == key && r.offset > at)) {
            continue;
        }
        let later = |w: &&&Write| w.key == key && w.offset.is_none_or(|o| o > at);
        // A tombstone goes after its delete retention, and a later one may have taken this
        // value with it; a write nobody knows the fate or place of may stand for it too.
        if l.tombstone || writes.iter().filter(later).any(|w| w.tombstone || w.fate == Fate::Unknown) {
            continue;
        }
        let id = String::from_utf8_lossy(&l.id);
        let aborted_later =
            writes.iter().filter(later).any(|w| w.fate == Fate::Aborted && w.offset.is_some_and(|o| o > at));
        let class = match (aborted_later, l.transactional) {
            (true, _) => "cleaned-above-lso",
            (false, true) => "txn-record-lost",
            (false, false) => "last-value-lost",
        };
        violations.push(format!("{class}: p{partition} {key}'s last committed value {id} at {at} is gone"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: &str, offset: i64, fate: Fate, transactional: bool) -> Write {
        Write::of(0, &Bytes::from(id.to_string()), Some(offset), fate, transactional)
    }

    fn r(offset: i64, id: &str) -> Read {
        let write = w(id, offset, Fate::Committed, false);
        let value = if write.tombstone { Bytes::new() } else { write.id.clone() };
        Read { offset, key: write.key, tombstone: write.tombstone, value }
    }

    fn classes(writes: &[Write], reads: Vec<Read>, active_base: Option<i64>) -> Vec<String> {
        let finals = BTreeMap::from([(0, FinalLog { records: reads, active_base })]);
        let mut found: Vec<String> =
            check(writes, &finals).iter().map(|v| crate::scenarios::class(v).to_string()).collect();
        found.dedup();
        found
    }

    #[test]
    fn superseded_values_may_go_the_last_may_not() {
        let writes = [
            w("a|1", 0, Fate::Committed, false),
            w("a|2", 1, Fate::Committed, true),
            w("b|3", 2, Fate::Committed, false),
            w("a|4", 3, Fate::Aborted, true),
            w("b|5|del", 4, Fate::Committed, false),
        ];
        // Compacted: a's last (1) stays, b's tombstone stands for b.
        assert!(classes(&writes, vec![r(1, "a|2"), r(4, "b|5|del")], None).is_empty());
        // The tombstone gone too (its delete retention ran out): fine.
        assert!(classes(&writes, vec![r(1, "a|2")], None).is_empty());
        // a's last committed value gone, an aborted write of a after it: the cleaner read it.
        assert_eq!(classes(&writes, vec![], None), ["cleaned-above-lso"]);
        let writes = &writes[..3];
        assert_eq!(classes(writes, vec![r(2, "b|3")], None), ["txn-record-lost"]);
        assert_eq!(classes(writes, vec![r(1, "a|2")], None), ["last-value-lost"]);
    }

    #[test]
    fn a_record_read_must_be_the_one_written_there_and_not_aborted() {
        let writes = [w("a|1", 0, Fate::Committed, true), w("a|2", 1, Fate::Aborted, true)];
        assert_eq!(classes(&writes, vec![r(5, "a|1")], None), ["record-moved"]);
        assert_eq!(classes(&writes, vec![r(0, "a|1"), r(1, "a|2")], None), ["aborted-read"]);
        let invented = Read { offset: 0, key: "b".into(), tombstone: false, value: Bytes::from("a|1") };
        assert_eq!(classes(&writes, vec![invented], None), ["record-moved"]);
    }

    #[test]
    fn the_active_segment_keeps_every_record() {
        let writes = [w("a|1", 0, Fate::Committed, false), w("a|2", 1, Fate::Committed, false)];
        assert!(classes(&writes, vec![r(1, "a|2")], Some(1)).is_empty());
        assert_eq!(classes(&writes, vec![r(1, "a|2")], Some(0)), ["active-segment-cleaned"]);
    }
}
