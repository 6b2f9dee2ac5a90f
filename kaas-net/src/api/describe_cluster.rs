//! DescribeCluster (v0-v1): every live broker; the controller is the lowest live broker id
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
    let brokers = view
        .live
        .values()
        .map(|p| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(p.broker_id))
                .with_host(text(&p.host))
                .with_port(p.port)
        })
        .collect();
    DescribeClusterResponse::default()
        .with_cluster_id(text(&config.cluster_id))
        .with_controller_id(BrokerId(super::controller_id(&view)))
        .with_brokers(brokers)
        .with_endpoint_type(1)
}
