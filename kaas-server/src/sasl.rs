//! The SASL mechanisms of SASL listeners, by rsasl: PLAIN, with its users from a JAAS-style
//! setting as Apache's brokers read them (`listener.name.<listener>.plain.sasl.jaas.config`,
//! else `sasl.jaas.config`: `... PlainLoginModule required user_alice="secret" ...;`).
//! kaas-net frames the exchange (`kaas_net::sasl`); this runs it.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use kaas_net::sasl::{Exchange, Mechanisms, Step};
use rsasl::callback::{Context, SessionCallback, SessionData};
use rsasl::mechname::Mechname;
use rsasl::prelude::{SASLConfig, SASLServer, Session, State, Validation};
use rsasl::property::{AuthId, AuthzId, Password};
use rsasl::validate::{Validate, ValidationError};

/// The mechanisms kaas serves.
const SERVED: [&str; 1] = ["PLAIN"];

/// What a finished exchange comes to: the user, or why not.
struct Outcome;
impl Validation for Outcome {
    type Value = Result<String, String>;
}

/// Checks PLAIN's user and password against the configured users.
struct Users(BTreeMap<String, String>);

impl SessionCallback for Users {
    fn validate(
        &self,
        data: &SessionData,
        context: &Context,
        validate: &mut Validate<'_>,
    ) -> Result<(), ValidationError> {
        if data.mechanism().mechanism != "PLAIN" {
            return Ok(());
        }
        let user = context.get_ref::<AuthId>().unwrap_or_default().to_string();
        let authzid = context.get_ref::<AuthzId>();
        let password = context.get_ref::<Password>().unwrap_or_default();
        let verdict = match self.0.get(&user) {
            // Apache's PLAIN takes no authorization id other than the user's own.
            _ if authzid.is_some_and(|a| !a.is_empty() && a != user) => {
                Err(format!("{user} asked to act as {authzid:?}"))
            }
            Some(expected) if constant_time_eq(expected.as_bytes(), password) => Ok(user),
            Some(_) => Err(format!("wrong password for {user}")),
            None => Err(format!("unknown user {user:?}")),
        };
        validate.with::<Outcome, _>(|| Ok(verdict))?;
        Ok(())
    }
}

/// Compares without stopping at the first difference, so timing tells nothing of a password.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The users of a JAAS-style login module setting: its `user_NAME="password"` options.
pub fn jaas_users(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut users = BTreeMap::new();
    let mut rest = text;
    while let Some(at) = rest.find("user_") {
        rest = &rest[at + "user_".len()..];
        let (name, after) = rest.split_once('=').ok_or("sasl.jaas.config: user_NAME without =\"password\"")?;
        let after = after.trim_start();
        let quoted = after.strip_prefix('"').ok_or("sasl.jaas.config: a user's password must be quoted")?;
        let (password, tail) = quoted.split_once('"').ok_or("sasl.jaas.config: an unterminated password")?;
        users.insert(name.trim().to_string(), password.to_string());
        rest = tail;
    }
    Ok(users)
}

/// The SASL mechanisms of one listener.
pub struct Listener {
    enabled: Vec<String>,
    config: Arc<SASLConfig>,
}

impl Listener {
    /// From the listener's settings (`listener.name.<name>.…` first, then the broker-wide one).
    pub fn from_config(config: &BrokerConfig, listener: &str) -> Result<Listener, String> {
        let setting = |name: &str| {
            let prefixed = format!("listener.name.{}.{name}", listener.to_ascii_lowercase());
            config.explicit.get(&prefixed).or_else(|| config.explicit.get(name)).cloned()
        };
        let enabled: Vec<String> = setting("sasl.enabled.mechanisms")
            .unwrap_or_else(|| "PLAIN".into())
            .split(',')
            .map(|m| m.trim().to_ascii_uppercase())
            .filter(|m| !m.is_empty())
            .collect();
        if let Some(m) = enabled.iter().find(|m| !SERVED.contains(&m.as_str())) {
            return Err(format!("listener {listener}: SASL mechanism {m} is not served yet (served: PLAIN)"));
        }
        if enabled.is_empty() {
            return Err(format!("listener {listener}: sasl.enabled.mechanisms names no mechanism"));
        }
        let jaas = setting("plain.sasl.jaas.config").or_else(|| setting("sasl.jaas.config")).ok_or_else(|| {
            format!(
                "listener {listener}: PLAIN needs its users: listener.name.{}.plain.sasl.jaas.config",
                listener.to_ascii_lowercase()
            )
        })?;
        let users = jaas_users(&jaas)?;
        if users.is_empty() {
            return Err(format!("listener {listener}: the PLAIN login module names no user_NAME=\"password\""));
        }
        let config = SASLConfig::builder().with_defaults().with_callback(Users(users)).map_err(|e| e.to_string())?;
        Ok(Listener { enabled, config })
    }
}

impl Mechanisms for Listener {
    fn enabled(&self) -> Vec<String> {
        self.enabled.clone()
    }

    fn start(&self, mechanism: &str) -> Option<Box<dyn Exchange>> {
        if !self.enabled.iter().any(|m| m == mechanism) {
            return None;
        }
        let name = Mechname::parse(mechanism.as_bytes()).ok()?;
        let session = SASLServer::<Outcome>::new(self.config.clone()).start_suggested(name).ok()?;
        Some(Box::new(RsaslExchange(session)))
    }
}

struct RsaslExchange(Session<Outcome>);

impl Exchange for RsaslExchange {
    fn step(&mut self, client: &[u8]) -> Step {
        let mut out = Cursor::new(Vec::new());
        match self.0.step(Some(client), &mut out) {
            Ok(State::Running) => Step::Continue(Bytes::from(out.into_inner())),
            Ok(State::Finished(_)) => match self.0.validation() {
                Some(Ok(user)) => Step::Done { user, answer: Bytes::from(out.into_inner()) },
                Some(Err(why)) => Step::Failed(why),
                None => Step::Failed("the exchange ended without a verdict".into()),
            },
            Err(e) => Step::Failed(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_users_come_from_the_login_module_and_only_their_passwords_pass() {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice = "a=b c";"#;
        let users = jaas_users(jaas).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users["alice"], "a=b c");
        let mut config = BrokerConfig::default();
        config.set("listener.name.sasl_plaintext.plain.sasl.jaas.config", jaas).unwrap();
        let listener = Listener::from_config(&config, "SASL_PLAINTEXT").unwrap();
        assert_eq!(listener.enabled(), vec!["PLAIN"]);
        let step = |token: &[u8]| listener.start("PLAIN").unwrap().step(token);
        assert!(matches!(step(b"\0alice\0a=b c"), Step::Done { user, .. } if user == "alice"));
        assert!(matches!(step(b"\0alice\0wrong"), Step::Failed(_)));
        assert!(matches!(step(b"\0mallory\0a=b c"), Step::Failed(_)));
        assert!(matches!(step(b"admin\0alice\0a=b c"), Step::Failed(_)), "alice may not act as admin");
        assert!(matches!(step(b"garbage"), Step::Failed(_)));
        assert!(listener.start("SCRAM-SHA-256").is_none());
        config.set("sasl.enabled.mechanisms", "PLAIN,GSSAPI").unwrap();
        let refused = Listener::from_config(&config, "SASL_PLAINTEXT").err().expect("GSSAPI is not served");
        assert!(refused.contains("GSSAPI"), "{refused}");
    }
}
