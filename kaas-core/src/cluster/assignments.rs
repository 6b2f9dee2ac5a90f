//! The replica lists that reassignments set, on the volume:
//! `__cluster/assignments/<topic>/<revision:010>.json`, each revision the whole map of one
//! topic's assignments with its topic id, made by exclusive create.
//!
//! Revisions, not one file replaced in place, because a broker may write late: one paused or
//! cut off from the volume mid-request wakes up with its write still in flight, after the
//! client gave up on it and had a peer make a newer change. A late replace would put the older
//! list back; a late create of revision n either is revision n (and the peer's change, which
//! failed to create n, is made again as n+1 on top of it) or finds n taken and changes nothing.
//! Readers take the newest revision. Files are opened by known name, probed forward from the
//! last revision seen, as listings may be stale (NFS); the first look at a topic starts from a
//! listing. Revisions are kept: reassignments are rare, and each file is small.

use std::collections::BTreeMap;
use std::io;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::TopicId;
use super::claims::{corrupt, numbered_name, parse_numbered_name};
use super::reassignment::Assignment;
use crate::env::{Volume, join};

pub const ASSIGNMENTS_DIR: &str = "__cluster/assignments";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RevisionFile {
    format_version: u32,
    revision: u64,
    /// The topic these are for: a topic deleted and created again under its name starts with
    /// none.
    topic_id: TopicId,
    assignments: BTreeMap<i32, Assignment>,
}

/// One broker's reader and writer of the assignments; remembers the newest revision seen per
/// topic, where probing starts.
pub struct AssignmentStore<V: Volume> {
    volume: V,
    known: BTreeMap<String, u64>,
}

impl<V: Volume> AssignmentStore<V> {
    pub fn new(volume: V) -> Self {
        AssignmentStore { volume, known: BTreeMap::new() }
    }

    fn dir(topic: &str) -> String {
        join(ASSIGNMENTS_DIR, topic)
    }

    async fn read_revision(&self, path: &str) -> io::Result<Option<RevisionFile>> {
        let Some(raw) = self.volume.read(path).await? else { return Ok(None) };
        let file: RevisionFile = serde_json::from_slice(&raw).map_err(|e| corrupt(path, e))?;
        if file.format_version != FORMAT_VERSION {
            return Err(corrupt(path, format!("unknown format version {}", file.format_version)));
        }
        Ok(Some(file))
    }

    /// The newest revision of `topic`'s assignments (0: none yet), and the assignments of the
    /// newest revision written for the topic `topic_id` (none, if every one was written for an
    /// earlier topic of that name).
    pub async fn read(&mut self, topic: &str, topic_id: TopicId) -> io::Result<(u64, BTreeMap<i32, Assignment>)> {
        let dir = Self::dir(topic);
        let mut revision = match self.known.get(topic) {
            Some(&known) => known,
            None => self.volume.list(&dir).await?.iter().filter_map(|n| parse_numbered_name(n)).max().unwrap_or(0),
        };
        // The newest revision written for this topic: a late write for an earlier topic of the
        // name (its broker cut off through the deletion) may come after it, and is passed over.
        let mut newest = None;
        if revision > 0 {
            match self.read_revision(&join(&dir, &numbered_name(revision))).await? {
                Some(file) => newest = Some(file).filter(|f| f.topic_id == topic_id),
                // Removed with its topic: start over.
                None => revision = 0,
            }
        }
        while let Some(file) = self.read_revision(&join(&dir, &numbered_name(revision + 1))).await? {
            if file.revision != revision + 1 {
                return Err(corrupt(&dir, format!("revision {} in the file of {}", file.revision, revision + 1)));
            }
            revision += 1;
            if file.topic_id == topic_id {
                newest = Some(file);
            }
        }
        self.known.insert(topic.to_string(), revision);
        Ok((revision, newest.map(|f| f.assignments).unwrap_or_default()))
    }

    /// Makes `revision` (the one after the newest `read` found) hold `assignments`. `Ok(false)`:
    /// another writer made that revision first; read again and redo the change on top of it.
    pub async fn write(
        &mut self,
        topic: &str,
        topic_id: TopicId,
        revision: u64,
        assignments: BTreeMap<i32, Assignment>,
    ) -> io::Result<bool> {
        let dir = Self::dir(topic);
        self.volume.create_dir_all(&dir).await?;
        let file = RevisionFile { format_version: FORMAT_VERSION, revision, topic_id, assignments };
        let path = join(&dir, &numbered_name(revision));
        let raw = Bytes::from(serde_json::to_vec_pretty(&file).expect("serialisable"));
        match self.volume.create_exclusive(&path, raw).await {
            Ok(()) => {}
            // A lost reply to our own create looks like this too: read it to tell.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if self.read_revision(&path).await? != Some(file) {
                    return Ok(false);
                }
                self.volume.sync_dir(&dir).await?;
            }
            Err(e) => return Err(e),
        }
        self.known.insert(topic.to_string(), revision);
        Ok(true)
    }

    /// Makes the revisions read durable: one whose create failed after its entry was made
    /// (the directory sync) is read like any other, but a crash may still take it back. A
    /// request that finds its change already made (its own earlier try) syncs before it says
    /// so.
    pub async fn sync(&self, topic: &str) -> io::Result<()> {
        if self.known.get(topic).is_none_or(|&r| r == 0) {
            return Ok(());
        }
        self.volume.sync_dir(&Self::dir(topic)).await
    }

    /// Forgets a deleted topic's assignments and removes their files, as far as the volume
    /// lets it: what is left is ignored by the next topic of that name (another topic id).
    pub async fn remove(&mut self, topic: &str) {
        self.known.remove(topic);
        let dir = Self::dir(topic);
        let Ok(names) = self.volume.list(&dir).await else { return };
        for name in names {
            let _ = self.volume.remove_file(&join(&dir, &name)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Rng;
    use crate::env::real::{RealRng, RealVolume};

    fn volume() -> RealVolume {
        RealVolume::new(std::env::temp_dir().join(format!("kaas-assignments-{:x}", RealRng::default().next_u64())))
    }

    fn one(p: i32, replicas: Vec<i32>) -> BTreeMap<i32, Assignment> {
        BTreeMap::from([(p, Assignment { replicas, previous: Vec::new() })])
    }

    #[tokio::test]
    async fn a_late_writer_of_a_taken_revision_changes_nothing() {
        let v = volume();
        let (mut a, mut b) = (AssignmentStore::new(v.clone()), AssignmentStore::new(v.clone()));
        let id = [1; 16];
        assert_eq!(a.read("t", id).await.unwrap(), (0, BTreeMap::new()));
        // `a` read revision 0 and stalls; `b` makes revisions 1 and 2.
        assert_eq!(b.read("t", id).await.unwrap().0, 0);
        assert!(b.write("t", id, 1, one(0, vec![2])).await.unwrap());
        assert!(b.write("t", id, 2, one(0, vec![3])).await.unwrap());
        // `a`'s write lands late: revision 1 is taken, and the newest stays b's.
        assert!(!a.write("t", id, 1, one(0, vec![1])).await.unwrap());
        assert_eq!(a.read("t", id).await.unwrap(), (2, one(0, vec![3])));
        // Another topic of that name has none.
        assert_eq!(a.read("t", [2; 16]).await.unwrap(), (2, BTreeMap::new()));
        a.remove("t").await;
        assert_eq!(AssignmentStore::new(v).read("t", id).await.unwrap(), (0, BTreeMap::new()));
    }
}
