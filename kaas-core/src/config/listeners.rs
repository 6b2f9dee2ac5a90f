//! Kafka's listeners: `listeners`, `advertised.listeners`, `listener.security.protocol.map` and
//! `inter.broker.listener.name`, read and checked as Apache reads and checks them. A listener
//! is a name, a security protocol (through the map) and an address; clients are told the
//! advertised address of the listener their request came in on.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// How a listener's connections are secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections are TLS.
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate by SASL.
    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// Where one listener is reached: its name, host and port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerAddress {
    pub listener: String,
    pub host: String,
    pub port: i32,
}

impl fmt::Display for ListenerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "{}://[{}]:{}", self.listener, self.host, self.port),
            false => write!(f, "{}://{}:{}", self.listener, self.host, self.port),
        }
    }
}

/// One listener to bind: its endpoint (host empty or 0.0.0.0: every interface) and protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub endpoint: ListenerAddress,
    pub protocol: SecurityProtocol,
}

/// Whether an SSL listener asks clients for a certificate (`ssl.client.auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientAuth {
    #[default]
    None,
    Requested,
    Required,
}

impl ClientAuth {
    pub fn parse(text: &str) -> Result<ClientAuth, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(format!("invalid value {text:?} for ssl.client.auth: none, requested or required")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Requested => "requested",
            ClientAuth::Required => "required",
        }
    }
}

/// The `ssl.*` settings of SSL listeners, PEM only: the key and its certificate chain from a
/// file (`ssl.keystore.location`) or inline (`ssl.keystore.key`, `ssl.keystore.certificate.chain`),
/// and the certificates client certificates must chain to (`ssl.truststore.*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SslSettings {
    pub keystore_type: String,
    pub keystore_location: String,
    pub keystore_key: String,
    pub keystore_certificate_chain: String,
    pub key_password: String,
    pub truststore_type: String,
    pub truststore_location: String,
    pub truststore_certificates: String,
    pub client_auth: ClientAuth,
    /// How a client certificate's subject becomes its principal's name
    /// (`ssl.principal.mapping.rules`: DEFAULT, or RULE:pattern/replacement/[LU], ...).
    pub principal_mapping_rules: String,
}

impl SslSettings {
    /// Checks what can be checked without reading a file: PEM, a key and chain given one way.
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in
            [("ssl.keystore.type", &self.keystore_type), ("ssl.truststore.type", &self.truststore_type)]
        {
            if !value.is_empty() && !value.eq_ignore_ascii_case("PEM") {
                return Err(format!("{name}={value}: kaas reads PEM only (convert with `openssl pkcs12`)"));
            }
        }
        if !self.key_password.is_empty() {
            return Err("ssl.key.password: kaas reads unencrypted PEM keys only".into());
        }
        let inline = !self.keystore_key.is_empty() || !self.keystore_certificate_chain.is_empty();
        if inline && !self.keystore_location.is_empty() {
            return Err(
                "give ssl.keystore.location or ssl.keystore.key with ssl.keystore.certificate.chain, not both".into()
            );
        }
        if inline && (self.keystore_key.is_empty() || self.keystore_certificate_chain.is_empty()) {
            return Err("ssl.keystore.key and ssl.keystore.certificate.chain go together".into());
        }
        if !self.truststore_location.is_empty() && !self.truststore_certificates.is_empty() {
            return Err("give ssl.truststore.location or ssl.truststore.certificates, not both".into());
        }
        Ok(())
    }

    /// Whether a key and certificate chain are given at all.
    pub fn has_keystore(&self) -> bool {
        !self.keystore_location.is_empty() || !self.keystore_key.is_empty()
    }
}

/// The listeners as settings give them, before they are checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerSettings {
    pub listeners: String,
    pub advertised_listeners: Option<String>,
    pub protocol_map: Option<String>,
    pub inter_broker_listener_name: Option<String>,
}

/// The listeners, checked: what to bind, what to advertise, and which one brokers use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    pub bind: Vec<Bind>,
    /// In the order of `advertised.listeners` (or `listeners`), one per bound listener at most.
    pub advertised: Vec<ListenerAddress>,
    pub inter_broker: String,
}

/// Apache's map when `listener.security.protocol.map` is not set: each protocol's own name.
pub const DEFAULT_MAP: &str = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// `NAME://host:port, ...`: names upper-cased as Apache does; `[v6]` hosts unbracketed.
pub fn parse_endpoints(setting: &str, text: &str) -> Result<Vec<ListenerAddress>, String> {
    let mut endpoints = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, address) =
            item.split_once("://").ok_or_else(|| format!("{setting}: {item:?} is not of the form NAME://HOST:PORT"))?;
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| format!("{setting}: {item:?} is not of the form NAME://HOST:PORT"))?;
        let port: i32 = port.parse().map_err(|_| format!("{setting}: {item:?} has no valid port"))?;
        if !(0..=65535).contains(&port) {
            return Err(format!("{setting}: {item:?} has no valid port"));
        }
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(format!("{setting}: {item:?} has no valid listener name"));
        }
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        endpoints.push(ListenerAddress { listener: name, host, port });
    }
    Ok(endpoints)
}

fn parse_map(text: &str) -> Result<BTreeMap<String, SecurityProtocol>, String> {
    let mut map = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, protocol) = item
            .split_once(':')
            .ok_or_else(|| format!("listener.security.protocol.map: {item:?} is not of the form NAME:PROTOCOL"))?;
        let protocol = SecurityProtocol::parse(protocol)
            .ok_or_else(|| format!("listener.security.protocol.map: unknown security protocol in {item:?}"))?;
        if map.insert(name.trim().to_ascii_uppercase(), protocol).is_some() {
            return Err(format!("listener.security.protocol.map: {} is mapped twice", name.trim()));
        }
    }
    Ok(map)
}

fn unique_names(setting: &str, endpoints: &[ListenerAddress]) -> Result<(), String> {
    for (i, e) in endpoints.iter().enumerate() {
        if endpoints[..i].iter().any(|o| o.listener == e.listener) {
            return Err(format!("{setting}: each listener must have a different name, {} is not", e.listener));
        }
    }
    Ok(())
}

impl ListenerSettings {
    /// Checks the settings as Apache does: names unique and mapped to a protocol, ports of
    /// bound listeners unique (0 aside), every advertised listener bound, none advertised at
    /// 0.0.0.0 (unreachable) when advertised explicitly, and the inter-broker listener among
    /// them. A listener on every interface that is not advertised explicitly is advertised at
    /// 127.0.0.1, as `--listen 0.0.0.0:PORT` always was.
    pub fn resolve(&self) -> Result<Listeners, String> {
        let map = parse_map(self.protocol_map.as_deref().unwrap_or(DEFAULT_MAP))?;
        let bound = parse_endpoints("listeners", &self.listeners)?;
        if bound.is_empty() {
            return Err("listeners: at least one listener is needed".into());
        }
        unique_names("listeners", &bound)?;
        for (i, e) in bound.iter().enumerate() {
            if e.port != 0 && bound[..i].iter().any(|o| o.port == e.port) {
                return Err(format!("listeners: each listener must have a different port, {} is not", e.port));
            }
        }
        let mut bind = Vec::new();
        for e in &bound {
            let protocol = *map.get(&e.listener).ok_or_else(|| {
                format!(
                    "listener {} is not in listener.security.protocol.map, so its security protocol is unknown",
                    e.listener
                )
            })?;
            bind.push(Bind { endpoint: e.clone(), protocol });
        }
        let explicit = self.advertised_listeners.is_some();
        let advertised = match &self.advertised_listeners {
            Some(text) => parse_endpoints("advertised.listeners", text)?,
            None => bound.clone(),
        };
        unique_names("advertised.listeners", &advertised)?;
        let mut out = Vec::new();
        for e in advertised {
            if !bound.iter().any(|b| b.listener == e.listener) {
                return Err(format!("advertised.listeners: {} is not one of the listeners", e.listener));
            }
            let wildcard = e.host.is_empty() || e.host == "0.0.0.0" || e.host == "::";
            if explicit && wildcard && !e.host.is_empty() {
                return Err(format!(
                    "advertised.listeners cannot use the nonroutable meta-address {}: use a routable address",
                    e.host
                ));
            }
            let host = if wildcard { "127.0.0.1".to_string() } else { e.host };
            out.push(ListenerAddress { host, ..e });
        }
        let inter_broker = match &self.inter_broker_listener_name {
            Some(name) => name.trim().to_ascii_uppercase(),
            None if out.iter().any(|e| e.listener == "PLAINTEXT") => "PLAINTEXT".to_string(),
            None => out.first().map(|e| e.listener.clone()).unwrap_or_default(),
        };
        if !out.iter().any(|e| e.listener == inter_broker) {
            return Err(format!(
                "inter.broker.listener.name must be a listener name defined in advertised.listeners; {inter_broker} is not"
            ));
        }
        Ok(Listeners { bind, advertised: out, inter_broker })
    }
}

impl Listeners {
    /// The advertised endpoint brokers reach this one at.
    pub fn inter_broker_endpoint(&self) -> &ListenerAddress {
        self.advertised.iter().find(|e| e.listener == self.inter_broker).expect("resolve checked it")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(listeners: &str) -> ListenerSettings {
        ListenerSettings { listeners: listeners.into(), ..ListenerSettings::default() }
    }

    #[test]
    fn listeners_are_read_as_apache_reads_them() {
        let l = settings("PLAINTEXT://:9092,ssl://kaas-0:9093").resolve().unwrap();
        assert_eq!(l.bind.len(), 2);
        assert_eq!(l.bind[1].protocol, SecurityProtocol::Ssl);
        assert_eq!(l.bind[1].endpoint, ListenerAddress { listener: "SSL".into(), host: "kaas-0".into(), port: 9093 });
        assert_eq!(l.advertised[0].host, "127.0.0.1", "an empty host is advertised as the loopback");
        assert_eq!(l.inter_broker, "PLAINTEXT");
        assert_eq!(l.inter_broker_endpoint().port, 9092);

        let custom = ListenerSettings {
            listeners: "INTERNAL://0.0.0.0:9092,EXTERNAL://[::1]:9094".into(),
            advertised_listeners: Some("EXTERNAL://kaas.example.com:19094,INTERNAL://kaas-0.svc:9092".into()),
            protocol_map: Some("INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL".into()),
            inter_broker_listener_name: Some("internal".into()),
        };
        let l = custom.resolve().unwrap();
        assert_eq!(l.bind[1].endpoint.host, "::1");
        assert_eq!(l.bind[1].protocol, SecurityProtocol::SaslSsl);
        assert!(l.bind[1].protocol.tls());
        assert_eq!(l.advertised[0].to_string(), "EXTERNAL://kaas.example.com:19094");
        assert_eq!(l.inter_broker_endpoint().host, "kaas-0.svc");
    }

    #[test]
    fn bad_listeners_are_refused_with_a_reason() {
        let refused = |s: ListenerSettings, why: &str| {
            let e = s.resolve().unwrap_err();
            assert!(e.contains(why), "{e:?} should say {why:?}");
        };
        refused(settings(""), "at least one");
        refused(settings("PLAINTEXT://a:1,PLAINTEXT://b:2"), "different name");
        refused(settings("PLAINTEXT://a:1,SSL://b:1"), "different port");
        refused(settings("PLAINTEXT://a:70000"), "valid port");
        refused(settings("PLAINTEXT:/a:1"), "NAME://HOST:PORT");
        refused(settings("INTERNAL://a:1"), "security.protocol.map");
        let advertised =
            |a: &str| ListenerSettings { advertised_listeners: Some(a.into()), ..settings("PLAINTEXT://:1") };
        refused(advertised("SSL://b:2"), "not one of the listeners");
        refused(advertised("PLAINTEXT://0.0.0.0:1"), "nonroutable");
        let inter = ListenerSettings { inter_broker_listener_name: Some("SSL".into()), ..settings("PLAINTEXT://:1") };
        refused(inter, "inter.broker.listener.name");
        let map = ListenerSettings { protocol_map: Some("A:TLS".into()), ..settings("A://:1") };
        refused(map, "unknown security protocol");
    }
}
