//! SASL on SASL_PLAINTEXT and SASL_SSL listeners (KIP-43, KIP-152): each connection's
//! authentication is a state machine driven by SaslHandshake and SaslAuthenticate, before which
//! a client may ask ApiVersions and nothing else (anything else closes the connection, as
//! Apache closes it). The mechanisms are behind `Mechanisms` (kaas-server gives rsasl's), as TLS
//! is behind the listener's handshake: kaas-net frames the exchange and never hashes.
//! Elsewhere (a listener without SASL, or once authenticated) both APIs answer
//! ILLEGAL_SASL_STATE, as Apache's request handler answers them, except kaas's own KAAS-BROKER
//! on the inter-broker listener, by which a peer proves it is a broker of the cluster
//! (`broker_auth.rs`).

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::api;
use crate::connection::Response;

use kaas_core::cluster::broker_auth::MECHANISM as BROKER_MECHANISM;

const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;
const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// What one step of a mechanism came to.
pub enum Step {
    /// More to exchange: this goes back to the client.
    Continue(Bytes),
    /// Authenticated as `user`; `answer` goes back (SCRAM's server-final message).
    Done { user: String, answer: Bytes },
    /// Refused: the reason is logged; the client hears only that authentication failed.
    Failed(String),
}

/// One client's exchange of one mechanism.
pub trait Exchange: Send {
    fn step(&mut self, client: &[u8]) -> Step;
}

/// The mechanisms a SASL listener offers.
pub trait Mechanisms: Send + Sync {
    fn enabled(&self) -> Vec<String>;
    /// A new exchange of `mechanism`, if it is enabled.
    fn start(&self, mechanism: &str) -> Option<Box<dyn Exchange>>;
}

/// A connection's authentication.
pub enum Auth {
    /// Not a SASL listener: every request is served. On the inter-broker listener a peer
    /// broker proves itself with `KAAS-BROKER` (`peers`), kaas's own mechanism.
    Open { peers: Option<Arc<dyn Mechanisms>> },
    /// A SASL listener before its handshake.
    Handshake(Arc<dyn Mechanisms>),
    /// A mechanism chosen: SaslAuthenticate until it is done.
    Exchanging { mechanism: String, exchange: Box<dyn Exchange> },
    Authenticated {
        user: String,
        /// A broker of this cluster (`KAAS-BROKER`): its own calls are a broker's.
        broker: bool,
    },
}

/// What the connection does with a request, given its authentication.
pub enum Verdict {
    /// Not SASL's: dispatched as usual.
    Serve,
    /// SASL's: this is the answer.
    Answer(Response),
    /// Authentication failed: this answer (after the failed-authentication delay), then the
    /// connection closes.
    Refuse(Response, String),
    /// Closed without an answer, for this reason.
    Close(String),
}

impl Auth {
    /// `mechanisms` of a SASL listener, or `peers` (the brokers' mechanism) on the
    /// inter-broker listener, which is never a SASL one.
    pub fn new(mechanisms: Option<Arc<dyn Mechanisms>>, peers: Option<Arc<dyn Mechanisms>>) -> Auth {
        match mechanisms {
            None => Auth::Open { peers },
            Some(m) => Auth::Handshake(m),
        }
    }

    /// The principal of the connection, as Kafka names principals.
    pub fn principal(&self) -> String {
        match self {
            Auth::Authenticated { user, .. } => format!("User:{user}"),
            _ => "User:ANONYMOUS".to_string(),
        }
    }

    /// Whether SASL authenticated the client.
    pub fn is_authenticated(&self) -> bool {
        matches!(self, Auth::Authenticated { .. })
    }

    /// Whether a broker of this cluster is on the other end (it proved it knows the secret).
    pub fn is_broker(&self) -> bool {
        matches!(self, Auth::Authenticated { broker: true, .. })
    }

    /// Whether the client has yet to authenticate (a SASL listener's, until it has).
    pub fn pending(&self) -> bool {
        !self.done()
    }

    /// Whether requests other than ApiVersions and SASL's may be served.
    fn done(&self) -> bool {
        matches!(self, Auth::Open { .. } | Auth::Authenticated { .. })
    }

    /// Looks at a request before it is dispatched: SASL's are answered here, and nothing but
    /// ApiVersions goes through before authentication.
    pub fn check(&mut self, frame: &Bytes) -> Verdict {
        if frame.len() < 4 {
            return Verdict::Serve; // dispatch refuses it
        }
        let key = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]]));
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        match key {
            Ok(ApiKey::SaslHandshake) => self.handshake(frame.clone(), version),
            Ok(ApiKey::SaslAuthenticate) => self.authenticate(frame.clone(), version),
            Ok(ApiKey::ApiVersions) => Verdict::Serve,
            _ if self.done() => Verdict::Serve,
            Ok(key) => Verdict::Close(format!("{key:?} before SASL authentication")),
            Err(_) => Verdict::Close("an unknown request before SASL authentication".into()),
        }
    }

    fn handshake(&mut self, frame: Bytes, version: i16) -> Verdict {
        let Some((header, request)) = decode::<SaslHandshakeRequest>(ApiKey::SaslHandshake, frame, version) else {
            return Verdict::Close("an undecodable SaslHandshake".into());
        };
        let answer = |code: i16, mechanisms: Vec<String>| {
            let mechanisms = mechanisms.into_iter().map(StrBytes::from_string).collect();
            let response = SaslHandshakeResponse::default().with_error_code(code).with_mechanisms(mechanisms);
            api::encode(ApiKey::SaslHandshake, &header, &response)
        };
        let mechanism = request.mechanism.to_string();
        let mechanisms = match self {
            Auth::Handshake(mechanisms) => mechanisms.clone(),
            Auth::Open { peers: Some(peers) } if mechanism == BROKER_MECHANISM => peers.clone(),
            _ => return Verdict::Answer(answer(ILLEGAL_SASL_STATE, Vec::new())),
        };
        match mechanisms.start(&mechanism) {
            Some(exchange) => {
                let enabled = mechanisms.enabled();
                *self = Auth::Exchanging { mechanism, exchange };
                Verdict::Answer(answer(0, enabled))
            }
            None => Verdict::Answer(answer(UNSUPPORTED_SASL_MECHANISM, mechanisms.enabled())),
        }
    }

    fn authenticate(&mut self, frame: Bytes, version: i16) -> Verdict {
        let Some((header, request)) = decode::<SaslAuthenticateRequest>(ApiKey::SaslAuthenticate, frame, version)
        else {
            return Verdict::Close("an undecodable SaslAuthenticate".into());
        };
        let answer = |code: i16, message: Option<&str>, bytes: Bytes| {
            let response = SaslAuthenticateResponse::default()
                .with_error_code(code)
                .with_error_message(message.map(|m| StrBytes::from_string(m.to_string())))
                .with_auth_bytes(bytes);
            api::encode(ApiKey::SaslAuthenticate, &header, &response)
        };
        let Auth::Exchanging { mechanism, exchange } = self else {
            return Verdict::Answer(answer(ILLEGAL_SASL_STATE, Some("no SASL exchange is under way"), Bytes::new()));
        };
        match exchange.step(&request.auth_bytes) {
            Step::Continue(bytes) => Verdict::Answer(answer(0, None, bytes)),
            Step::Done { user, answer: bytes } => {
                tracing::debug!(%user, %mechanism, "authenticated");
                let broker = mechanism == BROKER_MECHANISM;
                *self = Auth::Authenticated { user, broker };
                Verdict::Answer(answer(0, None, bytes))
            }
            Step::Failed(why) => {
                let why = format!("{mechanism}: {why}");
                let message = format!(
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
                );
                Verdict::Refuse(answer(SASL_AUTHENTICATION_FAILED, Some(&message), Bytes::new()), why)
            }
        }
    }
}

fn decode<T: Decodable>(key: ApiKey, frame: Bytes, version: i16) -> Option<(RequestHeader, T)> {
    let (min, max) = api::supported(key)?;
    if version < min || version > max {
        return None;
    }
    let mut body = frame;
    let header = RequestHeader::decode(&mut body, key.request_header_version(version)).ok()?;
    let request = T::decode(&mut body, version).ok()?;
    Some((header, request))
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::{MetadataRequest, ResponseHeader};
    use kafka_protocol::protocol::Encodable;

    use super::*;

    /// A mechanism that takes "ok" and refuses anything else.
    struct Fake;
    struct FakeExchange;
    impl Exchange for FakeExchange {
        fn step(&mut self, client: &[u8]) -> Step {
            match client {
                b"ok" => Step::Done { user: "alice".into(), answer: Bytes::new() },
                _ => Step::Failed("not ok".into()),
            }
        }
    }
    impl Mechanisms for Fake {
        fn enabled(&self) -> Vec<String> {
            vec!["PLAIN".into()]
        }
        fn start(&self, mechanism: &str) -> Option<Box<dyn Exchange>> {
            (mechanism == "PLAIN").then(|| Box::new(FakeExchange) as Box<dyn Exchange>)
        }
    }

    fn frame<T: Encodable>(key: ApiKey, version: i16, request: &T) -> Bytes {
        let mut buf = BytesMut::new();
        let header = RequestHeader::default().with_request_api_key(key as i16).with_request_api_version(version);
        header.encode(&mut buf, key.request_header_version(version)).unwrap();
        request.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn handshake(mechanism: &str) -> Bytes {
        let request = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
        frame(ApiKey::SaslHandshake, 1, &request)
    }

    fn authenticate(token: impl Into<Bytes>) -> Bytes {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
        frame(ApiKey::SaslAuthenticate, 2, &request)
    }

    /// The error code of an answer.
    fn code(verdict: Verdict, key: ApiKey, version: i16) -> i16 {
        let (Verdict::Answer(Response::Frame(mut body)) | Verdict::Refuse(Response::Frame(mut body), _)) = verdict
        else {
            panic!("no answer")
        };
        ResponseHeader::decode(&mut body, key.response_header_version(version)).unwrap();
        match key {
            ApiKey::SaslHandshake => SaslHandshakeResponse::decode(&mut body, version).unwrap().error_code,
            _ => SaslAuthenticateResponse::decode(&mut body, version).unwrap().error_code,
        }
    }

    #[test]
    fn nothing_but_api_versions_before_authentication_and_sasl_in_its_order() {
        let metadata = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        let mut auth = Auth::new(Some(Arc::new(Fake)), None);
        assert!(matches!(auth.check(&metadata), Verdict::Close(_)), "Metadata before authentication");
        assert_eq!(code(auth.check(&authenticate(&b"ok"[..])), ApiKey::SaslAuthenticate, 2), ILLEGAL_SASL_STATE);
        assert_eq!(code(auth.check(&handshake("GSSAPI")), ApiKey::SaslHandshake, 1), UNSUPPORTED_SASL_MECHANISM);
        assert_eq!(code(auth.check(&handshake("PLAIN")), ApiKey::SaslHandshake, 1), 0);
        assert!(matches!(auth.check(&metadata), Verdict::Close(_)), "Metadata mid-exchange");
        assert_eq!(code(auth.check(&authenticate(&b"ok"[..])), ApiKey::SaslAuthenticate, 2), 0);
        assert_eq!(auth.principal(), "User:alice");
        assert!(matches!(auth.check(&metadata), Verdict::Serve));
        assert_eq!(code(auth.check(&handshake("PLAIN")), ApiKey::SaslHandshake, 1), ILLEGAL_SASL_STATE, "once done");

        let mut refused = Auth::new(Some(Arc::new(Fake)), None);
        refused.check(&handshake("PLAIN"));
        let verdict = refused.check(&authenticate(&b"guess"[..]));
        assert!(matches!(verdict, Verdict::Refuse(..)));
        assert_eq!(code(verdict, ApiKey::SaslAuthenticate, 2), SASL_AUTHENTICATION_FAILED);
        assert_eq!(refused.principal(), "User:ANONYMOUS");

        let mut open = Auth::new(None, None);
        assert!(matches!(open.check(&metadata), Verdict::Serve));
        assert_eq!(code(open.check(&handshake("PLAIN")), ApiKey::SaslHandshake, 1), ILLEGAL_SASL_STATE);
        assert_eq!(code(open.check(&handshake(BROKER_MECHANISM)), ApiKey::SaslHandshake, 1), ILLEGAL_SASL_STATE);
    }

    /// The answer's auth bytes (KAAS-BROKER's nonce).
    fn auth_bytes(verdict: Verdict) -> Bytes {
        let Verdict::Answer(Response::Frame(mut body)) = verdict else { panic!("no answer") };
        ResponseHeader::decode(&mut body, ApiKey::SaslAuthenticate.response_header_version(2)).unwrap();
        SaslAuthenticateResponse::decode(&mut body, 2).unwrap().auth_bytes
    }

    #[test]
    fn a_broker_proves_itself_on_the_inter_broker_listener_only() {
        use kaas_core::cluster::broker_auth::BrokerSecret;
        let dir = std::env::temp_dir().join("kaas-sasl-broker-test");
        let env = kaas_core::env::real::RealEnv::new(dir);
        let secret = Arc::new(BrokerSecret::new([3; 32]));
        let peers = || -> Option<Arc<dyn Mechanisms>> {
            Some(Arc::new(crate::broker_auth::BrokerMechanism { env: env.clone(), secret: secret.clone() }))
        };
        let mut auth = Auth::new(None, peers());
        assert_eq!(code(auth.check(&handshake(BROKER_MECHANISM)), ApiKey::SaslHandshake, 1), 0);
        let nonce = auth_bytes(auth.check(&authenticate("2")));
        assert_eq!(nonce.len(), 32, "a fresh nonce");
        assert_eq!(code(auth.check(&authenticate(secret.proof(2, &nonce))), ApiKey::SaslAuthenticate, 2), 0);
        assert!(auth.is_broker());
        assert_eq!(auth.principal(), "User:kaas-broker-2");

        // Another cluster's broker, or an answer recorded against another nonce: refused.
        let mut other = Auth::new(None, peers());
        other.check(&handshake(BROKER_MECHANISM));
        let fresh = auth_bytes(other.check(&authenticate("2")));
        assert_ne!(fresh, nonce);
        let verdict = other.check(&authenticate(secret.proof(2, &nonce)));
        assert_eq!(code(verdict, ApiKey::SaslAuthenticate, 2), SASL_AUTHENTICATION_FAILED);
        assert!(!other.is_broker());

        // A plain client on the inter-broker listener is served as before, and is no broker.
        let mut client = Auth::new(None, peers());
        let metadata = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        assert!(matches!(client.check(&metadata), Verdict::Serve));
        assert!(!client.is_broker());
        // A SASL listener does not offer KAAS-BROKER.
        let mut sasl = Auth::new(Some(Arc::new(Fake)), None);
        let refused = sasl.check(&handshake(BROKER_MECHANISM));
        assert_eq!(code(refused, ApiKey::SaslHandshake, 1), UNSUPPORTED_SASL_MECHANISM);
    }
}
