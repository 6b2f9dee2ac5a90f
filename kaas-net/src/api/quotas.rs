//! DescribeClientQuotas and AlterClientQuotas (v0-v1): the client quotas on the volume, through
//! kaas-core (`Broker::describe_client_quotas`, `Broker::alter_client_quotas`). Describing needs
//! DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS, as in Apache.

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::Env;
use kaas_core::quota::{QuotaEntity, QuotaFilter, QuotaOp, QuotaRefusal};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::text;
use crate::connection::Context;
use crate::error;

/// One entity's changes, as kaas-core takes them.
type Alteration = (QuotaEntity, Vec<QuotaOp>);

const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();

fn refusal(r: &QuotaRefusal) -> (i16, StrBytes) {
    match r {
        QuotaRefusal::Invalid(m) => (ResponseError::InvalidRequest.code(), text(m)),
        QuotaRefusal::UnknownEntityType(m) => (ResponseError::UnsupportedVersion.code(), text(m)),
    }
}

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let answer = |code: i16, message: Option<StrBytes>| {
        DescribeClientQuotasResponse::default().with_error_code(code).with_error_message(message).with_entries(None)
    };
    if !ctx.authorized(Operation::DescribeConfigs, Resource::cluster()) {
        return answer(CLUSTER_DENIED, Some(text("Cluster authorization failed.")));
    }
    let filter = QuotaFilter {
        components: request
            .components
            .iter()
            .map(|c| (c.entity_type.to_string(), c.match_type, c._match.as_ref().map(|m| m.to_string())))
            .collect(),
        strict: request.strict,
    };
    match ctx.broker.describe_client_quotas(&filter) {
        Err(r) => {
            let (code, message) = refusal(&r);
            answer(code, Some(message))
        }
        Ok(found) => {
            use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
            let entries = found
                .into_iter()
                .map(|(entity, values)| {
                    EntryData::default()
                        .with_entity(
                            entity
                                .0
                                .iter()
                                .map(|(t, n)| {
                                    EntityData::default()
                                        .with_entity_type(text(t.name()))
                                        .with_entity_name(n.as_deref().map(text))
                                })
                                .collect(),
                        )
                        .with_values(
                            values
                                .iter()
                                .map(|(k, v)| ValueData::default().with_key(text(k.name())).with_value(*v))
                                .collect(),
                        )
                })
                .collect();
            answer(0, None).with_entries(Some(entries))
        }
    }
}

pub async fn alter<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
    let entity_of = |e: &alter_client_quotas_request::EntryData| {
        e.entity
            .iter()
            .map(|c| {
                EntityData::default().with_entity_type(c.entity_type.clone()).with_entity_name(c.entity_name.clone())
            })
            .collect::<Vec<_>>()
    };
    let entry = |e: &alter_client_quotas_request::EntryData, code: i16, message: Option<StrBytes>| {
        EntryData::default().with_entity(entity_of(e)).with_error_code(code).with_error_message(message)
    };
    if !ctx.authorized(Operation::AlterConfigs, Resource::cluster()) {
        let entries = request.entries.iter().map(|e| entry(e, CLUSTER_DENIED, None)).collect();
        return AlterClientQuotasResponse::default().with_entries(entries);
    }
    // Entries whose entity does not parse are refused here; the rest go to kaas-core
    // together, in order.
    let parsed: Vec<Result<Alteration, (i16, StrBytes)>> = request
        .entries
        .iter()
        .map(|e| {
            let components = e.entity.iter().map(|c| (c.entity_type.as_str(), c.entity_name.as_deref()));
            let entity = QuotaEntity::parse(components).map_err(|r| refusal(&r))?;
            Ok((entity, e.ops.iter().map(|o| (o.key.to_string(), (!o.remove).then_some(o.value))).collect()))
        })
        .collect();
    let alterations: Vec<_> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let mut outcomes = match ctx.broker.alter_client_quotas(alterations, request.validate_only).await {
        Ok(outcomes) => outcomes.into_iter(),
        Err(e) => {
            let message = error::message(&e).map(|m| text(&m));
            let entries = request.entries.iter().map(|x| entry(x, error::code(&e), message.clone())).collect();
            return AlterClientQuotasResponse::default().with_entries(entries);
        }
    };
    let entries = request
        .entries
        .iter()
        .zip(parsed)
        .map(|(e, p)| match p {
            Err((code, message)) => entry(e, code, Some(message)),
            Ok(_) => match outcomes.next().expect("an outcome per alteration") {
                Ok(Ok(())) => entry(e, 0, None),
                Ok(Err(r)) => {
                    let (code, message) = refusal(&r);
                    entry(e, code, Some(message))
                }
                Err(err) => entry(e, error::code(&err), error::message(&err).map(|m| text(&m))),
            },
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}
