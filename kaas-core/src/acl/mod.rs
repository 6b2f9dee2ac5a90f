//! Access control lists in Kafka's model: a binding says that a principal, from a host, is
//! allowed or denied an operation on the resources a pattern names (a literal name, `*`, or a
//! prefix). The bindings live on the volume (`cluster/acls.rs`), shared by every broker; the
//! decisions are `authorizer.rs`'s. Codes are the wire's (`AclOperation`, `ResourceType`,
//! `PatternType`, `AclPermissionType` of Apache's clients), so that handlers only convert.

pub mod authorizer;

use serde::{Deserialize, Serialize};

pub use authorizer::{Authorizer, Decision};

/// The principal a binding for everyone names, and the host of every host.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
pub const WILDCARD: &str = "*";

macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }

            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)*
                }
            }
        }
    };
}

codes!(
    /// What a binding names (`ResourceType`); `Any` only in filters.
    ResourceType { Any = 1, Topic = 2, Group = 3, Cluster = 4, TransactionalId = 5, DelegationToken = 6, User = 7 }
);

codes!(
    /// How a binding's name is read (`PatternType`); `Any` and `Match` only in filters.
    PatternType { Any = 1, Match = 2, Literal = 3, Prefixed = 4 }
);

codes!(
    /// What a binding allows or denies (`AclOperation`); `Any` only in filters.
    Operation {
        Any = 1,
        All = 2,
        Read = 3,
        Write = 4,
        Create = 5,
        Delete = 6,
        Alter = 7,
        Describe = 8,
        ClusterAction = 9,
        DescribeConfigs = 10,
        AlterConfigs = 11,
        IdempotentWrite = 12,
        CreateTokens = 13,
        DescribeTokens = 14,
        TwoPhaseCommit = 15,
    }
);

codes!(
    /// ALLOW or DENY (`AclPermissionType`); `Any` only in filters.
    Permission { Any = 1, Deny = 2, Allow = 3 }
);

/// The cluster's one resource name.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// A resource a request touches: what the authorizer is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource<'a> {
    pub resource_type: ResourceType,
    pub name: &'a str,
}

impl<'a> Resource<'a> {
    pub fn topic(name: &'a str) -> Self {
        Resource { resource_type: ResourceType::Topic, name }
    }

    pub fn group(name: &'a str) -> Self {
        Resource { resource_type: ResourceType::Group, name }
    }

    pub fn transactional_id(name: &'a str) -> Self {
        Resource { resource_type: ResourceType::TransactionalId, name }
    }

    pub fn cluster() -> Self {
        Resource { resource_type: ResourceType::Cluster, name: CLUSTER_NAME }
    }
}

/// One ACL, as CreateAcls gives it and DescribeAcls answers it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Why Apache would refuse to create it (INVALID_REQUEST), if it would.
    pub fn invalid(&self) -> Option<String> {
        if matches!(self.resource_type, ResourceType::Any) {
            return Some("Invalid resource type ANY".into());
        }
        if !matches!(self.pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Some(format!("Invalid pattern type {:?}", self.pattern_type));
        }
        if matches!(self.operation, Operation::Any) {
            return Some("Invalid operation ANY".into());
        }
        if matches!(self.permission, Permission::Any) {
            return Some("Invalid permission type ANY".into());
        }
        if self.resource_name.is_empty() {
            return Some("Resource name must not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return Some(format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        if !self.principal.contains(':') {
            return Some(format!("Could not parse principal from `{}` (no colon is present ...)", self.principal));
        }
        if self.host.is_empty() {
            return Some("Host must not be empty".into());
        }
        None
    }

    /// Whether this binding's pattern covers `resource` (literal, `*`, or prefix).
    pub fn covers(&self, resource: &Resource) -> bool {
        if self.resource_type != resource.resource_type {
            return false;
        }
        match self.pattern_type {
            PatternType::Literal => self.resource_name == WILDCARD || self.resource_name == resource.name,
            PatternType::Prefixed => resource.name.starts_with(&self.resource_name),
            PatternType::Any | PatternType::Match => false,
        }
    }
}

/// What DescribeAcls and DeleteAcls select by: each field a value or "any".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    /// Whether `acl` is one the filter selects. A MATCH filter with a name selects the bindings
    /// that would apply to a resource of that name: the literal one, `*`, and every prefix of it.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        let resource_type = self.resource_type == ResourceType::Any || self.resource_type == acl.resource_type;
        let pattern = match (self.pattern_type, &self.resource_name) {
            (PatternType::Any, None) => true,
            (PatternType::Any, Some(name)) => *name == acl.resource_name,
            (PatternType::Match, None) => true,
            (PatternType::Match, Some(name)) => match acl.pattern_type {
                PatternType::Literal => acl.resource_name == *name || acl.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&acl.resource_name),
                _ => false,
            },
            (exact, name) => exact == acl.pattern_type && name.as_ref().is_none_or(|n| *n == acl.resource_name),
        };
        let principal = self.principal.as_ref().is_none_or(|p| *p == acl.principal);
        let host = self.host.as_ref().is_none_or(|h| *h == acl.host);
        let operation = self.operation == Operation::Any || self.operation == acl.operation;
        let permission = self.permission == Permission::Any || self.permission == acl.permission;
        resource_type && pattern && principal && host && operation && permission
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn acl(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: Operation,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.into(),
            pattern_type,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation,
            permission,
        }
    }

    fn any() -> AclFilter {
        AclFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        }
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_are_none() {
        for op in Operation::ALL {
            assert_eq!(Operation::from_code(op.code()), Some(*op));
        }
        assert_eq!(Operation::from_code(0), None, "UNKNOWN is no operation");
        assert_eq!(ResourceType::from_code(8), None);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(Permission::Allow.code(), 3);
    }

    #[test]
    fn patterns_cover_literal_wildcard_and_prefixed_names() {
        use {Operation::Read, PatternType::*, Permission::Allow, ResourceType::Topic};
        let literal = acl(Topic, "orders", Literal, "User:a", Read, Allow);
        let wildcard = acl(Topic, "*", Literal, "User:a", Read, Allow);
        let prefixed = acl(Topic, "ord", Prefixed, "User:a", Read, Allow);
        assert!(literal.covers(&Resource::topic("orders")));
        assert!(!literal.covers(&Resource::topic("orders2")));
        assert!(!literal.covers(&Resource::group("orders")), "a topic's ACL is not a group's");
        assert!(wildcard.covers(&Resource::topic("anything")));
        assert!(prefixed.covers(&Resource::topic("orders2")));
        assert!(!prefixed.covers(&Resource::topic("or")));
    }

    #[test]
    fn filters_select_as_apache_selects() {
        use {Operation::*, PatternType::*, Permission::*, ResourceType::*};
        let literal = acl(Topic, "orders", Literal, "User:a", Read, Allow);
        let prefixed = acl(Topic, "ord", Prefixed, "User:b", Write, Deny);
        let wildcard = acl(Topic, "*", Literal, "User:a", Read, Allow);
        let filter = |f: AclFilter| -> Vec<bool> { [&literal, &prefixed, &wildcard].map(|a| f.matches(a)).to_vec() };
        assert_eq!(filter(any()), [true, true, true]);
        let named = AclFilter { resource_name: Some("orders".into()), ..any() };
        assert_eq!(filter(named.clone()), [true, false, false], "ANY with a name: that exact name");
        let matching = AclFilter { pattern_type: Match, ..named.clone() };
        assert_eq!(filter(matching), [true, true, true], "MATCH: every binding that applies to it");
        let literal_only = AclFilter { pattern_type: Literal, ..any() };
        assert_eq!(filter(literal_only), [true, false, true]);
        let by_principal = AclFilter { principal: Some("User:b".into()), ..any() };
        assert_eq!(filter(by_principal), [false, true, false]);
        let allow_reads = AclFilter { operation: Read, permission: Allow, ..any() };
        assert_eq!(filter(allow_reads), [true, false, true]);
        let groups = AclFilter { resource_type: Group, ..any() };
        assert_eq!(filter(groups), [false, false, false]);
    }

    #[test]
    fn bindings_apache_refuses_are_invalid() {
        use {Operation::*, PatternType::*, Permission::*, ResourceType::*};
        assert!(acl(Topic, "t", Literal, "User:a", Read, Allow).invalid().is_none());
        assert!(acl(Topic, "t", Match, "User:a", Read, Allow).invalid().is_some());
        assert!(acl(Topic, "t", Literal, "User:a", Operation::Any, Allow).invalid().is_some());
        assert!(acl(Topic, "t", Literal, "User:a", Read, Permission::Any).invalid().is_some());
        assert!(acl(Topic, "t", Literal, "alice", Read, Allow).invalid().is_some(), "a principal has a type");
        assert!(acl(Cluster, "other", Literal, "User:a", Alter, Allow).invalid().is_some());
        assert!(acl(Cluster, CLUSTER_NAME, Literal, "User:a", Alter, Allow).invalid().is_none());
    }
}
