//! Metadata (v0-v12). kaas is one broker over one volume: it leads every partition, and the
//! replica and ISR lists name it alone whatever replication factor was asked for, since the
//! shared volume is the replica.

use kaas_core::env::Env;
use kaas_core::topics::{MetadataSnapshot, TopicState};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, RequestHeader};

use super::{text, topic, uuid};
use crate::connection::Context;
use crate::error;

pub async fn handle<E: Env>(ctx: &Context<E>, header: &RequestHeader, request: MetadataRequest) -> MetadataResponse {
    let version = header.request_api_version;
    let broker = &ctx.broker;
    let config = &broker.config;
    // v0 has no way to say "all topics" but an empty list; v1+ uses null.
    let requested: Option<Vec<(Option<String>, [u8; 16])>> = match request.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => {
            Some(list.into_iter().map(|t| (t.name.map(|n| n.0.to_string()), *t.topic_id.as_bytes())).collect())
        }
    };
    // Auto-creation: v4+ says per request; older versions always allow it.
    let allow_create = config.auto_create_topics_enable && (version < 4 || request.allow_auto_topic_creation);
    let mut topics = Vec::new();
    match requested {
        None => {
            let snapshot = broker.topics.snapshot();
            for state in snapshot.topics.values() {
                topics.push(describe_topic(state, config.broker_id));
            }
        }
        Some(list) => {
            for (name, id) in list {
                let name = match name {
                    Some(name) => name,
                    None => match broker.topics.snapshot().names_by_id.get(&id) {
                        Some(name) => name.clone(),
                        None => {
                            topics.push(missing(None, id, ResponseError::UnknownTopicId.code()));
                            continue;
                        }
                    },
                };
                if allow_create && let Err(e) = broker.topics.ensure(&name).await {
                    topics.push(missing(Some(&name), [0; 16], error::code(&e)));
                    continue;
                }
                let snapshot: std::sync::Arc<MetadataSnapshot> = broker.topics.snapshot();
                match snapshot.topics.get(&name) {
                    Some(state) => topics.push(describe_topic(state, config.broker_id)),
                    None => topics.push(missing(Some(&name), [0; 16], ResponseError::UnknownTopicOrPartition.code())),
                }
            }
        }
    }
    let me = MetadataResponseBroker::default()
        .with_node_id(BrokerId(config.broker_id))
        .with_host(text(&config.advertised_host))
        .with_port(config.advertised_port);
    MetadataResponse::default()
        .with_brokers(vec![me])
        .with_cluster_id(Some(text(&config.cluster_id)))
        .with_controller_id(BrokerId(config.broker_id))
        .with_topics(topics)
}

fn missing(name: Option<&str>, id: [u8; 16], code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default().with_name(name.map(topic)).with_topic_id(uuid(id)).with_error_code(code)
}

fn describe_topic(state: &TopicState, broker_id: i32) -> MetadataResponseTopic {
    let leader = BrokerId(broker_id);
    let partitions = (0..state.meta.partitions)
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(leader)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![leader])
                .with_isr_nodes(vec![leader])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic(&state.meta.name)))
        .with_topic_id(uuid(state.meta.topic_id))
        .with_is_internal(false)
        .with_partitions(partitions)
}
