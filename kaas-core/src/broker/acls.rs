//! Authorization for the handlers, and CreateAcls, DescribeAcls and DeleteAcls: the decisions
//! are `acl::authorizer`'s, on the bindings this broker's snapshot holds and the authorizer
//! settings in force.

use super::Broker;
use crate::acl::authorizer::{Authorizer, Decision, Requester};
use crate::acl::{AclBinding, AclFilter, Operation, Resource, ResourceType};
use crate::env::Env;
use crate::error::{CoreError, CoreResult};

impl<E: Env> Broker<E> {
    /// Whether ACLs are in force (`authorizer.class.name` set).
    pub fn authorizer_enabled(&self) -> bool {
        self.config.authorizer.enabled
    }

    /// Whether `who` may do `operation` on `resource`.
    pub fn authorized(&self, who: Requester, operation: Operation, resource: Resource) -> bool {
        if !self.config.authorizer.enabled {
            return true;
        }
        let snapshot = self.topics.snapshot();
        let authorizer = Authorizer { settings: &self.config.authorizer, acls: &snapshot.acls };
        let allowed = authorizer.authorize(who, operation, &resource) == Decision::Allowed;
        if !allowed {
            crate::metrics::BrokerMetrics::add(&self.metrics.authorization_failures, 1);
        }
        allowed
    }

    /// Whether `who` may do `operation` on some resource of the type (KIP-679).
    pub fn authorized_any(&self, who: Requester, operation: Operation, resource_type: ResourceType) -> bool {
        if !self.config.authorizer.enabled {
            return true;
        }
        let snapshot = self.topics.snapshot();
        let authorizer = Authorizer { settings: &self.config.authorizer, acls: &snapshot.acls };
        authorizer.authorize_any(who, operation, resource_type) == Decision::Allowed
    }

    /// DescribeAcls: the bindings the filter selects.
    pub fn describe_acls(&self, filter: &AclFilter) -> CoreResult<Vec<AclBinding>> {
        if !self.config.authorizer.enabled {
            return Err(CoreError::SecurityDisabled);
        }
        let snapshot = self.topics.snapshot();
        Ok(snapshot.acls.bindings.iter().filter(|b| filter.matches(b)).cloned().collect())
    }

    /// CreateAcls: per binding, created or why not.
    pub async fn create_acls(&self, bindings: Vec<AclBinding>) -> CoreResult<Vec<CoreResult<()>>> {
        if !self.config.authorizer.enabled {
            return Err(CoreError::SecurityDisabled);
        }
        self.topics.create_acls(bindings).await
    }

    /// DeleteAcls: per filter, the bindings deleted or why not.
    pub async fn delete_acls(&self, filters: Vec<AclFilter>) -> CoreResult<Vec<CoreResult<Vec<AclBinding>>>> {
        if !self.config.authorizer.enabled {
            return Err(CoreError::SecurityDisabled);
        }
        self.topics.delete_acls(filters).await
    }
}
