//! The log read back whole against what producers were told:
//! - lost-write: an acked batch is not at its offsets with its values;
//! - inconsistent-offsets: two records at one offset;
//! - gap: the offsets are not 0, 1, 2, ... (no retention or compaction in these scenarios);
//! - duplicate: a value appears twice, and its batch was never sent again after an attempt of
//!   unknown outcome (so no retry can explain the second copy; an acks=0 batch is sent once);
//! - stale-read: a value sent to an earlier incarnation of the topic, deleted since, that no
//!   late request can explain;
//! - phantom: a value nobody sent.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::PartitionHistory;

pub fn check(partition: &str, h: &PartitionHistory) -> Vec<String> {
    let mut violations = Vec::new();
    let by_offset: BTreeMap<i64, &Bytes> = h.read.iter().map(|(o, v)| (*o, v)).collect();
    if by_offset.len() != h.read.len() {
        violations.push(format!("inconsistent-offsets: {partition}: two records read at one offset"));
    }
    if let Some((expected, (offset, _))) = h.read.iter().enumerate().find(|(i, (o, _))| *o != *i as i64) {
        violations.push(format!("gap: {partition}: offset {offset} read where {expected} was next"));
    }
    if h.high_watermark != h.read.len() as i64 {
        violations.push(format!(
            "gap: {partition}: high watermark {} but {} records readable",
            h.high_watermark,
            h.read.len()
        ));
    }
    for (batch, base) in &h.produced.acked {
        for (i, value) in h.produced.sent[batch].iter().enumerate() {
            let offset = base + i as i64;
            match by_offset.get(&offset) {
                Some(v) if *v == value => {}
                Some(v) => violations.push(format!(
                    "lost-write: {partition}: offset {offset} holds {v:?}, acked as batch {batch} record {i}"
                )),
                None => {
                    violations.push(format!("lost-write: {partition}: acked batch {batch} missing at offset {offset}"))
                }
            }
        }
    }
    let batch_of: BTreeMap<&Bytes, u64> =
        h.produced.sent.iter().flat_map(|(batch, values)| values.iter().map(move |v| (v, *batch))).collect();
    let mut copies: BTreeMap<&Bytes, usize> = BTreeMap::new();
    for (_, v) in &h.read {
        *copies.entry(v).or_default() += 1;
    }
    for (v, n) in copies {
        match (batch_of.get(v), h.earlier.get(v)) {
            (None, None) => violations.push(format!("phantom: {partition}: {v:?} was never sent")),
            (None, Some(false)) => violations.push(format!(
                "stale-read: {partition}: {v:?} was acked by an earlier incarnation of the topic, deleted since"
            )),
            (None, Some(true)) if n > 1 => {
                violations.push(format!("duplicate: {partition}: {v:?}, sent once, appears {n} times"))
            }
            (Some(b), _) if n > 1 && !h.produced.retried_after_indefinite.contains(b) => violations.push(format!(
                "duplicate: {partition}: {v:?} appears {n} times, but batch {b} was never retried after an attempt of unknown outcome"
            )),
            _ => {}
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkers::b;

    fn history(read: &[&str], acked: &[(u64, i64)]) -> PartitionHistory {
        let mut h = PartitionHistory::default();
        h.produced.sent.insert(1, vec![b("a"), b("b")]);
        h.produced.sent.insert(2, vec![b("c")]);
        h.produced.acked.extend(acked.iter().copied());
        h.read = read.iter().enumerate().map(|(i, v)| (i as i64, b(v))).collect();
        h.high_watermark = read.len() as i64;
        h
    }

    fn classes(v: &[String]) -> Vec<&str> {
        v.iter().map(|v| crate::scenarios::class(v)).collect()
    }

    #[test]
    fn a_log_holding_every_acked_batch_once_passes() {
        assert!(check("p", &history(&["a", "b", "c"], &[(1, 0), (2, 2)])).is_empty());
        // An unacked batch may be missing.
        assert!(check("p", &history(&["c"], &[(2, 0)])).is_empty());
    }

    #[test]
    fn lost_and_moved_writes_gaps_and_phantoms_are_named() {
        assert_eq!(classes(&check("p", &history(&["a", "b"], &[(1, 0), (2, 2)]))), ["lost-write"]);
        assert_eq!(classes(&check("p", &history(&["c", "a", "b"], &[(1, 0)]))), ["lost-write", "lost-write"]);
        assert_eq!(classes(&check("p", &history(&["a", "b", "x"], &[(1, 0)]))), ["phantom"]);
        let mut gap = history(&["a", "b"], &[(1, 0)]);
        gap.read[1].0 = 5;
        gap.high_watermark = 6;
        assert!(classes(&check("p", &gap)).contains(&"gap"));
    }

    #[test]
    fn a_second_copy_is_excused_only_by_a_retry_after_an_unknown_outcome() {
        let mut h = history(&["a", "b", "a", "b"], &[(1, 2)]);
        assert_eq!(classes(&check("p", &h)), ["duplicate", "duplicate"], "never retried");
        h.produced.indefinite.insert(1);
        assert_eq!(classes(&check("p", &h)), ["duplicate", "duplicate"], "indefinite but sent once (acks=0)");
        h.produced.retried_after_indefinite.insert(1);
        assert!(check("p", &h).is_empty(), "an indefinite attempt, then a retry");
    }

    #[test]
    fn a_value_of_a_deleted_incarnation_is_stale_unless_it_may_have_landed_late() {
        let mut h = history(&["old", "a", "b"], &[(1, 1)]);
        h.earlier.insert(b("old"), false);
        assert_eq!(classes(&check("p", &h)), ["stale-read"]);
        h.earlier.insert(b("old"), true);
        assert!(check("p", &h).is_empty());
    }
}
