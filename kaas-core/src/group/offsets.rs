//! Committed consumer-group offsets: one file per group and ownership epoch,
//! `__cluster/groups/<hex(group)>-<epoch>.json` (`<hex(group)>.json` for epoch 0, a broker that
//! never ran in a cluster), replaced atomically on every commit before the commit is acked,
//! versioned, checked on load. A new owner loads the newest file of an epoch up to its own and
//! writes it under its own epoch at once: a paused old owner's late write lands in a file of its
//! old epoch, which nobody reads any more, and the older files are removed.
//!
//! The same file holds the group's pending transactional offsets (TxnOffsetCommit), per
//! producer id: durable like commits, invisible to OffsetFetch until the producer's transaction
//! commits (then they become the committed offsets) or aborts (then they are dropped).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::TopicPartition;
use super::consumer::ConsumerGroupMetadata;
use super::state::GroupMetadata;
use crate::env::{Volume, join};
use crate::error::{CoreError, CoreResult};
use crate::hex;

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
    /// Generation, members and assignment as of the last rebalance (absent: never formed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    membership: Option<GroupMetadata>,
    /// A share group's epoch (absent: not a share group). The group id is a share group's from
    /// its first member on, across restarts, and its epoch never goes back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share_epoch: Option<i32>,
    /// A consumer group's (KIP-848) epochs, members and assignments, as of its last change
    /// (absent: no consumer group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    consumer: Option<ConsumerGroupMetadata>,
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
    membership: Option<GroupMetadata>,
    share_epoch: Option<i32>,
    consumer: Option<ConsumerGroupMetadata>,
}

#[derive(Serialize, Deserialize)]
struct OffsetEntry {
    topic: String,
    partition: i32,
    #[serde(flatten)]
    committed: CommittedOffset,
}

/// Group ids are arbitrary strings; file names are their hex, so any id is a safe name.
fn file_name(group_id: &str, epoch: u32) -> String {
    let hex = hex::encode(group_id.as_bytes());
    if epoch == 0 { format!("{hex}.json") } else { format!("{hex}-{epoch}.json") }
}

/// The group id of an offsets file name, whatever its epoch.
pub fn parse_file_name(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".json")?;
    let hex = stem.split_once('-').map_or(stem, |(hex, _)| hex);
    String::from_utf8(hex::decode(hex)?).ok()
}

/// The offsets of the groups this broker owns, each under its ownership epoch.
pub struct OffsetStore<V: Volume> {
    volume: V,
    groups: BTreeMap<String, GroupOffsets>,
    epochs: BTreeMap<String, u32>,
    /// Groups whose last write failed: their file may hold that write or the one before it
    /// (a failed directory fsync after the rename), so the next change is written even when
    /// memory says there is nothing to change.
    uncertain: BTreeSet<String>,
}

fn storage(e: impl std::fmt::Display) -> CoreError {
    CoreError::Storage(e.to_string())
}

impl<V: Volume> OffsetStore<V> {
    pub async fn new(volume: V) -> CoreResult<Self> {
        volume.create_dir_all(GROUPS_DIR).await.map_err(storage)?;
        Ok(OffsetStore { volume, groups: BTreeMap::new(), epochs: BTreeMap::new(), uncertain: BTreeSet::new() })
    }

    /// The ids of every group with an offsets file, from a listing (which may be stale on NFS:
    /// it only finds groups sooner than their members' requests would).
    pub async fn listed(&self) -> CoreResult<Vec<String>> {
        let mut ids: Vec<String> =
            self.volume.list(GROUPS_DIR).await.map_err(storage)?.iter().filter_map(|n| parse_file_name(n)).collect();
        ids.dedup();
        Ok(ids)
    }

    async fn read_file(&self, group_id: &str, epoch: u32) -> CoreResult<Option<GroupOffsets>> {
        let path = join(GROUPS_DIR, &file_name(group_id, epoch));
        let Some(raw) = self.volume.read(&path).await.map_err(storage)? else { return Ok(None) };
        let file: GroupOffsetsFile =
            serde_json::from_slice(&raw).map_err(|e| CoreError::Storage(format!("{path}: unreadable offsets: {e}")))?;
        if file.format_version != FORMAT_VERSION || file.group_id != group_id {
            return Err(CoreError::Storage(format!("{path}: unknown format version or group mismatch")));
        }
        let mut offsets = GroupOffsets {
            committed: file.offsets.into_iter().map(|e| ((e.topic, e.partition), e.committed)).collect(),
            pending: BTreeMap::new(),
            membership: file.membership,
            share_epoch: file.share_epoch,
            consumer: file.consumer,
        };
        for e in file.pending {
            offsets.pending.entry(e.producer_id).or_default().insert((e.topic, e.partition), e.committed);
        }
        Ok(Some(offsets))
    }

    /// Takes the group over under `epoch`: loads the newest file of an epoch up to `epoch`,
    /// writes it under `epoch` (so a late write of an older owner is never read), and removes
    /// the older files. An unreadable file is an error, never guessed at.
    pub async fn acquire(&mut self, group_id: &str, epoch: u32) -> CoreResult<()> {
        let mut found = None;
        for e in (0..=epoch).rev() {
            if let Some(offsets) = self.read_file(group_id, e).await? {
                found = Some((e, offsets));
                break;
            }
        }
        let (from, offsets) = found.unwrap_or((0, GroupOffsets::default()));
        self.epochs.insert(group_id.to_string(), epoch);
        if from != epoch
            && (!offsets.committed.is_empty()
                || !offsets.pending.is_empty()
                || offsets.membership.is_some()
                || offsets.share_epoch.is_some()
                || offsets.consumer.is_some())
        {
            self.persist(group_id, &offsets).await?;
        }
        for e in (0..epoch).rev() {
            self.volume.remove_file(&join(GROUPS_DIR, &file_name(group_id, e))).await.map_err(storage)?;
        }
        self.groups.insert(group_id.to_string(), offsets);
        Ok(())
    }

    /// Forgets a group this broker no longer owns.
    pub fn release(&mut self, group_id: &str) {
        self.groups.remove(group_id);
        self.epochs.remove(group_id);
        self.uncertain.remove(group_id);
    }

    /// The group's membership as last written.
    pub fn membership(&self, group_id: &str) -> Option<&GroupMetadata> {
        self.groups.get(group_id)?.membership.as_ref()
    }

    /// Makes the group's membership durable (a no-op if it is already what the file holds).
    pub async fn set_membership(&mut self, group_id: &str, membership: Option<GroupMetadata>) -> CoreResult<()> {
        self.set(group_id, membership, |g| &mut g.membership).await
    }

    /// Makes one part of the group's file `value`, unless it already is and the file is known to
    /// hold it.
    async fn set<T: PartialEq>(
        &mut self,
        group_id: &str,
        value: T,
        part: fn(&mut GroupOffsets) -> &mut T,
    ) -> CoreResult<()> {
        let same = match self.groups.get_mut(group_id) {
            Some(g) => *part(g) == value,
            None => *part(&mut GroupOffsets::default()) == value,
        };
        if same && !self.uncertain.contains(group_id) {
            return Ok(());
        }
        let mut next = self.groups.get(group_id).cloned().unwrap_or_default();
        *part(&mut next) = value;
        self.persist(group_id, &next).await?;
        self.groups.insert(group_id.to_string(), next);
        Ok(())
    }

    /// A share group's epoch as last written (None: not a share group).
    pub fn share_epoch(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id)?.share_epoch
    }

    /// Makes a share group's epoch durable (None: the group is no share group any more).
    pub async fn set_share_epoch(&mut self, group_id: &str, share_epoch: Option<i32>) -> CoreResult<()> {
        self.set(group_id, share_epoch, |g| &mut g.share_epoch).await
    }

    /// A consumer group as last written (None: no consumer group).
    pub fn consumer_group(&self, group_id: &str) -> Option<&ConsumerGroupMetadata> {
        self.groups.get(group_id)?.consumer.as_ref()
    }

    /// Makes a consumer group's state durable (None: no consumer group any more).
    pub async fn set_consumer_group(
        &mut self,
        group_id: &str,
        consumer: Option<ConsumerGroupMetadata>,
    ) -> CoreResult<()> {
        self.set(group_id, consumer, |g| &mut g.consumer).await
    }

    /// Whether the group has offsets (committed or staged).
    pub fn has_offsets(&self, group_id: &str) -> bool {
        self.groups.get(group_id).is_some_and(|g| !g.committed.is_empty() || !g.pending.is_empty())
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
        // After a failed write the file may stage what memory does not (a TxnOffsetCommit
        // answered KAFKA_STORAGE_ERROR): it is written again, without them.
        let staged_here = self.groups.get(group_id).is_some_and(|g| g.pending.contains_key(&producer_id));
        if !staged_here && !self.uncertain.contains(group_id) {
            return Ok(());
        }
        // Cloned only when something is written: a group's committed offsets may be many.
        let mut next = self.groups.get(group_id).cloned().unwrap_or_default();
        let staged = next.pending.remove(&producer_id);
        if commit {
            next.committed.extend(staged.unwrap_or_default());
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

    /// Replaces the group's file; a failure leaves the group `uncertain` until a write succeeds.
    async fn persist(&mut self, group_id: &str, offsets: &GroupOffsets) -> CoreResult<()> {
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
            membership: offsets.membership.clone(),
            share_epoch: offsets.share_epoch,
            consumer: offsets.consumer.clone(),
        };
        let raw = serde_json::to_vec(&file).expect("serialisable");
        let epoch = self.epochs.get(group_id).copied().unwrap_or(0);
        let path = join(GROUPS_DIR, &file_name(group_id, epoch));
        let written = self.volume.write_atomic(&path, Bytes::from(raw)).await.map_err(storage);
        match written {
            Ok(()) => self.uncertain.remove(group_id),
            Err(_) => self.uncertain.insert(group_id.to_string()),
        };
        written
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

    /// Removes the committed offsets of `partitions` (OffsetDelete), durably before it returns.
    pub async fn delete_offsets(&mut self, group_id: &str, partitions: &[TopicPartition]) -> CoreResult<()> {
        let mut next = self.groups.get(group_id).cloned().unwrap_or_default();
        let before = next.committed.len();
        for tp in partitions {
            next.committed.remove(tp);
        }
        if next.committed.len() != before {
            self.persist(group_id, &next).await?;
        }
        self.groups.insert(group_id.to_string(), next);
        Ok(())
    }

    pub async fn delete_group(&mut self, group_id: &str) -> CoreResult<()> {
        let epoch = self.epochs.get(group_id).copied().unwrap_or(0);
        self.volume.remove_file(&join(GROUPS_DIR, &file_name(group_id, epoch))).await.map_err(storage)?;
        self.groups.insert(group_id.to_string(), GroupOffsets::default());
        Ok(())
    }
}
