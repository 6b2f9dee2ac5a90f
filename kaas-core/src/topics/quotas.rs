//! Client quotas, the topic manager's side: it reads every entity's file again on each rescan
//! (so a quota altered on a peer binds here within a heartbeat), writes AlterClientQuotas'
//! changes one entity at a time on what the volume holds now, and publishes the quotas in the
//! snapshot the handlers throttle by.

use std::sync::Arc;

use super::TopicManager;
use crate::cluster::quotas;
use crate::env::Env;
use crate::quota::{self, QuotaEntity, QuotaOp, QuotaRefusal};

/// One entity's alteration's outcome: refused (with why), or the storage failed.
pub type AlterOutcome = Result<Result<(), QuotaRefusal>, crate::error::CoreError>;

impl<E: Env> TopicManager<E> {
    /// A peer's change, picked up on the rescan; whether anything changed. A listing that
    /// fails keeps what this broker has, logged.
    pub(super) async fn rescan_quotas(&mut self) -> bool {
        match quotas::read_all(self.env.volume(), &self.quotas).await {
            Ok((read, unreadable)) => {
                self.quota_files_unreadable = unreadable;
                if read != *self.quotas {
                    self.quotas = Arc::new(read);
                    return true;
                }
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the client quotas");
                false
            }
        }
    }

    /// AlterClientQuotas: per entity, its changes checked and (unless `validate_only`) written
    /// over what its file holds now. In force here at once, on peers within a heartbeat.
    pub(super) async fn alter_quotas(
        &mut self,
        alterations: Vec<(QuotaEntity, Vec<QuotaOp>)>,
        validate_only: bool,
    ) -> Vec<AlterOutcome> {
        let mut results = Vec::with_capacity(alterations.len());
        let mut seen = std::collections::BTreeSet::new();
        for (entity, ops) in alterations {
            if !seen.insert(entity.clone()) {
                results.push(Ok(Err(QuotaRefusal::Invalid(format!("Ignoring duplicate entity {entity}")))));
                continue;
            }
            results.push(self.alter_entity(&entity, &ops, validate_only).await);
        }
        if !validate_only {
            self.rescan_quotas().await;
            self.publish();
        }
        results
    }

    async fn alter_entity(&mut self, entity: &QuotaEntity, ops: &[QuotaOp], validate_only: bool) -> AlterOutcome {
        let mut values = quotas::read_entity(self.env.volume(), entity).await?;
        if let Err(refused) = quota::alter(entity, ops, &mut values) {
            return Ok(Err(refused));
        }
        if validate_only {
            return Ok(Ok(()));
        }
        let is_new = !self.quotas.entities.contains_key(entity);
        if is_new && !values.is_empty() && self.quotas.entities.len() >= quotas::ENTITIES_MAX {
            return Ok(Err(QuotaRefusal::Invalid(format!("more than {} entities with quotas", quotas::ENTITIES_MAX))));
        }
        quotas::write_entity(self.env.volume(), entity, &values).await.map(Ok)
    }
}
