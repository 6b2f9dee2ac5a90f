//! DescribeCluster (v0-v2): every live broker (none is fenced: a broker whose lease ran out is
//! gone, not fenced, so v2's include_fenced_brokers adds nobody); the controller is the lowest live broker id
//! (kaas has no controller: any broker serves admin requests).

use kaas_core::env::Env;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse, RequestHeader};

use super::text;
use crate::connection::Context;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    _request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let config = &ctx.broker.config;
    let view = ctx.broker.membership.view();
    let brokers = super::live_brokers(&view, &ctx.listener, |id, host, port| {
        DescribeClusterBroker::default().with_broker_id(id).with_host(host).with_port(port)
    });
    DescribeClusterResponse::default()
        .with_cluster_id(text(&config.cluster_id))
        .with_controller_id(BrokerId(super::controller_id(&view)))
        .with_brokers(brokers)
        .with_endpoint_type(1)
}
