//! FindCoordinator (v0-v6, with the batched v4+ form): the coordinator of a group (key type 0)
//! or a transactional id (key type 1) is the owner of its group or transaction slot by the
//! membership's view; COORDINATOR_NOT_AVAILABLE while no broker may own it.

use kaas_core::cluster::{ClusterView, group_key};
use kaas_core::env::Env;
use kaas_core::txn::state::txn_key;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader};

use super::text;
use crate::connection::Context;

use kaas_core::acl::{Operation, Resource};

const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

/// The coordinator of `key` of `key_type`: (error code, node id, host, port).
fn coordinator_of(view: &ClusterView, listener: &str, key_type: i8, key: &str) -> (i16, i32, String, i32) {
    let owner_key = match key_type {
        GROUP => group_key(key),
        TRANSACTION => txn_key(key),
        _ => return (ResponseError::InvalidRequest.code(), -1, String::new(), -1),
    };
    let owner = view.owner_of(&owner_key).and_then(|id| view.live.get(&id));
    match owner.and_then(|peer| Some((peer.broker_id, peer.address_for(listener)?))) {
        Some((id, (host, port))) => (0, id, host.to_string(), port),
        None => (ResponseError::CoordinatorNotAvailable.code(), -1, String::new(), -1),
    }
}

/// DESCRIBE on the group or the transactional id, as Apache checks it before it tells where
/// the coordinator is.
fn refused<E: Env>(ctx: &Context<E>, key_type: i8, key: &str) -> Option<i16> {
    let (resource, code) = match key_type {
        GROUP => (Resource::group(key), ResponseError::GroupAuthorizationFailed.code()),
        TRANSACTION => (Resource::transactional_id(key), ResponseError::TransactionalIdAuthorizationFailed.code()),
        _ => return None,
    };
    (!ctx.authorized(Operation::Describe, resource)).then_some(code)
}

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let view = ctx.broker.membership.view();
    if header.request_api_version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| {
                let (error_code, node_id, host, port) = match refused(ctx, request.key_type, &key) {
                    Some(code) => (code, -1, String::new(), -1),
                    None => coordinator_of(&view, &ctx.listener, request.key_type, &key),
                };
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(node_id))
                    .with_host(text(&host))
                    .with_port(port)
                    .with_error_code(error_code)
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let (error_code, node_id, host, port) = match refused(ctx, request.key_type, &request.key) {
        Some(code) => (code, -1, String::new(), -1),
        None => coordinator_of(&view, &ctx.listener, request.key_type, &request.key),
    };
    FindCoordinatorResponse::default()
        .with_error_code(error_code)
        .with_node_id(BrokerId(node_id))
        .with_host(text(&host))
        .with_port(port)
}
