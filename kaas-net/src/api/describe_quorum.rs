//! DescribeQuorum (v0-v2), answered with what kaas has instead of a metadata quorum: the
//! brokers' leases on the shared volume. Metadata is files there, and no broker leads it, so:
//! - the leader is the broker Metadata and DescribeCluster name as controller (the lowest live
//!   broker id). Its epoch is 0 and so is the high watermark: no election ever happened (the
//!   controller is named by a rule every broker applies to the same leases) and no metadata log
//!   exists (topics, configs, ACLs and ownership are files every broker reads on each rescan),
//!   the values of a quorum whose log nothing was written to, which Kafka's tools and clients
//!   read as a healthy one (kafka-python requires both to be at least 0);
//! - every broker with a lease that did not say it left is a voter, live or not, with log end
//!   offset 0 (caught up with that empty log) and, as its last fetch and last caught-up times,
//!   when this broker last saw its
//!   lease renewed. `kafka-metadata-quorum describe --status` then shows the stalest lease as
//!   MaxFollowerLagTimeMs, and `--replication` each broker's;
//! - there are no observers.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::{Clock, Env};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, RequestHeader};

use super::{text, topic};
use crate::connection::Context;

/// The topic Apache's metadata log lives in, which DescribeQuorum describes.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The leader epoch of a quorum that never held an election.
const NO_ELECTION: i32 = 0;
/// The high watermark and log end offsets of a metadata log nothing was written to.
const NO_METADATA_LOG: i64 = 0;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    _request: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    if !ctx.authorized(Operation::Describe, Resource::cluster()) {
        return DescribeQuorumResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let broker = &ctx.broker;
    let view = broker.membership.view();
    let (now, now_ms) = (broker.env.clock().monotonic(), broker.env.clock().now_ms());
    let leases = view.leases_seen(now);
    let voters = leases
        .iter()
        .map(|l| {
            let renewed_ms = now_ms - l.unchanged_for.as_millis() as i64;
            ReplicaState::default()
                .with_replica_id(BrokerId(l.broker_id))
                .with_log_end_offset(NO_METADATA_LOG)
                .with_last_fetch_timestamp(renewed_ms)
                .with_last_caught_up_timestamp(renewed_ms)
        })
        .collect();
    let nodes = leases
        .iter()
        .map(|l| {
            let listener = |name: &str, host: &str, port: i32| {
                let port = u16::try_from(port).unwrap_or(0);
                Listener::default().with_name(text(name)).with_host(text(host)).with_port(port)
            };
            let listeners = match l.listeners.is_empty() {
                true => vec![listener("PLAINTEXT", &l.host, l.port)],
                false => l.listeners.iter().map(|a| listener(&a.listener, &a.host, a.port)).collect(),
            };
            Node::default().with_node_id(BrokerId(l.broker_id)).with_listeners(listeners)
        })
        .collect();
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(super::controller_id(&view)))
        .with_leader_epoch(NO_ELECTION)
        .with_high_watermark(NO_METADATA_LOG)
        .with_current_voters(voters);
    let metadata = TopicData::default().with_topic_name(topic(METADATA_TOPIC)).with_partitions(vec![partition]);
    DescribeQuorumResponse::default().with_topics(vec![metadata]).with_nodes(nodes)
}
