//! DescribeConfigs (v1-v4), IncrementalAlterConfigs (v0-v1) and AlterConfigs (v0-v2) for topic
//! and broker resources. Topic overrides are stored with the topic. Broker settings come from
//! the command line and configuration file; the defaults of every topic's log (the settings
//! `config::settings` marks dynamic) can also be changed at run time, and are kept on the
//! volume.

use std::collections::BTreeMap;

use kaas_core::BrokerConfig;
use kaas_core::acl::{Operation, Resource};
use kaas_core::config::{broker_name_of, settings};
use kaas_core::env::Env;
use kaas_core::topics::{ConfigOp, MetadataSnapshot};
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestHeader,
};

use super::text;
use crate::connection::Context;
use crate::error;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const GROUP: i8 = 32;

// Kafka's ConfigSource values.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DYNAMIC_BROKER_CONFIG: i8 = 2;
const GROUP_CONFIG: i8 = 8;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;

// Kafka's ConfigType values (DescribeConfigs v3+).
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_LONG: i8 = 5;
const TYPE_PASSWORD: i8 = 9;

// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// One described config: its value in force and where it comes from, and (for
/// include_synonyms) every level that sets it, the one in force first, as Apache lists them.
struct Described {
    value: String,
    source: i8,
    read_only: bool,
    synonyms: Vec<(String, String, i8)>,
    doc: Option<&'static str>,
}

type DescribedConfigs = BTreeMap<String, Described>;

fn entry(name: &str, d: &Described, synonyms: bool, documentation: bool) -> DescribeConfigsResourceResult {
    // A secret (a key, a password) is described as Apache describes it: without its value.
    let sensitive = settings::sensitive(name);
    let config_type = match d.value.as_str() {
        _ if sensitive => TYPE_PASSWORD,
        "true" | "false" => TYPE_BOOLEAN,
        v if v.parse::<i64>().is_ok() => TYPE_LONG,
        _ => TYPE_STRING,
    };
    let synonyms = if synonyms { d.synonyms.iter().map(|s| synonym(s, sensitive)).collect() } else { Vec::new() };
    DescribeConfigsResourceResult::default()
        .with_name(text(name))
        .with_value((!sensitive).then(|| text(&d.value)))
        .with_is_sensitive(sensitive)
        .with_config_source(d.source)
        .with_read_only(d.read_only)
        .with_config_type(config_type)
        .with_synonyms(synonyms)
        .with_documentation(d.doc.filter(|_| documentation).map(text))
}

fn synonym((name, value, source): &(String, String, i8), sensitive: bool) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(text(name))
        .with_value((!sensitive).then(|| text(value)))
        .with_source(*source)
}

/// The levels that set broker setting `name`, highest first: a dynamic override, the static
/// setting, the default.
fn broker_levels(snapshot: &MetadataSnapshot, statics: &BrokerConfig, name: &str) -> Vec<(String, String, i8)> {
    let mut levels = Vec::new();
    if let Some(v) = snapshot.broker_overrides.get(name) {
        levels.push((name.to_string(), v.clone(), DYNAMIC_BROKER_CONFIG));
    }
    let setting = settings::find(name);
    let default = setting.map(|s| (s.get)(&BrokerConfig::default()));
    // Given by name, or by a flag (--listen, --broker-id, ...): the static level.
    let by_flag = setting.map(|s| (s.get)(statics)).filter(|v| Some(v) != default.as_ref());
    if let Some(v) = statics.explicit.get(name).cloned().or(by_flag) {
        levels.push((name.to_string(), v, STATIC_BROKER_CONFIG));
    }
    let default = default.or_else(|| {
        BrokerConfig::default()
            .topic_defaults()
            .into_iter()
            .find_map(|(topic, v)| (broker_name_of(topic) == name).then_some(v))
    });
    if let Some(v) = default {
        levels.push((name.to_string(), v, DEFAULT_CONFIG));
    }
    levels
}

fn topic_configs(snapshot: &MetadataSnapshot, statics: &BrokerConfig, topic: &str) -> CoreResult<DescribedConfigs> {
    let state = snapshot.topics.get(topic).ok_or(CoreError::UnknownTopicOrPartition)?;
    let mut out = DescribedConfigs::new();
    for (name, default) in snapshot.effective.topic_defaults() {
        let broker_name = broker_name_of(name);
        let mut synonyms = Vec::new();
        if let Some(v) = state.meta.configs.get(name) {
            synonyms.push((name.to_string(), v.clone(), DYNAMIC_TOPIC_CONFIG));
        }
        synonyms.extend(broker_levels(snapshot, statics, broker_name));
        let (value, source) = match synonyms.first() {
            Some((_, v, source)) => (v.clone(), *source),
            None => (default, DEFAULT_CONFIG),
        };
        let doc = settings::find(broker_name).map(|s| s.doc);
        out.insert(name.to_string(), Described { value, source, read_only: false, synonyms, doc });
    }
    for (name, value) in &state.meta.configs {
        out.entry(name.clone()).or_insert_with(|| Described {
            value: value.clone(),
            source: DYNAMIC_TOPIC_CONFIG,
            read_only: false,
            synonyms: vec![(name.clone(), value.clone(), DYNAMIC_TOPIC_CONFIG)],
            doc: None,
        });
    }
    Ok(out)
}

/// Every setting of `settings::SETTINGS` with the value in force, the topic defaults under
/// their broker names, and whatever else was given by name.
fn broker_configs(snapshot: &MetadataSnapshot, statics: &BrokerConfig) -> DescribedConfigs {
    let effective = &snapshot.effective;
    let mut out = DescribedConfigs::new();
    let described = |name: &str, value: String, read_only: bool, doc: Option<&'static str>| {
        let synonyms = broker_levels(snapshot, statics, name);
        let source = synonyms.first().map_or(DEFAULT_CONFIG, |(_, _, source)| *source);
        Described { value, source, read_only, synonyms, doc }
    };
    for s in settings::SETTINGS {
        let read_only = s.change != settings::Change::Dynamic;
        out.insert(s.name.to_string(), described(s.name, (s.get)(effective), read_only, Some(s.doc)));
    }
    for (name, value) in effective.topic_defaults() {
        let name = broker_name_of(name);
        if settings::find(name).is_none() {
            out.insert(name.to_string(), described(name, value, true, None));
        }
    }
    for (name, value) in &statics.explicit {
        if !out.contains_key(name) {
            out.insert(name.clone(), described(name, value.clone(), true, settings::ignored(name)));
        }
    }
    out
}

/// A group's configs: every group config with the value in force, the group's own or the
/// broker's default (Apache lists them the same way).
fn group_configs(snapshot: &MetadataSnapshot, group_id: &str) -> DescribedConfigs {
    let own = snapshot.group_configs.get(group_id);
    let mut out = DescribedConfigs::new();
    for g in kaas_core::config::group::GROUP_CONFIGS {
        let (value, source) = match own.and_then(|c| c.get(g.name)) {
            Some(v) => (v.clone(), GROUP_CONFIG),
            None => ((g.default)(&snapshot.effective), DEFAULT_CONFIG),
        };
        let synonyms = vec![(g.name.to_string(), value.clone(), source)];
        out.insert(g.name.to_string(), Described { value, source, read_only: false, synonyms, doc: Some(g.doc) });
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

/// Whether the client may `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) the resource, and
/// the error Apache answers when not: a topic's, a group's, or the cluster's for a broker.
fn config_gate<E: Env>(ctx: &Context<E>, operation: Operation, resource_type: i8, name: &str) -> CoreResult<()> {
    let (resource, refused) = match resource_type {
        TOPIC => (Resource::topic(name), CoreError::TopicAuthorizationFailed),
        GROUP => (Resource::group(name), CoreError::GroupAuthorizationFailed),
        _ => (Resource::cluster(), CoreError::ClusterAuthorizationFailed),
    };
    if ctx.authorized(operation, resource) { Ok(()) } else { Err(refused) }
}

fn describe_one<E: Env>(
    ctx: &Context<E>,
    snapshot: &MetadataSnapshot,
    r: &DescribeConfigsResource,
) -> CoreResult<DescribedConfigs> {
    let statics = &ctx.broker.config;
    config_gate(ctx, Operation::DescribeConfigs, r.resource_type, r.resource_name.as_str())?;
    match r.resource_type {
        TOPIC => topic_configs(snapshot, statics, r.resource_name.as_str()),
        BROKER => check_broker_name(ctx, r.resource_name.as_str()).map(|_| broker_configs(snapshot, statics)),
        GROUP => Ok(group_configs(snapshot, r.resource_name.as_str())),
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
                let configs = described
                    .iter()
                    .filter(|(n, _)| wanted(n))
                    .map(|(n, d)| entry(n, d, request.include_synonyms, request.include_documentation))
                    .collect();
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
        _ if let Err(refused) = config_gate(ctx, Operation::AlterConfigs, resource_type, name) => Err(refused),
        (_, Err(e)) => Err(e),
        (TOPIC, Ok(ops)) => topics.alter_configs(name.to_string(), ops, validate_only).await,
        (BROKER, Ok(ops)) => match check_broker_name(ctx, name) {
            Ok(()) => topics.alter_broker_configs(ops, validate_only).await,
            Err(e) => Err(e),
        },
        (GROUP, Ok(ops)) => topics.alter_group_configs(name.to_string(), ops, validate_only).await,
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
