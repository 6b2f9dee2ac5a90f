//! Committed consumer-group offsets: one file per group, `__cluster/groups/<hex(group)>.json`,
//! replaced atomically on every commit before the commit is acked, versioned, checked on load.
//!
//! The same file holds the group's pending transactional offsets (TxnOffsetCommit), per
//! producer id: durable like commits, invisible to OffsetFetch until the producer's transaction
//! commits (then they become the committed offsets) or aborts (then they are dropped).

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::TopicPartition;
use crate::env::{Volume, join};
use crate::error::{CoreError, CoreResult};

pub const GROUPS_DIR: &str = "__cluster/groups";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

#[derive(Serialize, Deserialize)]
struct GroupOffsetsFile {
    format_version: u32,
    group_id: String,
    offsets: Vec<OffsetEntry>,
    #[serde(default)]
    pending: Vec<PendingEntry>,
}

#[derive(Serialize, Deserialize)]
struct PendingEntry {
    producer_id: i64,
    topic: String,
    partition: i32,
    #[serde(flatten)]
    committed: CommittedOffset,
}

/// One group's offsets: committed, and staged per producer id by open transactions.
#[derive(Debug, Clone, Default)]
struct GroupOffsets {
    committed: BTreeMap<TopicPartition, CommittedOffset>,
    pending: BTreeMap<i64, BTreeMap<TopicPartition, CommittedOffset>>,
}

#[derive(Serialize, Deserialize)]
struct OffsetEntry {
    topic: String,
    partition: i32,
    #[serde(flatten)]
    committed: CommittedOffset,
}

/// Group ids are arbitrary strings; file names are their hex, so any id is a safe name.
fn file_name(group_id: &str) -> String {
    let hex: String = group_id.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.json")
}

pub struct OffsetStore<V: Volume> {
    volume: V,
    groups: BTreeMap<String, GroupOffsets>,
}

fn storage(e: impl std::fmt::Display) -> CoreError {
    CoreError::Storage(e.to_string())
}

impl<V: Volume> OffsetStore<V> {
    pub async fn load(volume: V) -> CoreResult<Self> {
        volume.create_dir_all(GROUPS_DIR).await.map_err(storage)?;
        let mut groups = BTreeMap::new();
        for name in volume.list(GROUPS_DIR).await.map_err(storage)? {
            if !name.ends_with(".json") {
                continue;
            }
            let path = join(GROUPS_DIR, &name);
            let raw = volume.read(&path).await.map_err(storage)?.unwrap_or_default();
            let file: GroupOffsetsFile = serde_json::from_slice(&raw)
                .map_err(|e| CoreError::Storage(format!("{path}: unreadable offsets: {e}")))?;
            if file.format_version != FORMAT_VERSION || file_name(&file.group_id) != name {
                return Err(CoreError::Storage(format!("{path}: unknown format version or group mismatch")));
            }
            let mut offsets = GroupOffsets {
                committed: file.offsets.into_iter().map(|e| ((e.topic, e.partition), e.committed)).collect(),
                pending: BTreeMap::new(),
            };
            for e in file.pending {
                offsets.pending.entry(e.producer_id).or_default().insert((e.topic, e.partition), e.committed);
            }
            groups.insert(file.group_id, offsets);
        }
        Ok(OffsetStore { volume, groups })
    }

    pub fn group_ids(&self) -> Vec<String> {
        self.groups.keys().cloned().collect()
    }

    /// Makes the new offsets durable, then visible.
    pub async fn commit(
        &mut self,
        group_id: &str,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        now_ms: i64,
    ) -> CoreResult<()> {
        let mut next = self.groups.get(group_id).cloned().unwrap_or_default();
        for (tp, mut committed) in offsets {
            committed.commit_timestamp_ms = now_ms;
            next.committed.insert(tp, committed);
        }
        if !crate::mutant!(OffsetCommitInMemory) {
            self.persist(group_id, &next).await?;
        }
        self.groups.insert(group_id.to_string(), next);
        Ok(())
    }

    /// Stages a transaction's offsets for `producer_id`: durable, not yet visible.
    pub async fn stage(
        &mut self,
        group_id: &str,
        producer_id: i64,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        now_ms: i64,
    ) -> CoreResult<()> {
        let mut next = self.groups.get(group_id).cloned().unwrap_or_default();
        let staged = next.pending.entry(producer_id).or_default();
        for (tp, mut committed) in offsets {
            committed.commit_timestamp_ms = now_ms;
            staged.insert(tp, committed);
        }
        if !crate::mutant!(PendingOffsetsInMemory) {
            self.persist(group_id, &next).await?;
        }
        self.groups.insert(group_id.to_string(), next);
        Ok(())
    }

    /// Ends the staged offsets of `producer_id` in the group: committed offsets on a commit,
    /// dropped on an abort. Idempotent: a repeat finds nothing staged and changes nothing.
    pub async fn complete_txn(&mut self, group_id: &str, producer_id: i64, commit: bool) -> CoreResult<()> {
        let Some(current) = self.groups.get(group_id) else { return Ok(()) };
        if !current.pending.contains_key(&producer_id) {
            return Ok(());
        }
        let mut next = current.clone();
        let staged = next.pending.remove(&producer_id).expect("checked above");
        if commit {
            next.committed.extend(staged);
        }
        self.persist(group_id, &next).await?;
        self.groups.insert(group_id.to_string(), next);
        Ok(())
    }

    /// True if an open transaction has staged an offset for the partition (OffsetFetch with
    /// require_stable answers UNSTABLE_OFFSET_COMMIT then).
    pub fn has_pending(&self, group_id: &str, tp: &TopicPartition) -> bool {
        self.groups.get(group_id).is_some_and(|g| g.pending.values().any(|staged| staged.contains_key(tp)))
    }

    async fn persist(&self, group_id: &str, offsets: &GroupOffsets) -> CoreResult<()> {
        let entry = |(topic, partition): &TopicPartition, c: &CommittedOffset| OffsetEntry {
            topic: topic.clone(),
            partition: *partition,
            committed: c.clone(),
        };
        let file = GroupOffsetsFile {
            format_version: FORMAT_VERSION,
            group_id: group_id.to_string(),
            offsets: offsets.committed.iter().map(|(tp, c)| entry(tp, c)).collect(),
            pending: offsets
                .pending
                .iter()
                .flat_map(|(pid, staged)| {
                    staged.iter().map(move |((topic, partition), c)| PendingEntry {
                        producer_id: *pid,
                        topic: topic.clone(),
                        partition: *partition,
                        committed: c.clone(),
                    })
                })
                .collect(),
        };
        let raw = serde_json::to_vec(&file).expect("serialisable");
        self.volume.write_atomic(&join(GROUPS_DIR, &file_name(group_id)), Bytes::from(raw)).await.map_err(storage)
    }

    /// The committed offsets of `partitions`, or of every partition the group has committed.
    pub fn fetch(
        &self,
        group_id: &str,
        partitions: Option<Vec<TopicPartition>>,
    ) -> Vec<(TopicPartition, Option<CommittedOffset>)> {
        let committed = self.groups.get(group_id).map(|g| &g.committed);
        match partitions {
            Some(list) => list
                .into_iter()
                .map(|tp| {
                    let c = committed.and_then(|m| m.get(&tp)).cloned();
                    (tp, c)
                })
                .collect(),
            None => {
                committed.map(|m| m.iter().map(|(tp, c)| (tp.clone(), Some(c.clone()))).collect()).unwrap_or_default()
            }
        }
    }

    pub async fn delete_group(&mut self, group_id: &str) -> CoreResult<()> {
        self.volume.remove_file(&join(GROUPS_DIR, &file_name(group_id))).await.map_err(storage)?;
        self.groups.remove(group_id);
        Ok(())
    }
}
