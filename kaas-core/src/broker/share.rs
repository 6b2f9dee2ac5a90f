//! A share consumer's requests (KIP-932: ShareFetch, ShareAcknowledge) and KIP-1289's
//! TxnShareAcknowledge, orchestrated in core, so that a handler decodes, makes one call and
//! encodes.
//!
//! Share sessions are Apache's: per (group, member) on this broker, tied to the connection that
//! opened them. Epoch 0 opens one (and may carry no acknowledgements), each request after it
//! carries the next epoch (SHARE_SESSION_NOT_FOUND without a session, INVALID_SHARE_SESSION_EPOCH
//! out of turn), and -1 closes it. A closed session, or the close of its connection, lets go of
//! what its member acquired here. The session step runs when the request is read, in the
//! connection's order; the fetch itself may wait for records (`max_wait_ms`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio::time::Duration;

use super::Broker;
use crate::config::group;
use crate::env::{Clock, Env};
use crate::error::{CoreError, CoreResult};
use crate::participant::{Join, Participant, TxnWriter};
use crate::partition::PartitionHandle;
use crate::partition::share::state::{AckBatch, AcquireMode};
use crate::partition::share::{AutoOffsetReset, ShareCommand, ShareFetched, ShareGroupConfig};
use crate::topics::{MetadataSnapshot, TopicId};

/// The epoch that closes a share session.
pub const FINAL_EPOCH: i32 = -1;

/// One member's share session on this broker.
#[derive(Debug, Clone)]
struct ShareSession {
    connection: u64,
    /// The epoch the member's next request must carry.
    next_epoch: i32,
    partitions: BTreeSet<(TopicId, i32)>,
}

/// Every share session of this broker.
#[derive(Debug, Default)]
pub struct ShareSessions {
    sessions: BTreeMap<(String, String), ShareSession>,
}

pub type ShareSessionsHandle = Arc<Mutex<ShareSessions>>;

/// A partition of a share request, with the acknowledgements it carries for it.
#[derive(Debug, Clone)]
pub struct ShareRequestPartition {
    pub topic_id: TopicId,
    pub partition: i32,
    pub acks: Vec<AckBatch>,
    /// The request named an acknowledgement type that does not exist: INVALID_REQUEST.
    pub acks_invalid: bool,
}

/// A ShareFetch (or, `fetch` false, a ShareAcknowledge), decoded.
#[derive(Debug, Clone)]
pub struct ShareFetchRequest {
    pub group_id: String,
    pub member_id: String,
    pub session_epoch: i32,
    pub max_wait_ms: i32,
    pub max_bytes: i32,
    pub max_records: i32,
    pub mode: AcquireMode,
    pub renew: bool,
    pub partitions: Vec<ShareRequestPartition>,
    pub forgotten: Vec<(TopicId, i32)>,
    /// ShareFetch: acquire records; ShareAcknowledge: only acknowledge.
    pub fetch: bool,
}

/// What the session step decided: which partitions to acknowledge and acquire.
pub struct SharePlan {
    request: ShareFetchRequest,
    /// The partitions to acquire from (the session's, or none when it closes).
    fetch_from: Vec<(TopicId, i32)>,
    /// Whether every partition of the session is answered (a new session), or only those
    /// with something to say.
    full: bool,
    /// The session closed: what the member acquired on its partitions is let go afterwards.
    closed: Vec<(TopicId, i32)>,
}

/// One partition's answer.
#[derive(Debug, Clone)]
pub struct SharePartitionAnswer {
    pub topic_id: TopicId,
    pub partition: i32,
    pub error: Option<CoreError>,
    /// The acknowledgements' result, if the request carried some for the partition.
    pub ack: Option<CoreResult<()>>,
    pub fetched: ShareFetched,
    /// The owner and its leader epoch, when this broker does not own the partition.
    pub leader: Option<(i32, i32)>,
}

/// A share request's answer: a whole-request error, or one per partition.
#[derive(Debug, Clone, Default)]
pub struct ShareFetchAnswer {
    pub error: Option<CoreError>,
    pub lock_duration_ms: i32,
    pub partitions: Vec<SharePartitionAnswer>,
}

/// A TxnShareAcknowledge, decoded (KIP-1289).
#[derive(Debug, Clone)]
pub struct TxnShareAcknowledge {
    pub writer: TxnWriter,
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub partitions: Vec<ShareRequestPartition>,
}

/// The per-partition results of a TxnShareAcknowledge, or the error of the whole.
pub type TxnShareAnswer = CoreResult<Vec<(TopicId, i32, CoreResult<()>)>>;

impl<E: Env> Broker<E> {
    /// A share group's settings for its share partitions: its group configs (the GROUP
    /// resource) over the broker's defaults.
    pub fn share_group_config(&self, group_id: &str) -> ShareGroupConfig {
        let snapshot = self.topics.snapshot();
        let c = &snapshot.effective;
        let own = snapshot.group_configs.get(group_id);
        let value = |name: &str| own.and_then(|g| g.get(name)).map(String::as_str);
        let int = |name: &str, default: i32| {
            value(name).and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(i64::from(default))
        };
        ShareGroupConfig {
            window: crate::partition::share::state::ShareSettings {
                lock_duration_ms: int(group::SHARE_RECORD_LOCK_DURATION_MS, c.group_share_record_lock_duration_ms)
                    .max(1),
                delivery_count_limit: u16::try_from(int(
                    group::SHARE_DELIVERY_COUNT_LIMIT,
                    c.group_share_delivery_count_limit,
                ))
                .unwrap_or(u16::MAX)
                .max(1),
                max_in_flight: int(group::SHARE_PARTITION_MAX_RECORD_LOCKS, c.group_share_partition_max_record_locks)
                    .max(1),
                // share.version 2 is KIP-1191's level.
                dead_letter: c.share_version >= 2
                    && value(group::ERRORS_DEADLETTERQUEUE_TOPIC_NAME).is_some_and(|t| !t.trim().is_empty()),
            },
            read_committed: value(group::SHARE_ISOLATION_LEVEL)
                .is_some_and(|v| v.eq_ignore_ascii_case("read_committed")),
            auto_offset_reset: match value(group::SHARE_AUTO_OFFSET_RESET) {
                Some(v) if v.eq_ignore_ascii_case("earliest") => AutoOffsetReset::Earliest,
                _ => AutoOffsetReset::Latest,
            },
        }
    }

    /// The session step of a ShareFetch or ShareAcknowledge, run as the request is read.
    pub fn share_session(&self, connection: u64, request: ShareFetchRequest) -> CoreResult<SharePlan> {
        let key = (request.group_id.clone(), request.member_id.clone());
        let mut sessions = self.share_sessions.lock().expect("never poisoned");
        let requested: Vec<(TopicId, i32)> = request.partitions.iter().map(|p| (p.topic_id, p.partition)).collect();
        let has_acks = request.partitions.iter().any(|p| !p.acks.is_empty());
        let plan = match request.session_epoch {
            0 if !request.fetch => return Err(CoreError::InvalidShareSessionEpoch),
            0 if has_acks => {
                return Err(CoreError::InvalidRequest("acknowledgements cannot open a share session".into()));
            }
            0 => {
                sessions.sessions.remove(&key);
                if sessions.sessions.len() >= self.config.group_share_max_share_sessions {
                    return Err(CoreError::ShareSessionLimitReached);
                }
                let partitions: BTreeSet<(TopicId, i32)> = requested.iter().copied().collect();
                let session = ShareSession { connection, next_epoch: 1, partitions: partitions.clone() };
                sessions.sessions.insert(key, session);
                SharePlan { request, fetch_from: partitions.into_iter().collect(), full: true, closed: Vec::new() }
            }
            FINAL_EPOCH => {
                let session = sessions.sessions.remove(&key).ok_or(CoreError::ShareSessionNotFound)?;
                let closed = session.partitions.into_iter().collect();
                SharePlan { request, fetch_from: Vec::new(), full: false, closed }
            }
            epoch if epoch > 0 => {
                let session = sessions.sessions.get_mut(&key).ok_or(CoreError::ShareSessionNotFound)?;
                if epoch != session.next_epoch {
                    return Err(CoreError::InvalidShareSessionEpoch);
                }
                session.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                if request.fetch {
                    session.partitions.extend(requested.iter().copied());
                    for forgotten in &request.forgotten {
                        session.partitions.remove(forgotten);
                    }
                }
                let fetch_from = if request.fetch { session.partitions.iter().copied().collect() } else { Vec::new() };
                SharePlan { request, fetch_from, full: false, closed: Vec::new() }
            }
            _ => return Err(CoreError::InvalidShareSessionEpoch),
        };
        assert!(plan.fetch_from.is_empty() || plan.request.fetch, "an acknowledgement acquires nothing");
        Ok(plan)
    }

    /// The rest of a ShareFetch or ShareAcknowledge: acknowledgements first (so that records a
    /// release gives back can be acquired at once), then acquisition, waiting up to
    /// `max_wait_ms` for records when there are none.
    pub async fn share_fetch(&self, plan: SharePlan) -> ShareFetchAnswer {
        let SharePlan { request, fetch_from, full, closed } = plan;
        // A session opening reads the group's configs as the volume has them: a lock duration
        // altered on a peer a moment ago applies to the first records this member acquires.
        if full {
            self.topics.refresh_group_configs().await;
        }
        let config = self.share_group_config(&request.group_id);
        let snapshot = self.topics.snapshot();
        let mut answers: BTreeMap<(TopicId, i32), SharePartitionAnswer> = BTreeMap::new();
        for p in request.partitions.iter().filter(|p| !p.acks.is_empty() || p.acks_invalid) {
            let answer =
                answers.entry((p.topic_id, p.partition)).or_insert_with(|| empty_answer(p.topic_id, p.partition));
            answer.ack = Some(match self.share_partition(&snapshot, p.topic_id, p.partition) {
                _ if p.acks_invalid => Err(CoreError::InvalidRequest("unknown acknowledge type".into())),
                Err(e) => Err(e),
                Ok(partition) => {
                    let (reply, answered) = oneshot::channel();
                    let command = ShareCommand::Acknowledge {
                        group_id: request.group_id.clone(),
                        member_id: request.member_id.clone(),
                        config,
                        batches: p.acks.clone(),
                        renew_allowed: request.renew,
                        reply,
                    };
                    partition.share(command).await;
                    answered.await.unwrap_or(Err(CoreError::NotLeaderOrFollower))
                }
            });
        }
        for &(topic_id, partition) in &closed {
            if let Ok(handle) = self.share_partition(&snapshot, topic_id, partition) {
                let (group_id, member_id) = (request.group_id.clone(), request.member_id.clone());
                handle.share(ShareCommand::ReleaseMember { group_id, member_id }).await;
            }
        }
        if request.fetch && !fetch_from.is_empty() {
            // Only a member acquires: one the group removed (its session ran out) gets nothing
            // more, and what it holds here goes back at once.
            let member = self.check_share_member(&request.group_id, &request.member_id, None).await;
            match member {
                Ok(()) => self.acquire_waiting(&request, config, &fetch_from, &mut answers).await,
                _ if crate::mutant!(ShareAcquireUnfenced) => {
                    self.acquire_waiting(&request, config, &fetch_from, &mut answers).await
                }
                Err(CoreError::UnknownMemberId | CoreError::GroupIdNotFound) => {
                    for &(topic_id, partition) in &fetch_from {
                        if let Ok(handle) = self.share_partition(&snapshot, topic_id, partition) {
                            let (group_id, member_id) = (request.group_id.clone(), request.member_id.clone());
                            handle.share(ShareCommand::ReleaseMember { group_id, member_id }).await;
                        }
                    }
                }
                // The coordinator cannot say now: nothing to give until the wait is over.
                Err(e) => {
                    tracing::debug!(group = %request.group_id, member = %request.member_id, error = %e, "share fetch: membership unknown");
                    self.env.clock().sleep_ms(request.max_wait_ms.max(0) as u64).await;
                }
            }
        }
        let mut partitions: Vec<SharePartitionAnswer> = answers.into_values().collect();
        if full {
            // A new session hears of every partition it asked for, with or without records.
            for &(topic_id, partition) in &fetch_from {
                if !partitions.iter().any(|a| a.topic_id == topic_id && a.partition == partition) {
                    partitions.push(empty_answer(topic_id, partition));
                }
            }
        }
        partitions.retain(|a| full || a.error.is_some() || a.ack.is_some() || !a.fetched.acquired.is_empty());
        partitions.sort_by_key(|a| (a.topic_id, a.partition));
        ShareFetchAnswer { error: None, lock_duration_ms: config.window.lock_duration_ms as i32, partitions }
    }

    /// Acquires from every partition of the session in turn, within the request's record and
    /// byte budgets; with nothing acquired, waits for new data until `max_wait_ms` runs out.
    async fn acquire_waiting(
        &self,
        request: &ShareFetchRequest,
        config: ShareGroupConfig,
        fetch_from: &[(TopicId, i32)],
        answers: &mut BTreeMap<(TopicId, i32), SharePartitionAnswer>,
    ) {
        let deadline = self.env.clock().monotonic() + Duration::from_millis(request.max_wait_ms.max(0) as u64);
        let mut data_version = self.topics.data_version.clone();
        loop {
            data_version.borrow_and_update();
            let snapshot = self.topics.snapshot();
            let mut records_left = request.max_records.max(1) as usize;
            let mut bytes_left = request.max_bytes.max(1) as usize;
            let mut acquired_any = false;
            for &(topic_id, partition) in fetch_from {
                let answer = answers.entry((topic_id, partition)).or_insert_with(|| empty_answer(topic_id, partition));
                if answer.error.is_some() {
                    // Said once, kept: an acquisition whose write failed may have been written,
                    // and the member must hear that rather than a later success.
                    continue;
                }
                let handle = match self.share_partition(&snapshot, topic_id, partition) {
                    Ok(handle) => handle,
                    Err(e) => {
                        answer.leader = self.share_leader(&snapshot, topic_id, partition);
                        answer.error = Some(e);
                        continue;
                    }
                };
                if records_left == 0 || bytes_left == 0 {
                    continue;
                }
                let (reply, answered) = oneshot::channel();
                let command = ShareCommand::Acquire {
                    group_id: request.group_id.clone(),
                    member_id: request.member_id.clone(),
                    config,
                    max_records: records_left,
                    max_bytes: bytes_left,
                    mode: request.mode,
                    reply,
                };
                handle.share(command).await;
                match answered.await.unwrap_or(Err(CoreError::NotLeaderOrFollower)) {
                    Ok(fetched) => {
                        let taken: i64 = fetched.acquired.iter().map(|r| r.last_offset - r.first_offset + 1).sum();
                        records_left = records_left.saturating_sub(taken as usize);
                        bytes_left = bytes_left.saturating_sub(fetched.records.len());
                        acquired_any |= taken > 0;
                        answer.fetched = fetched;
                    }
                    Err(e) => answer.error = Some(e),
                }
            }
            if acquired_any || self.env.clock().monotonic() >= deadline {
                return;
            }
            tokio::select! {
                biased;
                changed = data_version.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = self.env.clock().sleep_until(deadline) => return,
            }
        }
    }

    /// The partition of a share request, if this broker serves it now.
    fn share_partition(
        &self,
        snapshot: &MetadataSnapshot,
        topic_id: TopicId,
        partition: i32,
    ) -> CoreResult<PartitionHandle> {
        let name = snapshot.names_by_id.get(&topic_id).ok_or(CoreError::UnknownTopicId)?;
        let handle = snapshot.partition(name, partition).ok_or(CoreError::UnknownTopicOrPartition)?;
        if !handle.watermarks().owned {
            return Err(CoreError::NotLeaderOrFollower);
        }
        Ok(handle.clone())
    }

    /// Who should own a partition this broker does not serve, for the client to go there.
    fn share_leader(&self, snapshot: &MetadataSnapshot, topic_id: TopicId, partition: i32) -> Option<(i32, i32)> {
        let name = snapshot.names_by_id.get(&topic_id)?;
        let owner = snapshot.owner(name, partition, &self.membership.view())?;
        Some((owner, -1))
    }

    /// A connection closed: its share sessions end, and what their members acquired here is let
    /// go (Apache's behaviour on a disconnect).
    pub async fn share_connection_closed(&self, connection: u64) {
        let closed: Vec<((String, String), ShareSession)> = {
            let mut sessions = self.share_sessions.lock().expect("never poisoned");
            let keys: Vec<(String, String)> =
                sessions.sessions.iter().filter(|(_, s)| s.connection == connection).map(|(k, _)| k.clone()).collect();
            keys.into_iter().filter_map(|k| sessions.sessions.remove(&k).map(|s| (k, s))).collect()
        };
        let snapshot = self.topics.snapshot();
        for ((group_id, member_id), session) in closed {
            for (topic_id, partition) in session.partitions {
                if let Ok(handle) = self.share_partition(&snapshot, topic_id, partition) {
                    let (group_id, member_id) = (group_id.clone(), member_id.clone());
                    handle.share(ShareCommand::ReleaseMember { group_id, member_id }).await;
                }
            }
        }
    }

    /// KIP-1289: stages a member's acknowledgements in the producer's transaction, partition by
    /// partition. The member must be the group's at its epoch (checked by the group's
    /// coordinator); each share partition joins the transaction (as a transactions-v2 write
    /// does) before its acknowledgements are staged, under a guard read before the join.
    pub async fn txn_share_acknowledge(&self, request: TxnShareAcknowledge) -> TxnShareAnswer {
        if request.group_id.is_empty() {
            return Err(CoreError::InvalidGroupId);
        }
        let member_epoch = (!crate::mutant!(ShareStageEpochUnchecked)).then_some(request.member_epoch);
        self.check_share_member(&request.group_id, &request.member_id, member_epoch).await?;
        let snapshot = self.topics.snapshot();
        let config = self.share_group_config(&request.group_id);
        let mut results = Vec::with_capacity(request.partitions.len());
        for p in &request.partitions {
            let result = self.stage_share(&snapshot, &request, config, p).await;
            results.push((p.topic_id, p.partition, result));
        }
        Ok(results)
    }

    async fn stage_share(
        &self,
        snapshot: &MetadataSnapshot,
        request: &TxnShareAcknowledge,
        config: ShareGroupConfig,
        p: &ShareRequestPartition,
    ) -> CoreResult<()> {
        if p.acks_invalid {
            return Err(CoreError::InvalidRequest("unknown acknowledge type".into()));
        }
        let handle = self.share_partition(snapshot, p.topic_id, p.partition)?;
        let topic = snapshot.names_by_id.get(&p.topic_id).cloned().ok_or(CoreError::UnknownTopicId)?;
        // Read before the coordinator is asked: an end of the transaction after this voids it.
        let (reply, guard) = oneshot::channel();
        handle.share(ShareCommand::Guard { reply }).await;
        let guard = guard.await.map_err(|_| CoreError::NotLeaderOrFollower)?;
        let participant = Participant::SharePartition((request.group_id.clone(), topic, p.partition));
        let writer = TxnWriter { join: Join::Add, ..request.writer.clone() };
        self.join_txn(&writer, participant).await?;
        let (reply, staged) = oneshot::channel();
        let command = ShareCommand::Stage {
            group_id: request.group_id.clone(),
            member_id: request.member_id.clone(),
            config,
            producer_id: writer.producer_id,
            producer_epoch: writer.producer_epoch,
            batches: p.acks.clone(),
            guard,
            reply,
        };
        handle.share(command).await;
        staged.await.unwrap_or(Err(CoreError::NotLeaderOrFollower))
    }

    /// Whether `member_id` is a member of share group `group_id` at `member_epoch` (`None`: at
    /// any), as the group's coordinator says: this broker, or the peer the view names.
    async fn check_share_member(&self, group_id: &str, member_id: &str, member_epoch: Option<i32>) -> CoreResult<()> {
        let key = crate::cluster::group_key(group_id);
        match self.membership.view().peer_owning(&key) {
            None => self.groups.share_check_member(group_id.to_string(), member_id.to_string(), member_epoch).await,
            Some(peer) => self.peers.check_share_member(peer, group_id, member_id, member_epoch).await,
        }
    }
}

fn empty_answer(topic_id: TopicId, partition: i32) -> SharePartitionAnswer {
    SharePartitionAnswer { topic_id, partition, error: None, ack: None, fetched: ShareFetched::default(), leader: None }
}
