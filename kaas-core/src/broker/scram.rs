//! AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554): the users' SCRAM
//! credentials on the volume (`cluster::scram`), checked as Apache's controller checks them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::Broker;
use crate::cluster::scram::{self, ITERATIONS_MAX, ITERATIONS_MIN, ScramCredential, ScramMechanism};
use crate::env::Env;

/// Why a user's credentials were not altered or described, as Apache says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramRefusal {
    /// UNSUPPORTED_SASL_MECHANISM.
    UnknownMechanism,
    /// UNACCEPTABLE_CREDENTIAL.
    Unacceptable(&'static str),
    /// RESOURCE_NOT_FOUND.
    NotFound(&'static str),
    /// DUPLICATE_RESOURCE.
    Duplicate(&'static str),
    /// KAFKA_STORAGE_ERROR: the user's file could not be read or written.
    Storage(String),
}

pub struct ScramDeletion {
    pub user: String,
    pub mechanism: i8,
}

pub struct ScramUpsertion {
    pub user: String,
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Bytes,
    pub salted_password: Bytes,
}

/// A user's credentials as DescribeUserScramCredentials tells them: mechanism code, iterations.
pub type CredentialInfos = Vec<(i8, i32)>;

impl<E: Env> Broker<E> {
    /// Applies each user's deletions and upsertions together, one result per user in the order
    /// they were first named; a user with any refused change has none applied.
    pub async fn alter_scram_credentials(
        &self,
        deletions: Vec<ScramDeletion>,
        upsertions: Vec<ScramUpsertion>,
    ) -> Vec<(String, Result<(), ScramRefusal>)> {
        let mut order: Vec<String> = Vec::new();
        let mut seen: BTreeSet<(String, i8)> = BTreeSet::new();
        let mut refused: BTreeMap<String, ScramRefusal> = BTreeMap::new();
        let mut refuse = |user: &str, why: ScramRefusal| {
            refused.entry(user.to_string()).or_insert(why);
        };
        for (user, mechanism) in
            deletions.iter().map(|d| (&d.user, d.mechanism)).chain(upsertions.iter().map(|u| (&u.user, u.mechanism)))
        {
            if !order.contains(user) {
                order.push(user.clone());
            }
            if !seen.insert((user.clone(), mechanism)) {
                refuse(user, ScramRefusal::Duplicate("A user credential cannot be altered twice in the same request"));
            }
            if user.is_empty() {
                refuse(user, ScramRefusal::Unacceptable("Username must not be empty"));
            }
            if ScramMechanism::from_code(mechanism).is_none() {
                refuse(user, ScramRefusal::UnknownMechanism);
            }
        }
        for u in &upsertions {
            if u.iterations < ITERATIONS_MIN {
                refuse(&u.user, ScramRefusal::Unacceptable("Too few iterations"));
            } else if u.iterations > ITERATIONS_MAX {
                refuse(&u.user, ScramRefusal::Unacceptable("Too many iterations"));
            } else if u.salt.is_empty() || u.salted_password.is_empty() {
                refuse(&u.user, ScramRefusal::Unacceptable("A credential needs a salt and a salted password"));
            }
        }
        let volume = self.env.volume();
        let mut results = Vec::new();
        for user in order {
            if let Some(why) = refused.remove(&user) {
                results.push((user, Err(why)));
                continue;
            }
            let current = match scram::read(volume, &user).await {
                Ok(file) => file.map(|f| f.credentials).unwrap_or_default(),
                Err(e) => {
                    results.push((user, Err(ScramRefusal::Storage(e.to_string()))));
                    continue;
                }
            };
            let mut credentials = current;
            let mut missing = false;
            for d in deletions.iter().filter(|d| d.user == user) {
                let mechanism = ScramMechanism::from_code(d.mechanism).expect("checked above");
                missing |= credentials.remove(&mechanism).is_none();
            }
            if missing {
                let why = ScramRefusal::NotFound("Attempt to delete a user credential that does not exist");
                results.push((user, Err(why)));
                continue;
            }
            for u in upsertions.iter().filter(|u| u.user == user) {
                let mechanism = ScramMechanism::from_code(u.mechanism).expect("checked above");
                let credential = ScramCredential::from_salted(mechanism, &u.salt, &u.salted_password, u.iterations);
                credentials.insert(mechanism, credential);
            }
            let written = scram::write(volume, &user, credentials).await;
            tracing::info!(%user, ok = written.is_ok(), "SCRAM credentials altered");
            results.push((user, written.map_err(|e| ScramRefusal::Storage(e.to_string()))));
        }
        results
    }

    /// The mechanisms and iterations of `users` (None: every user with credentials).
    pub async fn describe_scram_credentials(
        &self,
        users: Option<Vec<String>>,
    ) -> Result<Vec<(String, Result<CredentialInfos, ScramRefusal>)>, ScramRefusal> {
        let volume = self.env.volume();
        let (users, named) = match users {
            Some(users) => (users, true),
            None => (scram::users(volume).await.map_err(|e| ScramRefusal::Storage(e.to_string()))?, false),
        };
        let mut results = Vec::new();
        let mut seen = BTreeSet::new();
        for user in users {
            if !seen.insert(user.clone()) {
                let why = "Cannot describe SCRAM credentials for the same user twice in a single request";
                results.retain(|(u, _)| *u != user);
                results.push((user, Err(ScramRefusal::Duplicate(why))));
                continue;
            }
            let described = match scram::read(volume, &user).await {
                Ok(Some(file)) => Ok(file.credentials.iter().map(|(m, c)| (m.code(), c.iterations)).collect()),
                Ok(None) if named => {
                    Err(ScramRefusal::NotFound("Attempt to describe a user credential that does not exist"))
                }
                Ok(None) => continue,
                Err(e) => Err(ScramRefusal::Storage(e.to_string())),
            };
            results.push((user, described));
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BrokerConfig;
    use crate::env::Rng;
    use crate::env::real::{RealEnv, RealRng};

    #[tokio::test]
    async fn credentials_are_checked_as_apache_checks_them_and_stay_on_the_volume() {
        let dir = std::env::temp_dir().join(format!("kaas-scram-{:x}", RealRng::default().next_u64()));
        let broker = Broker::start(RealEnv::new(&dir), BrokerConfig::default()).await.unwrap();
        let up = |user: &str, mechanism: i8, iterations: i32| ScramUpsertion {
            user: user.into(),
            mechanism,
            iterations,
            salt: Bytes::from_static(b"salt"),
            salted_password: Bytes::from_static(b"salted"),
        };
        let del = |user: &str, mechanism: i8| ScramDeletion { user: user.into(), mechanism };
        let results = broker
            .alter_scram_credentials(
                vec![del("gone", 1)],
                vec![
                    up("bob", 1, 8192),
                    up("bob", 2, 4096),
                    up("low", 1, 100),
                    up("twice", 1, 4096),
                    up("twice", 1, 4096),
                    up("odd", 3, 4096),
                ],
            )
            .await;
        let codes: Vec<(&str, Result<(), ScramRefusal>)> =
            results.iter().map(|(u, r)| (u.as_str(), r.clone())).collect();
        assert_eq!(
            codes,
            vec![
                ("gone", Err(ScramRefusal::NotFound("Attempt to delete a user credential that does not exist"))),
                ("bob", Ok(())),
                ("low", Err(ScramRefusal::Unacceptable("Too few iterations"))),
                (
                    "twice",
                    Err(ScramRefusal::Duplicate("A user credential cannot be altered twice in the same request"))
                ),
                ("odd", Err(ScramRefusal::UnknownMechanism)),
            ]
        );
        let all = broker.describe_scram_credentials(None).await.unwrap();
        assert_eq!(all, vec![("bob".to_string(), Ok(vec![(1, 8192), (2, 4096)]))], "only bob was written");
        broker.alter_scram_credentials(vec![del("bob", 2)], Vec::new()).await;
        broker.shutdown().await;
        // Another broker of the volume (here: the next start) reads what is there.
        let broker = Broker::start(RealEnv::new(&dir), BrokerConfig::default()).await.unwrap();
        let named = broker.describe_scram_credentials(Some(vec!["bob".into(), "carol".into()])).await.unwrap();
        assert_eq!(named[0], ("bob".to_string(), Ok(vec![(1, 8192)])));
        assert!(matches!(named[1].1, Err(ScramRefusal::NotFound(_))));
        broker.shutdown().await;
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }
}
