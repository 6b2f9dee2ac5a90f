//! Transaction checkers (invariants 3, 4 and 5 of DESIGN.md). Every value a transactional
//! producer sends is unique and belongs to one transaction attempt; the workload records what
//! the producer was told about the attempt and when it asked for its end, every read_committed
//! read with the offsets and watermarks it was served, and a final read_committed read of each
//! partition after the liveness phase, when every transaction must have ended. Anomalies:
//! - `aborted-read` (G1a): a value of an attempt whose abort was acked, or that was fenced, in
//!   the final read_committed log;
//! - `lost-commit`: an attempt whose commit was acked missing from it (but for what retention
//!   removed below the log start offset);
//! - `torn-transaction`: some but not all of an attempt's values in it;
//! - `duplicate`, `phantom`: a value twice, or a value nobody sent;
//! - `uncommitted-read`: a read_committed consumer served a value that never committed, or
//!   served it before its producer had even asked to commit (the COMMIT marker could not exist
//!   yet);
//! - `lso-backwards`: the last stable offset moving back within one consumer's reads;
//! - `lso-past-open-transaction`: a read served a last stable offset above the first offset of
//!   a transaction that was surely open for the whole read: its first batch there was acked
//!   before the read was sent, and nothing could have ended it before the answer (no EndTxn
//!   sent, no InitProducerId of its id sent since it began, its timeout not yet near);
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

/// Where an attempt first wrote to a partition: its transaction is open there from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub partition: i32,
    pub offset: i64,
    /// History sequence number of the produce answer.
    pub acked_seq: u64,
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub name: String,
    pub transactional_id: String,
    /// Every value sent in the attempt, by partition, with its offset once acked.
    pub values: Vec<(i32, Bytes, Option<i64>)>,
    pub fate: Fate,
    /// History sequence number and simulated ms of the attempt's first AddPartitionsToTxn.
    pub started: Option<(u64, u64)>,
    pub opened: Vec<Opened>,
    /// History sequence number of the first EndTxn sent, and of the first EndTxn(commit).
    pub end_sent: Option<u64>,
    pub commit_sent: Option<u64>,
    pub transaction_timeout_ms: u64,
}

impl Attempt {
    pub fn new(name: &str, transactional_id: &str, transaction_timeout_ms: u64) -> Attempt {
        Attempt {
            name: name.into(),
            transactional_id: transactional_id.into(),
            values: Vec::new(),
            fate: Fate::Unknown,
            started: None,
            opened: Vec::new(),
            end_sent: None,
            commit_sent: None,
            transaction_timeout_ms,
        }
    }
}

/// One read_committed fetch answered: when it was sent and answered, the watermarks and the
/// records served.
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub sent_seq: u64,
    pub answered_seq: u64,
    pub answered_ms: u64,
    pub last_stable_offset: i64,
    pub high_watermark: i64,
    pub values: Vec<(i64, Bytes)>,
}

/// A read_committed consumer's reads of one partition over one connection, in order.
#[derive(Debug, Clone, Default)]
pub struct CommittedSession {
    pub consumer: String,
    pub partition: i32,
    pub reads: Vec<Read>,
}

/// The final read_committed read of one partition, and its watermarks.
#[derive(Debug, Clone, Default)]
pub struct FinalRead {
    pub values: Vec<(i64, Bytes)>,
    pub log_start_offset: i64,
    pub last_stable_offset: i64,
    pub high_watermark: i64,
}

/// Everything the checker looks at.
#[derive(Debug, Default)]
pub struct TxnHistory {
    pub attempts: Vec<Attempt>,
    pub sessions: Vec<CommittedSession>,
    pub finals: BTreeMap<i32, FinalRead>,
    /// (transactional id, state) as ListTransactions answered after the liveness phase.
    pub open_at_end: Vec<(String, String)>,
    /// (transactional id, history sequence number) of every InitProducerId sent: each may end
    /// the id's open transaction.
    pub inits_sent: Vec<(String, u64)>,
}

/// The reaper may abort a transaction this early, as a share of its timeout: the broker's
/// clocks may run a little fast.
const TIMEOUT_SHARE_SURE: f64 = 0.9;

pub fn check(h: &TxnHistory) -> Vec<String> {
    let mut violations = Vec::new();
    let mut owner: BTreeMap<&Bytes, usize> = BTreeMap::new();
    for (i, a) in h.attempts.iter().enumerate() {
        for (_, v, _) in &a.values {
            owner.insert(v, i);
        }
    }
    let mut seen: BTreeSet<&Bytes> = BTreeSet::new();
    let mut present = vec![0usize; h.attempts.len()];
    for (partition, read) in &h.finals {
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
    let removed = |partition: &i32, offset: &Option<i64>| {
        let start = h.finals.get(partition).map_or(0, |f| f.log_start_offset);
        offset.is_some_and(|o| o < start)
    };
    for (a, &n) in h.attempts.iter().zip(&present) {
        let total = a.values.len();
        let retained = a.values.iter().filter(|(p, _, o)| !removed(p, o)).count();
        match (a.fate, n) {
            (Fate::Aborted, n) if n > 0 => {
                violations.push(format!("aborted-read: {}: {n} of its {total} values committed after all", a.name))
            }
            (Fate::Committed, n) if n < retained => violations.push(format!(
                "lost-commit: {}: acked, but {n} of its {retained} values (of {total}) committed",
                a.name
            )),
            (_, n) if n > 0 && n < retained => {
                violations.push(format!("torn-transaction: {}: {n} of its {retained} values committed", a.name))
            }
            _ => {}
        }
    }
    for s in &h.sessions {
        violations.extend(check_session(h, s, &owner, &seen));
    }
    for (id, state) in &h.open_at_end {
        if state == "PrepareCommit" || state == "PrepareAbort" {
            violations.push(format!("prepare-never-completes: {id} still {state} after the liveness phase"));
        }
    }
    violations
}

fn check_session(
    h: &TxnHistory,
    s: &CommittedSession,
    owner: &BTreeMap<&Bytes, usize>,
    committed: &BTreeSet<&Bytes>,
) -> Vec<String> {
    let mut violations = Vec::new();
    for read in &s.reads {
        for (offset, v) in &read.values {
            let attempt = owner.get(v).map(|&i| &h.attempts[i]);
            let whose = attempt.map_or("nobody's", |a| a.name.as_str());
            // Below the final log start, retention removed what the final read would show: a
            // read there proves nothing missing, unless its attempt can never have committed.
            let removed = h.finals.get(&s.partition).is_some_and(|f| *offset < f.log_start_offset);
            let never = attempt.is_none_or(|a| a.fate == Fate::Aborted);
            if !committed.contains(v) && (!removed || never) {
                violations.push(format!(
                    "uncommitted-read: {} read {v:?} ({whose}) at offset {offset} of partition {}, which never committed",
                    s.consumer, s.partition
                ));
            } else if let Some(a) = attempt
                && a.commit_sent.is_none_or(|sent| read.answered_seq < sent)
            {
                violations.push(format!(
                    "uncommitted-read: {} read {v:?} ({whose}) at offset {offset} of partition {} before its producer asked to commit",
                    s.consumer, s.partition
                ));
            }
        }
    }
    for pair in s.reads.windows(2) {
        if pair[1].last_stable_offset < pair[0].last_stable_offset {
            violations.push(format!(
                "lso-backwards: {} saw partition {}'s last stable offset go from {} to {}",
                s.consumer, s.partition, pair[0].last_stable_offset, pair[1].last_stable_offset
            ));
        }
    }
    for read in &s.reads {
        for a in &h.attempts {
            let Some(opened) = a.opened.iter().find(|o| o.partition == s.partition) else { continue };
            if opened.acked_seq < read.sent_seq && read.last_stable_offset > opened.offset && surely_open(h, a, read) {
                violations.push(format!(
                    "lso-past-open-transaction: {} was served last stable offset {} of partition {} while {} was open there from offset {}",
                    s.consumer, read.last_stable_offset, s.partition, a.name, opened.offset
                ));
            }
        }
    }
    violations
}

/// Whether nothing could have ended attempt `a` before `read` was answered.
fn surely_open(h: &TxnHistory, a: &Attempt, read: &Read) -> bool {
    let Some((started_seq, started_ms)) = a.started else { return false };
    let ended = a.end_sent.is_some_and(|sent| sent < read.answered_seq);
    let fenced = h
        .inits_sent
        .iter()
        .any(|(id, seq)| *id == a.transactional_id && (started_seq..read.answered_seq).contains(seq));
    let reapable_ms = started_ms + (a.transaction_timeout_ms as f64 * TIMEOUT_SHARE_SURE) as u64;
    !ended && !fenced && read.answered_ms < reapable_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkers::b;

    fn attempt(name: &str, values: &[&str], fate: Fate) -> Attempt {
        let mut a = Attempt::new(name, "tx", 10_000);
        a.values = values.iter().enumerate().map(|(i, v)| (0, b(v), Some(i as i64))).collect();
        a.fate = fate;
        a.commit_sent = (fate == Fate::Committed).then_some(5);
        a
    }

    fn finals(values: &[&str]) -> BTreeMap<i32, FinalRead> {
        let values = values.iter().enumerate().map(|(i, v)| (i as i64, b(v))).collect();
        BTreeMap::from([(0, FinalRead { values, log_start_offset: 0, last_stable_offset: 9, high_watermark: 9 })])
    }

    fn classes(v: &[String]) -> Vec<&str> {
        v.iter().map(|v| crate::scenarios::class(v)).collect()
    }

    fn read(sent_seq: u64, answered_seq: u64, lso: i64, values: &[(i64, &str)]) -> Read {
        let values = values.iter().map(|(o, v)| (*o, b(v))).collect();
        Read { sent_seq, answered_seq, answered_ms: answered_seq, last_stable_offset: lso, high_watermark: 9, values }
    }

    fn session(reads: Vec<Read>) -> CommittedSession {
        CommittedSession { consumer: "c".into(), partition: 0, reads }
    }

    #[test]
    fn a_history_of_whole_transactions_read_after_their_commit_passes() {
        let attempts = vec![attempt("t1", &["a", "b"], Fate::Committed), attempt("t2", &["c"], Fate::Aborted)];
        let sessions = vec![session(vec![read(6, 7, 2, &[(0, "a"), (1, "b")])])];
        let h = TxnHistory { attempts, sessions, finals: finals(&["a", "b"]), ..TxnHistory::default() };
        assert!(check(&h).is_empty(), "{:?}", check(&h));
    }

    #[test]
    fn each_final_read_anomaly_is_named() {
        let attempts = vec![
            attempt("t1", &["a", "b"], Fate::Committed),
            attempt("t2", &["c"], Fate::Aborted),
            attempt("t3", &["d", "e"], Fate::Unknown),
        ];
        let h = TxnHistory { attempts, finals: finals(&["a", "c", "d", "d", "x"]), ..TxnHistory::default() };
        let found = check(&h);
        for name in ["lost-commit: t1", "aborted-read: t2", "torn-transaction: t3", "duplicate", "phantom"] {
            assert!(found.iter().any(|v| v.starts_with(name)), "{name} in {found:?}");
        }
        let mut stuck = finals(&[]);
        stuck.get_mut(&0).unwrap().last_stable_offset = 3;
        let open_at_end = vec![("t".into(), "PrepareAbort".into())];
        let found = check(&TxnHistory { finals: stuck, open_at_end, ..TxnHistory::default() });
        assert_eq!(classes(&found), ["lso-stuck", "prepare-never-completes"]);
    }

    #[test]
    fn values_retention_removed_are_not_lost() {
        let attempts = vec![attempt("t1", &["a", "b", "c"], Fate::Committed)];
        let mut f = finals(&["c"]);
        f.get_mut(&0).unwrap().values[0].0 = 2;
        f.get_mut(&0).unwrap().log_start_offset = 2;
        assert!(
            check(&TxnHistory { attempts: attempts.clone(), finals: f.clone(), ..TxnHistory::default() }).is_empty()
        );
        f.get_mut(&0).unwrap().log_start_offset = 1;
        assert_eq!(classes(&check(&TxnHistory { attempts, finals: f, ..TxnHistory::default() })), ["lost-commit"]);
    }

    #[test]
    fn a_read_before_the_commit_was_asked_for_is_uncommitted() {
        let attempts = vec![attempt("t1", &["a"], Fate::Committed), attempt("t2", &["z"], Fate::Aborted)];
        let early = session(vec![read(1, 3, 1, &[(0, "a")])]);
        let aborted = session(vec![read(6, 7, 2, &[(1, "z")])]);
        let h =
            TxnHistory { attempts, sessions: vec![early, aborted], finals: finals(&["a"]), ..TxnHistory::default() };
        let found = check(&h);
        assert_eq!(classes(&found), ["uncommitted-read", "uncommitted-read"], "{found:?}");
        assert!(found[0].contains("before its producer asked to commit"));
        assert!(found[1].contains("never committed"));
    }

    #[test]
    fn a_read_below_the_final_log_start_is_not_taken_for_uncommitted() {
        let attempts = vec![attempt("t1", &["a"], Fate::Committed), attempt("t2", &["z"], Fate::Aborted)];
        let mut f = finals(&[]);
        f.get_mut(&0).unwrap().log_start_offset = 5;
        let reads = session(vec![read(6, 7, 2, &[(0, "a"), (1, "z")])]);
        let h = TxnHistory { attempts, sessions: vec![reads], finals: f, ..TxnHistory::default() };
        let found = check(&h);
        assert_eq!(classes(&found), ["uncommitted-read"], "{found:?}");
        assert!(found[0].contains("t2"), "an aborted attempt's value is never excused: {found:?}");
    }

    #[test]
    fn the_last_stable_offset_must_not_pass_a_transaction_surely_open() {
        let mut open = attempt("t1", &["a"], Fate::Committed);
        open.started = Some((1, 1));
        open.opened = vec![Opened { partition: 0, offset: 4, acked_seq: 2 }];
        open.end_sent = Some(20);
        open.commit_sent = Some(20);
        let lso = |lso, sent, answered| session(vec![read(sent, answered, lso, &[])]);
        let history = |sessions, inits_sent| TxnHistory {
            attempts: vec![open.clone()],
            sessions,
            finals: finals(&["a"]),
            inits_sent,
            ..TxnHistory::default()
        };
        assert!(check(&history(vec![lso(4, 3, 5)], vec![])).is_empty(), "at its first offset");
        assert!(check(&history(vec![lso(5, 1, 5)], vec![])).is_empty(), "sent before the batch was acked");
        assert!(check(&history(vec![lso(5, 21, 22)], vec![])).is_empty(), "its end was asked for");
        assert!(check(&history(vec![lso(5, 3, 5)], vec![("tx".into(), 4)])).is_empty(), "fenced meanwhile");
        let found = check(&history(vec![lso(5, 3, 5)], vec![("tx".into(), 0)]));
        assert_eq!(classes(&found), ["lso-past-open-transaction"], "an earlier InitProducerId does not end it");
        let backwards = session(vec![read(3, 4, 4, &[]), read(5, 6, 3, &[])]);
        assert_eq!(classes(&check(&history(vec![backwards], vec![]))), ["lso-backwards"]);
    }
}
