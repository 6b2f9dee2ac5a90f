//! `kaas admin acls`: list, add and remove ACLs (DescribeAcls, CreateAcls, DeleteAcls), with
//! the resource, pattern, principal, host, operation and permission of Kafka's model.

use kaas_core::acl::{Operation, PatternType, Permission, ResourceType};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::*;

use super::connection::{Admin, check, text};
use super::table::Table;
use crate::cells;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// The ACLs matching a filter (none: every ACL)
    List {
        #[command(flatten)]
        resource: ResourceArgs,
        /// Only this principal's, e.g. User:alice
        #[arg(long)]
        principal: Option<String>,
    },
    /// Allow (or --deny) a principal operations on a resource
    Add(BindingArgs),
    /// Remove the ACLs matching a filter (no --operation: any)
    Remove(BindingArgs),
}

#[derive(Debug, clap::Args)]
pub struct ResourceArgs {
    #[arg(long, group = "resource")]
    topic: Option<String>,
    #[arg(long, group = "resource")]
    group: Option<String>,
    #[arg(long, group = "resource")]
    transactional_id: Option<String>,
    /// The cluster itself (CLUSTER_ACTION, IDEMPOTENT_WRITE, DESCRIBE_CONFIGS, ...)
    #[arg(long, group = "resource")]
    cluster: bool,
    /// How the name is read: literal, prefixed (and in filters any, match)
    #[arg(long, default_value = "literal")]
    pattern: String,
}

#[derive(Debug, clap::Args)]
pub struct BindingArgs {
    #[command(flatten)]
    resource: ResourceArgs,
    /// The principal, e.g. User:alice (User:* for everyone)
    #[arg(long)]
    principal: String,
    /// An operation: read, write, create, delete, alter, describe, cluster-action,
    /// describe-configs, alter-configs, idempotent-write, all (repeatable)
    #[arg(long = "operation")]
    operations: Vec<String>,
    /// The host the principal connects from
    #[arg(long, default_value = "*")]
    host: String,
    /// A DENY rather than an ALLOW
    #[arg(long)]
    deny: bool,
}

/// A code's value by its name, however written: `cluster-action`, `CLUSTER_ACTION`, `ClusterAction`.
fn by_name<T: std::fmt::Debug + Copy>(all: &[T], name: &str) -> Option<T> {
    let plain = |s: &str| s.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_lowercase();
    all.iter().copied().find(|v| plain(&format!("{v:?}")) == plain(name))
}

fn upper(name: impl std::fmt::Debug) -> String {
    let camel = format!("{name:?}");
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

impl ResourceArgs {
    /// The resource type and name, `Any` and no name when none is named.
    fn resource(&self) -> (ResourceType, Option<String>) {
        match (&self.topic, &self.group, &self.transactional_id, self.cluster) {
            (Some(t), ..) => (ResourceType::Topic, Some(t.clone())),
            (_, Some(g), ..) => (ResourceType::Group, Some(g.clone())),
            (_, _, Some(id), _) => (ResourceType::TransactionalId, Some(id.clone())),
            (.., true) => (ResourceType::Cluster, Some(kaas_core::acl::CLUSTER_NAME.to_string())),
            _ => (ResourceType::Any, None),
        }
    }

    fn pattern(&self) -> Result<PatternType, String> {
        by_name(PatternType::ALL, &self.pattern)
            .ok_or(format!("--pattern {}: not literal, prefixed, any or match", self.pattern))
    }
}

impl BindingArgs {
    fn operations(&self) -> Result<Vec<Operation>, String> {
        self.operations
            .iter()
            .map(|o| by_name(Operation::ALL, o).ok_or(format!("--operation {o}: no such operation")))
            .collect()
    }

    fn permission(&self) -> Permission {
        if self.deny { Permission::Deny } else { Permission::Allow }
    }
}

const HEADERS: [&str; 7] = ["RESOURCE TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"];

pub async fn run(admin: &mut Admin, command: Command) -> Result<Vec<Table>, String> {
    match command {
        Command::List { resource, principal } => {
            let (resource_type, name) = resource.resource();
            let request = DescribeAclsRequest::default()
                .with_resource_type_filter(resource_type.code())
                .with_resource_name_filter(name.as_deref().map(text))
                .with_pattern_type_filter(match resource.pattern.as_str() {
                    "literal" if name.is_none() => PatternType::Any.code(),
                    _ => resource.pattern()?.code(),
                })
                .with_principal_filter(principal.as_deref().map(text))
                .with_host_filter(None)
                .with_operation(Operation::Any.code())
                .with_permission_type(Permission::Any.code());
            let answer: DescribeAclsResponse = admin.call(ApiKey::DescribeAcls, 3, &request).await?;
            check("DescribeAcls", answer.error_code, answer.error_message.as_ref())?;
            let mut table = Table::new("acls", &HEADERS);
            for r in &answer.resources {
                for a in &r.acls {
                    table.row(cells![
                        ResourceType::from_code(r.resource_type).map_or("?".into(), upper),
                        r.resource_name.as_str(),
                        PatternType::from_code(r.pattern_type).map_or("?".into(), upper),
                        a.principal.as_str(),
                        a.host.as_str(),
                        Operation::from_code(a.operation).map_or("?".into(), upper),
                        Permission::from_code(a.permission_type).map_or("?".into(), upper)
                    ]);
                }
            }
            Ok(vec![table])
        }
        Command::Add(binding) => {
            let (resource_type, name) = binding.resource.resource();
            let name = name.ok_or("add needs --topic, --group, --transactional-id or --cluster")?;
            let operations = binding.operations()?;
            if operations.is_empty() {
                return Err("add needs an --operation".into());
            }
            let pattern = binding.resource.pattern()?;
            let creations = operations
                .iter()
                .map(|op| {
                    AclCreation::default()
                        .with_resource_type(resource_type.code())
                        .with_resource_name(text(&name))
                        .with_resource_pattern_type(pattern.code())
                        .with_principal(text(&binding.principal))
                        .with_host(text(&binding.host))
                        .with_operation(op.code())
                        .with_permission_type(binding.permission().code())
                })
                .collect();
            let answer: CreateAclsResponse =
                admin.call(ApiKey::CreateAcls, 3, &CreateAclsRequest::default().with_creations(creations)).await?;
            let mut table = Table::new("added", &HEADERS);
            for (op, result) in operations.iter().zip(&answer.results) {
                check("CreateAcls", result.error_code, result.error_message.as_ref())?;
                table.row(cells![
                    upper(resource_type),
                    name,
                    upper(pattern),
                    binding.principal,
                    binding.host,
                    upper(op),
                    upper(binding.permission())
                ]);
            }
            Ok(vec![table])
        }
        Command::Remove(binding) => {
            let (resource_type, name) = binding.resource.resource();
            let mut operations = binding.operations()?;
            if operations.is_empty() {
                operations.push(Operation::Any);
            }
            let pattern = binding.resource.pattern()?;
            let filters = operations
                .iter()
                .map(|op| {
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(resource_type.code())
                        .with_resource_name_filter(name.as_deref().map(text))
                        .with_pattern_type_filter(pattern.code())
                        .with_principal_filter(Some(text(&binding.principal)))
                        .with_host_filter(Some(text(&binding.host)))
                        .with_operation(op.code())
                        .with_permission_type(binding.permission().code())
                })
                .collect();
            let answer: DeleteAclsResponse =
                admin.call(ApiKey::DeleteAcls, 3, &DeleteAclsRequest::default().with_filters(filters)).await?;
            let mut table = Table::new("removed", &HEADERS);
            for result in &answer.filter_results {
                check("DeleteAcls", result.error_code, result.error_message.as_ref())?;
                for m in &result.matching_acls {
                    table.row(cells![
                        ResourceType::from_code(m.resource_type).map_or("?".into(), upper),
                        m.resource_name.as_str(),
                        PatternType::from_code(m.pattern_type).map_or("?".into(), upper),
                        m.principal.as_str(),
                        m.host.as_str(),
                        Operation::from_code(m.operation).map_or("?".into(), upper),
                        Permission::from_code(m.permission_type).map_or("?".into(), upper)
                    ]);
                }
            }
            Ok(vec![table])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_as_operators_write_them() {
        assert_eq!(by_name(Operation::ALL, "cluster-action"), Some(Operation::ClusterAction));
        assert_eq!(by_name(Operation::ALL, "IDEMPOTENT_WRITE"), Some(Operation::IdempotentWrite));
        assert_eq!(by_name(PatternType::ALL, "Prefixed"), Some(PatternType::Prefixed));
        assert_eq!(by_name(Operation::ALL, "fly"), None);
        assert_eq!(upper(Operation::DescribeConfigs), "DESCRIBE_CONFIGS");
    }
}
