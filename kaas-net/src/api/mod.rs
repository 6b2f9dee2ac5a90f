//! The one registry of Kafka APIs: what each API's supported version range is, and which
//! module handles it. Every handler has the same shape: decode, validate, ask kaas-core, map
//! errors in `crate::error`, encode.

mod acls;
mod api_versions;
mod config_resources;
mod configs;
mod consumer_groups;
mod create_partitions;
mod create_topics;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_quorum;
mod describe_topic_partitions;
mod elect_leaders;
pub mod errors;
mod fetch;
mod find_coordinator;
mod groups;
mod list_offsets;
mod log_dirs;
mod metadata;
mod offset_for_leader_epoch;
mod offsets;
mod produce;
mod producers;
mod quotas;
mod reassignments;
pub mod reference;
mod scram;
mod share_fetch;
mod share_groups;
mod transactions;

use bytes::{BufMut, Bytes, BytesMut};
use kaas_core::env::{Clock, Env};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::connection::{Answer, Context, Response};

/// (API, lowest version, highest version) as advertised in ApiVersions. Produce is advertised
/// from 0 because librdkafka before 2.11.1 turns compression off when it is not; v0-v2 are
/// answered with UNSUPPORTED_VERSION, as Kafka 4 does.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 11),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 10),
    (ApiKey::OffsetFetch, 1, 10),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 5),
    // Answered by the connection's SASL state (`sasl.rs`). Handshake v0 (raw tokens after it)
    // is not served: every client kaas serves sends v1.
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 3),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 2),
    (ApiKey::TxnOffsetCommit, 0, 6),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeLogDirs, 1, 5),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::ListConfigResources, 0, 1),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 2),
    (ApiKey::ShareAcknowledge, 1, 2),
    (ApiKey::TxnShareAcknowledge, 0, 0),
    (ApiKey::DescribeShareGroupOffsets, 0, 1),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// The start offset by which a peer's AlterShareGroupOffsets asks the owner of a share
/// partition to forget it (`kaas_net::peers`); Apache refuses any negative start offset.
pub const FORGET_SHARE_PARTITION: i64 = -1;

/// What a client may do to a topic, as a broker without an authorizer answers it: every
/// operation a topic supports (Apache's `AclEntry.supportedOperations(TOPIC)`: READ, WRITE,
/// CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS), one bit per ACL code.
pub const TOPIC_AUTHORIZED_OPERATIONS: i32 = 1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 10 | 1 << 11;

/// What the client may do to a topic, one bit per ACL code, as the authorizer decides.
pub fn topic_authorized_operations<E: Env>(ctx: &Context<E>, name: &str) -> i32 {
    use kaas_core::acl::{Operation, Resource};
    if !ctx.broker.authorizer_enabled() {
        return TOPIC_AUTHORIZED_OPERATIONS;
    }
    Operation::ALL
        .iter()
        .filter(|op| TOPIC_AUTHORIZED_OPERATIONS & (1 << op.code()) != 0)
        .filter(|op| ctx.authorized(**op, Resource::topic(name)))
        .fold(0, |bits, op| bits | 1 << op.code())
}

/// The requests that change what the cluster is (its topics, configs, ACLs, quotas, users,
/// groups): each is logged, in its request's span (id, principal), as operators audit them.
const AUDITED: &[ApiKey] = &[
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::DeleteRecords,
    ApiKey::AlterConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::CreateAcls,
    ApiKey::DeleteAcls,
    ApiKey::AlterClientQuotas,
    ApiKey::AlterUserScramCredentials,
    ApiKey::DeleteGroups,
    ApiKey::OffsetDelete,
    ApiKey::AlterPartitionReassignments,
    ApiKey::AlterShareGroupOffsets,
    ApiKey::DeleteShareGroupOffsets,
];

/// Versions of Produce that are advertised but answered with UNSUPPORTED_VERSION.
const PRODUCE_REFUSED_MAX: i16 = 2;

pub fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED.iter().find(|(k, _, _)| *k == key).map(|&(_, min, max)| (min, max))
}

/// Decodes one request frame and runs its handler. `Err` closes the connection: the frame did
/// not decode, or named an API or version that has no error response to give.
pub async fn dispatch<E: Env>(ctx: &Context<E>, frame: Bytes) -> Result<Answer, String> {
    if frame.len() < 4 {
        return Err("frame shorter than a request header".into());
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    ctx.broker.metrics.request(raw_key);
    let key = ApiKey::try_from(raw_key).map_err(|_| format!("unknown api key {raw_key}"))?;
    let (min, max) = supported(key).ok_or_else(|| format!("unsupported api {key:?}"))?;
    let request_size = frame.len();
    let mut body = frame;
    let header_version = key.request_header_version(version.clamp(min.max(0), max));
    let header = RequestHeader::decode(&mut body, header_version).map_err(|e| format!("bad request header: {e}"))?;
    if version < min || version > max {
        return match key {
            ApiKey::ApiVersions => Ok(Answer::Now(api_versions::unsupported_version(&header, &ctx.broker.config))),
            _ => Err(format!("unsupported version {version} of {key:?}")),
        };
    }
    if !api_versions::served_at_share_level(key, ctx.broker.config.share_version) {
        // Not advertised at this share.version: refused as an API kaas does not serve.
        return Err(format!("{key:?} is not served at share.version {}", ctx.broker.config.share_version));
    }
    if key == ApiKey::Produce && version <= PRODUCE_REFUSED_MAX {
        return produce::refuse_old_version(&header, &mut body).map(Answer::Now);
    }
    tracing::trace!(api = ?key, version, correlation_id = header.correlation_id, "request");
    if AUDITED.contains(&key) {
        let client_id = header.client_id.as_ref().map_or("", |c| c.as_str());
        tracing::info!(target: "kaas::audit", api = ?key, version, client_id, peer = %ctx.peer, "admin request");
    }
    let started = ctx.broker.env.clock().monotonic();
    // A handler that answers at once: decode, run, tell the client of its throttle, encode.
    macro_rules! now {
        ($handler:path) => {{
            let request = decode(&mut body, version)?;
            let mut response = $handler(ctx, &header, request).await;
            crate::throttle::tell(&mut response, version, ctx.request_time(&header, started));
            Ok(Answer::Now(encode(key, &header, &response)))
        }};
    }
    // A handler that answers later: its throttle for request time is a mute alone.
    macro_rules! later {
        ($answer:expr) => {{
            let answer = $answer;
            ctx.request_time(&header, started);
            answer
        }};
    }
    match key {
        ApiKey::ApiVersions => now!(api_versions::handle),
        ApiKey::Metadata => now!(metadata::handle),
        ApiKey::Produce => produce::handle(ctx, &header, decode(&mut body, version)?, request_size, started).await,
        ApiKey::Fetch => Ok(fetch::handle(ctx, &header, decode(&mut body, version)?, started)),
        ApiKey::ListOffsets => now!(list_offsets::handle),
        ApiKey::OffsetForLeaderEpoch => now!(offset_for_leader_epoch::handle),
        ApiKey::FindCoordinator => now!(find_coordinator::handle),
        ApiKey::CreateTopics => now!(create_topics::handle),
        ApiKey::DeleteTopics => now!(delete_topics::handle),
        ApiKey::CreatePartitions => now!(create_partitions::handle),
        ApiKey::DeleteRecords => now!(delete_records::handle),
        ApiKey::DescribeCluster => now!(describe_cluster::handle),
        ApiKey::DescribeQuorum => now!(describe_quorum::handle),
        ApiKey::ListConfigResources => now!(config_resources::handle),
        ApiKey::DescribeTopicPartitions => now!(describe_topic_partitions::handle),
        ApiKey::DescribeAcls => now!(acls::describe),
        ApiKey::DescribeUserScramCredentials => now!(scram::describe),
        ApiKey::AlterUserScramCredentials => now!(scram::alter),
        ApiKey::CreateAcls => now!(acls::create),
        ApiKey::DeleteAcls => now!(acls::delete),
        ApiKey::DescribeLogDirs => now!(log_dirs::describe),
        ApiKey::AlterReplicaLogDirs => now!(log_dirs::alter_replica),
        ApiKey::ElectLeaders => now!(elect_leaders::elect),
        ApiKey::AlterPartitionReassignments => now!(reassignments::alter),
        ApiKey::ListPartitionReassignments => now!(reassignments::list),
        ApiKey::DescribeConfigs => now!(configs::describe),
        ApiKey::IncrementalAlterConfigs => now!(configs::incremental_alter),
        ApiKey::AlterConfigs => now!(configs::alter_legacy),
        ApiKey::JoinGroup => later!(Ok(groups::join(ctx, &header, decode(&mut body, version)?))),
        ApiKey::SyncGroup => later!(Ok(groups::sync(ctx, &header, decode(&mut body, version)?))),
        ApiKey::Heartbeat => now!(groups::heartbeat),
        ApiKey::LeaveGroup => now!(groups::leave),
        ApiKey::DescribeGroups => now!(groups::describe),
        ApiKey::ListGroups => now!(groups::list),
        ApiKey::ConsumerGroupHeartbeat => now!(consumer_groups::heartbeat),
        ApiKey::ConsumerGroupDescribe => now!(consumer_groups::describe),
        ApiKey::ShareGroupHeartbeat => now!(share_groups::heartbeat),
        ApiKey::ShareGroupDescribe => now!(share_groups::describe),
        ApiKey::ShareFetch => later!(Ok(share_fetch::fetch(ctx, &header, decode(&mut body, version)?))),
        ApiKey::ShareAcknowledge => later!(Ok(share_fetch::acknowledge(ctx, &header, decode(&mut body, version)?))),
        ApiKey::TxnShareAcknowledge => now!(share_fetch::txn_acknowledge),
        ApiKey::DescribeShareGroupOffsets => now!(share_groups::describe_offsets),
        ApiKey::AlterShareGroupOffsets => now!(share_groups::alter_offsets),
        ApiKey::DeleteShareGroupOffsets => now!(share_groups::delete_offsets),
        ApiKey::DeleteGroups => now!(groups::delete),
        ApiKey::OffsetDelete => now!(groups::delete_offsets),
        ApiKey::OffsetCommit => now!(offsets::commit),
        ApiKey::OffsetFetch => now!(offsets::fetch),
        ApiKey::InitProducerId => now!(producers::init_producer_id),
        ApiKey::DescribeProducers => now!(producers::describe_producers),
        ApiKey::AddPartitionsToTxn => now!(transactions::add_partitions_to_txn),
        ApiKey::AddOffsetsToTxn => now!(transactions::add_offsets_to_txn),
        ApiKey::EndTxn => now!(transactions::end_txn),
        ApiKey::WriteTxnMarkers => now!(transactions::write_txn_markers),
        ApiKey::TxnOffsetCommit => now!(transactions::txn_offset_commit),
        ApiKey::ListTransactions => now!(transactions::list_transactions),
        ApiKey::DescribeTransactions => now!(transactions::describe_transactions),
        ApiKey::DescribeClientQuotas => now!(quotas::describe),
        ApiKey::AlterClientQuotas => now!(quotas::alter),
        _ => Err(format!("no handler for {key:?}")),
    }
}

fn decode<T: Decodable>(body: &mut Bytes, version: i16) -> Result<T, String> {
    T::decode(body, version).map_err(|e| format!("undecodable request body: {e}"))
}

/// Encodes a response with its header. An encoding failure is a broker bug: it is logged and
/// the connection is closed rather than sent a malformed answer.
pub fn encode<T: Encodable + errors::ErrorCodes>(key: ApiKey, header: &RequestHeader, body: &T) -> Response {
    let version = header.request_api_version;
    let mut buf = BytesMut::new();
    let response_header = ResponseHeader::default().with_correlation_id(header.correlation_id);
    let encoded = response_header
        .encode(&mut buf, key.response_header_version(version))
        .and_then(|_| body.encode(&mut buf, version));
    match encoded {
        Ok(()) => Response::Frame(buf.freeze(), errors::of(body)),
        Err(e) => {
            tracing::error!(api = ?key, version, error = %e, "cannot encode response: closing the connection");
            Response::Close
        }
    }
}

/// A response header for hand-encoded bodies (versions the message crate does not cover).
fn raw_header(correlation_id: i32) -> BytesMut {
    let mut buf = BytesMut::new();
    buf.put_i32(correlation_id);
    buf
}

/// The partitions of a request that do not exist, once the files of topics this broker does
/// not know yet have been read (a peer may have just created them). Apache checks offset
/// commits against its metadata the same way and answers UNKNOWN_TOPIC_OR_PARTITION for each.
pub async fn unknown_partitions<E: Env>(
    ctx: &Context<E>,
    wanted: Vec<(String, i32)>,
) -> std::collections::BTreeSet<(String, i32)> {
    ctx.broker.topics.refresh(wanted.iter().map(|(t, _)| t.as_str())).await;
    let snapshot = ctx.broker.topics.snapshot();
    wanted.into_iter().filter(|(t, p)| snapshot.partition(t, *p).is_none()).collect()
}

/// OffsetCommit v10, OffsetFetch v10 and TxnOffsetCommit v6 name their topics by id (KIP-848,
/// KIP-1319); their handlers key everything by name. Each id is resolved to its topic's name in
/// place, once a peer's new topics have been read; an id no topic has gets `unknown_id_name`'s
/// name, which no topic can have, so that it is answered UNKNOWN_TOPIC_ID and nothing else.
pub async fn resolve_topic_ids<'a, E: Env>(
    ctx: &Context<E>,
    topics: impl IntoIterator<Item = (&'a mut TopicName, &'a uuid::Uuid)>,
) {
    let topics: Vec<_> = topics.into_iter().collect();
    ctx.broker.topics.refresh_ids(topics.iter().map(|(_, id)| id.as_bytes())).await;
    let snapshot = ctx.broker.topics.snapshot();
    for (name, id) in topics {
        *name = match snapshot.names_by_id.get(id.as_bytes()) {
            Some(known) => topic(known),
            None => topic(&unknown_id_name(id)),
        };
    }
}

/// The name `resolve_topic_ids` gives an id no topic has: '!' is not allowed in topic names.
pub fn unknown_id_name(id: &uuid::Uuid) -> String {
    format!("!{id}")
}

/// Whether `name` is one `resolve_topic_ids` gave an unknown id.
pub fn is_unknown_id(name: &str) -> bool {
    name.starts_with('!')
}

/// A topic's id by name, for answers that name topics by id; the zero id for one unknown.
pub fn topic_id_of<E: Env>(ctx: &Context<E>, name: &str) -> uuid::Uuid {
    let snapshot = ctx.broker.topics.snapshot();
    snapshot.topics.get(name).map_or(uuid::Uuid::nil(), |t| uuid(t.meta.topic_id))
}

pub fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn topic(s: &str) -> TopicName {
    TopicName(text(s))
}

pub fn uuid(id: [u8; 16]) -> uuid::Uuid {
    uuid::Uuid::from_bytes(id)
}

/// Every live broker as a client on `listener` is told of it, in broker id order (those without
/// that listener left out, as Apache leaves them out): Metadata and DescribeCluster list the
/// same brokers.
pub fn live_brokers<T>(
    view: &kaas_core::cluster::ClusterView,
    listener: &str,
    make: impl Fn(kafka_protocol::messages::BrokerId, StrBytes, i32) -> T,
) -> Vec<T> {
    view.live
        .values()
        .filter_map(|p| {
            let (host, port) = p.address_for(listener)?;
            Some(make(kafka_protocol::messages::BrokerId(p.broker_id), text(host), port))
        })
        .collect()
}

/// The broker named as controller: the lowest live broker id, the same from every broker. kaas
/// has no controller; any broker serves admin requests.
pub fn controller_id(view: &kaas_core::cluster::ClusterView) -> i32 {
    view.live.keys().next().copied().unwrap_or(view.me)
}
