//! Committed consumer-group offsets: one file per group, `__cluster/groups/<hex(group)>.json`,
//! replaced atomically on every commit before the commit is acked, versioned, checked on load.

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
    groups: BTreeMap<String, BTreeMap<TopicPartition, CommittedOffset>>,
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
            let offsets = file.offsets.into_iter().map(|e| ((e.topic, e.partition), e.committed)).collect();
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
            next.insert(tp, committed);
        }
        if !crate::mutant!(OffsetCommitInMemory) {
            self.persist(group_id, &next).await?;
        }
        self.groups.insert(group_id.to_string(), next);
        Ok(())
    }

    async fn persist(&self, group_id: &str, offsets: &BTreeMap<TopicPartition, CommittedOffset>) -> CoreResult<()> {
        let file = GroupOffsetsFile {
            format_version: FORMAT_VERSION,
            group_id: group_id.to_string(),
            offsets: offsets
                .iter()
                .map(|((topic, partition), c)| OffsetEntry {
                    topic: topic.clone(),
                    partition: *partition,
                    committed: c.clone(),
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
        let committed = self.groups.get(group_id);
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
