//! The share group calls (KIP-932): ShareGroupHeartbeat, ShareFetch and ShareAcknowledge at
//! the versions Kafka 4.4 serves, DescribeShareGroupOffsets, a group config set by
//! IncrementalAlterConfigs on the GROUP resource, and KIP-1289's TxnShareAcknowledge.
//!
//! Share sessions are the caller's: it keeps the epoch per broker (0 opens a session, each
//! request after it carries the next, -1 closes it) and starts again at 0 when a connection
//! was replaced (`Client::connection_serial`).

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::*;
use kafka_protocol::records::RecordBatchDecoder;

use crate::wire::text;
use crate::{Message, Outcome, WireClient};

/// ShareFetch and ShareAcknowledge: the versions Kafka 4.4 serves (KIP-1206, KIP-1222).
const SHARE_VERSION: i16 = 2;
/// The draft's API key of TxnShareAcknowledge (KIP-1289).
const TXN_SHARE_ACKNOWLEDGE_VERSION: i16 = 0;
/// IncrementalAlterConfigs' resource type of a group's configs.
const GROUP_RESOURCE: i8 = 32;

/// Acknowledgement types (KIP-932; RENEW is KIP-1222's).
pub const GAP: i8 = 0;
pub const ACCEPT: i8 = 1;
pub const RELEASE: i8 = 2;
pub const REJECT: i8 = 3;
pub const RENEW: i8 = 4;

/// What a ShareGroupHeartbeat answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareBeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's partitions when the coordinator says them: (topic id, partitions).
    pub assignment: Option<Vec<([u8; 16], Vec<i32>)>>,
}

/// One record a share fetch acquired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub offset: i64,
    pub delivery_count: i16,
    pub message: Message,
}

/// One partition of a ShareFetch answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharePartitionFetched {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub error_code: i16,
    /// The acknowledgements the request carried for the partition: their error (0 done).
    pub acknowledge_error_code: i16,
    pub records: Vec<Acquired>,
    /// The acquired ranges as the broker said them: (first, last, delivery count).
    pub ranges: Vec<(i64, i64, i16)>,
    /// The leader the broker points to, when it does not lead the partition: (id, epoch).
    pub leader: (i32, i32),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareFetched {
    pub acquisition_lock_timeout_ms: i32,
    pub partitions: Vec<SharePartitionFetched>,
}

/// One partition's acknowledgements: each offset with its type, in any order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareAcks {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub types: BTreeMap<i64, i8>,
}

impl ShareAcks {
    pub fn new(topic_id: [u8; 16], partition: i32) -> ShareAcks {
        ShareAcks { topic_id, partition, types: BTreeMap::new() }
    }

    /// The acknowledgement batches the protocol carries: runs of consecutive offsets, one type
    /// for a run of one type, else a type per offset.
    pub fn batches(&self) -> Vec<(i64, i64, Vec<i8>)> {
        let mut runs: Vec<(i64, i64, Vec<i8>)> = Vec::new();
        for (&offset, &kind) in &self.types {
            match runs.last_mut() {
                Some((_, last, types)) if *last + 1 == offset => {
                    *last = offset;
                    types.push(kind);
                }
                _ => runs.push((offset, offset, vec![kind])),
            }
        }
        for (_, _, types) in &mut runs {
            if types.iter().all(|t| *t == types[0]) {
                types.truncate(1);
            }
        }
        runs
    }
}

/// A ShareFetch to make: which partitions, with what acknowledgements.
#[derive(Debug, Clone)]
pub struct ShareFetchSpec<'a> {
    pub group: &'a str,
    pub member_id: &'a str,
    pub session_epoch: i32,
    /// Partitions to add to the session (or to acknowledge in): (topic id, partition).
    pub partitions: &'a [([u8; 16], i32)],
    pub acks: &'a [ShareAcks],
    pub forgotten: &'a [([u8; 16], i32)],
    pub max_wait_ms: i32,
    pub max_records: i32,
    /// KIP-1206: 0 batch_optimized, 1 record_limit.
    pub acquire_mode: i8,
}

fn uuid(id: [u8; 16]) -> uuid::Uuid {
    uuid::Uuid::from_bytes(id)
}

impl WireClient {
    /// ShareGroupHeartbeat (v1). `subscribe` on a join (epoch 0) and whenever it changes; epoch
    /// -1 leaves.
    pub async fn share_group_heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        subscribe: Option<&[String]>,
    ) -> Outcome<ShareBeat> {
        let request = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_member_id(text(member_id))
            .with_member_epoch(member_epoch)
            .with_subscribed_topic_names(subscribe.map(|ts| ts.iter().map(|t| TopicName(text(t))).collect()));
        match self.call::<_, ShareGroupHeartbeatResponse>(ApiKey::ShareGroupHeartbeat, 1, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(ShareBeat {
                member_id: r.member_id.map(|m| m.to_string()).unwrap_or_else(|| member_id.to_string()),
                member_epoch: r.member_epoch,
                heartbeat_interval_ms: r.heartbeat_interval_ms,
                assignment: r.assignment.map(|a| {
                    a.topic_partitions.iter().map(|t| (*t.topic_id.as_bytes(), t.partitions.clone())).collect()
                }),
            }),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// ShareFetch (v2): acknowledges what `spec.acks` says, then acquires. A top-level error is
    /// `Failed`; per-partition errors are in the answer.
    pub async fn share_fetch(&mut self, spec: &ShareFetchSpec<'_>) -> Outcome<ShareFetched> {
        use kafka_protocol::messages::share_fetch_request::{
            AcknowledgementBatch, FetchPartition, FetchTopic, ForgottenTopic,
        };
        let mut topics: BTreeMap<[u8; 16], BTreeMap<i32, Vec<AcknowledgementBatch>>> = BTreeMap::new();
        for &(topic_id, partition) in spec.partitions {
            topics.entry(topic_id).or_default().entry(partition).or_default();
        }
        for acks in spec.acks {
            let batches = acks.batches().into_iter().map(|(first, last, types)| {
                AcknowledgementBatch::default()
                    .with_first_offset(first)
                    .with_last_offset(last)
                    .with_acknowledge_types(types)
            });
            topics.entry(acks.topic_id).or_default().entry(acks.partition).or_default().extend(batches);
        }
        let topics = topics
            .into_iter()
            .map(|(topic_id, partitions)| {
                FetchTopic::default().with_topic_id(uuid(topic_id)).with_partitions(
                    partitions
                        .into_iter()
                        .map(|(p, batches)| {
                            FetchPartition::default()
                                .with_partition_index(p)
                                .with_partition_max_bytes(1 << 20)
                                .with_acknowledgement_batches(batches)
                        })
                        .collect(),
                )
            })
            .collect();
        let mut forgotten: BTreeMap<[u8; 16], Vec<i32>> = BTreeMap::new();
        for &(topic_id, partition) in spec.forgotten {
            forgotten.entry(topic_id).or_default().push(partition);
        }
        let request = ShareFetchRequest::default()
            .with_group_id(Some(GroupId(text(spec.group))))
            .with_member_id(Some(text(spec.member_id)))
            .with_share_session_epoch(spec.session_epoch)
            .with_max_wait_ms(spec.max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(spec.max_records)
            .with_batch_size(spec.max_records)
            .with_share_acquire_mode(spec.acquire_mode)
            .with_topics(topics)
            .with_forgotten_topics_data(
                forgotten
                    .into_iter()
                    .map(|(id, partitions)| {
                        ForgottenTopic::default().with_topic_id(uuid(id)).with_partitions(partitions)
                    })
                    .collect(),
            );
        let timeout = std::time::Duration::from_millis(spec.max_wait_ms.max(0) as u64) + crate::wire::REQUEST_TIMEOUT;
        let response: ShareFetchResponse =
            match self.call_within(timeout, ApiKey::ShareFetch, SHARE_VERSION, &request).await {
                Ok(r) => r,
                Err(_) => return Outcome::Indefinite,
            };
        if response.error_code != 0 {
            return Outcome::Failed(response.error_code);
        }
        let mut partitions = Vec::new();
        for topic in response.responses {
            let topic_id = *topic.topic_id.as_bytes();
            for p in topic.partitions {
                let ranges: Vec<(i64, i64, i16)> =
                    p.acquired_records.iter().map(|r| (r.first_offset, r.last_offset, r.delivery_count)).collect();
                let Some(records) = acquired_records(p.records.clone(), &ranges) else {
                    return Outcome::Failed(crate::CORRUPT_READ);
                };
                partitions.push(SharePartitionFetched {
                    topic_id,
                    partition: p.partition_index,
                    error_code: p.error_code,
                    acknowledge_error_code: p.acknowledge_error_code,
                    records,
                    ranges,
                    leader: (p.current_leader.leader_id, p.current_leader.leader_epoch),
                });
            }
        }
        Outcome::Ok(ShareFetched { acquisition_lock_timeout_ms: response.acquisition_lock_timeout_ms, partitions })
    }

    /// ShareAcknowledge (v2): each partition's error code (0 done). A session epoch of -1
    /// closes the session after the acknowledgements.
    pub async fn share_acknowledge(
        &mut self,
        group: &str,
        member_id: &str,
        session_epoch: i32,
        acks: &[ShareAcks],
    ) -> Outcome<Vec<([u8; 16], i32, i16)>> {
        use kafka_protocol::messages::share_acknowledge_request::{
            AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch,
        };
        let mut topics: BTreeMap<[u8; 16], Vec<AcknowledgePartition>> = BTreeMap::new();
        for a in acks {
            let batches = a
                .batches()
                .into_iter()
                .map(|(first, last, types)| {
                    AcknowledgementBatch::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_acknowledge_types(types)
                })
                .collect();
            topics.entry(a.topic_id).or_default().push(
                AcknowledgePartition::default().with_partition_index(a.partition).with_acknowledgement_batches(batches),
            );
        }
        let request = ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(text(group))))
            .with_member_id(Some(text(member_id)))
            .with_share_session_epoch(session_epoch)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(id, partitions)| {
                        AcknowledgeTopic::default().with_topic_id(uuid(id)).with_partitions(partitions)
                    })
                    .collect(),
            );
        match self.call::<_, ShareAcknowledgeResponse>(ApiKey::ShareAcknowledge, SHARE_VERSION, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(
                r.responses
                    .iter()
                    .flat_map(|t| {
                        t.partitions.iter().map(|p| (*t.topic_id.as_bytes(), p.partition_index, p.error_code))
                    })
                    .collect(),
            ),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// TxnShareAcknowledge (KIP-1289, v0): stages accept, reject (and gap) acknowledgements in
    /// the producer's transaction. Each partition's error code, or the request's error.
    pub async fn txn_share_acknowledge(
        &mut self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        group: &str,
        member: (&str, i32),
        acks: &[ShareAcks],
    ) -> Outcome<Vec<([u8; 16], i32, i16)>> {
        use kafka_protocol::messages::txn_share_acknowledge_request::{
            TxnShareAcknowledgeBatch, TxnShareAcknowledgePartition, TxnShareAcknowledgeTopic,
        };
        let mut topics: BTreeMap<[u8; 16], Vec<TxnShareAcknowledgePartition>> = BTreeMap::new();
        for a in acks {
            let batches = a
                .batches()
                .into_iter()
                .map(|(first, last, types)| {
                    TxnShareAcknowledgeBatch::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_acknowledge_types(types)
                })
                .collect();
            topics.entry(a.topic_id).or_default().push(
                TxnShareAcknowledgePartition::default()
                    .with_partition_index(a.partition)
                    .with_acknowledgement_batches(batches),
            );
        }
        let request = TxnShareAcknowledgeRequest::default()
            .with_transactional_id(Some(TransactionalId(text(transactional_id))))
            .with_group_id(GroupId(text(group)))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_member_id(text(member.0))
            .with_member_epoch(member.1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(id, partitions)| {
                        TxnShareAcknowledgeTopic::default().with_topic_id(uuid(id)).with_partitions(partitions)
                    })
                    .collect(),
            );
        let key = ApiKey::TxnShareAcknowledge;
        match self.call::<_, TxnShareAcknowledgeResponse>(key, TXN_SHARE_ACKNOWLEDGE_VERSION, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(
                r.responses
                    .iter()
                    .flat_map(|t| {
                        t.partitions.iter().map(|p| (*t.topic_id.as_bytes(), p.partition_index, p.error_code))
                    })
                    .collect(),
            ),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// DescribeShareGroupOffsets (v1) of one topic's partitions: each partition's share-partition
    /// start offset (-1 if the group never consumed it) and lag.
    pub async fn share_group_offsets(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Outcome<Vec<(i32, i64, i64)>> {
        use kafka_protocol::messages::describe_share_group_offsets_request::{
            DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
        };
        let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            DescribeShareGroupOffsetsRequestGroup::default().with_group_id(GroupId(text(group))).with_topics(Some(
                vec![
                    DescribeShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(text(topic)))
                        .with_partitions(partitions.to_vec()),
                ],
            )),
        ]);
        let response: DescribeShareGroupOffsetsResponse =
            match self.call(ApiKey::DescribeShareGroupOffsets, 1, &request).await {
                Ok(r) => r,
                Err(_) => return Outcome::Indefinite,
            };
        let Some(g) = response.groups.first() else { return Outcome::Failed(-1) };
        if g.error_code != 0 {
            return Outcome::Failed(g.error_code);
        }
        let mut offsets = Vec::new();
        for p in g.topics.iter().flat_map(|t| t.partitions.iter()) {
            if p.error_code != 0 {
                return Outcome::Failed(p.error_code);
            }
            offsets.push((p.partition_index, p.start_offset, p.lag));
        }
        Outcome::Ok(offsets)
    }

    /// Sets group configs (`share.auto.offset.reset`, ...) by IncrementalAlterConfigs (v1).
    pub async fn alter_group_configs(&mut self, group: &str, set: &[(&str, &str)]) -> Outcome<()> {
        use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        let configs = set
            .iter()
            .map(|(name, value)| {
                AlterableConfig::default().with_name(text(name)).with_config_operation(0).with_value(Some(text(value)))
            })
            .collect();
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(GROUP_RESOURCE)
                .with_resource_name(text(group))
                .with_configs(configs),
        ]);
        match self.call::<_, IncrementalAlterConfigsResponse>(ApiKey::IncrementalAlterConfigs, 1, &request).await {
            Ok(r) => match r.responses.first().map(|r| r.error_code) {
                Some(0) => Outcome::Ok(()),
                Some(code) => Outcome::Failed(code),
                None => Outcome::Failed(-1),
            },
            Err(_) => Outcome::Indefinite,
        }
    }
}

/// The records of `raw` that fall in the acquired `ranges`, each with its delivery count;
/// `None` if the batches do not decode.
fn acquired_records(raw: Option<Bytes>, ranges: &[(i64, i64, i16)]) -> Option<Vec<Acquired>> {
    let mut out = Vec::new();
    let Some(mut raw) = raw else { return Some(out) };
    while raw.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut raw).ok()?;
        for r in set.records {
            if r.control {
                continue;
            }
            let Some(&(_, _, delivery_count)) = ranges.iter().find(|(f, l, _)| *f <= r.offset && r.offset <= *l) else {
                continue;
            };
            let headers = r.headers.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            let message = Message { key: r.key.clone(), value: r.value.clone(), headers };
            out.push(Acquired { offset: r.offset, delivery_count, message });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgements_go_as_runs_with_one_type_where_they_agree() {
        let mut acks = ShareAcks::new([0; 16], 0);
        for (o, t) in [(3, ACCEPT), (4, ACCEPT), (5, ACCEPT), (7, RELEASE), (8, ACCEPT), (10, REJECT)] {
            acks.types.insert(o, t);
        }
        assert_eq!(acks.batches(), vec![(3, 5, vec![ACCEPT]), (7, 8, vec![RELEASE, ACCEPT]), (10, 10, vec![REJECT])]);
    }
}
