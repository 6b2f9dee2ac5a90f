//! What consumers were served against the log read back whole:
//! - nonmonotonic-poll: within a session an offset is not above the one before (a broker that
//!   serves a batch wholly below the fetch offset, or batches out of order; the client keeps
//!   such records for this check, skipping only the head of the batch holding the offset);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkers::{Session, b};

    fn log(n: i64) -> PartitionHistory {
        PartitionHistory {
            read: (0..n).map(|o| (o, b(&format!("v{o}")))).collect(),
            high_watermark: n,
            ..PartitionHistory::default()
        }
    }

    fn session(start: i64, offsets: &[i64], hwms: &[i64]) -> Session {
        let records = offsets.iter().map(|o| (*o, b(&format!("v{o}")))).collect();
        Session { consumer: "c".into(), start, records, high_watermarks: hwms.to_vec() }
    }

    fn classes(v: &[String]) -> Vec<&str> {
        v.iter().map(|v| crate::scenarios::class(v)).collect()
    }

    #[test]
    fn sessions_that_read_the_log_in_order_pass() {
        let mut h = log(4);
        h.sessions.push(session(0, &[0, 1], &[2, 2]));
        h.sessions.push(session(1, &[1, 2, 3], &[3, 4]));
        assert!(check("p", &h).is_empty());
    }

    #[test]
    fn each_anomaly_is_named() {
        let mut h = log(4);
        h.sessions.push(session(0, &[0, 1, 0, 1, 3], &[4, 2]));
        let found = check("p", &h);
        assert_eq!(classes(&found), ["nonmonotonic-poll", "poll-skip", "nonmonotonic-hwm", "unseen"]);
        let mut h = log(2);
        let mut s = session(0, &[0, 1], &[2]);
        s.records[1].1 = b("other");
        h.sessions.push(s);
        assert_eq!(classes(&check("p", &h)), ["inconsistent-offsets"]);
    }
}
