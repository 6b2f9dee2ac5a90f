//! Transaction checkers (invariants 3, 4 and 5 of DESIGN.md). Every value a transactional
//! producer sends is unique and belongs to one transaction attempt; the scenario records what
//! the producer was told about the attempt, every read_committed read, and a final
//! read_committed read of each partition after the liveness phase, when every transaction must
//! have ended. Anomalies:
//! - `aborted-read` (G1a): a value of an attempt whose abort was acked, or that was fenced, in
//!   the final read_committed log;
//! - `lost-commit`: an attempt whose commit was acked missing from it;
//! - `torn-transaction`: some but not all of an attempt's values in it;
//! - `duplicate`, `phantom`: a value twice, or a value nobody sent;
//! - `uncommitted-read`: a read_committed consumer served a value that never committed;
//! - `lso-backwards`, `lso-past-hwm`: the last stable offset moving back within one consumer's
//!   reads, or served above the high watermark;
//! - `lso-stuck`: after the liveness phase a partition's LSO is still below its HWM, i.e. some
//!   transaction never ended there;
//! - `prepare-never-completes`: after the liveness phase the coordinator still lists a
//!   transaction in PrepareCommit or PrepareAbort.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

/// What the producer was told about one transaction attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// EndTxn(commit) was acked.
    Committed,
    /// EndTxn(abort) was acked, or the attempt was fenced (its epoch bumped), or the producer
    /// gave it up after a fenced request: it must never become visible.
    Aborted,
    /// No answer settled it (a lost connection, a producer crash): either way, but whole.
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub name: String,
    /// Every value sent in the attempt, by partition.
    pub values: Vec<(i32, Bytes)>,
    pub fate: Fate,
}

/// A read_committed consumer's reads of one partition: values served, and the (LSO, HWM) of
/// every fetch answered, in order.
#[derive(Debug, Clone, Default)]
pub struct CommittedSession {
    pub consumer: String,
    pub partition: i32,
    pub values: Vec<Bytes>,
    pub marks: Vec<(i64, i64)>,
}

/// The final read_committed read of one partition, and its watermarks.
#[derive(Debug, Clone, Default)]
pub struct FinalRead {
    pub values: Vec<(i64, Bytes)>,
    pub last_stable_offset: i64,
    pub high_watermark: i64,
}

pub fn check(
    attempts: &[Attempt],
    sessions: &[CommittedSession],
    finals: &BTreeMap<i32, FinalRead>,
    open_at_end: &[(String, String)],
) -> Vec<String> {
    let mut violations = Vec::new();
    let mut owner: BTreeMap<&Bytes, usize> = BTreeMap::new();
    for (i, a) in attempts.iter().enumerate() {
        for (_, v) in &a.values {
            owner.insert(v, i);
        }
    }
    let mut seen: BTreeSet<&Bytes> = BTreeSet::new();
    let mut present = vec![0usize; attempts.len()];
    for (partition, read) in finals {
        if read.last_stable_offset < read.high_watermark {
            violations.push(format!(
                "lso-stuck: partition {partition}: last stable offset {} below the high watermark {} after the \
                 liveness phase",
                read.last_stable_offset, read.high_watermark
            ));
        }
        for (offset, v) in &read.values {
            if !seen.insert(v) {
                violations.push(format!("duplicate: partition {partition}: {v:?} again at offset {offset}"));
                continue;
            }
            match owner.get(v) {
                Some(&i) => present[i] += 1,
                None => violations.push(format!("phantom: partition {partition}: {v:?} at offset {offset}")),
            }
        }
    }
    for (a, &n) in attempts.iter().zip(&present) {
        let total = a.values.len();
        match (a.fate, n) {
            (Fate::Aborted, n) if n > 0 => {
                violations.push(format!("aborted-read: {}: {n} of its {total} values committed after all", a.name))
            }
            (Fate::Committed, n) if n < total => {
                violations.push(format!("lost-commit: {}: acked, but {n} of its {total} values committed", a.name))
            }
            (_, n) if n > 0 && n < total => {
                violations.push(format!("torn-transaction: {}: {n} of its {total} values committed", a.name))
            }
            _ => {}
        }
    }
    for s in sessions {
        for v in &s.values {
            if !seen.contains(v) {
                let whose = owner.get(v).map_or("nobody's", |&i| attempts[i].name.as_str());
                violations.push(format!(
                    "uncommitted-read: {} read {v:?} ({whose}) in partition {}, which never committed",
                    s.consumer, s.partition
                ));
            }
        }
        for pair in s.marks.windows(2) {
            if pair[1].0 < pair[0].0 {
                violations.push(format!(
                    "lso-backwards: {} saw partition {}'s last stable offset go from {} to {}",
                    s.consumer, s.partition, pair[0].0, pair[1].0
                ));
            }
        }
        if let Some((lso, hwm)) = s.marks.iter().find(|(lso, hwm)| lso > hwm) {
            violations.push(format!(
                "lso-past-hwm: {} was served last stable offset {lso} above high watermark {hwm} in partition {}",
                s.consumer, s.partition
            ));
        }
    }
    for (id, state) in open_at_end {
        if state == "PrepareCommit" || state == "PrepareAbort" {
            violations.push(format!("prepare-never-completes: {id} still {state} after the liveness phase"));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    fn attempt(name: &str, values: &[&str], fate: Fate) -> Attempt {
        Attempt { name: name.into(), values: values.iter().map(|v| (0, b(v))).collect(), fate }
    }

    fn read(values: &[&str]) -> BTreeMap<i32, FinalRead> {
        let values = values.iter().enumerate().map(|(i, v)| (i as i64, b(v))).collect();
        BTreeMap::from([(0, FinalRead { values, last_stable_offset: 9, high_watermark: 9 })])
    }

    #[test]
    fn each_anomaly_is_named() {
        let attempts = [
            attempt("t1", &["a", "b"], Fate::Committed),
            attempt("t2", &["c"], Fate::Aborted),
            attempt("t3", &["d", "e"], Fate::Unknown),
        ];
        assert!(check(&attempts, &[], &read(&["a", "b", "d", "e"]), &[]).is_empty());
        let found = check(&attempts, &[], &read(&["a", "c", "d", "d", "x"]), &[]);
        for name in ["lost-commit: t1", "aborted-read: t2", "torn-transaction: t3", "duplicate", "phantom"] {
            assert!(found.iter().any(|v| v.starts_with(name)), "{name} in {found:?}");
        }
        let session = CommittedSession {
            consumer: "c".into(),
            partition: 0,
            values: vec![b("c")],
            marks: vec![(5, 6), (4, 6), (7, 6)],
        };
        let found = check(&attempts, &[session], &read(&["a", "b"]), &[("t".into(), "PrepareAbort".into())]);
        for name in ["uncommitted-read", "lso-backwards", "lso-past-hwm", "prepare-never-completes"] {
            assert!(found.iter().any(|v| v.starts_with(name)), "{name} in {found:?}");
        }
        let mut stuck = read(&[]);
        stuck.get_mut(&0).unwrap().last_stable_offset = 3;
        assert!(check(&[], &[], &stuck, &[])[0].starts_with("lso-stuck"));
    }
}
