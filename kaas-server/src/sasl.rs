//! The SASL mechanisms of SASL listeners, by rsasl: PLAIN, with its users from a JAAS-style
//! setting as Apache's brokers read them (`listener.name.<listener>.plain.sasl.jaas.config`,
//! else `sasl.jaas.config`: `... PlainLoginModule required user_alice="secret" ...;`), and
//! SCRAM-SHA-256/512, with each user's stored keys read from the volume
//! (`kaas_core::cluster::scram`, set by AlterUserScramCredentials) when the user authenticates,
//! and OAUTHBEARER, with tokens checked as `oauth.rs` checks them.
//! kaas-net frames the exchange (`kaas_net::sasl`); this runs it.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use kaas_core::cluster::scram::{self, ScramCredential, ScramMechanism};
use kaas_net::sasl::{Exchange, Mechanisms, Step};
use rsasl::callback::{Context, Request, SessionCallback, SessionData};
use rsasl::mechanisms::oauthbearer::properties::{OAuthBearerError, OAuthBearerValidate};
use rsasl::mechanisms::scram::properties::ScramStoredPassword;
use rsasl::mechname::Mechname;
use rsasl::prelude::{SASLConfig, SASLServer, Session, SessionError, State, Validation};
use rsasl::property::{AuthId, AuthzId, OAuthBearerToken, Password};
use rsasl::validate::{Validate, ValidationError};

/// The mechanisms kaas serves.
const SERVED: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// What a finished exchange comes to: the user and when its credential expires, or why not.
struct Outcome;
impl Validation for Outcome {
    type Value = Result<(String, Option<i64>), String>;
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Checks PLAIN's user and password against the configured users, and gives SCRAM the stored
/// keys of the user on the volume.
struct Users {
    plain: BTreeMap<String, String>,
    /// The data directory, where `__cluster/scram/` holds the SCRAM credentials.
    data_dir: PathBuf,
    /// How OAUTHBEARER tokens are checked, if the listener serves it.
    oauth: Option<crate::oauth::Tokens>,
}

impl Users {
    /// The token of an OAUTHBEARER exchange, checked now.
    fn token(&self, context: &Context) -> Result<crate::oauth::Trusted, String> {
        let tokens = self.oauth.as_ref().ok_or("OAUTHBEARER is not served here")?;
        // RFC 7628's `auth` value: the scheme, then the token.
        let auth = context.get_ref::<OAuthBearerToken>().ok_or("no token")?;
        let token = auth.strip_prefix("Bearer ").or_else(|| auth.strip_prefix("bearer ")).unwrap_or(auth);
        tokens.check(token.trim(), now_ms())
    }
}

impl Users {
    /// `user`'s stored credential for `mechanism`, read now (a credential altered on any
    /// broker holds at once); an unreadable file is logged and taken as no credential.
    fn scram(&self, user: &str, mechanism: &str) -> Option<ScramCredential> {
        let mechanism = ScramMechanism::from_name(mechanism)?;
        let path = self.data_dir.join(scram::path(user));
        let raw = match std::fs::read(&path) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read SCRAM credentials");
                return None;
            }
        };
        match scram::UserFile::decode(&raw) {
            Ok(file) if file.user == user => file.credentials.get(&mechanism).cloned(),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "damaged SCRAM credentials: refusing the user");
                None
            }
        }
    }
}

impl SessionCallback for Users {
    fn callback(&self, data: &SessionData, context: &Context, request: &mut Request<'_>) -> Result<(), SessionError> {
        let mechanism = data.mechanism().mechanism;
        if request.is::<OAuthBearerValidate>() {
            // A refused token is answered with RFC 7628's error, then the exchange fails.
            let verdict = match self.token(context) {
                Ok(_) => Ok(()),
                Err(_) => Err(OAuthBearerError::new("invalid_token", None, None)),
            };
            request.satisfy::<OAuthBearerValidate>(&verdict)?;
            return Ok(());
        }
        if !mechanism.starts_with("SCRAM-") || !request.is::<ScramStoredPassword>() {
            return Ok(());
        }
        let Some(user) = context.get_ref::<AuthId>() else { return Ok(()) };
        if let Some(c) = self.scram(user, mechanism) {
            let iterations = u32::try_from(c.iterations).unwrap_or(0);
            let stored = ScramStoredPassword::new(iterations, &c.salt, &c.stored_key, &c.server_key);
            request.satisfy::<ScramStoredPassword>(&stored)?;
        }
        Ok(())
    }

    fn validate(
        &self,
        data: &SessionData,
        context: &Context,
        validate: &mut Validate<'_>,
    ) -> Result<(), ValidationError> {
        let mechanism = data.mechanism().mechanism;
        let token = (mechanism == "OAUTHBEARER").then(|| self.token(context));
        let user = match &token {
            Some(Ok(trusted)) => trusted.user.clone(),
            _ => context.get_ref::<AuthId>().unwrap_or_default().to_string(),
        };
        let authzid = context.get_ref::<AuthzId>();
        if authzid.is_some_and(|a| !a.is_empty() && a != user) {
            // Kafka takes no authorization id other than the user's own.
            let verdict = Err(format!("{user} asked to act as {authzid:?}"));
            validate.with::<Outcome, _>(|| Ok(verdict))?;
            return Ok(());
        }
        let verdict = match (mechanism, token) {
            (_, Some(Ok(trusted))) => Ok((user, Some(trusted.expires_at_ms))),
            (_, Some(Err(why))) => Err(why),
            // SCRAM's proof was checked by the mechanism against the stored keys.
            (m, None) if m.starts_with("SCRAM-") => Ok((user, None)),
            _ => {
                let password = context.get_ref::<Password>().unwrap_or_default();
                match self.plain.get(&user) {
                    Some(expected) if constant_time_eq(expected.as_bytes(), password) => Ok((user, None)),
                    Some(_) => Err(format!("wrong password for {user}")),
                    None => Err(format!("unknown user {user:?}")),
                }
            }
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
            return Err(format!(
                "listener {listener}: SASL mechanism {m} is not served (served: {})",
                SERVED.join(", ")
            ));
        }
        if enabled.is_empty() {
            return Err(format!("listener {listener}: sasl.enabled.mechanisms names no mechanism"));
        }
        let plain = match enabled.iter().any(|m| m == "PLAIN") {
            false => BTreeMap::new(),
            true => {
                let jaas =
                    setting("plain.sasl.jaas.config").or_else(|| setting("sasl.jaas.config")).ok_or_else(|| {
                        let name = listener.to_ascii_lowercase();
                        format!(
                            "listener {listener}: PLAIN needs its users: listener.name.{name}.plain.sasl.jaas.config"
                        )
                    })?;
                let users = jaas_users(&jaas)?;
                if users.is_empty() {
                    return Err(format!("listener {listener}: the PLAIN login module names no user_NAME=\"password\""));
                }
                users
            }
        };
        let oauth = match enabled.iter().any(|m| m == "OAUTHBEARER") {
            false => None,
            true => Some(crate::oauth::Tokens::from_settings(setting, listener)?),
        };
        let users = Users { plain, data_dir: PathBuf::from(&config.log_dir), oauth };
        let config = SASLConfig::builder().with_defaults().with_callback(users).map_err(|e| e.to_string())?;
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
        Some(Box::new(RsaslExchange { session, scram: mechanism.starts_with("SCRAM-"), steps: 0 }))
    }
}

struct RsaslExchange {
    session: Session<Outcome>,
    /// SCRAM's messages are checked before rsasl parses them (`scram_attributes_whole`).
    scram: bool,
    steps: u32,
}

/// Whether every attribute of a SCRAM client message is at least `x=` (RFC 5802: each is a
/// letter, `=`, a value), as rsasl 2.3.1's parser assumes without checking (it panics on a
/// shorter one). The client-first message opens with the GS2 header: a flag, then an authzid
/// that may be empty.
fn scram_attributes_whole(first: bool, client: &[u8]) -> bool {
    let mut fields = client.split(|b| *b == b',');
    if first {
        let (_flag, authzid) = (fields.next(), fields.next());
        if authzid.is_some_and(|a| !a.is_empty() && a.len() < 2) {
            return false;
        }
    }
    fields.all(|f| f.len() >= 2)
}

impl Exchange for RsaslExchange {
    fn step(&mut self, client: &[u8]) -> Step {
        let mut out = Cursor::new(Vec::new());
        // A client's bytes must never end a broker's task: should a mechanism panic all the
        // same (rsasl's SCRAM parser did, see `scram_attributes_whole`), that is a refusal, and
        // the exchange, left half-done, is never stepped again (the connection closes).
        if self.scram && !scram_attributes_whole(self.steps == 0, client) {
            return Step::Failed("a SCRAM attribute shorter than its name".into());
        }
        self.steps += 1;
        let stepped =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.session.step(Some(client), &mut out)));
        let Ok(stepped) = stepped else {
            return Step::Failed("the mechanism could not parse the client's message".into());
        };
        match stepped {
            Ok(State::Running) => Step::Continue(Bytes::from(out.into_inner())),
            Ok(State::Finished(_)) => match self.session.validation() {
                Some(Ok((user, expires_at_ms))) => {
                    Step::Done { user, answer: Bytes::from(out.into_inner()), expires_at_ms }
                }
                Some(Err(why)) => Step::Failed(why),
                None => Step::Failed("the exchange ended without a verdict".into()),
            },
            Err(e) => Step::Failed(e.to_string()),
        }
    }
}

/// A listener with every mechanism kaas serves, for fuzzing: PLAIN (user `fuzz`, password
/// `fuzz`), SCRAM-SHA-256 and -512 with the credentials under `data_dir` (none: every user is
/// unknown), and OAUTHBEARER's unsecured tokens.
pub fn fuzz_listener(data_dir: &str) -> Listener {
    let mut config = BrokerConfig { log_dir: data_dir.to_string(), ..BrokerConfig::default() };
    let settings = [
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_fuzz=\"fuzz\";",
        ),
        (
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"fuzz\";",
        ),
    ];
    for (name, value) in settings {
        config.set(name, value).expect("a fuzz listener's setting");
    }
    Listener::from_config(&config, "SASL_PLAINTEXT").expect("the fuzz listener")
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

    /// A SCRAM client (rsasl's) against the listener, the user's keys in a file as
    /// AlterUserScramCredentials leaves them: the right password passes, a wrong one does not,
    /// nor does a user without credentials.
    #[test]
    fn scram_users_authenticate_against_their_stored_keys() {
        use rsasl::prelude::SASLClient;
        let dir = std::env::temp_dir().join(format!("kaas-scram-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(scram::SCRAM_DIR)).unwrap();
        let salt = b"0123456789abcdef";
        let mut salted = Default::default();
        rsasl::mechanisms::scram::tools::hash_password::<sha2::Sha256>(b"bob-secret", 4096, salt, &mut salted);
        let credential = ScramCredential::from_salted(ScramMechanism::Sha256, salt, &salted, 4096);
        let file = scram::UserFile {
            format_version: scram::FORMAT_VERSION,
            user: "bob".into(),
            credentials: BTreeMap::from([(ScramMechanism::Sha256, credential)]),
        };
        std::fs::write(dir.join(scram::path("bob")), serde_json::to_vec(&file).unwrap()).unwrap();
        let mut config = BrokerConfig { log_dir: dir.display().to_string(), ..BrokerConfig::default() };
        config.set("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512").unwrap();
        let listener = Listener::from_config(&config, "SASL_SSL").unwrap();
        let login = |user: &str, password: &str, mechanism: &str| {
            let credentials = SASLConfig::with_credentials(None, user.to_string(), password.to_string()).unwrap();
            let name = Mechname::parse(mechanism.as_bytes()).unwrap();
            let mut client = SASLClient::new(credentials).start_suggested(&[name]).unwrap();
            let mut server = listener.start(mechanism).unwrap();
            let mut from_client = Cursor::new(Vec::new());
            client.step(None, &mut from_client).unwrap();
            loop {
                match server.step(from_client.get_ref()) {
                    Step::Continue(answer) => {
                        from_client = Cursor::new(Vec::new());
                        if client.step(Some(&answer), &mut from_client).is_err() {
                            return Err("the client gave up".to_string());
                        }
                    }
                    Step::Done { user, .. } => return Ok(user),
                    Step::Failed(why) => return Err(why),
                }
            }
        };
        assert_eq!(login("bob", "bob-secret", "SCRAM-SHA-256"), Ok("bob".to_string()));
        assert!(login("bob", "guess", "SCRAM-SHA-256").is_err(), "a wrong password");
        assert!(login("bob", "bob-secret", "SCRAM-SHA-512").is_err(), "no SHA-512 credential");
        assert!(login("carol", "anything", "SCRAM-SHA-256").is_err(), "no such user");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Found by the fuzz run: rsasl 2.3.1's SCRAM parser panics on an attribute shorter than
    /// its `x=` prefix; the exchange refuses it instead, and the broker's task goes on.
    #[test]
    fn a_malformed_scram_message_is_refused_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("kaas-scram-malformed-{}", std::process::id()));
        let listener = fuzz_listener(&dir.display().to_string());
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let mut exchange = listener.start(mechanism).expect("enabled");
            assert!(matches!(exchange.step(b"n,,n=a,"), Step::Failed(_)), "{mechanism}");
        }
    }
}
