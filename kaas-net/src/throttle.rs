//! Throttling by client quotas (KIP-13, KIP-124, KIP-219), the connection's side. A request
//! over its client's quota is answered at once with `throttle_time_ms`, and the connection is
//! muted for that long: the next request read waits until then, as Apache stops reading a
//! throttled channel. The quotas and rates are kaas-core's (`Broker::record_quota`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use kaas_core::broker::quotas::QuotaClient;
use kaas_core::env::{Clock, Env};
use kaas_core::quota::QuotaKey;
use kafka_protocol::messages::*;

use crate::connection::Context;

/// Until when a connection is muted, in the env clock's milliseconds. Shared with the
/// deferred answers (a fetch learns its throttle only once it has its records).
#[derive(Debug, Clone, Default)]
pub struct Mute(Arc<AtomicI64>);

impl Mute {
    /// Mutes until `ms` after `now_ms`, unless already muted longer.
    pub fn extend(&self, now_ms: i64, ms: u64) {
        if ms > 0 {
            self.0.fetch_max(now_ms.saturating_add(ms as i64), Ordering::Relaxed);
        }
    }

    /// How long the connection stays muted after `now_ms`.
    pub fn remaining_ms(&self, now_ms: i64) -> u64 {
        (self.0.load(Ordering::Relaxed) - now_ms).max(0) as u64
    }
}

impl<E: Env> Context<E> {
    /// Who a request's quotas are measured for.
    pub fn quota_client<'a>(&'a self, header: &'a RequestHeader) -> QuotaClient<'a> {
        QuotaClient { principal: &self.principal, client_id: header.client_id.as_ref().map_or("", |c| c.as_str()) }
    }

    /// Mutes the connection for `ms`.
    pub fn mute(&self, ms: u64) {
        self.mute.extend(self.broker.env.clock().now_ms(), ms);
    }

    /// Records the time a request kept the broker busy since `started` against its client's
    /// `request_percentage`; the throttle, already applied as a mute. A broker's own calls and
    /// ApiVersions are exempt, as in Apache.
    pub fn request_time(&self, header: &RequestHeader, started: tokio::time::Instant) -> u64 {
        if self.from_broker || header.request_api_key == ApiKey::ApiVersions as i16 {
            return 0;
        }
        let nanos = (self.broker.env.clock().monotonic() - started).as_nanos() as f64;
        // A second of a thread is 100 percent.
        let throttle = self.broker.record_quota(QuotaKey::RequestPercentage, self.quota_client(header), nanos / 1e7);
        self.mute(throttle);
        throttle
    }
}

/// A response that tells the client how long it is throttled, from the version named.
pub trait Throttled {
    const SINCE: i16;
    fn set_throttle_time_ms(&mut self, ms: i32);
}

/// Sets a response's `throttle_time_ms` where its version has the field.
pub fn tell<T: Throttled>(response: &mut T, version: i16, ms: u64) {
    if ms > 0 && version >= T::SINCE {
        response.set_throttle_time_ms(i32::try_from(ms).unwrap_or(i32::MAX));
    }
}

macro_rules! throttled {
    ($($response:ty: $since:expr),* $(,)?) => {
        $(impl Throttled for $response {
            const SINCE: i16 = $since;
            fn set_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = ms;
            }
        })*
    };
}

// The first version of each response with `throttle_time_ms` (Kafka's message schemas).
throttled! {
    ApiVersionsResponse: 1, MetadataResponse: 3, ProduceResponse: 1, FetchResponse: 1,
    ListOffsetsResponse: 2, OffsetForLeaderEpochResponse: 2, FindCoordinatorResponse: 1,
    CreateTopicsResponse: 2, DeleteTopicsResponse: 1, CreatePartitionsResponse: 0,
    DeleteRecordsResponse: 0, DescribeClusterResponse: 0, DescribeTopicPartitionsResponse: 0,
    DescribeAclsResponse: 0, CreateAclsResponse: 0, DeleteAclsResponse: 0,
    DescribeUserScramCredentialsResponse: 0, AlterUserScramCredentialsResponse: 0,
    DescribeLogDirsResponse: 0, AlterReplicaLogDirsResponse: 0, ElectLeadersResponse: 0,
    AlterPartitionReassignmentsResponse: 0, ListPartitionReassignmentsResponse: 0,
    DescribeConfigsResponse: 0, IncrementalAlterConfigsResponse: 0, AlterConfigsResponse: 0,
    HeartbeatResponse: 1, LeaveGroupResponse: 1, DescribeGroupsResponse: 1, ListGroupsResponse: 1,
    ConsumerGroupHeartbeatResponse: 0, ConsumerGroupDescribeResponse: 0,
    ShareGroupHeartbeatResponse: 0, ShareGroupDescribeResponse: 0, TxnShareAcknowledgeResponse: 0,
    DescribeShareGroupOffsetsResponse: 0, AlterShareGroupOffsetsResponse: 0,
    DeleteShareGroupOffsetsResponse: 0, DeleteGroupsResponse: 0, OffsetDeleteResponse: 0,
    OffsetCommitResponse: 3, OffsetFetchResponse: 3, InitProducerIdResponse: 0,
    DescribeProducersResponse: 0, AddPartitionsToTxnResponse: 0, AddOffsetsToTxnResponse: 0,
    EndTxnResponse: 0, TxnOffsetCommitResponse: 0, ListTransactionsResponse: 0,
    DescribeTransactionsResponse: 0, DescribeClientQuotasResponse: 0, AlterClientQuotasResponse: 0,
    ListConfigResourcesResponse: 0,
}

/// Responses without the field: their clients are throttled by the mute alone.
impl Throttled for DescribeQuorumResponse {
    const SINCE: i16 = i16::MAX;
    fn set_throttle_time_ms(&mut self, _: i32) {}
}

impl Throttled for WriteTxnMarkersResponse {
    const SINCE: i16 = i16::MAX;
    fn set_throttle_time_ms(&mut self, _: i32) {}
}
