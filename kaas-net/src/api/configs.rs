//! DescribeConfigs (v1-v4), IncrementalAlterConfigs (v0-v1) and AlterConfigs (v0-v2) for topic
//! and broker resources. Topic overrides are stored with the topic; broker settings come from
//! the command line and configuration file and are read-only at run time.

use std::collections::BTreeMap;

use kaas_core::env::Env;
use kaas_core::topics::ConfigOp;
use kaas_core::{CoreError, CoreResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
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
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;

// Kafka's ConfigType values (DescribeConfigs v3+).
const TYPE_STRING: i8 = 2;
const TYPE_LONG: i8 = 5;

fn config_type(value: &str) -> i8 {
    if value.parse::<i64>().is_ok() {
        TYPE_LONG
    } else {
        TYPE_STRING
    }
}

fn entry(name: &str, value: &str, source: i8, read_only: bool) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(text(name))
        .with_value(Some(text(value)))
        .with_config_source(source)
        .with_read_only(read_only)
        .with_config_type(config_type(value))
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let version = header.request_api_version;
    let config = &ctx.broker.config;
    let mut results = Vec::new();
    for r in request.resources {
        let wanted = |name: &str| {
            r.configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
        };
        let result = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        let result = match r.resource_type {
            TOPIC => match ctx
                .broker
                .topics
                .snapshot()
                .topics
                .get(r.resource_name.as_str())
            {
                None => result.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                Some(state) => {
                    let mut configs = Vec::new();
                    let mut names: BTreeMap<String, (String, i8)> = config
                        .topic_defaults()
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), (v, DEFAULT_CONFIG)))
                        .collect();
                    for (k, v) in &state.meta.configs {
                        names.insert(k.clone(), (v.clone(), DYNAMIC_TOPIC_CONFIG));
                    }
                    for (name, (value, source)) in names {
                        if wanted(&name) {
                            configs.push(entry(&name, &value, source, false));
                        }
                    }
                    result.with_configs(configs)
                }
            },
            BROKER => {
                if !r.resource_name.is_empty()
                    && r.resource_name.as_str() != config.broker_id.to_string()
                {
                    result
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(Some(text("unknown broker id")))
                } else {
                    let mut names: BTreeMap<String, (String, i8)> = BTreeMap::new();
                    for (k, v) in config.topic_defaults() {
                        let broker_name = match k {
                            "retention.ms" => "log.retention.ms",
                            "retention.bytes" => "log.retention.bytes",
                            "segment.bytes" => "log.segment.bytes",
                            "index.interval.bytes" => "log.index.interval.bytes",
                            "max.message.bytes" => "message.max.bytes",
                            "cleanup.policy" => "log.cleanup.policy",
                            "message.timestamp.type" => "log.message.timestamp.type",
                            other => other,
                        };
                        names.insert(broker_name.to_string(), (v, DEFAULT_CONFIG));
                    }
                    names.insert(
                        "auto.create.topics.enable".into(),
                        (config.auto_create_topics_enable.to_string(), DEFAULT_CONFIG),
                    );
                    names.insert(
                        "num.partitions".into(),
                        (config.num_partitions.to_string(), DEFAULT_CONFIG),
                    );
                    names.insert(
                        "broker.id".into(),
                        (config.broker_id.to_string(), DEFAULT_CONFIG),
                    );
                    for (k, v) in &config.explicit {
                        names.insert(k.clone(), (v.clone(), STATIC_BROKER_CONFIG));
                    }
                    let configs = names
                        .into_iter()
                        .filter(|(n, _)| wanted(n))
                        .map(|(n, (v, source))| entry(&n, &v, source, true))
                        .collect();
                    result.with_configs(configs)
                }
            }
            _ => result
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(text("unsupported resource type"))),
        };
        results.push(result);
    }
    let _ = version;
    DescribeConfigsResponse::default().with_results(results)
}

fn resource_result(code_and_message: CoreResult<()>) -> (i16, Option<String>) {
    match code_and_message {
        Ok(()) => (0, None),
        Err(e) => (error::code(&e), error::message(&e)),
    }
}

fn broker_is_read_only() -> CoreError {
    CoreError::InvalidRequest(
        "broker configs are static in kaas: set them with --set or --config and restart".into(),
    )
}

pub async fn incremental_alter<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::new();
    for r in request.resources {
        let outcome = match r.resource_type {
            TOPIC => {
                let mut ops = Vec::new();
                let mut invalid = None;
                for c in r.configs {
                    let name = c.name.to_string();
                    match (c.config_operation, c.value) {
                        (0 | 2, Some(v)) => ops.push(ConfigOp::Set(name, v.to_string())),
                        (1, _) => ops.push(ConfigOp::Delete(name)),
                        (3, _) => ops.push(ConfigOp::Delete(name)),
                        _ => {
                            invalid = Some(CoreError::InvalidRequest(format!(
                                "invalid operation on {name}"
                            )))
                        }
                    }
                }
                match invalid {
                    Some(e) => Err(e),
                    None => {
                        ctx.broker
                            .topics
                            .alter_configs(r.resource_name.to_string(), ops, request.validate_only)
                            .await
                    }
                }
            }
            BROKER => Err(broker_is_read_only()),
            _ => Err(CoreError::InvalidRequest(
                "unsupported resource type".into(),
            )),
        };
        let (code, message) = resource_result(outcome);
        responses.push(
            IncrementalResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message.map(|m| text(&m))),
        );
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// The legacy AlterConfigs: the given set replaces every override of the resource.
pub async fn alter<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let mut responses = Vec::new();
    for r in request.resources {
        let outcome = match r.resource_type {
            TOPIC => {
                let name = r.resource_name.to_string();
                let current: Vec<String> = ctx
                    .broker
                    .topics
                    .snapshot()
                    .topics
                    .get(&name)
                    .map(|t| t.meta.configs.keys().cloned().collect())
                    .unwrap_or_default();
                let mut ops: Vec<ConfigOp> = current.into_iter().map(ConfigOp::Delete).collect();
                for c in r.configs {
                    if let Some(v) = c.value {
                        ops.push(ConfigOp::Set(c.name.to_string(), v.to_string()));
                    }
                }
                ctx.broker
                    .topics
                    .alter_configs(name, ops, request.validate_only)
                    .await
            }
            BROKER => Err(broker_is_read_only()),
            _ => Err(CoreError::InvalidRequest(
                "unsupported resource type".into(),
            )),
        };
        let (code, message) = resource_result(outcome);
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
