//! What consumers were served against the log read back whole:
//! - nonmonotonic-poll: within a session an offset is not above the one before;
//! - poll-skip: within a session an offset was skipped (the log has no gaps);
//! - inconsistent-offsets: a record served at an offset is not the one the log holds there;
//! - nonmonotonic-hwm: a consumer was served a high watermark below one it saw before;
//! - unseen: an offset below the final high watermark that no consumer was ever served,
//!   although every consumer caught up in the liveness phase.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::PartitionHistory;

pub fn check(partition: &str, h: &PartitionHistory) -> Vec<String> {
    let mut violations = Vec::new();
    let by_offset: BTreeMap<i64, &Bytes> = h.read.iter().map(|(o, v)| (*o, v)).collect();
    let mut seen = BTreeSet::new();
    let mut last_hwm: BTreeMap<&str, i64> = BTreeMap::new();
    for s in &h.sessions {
        let mut next = s.start.max(0);
        for (offset, value) in &s.records {
            if *offset < next {
                violations.push(format!(
                    "nonmonotonic-poll: {partition}: {} was served offset {offset} after {}",
                    s.consumer,
                    next - 1
                ));
            } else if *offset > next {
                violations.push(format!("poll-skip: {partition}: {} skipped from {next} to {offset}", s.consumer));
            }
            next = offset + 1;
            seen.insert(*offset);
            if by_offset.get(offset) != Some(&value) {
                violations.push(format!(
                    "inconsistent-offsets: {partition}: {} was served {value:?} at offset {offset}, which the log does not hold",
                    s.consumer
                ));
            }
        }
        let last = last_hwm.entry(&s.consumer).or_insert(-1);
        for hwm in &s.high_watermarks {
            if hwm < last {
                violations.push(format!(
                    "nonmonotonic-hwm: {partition}: {} saw the high watermark go from {last} to {hwm}",
                    s.consumer
                ));
            }
            *last = (*last).max(*hwm);
        }
    }
    let consumed = !h.sessions.is_empty();
    if let Some(missed) = (0..h.high_watermark).find(|o| consumed && !seen.contains(o)) {
        violations.push(format!("unseen: {partition}: no consumer was ever served offset {missed}"));
    }
    violations
}
