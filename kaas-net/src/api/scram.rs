//! DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), v0: decode, call
//! kaas-core (`broker::scram`), encode, with Apache's codes and messages.

use kaas_core::acl::{Operation, Resource};
use kaas_core::broker::scram::{ScramDeletion, ScramRefusal, ScramUpsertion};
use kaas_core::env::Env;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;

use super::text;
use crate::connection::Context;

const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const KAFKA_STORAGE_ERROR: i16 = 56;
const RESOURCE_NOT_FOUND: i16 = 91;
const DUPLICATE_RESOURCE: i16 = 92;
const UNACCEPTABLE_CREDENTIAL: i16 = 93;

fn refusal(why: &ScramRefusal) -> (i16, String) {
    match why {
        ScramRefusal::UnknownMechanism => (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism".into()),
        ScramRefusal::Unacceptable(m) => (UNACCEPTABLE_CREDENTIAL, m.to_string()),
        ScramRefusal::NotFound(m) => (RESOURCE_NOT_FOUND, m.to_string()),
        ScramRefusal::Duplicate(m) => (DUPLICATE_RESOURCE, m.to_string()),
        ScramRefusal::Storage(m) => (KAFKA_STORAGE_ERROR, m.clone()),
    }
}

pub async fn alter<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    // ALTER on the cluster, as Apache checks: each user is answered CLUSTER_AUTHORIZATION_FAILED.
    if !ctx.authorized(Operation::Alter, Resource::cluster()) {
        let users: std::collections::BTreeSet<String> = request
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(request.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        let results = users
            .into_iter()
            .map(|user| {
                AlterUserScramCredentialsResult::default()
                    .with_user(text(&user))
                    .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            })
            .collect();
        return AlterUserScramCredentialsResponse::default().with_results(results);
    }
    let deletions = request
        .deletions
        .into_iter()
        .map(|d| ScramDeletion { user: d.name.to_string(), mechanism: d.mechanism })
        .collect();
    let upsertions = request
        .upsertions
        .into_iter()
        .map(|u| ScramUpsertion {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt,
            salted_password: u.salted_password,
        })
        .collect();
    let results = ctx
        .broker
        .alter_scram_credentials(deletions, upsertions)
        .await
        .into_iter()
        .map(|(user, result)| {
            let (code, message) = result.err().as_ref().map_or((0, None), |why| {
                let (code, message) = refusal(why);
                (code, Some(text(&message)))
            });
            AlterUserScramCredentialsResult::default()
                .with_user(text(&user))
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !ctx.authorized(Operation::Describe, Resource::cluster()) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let users = request.users.map(|users| users.into_iter().map(|u| u.name.to_string()).collect());
    match ctx.broker.describe_scram_credentials(users).await {
        Err(why) => {
            let (code, message) = refusal(&why);
            DescribeUserScramCredentialsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(text(&message)))
        }
        Ok(described) => {
            let results = described
                .into_iter()
                .map(|(user, result)| {
                    let described = DescribeUserScramCredentialsResult::default().with_user(text(&user));
                    match result {
                        Ok(infos) => described.with_credential_infos(
                            infos
                                .into_iter()
                                .map(|(mechanism, iterations)| {
                                    CredentialInfo::default().with_mechanism(mechanism).with_iterations(iterations)
                                })
                                .collect(),
                        ),
                        Err(why) => {
                            let (code, message) = refusal(&why);
                            described.with_error_code(code).with_error_message(Some(text(&message)))
                        }
                    }
                })
                .collect();
            DescribeUserScramCredentialsResponse::default().with_results(results)
        }
    }
}
