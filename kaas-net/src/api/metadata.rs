//! Metadata (v0-v13; v13's top-level error is never set). Every live broker is listed; each
//! partition's leader is its owner by the membership's view (the first live broker of the
//! replica list a reassignment set, else the rendezvous hash over the live brokers), and its
//! leader epoch the ownership epoch where this broker knows it (the partitions it owns), -1
//! elsewhere. The replica list is the reassignment's, else the owner alone whatever replication
//! factor was asked for: the shared volume is the replica. The ISR is its live brokers.

use kaas_core::acl::{Operation, Resource};
use kaas_core::cluster::ClusterView;
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
        // A topic named by id (v10+) is looked up by its id whatever its name says: the Java
        // client leaves the name at its default, "", beside the id, and Apache ignores it.
        Some(list) => Some(
            list.into_iter()
                .map(|t| {
                    let id = *t.topic_id.as_bytes();
                    let name = t.name.filter(|_| id == [0; 16]).map(|n| n.0.to_string());
                    (name, id)
                })
                .collect(),
        ),
    };
    // Auto-creation: v4+ says per request; older versions always allow it. It needs CREATE
    // on the cluster or on the topic, as Apache checks.
    // v8+ may ask what the client may do to each topic.
    let ops = |name: &str| match request.include_topic_authorized_operations {
        true => super::topic_authorized_operations(ctx, name),
        false => i32::MIN,
    };
    let allow_create = config.auto_create_topics_enable && (version < 4 || request.allow_auto_topic_creation);
    let may_create = |name: &str| {
        ctx.authorized(Operation::Create, Resource::cluster())
            || ctx.authorized(Operation::Create, Resource::topic(name))
    };
    let describable = |name: &str| ctx.authorized(Operation::Describe, Resource::topic(name));
    let mut topics = Vec::new();
    let view = broker.membership.view();
    match requested {
        None => {
            // Listing every topic is an admin read: a peer's CreateTopics shows at once. Only
            // the topics the client may describe are listed.
            broker.topics.refresh_all().await;
            let snapshot = broker.topics.snapshot();
            for state in snapshot.topics.values().filter(|t| describable(&t.meta.name)) {
                topics.push(describe_topic(state, &view, ops(&state.meta.name)));
            }
        }
        Some(list) => {
            // A topic a peer created a moment ago is read now, not at the next rescan.
            broker.topics.refresh(list.iter().filter_map(|(n, _)| n.as_deref())).await;
            broker.topics.refresh_ids(list.iter().filter(|(n, _)| n.is_none()).map(|(_, id)| id)).await;
            let mut unknown_ids = Vec::new();
            for (name, id) in list {
                let name = match name {
                    Some(name) => name,
                    None => match broker.topics.snapshot().names_by_id.get(&id) {
                        Some(name) if describable(name) => name.clone(),
                        // An id the client may not describe is one it cannot tell exists.
                        _ => {
                            unknown_ids.push(missing(None, id, ResponseError::UnknownTopicId.code()));
                            continue;
                        }
                    },
                };
                if !describable(&name) {
                    topics.push(missing(Some(&name), [0; 16], ResponseError::TopicAuthorizationFailed.code()));
                    continue;
                }
                let exists = broker.topics.snapshot().topics.contains_key(&name);
                if allow_create && !exists && !may_create(&name) {
                    topics.push(missing(Some(&name), [0; 16], ResponseError::TopicAuthorizationFailed.code()));
                    continue;
                }
                if allow_create && let Err(e) = broker.topics.ensure(&name).await {
                    topics.push(missing(Some(&name), [0; 16], error::code(&e)));
                    continue;
                }
                let snapshot: std::sync::Arc<MetadataSnapshot> = broker.topics.snapshot();
                match snapshot.topics.get(&name) {
                    Some(state) => topics.push(describe_topic(state, &view, ops(&name))),
                    None => topics.push(missing(Some(&name), [0; 16], ResponseError::UnknownTopicOrPartition.code())),
                }
            }
            // Apache answers the ids it does not know first.
            unknown_ids.append(&mut topics);
            topics = unknown_ids;
        }
    }
    let brokers = super::live_brokers(&view, &ctx.listener, |id, host, port| {
        MetadataResponseBroker::default().with_node_id(id).with_host(host).with_port(port)
    });
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(text(&config.cluster_id)))
        .with_controller_id(BrokerId(super::controller_id(&view)))
        .with_topics(topics)
}

fn missing(name: Option<&str>, id: [u8; 16], code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default().with_name(name.map(topic)).with_topic_id(uuid(id)).with_error_code(code)
}

/// The leader of partition `p` of a topic and its leader epoch, as Metadata and
/// DescribeTopicPartitions report them: the owner by the view, with the ownership epoch where
/// this broker is it, -1 elsewhere. None while the view names no owner.
pub fn leader_of(state: &TopicState, p: i32, view: &ClusterView) -> Option<(BrokerId, i32)> {
    let owner = state.owner(p, view)?;
    let watermarks = state.partitions.get(p as usize).map(|h| h.watermarks()).unwrap_or_default();
    let epoch = if owner == view.me && watermarks.online { watermarks.leader_epoch } else { -1 };
    Some((BrokerId(owner), epoch))
}

/// A partition's replicas, in-sync replicas and offline replicas, as Metadata and
/// DescribeTopicPartitions report them: a reassignment's list (with the leader added should
/// every broker of it be down, as the leader then serves outside it), else the leader alone.
/// Every live broker of the list is in sync: each reads the one copy on the volume.
pub struct Replicas {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub offline: Vec<BrokerId>,
}

pub fn replicas_of(state: &TopicState, p: i32, leader: BrokerId, view: &ClusterView) -> Replicas {
    let mut replicas: Vec<i32> = state.preferred(p).to_vec();
    if !replicas.contains(&leader.0) {
        replicas.push(leader.0);
    }
    let live = |b: &i32| *b == leader.0 || view.live.contains_key(b);
    Replicas {
        isr: replicas.iter().copied().filter(live).map(BrokerId).collect(),
        offline: replicas.iter().copied().filter(|b| !live(b)).map(BrokerId).collect(),
        replicas: replicas.into_iter().map(BrokerId).collect(),
    }
}

fn describe_topic(state: &TopicState, view: &ClusterView, authorized_operations: i32) -> MetadataResponseTopic {
    let partitions = (0..state.meta.partitions)
        .map(|p| {
            let response = MetadataResponsePartition::default().with_partition_index(p);
            let Some((leader, epoch)) = leader_of(state, p, view) else {
                return response
                    .with_error_code(ResponseError::LeaderNotAvailable.code())
                    .with_leader_id(BrokerId(-1))
                    .with_leader_epoch(-1);
            };
            let Replicas { replicas, isr, offline } = replicas_of(state, p, leader, view);
            response
                .with_leader_id(leader)
                .with_leader_epoch(epoch)
                .with_replica_nodes(replicas)
                .with_isr_nodes(isr)
                .with_offline_replicas(offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic(&state.meta.name)))
        .with_topic_id(uuid(state.meta.topic_id))
        .with_is_internal(false)
        .with_partitions(partitions)
        .with_topic_authorized_operations(authorized_operations)
}
