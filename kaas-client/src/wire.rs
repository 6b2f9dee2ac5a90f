//! `WireClient`: one connection to one broker, and the calls of the plain, group and
//! idempotent producer APIs on it. A lost connection (or no answer in time) is an indefinite
//! outcome, and the connection is not used again.

use std::io;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::BoxStream;

/// A request without an answer by then is indefinite: the connection is given up.
pub(crate) const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct WireClient {
    stream: BoxStream,
    /// The client.id every request carries.
    client_id: String,
    correlation_id: i32,
    /// A call failed on this connection: it must not be used again.
    broken: bool,
    /// Correlation ids of produce requests sent ahead and not yet answered.
    in_flight: std::collections::VecDeque<i32>,
}

/// What a call to the broker came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    Ok(T),
    /// The broker answered with this error code: nothing happened.
    Failed(i16),
    /// The connection broke: the request may or may not have taken effect.
    Indefinite,
}

/// `Outcome::Failed` code of a fetch whose records did not decode (bad CRC, torn batch).
pub const CORRUPT_READ: i16 = -2;
/// Kafka's OFFSET_OUT_OF_RANGE.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
/// Kafka's KAFKA_STORAGE_ERROR: the broker's volume failed; the write's effect is unknown.
pub const KAFKA_STORAGE_ERROR: i16 = 56;
/// `Outcome::Failed` code of a request the client never sent: no broker could be reached, or
/// none leads the partition or coordinates the key. Nothing happened.
pub const NOT_SENT: i16 = -3;
/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// What a broker's Metadata answer says of one topic: the brokers it names by node id, and
/// each partition's leader.
#[derive(Debug, Clone, Default)]
pub struct TopicRoutes {
    /// Each broker's advertised host and port, by node id.
    pub brokers: std::collections::BTreeMap<i32, (String, i32)>,
    pub topic_error: i16,
    /// The topic's id (KIP-516), which share groups name it by.
    pub topic_id: [u8; 16],
    /// (partition, leader node id, leader epoch)
    pub partitions: Vec<(i32, i32, i32)>,
    /// Each partition's replica list.
    pub replicas: std::collections::BTreeMap<i32, Vec<i32>>,
}

/// The partitions `reassigning` asks about: more than any world's topic has.
const PARTITIONS_LISTED: i32 = 64;

pub(crate) fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

impl WireClient {
    /// A client on a connected stream.
    pub fn new(stream: BoxStream, client_id: &str) -> WireClient {
        let client_id = client_id.to_string();
        WireClient { stream, client_id, correlation_id: 0, broken: false, in_flight: Default::default() }
    }

    /// One request and its response; an error (the timeout included) leaves the connection
    /// unusable and the request's effect unknown.
    pub async fn call<Req, Resp>(&mut self, key: ApiKey, version: i16, request: &Req) -> io::Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        self.call_within(REQUEST_TIMEOUT, key, version, request).await
    }

    /// `call` with its own timeout, for requests the broker may hold (JoinGroup).
    pub async fn call_within<Req, Resp>(
        &mut self,
        timeout: std::time::Duration,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> io::Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        let response = tokio::time::timeout(timeout, self.call_unbounded(key, version, request))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))
            .flatten();
        self.broken |= response.is_err();
        response
    }

    /// Whether a call on this connection failed (its effect unknown): reconnect before the next.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Sends a request that gets no response (Produce with acks=0).
    async fn send_only<Req: Encodable + HeaderVersion>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> io::Result<()> {
        let frame = self.frame(key, version, request)?;
        let sent = tokio::time::timeout(REQUEST_TIMEOUT, self.stream.write_all(&frame))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))
            .flatten();
        self.broken |= sent.is_err();
        sent
    }

    fn frame<Req: Encodable + HeaderVersion>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> io::Result<BytesMut> {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(text(&self.client_id)));
        let mut body = BytesMut::new();
        header.encode(&mut body, Req::header_version(version)).map_err(io::Error::other)?;
        request.encode(&mut body, version).map_err(io::Error::other)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        Ok(frame)
    }

    async fn call_unbounded<Req, Resp>(&mut self, key: ApiKey, version: i16, request: &Req) -> io::Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        let frame = self.frame(key, version, request)?;
        self.stream.write_all(&frame).await?;
        let size = self.stream.read_i32().await?;
        let mut buf = vec![0u8; size.max(0) as usize];
        self.stream.read_exact(&mut buf).await?;
        let mut buf = Bytes::from(buf);
        let response_header =
            ResponseHeader::decode(&mut buf, key.response_header_version(version)).map_err(io::Error::other)?;
        if response_header.correlation_id != self.correlation_id {
            return Err(io::Error::other("correlation id mismatch"));
        }
        let response = Resp::decode(&mut buf, version).map_err(io::Error::other)?;
        if buf.has_remaining() {
            return Err(io::Error::other("trailing bytes in response"));
        }
        Ok(response)
    }

    pub async fn create_topic(&mut self, name: &str, partitions: i32) -> io::Result<i16> {
        let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(text(name)))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ]);
        let response: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 7, &request).await?;
        Ok(response.topics.first().map(|t| t.error_code).unwrap_or(-1))
    }

    /// CreateAcls (v3) of one binding, or DeleteAcls (v3) of exactly that binding: DENY or
    /// ALLOW (`allow`) of `operation` to `principal` from any host on the literal topic `topic`.
    pub async fn topic_acl(
        &mut self,
        create: bool,
        topic: &str,
        principal: &str,
        operation: i8,
        allow: bool,
    ) -> Outcome<()> {
        use kafka_protocol::messages::create_acls_request::AclCreation;
        use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
        const TOPIC: i8 = 2;
        const LITERAL: i8 = 3;
        let permission = if allow { 3 } else { 2 };
        let code = if create {
            let creation = AclCreation::default()
                .with_resource_type(TOPIC)
                .with_resource_name(text(topic))
                .with_resource_pattern_type(LITERAL)
                .with_principal(text(principal))
                .with_host(text("*"))
                .with_operation(operation)
                .with_permission_type(permission);
            let request = CreateAclsRequest::default().with_creations(vec![creation]);
            match self.call::<_, CreateAclsResponse>(ApiKey::CreateAcls, 3, &request).await {
                Ok(r) => r.results.first().map_or(-1, |r| r.error_code),
                Err(_) => return Outcome::Indefinite,
            }
        } else {
            let filter = DeleteAclsFilter::default()
                .with_resource_type_filter(TOPIC)
                .with_resource_name_filter(Some(text(topic)))
                .with_pattern_type_filter(LITERAL)
                .with_principal_filter(Some(text(principal)))
                .with_host_filter(Some(text("*")))
                .with_operation(operation)
                .with_permission_type(permission);
            let request = DeleteAclsRequest::default().with_filters(vec![filter]);
            match self.call::<_, DeleteAclsResponse>(ApiKey::DeleteAcls, 3, &request).await {
                Ok(r) => r.filter_results.first().map_or(-1, |r| r.error_code),
                Err(_) => return Outcome::Indefinite,
            }
        };
        match code {
            0 => Outcome::Ok(()),
            code => Outcome::Failed(code),
        }
    }

    /// AlterClientQuotas of one client id's `producer_byte_rate`: set to `rate`, or removed.
    pub async fn client_quota(&mut self, client_id: &str, rate: Option<f64>) -> Outcome<()> {
        use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
        let entry = EntryData::default()
            .with_entity(vec![
                EntityData::default().with_entity_type(text("client-id")).with_entity_name(Some(text(client_id))),
            ])
            .with_ops(vec![
                OpData::default()
                    .with_key(text("producer_byte_rate"))
                    .with_value(rate.unwrap_or(0.0))
                    .with_remove(rate.is_none()),
            ]);
        let request = AlterClientQuotasRequest::default().with_entries(vec![entry]);
        match self.call::<_, AlterClientQuotasResponse>(ApiKey::AlterClientQuotas, 1, &request).await {
            Ok(r) => match r.entries.first().map_or(-1, |e| e.error_code) {
                0 => Outcome::Ok(()),
                code => Outcome::Failed(code),
            },
            Err(_) => Outcome::Indefinite,
        }
    }

    /// DescribeClientQuotas of one client id: its `producer_byte_rate`, if it has one.
    pub async fn described_quota(&mut self, client_id: &str) -> Outcome<Option<f64>> {
        use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
        let component = ComponentData::default()
            .with_entity_type(text("client-id"))
            .with_match_type(0)
            .with_match(Some(text(client_id)));
        let request = DescribeClientQuotasRequest::default().with_components(vec![component]).with_strict(true);
        match self.call::<_, DescribeClientQuotasResponse>(ApiKey::DescribeClientQuotas, 1, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(
                r.entries
                    .unwrap_or_default()
                    .iter()
                    .flat_map(|e| &e.values)
                    .find(|v| v.key.as_str() == "producer_byte_rate")
                    .map(|v| v.value),
            ),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// CreateTopics of one topic: its error code (0 created, 36 already there).
    pub async fn create_topic_outcome(&mut self, name: &str, partitions: i32) -> Outcome<i16> {
        match self.create_topic(name, partitions).await {
            Ok(code) => Outcome::Ok(code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// Produces one uncompressed batch of `values` with acks=all; the base offset on success.
    pub async fn produce(&mut self, topic: &str, partition: i32, values: &[Bytes], timestamp_ms: i64) -> Outcome<i64> {
        self.produce_acks(topic, partition, values, timestamp_ms, -1).await
    }

    /// Produces one batch of whole messages (keys, null values) with acks=all, outside any
    /// producer's state.
    pub async fn produce_messages(
        &mut self,
        topic: &str,
        partition: i32,
        messages: &[Message],
        timestamp_ms: i64,
    ) -> Outcome<i64> {
        let no_producer = ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
        let Ok(request) = produce_messages_request(topic, partition, messages, timestamp_ms, no_producer, -1, None)
        else {
            return Outcome::Failed(-1);
        };
        match self.call::<_, ProduceResponse>(ApiKey::Produce, 9, &request).await {
            Err(_) => Outcome::Indefinite,
            Ok(response) => match response.responses.first().and_then(|t| t.partition_responses.first()) {
                Some(p) if p.error_code == 0 => Outcome::Ok(p.base_offset),
                Some(p) => Outcome::Failed(p.error_code),
                None => Outcome::Failed(-1),
            },
        }
    }

    /// Produces one batch with the given acks (-1, 1 or 0). With acks=0 nothing comes back, so
    /// the outcome is always indefinite.
    pub async fn produce_acks(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[Bytes],
        timestamp_ms: i64,
        acks: i16,
    ) -> Outcome<i64> {
        let no_producer = ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
        let Ok(request) = produce_request(topic, partition, values, timestamp_ms, no_producer, acks, None) else {
            return Outcome::Failed(-1);
        };
        if acks == 0 {
            let _ = self.send_only(ApiKey::Produce, 9, &request).await;
            return Outcome::Indefinite;
        }
        match self.call::<_, ProduceResponse>(ApiKey::Produce, 9, &request).await {
            Err(_) => Outcome::Indefinite,
            Ok(response) => {
                let Some(p) = response.responses.first().and_then(|t| t.partition_responses.first()) else {
                    return Outcome::Failed(-1);
                };
                if p.error_code == 0 { Outcome::Ok(p.base_offset) } else { Outcome::Failed(p.error_code) }
            }
        }
    }

    /// The group's committed offset for one partition (-1 if none), by OffsetFetch v7.
    pub async fn committed_offset(&mut self, group: &str, topic: &str, partition: i32) -> Outcome<i64> {
        use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
        let request = OffsetFetchRequest::default().with_group_id(GroupId(text(group))).with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partition_indexes(vec![partition]),
        ]));
        let response: OffsetFetchResponse = match self.call(ApiKey::OffsetFetch, 7, &request).await {
            Ok(r) => r,
            Err(_) => return Outcome::Indefinite,
        };
        if response.error_code != 0 {
            return Outcome::Failed(response.error_code);
        }
        match response.topics.first().and_then(|t| t.partitions.first()) {
            Some(p) if p.error_code == 0 => Outcome::Ok(p.committed_offset),
            Some(p) => Outcome::Failed(p.error_code),
            None => Outcome::Failed(-1),
        }
    }

    /// Commits `offset` for one partition as a standalone consumer (generation -1).
    pub async fn commit_offset(&mut self, group: &str, topic: &str, partition: i32, offset: i64) -> Outcome<()> {
        self.commit_as(group, &Member::default(), topic, partition, offset).await
    }

    /// Commits `offset` for one partition as `member` of the group's current generation.
    pub async fn commit_as(
        &mut self,
        group: &str,
        member: &Member,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Outcome<()> {
        use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_generation_id_or_member_epoch(member.generation)
            .with_member_id(text(&member.member_id))
            .with_topics(vec![OffsetCommitRequestTopic::default().with_name(TopicName(text(topic))).with_partitions(
                vec![
                OffsetCommitRequestPartition::default().with_partition_index(partition).with_committed_offset(offset),
            ],
            )]);
        let response: OffsetCommitResponse = match self.call(ApiKey::OffsetCommit, 8, &request).await {
            Ok(r) => r,
            Err(_) => return Outcome::Indefinite,
        };
        match response.topics.first().and_then(|t| t.partitions.first()) {
            Some(p) if p.error_code == 0 => Outcome::Ok(()),
            Some(p) => Outcome::Failed(p.error_code),
            None => Outcome::Failed(-1),
        }
    }

    /// One Fetch (v12) of one partition from `offset` at `isolation_level` (0
    /// read_uncommitted, 1 read_committed): the partition's answer, its error code checked.
    pub(crate) async fn fetch_partition(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
        isolation_level: i8,
    ) -> Outcome<kafka_protocol::messages::fetch_response::PartitionData> {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(isolation_level)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic(TopicName(text(topic))).with_partitions(vec![
                FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20),
            ])]);
        let response: FetchResponse = match self.call(ApiKey::Fetch, 12, &request).await {
            Ok(r) => r,
            Err(_) => return Outcome::Indefinite,
        };
        let Some(p) = response.responses.into_iter().next().and_then(|t| t.partitions.into_iter().next()) else {
            return Outcome::Failed(-1);
        };
        if p.error_code != 0 {
            return Outcome::Failed(p.error_code);
        }
        Outcome::Ok(p)
    }

    /// One fetch from `offset`: the records as (offset, value), and the high watermark.
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Outcome<(Vec<(i64, Bytes)>, i64)> {
        match self.fetch_records(topic, partition, offset, max_wait_ms).await {
            Outcome::Ok((records, hw)) => {
                Outcome::Ok((records.into_iter().map(|r| (r.offset, r.value.unwrap_or_default())).collect(), hw))
            }
            Outcome::Failed(code) => Outcome::Failed(code),
            Outcome::Indefinite => Outcome::Indefinite,
        }
    }

    /// One fetch from `offset`: the records as (offset, message, headers included), control
    /// records left out, and the high watermark.
    pub async fn fetch_messages(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Outcome<(Vec<(i64, Message)>, i64)> {
        match self.fetch_records(topic, partition, offset, max_wait_ms).await {
            Outcome::Ok((records, hw)) => {
                let messages = records.into_iter().filter(|r| !r.control).map(|r| {
                    let headers = r.headers.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                    (r.offset, Message { key: r.key, value: r.value, headers })
                });
                Outcome::Ok((messages.collect(), hw))
            }
            Outcome::Failed(code) => Outcome::Failed(code),
            Outcome::Indefinite => Outcome::Indefinite,
        }
    }

    /// One read_uncommitted fetch from `offset`: every record decoded (from `offset` on), and
    /// the high watermark.
    async fn fetch_records(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Outcome<(Vec<kafka_protocol::records::Record>, i64)> {
        let p = match self.fetch_partition(topic, partition, offset, max_wait_ms, 0).await {
            Outcome::Ok(p) => p,
            Outcome::Failed(code) => return Outcome::Failed(code),
            Outcome::Indefinite => return Outcome::Indefinite,
        };
        let mut out = Vec::new();
        if let Some(mut records) = p.records.clone() {
            while records.has_remaining() {
                let last = batch_last_offset(&records);
                let Ok(set) = RecordBatchDecoder::decode(&mut records) else {
                    return Outcome::Failed(-2);
                };
                let skip_below = skipped_below(last, offset);
                out.extend(set.records.into_iter().filter(|r| r.offset >= skip_below));
            }
        }
        Outcome::Ok((out, p.high_watermark))
    }

    /// Metadata (v12) of one topic: the brokers and the partitions' leaders.
    pub async fn metadata(&mut self, topic: &str) -> Outcome<TopicRoutes> {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(TopicName(text(topic))))]))
            .with_allow_auto_topic_creation(false);
        let response: MetadataResponse = match self.call(ApiKey::Metadata, 12, &request).await {
            Ok(r) => r,
            Err(_) => return Outcome::Indefinite,
        };
        let brokers = response.brokers.iter().map(|b| (b.node_id.0, (b.host.to_string(), b.port))).collect();
        let Some(t) = response.topics.first() else { return Outcome::Failed(-1) };
        let partitions = t.partitions.iter().map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch)).collect();
        let replicas =
            t.partitions.iter().map(|p| (p.partition_index, p.replica_nodes.iter().map(|b| b.0).collect())).collect();
        let topic_id = *t.topic_id.as_bytes();
        Outcome::Ok(TopicRoutes { brokers, topic_error: t.error_code, topic_id, partitions, replicas })
    }

    /// AlterPartitionReassignments (v1) of one partition to `replicas`, or a cancel (`None`).
    pub async fn reassign(&mut self, topic: &str, partition: i32, replicas: Option<&[i32]>) -> Outcome<()> {
        use kafka_protocol::messages::alter_partition_reassignments_request::{
            ReassignablePartition, ReassignableTopic,
        };
        let target = ReassignablePartition::default()
            .with_partition_index(partition)
            .with_replicas(replicas.map(|r| r.iter().copied().map(BrokerId).collect()));
        let request = AlterPartitionReassignmentsRequest::default().with_timeout_ms(10_000).with_topics(vec![
            ReassignableTopic::default().with_name(TopicName(text(topic))).with_partitions(vec![target]),
        ]);
        let response: AlterPartitionReassignmentsResponse =
            match self.call(ApiKey::AlterPartitionReassignments, 1, &request).await {
                Ok(r) => r,
                Err(_) => return Outcome::Indefinite,
            };
        match response.responses.first().and_then(|t| t.partitions.first()).map(|p| p.error_code) {
            Some(0) => Outcome::Ok(()),
            Some(code) => Outcome::Failed(code),
            None => Outcome::Failed(-1),
        }
    }

    /// ListPartitionReassignments (v0) of one topic: the partitions whose reassignment is in
    /// progress.
    pub async fn reassigning(&mut self, topic: &str) -> Outcome<Vec<i32>> {
        use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
        let named = ListPartitionReassignmentsTopics::default().with_name(TopicName(text(topic)));
        let request = ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(Some(vec![named.with_partition_indexes((0..PARTITIONS_LISTED).collect())]));
        match self.call::<_, ListPartitionReassignmentsResponse>(ApiKey::ListPartitionReassignments, 0, &request).await
        {
            Ok(r) if r.error_code == 0 => {
                Outcome::Ok(r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.partition_index)).collect())
            }
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// FindCoordinator (v3) of a group (key type 0) or transactional id (1): its host and port.
    pub async fn find_coordinator(&mut self, key_type: i8, key: &str) -> Outcome<(String, i32)> {
        let request = FindCoordinatorRequest::default().with_key(text(key)).with_key_type(key_type);
        match self.call::<_, FindCoordinatorResponse>(ApiKey::FindCoordinator, 3, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok((r.host.to_string(), r.port)),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// DeleteTopics (v4) of one topic by name.
    pub async fn delete_topic(&mut self, name: &str) -> Outcome<()> {
        let request =
            DeleteTopicsRequest::default().with_topic_names(vec![TopicName(text(name))]).with_timeout_ms(10_000);
        match self.call::<_, DeleteTopicsResponse>(ApiKey::DeleteTopics, 4, &request).await {
            Ok(r) => match r.responses.first().map(|t| t.error_code) {
                Some(0) => Outcome::Ok(()),
                Some(code) => Outcome::Failed(code),
                None => Outcome::Failed(-1),
            },
            Err(_) => Outcome::Indefinite,
        }
    }

    /// ListOffsets (v7) of one partition: -2 asks for the log start offset, -1 the end (the
    /// high watermark, or with `read_committed` the last stable offset).
    pub async fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        read_committed: bool,
    ) -> Outcome<i64> {
        use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(i8::from(read_committed))
            .with_topics(vec![ListOffsetsTopic::default().with_name(TopicName(text(topic))).with_partitions(vec![
                ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(timestamp),
            ])]);
        match self.call::<_, ListOffsetsResponse>(ApiKey::ListOffsets, 7, &request).await {
            Ok(r) => match r.topics.first().and_then(|t| t.partitions.first()) {
                Some(p) if p.error_code == 0 => Outcome::Ok(p.offset),
                Some(p) => Outcome::Failed(p.error_code),
                None => Outcome::Failed(-1),
            },
            Err(_) => Outcome::Indefinite,
        }
    }
}

/// The offset below which a batch's records are skipped, as Kafka's consumer skips them: the
/// batch holding the fetch offset may start before it, and a compacted one may keep none of its
/// records at or past it (its header still ends where it ended). A batch wholly below the fetch
/// offset, header and all, is not one the broker should have served, so its records are kept,
/// for the checkers to see.
pub(crate) fn skipped_below(batch_last_offset: Option<i64>, fetch_offset: i64) -> i64 {
    match batch_last_offset {
        Some(last) if last >= fetch_offset => fetch_offset,
        _ => i64::MIN,
    }
}

/// The last offset a stored batch's header gives (base offset plus last offset delta), read
/// before the batch is decoded: its records may end before it once compacted.
pub(crate) fn batch_last_offset(batch: &Bytes) -> Option<i64> {
    let base = i64::from_be_bytes(batch.get(0..8)?.try_into().ok()?);
    let delta = i32::from_be_bytes(batch.get(23..27)?.try_into().ok()?);
    Some(base + i64::from(delta))
}

/// A group member's identity in one generation; the default is a standalone consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub generation: i32,
}

impl Default for Member {
    fn default() -> Self {
        Member { member_id: String::new(), generation: -1 }
    }
}

/// What JoinGroup answered: this member's identity, and the members to assign if it leads.
#[derive(Debug, Clone)]
pub struct Joined {
    pub member: Member,
    /// Every member id of the generation, sorted, when this member is the leader; else empty.
    pub members: Vec<String>,
}

/// Kafka's MEMBER_ID_REQUIRED: JoinGroup v4+ hands out the id and asks to join again with it.
const MEMBER_ID_REQUIRED: i16 = 79;

/// The classic group protocol. The broker keeps the assignment opaque, so the simulated members
/// exchange it as a plain list of big-endian partition numbers.
impl WireClient {
    /// Joins (or rejoins as `member_id`) and waits for the generation to form.
    pub async fn join_group(
        &mut self,
        group: &str,
        member_id: &str,
        session_timeout_ms: i32,
        rebalance_timeout_ms: i32,
        embedded: Option<&str>,
    ) -> Outcome<Joined> {
        use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
        let mut member_id = member_id.to_string();
        // The consumer protocol's subscription (a member of an eager protocol owns nothing as
        // it joins), or bytes only the sim's members read.
        let (protocol, metadata) = match embedded {
            Some(topic) => ("range", kaas_core::group::embedded::encode_subscription(&[topic.into()], &Vec::new(), 1)),
            None => ("sim", Bytes::new()),
        };
        loop {
            let request = JoinGroupRequest::default()
                .with_group_id(GroupId(text(group)))
                .with_session_timeout_ms(session_timeout_ms)
                .with_rebalance_timeout_ms(rebalance_timeout_ms)
                .with_member_id(text(&member_id))
                .with_protocol_type(text("consumer"))
                .with_protocols(vec![
                    JoinGroupRequestProtocol::default().with_name(text(protocol)).with_metadata(metadata.clone()),
                ]);
            let timeout = std::time::Duration::from_millis(rebalance_timeout_ms as u64) + REQUEST_TIMEOUT;
            let response: JoinGroupResponse = match self.call_within(timeout, ApiKey::JoinGroup, 7, &request).await {
                Ok(r) => r,
                Err(_) => return Outcome::Indefinite,
            };
            match response.error_code {
                0 => {
                    let mut members: Vec<String> = response.members.iter().map(|m| m.member_id.to_string()).collect();
                    members.sort();
                    let member =
                        Member { member_id: response.member_id.to_string(), generation: response.generation_id };
                    return Outcome::Ok(Joined { member, members });
                }
                MEMBER_ID_REQUIRED if member_id.is_empty() => member_id = response.member_id.to_string(),
                code => return Outcome::Failed(code),
            }
        }
    }

    /// Hands in the assignment (the leader) or fetches it (a follower): this member's partitions.
    pub async fn sync_group(
        &mut self,
        group: &str,
        member: &Member,
        assignments: &[(String, Vec<i32>)],
        rebalance_timeout_ms: i32,
        embedded: Option<&str>,
    ) -> Outcome<Vec<i32>> {
        use kaas_core::group::embedded;
        use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_generation_id(member.generation)
            .with_member_id(text(&member.member_id))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(id, partitions)| {
                        let bytes = match embedded {
                            Some(topic) => {
                                embedded::encode_assignment(&vec![(topic.to_string(), partitions.clone())], 1)
                            }
                            None => Bytes::from(partitions.iter().flat_map(|p| p.to_be_bytes()).collect::<Vec<u8>>()),
                        };
                        SyncGroupRequestAssignment::default().with_member_id(text(id)).with_assignment(bytes)
                    })
                    .collect(),
            );
        let timeout = std::time::Duration::from_millis(rebalance_timeout_ms as u64) + REQUEST_TIMEOUT;
        let response: SyncGroupResponse = match self.call_within(timeout, ApiKey::SyncGroup, 3, &request).await {
            Ok(r) => r,
            Err(_) => return Outcome::Indefinite,
        };
        if response.error_code != 0 {
            return Outcome::Failed(response.error_code);
        }
        let partitions = match embedded {
            Some(topic) => match embedded::decode_assignment(&response.assignment) {
                Some(assigned) => assigned.into_iter().filter(|(t, _)| t == topic).flat_map(|(_, ps)| ps).collect(),
                // Not the consumer protocol: a coordinator that garbles an assignment fails here.
                None => return Outcome::Failed(-1),
            },
            None => response.assignment.chunks_exact(4).map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect(),
        };
        Outcome::Ok(partitions)
    }

    pub async fn heartbeat(&mut self, group: &str, member: &Member) -> Outcome<()> {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_generation_id(member.generation)
            .with_member_id(text(&member.member_id));
        match self.call::<_, HeartbeatResponse>(ApiKey::Heartbeat, 3, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(()),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    pub async fn leave_group(&mut self, group: &str, member: &Member) -> Outcome<()> {
        use kafka_protocol::messages::leave_group_request::MemberIdentity;
        let request = LeaveGroupRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_members(vec![MemberIdentity::default().with_member_id(text(&member.member_id))]);
        match self.call::<_, LeaveGroupResponse>(ApiKey::LeaveGroup, 3, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(()),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }
}

/// What a ConsumerGroupHeartbeat (KIP-848) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    pub member_id: String,
    pub member_epoch: i32,
    /// The member's partitions when the coordinator says them: (topic id, partitions).
    pub assignment: Option<Vec<([u8; 16], Vec<i32>)>>,
}

/// The consumer group protocol (KIP-848): the broker assigns.
impl WireClient {
    /// ConsumerGroupHeartbeat v1. `subscribe` on a join (and whenever it changes); `owned`, the
    /// partitions the member holds now, when it has something to report.
    pub async fn consumer_heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        subscribe: Option<&str>,
        owned: Option<&[([u8; 16], Vec<i32>)]>,
    ) -> Outcome<Beat> {
        use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
        let owned = owned.map(|o| {
            o.iter()
                .map(|(id, ps)| {
                    TopicPartitions::default().with_topic_id(uuid::Uuid::from_bytes(*id)).with_partitions(ps.clone())
                })
                .collect()
        });
        let request = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_member_id(text(member_id))
            .with_member_epoch(member_epoch)
            .with_rebalance_timeout_ms(if member_epoch == 0 { 5_000 } else { -1 })
            .with_subscribed_topic_names(subscribe.map(|t| vec![TopicName(text(t))]))
            .with_topic_partitions(owned);
        match self.call::<_, ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat, 1, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok(Beat {
                member_id: r.member_id.map(|m| m.to_string()).unwrap_or_else(|| member_id.to_string()),
                member_epoch: r.member_epoch,
                assignment: r.assignment.map(|a| {
                    a.topic_partitions.iter().map(|t| (*t.topic_id.as_bytes(), t.partitions.clone())).collect()
                }),
            }),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }
}

/// An idempotent producer's identity and where a batch sits in its sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStamp {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// The idempotent producer's calls: its id, and produce requests pipelined on one connection
/// (sent ahead, answered in order), as real clients keep up to five in flight.
impl WireClient {
    /// InitProducerId without a transactional id: a fresh producer id at epoch 0.
    pub async fn init_producer_id(&mut self) -> Outcome<(i64, i16)> {
        let request = InitProducerIdRequest::default().with_transaction_timeout_ms(60_000);
        match self.call::<_, InitProducerIdResponse>(ApiKey::InitProducerId, 4, &request).await {
            Ok(r) if r.error_code == 0 => Outcome::Ok((r.producer_id.0, r.producer_epoch)),
            Ok(r) => Outcome::Failed(r.error_code),
            Err(_) => Outcome::Indefinite,
        }
    }

    /// Sends one acks=all batch stamped with the producer's id, epoch and sequence, without
    /// waiting for the answer; `recv_produce` reads the answers in the order sent.
    pub async fn send_produce(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[Bytes],
        timestamp_ms: i64,
        stamp: ProducerStamp,
    ) -> io::Result<()> {
        let request = produce_request(topic, partition, values, timestamp_ms, stamp, -1, None)?;
        let sent = self.send_only(ApiKey::Produce, 9, &request).await;
        self.in_flight.push_back(self.correlation_id);
        sent
    }

    /// The answer to the oldest produce sent with `send_produce`: its base offset.
    pub async fn recv_produce(&mut self) -> Outcome<i64> {
        let Some(correlation_id) = self.in_flight.pop_front() else { return Outcome::Failed(-1) };
        let read = async {
            let size = self.stream.read_i32().await?;
            let mut buf = vec![0u8; size.max(0) as usize];
            self.stream.read_exact(&mut buf).await?;
            let mut buf = Bytes::from(buf);
            let header = ResponseHeader::decode(&mut buf, ApiKey::Produce.response_header_version(9))
                .map_err(io::Error::other)?;
            if header.correlation_id != correlation_id {
                return Err(io::Error::other("correlation id mismatch"));
            }
            ProduceResponse::decode(&mut buf, 9).map_err(io::Error::other)
        };
        let response = match tokio::time::timeout(REQUEST_TIMEOUT, read).await {
            Ok(Ok(response)) => response,
            _ => {
                self.broken = true;
                return Outcome::Indefinite;
            }
        };
        match response.responses.first().and_then(|t| t.partition_responses.first()) {
            Some(p) if p.error_code == 0 => Outcome::Ok(p.base_offset),
            Some(p) => Outcome::Failed(p.error_code),
            None => Outcome::Failed(-1),
        }
    }
}

/// A record to produce: key, value and headers, as a consumer read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl Message {
    pub fn value(value: Bytes) -> Message {
        Message { key: None, value: Some(value), headers: Vec::new() }
    }
}

/// A Produce request of one uncompressed batch of `values`, stamped by `stamp` (producer id -1
/// for a plain producer, whose records carry no sequence); transactional when a transactional
/// id is given.
pub(crate) fn produce_request(
    topic: &str,
    partition: i32,
    values: &[Bytes],
    timestamp_ms: i64,
    stamp: ProducerStamp,
    acks: i16,
    transactional_id: Option<&str>,
) -> io::Result<ProduceRequest> {
    let messages: Vec<Message> = values.iter().cloned().map(Message::value).collect();
    produce_messages_request(topic, partition, &messages, timestamp_ms, stamp, acks, transactional_id)
}

/// `produce_request` of whole messages.
pub(crate) fn produce_messages_request(
    topic: &str,
    partition: i32,
    messages: &[Message],
    timestamp_ms: i64,
    stamp: ProducerStamp,
    acks: i16,
    transactional_id: Option<&str>,
) -> io::Result<ProduceRequest> {
    let sequenced = stamp.producer_id >= 0;
    let records: Vec<Record> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| Record {
            transactional: transactional_id.is_some(),
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: stamp.producer_id,
            producer_epoch: stamp.producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if sequenced { stamp.base_sequence.wrapping_add(i as i32) } else { -1 },
            timestamp: timestamp_ms,
            key: m.key.clone(),
            value: m.value.clone(),
            headers: m.headers.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        })
        .collect();
    let mut batch = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut batch, records.iter(), &options).map_err(io::Error::other)?;
    let request = ProduceRequest::default().with_transactional_id(transactional_id.map(|t| TransactionalId(text(t))));
    Ok(request.with_acks(acks).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default().with_name(TopicName(text(topic))).with_partition_data(vec![
            PartitionProduceData::default().with_index(partition).with_records(Some(batch.freeze())),
        ]),
    ]))
}
