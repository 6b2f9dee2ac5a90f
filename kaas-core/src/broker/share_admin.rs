//! The share group offsets APIs (KIP-932, KIP-1226): DescribeShareGroupOffsets,
//! AlterShareGroupOffsets and DeleteShareGroupOffsets, answered by the group's coordinator over
//! the share partitions, which live with their partitions. A share partition this broker owns
//! is asked of its actor; one a peer owns is described and reset by its owner, called as a
//! peer (a broker that does not coordinate the group answers for, or applies an Alter or
//! Delete to, the share partitions it owns itself). If the owner cannot be asked, a share
//! partition is described from its file on the volume: its start offset, lag unknown (-1).

use tokio::sync::oneshot;

use super::Broker;
use crate::cluster::claims::{Claims, Kind};
use crate::env::Env;
use crate::error::{CoreError, CoreResult};
use crate::partition::share::{ShareCommand, ShareOffsets, file};
use crate::topics::TopicId;

/// One partition's share offsets, or why there are none to tell.
pub type SharePartitionOffsets = (i32, CoreResult<Option<ShareOffsets>>);

/// A topic's answer: its name, id, and per partition.
pub type ShareTopicOffsets = (String, TopicId, Vec<SharePartitionOffsets>);

impl<E: Env> Broker<E> {
    /// Whether this broker coordinates `group_id` and it is a share group: its members (if
    /// any), or the error the request is answered with.
    async fn share_group_here(&self, group_id: &str) -> CoreResult<usize> {
        self.groups.share_describe(group_id.to_string()).await.map(|g| g.members.len())
    }

    /// DescribeShareGroupOffsets of one group: the named topics' partitions (`None`: every
    /// partition the group has a share partition of). `from_peer`: the group's coordinator on a
    /// peer asks of the share partitions this broker owns.
    pub async fn describe_share_offsets(
        &self,
        group_id: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
        from_peer: bool,
    ) -> CoreResult<Vec<ShareTopicOffsets>> {
        let coordinated_here = self.membership.view().peer_owning(&crate::cluster::group_key(group_id)).is_none();
        if coordinated_here || !from_peer {
            self.share_group_here(group_id).await?;
        }
        let snapshot = self.topics.snapshot();
        let view = self.membership.view();
        let wanted: Vec<(String, Option<Vec<i32>>)> = match topics {
            Some(topics) => topics.into_iter().map(|(t, ps)| (t, Some(ps))).collect(),
            None => snapshot.topics.keys().map(|t| (t.clone(), None)).collect(),
        };
        let mut answer = Vec::new();
        for (topic, partitions) in wanted {
            let Some(state) = snapshot.topics.get(&topic) else {
                let ps = partitions.unwrap_or_default();
                answer.push((
                    topic,
                    [0; 16],
                    ps.into_iter().map(|p| (p, Err(CoreError::UnknownTopicOrPartition))).collect(),
                ));
                continue;
            };
            let all = partitions.is_none();
            let ps = partitions.unwrap_or_else(|| (0..state.meta.partitions).collect());
            let mut described = Vec::new();
            for p in ps {
                let offsets = match state.partitions.get(usize::try_from(p).unwrap_or(usize::MAX)) {
                    None => Err(CoreError::UnknownTopicOrPartition),
                    Some(handle) if handle.watermarks().owned => {
                        let (reply, asked) = oneshot::channel();
                        handle.share(ShareCommand::Offsets { group_id: group_id.to_string(), reply }).await;
                        asked.await.unwrap_or(Err(CoreError::NotLeaderOrFollower))
                    }
                    Some(_) if !coordinated_here => Err(CoreError::NotLeaderOrFollower),
                    // Its owner knows its lag; if the owner cannot be asked, the file tells the
                    // start at least.
                    Some(_) => {
                        let owner = snapshot.owner(&topic, p, &view).and_then(|o| view.endpoint_of(o));
                        let asked = match owner {
                            Some(peer) => self.peers.describe_share_partition(peer, group_id, &topic, p).await,
                            None => Err(CoreError::NotLeaderOrFollower),
                        };
                        match asked {
                            Ok(offsets) => Ok(offsets),
                            Err(_) => self.share_offsets_from_file(group_id, &topic, p).await,
                        }
                    }
                };
                // Asked for every partition: only those the group consumes.
                if all && matches!(offsets, Ok(None)) {
                    continue;
                }
                described.push((p, offsets));
            }
            if !all || !described.is_empty() {
                answer.push((topic, state.meta.topic_id, described));
            }
        }
        Ok(answer)
    }

    /// A peer's share partition as its newest file has it: the start offset, lag unknown. The
    /// newest is looked for from the partition's current ownership epoch down, as its claims
    /// say: a listing of the share files may miss the newest (NFS), and an older file would
    /// show the group going back.
    async fn share_offsets_from_file(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> CoreResult<Option<ShareOffsets>> {
        let dir = crate::topics::partition_dir(topic, partition);
        let settings = self.share_group_config(group_id).window;
        let storage = |e: std::io::Error| CoreError::Storage(e.to_string());
        let mut claims = Claims::new(self.env.volume().clone());
        let key = crate::cluster::partition_key(topic, partition);
        let claimed = claims.current(Kind::Partition, &key).await.map_err(storage)?.map_or(0, |c| c.epoch);
        let found = match claimed {
            0 => file::read_listed(self.env.volume(), &dir, group_id, settings).await,
            epoch => file::read_newest(self.env.volume(), &dir, group_id, epoch, settings).await,
        };
        Ok(found.map_err(storage)?.map(|(_, w)| ShareOffsets { start_offset: w.start_offset(), lag: -1 }))
    }

    /// AlterShareGroupOffsets (`start` per partition) or DeleteShareGroupOffsets (`None`: the
    /// share partitions are forgotten). The group must be empty, as Apache requires. One result
    /// per partition, in order.
    pub async fn reset_share_offsets(
        &self,
        group_id: &str,
        partitions: Vec<(String, i32, Option<i64>)>,
    ) -> CoreResult<Vec<(String, i32, CoreResult<()>)>> {
        let coordinated_here = self.membership.view().peer_owning(&crate::cluster::group_key(group_id)).is_none();
        if coordinated_here && self.share_group_here(group_id).await? > 0 {
            return Err(CoreError::NonEmptyGroup);
        }
        let snapshot = self.topics.snapshot();
        let view = self.membership.view();
        let mut results = Vec::with_capacity(partitions.len());
        for (topic, p, start) in partitions {
            let result = match snapshot.partition(&topic, p) {
                None => Err(CoreError::UnknownTopicOrPartition),
                Some(handle) if handle.watermarks().owned => {
                    let (reply, done) = oneshot::channel();
                    let config = self.share_group_config(group_id);
                    let command =
                        ShareCommand::Reset { group_id: group_id.to_string(), start_offset: start, config, reply };
                    handle.share(command).await;
                    done.await.unwrap_or(Err(CoreError::NotLeaderOrFollower))
                }
                // A peer's: its owner resets it, asked as a peer; a peer asked owns it no more.
                Some(_) if !coordinated_here => Err(CoreError::NotLeaderOrFollower),
                Some(_) => match snapshot.owner(&topic, p, &view).and_then(|o| view.endpoint_of(o)) {
                    None => Err(CoreError::NotLeaderOrFollower),
                    Some(peer) => self.peers.reset_share_partition(peer, group_id, &topic, p, start).await,
                },
            };
            results.push((topic, p, result));
        }
        Ok(results)
    }
}
