//! FindCoordinator (v0-v6, with the batched v4+ form): this broker coordinates every group
//! (key type 0) and every transactional id (key type 1).

use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader};

use super::text;
use crate::connection::Context;

const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let config = &ctx.broker.config;
    let valid_type = request.key_type == GROUP || request.key_type == TRANSACTION;
    let error_code = if valid_type { 0 } else { ResponseError::InvalidRequest.code() };
    if header.request_api_version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(config.broker_id))
                    .with_host(text(&config.advertised_host))
                    .with_port(config.advertised_port)
                    .with_error_code(error_code)
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    FindCoordinatorResponse::default()
        .with_error_code(error_code)
        .with_node_id(BrokerId(config.broker_id))
        .with_host(text(&config.advertised_host))
        .with_port(config.advertised_port)
}
