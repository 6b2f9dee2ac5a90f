//! DeleteTopics (v1-v6), by name or (v6) by topic id.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, RequestHeader};

use super::{text, topic, uuid};
use crate::connection::Context;
use crate::error;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let mut targets: Vec<(Option<String>, [u8; 16])> = Vec::new();
    if header.request_api_version >= 6 {
        for t in request.topics {
            targets.push((t.name.map(|n| n.0.to_string()), *t.topic_id.as_bytes()));
        }
    } else {
        for n in request.topic_names {
            targets.push((Some(n.0.to_string()), [0; 16]));
        }
    }
    let mut responses = Vec::new();
    for (name, id) in targets {
        let name = name.or_else(|| ctx.broker.topics.snapshot().names_by_id.get(&id).cloned());
        let Some(name) = name else {
            responses.push(
                DeletableTopicResult::default()
                    .with_topic_id(uuid(id))
                    .with_error_code(ResponseError::UnknownTopicId.code()),
            );
            continue;
        };
        let result = DeletableTopicResult::default().with_name(Some(topic(&name)));
        // DELETE on the topic; one named by id that the client may not DESCRIBE is one it
        // cannot tell exists, as Apache answers.
        if !ctx.authorized(Operation::Delete, Resource::topic(&name)) {
            let code =
                match header.request_api_version >= 6 && !ctx.authorized(Operation::Describe, Resource::topic(&name)) {
                    true if id != [0; 16] => ResponseError::UnknownTopicId.code(),
                    _ => ResponseError::TopicAuthorizationFailed.code(),
                };
            responses.push(result.with_topic_id(uuid(id)).with_error_code(code));
            continue;
        }
        responses.push(match ctx.broker.topics.delete(name).await {
            Ok(topic_id) => result.with_topic_id(uuid(topic_id)),
            Err(e) => result
                .with_topic_id(uuid(id))
                .with_error_code(error::code(&e))
                .with_error_message(error::message(&e).map(|m| text(&m))),
        });
    }
    DeleteTopicsResponse::default().with_responses(responses)
}
