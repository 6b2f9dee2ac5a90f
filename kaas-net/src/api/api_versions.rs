//! ApiVersions (v0-v4). An unknown version is answered in v0 with UNSUPPORTED_VERSION and the
//! supported ranges, as Apache does, so that a newer client can pick a version it shares.

use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};

use super::{SUPPORTED, encode};
use crate::connection::{Context, Response};

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default().with_api_key(key as i16).with_min_version(min).with_max_version(max)
        })
        .collect()
}

pub async fn handle<E: Env>(
    _ctx: &Context<E>,
    _header: &RequestHeader,
    _request: ApiVersionsRequest,
) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

pub fn unsupported_version(header: &RequestHeader) -> Response {
    let response = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys());
    let v0 = header.clone().with_request_api_version(0);
    encode(ApiKey::ApiVersions, &v0, &response)
}
