//! ApiVersions (v0-v5). An unknown version is answered in v0 with UNSUPPORTED_VERSION and the
//! supported ranges, as Apache does, so that a newer client can pick a version it shares. From
//! v5 a client may name the cluster and the node it means to reach (KIP-1242): one that reached
//! another (an address reused by another cluster, or by another broker of this one) is told
//! REBOOTSTRAP_REQUIRED.
//!
//! From v3 the answer also carries the `transaction.version` feature, finalized at the
//! broker's `transaction.version` setting: the Java client and franz-go use transactions v2
//! when it is 2; and the `share.version` feature, finalized at `share.version`, below whose
//! levels the share APIs are not advertised. Below 2, the versions that mean v2 (Produce v12+, TxnOffsetCommit v5, EndTxn
//! v5) are not advertised, as Apache leaves them out.

use kaas_core::BrokerConfig;
use kaas_core::env::Env;
use kaas_core::txn::state::TV2;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};

use super::{SUPPORTED, encode, text};
use crate::connection::{Context, Response};

/// The feature's name, as Apache and its clients spell it.
const TRANSACTION_VERSION: &str = "transaction.version";
/// The epoch of the finalized features: they never change while a broker runs.
const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// The feature that gates share groups, as Apache spells it, and its levels: 1 share groups
/// (KIP-932), 2 dead-letter queues (KIP-1191), 3 transactional acknowledgements (KIP-1289).
const SHARE_VERSION: &str = "share.version";
const SHARE_GROUPS: i16 = 1;
const SHARE_TRANSACTIONAL_ACKS: i16 = 3;

/// The highest version of `key` advertised under `transaction_version`.
pub fn advertised_max(key: ApiKey, max: i16, transaction_version: i16) -> i16 {
    if transaction_version >= TV2 {
        return max;
    }
    match key {
        ApiKey::Produce => max.min(11),
        ApiKey::EndTxn | ApiKey::TxnOffsetCommit => max.min(4),
        _ => max,
    }
}

/// Whether `key` is served at the `share.version` level: share groups' APIs from 1,
/// TxnShareAcknowledge from 3, as Apache leaves out the APIs of a feature not finalized.
pub fn served_at_share_level(key: ApiKey, share_version: i16) -> bool {
    match key {
        ApiKey::TxnShareAcknowledge => share_version >= SHARE_TRANSACTIONAL_ACKS,
        ApiKey::ShareGroupHeartbeat
        | ApiKey::ShareGroupDescribe
        | ApiKey::ShareFetch
        | ApiKey::ShareAcknowledge
        | ApiKey::DescribeShareGroupOffsets
        | ApiKey::AlterShareGroupOffsets
        | ApiKey::DeleteShareGroupOffsets => share_version >= SHARE_GROUPS,
        _ => true,
    }
}

fn api_keys(config: &BrokerConfig) -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .filter(|&&(key, _, _)| served_at_share_level(key, config.share_version))
        .map(|&(key, min, max)| {
            ApiVersion::default().with_api_key(key as i16).with_min_version(min).with_max_version(advertised_max(
                key,
                max,
                config.transaction_version,
            ))
        })
        .collect()
}

pub async fn handle<E: Env>(
    ctx: &Context<E>,
    header: &RequestHeader,
    request: ApiVersionsRequest,
) -> ApiVersionsResponse {
    let config = &ctx.broker.config;
    let other_cluster = request.cluster_id.as_ref().is_some_and(|id| id.as_str() != config.cluster_id);
    let other_node = request.node_id >= 0 && request.node_id != config.broker_id;
    if other_cluster || other_node {
        return ApiVersionsResponse::default().with_error_code(ResponseError::RebootstrapRequired.code());
    }
    let supported = vec![
        SupportedFeatureKey::default()
            .with_name(text(SHARE_VERSION))
            .with_min_version(0)
            .with_max_version(SHARE_TRANSACTIONAL_ACKS),
        SupportedFeatureKey::default().with_name(text(TRANSACTION_VERSION)).with_min_version(0).with_max_version(TV2),
    ];
    let finalized_at = |name: &str, level: i16| {
        (level > 0).then(|| {
            FinalizedFeatureKey::default()
                .with_name(text(name))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
    };
    let finalized: Vec<FinalizedFeatureKey> = [
        finalized_at(SHARE_VERSION, config.share_version),
        finalized_at(TRANSACTION_VERSION, config.transaction_version),
    ]
    .into_iter()
    .flatten()
    .collect();
    ApiVersionsResponse::default()
        .with_api_keys(api_keys(config))
        // Clients before v4 may fail on a supported feature whose lowest version is 0, as
        // `transaction.version`'s is: Apache leaves it out for them (the finalized level stays).
        .with_supported_features(if header.request_api_version >= 4 { supported } else { Vec::new() })
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(finalized)
}

pub fn unsupported_version(header: &RequestHeader, config: &BrokerConfig) -> Response {
    let response = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys(config));
    let v0 = header.clone().with_request_api_version(0);
    encode(ApiKey::ApiVersions, &v0, &response)
}
