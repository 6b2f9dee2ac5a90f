//! How `kaas admin` reaches a cluster: a connection to the bootstrap broker, and one to any
//! other broker an answer names (a partition's owner, a group's coordinator), each secured as
//! the `--command-config` properties say, with Kafka's client setting names:
//! `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism` (PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512), the user and password of `sasl.jaas.config`, and
//! `ssl.truststore.location` (PEM certificates; the platform's roots are not read).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use kaas_client::{BoxStream, WireClient};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use rsasl::mechname::Mechname;
use rsasl::prelude::{SASLClient, SASLConfig, State};

const CLIENT_ID: &str = "kaas-admin";

/// The client side of a listener's security.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    tls: Option<Tls>,
    sasl: Option<Sasl>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tls {
    /// PEM certificates the broker's chain must lead to.
    truststore: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Sasl {
    mechanism: String,
    username: String,
    password: String,
}

impl Security {
    /// From a Kafka client properties file's text.
    pub fn from_properties(text: &str) -> Result<Security, String> {
        let props: BTreeMap<&str, &str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
            .filter_map(|l| l.split_once('=').map(|(k, v)| (k.trim(), v.trim())))
            .collect();
        let protocol = props.get("security.protocol").copied().unwrap_or("PLAINTEXT").to_ascii_uppercase();
        let (tls, sasl) = match protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => return Err(format!("security.protocol={other}: not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")),
        };
        let tls = match tls {
            false => None,
            true => {
                if props.get("ssl.truststore.type").is_some_and(|t| !t.eq_ignore_ascii_case("PEM")) {
                    return Err("ssl.truststore.type: only PEM truststores are read".into());
                }
                let truststore =
                    props.get("ssl.truststore.location").ok_or("SSL needs ssl.truststore.location (PEM)")?;
                Some(Tls { truststore: truststore.to_string() })
            }
        };
        let sasl = match sasl {
            false => None,
            true => {
                let mechanism = props.get("sasl.mechanism").copied().unwrap_or("GSSAPI").to_ascii_uppercase();
                if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&mechanism.as_str()) {
                    return Err(format!("sasl.mechanism={mechanism}: kaas admin speaks PLAIN and SCRAM-SHA-256/512"));
                }
                let jaas =
                    props.get("sasl.jaas.config").ok_or("SASL needs sasl.jaas.config with a username and password")?;
                let option = |name: &str| jaas_option(jaas, name).ok_or(format!("sasl.jaas.config has no {name}"));
                Some(Sasl { mechanism, username: option("username")?, password: option("password")? })
            }
        };
        Ok(Security { tls, sasl })
    }
}

/// An option of a JAAS line: `... username="alice" password="secret";`.
fn jaas_option(jaas: &str, name: &str) -> Option<String> {
    let at = jaas.find(&format!("{name}="))? + name.len() + 1;
    let rest = &jaas[at..];
    match rest.strip_prefix('"') {
        Some(quoted) => Some(quoted[..quoted.find('"')?].to_string()),
        None => Some(rest.split(|c: char| c.is_whitespace() || c == ';').next()?.to_string()),
    }
}

/// Connections to the cluster's brokers, made as they are needed.
pub struct Admin {
    security: Security,
    bootstrap: WireClient,
    /// Every broker's address, as the last Metadata said.
    brokers: BTreeMap<i32, String>,
    connections: BTreeMap<i32, WireClient>,
}

impl Admin {
    pub async fn connect(bootstrap: &str, security: Security) -> Result<Admin, String> {
        let client = connect(bootstrap, &security).await?;
        let mut admin = Admin { security, bootstrap: client, brokers: BTreeMap::new(), connections: BTreeMap::new() };
        admin.metadata(Some(Vec::new())).await?;
        Ok(admin)
    }

    /// A request to the bootstrap broker.
    pub async fn call<Req, Resp>(&mut self, key: ApiKey, version: i16, request: &Req) -> Result<Resp, String>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        self.bootstrap.call(key, version, request).await.map_err(|e| format!("{key:?}: {e}"))
    }

    /// A request to broker `id`.
    pub async fn call_on<Req, Resp>(
        &mut self,
        id: i32,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, String>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        if !self.connections.contains_key(&id) {
            let address = self.brokers.get(&id).ok_or_else(|| format!("broker {id} is not in the metadata"))?;
            let client = connect(address, &self.security).await?;
            self.connections.insert(id, client);
        }
        let client = self.connections.get_mut(&id).expect("connected");
        client.call(key, version, request).await.map_err(|e| format!("{key:?} to broker {id}: {e}"))
    }

    /// Metadata of `topics` (None: every topic); the brokers it names are remembered.
    pub async fn metadata(&mut self, topics: Option<Vec<String>>) -> Result<MetadataResponse, String> {
        let topics = topics.map(|ts| {
            ts.iter().map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(topic(t)))).collect()
        });
        let request = MetadataRequest::default().with_topics(topics).with_allow_auto_topic_creation(false);
        let answer: MetadataResponse = self.call(ApiKey::Metadata, 12, &request).await?;
        for b in &answer.brokers {
            self.brokers.insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        Ok(answer)
    }

    /// The broker coordinating `key` (key_type 0: a group, 1: a transactional id).
    pub async fn coordinator(&mut self, key_type: i8, key: &str) -> Result<i32, String> {
        let request = FindCoordinatorRequest::default().with_key_type(key_type).with_coordinator_keys(vec![text(key)]);
        let answer: FindCoordinatorResponse = self.call(ApiKey::FindCoordinator, 4, &request).await?;
        let c = answer.coordinators.first().ok_or("FindCoordinator: no answer")?;
        if c.error_code != 0 {
            return Err(format!("{key}: {}", error_name(c.error_code)));
        }
        self.brokers.insert(c.node_id.0, format!("{}:{}", c.host.as_str(), c.port));
        Ok(c.node_id.0)
    }
}

async fn connect(address: &str, security: &Security) -> Result<WireClient, String> {
    let tcp = tokio::net::TcpStream::connect(address).await.map_err(|e| format!("{address}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let stream: BoxStream = match &security.tls {
        None => Box::new(tcp),
        Some(tls) => Box::new(tls_connect(tcp, address, tls).await?),
    };
    let mut client = WireClient::new(stream, CLIENT_ID);
    if let Some(sasl) = &security.sasl {
        authenticate(&mut client, sasl).await.map_err(|e| format!("{address}: SASL {}: {e}", sasl.mechanism))?;
    }
    Ok(client)
}

async fn tls_connect(
    tcp: tokio::net::TcpStream,
    address: &str,
    tls: &Tls,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&tls.truststore).map_err(|e| format!("{}: {e}", tls.truststore))?;
    for cert in certs {
        roots.add(cert.map_err(|e| format!("{}: {e}", tls.truststore))?).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    connector.connect(name, tcp).await.map_err(|e| format!("{address}: TLS: {e}"))
}

/// SaslHandshake, then SaslAuthenticate until rsasl's client is done.
async fn authenticate(client: &mut WireClient, sasl: &Sasl) -> Result<(), String> {
    let handshake = SaslHandshakeRequest::default().with_mechanism(text(&sasl.mechanism));
    let answer: SaslHandshakeResponse =
        client.call(ApiKey::SaslHandshake, 1, &handshake).await.map_err(|e| e.to_string())?;
    if answer.error_code != 0 {
        let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(format!("{} (the listener offers {})", error_name(answer.error_code), offered.join(", ")));
    }
    let config =
        SASLConfig::with_credentials(None, sasl.username.clone(), sasl.password.clone()).map_err(|e| e.to_string())?;
    let name = Mechname::parse(sasl.mechanism.as_bytes()).map_err(|e| e.to_string())?;
    let mut session = SASLClient::new(config).start_suggested(&[name]).map_err(|e| e.to_string())?;
    let mut input: Option<bytes::Bytes> = None;
    loop {
        let mut out = Cursor::new(Vec::new());
        let state = session.step(input.as_deref(), &mut out).map_err(|e| e.to_string())?;
        if let State::Finished(rsasl::prelude::MessageSent::No) = state {
            return Ok(());
        }
        let request = SaslAuthenticateRequest::default().with_auth_bytes(out.into_inner().into());
        let answer: SaslAuthenticateResponse =
            client.call(ApiKey::SaslAuthenticate, 2, &request).await.map_err(|e| e.to_string())?;
        if answer.error_code != 0 {
            let message = answer.error_message.as_ref().map_or("", |m| m.as_str());
            return Err(format!("{}: {message}", error_name(answer.error_code)));
        }
        if matches!(state, State::Finished(_)) {
            return Ok(());
        }
        input = Some(answer.auth_bytes);
    }
}

pub fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn topic(s: &str) -> TopicName {
    TopicName(text(s))
}

/// A Kafka error code as Apache names it.
pub fn error_name(code: i16) -> String {
    match kafka_protocol::ResponseError::try_from_code(code) {
        Some(e) => format!("{e:?} ({code})"),
        None => format!("error {code}"),
    }
}

/// `Err` with the error's name unless `code` is 0.
pub fn check(what: &str, code: i16, message: Option<&StrBytes>) -> Result<(), String> {
    match (code, message) {
        (0, _) => Ok(()),
        (_, Some(m)) if !m.is_empty() => Err(format!("{what}: {}: {}", error_name(code), m.as_str())),
        _ => Err(format!("{what}: {}", error_name(code))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_properties_name_the_protocol_mechanism_and_credentials() {
        assert_eq!(Security::from_properties("").unwrap(), Security::default());
        let scram = "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
                     sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"bob\" password=\"b o b\";\n\
                     ssl.truststore.location=/ca.pem\n";
        let security = Security::from_properties(scram).unwrap();
        let sasl = security.sasl.unwrap();
        assert_eq!(
            (sasl.mechanism.as_str(), sasl.username.as_str(), sasl.password.as_str()),
            ("SCRAM-SHA-512", "bob", "b o b")
        );
        assert_eq!(security.tls.unwrap().truststore, "/ca.pem");
        assert!(Security::from_properties("security.protocol=SSL").unwrap_err().contains("truststore"));
        assert!(Security::from_properties("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI").is_err());
        assert!(Security::from_properties("security.protocol=QUIC").is_err());
    }
}
