//! The authorizer's decisions, as Apache's StandardAuthorizer makes them: super users may do
//! anything; a DENY that matches wins over any ALLOW; an ALLOW of READ, WRITE, DELETE or ALTER
//! implies DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS; a resource no binding covers
//! is open only with `allow.everyone.if.no.acl.found`. Pure: the bindings and the settings in,
//! a yes or no out.

use std::collections::BTreeSet;

use super::{AclBinding, Operation, PatternType, Permission, Resource, ResourceType, WILDCARD, WILDCARD_PRINCIPAL};

/// The bindings in force on a broker, as last read from the volume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclSet {
    pub bindings: BTreeSet<AclBinding>,
    /// Why a binding file could not be read: then nothing but a super user is allowed
    /// anything (fail closed), as a DENY may be among what could not be read.
    pub unreadable: Option<String>,
}

/// The settings the decisions take: `authorizer.class.name` (set: ACLs in force),
/// `super.users`, `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerSettings {
    pub enabled: bool,
    pub super_users: BTreeSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerSettings {
    /// `super.users` as Apache reads it: principals separated by semicolons.
    pub fn parse_super_users(value: &str) -> BTreeSet<String> {
        value.split(';').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
}

/// Who asks: the connection's principal and the client's address.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub principal: &'a str,
    pub host: &'a str,
}

pub struct Authorizer<'a> {
    pub settings: &'a AuthorizerSettings,
    pub acls: &'a AclSet,
}

/// Whether an ALLOW of `granted` allows `wanted`.
fn implies(granted: Operation, wanted: Operation) -> bool {
    granted == wanted
        || granted == Operation::All
        || (wanted == Operation::Describe
            && matches!(granted, Operation::Read | Operation::Write | Operation::Delete | Operation::Alter))
        || (wanted == Operation::DescribeConfigs && granted == Operation::AlterConfigs)
}

fn applies_to(acl: &AclBinding, who: Requester) -> bool {
    (acl.principal == who.principal || acl.principal == WILDCARD_PRINCIPAL)
        && (acl.host == who.host || acl.host == WILDCARD)
}

impl Authorizer<'_> {
    /// Whether `who` may do `operation` on `resource`.
    pub fn authorize(&self, who: Requester, operation: Operation, resource: &Resource) -> Decision {
        let decided = |allowed: bool| if allowed { Decision::Allowed } else { Decision::Denied };
        if !self.settings.enabled || self.settings.super_users.contains(who.principal) {
            return Decision::Allowed;
        }
        if self.acls.unreadable.is_some() {
            return Decision::Denied;
        }
        let mut covered = false;
        let mut allowed = false;
        for acl in self.acls.bindings.iter().filter(|a| a.covers(resource)) {
            covered = true;
            if !applies_to(acl, who) {
                continue;
            }
            match acl.permission {
                Permission::Deny if acl.operation == operation || acl.operation == Operation::All => {
                    return Decision::Denied;
                }
                Permission::Allow if implies(acl.operation, operation) => allowed = true,
                _ => {}
            }
        }
        decided(allowed || (!covered && self.settings.allow_everyone_if_no_acl_found))
    }

    /// Whether `who` may do `operation` on some resource of the type (KIP-679: an idempotent
    /// producer needs WRITE on any topic): an ALLOW that no matching DENY covers entirely.
    pub fn authorize_any(&self, who: Requester, operation: Operation, resource_type: ResourceType) -> Decision {
        if !self.settings.enabled || self.settings.super_users.contains(who.principal) {
            return Decision::Allowed;
        }
        if self.acls.unreadable.is_some() {
            return Decision::Denied;
        }
        let of_type: Vec<&AclBinding> =
            self.acls.bindings.iter().filter(|a| a.resource_type == resource_type).collect();
        let mine = |a: &&&AclBinding| applies_to(a, who);
        let denies: Vec<&&AclBinding> = of_type
            .iter()
            .filter(mine)
            .filter(|a| a.permission == Permission::Deny && (a.operation == operation || a.operation == Operation::All))
            .collect();
        // A DENY covers an ALLOW when every name the ALLOW names is one the DENY names.
        let denied = |allow: &AclBinding| {
            denies.iter().any(|d| match d.pattern_type {
                PatternType::Literal if d.resource_name == WILDCARD => true,
                PatternType::Literal => {
                    allow.pattern_type == PatternType::Literal && allow.resource_name == d.resource_name
                }
                PatternType::Prefixed => allow.resource_name.starts_with(&d.resource_name),
                _ => false,
            })
        };
        let allowed = of_type
            .iter()
            .filter(mine)
            .filter(|a| a.permission == Permission::Allow && implies(a.operation, operation))
            .any(|a| !denied(a));
        let open = of_type.is_empty() && self.settings.allow_everyone_if_no_acl_found;
        if allowed || open { Decision::Allowed } else { Decision::Denied }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::CLUSTER_NAME;
    use crate::acl::tests::acl;
    use Operation::*;
    use PatternType::{Literal, Prefixed};
    use Permission::{Allow, Deny};
    use ResourceType::{Cluster, Group, Topic};

    const ALICE: Requester = Requester { principal: "User:alice", host: "10.0.0.1" };
    const BOB: Requester = Requester { principal: "User:bob", host: "10.0.0.2" };

    fn settings() -> AuthorizerSettings {
        AuthorizerSettings { enabled: true, ..Default::default() }
    }

    fn set(bindings: Vec<AclBinding>) -> AclSet {
        AclSet { bindings: bindings.into_iter().collect(), unreadable: None }
    }

    fn decide(settings: &AuthorizerSettings, acls: &AclSet, who: Requester, op: Operation, r: Resource) -> Decision {
        Authorizer { settings, acls }.authorize(who, op, &r)
    }

    #[test]
    fn deny_wins_and_allow_is_per_principal_and_host() {
        let s = settings();
        let mut from_host = acl(Topic, "t", Literal, "User:bob", Read, Allow);
        from_host.host = "10.0.0.9".into();
        let acls = set(vec![
            acl(Topic, "t", Literal, "User:*", Read, Allow),
            acl(Topic, "t", Prefixed, "User:alice", Read, Deny),
            from_host,
        ]);
        assert_eq!(decide(&s, &acls, ALICE, Read, Resource::topic("t")), Decision::Denied, "deny wins");
        assert_eq!(decide(&s, &acls, BOB, Read, Resource::topic("t")), Decision::Allowed, "User:* allows bob");
        assert_eq!(decide(&s, &acls, BOB, Write, Resource::topic("t")), Decision::Denied, "READ is not WRITE");
        let only_host = set(vec![acl(Topic, "t", Literal, "User:bob", Read, Allow)]
            .into_iter()
            .map(|mut a| {
                a.host = "10.0.0.9".into();
                a
            })
            .collect());
        assert_eq!(decide(&s, &only_host, BOB, Read, Resource::topic("t")), Decision::Denied, "from another host");
    }

    #[test]
    fn implied_operations_are_apaches() {
        let s = settings();
        for (granted, wanted, allowed) in [
            (Read, Describe, true),
            (Write, Describe, true),
            (Delete, Describe, true),
            (Alter, Describe, true),
            (AlterConfigs, DescribeConfigs, true),
            (All, ClusterAction, true),
            (Describe, Read, false),
            (Create, Describe, false),
            (DescribeConfigs, AlterConfigs, false),
        ] {
            let acls = set(vec![acl(Topic, "t", Literal, "User:alice", granted, Allow)]);
            let decision = decide(&s, &acls, ALICE, wanted, Resource::topic("t"));
            assert_eq!(decision == Decision::Allowed, allowed, "{granted:?} gives {wanted:?}");
        }
        // A DENY of READ does not deny DESCRIBE, which another ALLOW gives.
        let acls = set(vec![
            acl(Topic, "t", Literal, "User:alice", Read, Deny),
            acl(Topic, "t", Literal, "User:alice", Write, Allow),
        ]);
        assert_eq!(decide(&s, &acls, ALICE, Describe, Resource::topic("t")), Decision::Allowed);
    }

    #[test]
    fn super_users_disabled_authorizer_and_the_no_acl_rule() {
        let mut s = settings();
        let none = AclSet::default();
        assert_eq!(decide(&s, &none, ALICE, Read, Resource::topic("t")), Decision::Denied, "closed by default");
        s.allow_everyone_if_no_acl_found = true;
        assert_eq!(decide(&s, &none, ALICE, Read, Resource::topic("t")), Decision::Allowed);
        let other = set(vec![acl(Topic, "t", Literal, "User:bob", Read, Allow)]);
        assert_eq!(
            decide(&s, &other, ALICE, Read, Resource::topic("t")),
            Decision::Denied,
            "a resource with any binding is not open to everyone"
        );
        assert_eq!(decide(&s, &other, ALICE, Read, Resource::group("t")), Decision::Allowed, "the group has none");
        s.allow_everyone_if_no_acl_found = false;
        s.super_users = AuthorizerSettings::parse_super_users("User:admin; User:alice");
        assert_eq!(decide(&s, &none, ALICE, ClusterAction, Resource::cluster()), Decision::Allowed);
        let off = AuthorizerSettings::default();
        assert_eq!(decide(&off, &none, BOB, Write, Resource::topic("t")), Decision::Allowed, "no authorizer");
    }

    #[test]
    fn an_unreadable_binding_file_fails_closed() {
        let mut s = settings();
        s.allow_everyone_if_no_acl_found = true;
        s.super_users = AuthorizerSettings::parse_super_users("User:admin");
        let acls = AclSet {
            bindings: [acl(Topic, "*", Literal, "User:*", All, Allow)].into_iter().collect(),
            unreadable: Some("torn".into()),
        };
        assert_eq!(decide(&s, &acls, ALICE, Read, Resource::topic("t")), Decision::Denied);
        let admin = Requester { principal: "User:admin", host: "h" };
        assert_eq!(decide(&s, &acls, admin, Read, Resource::topic("t")), Decision::Allowed);
        let any = Authorizer { settings: &s, acls: &acls }.authorize_any(ALICE, Write, Topic);
        assert_eq!(any, Decision::Denied);
    }

    #[test]
    fn write_on_any_topic_as_kip_679_reads_it() {
        let s = settings();
        let any = |acls: &AclSet, who| Authorizer { settings: &s, acls }.authorize_any(who, Write, Topic);
        assert_eq!(any(&AclSet::default(), ALICE), Decision::Denied);
        let literal = set(vec![acl(Topic, "orders", Literal, "User:alice", Write, Allow)]);
        assert_eq!(any(&literal, ALICE), Decision::Allowed);
        assert_eq!(any(&literal, BOB), Decision::Denied);
        let denied_by_prefix = set(vec![
            acl(Topic, "orders", Literal, "User:alice", Write, Allow),
            acl(Topic, "ord", Prefixed, "User:alice", Write, Deny),
        ]);
        assert_eq!(any(&denied_by_prefix, ALICE), Decision::Denied);
        let denied_elsewhere = set(vec![
            acl(Topic, "orders", Literal, "User:alice", Write, Allow),
            acl(Topic, "payments", Literal, "User:alice", Write, Deny),
        ]);
        assert_eq!(any(&denied_elsewhere, ALICE), Decision::Allowed);
        let denied_everywhere = set(vec![
            acl(Topic, "orders", Prefixed, "User:alice", All, Allow),
            acl(Topic, "*", Literal, "User:*", Write, Deny),
        ]);
        assert_eq!(any(&denied_everywhere, ALICE), Decision::Denied);
        let cluster = set(vec![acl(Cluster, CLUSTER_NAME, Literal, "User:alice", IdempotentWrite, Allow)]);
        assert_eq!(
            Authorizer { settings: &s, acls: &cluster }.authorize(ALICE, IdempotentWrite, &Resource::cluster()),
            Decision::Allowed
        );
        let groups = set(vec![acl(Group, "g", Literal, "User:alice", Read, Allow)]);
        assert_eq!(any(&groups, ALICE), Decision::Denied, "a group's ACL is no topic's");
    }
}
