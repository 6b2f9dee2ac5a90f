//! Client quotas in Kafka's model (KIP-13, KIP-55, KIP-124, KIP-546): what the quota entities
//! and keys are, which entity's quota binds a (user, client id), and what DescribeClientQuotas
//! and AlterClientQuotas accept. Pure: the volume keeps the quotas (`cluster::quotas`), the
//! rates measured against them are `rate`'s, and the throttling is the handlers'.

pub mod rate;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A quota key: what it limits, by Kafka's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaKey {
    /// Bytes per second a client's produce requests may send.
    ProducerByteRate,
    /// Bytes per second a client's fetch responses may take.
    ConsumerByteRate,
    /// The share of one request thread a client may keep busy, in percent.
    RequestPercentage,
    /// Partitions per second created or deleted (KIP-599): accepted and kept, not enforced.
    ControllerMutationRate,
    /// Connections per second from one address (KIP-612): accepted and kept, not enforced.
    ConnectionCreationRate,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 5] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
        QuotaKey::ConnectionCreationRate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
            QuotaKey::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    pub fn from_name(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The largest value of an integral key (Kafka's LONG and INT), None for a DOUBLE.
    fn integral_max(self) -> Option<f64> {
        match self {
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate => Some(i64::MAX as f64),
            QuotaKey::ConnectionCreationRate => Some(i32::MAX as f64),
            QuotaKey::RequestPercentage | QuotaKey::ControllerMutationRate => None,
        }
    }

    /// Whether the key belongs to an IP entity (else to a user and client id entity).
    fn for_ip(self) -> bool {
        self == QuotaKey::ConnectionCreationRate
    }
}

/// The kinds of entity a quota names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityType {
    #[serde(rename = "user")]
    User,
    #[serde(rename = "client-id")]
    ClientId,
    #[serde(rename = "ip")]
    Ip,
}

impl EntityType {
    pub fn name(self) -> &'static str {
        match self {
            EntityType::User => "user",
            EntityType::ClientId => "client-id",
            EntityType::Ip => "ip",
        }
    }

    pub fn from_name(name: &str) -> Option<EntityType> {
        [EntityType::User, EntityType::ClientId, EntityType::Ip].into_iter().find(|t| t.name() == name)
    }
}

/// A quota's entity, as Kafka's `ClientQuotaEntity`: per type, a name, or None for that
/// type's default (`<default>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaEntity(pub BTreeMap<EntityType, Option<String>>);

impl QuotaEntity {
    pub fn of(components: &[(EntityType, Option<&str>)]) -> QuotaEntity {
        QuotaEntity(components.iter().map(|(t, n)| (*t, n.map(String::from))).collect())
    }

    /// An entity as AlterClientQuotas names it, (type name, name or None for the default) per
    /// component; refused (INVALID_REQUEST) for a type Kafka does not know or named twice.
    pub fn parse<'a>(
        components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<QuotaEntity, QuotaRefusal> {
        let mut entity = QuotaEntity::default();
        for (type_name, name) in components {
            let t = EntityType::from_name(type_name)
                .ok_or_else(|| QuotaRefusal::Invalid(format!("Unhandled client quota entity type: {type_name}")))?;
            if entity.0.insert(t, name.map(String::from)).is_some() {
                return Err(QuotaRefusal::Invalid(format!(
                    "Invalid client quota entity, duplicate entity entry {type_name}"
                )));
            }
        }
        Ok(entity)
    }

    /// Why AlterClientQuotas refuses this entity (INVALID_REQUEST), checked as Apache's
    /// controller checks it.
    fn invalid(&self) -> Option<String> {
        if self.0.is_empty() {
            return Some("Invalid empty client quota entity".into());
        }
        if let Some((t, _)) = self.0.iter().find(|(_, n)| n.as_deref() == Some("")) {
            return Some(format!("Empty {} not supported", t.name()));
        }
        let ip = self.0.contains_key(&EntityType::Ip);
        if ip && self.0.len() > 1 {
            return Some(
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId".into(),
            );
        }
        if let Some(Some(address)) = self.0.get(&EntityType::Ip)
            && address.parse::<std::net::IpAddr>().is_err()
        {
            return Some(format!("{address} is not a valid IP or resolvable host."));
        }
        None
    }

    fn is_ip(&self) -> bool {
        self.0.contains_key(&EntityType::Ip)
    }
}

impl std::fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> =
            self.0.iter().map(|(t, n)| format!("{}={}", t.name(), n.as_deref().unwrap_or("<default>"))).collect();
        write!(f, "{}", parts.join(","))
    }
}

/// One entity's quotas, by key.
pub type QuotaValues = BTreeMap<QuotaKey, f64>;

/// Why AlterClientQuotas or DescribeClientQuotas refuses, with Apache's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaRefusal {
    /// INVALID_REQUEST.
    Invalid(String),
    /// UNSUPPORTED_VERSION: an entity type Kafka does not know, in a describe filter.
    UnknownEntityType(String),
}

/// One change of AlterClientQuotas: a key set to a value, or removed (None).
pub type QuotaOp = (String, Option<f64>);

/// Checks one entity's changes as Apache does and applies them to `values`.
pub fn alter(entity: &QuotaEntity, ops: &[QuotaOp], values: &mut QuotaValues) -> Result<(), QuotaRefusal> {
    if let Some(why) = entity.invalid() {
        return Err(QuotaRefusal::Invalid(why));
    }
    let mut seen = BTreeSet::new();
    for (name, _) in ops {
        if !seen.insert(name.as_str()) {
            return Err(QuotaRefusal::Invalid(format!(
                "Duplicate quota key {name} not updating quota for this entity {entity}"
            )));
        }
    }
    for (name, value) in ops {
        let key = QuotaKey::from_name(name).filter(|k| k.for_ip() == entity.is_ip());
        match (key, value) {
            // Removing a key the entity does not have is nothing, even an unknown one.
            (Some(key), None) => {
                values.remove(&key);
            }
            (None, None) => {}
            (None, Some(_)) => return Err(QuotaRefusal::Invalid(format!("Invalid configuration key {name}"))),
            (Some(key), Some(value)) => {
                let value = *value;
                if value.is_nan() || value <= 0.0 {
                    return Err(QuotaRefusal::Invalid(format!("Quota {name} must be greater than 0")));
                }
                if let Some(max) = key.integral_max() {
                    if value > max {
                        return Err(QuotaRefusal::Invalid(format!("Proposed value for {name} is too large")));
                    }
                    if (value % 1.0).abs() > 1e-6 {
                        return Err(QuotaRefusal::Invalid(format!("{name} cannot be a fractional value.")));
                    }
                }
                values.insert(key, value);
            }
        }
    }
    Ok(())
}

/// How a DescribeClientQuotas filter component matches (Kafka's codes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// 0: this name.
    Exact(String),
    /// 1: the type's default.
    Default,
    /// 2: any entity that has the type.
    Specified,
}

/// A DescribeClientQuotas filter: components as sent, and whether only entities of exactly
/// those types match.
pub struct QuotaFilter {
    pub components: Vec<(String, i8, Option<String>)>,
    pub strict: bool,
}

impl QuotaFilter {
    /// The filter's components, checked as Apache checks them.
    fn parse(&self) -> Result<BTreeMap<EntityType, Match>, QuotaRefusal> {
        let mut parsed = BTreeMap::new();
        for (entity_type, match_type, name) in &self.components {
            if entity_type.is_empty() {
                return Err(QuotaRefusal::Invalid("Invalid empty entity type.".into()));
            }
            let t = EntityType::from_name(entity_type);
            if t.is_some_and(|t| parsed.contains_key(&t)) {
                return Err(QuotaRefusal::Invalid(format!(
                    "Entity type {entity_type} cannot appear more than once in the filter."
                )));
            }
            let t =
                t.ok_or_else(|| QuotaRefusal::UnknownEntityType(format!("Unsupported entity type {entity_type}")))?;
            let m = match (match_type, name) {
                (0, Some(name)) => Match::Exact(name.clone()),
                (0, None) => {
                    return Err(QuotaRefusal::Invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                    ));
                }
                (1, None) => Match::Default,
                (2, None) => Match::Specified,
                (1 | 2, Some(_)) => {
                    return Err(QuotaRefusal::Invalid(format!(
                        "Request specified match type {match_type}, but also specified a match string."
                    )));
                }
                _ => return Err(QuotaRefusal::Invalid(format!("Unknown match type {match_type}"))),
            };
            parsed.insert(t, m);
        }
        if parsed.contains_key(&EntityType::Ip) && parsed.len() > 1 {
            return Err(QuotaRefusal::Invalid(
                "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component."
                    .into(),
            ));
        }
        Ok(parsed)
    }
}

/// The tags a quota is measured under (Apache's metric tags): every (user, client id) with
/// the same tags shares one rate. An empty string is a component the quota does not split by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaTags {
    pub user: String,
    pub client_id: String,
}

/// Every entity's quotas, as the volume held them when last read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientQuotas {
    pub entities: BTreeMap<QuotaEntity, QuotaValues>,
}

impl ClientQuotas {
    /// Whether any entity has a quota of `key`: without one, nothing of it is measured.
    pub fn any(&self, key: QuotaKey) -> bool {
        self.entities.values().any(|v| v.contains_key(&key))
    }

    fn has(&self, key: QuotaKey, user: Option<Option<&str>>, client_id: Option<Option<&str>>) -> Option<f64> {
        let mut entity = BTreeMap::new();
        if let Some(user) = user {
            entity.insert(EntityType::User, user.map(String::from));
        }
        if let Some(client_id) = client_id {
            entity.insert(EntityType::ClientId, client_id.map(String::from));
        }
        self.entities.get(&QuotaEntity(entity)).and_then(|v| v.get(&key)).copied()
    }

    /// The tags `user`'s (a principal's name) and `client_id`'s requests are measured under
    /// for `key`: the most specific entity with a quota of it names them, in Apache's order
    /// (user and client, user and default client, user, default user and client, default user
    /// and default client, default user, client, default client).
    pub fn tags(&self, key: QuotaKey, user: &str, client_id: &str) -> QuotaTags {
        let (u, c) = (Some(Some(user)), Some(Some(client_id)));
        let (du, dc) = (Some(None), Some(None));
        let both = QuotaTags { user: user.into(), client_id: client_id.into() };
        let user_only = QuotaTags { user: user.into(), client_id: String::new() };
        let found = |u, c| self.has(key, u, c).is_some();
        if found(u, c) || found(u, dc) {
            both
        } else if found(u, None) {
            user_only
        } else if found(du, c) || found(du, dc) {
            both
        } else if found(du, None) {
            user_only
        } else {
            QuotaTags { user: String::new(), client_id: client_id.into() }
        }
    }

    /// The quota of `key` for requests measured under `tags`, None for none.
    pub fn limit(&self, key: QuotaKey, tags: &QuotaTags) -> Option<f64> {
        let (user, client) = (tags.user.as_str(), tags.client_id.as_str());
        let (u, c) = (Some(Some(user)), Some(Some(client)));
        let (du, dc) = (Some(None), Some(None));
        match (user.is_empty(), client.is_empty()) {
            (false, false) => self
                .has(key, u, c)
                .or_else(|| self.has(key, u, dc))
                .or_else(|| self.has(key, du, c))
                .or_else(|| self.has(key, du, dc)),
            (false, true) => self.has(key, u, None).or_else(|| self.has(key, du, None)),
            (true, false) => self.has(key, None, c).or_else(|| self.has(key, None, dc)),
            (true, true) => None,
        }
    }

    /// DescribeClientQuotas: the entities the filter selects, with their quotas.
    pub fn describe(&self, filter: &QuotaFilter) -> Result<Vec<(QuotaEntity, QuotaValues)>, QuotaRefusal> {
        let components = filter.parse()?;
        let selected = |entity: &QuotaEntity| {
            if filter.strict && entity.0.len() != components.len() {
                return false;
            }
            components.iter().all(|(t, m)| match (entity.0.get(t), m) {
                (None, _) => false,
                (Some(name), Match::Exact(wanted)) => name.as_deref() == Some(wanted.as_str()),
                (Some(name), Match::Default) => name.is_none(),
                (Some(_), Match::Specified) => true,
            })
        };
        Ok(self.entities.iter().filter(|(e, _)| selected(e)).map(|(e, v)| (e.clone(), v.clone())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Components<'a> = &'a [(EntityType, Option<&'a str>)];

    fn quotas(entries: &[(Components, QuotaKey, f64)]) -> ClientQuotas {
        let mut q = ClientQuotas::default();
        for (entity, key, value) in entries {
            q.entities.entry(QuotaEntity::of(entity)).or_default().insert(*key, *value);
        }
        q
    }

    const P: QuotaKey = QuotaKey::ProducerByteRate;
    use EntityType::{ClientId, User};

    #[test]
    fn the_most_specific_entity_binds_in_apaches_order() {
        let q = quotas(&[
            (&[(User, Some("alice")), (ClientId, Some("app"))], P, 1.0),
            (&[(User, Some("alice"))], P, 2.0),
            (&[(User, None)], P, 3.0),
            (&[(ClientId, Some("app"))], P, 4.0),
            (&[(ClientId, None)], P, 5.0),
        ]);
        let bound = |user: &str, client: &str| q.limit(P, &q.tags(P, user, client));
        assert_eq!(bound("alice", "app"), Some(1.0));
        assert_eq!(bound("alice", "other"), Some(2.0));
        assert_eq!(q.tags(P, "alice", "other"), QuotaTags { user: "alice".into(), client_id: "".into() });
        // Any user quota (here the default user's) comes before client quotas.
        assert_eq!(bound("bob", "app"), Some(3.0));
        let clients_only = quotas(&[(&[(ClientId, Some("app"))], P, 4.0), (&[(ClientId, None)], P, 5.0)]);
        let bound = |user: &str, client: &str| clients_only.limit(P, &clients_only.tags(P, user, client));
        assert_eq!(bound("bob", "app"), Some(4.0));
        assert_eq!(bound("bob", "x"), Some(5.0));
        // Another key's quota does not bind this one.
        assert_eq!(
            clients_only
                .limit(QuotaKey::ConsumerByteRate, &clients_only.tags(QuotaKey::ConsumerByteRate, "bob", "app")),
            None
        );
    }

    #[test]
    fn a_default_client_of_a_user_splits_by_client() {
        let q = quotas(&[(&[(User, Some("alice")), (ClientId, None)], P, 7.0)]);
        let tags = q.tags(P, "alice", "app");
        assert_eq!(tags, QuotaTags { user: "alice".into(), client_id: "app".into() });
        assert_eq!(q.limit(P, &tags), Some(7.0));
        assert_eq!(q.limit(P, &q.tags(P, "bob", "app")), None);
    }

    #[test]
    fn alterations_are_checked_as_apache_checks_them() {
        let alice = QuotaEntity::of(&[(User, Some("alice"))]);
        let mut v = QuotaValues::new();
        let set = |k: &str, x: f64| (k.to_string(), Some(x));
        assert_eq!(alter(&alice, &[set("producer_byte_rate", 1024.0)], &mut v), Ok(()));
        assert_eq!(v.get(&P), Some(&1024.0));
        for bad in [
            vec![set("producer_byte_rate", 0.0)],
            vec![set("producer_byte_rate", 1.5)],
            vec![set("connection_creation_rate", 3.0)],
            vec![set("nonsense", 3.0)],
            vec![set("request_percentage", 1.0), ("request_percentage".into(), None)],
        ] {
            assert!(matches!(alter(&alice, &bad, &mut v), Err(QuotaRefusal::Invalid(_))), "{bad:?}");
        }
        assert_eq!(alter(&alice, &[set("request_percentage", 12.5)], &mut v), Ok(()));
        assert_eq!(alter(&alice, &[("producer_byte_rate".into(), None)], &mut v), Ok(()));
        assert_eq!(v, QuotaValues::from([(QuotaKey::RequestPercentage, 12.5)]));
        assert_eq!(QuotaEntity::parse([("user", Some("alice"))]), Ok(alice.clone()));
        assert!(QuotaEntity::parse([("group", Some("g"))]).is_err(), "an unknown entity type");
        assert!(QuotaEntity::parse([("user", Some("a")), ("user", None)]).is_err(), "a type named twice");
        let ip = QuotaEntity::of(&[(EntityType::Ip, Some("10.0.0.1"))]);
        assert_eq!(alter(&ip, &[set("connection_creation_rate", 3.0)], &mut QuotaValues::new()), Ok(()));
        for bad in [
            QuotaEntity::default(),
            QuotaEntity::of(&[(User, Some(""))]),
            QuotaEntity::of(&[(EntityType::Ip, None), (User, None)]),
            QuotaEntity::of(&[(EntityType::Ip, Some("not an address"))]),
        ] {
            assert!(alter(&bad, &[], &mut QuotaValues::new()).is_err(), "{bad}");
        }
    }

    #[test]
    fn describe_filters_as_apache_does() {
        let q = quotas(&[
            (&[(User, Some("alice"))], P, 1.0),
            (&[(User, None)], P, 2.0),
            (&[(User, Some("alice")), (ClientId, Some("app"))], P, 3.0),
            (&[(ClientId, None)], P, 4.0),
        ]);
        let describe = |components: Vec<(&str, i8, Option<&str>)>, strict| {
            let components = components.into_iter().map(|(t, m, n)| (t.to_string(), m, n.map(String::from))).collect();
            q.describe(&QuotaFilter { components, strict })
                .map(|found| found.into_iter().map(|(_, v)| v[&P]).collect::<Vec<_>>())
        };
        assert_eq!(describe(vec![("user", 0, Some("alice"))], false), Ok(vec![1.0, 3.0]));
        assert_eq!(describe(vec![("user", 0, Some("alice"))], true), Ok(vec![1.0]));
        assert_eq!(describe(vec![("user", 1, None)], false), Ok(vec![2.0]));
        assert_eq!(describe(vec![("user", 2, None)], true), Ok(vec![2.0, 1.0]));
        assert_eq!(describe(vec![], false).map(|v| v.len()), Ok(4));
        assert!(matches!(describe(vec![("group", 2, None)], false), Err(QuotaRefusal::UnknownEntityType(_))));
        assert!(matches!(describe(vec![("user", 0, None)], false), Err(QuotaRefusal::Invalid(_))));
        assert!(matches!(describe(vec![("user", 2, None), ("user", 1, None)], false), Err(QuotaRefusal::Invalid(_))));
        assert!(matches!(describe(vec![("ip", 2, None), ("user", 1, None)], false), Err(QuotaRefusal::Invalid(_))));
    }
}
