//! CreatePartitions (v0-v3): grows a topic's partition count.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, RequestHeader};

use super::text;
use crate::connection::Context;
use crate::error;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::new();
    for t in request.topics {
        let outcome = match ctx.authorized(Operation::Alter, Resource::topic(&t.name.0)) {
            true => ctx.broker.topics.create_partitions(t.name.0.to_string(), t.count, request.validate_only).await,
            false => Err(kaas_core::CoreError::TopicAuthorizationFailed),
        };
        let result = CreatePartitionsTopicResult::default().with_name(t.name);
        results.push(match outcome {
            Ok(()) => result,
            Err(e) => result.with_error_code(error::code(&e)).with_error_message(error::message(&e).map(|m| text(&m))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
