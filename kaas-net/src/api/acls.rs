//! DescribeAcls, CreateAcls and DeleteAcls (v1-v3), answered as an Apache broker with no
//! authorizer configured answers them: SECURITY_DISABLED, with Apache's messages. kaas has no
//! authorizer yet; admin tools then say that ACLs are off rather than failing on an unknown API.

use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::*;

use super::text;
use crate::connection::Context;

const DISABLED: i16 = ResponseError::SecurityDisabled.code();

pub async fn describe<E: Env>(
    _ctx: &Context<E>,
    _header: &RequestHeader,
    _request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    DescribeAclsResponse::default()
        .with_error_code(DISABLED)
        .with_error_message(Some(text("No Authorizer is configured on the broker")))
}

pub async fn create<E: Env>(
    _ctx: &Context<E>,
    _header: &RequestHeader,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    let result = AclCreationResult::default()
        .with_error_code(DISABLED)
        .with_error_message(Some(text("No Authorizer is configured.")));
    CreateAclsResponse::default().with_results(vec![result; request.creations.len()])
}

pub async fn delete<E: Env>(
    _ctx: &Context<E>,
    _header: &RequestHeader,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let result = DeleteAclsFilterResult::default()
        .with_error_code(DISABLED)
        .with_error_message(Some(text("No Authorizer is configured.")));
    DeleteAclsResponse::default().with_filter_results(vec![result; request.filters.len()])
}
