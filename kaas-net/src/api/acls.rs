//! DescribeAcls, CreateAcls and DeleteAcls (v1-v3): the bindings on the volume, through
//! kaas-core (`Broker::describe_acls` and its siblings). With no authorizer configured they
//! answer SECURITY_DISABLED with Apache's messages. Describing needs DESCRIBE on the cluster,
//! changing needs ALTER, as in Apache.

use std::collections::BTreeMap;

use kaas_core::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, Resource, ResourceType};
use kaas_core::env::Env;
use kaas_core::error::CoreError;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::text;
use crate::connection::Context;
use crate::error::code as error_code;

const DISABLED: i16 = ResponseError::SecurityDisabled.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();
const INVALID: i16 = ResponseError::InvalidRequest.code();

fn disabled_message(e: &CoreError, describe: bool) -> Option<StrBytes> {
    match e {
        CoreError::SecurityDisabled if describe => Some(text("No Authorizer is configured on the broker")),
        CoreError::SecurityDisabled => Some(text("No Authorizer is configured.")),
        CoreError::InvalidRequest(m) | CoreError::Storage(m) => Some(text(m)),
        _ => None,
    }
}

/// A filter of DescribeAcls or DeleteAcls, if its codes are known.
#[allow(clippy::too_many_arguments)]
fn filter(
    resource_type: i8,
    resource_name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Option<AclFilter> {
    Some(AclFilter {
        resource_type: ResourceType::from_code(resource_type)?,
        resource_name: resource_name.map(|n| n.to_string()),
        pattern_type: PatternType::from_code(pattern_type)?,
        principal: principal.map(|p| p.to_string()),
        host: host.map(|h| h.to_string()),
        operation: Operation::from_code(operation)?,
        permission: Permission::from_code(permission)?,
    })
}

fn binding(c: &AclCreation) -> Result<AclBinding, String> {
    let unknown = |what: &str, code: i8| format!("Invalid {what} {code}");
    Ok(AclBinding {
        resource_type: ResourceType::from_code(c.resource_type)
            .ok_or_else(|| unknown("resource type", c.resource_type))?,
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type)
            .ok_or_else(|| unknown("pattern type", c.resource_pattern_type))?,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: Operation::from_code(c.operation).ok_or_else(|| unknown("operation", c.operation))?,
        permission: Permission::from_code(c.permission_type)
            .ok_or_else(|| unknown("permission type", c.permission_type))?,
    })
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let answer = |code: i16, message: Option<StrBytes>| {
        DescribeAclsResponse::default().with_error_code(code).with_error_message(message)
    };
    if !ctx.broker.authorizer_enabled() {
        return answer(DISABLED, disabled_message(&CoreError::SecurityDisabled, true));
    }
    if !ctx.authorized(Operation::Describe, Resource::cluster()) {
        return answer(CLUSTER_DENIED, None);
    }
    let Some(filter) = filter(
        request.resource_type_filter,
        request.resource_name_filter.as_ref(),
        request.pattern_type_filter,
        request.principal_filter.as_ref(),
        request.host_filter.as_ref(),
        request.operation,
        request.permission_type,
    ) else {
        return answer(INVALID, Some(text("The request contained an invalid ACL filter")));
    };
    match ctx.broker.describe_acls(&filter) {
        Err(e) => answer(error_code(&e), disabled_message(&e, true)),
        Ok(bindings) => {
            let mut resources: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
            for b in bindings {
                let key = (b.resource_type.code(), b.resource_name.clone(), b.pattern_type.code());
                resources.entry(key).or_default().push(
                    AclDescription::default()
                        .with_principal(text(&b.principal))
                        .with_host(text(&b.host))
                        .with_operation(b.operation.code())
                        .with_permission_type(b.permission.code()),
                );
            }
            let resources = resources
                .into_iter()
                .map(|((resource_type, name, pattern_type), acls)| {
                    DescribeAclsResource::default()
                        .with_resource_type(resource_type)
                        .with_resource_name(text(&name))
                        .with_pattern_type(pattern_type)
                        .with_acls(acls)
                })
                .collect();
            answer(0, None).with_resources(resources)
        }
    }
}

pub async fn create<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    let every = |code: i16, message: Option<StrBytes>| {
        let result = AclCreationResult::default().with_error_code(code).with_error_message(message);
        CreateAclsResponse::default().with_results(vec![result; request.creations.len()])
    };
    if !ctx.broker.authorizer_enabled() {
        return every(DISABLED, disabled_message(&CoreError::SecurityDisabled, false));
    }
    if !ctx.authorized(Operation::Alter, Resource::cluster()) {
        return every(CLUSTER_DENIED, None);
    }
    // Bindings whose codes are unknown are refused one by one, as Apache refuses them.
    let parsed: Vec<Result<AclBinding, String>> = request.creations.iter().map(binding).collect();
    let valid: Vec<AclBinding> = parsed.iter().filter_map(|b| b.as_ref().ok().cloned()).collect();
    let mut created = match ctx.broker.create_acls(valid).await {
        Ok(results) => results.into_iter(),
        Err(e) => return every(error_code(&e), disabled_message(&e, false)),
    };
    let results = parsed
        .into_iter()
        .map(|b| match b {
            Err(why) => AclCreationResult::default().with_error_code(INVALID).with_error_message(Some(text(&why))),
            Ok(_) => match created.next().expect("one result per valid binding") {
                Ok(()) => AclCreationResult::default(),
                Err(e) => AclCreationResult::default()
                    .with_error_code(error_code(&e))
                    .with_error_message(disabled_message(&e, false)),
            },
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

fn delete_filter(f: &DeleteAclsFilter) -> Option<AclFilter> {
    filter(
        f.resource_type_filter,
        f.resource_name_filter.as_ref(),
        f.pattern_type_filter,
        f.principal_filter.as_ref(),
        f.host_filter.as_ref(),
        f.operation,
        f.permission_type,
    )
}

pub async fn delete<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let every = |code: i16, message: Option<StrBytes>| {
        let result = DeleteAclsFilterResult::default().with_error_code(code).with_error_message(message);
        DeleteAclsResponse::default().with_filter_results(vec![result; request.filters.len()])
    };
    if !ctx.broker.authorizer_enabled() {
        return every(DISABLED, disabled_message(&CoreError::SecurityDisabled, false));
    }
    if !ctx.authorized(Operation::Alter, Resource::cluster()) {
        return every(CLUSTER_DENIED, None);
    }
    let parsed: Vec<Option<AclFilter>> = request.filters.iter().map(delete_filter).collect();
    let valid: Vec<AclFilter> = parsed.iter().flatten().cloned().collect();
    let mut deleted = match ctx.broker.delete_acls(valid).await {
        Ok(results) => results.into_iter(),
        Err(e) => return every(error_code(&e), disabled_message(&e, false)),
    };
    let results = parsed
        .into_iter()
        .map(|f| match f {
            None => DeleteAclsFilterResult::default()
                .with_error_code(INVALID)
                .with_error_message(Some(text("The request contained an invalid ACL filter"))),
            Some(_) => match deleted.next().expect("one result per valid filter") {
                Err(e) => DeleteAclsFilterResult::default()
                    .with_error_code(error_code(&e))
                    .with_error_message(disabled_message(&e, false)),
                Ok(bindings) => DeleteAclsFilterResult::default().with_matching_acls(
                    bindings
                        .into_iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.resource_type.code())
                                .with_resource_name(text(&b.resource_name))
                                .with_pattern_type(b.pattern_type.code())
                                .with_principal(text(&b.principal))
                                .with_host(text(&b.host))
                                .with_operation(b.operation.code())
                                .with_permission_type(b.permission.code())
                        })
                        .collect(),
                ),
            },
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
