//! ListConfigResources (v0-v1; KIP-1142, formerly ListClientMetricsResources): the resources
//! whose configs DescribeConfigs answers, as Apache lists them. v0 lists client-metrics
//! resources only, of which kaas has none (it takes no client telemetry); v1 lists the types
//! asked for (none: every type), in Apache's order: groups with configs, client metrics, the
//! live brokers with this listener as broker loggers and as brokers, then every topic. A type
//! Apache does not list fails the whole request with UNSUPPORTED_VERSION. DESCRIBE_CONFIGS on
//! the cluster, as Apache gates it.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse, RequestHeader};

use super::text;
use crate::connection::Context;

// Kafka's ConfigResource.Type codes.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;

/// The types v1 lists, in the order Apache answers them.
const LISTED: [i8; 5] = [GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC];

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    if !ctx.authorized(Operation::DescribeConfigs, Resource::cluster()) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let asked = &request.resource_types;
    if asked.iter().any(|t| !LISTED.contains(t)) {
        return ListConfigResourcesResponse::default().with_error_code(ResponseError::UnsupportedVersion.code());
    }
    let wanted = |t: i8| match header.request_api_version {
        0 => t == CLIENT_METRICS,
        _ => asked.is_empty() || asked.contains(&t),
    };
    // A topic or group config a peer made a moment ago is listed now, not at the next rescan.
    ctx.broker.topics.refresh_all().await;
    let snapshot = ctx.broker.topics.snapshot();
    let brokers = super::live_brokers(&ctx.broker.membership.view(), &ctx.listener, |id, _, _| id.0.to_string());
    let mut resources = Vec::new();
    let mut list = |t: i8, names: &mut dyn Iterator<Item = &String>| {
        if wanted(t) {
            resources.extend(
                names.map(|name| ConfigResource::default().with_resource_type(t).with_resource_name(text(name))),
            );
        }
    };
    list(GROUP, &mut snapshot.group_configs.iter().filter(|(_, configs)| !configs.is_empty()).map(|(g, _)| g));
    list(BROKER_LOGGER, &mut brokers.iter());
    list(BROKER, &mut brokers.iter());
    list(TOPIC, &mut snapshot.topics.keys());
    ListConfigResourcesResponse::default().with_config_resources(resources)
}
