//! CreateTopics (v2-v7). Any replication factor is accepted and reported as asked: the shared
//! volume is the replica. Manual replica assignments are accepted for their partition count.

use std::collections::BTreeMap;

use kaas_core::CoreError;
use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kaas_core::topics::CreateTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, RequestHeader};

use super::{text, uuid};
use crate::connection::Context;
use crate::error;

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut topics = Vec::new();
    for t in request.topics {
        let name = t.name.0.to_string();
        let mut configs = BTreeMap::new();
        for c in t.configs {
            if let Some(value) = c.value {
                configs.insert(c.name.to_string(), value.to_string());
            }
        }
        let partitions = if t.num_partitions == -1 && !t.assignments.is_empty() {
            t.assignments.len() as i32
        } else {
            t.num_partitions
        };
        let replication_factor = if t.replication_factor == -1 && !t.assignments.is_empty() {
            t.assignments[0].broker_ids.len() as i16
        } else {
            t.replication_factor
        };
        // CREATE on the cluster or on the topic, as Apache checks.
        let may_create = ctx.authorized(Operation::Create, Resource::cluster())
            || ctx.authorized(Operation::Create, Resource::topic(&name));
        let create =
            CreateTopic { name, partitions, replication_factor, configs, validate_only: request.validate_only };
        let created = match may_create {
            true => ctx.broker.topics.create(create).await,
            false => Err(CoreError::TopicAuthorizationFailed),
        };
        let result = match created {
            Ok(meta) => CreatableTopicResult::default()
                .with_name(t.name)
                .with_topic_id(uuid(meta.topic_id))
                .with_num_partitions(meta.partitions)
                .with_replication_factor(meta.replication_factor),
            Err(e) => CreatableTopicResult::default()
                .with_name(t.name)
                .with_error_code(error::code(&e))
                .with_error_message(error::message(&e).map(|m| text(&m)))
                .with_num_partitions(-1)
                .with_replication_factor(-1),
        };
        topics.push(result);
    }
    CreateTopicsResponse::default().with_topics(topics)
}
