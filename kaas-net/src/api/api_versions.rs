//! ApiVersions (v0-v4). An unknown version is answered in v0 with UNSUPPORTED_VERSION and the
//! supported ranges, as Apache does, so that a newer client can pick a version it shares.
//!
//! From v3 the answer also carries the `transaction.version` feature, finalized at the
//! broker's `transaction.version` setting: the Java client and franz-go use transactions v2
//! when it is 2. Below 2, the versions that mean v2 (Produce v12+, TxnOffsetCommit v5, EndTxn
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

fn api_keys(config: &BrokerConfig) -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
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
    _request: ApiVersionsRequest,
) -> ApiVersionsResponse {
    let config = &ctx.broker.config;
    let supported =
        SupportedFeatureKey::default().with_name(text(TRANSACTION_VERSION)).with_min_version(0).with_max_version(TV2);
    let finalized = FinalizedFeatureKey::default()
        .with_name(text(TRANSACTION_VERSION))
        .with_min_version_level(config.transaction_version)
        .with_max_version_level(config.transaction_version);
    ApiVersionsResponse::default()
        .with_api_keys(api_keys(config))
        // Clients before v4 may fail on a supported feature whose lowest version is 0, as
        // `transaction.version`'s is: Apache leaves it out for them (the finalized level stays).
        .with_supported_features(if header.request_api_version >= 4 { vec![supported] } else { Vec::new() })
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(if config.transaction_version > 0 { vec![finalized] } else { Vec::new() })
}

pub fn unsupported_version(header: &RequestHeader, config: &BrokerConfig) -> Response {
    let response = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys(config));
    let v0 = header.clone().with_request_api_version(0);
    encode(ApiKey::ApiVersions, &v0, &response)
}
