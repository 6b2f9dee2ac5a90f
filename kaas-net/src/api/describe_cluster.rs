//! DescribeCluster (v0-v1): one broker, which is also the controller.

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
    let me = DescribeClusterBroker::default()
        .with_broker_id(BrokerId(config.broker_id))
        .with_host(text(&config.advertised_host))
        .with_port(config.advertised_port);
    DescribeClusterResponse::default()
        .with_cluster_id(text(&config.cluster_id))
        .with_controller_id(BrokerId(config.broker_id))
        .with_brokers(vec![me])
        .with_endpoint_type(1)
}
