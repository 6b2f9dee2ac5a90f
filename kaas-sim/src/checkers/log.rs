//! The log read back whole against what producers were told:
//! - lost-write: an acked batch is not at its offsets with its values;
//! - inconsistent-offsets: two records at one offset;
//! - gap: the offsets are not 0, 1, 2, ... (no retention or compaction in these scenarios);
//! - duplicate: a batch appears twice although no attempt of it was indefinite;
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
            "{partition}: high watermark {} but {} records readable",
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
        match batch_of.get(v) {
            None => violations.push(format!("phantom: {partition}: {v:?} was never sent")),
            Some(b) if n > 1 && !h.produced.indefinite.contains(b) => violations
                .push(format!("duplicate: {partition}: {v:?} appears {n} times without an indefinite attempt")),
            Some(_) => {}
        }
    }
    violations
}
