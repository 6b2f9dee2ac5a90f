//! DescribeConfigs (v1-v4), IncrementalAlterConfigs (v0-v1) and AlterConfigs (v0-v2) for topic
//! and broker resources. Topic overrides are stored with the topic. Broker settings come from
//! the command line and configuration file; the defaults of every topic's log
//! (`DYNAMIC_BROKER_CONFIGS`) can also be changed at run time, and are kept on the volume.

use std::collections::BTreeMap;

use kaas_core::config::{DYNAMIC_BROKER_CONFIGS, broker_name_of};
use kaas_core::env::Env;
use kaas_core::topics::{ConfigOp, MetadataSnapshot};
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestHeader,
};

use super::text;
use crate::connection::Context;
use crate::error;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

// Kafka's ConfigSource values.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DYNAMIC_BROKER_CONFIG: i8 = 2;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;

// Kafka's ConfigType values (DescribeConfigs v3+).
const TYPE_STRING: i8 = 2;
const TYPE_LONG: i8 = 5;

// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// One described config: value, source, read-only.
type Described = BTreeMap<String, (String, i8, bool)>;

fn entry(name: &str, (value, source, read_only): &(String, i8, bool)) -> DescribeConfigsResourceResult {
    let config_type = if value.parse::<i64>().is_ok() { TYPE_LONG } else { TYPE_STRING };
    DescribeConfigsResourceResult::default()
        .with_name(text(name))
        .with_value(Some(text(value)))
        .with_config_source(*source)
        .with_read_only(*read_only)
        .with_config_type(config_type)
}

fn topic_configs(snapshot: &MetadataSnapshot, topic: &str) -> CoreResult<Described> {
    let state = snapshot.topics.get(topic).ok_or(CoreError::UnknownTopicOrPartition)?;
    let mut out = Described::new();
    for (name, value) in snapshot.effective.topic_defaults() {
        let dynamic = snapshot.broker_overrides.contains_key(broker_name_of(name));
        let source = if dynamic { DYNAMIC_BROKER_CONFIG } else { DEFAULT_CONFIG };
        out.insert(name.to_string(), (value, source, false));
    }
    for (name, value) in &state.meta.configs {
        out.insert(name.clone(), (value.clone(), DYNAMIC_TOPIC_CONFIG, false));
    }
    Ok(out)
}

fn broker_configs(snapshot: &MetadataSnapshot) -> Described {
    let config = &snapshot.effective;
    let mut out = Described::new();
    for (name, value) in config.topic_defaults() {
        out.insert(broker_name_of(name).to_string(), (value, DEFAULT_CONFIG, true));
    }
    let mut add = |name: &str, value: String| out.insert(name.to_string(), (value, DEFAULT_CONFIG, true));
    add("auto.create.topics.enable", config.auto_create_topics_enable.to_string());
    add("num.partitions", config.num_partitions.to_string());
    add("default.replication.factor", config.default_replication_factor.to_string());
    add("broker.id", config.broker_id.to_string());
    add("log.retention.check.interval.ms", config.log_retention_check_interval_ms.to_string());
    add("socket.request.max.bytes", config.socket_request_max_bytes.to_string());
    add("group.initial.rebalance.delay.ms", config.group_initial_rebalance_delay_ms.to_string());
    add("group.min.session.timeout.ms", config.group_min_session_timeout_ms.to_string());
    add("group.max.session.timeout.ms", config.group_max_session_timeout_ms.to_string());
    for (name, value) in &config.explicit {
        out.insert(name.clone(), (value.clone(), STATIC_BROKER_CONFIG, true));
    }
    for (name, value) in &snapshot.broker_overrides {
        out.insert(name.clone(), (value.clone(), DYNAMIC_BROKER_CONFIG, false));
    }
    for name in DYNAMIC_BROKER_CONFIGS {
        if let Some(e) = out.get_mut(*name) {
            e.2 = false;
        }
    }
    out
}

/// Broker resources are named by broker id, or "" for the cluster-wide default.
fn check_broker_name<E: Env>(ctx: &Context<E>, name: &str) -> CoreResult<()> {
    if name.is_empty() || name == ctx.broker.config.broker_id.to_string() {
        Ok(())
    } else {
        Err(CoreError::InvalidRequest(format!("unknown broker id {name}")))
    }
}

fn describe_one<E: Env>(
    ctx: &Context<E>,
    snapshot: &MetadataSnapshot,
    r: &DescribeConfigsResource,
) -> CoreResult<Described> {
    match r.resource_type {
        TOPIC => topic_configs(snapshot, r.resource_name.as_str()),
        BROKER => check_broker_name(ctx, r.resource_name.as_str()).map(|_| broker_configs(snapshot)),
        _ => Err(CoreError::InvalidRequest("unsupported resource type".into())),
    }
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    // A peer's AlterConfigs shows at once, in the order the peers made them.
    ctx.broker.topics.refresh_all().await;
    let snapshot = ctx.broker.topics.snapshot();
    let mut results = Vec::new();
    for r in request.resources {
        let result = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        let result = match describe_one(ctx, &snapshot, &r) {
            Ok(described) => {
                let wanted = |name: &str| {
                    r.configuration_keys.as_ref().is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
                };
                let configs = described.iter().filter(|(n, _)| wanted(n)).map(|(n, e)| entry(n, e)).collect();
                result.with_configs(configs)
            }
            Err(e) => result.with_error_code(error::code(&e)).with_error_message(error::message(&e).map(|m| text(&m))),
        };
        results.push(result);
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// Applies `ops` to a topic or to the broker.
async fn alter<E: Env>(
    ctx: &Context<E>,
    resource_type: i8,
    name: &str,
    ops: CoreResult<Vec<ConfigOp>>,
    validate_only: bool,
) -> (i16, Option<String>) {
    let topics = &ctx.broker.topics;
    let outcome = match (resource_type, ops) {
        (_, Err(e)) => Err(e),
        (TOPIC, Ok(ops)) => topics.alter_configs(name.to_string(), ops, validate_only).await,
        (BROKER, Ok(ops)) => match check_broker_name(ctx, name) {
            Ok(()) => topics.alter_broker_configs(ops, validate_only).await,
            Err(e) => Err(e),
        },
        _ => Err(CoreError::InvalidRequest("unsupported resource type".into())),
    };
    match outcome {
        Ok(()) => (0, None),
        Err(e) => (error::code(&e), error::message(&e)),
    }
}

pub async fn incremental_alter<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    let mut responses = Vec::new();
    for r in request.resources {
        let ops: CoreResult<Vec<ConfigOp>> = r
            .configs
            .into_iter()
            .map(|c| {
                let name = c.name.to_string();
                match (c.config_operation, c.value) {
                    // No config kaas stores is a list, so APPEND sets and SUBTRACT removes.
                    (OP_SET | OP_APPEND, Some(v)) => Ok(ConfigOp::Set(name, v.to_string())),
                    (OP_DELETE | OP_SUBTRACT, _) => Ok(ConfigOp::Delete(name)),
                    _ => Err(CoreError::InvalidConfig(format!("invalid operation on {name}"))),
                }
            })
            .collect();
        let (code, message) = alter(ctx, r.resource_type, r.resource_name.as_str(), ops, request.validate_only).await;
        responses.push(
            AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message.map(|m| text(&m))),
        );
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// The legacy AlterConfigs: the given set replaces every override of the resource.
pub async fn alter_legacy<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let snapshot = ctx.broker.topics.snapshot();
    let mut responses = Vec::new();
    for r in request.resources {
        let current: Vec<String> = match r.resource_type {
            TOPIC => snapshot
                .topics
                .get(r.resource_name.as_str())
                .map(|t| t.meta.configs.keys().cloned().collect())
                .unwrap_or_default(),
            _ => snapshot.broker_overrides.keys().cloned().collect(),
        };
        let mut ops: Vec<ConfigOp> = current.into_iter().map(ConfigOp::Delete).collect();
        for c in r.configs {
            if let Some(v) = c.value {
                ops.push(ConfigOp::Set(c.name.to_string(), v.to_string()));
            }
        }
        let (code, message) =
            alter(ctx, r.resource_type, r.resource_name.as_str(), Ok(ops), request.validate_only).await;
        responses.push(
            AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message.map(|m| text(&m))),
        );
    }
    AlterConfigsResponse::default().with_responses(responses)
}
