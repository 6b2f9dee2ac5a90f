//! The wire client of `kaas_core::txn::peers`: what this broker asks of its peers, sent
//! as the Kafka requests Apache's brokers send each other. Markers go as WriteTxnMarkers (v1),
//! verification as AddPartitionsToTxn (v4, verify_only), KIP-1289's member check as
//! ShareGroupDescribe (v1) of the member's group.
//!
//! One link task per peer endpoint holds one connection, proves on it that this broker is one
//! of the cluster's (KAAS-BROKER, `broker_auth.rs`), and pipelines calls on it, as Kafka
//! clients do: a peer answers in request order. A connection that fails, or whose oldest call
//! is not answered within `PEER_REQUEST_TIMEOUT_MS`, is dropped with every call on it failed;
//! the callers retry (a marker written twice ends nothing twice). The next call reconnects. A
//! link idle without a connection for `LINK_IDLE_MS` ends, and is dropped from the map.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kaas_core::cluster::broker_auth::BrokerSecret;
use kaas_core::env::{Clock, Env, Net, Spawner};
use kaas_core::participant::{Join, Participant};
use kaas_core::txn::peers::{self, Endpoint, Markers, PeerCall};
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use crate::api::{text, topic};
use crate::error;
use crate::frame;
use crate::server::{Accepted, PeerHandshake, ShutdownSignal};

/// How long a peer has to answer a call, a marker's fsync included.
const PEER_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Calls on one connection before the next waits for an answer.
const IN_FLIGHT_MAX: usize = 64;
/// Calls waiting for one peer's link before callers are told to retry.
const LINK_QUEUE_MAX: usize = 256;
/// A link without a connection and without calls for this long ends: endpoints of peers
/// gone or restarted elsewhere do not pile up.
const LINK_IDLE_MS: u64 = 300_000;
/// The largest answer a peer sends to these calls.
const RESPONSE_BYTES_MAX: usize = 16 << 20;
const WRITE_TXN_MARKERS_VERSION: i16 = 1;
const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 4;
const SHARE_GROUP_DESCRIBE_VERSION: i16 = 1;
const ALTER_SHARE_GROUP_OFFSETS_VERSION: i16 = 0;
const DESCRIBE_SHARE_GROUP_OFFSETS_VERSION: i16 = 1;
const PRODUCE_VERSION: i16 = 9;
const LIST_OFFSETS_VERSION: i16 = 7;

/// One call as a link sends it: the encoded request and what to do with the answer's body
/// (`None`: no answer came).
struct Job {
    key: ApiKey,
    version: i16,
    encode: Encode,
    answer: Box<dyn FnOnce(Option<Bytes>) + Send>,
}

/// Serves the calls of `kaas_core::txn::peers` until shutdown.
pub async fn serve<E: Env>(
    env: E,
    me: Me,
    handshake: Option<PeerHandshake<Accepted<E>>>,
    mut calls: mpsc::Receiver<PeerCall>,
    mut shutdown: ShutdownSignal,
) {
    let mut links: BTreeMap<Endpoint, mpsc::Sender<Job>> = BTreeMap::new();
    loop {
        let call = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => return,
            call = calls.recv() => match call {
                Some(call) => call,
                None => return,
            },
        };
        let (to, job) = job_of(call);
        // Links that ended idle go; a call for one of them gets a new link.
        links.retain(|_, link| !link.is_closed());
        let link = links.entry(to.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(LINK_QUEUE_MAX);
            env.spawner().spawn("peer-link", link(env.clone(), to.clone(), me.clone(), handshake.clone(), rx));
            tx
        });
        // A full link means the peer is slow or gone, and a link that ended idle just now
        // drops the call: either way the caller's receiver fails, and it retries.
        let _ = link.try_send(job);
    }
}

fn job_of(call: PeerCall) -> (Endpoint, Job) {
    match call {
        PeerCall::WriteMarkers { to, markers, reply } => (to, write_markers(markers, reply)),
        PeerCall::Fence { to, producer_id, producer_epoch, reply } => (to, fence(producer_id, producer_epoch, reply)),
        PeerCall::Verify { to, transactional_id, producer_id, producer_epoch, member, join, reply } => {
            (to, verify(transactional_id, producer_id, producer_epoch, member, join, reply))
        }
        PeerCall::CheckShareMember { to, group_id, member_id, member_epoch, reply } => {
            (to, check_share_member(group_id, member_id, member_epoch, reply))
        }
        PeerCall::ResetShare { to, group_id, topic, partition, start_offset, reply } => {
            (to, reset_share(group_id, topic, partition, start_offset, reply))
        }
        PeerCall::DescribeShare { to, group_id, topic, partition, reply } => {
            (to, describe_share(group_id, topic, partition, reply))
        }
        PeerCall::Produce { to, topic, partition, records, reply } => (to, produce(topic, partition, records, reply)),
        PeerCall::HighWatermarks { to, partitions, reply } => (to, high_watermarks(partitions, reply)),
    }
}

/// ListOffsets (latest, read_uncommitted) of partitions the peer owns: their high watermarks.
fn high_watermarks(partitions: Vec<(String, i32)>, reply: oneshot::Sender<Vec<((String, i32), i64)>>) -> Job {
    use list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let mut topics: Vec<ListOffsetsTopic> = Vec::new();
    for (name, p) in partitions {
        let partition = ListOffsetsPartition::default().with_partition_index(p).with_timestamp(-1);
        match topics.last_mut().filter(|t| t.name.0.as_str() == name) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(ListOffsetsTopic::default().with_name(topic(&name)).with_partitions(vec![partition])),
        }
    }
    let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(topics);
    Job {
        key: ApiKey::ListOffsets,
        version: LIST_OFFSETS_VERSION,
        encode: encoder(request, LIST_OFFSETS_VERSION),
        answer: Box::new(move |body| {
            let response: Option<ListOffsetsResponse> = body.and_then(|b| decode(b, LIST_OFFSETS_VERSION));
            let ends = response.map_or_else(Vec::new, |r| {
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
                    .filter(|(_, p)| p.error_code == 0)
                    .map(|(t, p)| ((t.name.0.to_string(), p.partition_index), p.offset))
                    .collect()
            });
            let _ = reply.send(ends);
        }),
    }
}

/// A Produce (acks=-1) of one batch to one partition the peer owns: a share group's dead
/// letters (KIP-1191), as Apache's brokers send them to the queue partition's leader.
fn produce(topic_name: String, partition: i32, records: Bytes, reply: oneshot::Sender<CoreResult<()>>) -> Job {
    use produce_request::{PartitionProduceData, TopicProduceData};
    let data = PartitionProduceData::default().with_index(partition).with_records(Some(records));
    let request =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(PEER_REQUEST_TIMEOUT_MS as i32).with_topic_data(vec![
            TopicProduceData::default().with_name(topic(&topic_name)).with_partition_data(vec![data]),
        ]);
    Job {
        key: ApiKey::Produce,
        version: PRODUCE_VERSION,
        encode: encoder(request, PRODUCE_VERSION),
        answer: Box::new(move |body| {
            let response: Option<ProduceResponse> = body.and_then(|b| decode(b, PRODUCE_VERSION));
            let code = response
                .and_then(|r| r.responses.iter().flat_map(|t| &t.partition_responses).map(|p| p.error_code).next());
            let _ = reply.send(code.map_or(Err(CoreError::NotLeaderOrFollower), error::from_code));
        }),
    }
}

fn write_markers(markers: Markers, reply: oneshot::Sender<Vec<(Participant, CoreResult<()>)>>) -> Job {
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for member in &markers.participants {
        let (name, partition) = peers::member_on_wire(member);
        match topics.iter_mut().find(|t| t.name.0.as_str() == name) {
            Some(t) => t.partition_indexes.push(partition),
            None => topics.push(
                WritableTxnMarkerTopic::default().with_name(topic(&name)).with_partition_indexes(vec![partition]),
            ),
        }
    }
    let request = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(markers.producer_id))
            .with_producer_epoch(markers.producer_epoch)
            .with_transaction_result(markers.commit)
            .with_coordinator_epoch(markers.coordinator_epoch)
            .with_topics(topics),
    ]);
    let members = markers.participants;
    Job {
        key: ApiKey::WriteTxnMarkers,
        version: WRITE_TXN_MARKERS_VERSION,
        encode: encoder(request, WRITE_TXN_MARKERS_VERSION),
        answer: Box::new(move |body| {
            let response: Option<WriteTxnMarkersResponse> = body.and_then(|b| decode(b, WRITE_TXN_MARKERS_VERSION));
            let codes: Vec<(String, i32, i16)> = response
                .into_iter()
                .flat_map(|r| r.markers)
                .flat_map(|m| m.topics)
                .flat_map(|t| {
                    let name = t.name.0.to_string();
                    t.partitions.into_iter().map(move |p| (name.clone(), p.partition_index, p.error_code))
                })
                .collect();
            let answers = members
                .into_iter()
                .map(|member| {
                    let (name, partition) = peers::member_on_wire(&member);
                    let code = codes.iter().find(|(n, p, _)| *n == name && *p == partition).map(|c| c.2);
                    (member, code.map_or(Err(CoreError::CoordinatorNotAvailable), error::from_code))
                })
                .collect();
            let _ = reply.send(answers);
        }),
    }
}

/// A fence as a marker naming no partition (`kaas_core::txn::peers`).
fn fence(producer_id: i64, producer_epoch: i16, reply: oneshot::Sender<CoreResult<()>>) -> Job {
    let request = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_transaction_result(false),
    ]);
    Job {
        key: ApiKey::WriteTxnMarkers,
        version: WRITE_TXN_MARKERS_VERSION,
        encode: encoder(request, WRITE_TXN_MARKERS_VERSION),
        answer: Box::new(move |body| {
            let answered = body.and_then(|b| decode::<WriteTxnMarkersResponse>(b, WRITE_TXN_MARKERS_VERSION));
            let _ = reply.send(answered.map(|_| ()).ok_or(CoreError::CoordinatorNotAvailable));
        }),
    }
}

fn verify(
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    member: Participant,
    join: Join,
    reply: oneshot::Sender<CoreResult<()>>,
) -> Job {
    let (name, partition) = peers::member_on_wire(&member);
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(text(&transactional_id)))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_verify_only(join == Join::Verify)
            .with_topics(vec![
                AddPartitionsToTxnTopic::default().with_name(topic(&name)).with_partitions(vec![partition]),
            ]),
    ]);
    Job {
        key: ApiKey::AddPartitionsToTxn,
        version: ADD_PARTITIONS_TO_TXN_VERSION,
        encode: encoder(request, ADD_PARTITIONS_TO_TXN_VERSION),
        answer: Box::new(move |body| {
            let response: Option<AddPartitionsToTxnResponse> =
                body.and_then(|b| decode(b, ADD_PARTITIONS_TO_TXN_VERSION));
            let result = match response {
                None => Err(CoreError::CoordinatorNotAvailable),
                Some(r) if r.error_code != 0 => error::from_code(r.error_code),
                Some(r) => {
                    let code = r
                        .results_by_transaction
                        .iter()
                        .flat_map(|t| &t.topic_results)
                        .flat_map(|t| &t.results_by_partition)
                        .map(|p| p.partition_error_code)
                        .next();
                    code.map_or(Err(CoreError::CoordinatorNotAvailable), error::from_code)
                }
            };
            let _ = reply.send(result);
        }),
    }
}

/// KIP-1289's member check as a ShareGroupDescribe of the group (v1): the member must be in it
/// at the epoch given (an older one is stale, a newer one fenced).
fn check_share_member(
    group_id: String,
    member_id: String,
    member_epoch: Option<i32>,
    reply: oneshot::Sender<CoreResult<()>>,
) -> Job {
    let request = ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(text(&group_id))]);
    Job {
        key: ApiKey::ShareGroupDescribe,
        version: SHARE_GROUP_DESCRIBE_VERSION,
        encode: encoder(request, SHARE_GROUP_DESCRIBE_VERSION),
        answer: Box::new(move |body| {
            let response: Option<ShareGroupDescribeResponse> =
                body.and_then(|b| decode(b, SHARE_GROUP_DESCRIBE_VERSION));
            let result = match response.and_then(|r| r.groups.into_iter().next()) {
                None => Err(CoreError::CoordinatorNotAvailable),
                Some(g) if g.error_code != 0 => error::from_code(g.error_code),
                Some(g) => match g.members.iter().find(|m| m.member_id.as_str() == member_id) {
                    None => Err(CoreError::UnknownMemberId),
                    Some(m) => match member_epoch {
                        None => Ok(()),
                        Some(e) if m.member_epoch == e => Ok(()),
                        Some(e) if m.member_epoch > e => Err(CoreError::StaleMemberEpoch),
                        Some(_) => Err(CoreError::FencedMemberEpoch),
                    },
                },
            };
            let _ = reply.send(result);
        }),
    }
}

/// A share partition's reset as AlterShareGroupOffsets (v0) of that one partition to its owner,
/// which, not coordinating the group, applies it to what it owns. A start offset of -1 (no
/// client's: Apache refuses it) forgets the share partition (DeleteShareGroupOffsets).
fn reset_share(
    group_id: String,
    topic_name: String,
    partition: i32,
    start_offset: Option<i64>,
    reply: oneshot::Sender<CoreResult<()>>,
) -> Job {
    use alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
    };
    let partitions = vec![
        AlterShareGroupOffsetsRequestPartition::default()
            .with_partition_index(partition)
            .with_start_offset(start_offset.unwrap_or(crate::api::FORGET_SHARE_PARTITION)),
    ];
    let request = AlterShareGroupOffsetsRequest::default().with_group_id(GroupId(text(&group_id))).with_topics(vec![
        AlterShareGroupOffsetsRequestTopic::default().with_topic_name(topic(&topic_name)).with_partitions(partitions),
    ]);
    Job {
        key: ApiKey::AlterShareGroupOffsets,
        version: ALTER_SHARE_GROUP_OFFSETS_VERSION,
        encode: encoder(request, ALTER_SHARE_GROUP_OFFSETS_VERSION),
        answer: Box::new(move |body| {
            let response: Option<AlterShareGroupOffsetsResponse> =
                body.and_then(|b| decode(b, ALTER_SHARE_GROUP_OFFSETS_VERSION));
            let result = match response {
                None => Err(CoreError::CoordinatorNotAvailable),
                Some(r) if r.error_code != 0 => error::from_code(r.error_code),
                Some(r) => {
                    let code = r.responses.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next();
                    code.map_or(Err(CoreError::CoordinatorNotAvailable), error::from_code)
                }
            };
            let _ = reply.send(result);
        }),
    }
}

/// DescribeShareGroupOffsets of one partition, asked of its owner, which answers for the share
/// partitions it owns whoever coordinates the group.
fn describe_share(
    group_id: String,
    topic_name: String,
    partition: i32,
    reply: oneshot::Sender<CoreResult<Option<kaas_core::partition::share::ShareOffsets>>>,
) -> Job {
    use describe_share_group_offsets_request::{
        DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
    };
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default().with_group_id(GroupId(text(&group_id))).with_topics(Some(
            vec![
                DescribeShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(topic(&topic_name))
                    .with_partitions(vec![partition]),
            ],
        )),
    ]);
    Job {
        key: ApiKey::DescribeShareGroupOffsets,
        version: DESCRIBE_SHARE_GROUP_OFFSETS_VERSION,
        encode: encoder(request, DESCRIBE_SHARE_GROUP_OFFSETS_VERSION),
        answer: Box::new(move |body| {
            let response: Option<DescribeShareGroupOffsetsResponse> =
                body.and_then(|b| decode(b, DESCRIBE_SHARE_GROUP_OFFSETS_VERSION));
            let result = match response.and_then(|r| r.groups.into_iter().next()) {
                None => Err(CoreError::CoordinatorNotAvailable),
                Some(g) if g.error_code != 0 => error::from_code(g.error_code).map(|()| None),
                Some(g) => match g.topics.iter().flat_map(|t| &t.partitions).next() {
                    None => Err(CoreError::CoordinatorNotAvailable),
                    Some(p) if p.error_code != 0 => error::from_code(p.error_code).map(|()| None),
                    Some(p) if p.start_offset < 0 => Ok(None),
                    Some(p) => {
                        Ok(Some(kaas_core::partition::share::ShareOffsets { start_offset: p.start_offset, lag: p.lag }))
                    }
                },
            };
            let _ = reply.send(result);
        }),
    }
}

fn encoder<R: Encodable + Send + 'static>(request: R, version: i16) -> Encode {
    Box::new(move |out| request.encode(out, version).map_err(|e| e.to_string()))
}

fn decode<R: Decodable>(mut body: Bytes, version: i16) -> Option<R> {
    R::decode(&mut body, version).ok()
}

/// A call on the wire, waiting for its answer.
struct InFlight {
    correlation_id: i32,
    key: ApiKey,
    version: i16,
    deadline: tokio::time::Instant,
    answer: Box<dyn FnOnce(Option<Bytes>) + Send>,
}

/// Who this broker is to its peers: its id, the client id its calls carry, and the cluster's
/// secret it proves itself with.
#[derive(Clone)]
pub struct Me {
    broker_id: i32,
    client_id: String,
    secret: Arc<BrokerSecret>,
}

impl Me {
    pub fn new(broker_id: i32, secret: Arc<BrokerSecret>) -> Me {
        Me { broker_id, client_id: peers::client_id(broker_id), secret }
    }
}

/// One peer's connection: connects on the first call, proves this broker is one of the
/// cluster's (KAAS-BROKER), pipelines, and on any failure drops the connection and fails what
/// was on it.
async fn link<E: Env>(
    env: E,
    to: Endpoint,
    me: Me,
    handshake: Option<PeerHandshake<Accepted<E>>>,
    mut jobs: mpsc::Receiver<Job>,
) {
    let client_id = &me.client_id;
    let mut correlation_id = 0i32;
    loop {
        let first = tokio::select! {
            biased;
            job = jobs.recv() => job,
            _ = env.clock().sleep_ms(LINK_IDLE_MS) => None,
        };
        let Some(first) = first else { return };
        let Ok(port) = u16::try_from(to.port) else {
            (first.answer)(None);
            continue;
        };
        let connect = async {
            let stream = env.net().connect(&to.host, port).await?;
            match &handshake {
                None => Ok(Box::new(stream) as Box<dyn crate::server::Stream>),
                Some(handshake) => handshake(stream, to.host.clone()).await,
            }
        };
        let stream = tokio::select! {
            biased;
            connected = connect => connected.map_err(|e| tracing::debug!(broker = to.broker_id, error = %e, "cannot connect to a peer")).ok(),
            _ = env.clock().sleep_ms(PEER_REQUEST_TIMEOUT_MS) => None,
        };
        let Some(stream) = stream else {
            tracing::debug!(broker = to.broker_id, host = %to.host, port, "peer unreachable");
            (first.answer)(None);
            continue;
        };
        let (mut reader, mut writer) = tokio::io::split(stream);
        // The reader task ends when `closed` is dropped: the connection is given up.
        let (frames_tx, mut frames) = mpsc::channel::<Bytes>(IN_FLIGHT_MAX);
        let (closed, mut closed_rx) = oneshot::channel::<()>();
        env.spawner().spawn("peer-link-reader", async move {
            loop {
                let read = tokio::select! {
                    biased;
                    _ = &mut closed_rx => return,
                    read = frame::read_frame(&mut reader, RESPONSE_BYTES_MAX) => read,
                };
                let Ok(f) = read else { return };
                if frames_tx.send(f).await.is_err() {
                    return;
                }
            }
        });
        let proof = crate::broker_auth::prove(
            &mut writer,
            &mut frames,
            &mut correlation_id,
            client_id,
            me.broker_id,
            &me.secret,
        );
        let proven = tokio::select! {
            biased;
            proven = proof => proven,
            _ = env.clock().sleep_ms(PEER_REQUEST_TIMEOUT_MS) => Err("no answer in time".to_string()),
        };
        if let Err(why) = proven {
            tracing::warn!(broker = to.broker_id, host = %to.host, port, why = %why, "cannot authenticate to a peer");
            drop(closed);
            (first.answer)(None);
            continue;
        }
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        let mut next = Some(first);
        loop {
            if let Some(Job { key, version, encode, answer }) = next.take() {
                correlation_id = correlation_id.wrapping_add(1);
                let Some(bytes) = request_frame(key, version, encode, correlation_id, client_id) else {
                    answer(None);
                    continue;
                };
                let deadline = env.clock().monotonic() + Duration::from_millis(PEER_REQUEST_TIMEOUT_MS);
                in_flight.push_back(InFlight { correlation_id, key, version, deadline, answer });
                if writer.write_all(&bytes).await.is_err() {
                    break;
                }
            }
            let deadline = in_flight.front().map(|f| f.deadline);
            tokio::select! {
                biased;
                // Watched when idle too: a peer that closed is noticed before the next call.
                frame = frames.recv() => {
                    let Some(mut frame) = frame else { break };
                    let Some(call) = in_flight.pop_front() else { break };
                    let header = ResponseHeader::decode(&mut frame, call.key.response_header_version(call.version));
                    if !header.is_ok_and(|h| h.correlation_id == call.correlation_id) {
                        tracing::warn!(broker = to.broker_id, "peer answered out of order; reconnecting");
                        (call.answer)(None);
                        break;
                    }
                    (call.answer)(Some(frame));
                }
                job = jobs.recv(), if in_flight.len() < IN_FLIGHT_MAX => match job {
                    Some(job) => next = Some(job),
                    None => break,
                },
                _ = env.clock().sleep_until(deadline.unwrap_or_else(|| env.clock().monotonic())), if deadline.is_some() => {
                    tracing::debug!(broker = to.broker_id, "peer did not answer in time; reconnecting");
                    break;
                }
            }
        }
        drop(closed);
        for call in in_flight {
            (call.answer)(None);
        }
    }
}

type Encode = Box<dyn FnOnce(&mut BytesMut) -> Result<(), String> + Send>;

fn request_frame(key: ApiKey, version: i16, encode: Encode, correlation_id: i32, client_id: &str) -> Option<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(text(client_id)));
    // Each API's own: a flexible version's header carries tagged fields.
    let header_version = key.request_header_version(version);
    let mut body = BytesMut::new();
    header.encode(&mut body, header_version).ok()?;
    encode(&mut body).ok()?;
    Some(frame::frame(&body))
}
