//! Entry points for fuzzing what a broker reads before it trusts anyone: request frames, the
//! request decoders of every API kaas serves (and the record batches of a Produce), and the
//! SASL state machine before authentication. Each takes arbitrary bytes and must neither panic
//! nor hang nor allocate beyond its input's bounds; the fuzz targets (`fuzz/`, cargo-fuzz) and
//! the bounded run in the test suite (`kaas-server/tests/fuzz.rs`) call them.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::sasl::{Auth, Mechanisms, Verdict};

/// The largest frame the fuzzed readers accept: small, so that a size prefix cannot make a
/// fuzz run allocate much (the broker's own bound is `socket.request.max.bytes`).
const FRAME_MAX: usize = 1 << 16;

/// Polls a future that never waits on anything but its input (a byte slice reader) to its end.
fn run<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Reads frames from `data` as a connection would, until the reader stops.
pub fn frames(data: &[u8]) {
    let mut reader = data;
    let max = data.first().map_or(FRAME_MAX, |b| usize::from(*b) << 8).min(FRAME_MAX);
    for _ in 0..=data.len() {
        match run(crate::frame::read_frame(&mut reader, max)) {
            Ok(frame) => assert!(frame.len() <= max, "a frame above its bound"),
            Err(_) => return,
        }
    }
    panic!("more frames than bytes");
}

/// Decodes `data` as a request frame's body as the dispatcher does: its header by the API's
/// header version, then its body by the API's decoder; a Produce's records are split into
/// batches as the partition checks them.
pub fn request(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let key = i16::from_be_bytes([data[0], data[1]]);
    let version = i16::from_be_bytes([data[2], data[3]]);
    let Ok(api) = ApiKey::try_from(key) else { return };
    let Some((min, max)) = crate::api::supported(api) else { return };
    let mut body = Bytes::copy_from_slice(data);
    let header_version = api.request_header_version(version.clamp(min.max(0), max));
    if RequestHeader::decode(&mut body, header_version).is_err() || !(min..=max).contains(&version) {
        return;
    }
    if api == ApiKey::Produce {
        if let Ok(produce) = ProduceRequest::decode(&mut body, version) {
            let records = produce.topic_data.iter().flat_map(|t| &t.partition_data).filter_map(|p| p.records.as_ref());
            for records in records {
                let _ = kaas_core::partition::log::batch::split_produced(records);
            }
        }
        return;
    }
    decode_body(api, &mut body, version);
}

fn decoded<T: Decodable>(body: &mut Bytes, version: i16) {
    let _ = T::decode(body, version);
}

/// The body decoder of every API kaas serves (`api::SUPPORTED`) but Produce (`request`
/// decodes it itself, for its batches).
fn decode_body(api: ApiKey, body: &mut Bytes, version: i16) {
    match api {
        ApiKey::Fetch => decoded::<FetchRequest>(body, version),
        ApiKey::ListOffsets => decoded::<ListOffsetsRequest>(body, version),
        ApiKey::Metadata => decoded::<MetadataRequest>(body, version),
        ApiKey::OffsetCommit => decoded::<OffsetCommitRequest>(body, version),
        ApiKey::OffsetFetch => decoded::<OffsetFetchRequest>(body, version),
        ApiKey::FindCoordinator => decoded::<FindCoordinatorRequest>(body, version),
        ApiKey::JoinGroup => decoded::<JoinGroupRequest>(body, version),
        ApiKey::Heartbeat => decoded::<HeartbeatRequest>(body, version),
        ApiKey::LeaveGroup => decoded::<LeaveGroupRequest>(body, version),
        ApiKey::SyncGroup => decoded::<SyncGroupRequest>(body, version),
        ApiKey::DescribeGroups => decoded::<DescribeGroupsRequest>(body, version),
        ApiKey::ListGroups => decoded::<ListGroupsRequest>(body, version),
        ApiKey::ApiVersions => decoded::<ApiVersionsRequest>(body, version),
        ApiKey::SaslHandshake => decoded::<SaslHandshakeRequest>(body, version),
        ApiKey::SaslAuthenticate => decoded::<SaslAuthenticateRequest>(body, version),
        ApiKey::DescribeUserScramCredentials => decoded::<DescribeUserScramCredentialsRequest>(body, version),
        ApiKey::AlterUserScramCredentials => decoded::<AlterUserScramCredentialsRequest>(body, version),
        ApiKey::CreateTopics => decoded::<CreateTopicsRequest>(body, version),
        ApiKey::DeleteTopics => decoded::<DeleteTopicsRequest>(body, version),
        ApiKey::DeleteRecords => decoded::<DeleteRecordsRequest>(body, version),
        ApiKey::DescribeConfigs => decoded::<DescribeConfigsRequest>(body, version),
        ApiKey::AlterConfigs => decoded::<AlterConfigsRequest>(body, version),
        ApiKey::CreatePartitions => decoded::<CreatePartitionsRequest>(body, version),
        ApiKey::DeleteGroups => decoded::<DeleteGroupsRequest>(body, version),
        ApiKey::OffsetDelete => decoded::<OffsetDeleteRequest>(body, version),
        ApiKey::IncrementalAlterConfigs => decoded::<IncrementalAlterConfigsRequest>(body, version),
        ApiKey::DescribeCluster => decoded::<DescribeClusterRequest>(body, version),
        ApiKey::InitProducerId => decoded::<InitProducerIdRequest>(body, version),
        ApiKey::DescribeProducers => decoded::<DescribeProducersRequest>(body, version),
        ApiKey::AddPartitionsToTxn => decoded::<AddPartitionsToTxnRequest>(body, version),
        ApiKey::AddOffsetsToTxn => decoded::<AddOffsetsToTxnRequest>(body, version),
        ApiKey::EndTxn => decoded::<EndTxnRequest>(body, version),
        ApiKey::WriteTxnMarkers => decoded::<WriteTxnMarkersRequest>(body, version),
        ApiKey::TxnOffsetCommit => decoded::<TxnOffsetCommitRequest>(body, version),
        ApiKey::ListTransactions => decoded::<ListTransactionsRequest>(body, version),
        ApiKey::DescribeTransactions => decoded::<DescribeTransactionsRequest>(body, version),
        ApiKey::OffsetForLeaderEpoch => decoded::<OffsetForLeaderEpochRequest>(body, version),
        ApiKey::DescribeTopicPartitions => decoded::<DescribeTopicPartitionsRequest>(body, version),
        ApiKey::DescribeAcls => decoded::<DescribeAclsRequest>(body, version),
        ApiKey::CreateAcls => decoded::<CreateAclsRequest>(body, version),
        ApiKey::DeleteAcls => decoded::<DeleteAclsRequest>(body, version),
        ApiKey::DescribeLogDirs => decoded::<DescribeLogDirsRequest>(body, version),
        ApiKey::AlterReplicaLogDirs => decoded::<AlterReplicaLogDirsRequest>(body, version),
        ApiKey::ElectLeaders => decoded::<ElectLeadersRequest>(body, version),
        ApiKey::DescribeQuorum => decoded::<DescribeQuorumRequest>(body, version),
        ApiKey::ListConfigResources => decoded::<ListConfigResourcesRequest>(body, version),
        ApiKey::AlterPartitionReassignments => decoded::<AlterPartitionReassignmentsRequest>(body, version),
        ApiKey::ListPartitionReassignments => decoded::<ListPartitionReassignmentsRequest>(body, version),
        ApiKey::ConsumerGroupHeartbeat => decoded::<ConsumerGroupHeartbeatRequest>(body, version),
        ApiKey::ConsumerGroupDescribe => decoded::<ConsumerGroupDescribeRequest>(body, version),
        ApiKey::ShareGroupHeartbeat => decoded::<ShareGroupHeartbeatRequest>(body, version),
        ApiKey::ShareGroupDescribe => decoded::<ShareGroupDescribeRequest>(body, version),
        ApiKey::ShareFetch => decoded::<ShareFetchRequest>(body, version),
        ApiKey::ShareAcknowledge => decoded::<ShareAcknowledgeRequest>(body, version),
        ApiKey::TxnShareAcknowledge => decoded::<TxnShareAcknowledgeRequest>(body, version),
        ApiKey::DescribeShareGroupOffsets => decoded::<DescribeShareGroupOffsetsRequest>(body, version),
        ApiKey::AlterShareGroupOffsets => decoded::<AlterShareGroupOffsetsRequest>(body, version),
        ApiKey::DeleteShareGroupOffsets => decoded::<DeleteShareGroupOffsetsRequest>(body, version),
        ApiKey::DescribeClientQuotas => decoded::<DescribeClientQuotasRequest>(body, version),
        ApiKey::AlterClientQuotas => decoded::<AlterClientQuotasRequest>(body, version),
        _ => {}
    }
}

fn sasl_frame<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &T) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, key.request_header_version(version)).expect("a header encodes");
    body.encode(&mut buf, version).expect("a request encodes");
    buf.freeze()
}

/// Drives a SASL listener's authentication with `data`: its first byte picks one of
/// `mechanisms`' enabled mechanisms (or none, and the bytes go in raw); then each chunk (a
/// length byte, then that many bytes) is either a whole raw frame or, mostly, the auth bytes
/// of a well-formed SaslAuthenticate, so that the mechanisms' own parsers are reached.
pub fn sasl(mechanisms: Arc<dyn Mechanisms>, data: &[u8]) {
    let Some((&pick, mut rest)) = data.split_first() else { return };
    let enabled = mechanisms.enabled();
    let mut auth = Auth::new(Some(mechanisms), None).with_max_reauth_ms(i64::from(pick & 0x0f) * 100);
    let mut correlation_id = 0;
    if let Some(mechanism) = enabled.get(usize::from(pick >> 4)) {
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.clone()));
        let verdict = auth.check(&sasl_frame(ApiKey::SaslHandshake, 1, correlation_id, &handshake), 0);
        assert!(matches!(verdict, Verdict::Answer(_)), "an enabled mechanism's handshake is answered");
    }
    let mut now_ms = 0;
    while let Some((&len, tail)) = rest.split_first() {
        let (chunk, tail) = tail.split_at(usize::from(len & 0x7f).min(tail.len()));
        rest = tail;
        correlation_id += 1;
        now_ms += 50;
        let frame = match len & 0x80 {
            0 => {
                let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(chunk));
                sasl_frame(ApiKey::SaslAuthenticate, 2, correlation_id, &request)
            }
            _ => Bytes::copy_from_slice(chunk),
        };
        match auth.check(&frame, now_ms) {
            Verdict::Close(_) | Verdict::Refuse(..) => return,
            Verdict::Serve => {
                // Before authentication only ApiVersions goes on (and what dispatch refuses).
                let api_versions = frame.len() >= 2 && frame[..2] == (ApiKey::ApiVersions as i16).to_be_bytes();
                assert!(auth.is_authenticated() || api_versions || frame.len() < 4, "served before authentication");
            }
            Verdict::Answer(_) => {}
        }
    }
}
