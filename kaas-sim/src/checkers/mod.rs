//! Checkers in the spirit of Jepsen's Kafka checker. A scenario gathers, per partition, what
//! its clients did and saw ([`PartitionHistory`]), reads the partition back whole once the
//! liveness phase is over, and hands both to every checker; each returns its violations, each
//! named by its class first (`lost-write: ...`). Every checker has unit tests that feed it a
//! hand-made bad history (it must fire) and a good one (it must pass).
//!
//! Classes reported elsewhere: `two-writers` (the volume, only reachable with two or more
//! broker hosts), `liveness` and `hang` (the fault driver), `assertion` (a broker assertion),
//! `corrupt-read` (a client that could not decode what it was served), `wrong-error` (a
//! client answered a retriable code for a request that could never succeed).

pub mod commits;
pub mod compaction;
pub mod consumers;
pub mod copier;
pub mod groups;
pub mod idempotence;
pub mod log;
pub mod ownership;
pub mod share;
pub mod share_copy;
pub mod transactions;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

/// What producers did to one partition. Every value sent in a run is unique.
#[derive(Default, Debug)]
pub struct Produced {
    /// Every batch sent: id -> its values.
    pub sent: BTreeMap<u64, Vec<Bytes>>,
    /// Acked batches: id -> base offset.
    pub acked: BTreeMap<u64, i64>,
    /// Batches with an attempt of unknown outcome (a lost answer, a storage error, acks=0):
    /// they may be in the log.
    pub indefinite: BTreeSet<u64>,
    /// Batches sent again after an attempt of unknown outcome: only they may be in the log
    /// twice.
    pub retried_after_indefinite: BTreeSet<u64>,
}

impl Produced {
    /// Records that batch `id` is about to be sent (again, if it was sent before).
    pub fn sending(&mut self, id: u64, values: &[Bytes]) {
        if self.indefinite.contains(&id) {
            self.retried_after_indefinite.insert(id);
        }
        self.sent.entry(id).or_insert_with(|| values.to_vec());
    }
}

/// One consumer's uninterrupted read of one partition, from a position it chose.
#[derive(Debug)]
pub struct Session {
    pub consumer: String,
    pub start: i64,
    /// Every record served, in order: (offset, value).
    pub records: Vec<(i64, Bytes)>,
    /// Every high watermark served, in order.
    pub high_watermarks: Vec<i64>,
}

/// A committed offset a consumer read back before resuming from it.
#[derive(Debug)]
pub struct Resume {
    pub consumer: String,
    /// History sequence number of the OffsetFetch request: every commit acked before it counts.
    pub sent_seq: u64,
    pub committed: i64,
}

/// An OffsetCommit the broker acked.
#[derive(Debug)]
pub struct Commit {
    pub consumer: String,
    pub acked_seq: u64,
    pub offset: i64,
}

#[derive(Default, Debug)]
pub struct PartitionHistory {
    pub produced: Produced,
    pub sessions: Vec<Session>,
    pub resumes: Vec<Resume>,
    pub commits: Vec<Commit>,
    /// Values sent to earlier incarnations of the topic (deleted since): whether each may still
    /// turn up (its attempt was indefinite, so it may have landed late in a later one).
    pub earlier: BTreeMap<Bytes, bool>,
    /// The final read of the whole partition, and the high watermark it ended at.
    pub read: Vec<(i64, Bytes)>,
    pub high_watermark: i64,
}

/// Every checker over every partition.
pub fn check_all(partitions: &BTreeMap<i32, PartitionHistory>) -> Vec<String> {
    let mut violations = Vec::new();
    for (partition, history) in partitions {
        let name = format!("partition {partition}");
        violations.extend(log::check(&name, history));
        violations.extend(consumers::check(&name, history));
        violations.extend(commits::check(&name, history));
    }
    violations
}

#[cfg(test)]
pub(crate) fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}
