//! SASL on SASL_PLAINTEXT and SASL_SSL listeners (KIP-43, KIP-152): each connection's
//! authentication is a state machine driven by SaslHandshake and SaslAuthenticate, before which
//! a client may ask ApiVersions and nothing else (anything else closes the connection, as
//! Apache closes it). The mechanisms are behind `Mechanisms` (kaas-server gives rsasl's), as TLS
//! is behind the listener's handshake: kaas-net frames the exchange and never hashes.
//! Elsewhere (a listener without SASL, or once authenticated) both APIs answer
//! ILLEGAL_SASL_STATE, as Apache's request handler answers them, except kaas's own KAAS-BROKER
//! on the inter-broker listener, by which a peer proves it is a broker of the cluster
//! (`broker_auth.rs`).
//!
//! Re-authentication (KIP-368): with `connections.max.reauth.ms` set, a session lasts that long
//! at most (less if the credential expires sooner, as an OAUTHBEARER token does), the client is
//! told so in SaslAuthenticate's `session_lifetime_ms`, and may authenticate again on the same
//! connection, by the same mechanism and as the same principal, before it ends; a request
//! after the end closes the connection.

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
    /// `expires_at_ms`: when the credential itself expires (an OAUTHBEARER token's `exp`).
    Done { user: String, answer: Bytes, expires_at_ms: Option<i64> },
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

/// A connection's authentication: where it is, and how long a session may last
/// (`connections.max.reauth.ms`; 0: for ever, and no re-authentication).
pub struct Auth {
    state: AuthState,
    max_reauth_ms: i64,
}

enum AuthState {
    /// Not a SASL listener: every request is served. On the inter-broker listener a peer
    /// broker proves itself with `KAAS-BROKER` (`peers`), kaas's own mechanism.
    Open {
        peers: Option<Arc<dyn Mechanisms>>,
    },
    /// A SASL listener before its handshake. On the inter-broker listener a peer broker may
    /// choose `KAAS-BROKER` (`peers`) instead of the listener's mechanisms.
    Handshake {
        mechanisms: Arc<dyn Mechanisms>,
        peers: Option<Arc<dyn Mechanisms>>,
    },
    /// A mechanism chosen: SaslAuthenticate until it is done. Re-authenticating, the session
    /// it renews.
    Exchanging {
        mechanism: String,
        exchange: Box<dyn Exchange>,
        mechanisms: Arc<dyn Mechanisms>,
        renews: Option<Session>,
    },
    Authenticated(Session),
}

/// An authenticated session.
#[derive(Clone)]
struct Session {
    user: String,
    /// A broker of this cluster (`KAAS-BROKER`): its own calls are a broker's.
    broker: bool,
    mechanism: String,
    /// Its listener's mechanisms, for a re-authentication (none for a broker's).
    mechanisms: Option<Arc<dyn Mechanisms>>,
    /// When it ends (KIP-368), if it does.
    expires_at_ms: Option<i64>,
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
    /// `mechanisms` of a SASL listener, and `peers` (the brokers' mechanism) on the
    /// inter-broker listener, SASL or not.
    pub fn new(mechanisms: Option<Arc<dyn Mechanisms>>, peers: Option<Arc<dyn Mechanisms>>) -> Auth {
        let state = match mechanisms {
            None => AuthState::Open { peers },
            Some(mechanisms) => AuthState::Handshake { mechanisms, peers },
        };
        Auth { state, max_reauth_ms: 0 }
    }

    /// Sessions last `max_reauth_ms` at most (`connections.max.reauth.ms`; 0: for ever).
    pub fn with_max_reauth_ms(mut self, max_reauth_ms: i64) -> Auth {
        self.max_reauth_ms = max_reauth_ms.max(0);
        self
    }

    /// The session, also while it is being renewed.
    fn session(&self) -> Option<&Session> {
        match &self.state {
            AuthState::Authenticated(s) | AuthState::Exchanging { renews: Some(s), .. } => Some(s),
            _ => None,
        }
    }

    /// The principal of the connection, as Kafka names principals.
    pub fn principal(&self) -> String {
        match self.session() {
            Some(s) => format!("User:{}", s.user),
            None => "User:ANONYMOUS".to_string(),
        }
    }

    /// Whether SASL authenticated the client.
    pub fn is_authenticated(&self) -> bool {
        self.session().is_some()
    }

    /// Whether a broker of this cluster is on the other end (it proved it knows the secret).
    pub fn is_broker(&self) -> bool {
        self.session().is_some_and(|s| s.broker)
    }

    /// Whether the client has yet to authenticate (a SASL listener's, until it has).
    pub fn pending(&self) -> bool {
        !self.done()
    }

    /// Whether requests other than ApiVersions and SASL's may be served.
    fn done(&self) -> bool {
        matches!(self.state, AuthState::Open { .. } | AuthState::Authenticated(_))
    }

    /// Looks at a request before it is dispatched, at `now_ms`: SASL's are answered here,
    /// nothing but ApiVersions goes through before authentication, and nothing at all once the
    /// session has ended.
    pub fn check(&mut self, frame: &Bytes, now_ms: i64) -> Verdict {
        if frame.len() < 4 {
            return Verdict::Serve; // dispatch refuses it
        }
        let key = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]]));
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        if let AuthState::Authenticated(s) = &self.state
            && s.expires_at_ms.is_some_and(|end| end <= now_ms)
            && key != Ok(ApiKey::SaslHandshake)
        {
            return Verdict::Close(format!("{}'s session ended and was not renewed (KIP-368)", s.user));
        }
        match key {
            Ok(ApiKey::SaslHandshake) => self.handshake(frame.clone(), version),
            Ok(ApiKey::SaslAuthenticate) => self.authenticate(frame.clone(), version, now_ms),
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
        let (mechanisms, renews) = match &self.state {
            AuthState::Handshake { peers: Some(peers), .. } if mechanism == BROKER_MECHANISM => (peers.clone(), None),
            AuthState::Handshake { mechanisms, .. } => (mechanisms.clone(), None),
            AuthState::Open { peers: Some(peers) } if mechanism == BROKER_MECHANISM => (peers.clone(), None),
            // A session that ends may be renewed, by the mechanism that began it (KIP-368).
            AuthState::Authenticated(s) if s.expires_at_ms.is_some() => match &s.mechanisms {
                Some(m) if s.mechanism == mechanism => (m.clone(), Some(s.clone())),
                Some(_) => return Verdict::Answer(answer(UNSUPPORTED_SASL_MECHANISM, vec![s.mechanism.clone()])),
                None => return Verdict::Answer(answer(ILLEGAL_SASL_STATE, Vec::new())),
            },
            _ => return Verdict::Answer(answer(ILLEGAL_SASL_STATE, Vec::new())),
        };
        match mechanisms.start(&mechanism) {
            Some(exchange) => {
                let enabled = mechanisms.enabled();
                self.state = AuthState::Exchanging { mechanism, exchange, mechanisms, renews };
                Verdict::Answer(answer(0, enabled))
            }
            None => Verdict::Answer(answer(UNSUPPORTED_SASL_MECHANISM, mechanisms.enabled())),
        }
    }

    fn authenticate(&mut self, frame: Bytes, version: i16, now_ms: i64) -> Verdict {
        let Some((header, request)) = decode::<SaslAuthenticateRequest>(ApiKey::SaslAuthenticate, frame, version)
        else {
            return Verdict::Close("an undecodable SaslAuthenticate".into());
        };
        let answer = |code: i16, message: Option<&str>, bytes: Bytes, lifetime_ms: i64| {
            let response = SaslAuthenticateResponse::default()
                .with_error_code(code)
                .with_error_message(message.map(|m| StrBytes::from_string(m.to_string())))
                .with_auth_bytes(bytes)
                .with_session_lifetime_ms(if version >= 1 { lifetime_ms } else { 0 });
            api::encode(ApiKey::SaslAuthenticate, &header, &response)
        };
        let AuthState::Exchanging { mechanism, exchange, mechanisms, renews } = &mut self.state else {
            return Verdict::Answer(answer(ILLEGAL_SASL_STATE, Some("no SASL exchange is under way"), Bytes::new(), 0));
        };
        let refuse = |mechanism: &str, why: String| {
            let message = format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
            );
            Verdict::Refuse(
                answer(SASL_AUTHENTICATION_FAILED, Some(&message), Bytes::new(), 0),
                format!("{mechanism}: {why}"),
            )
        };
        match exchange.step(&request.auth_bytes) {
            Step::Continue(bytes) => Verdict::Answer(answer(0, None, bytes, 0)),
            Step::Done { user, answer: bytes, expires_at_ms } => {
                if let Some(renewed) = renews.as_ref().filter(|s| s.user != user) {
                    let why = format!("{} re-authenticated as {user}: a connection keeps its principal", renewed.user);
                    return refuse(mechanism, why);
                }
                if expires_at_ms.is_some_and(|end| end <= now_ms) {
                    return refuse(mechanism, format!("{user}'s credential has expired"));
                }
                // The session ends with the credential, or after connections.max.reauth.ms if
                // sooner; without that setting, never (KIP-368: re-authentication is opt-in).
                // A peer broker's link proves itself once and is not asked again.
                let broker = mechanism == BROKER_MECHANISM;
                let session_end = (self.max_reauth_ms > 0 && !broker).then(|| {
                    let max = now_ms.saturating_add(self.max_reauth_ms);
                    expires_at_ms.map_or(max, |end| end.min(max))
                });
                tracing::debug!(%user, %mechanism, renewed = renews.is_some(), "authenticated");
                let mechanisms = (!broker).then(|| mechanisms.clone());
                let lifetime_ms = session_end.map_or(0, |end| end - now_ms);
                let mechanism = mechanism.clone();
                self.state = AuthState::Authenticated(Session {
                    user,
                    broker,
                    mechanism,
                    mechanisms,
                    expires_at_ms: session_end,
                });
                Verdict::Answer(answer(0, None, bytes, lifetime_ms))
            }
            Step::Failed(why) => refuse(mechanism, why),
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
                b"ok" => Step::Done { user: "alice".into(), answer: Bytes::new(), expires_at_ms: None },
                b"bob" => Step::Done { user: "bob".into(), answer: Bytes::new(), expires_at_ms: None },
                // A credential that expires at 1 s, as an OAUTHBEARER token does.
                b"short" => Step::Done { user: "alice".into(), answer: Bytes::new(), expires_at_ms: Some(1000) },
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
        let (Verdict::Answer(Response::Frame(mut body, _)) | Verdict::Refuse(Response::Frame(mut body, _), _)) =
            verdict
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
        assert!(matches!(auth.check(&metadata, 0), Verdict::Close(_)), "Metadata before authentication");
        assert_eq!(code(auth.check(&authenticate(&b"ok"[..]), 0), ApiKey::SaslAuthenticate, 2), ILLEGAL_SASL_STATE);
        assert_eq!(code(auth.check(&handshake("GSSAPI"), 0), ApiKey::SaslHandshake, 1), UNSUPPORTED_SASL_MECHANISM);
        assert_eq!(code(auth.check(&handshake("PLAIN"), 0), ApiKey::SaslHandshake, 1), 0);
        assert!(matches!(auth.check(&metadata, 0), Verdict::Close(_)), "Metadata mid-exchange");
        assert_eq!(code(auth.check(&authenticate(&b"ok"[..]), 0), ApiKey::SaslAuthenticate, 2), 0);
        assert_eq!(auth.principal(), "User:alice");
        assert!(matches!(auth.check(&metadata, 0), Verdict::Serve));
        assert_eq!(code(auth.check(&handshake("PLAIN"), 0), ApiKey::SaslHandshake, 1), ILLEGAL_SASL_STATE, "once done");

        let mut refused = Auth::new(Some(Arc::new(Fake)), None);
        refused.check(&handshake("PLAIN"), 0);
        let verdict = refused.check(&authenticate(&b"guess"[..]), 0);
        assert!(matches!(verdict, Verdict::Refuse(..)));
        assert_eq!(code(verdict, ApiKey::SaslAuthenticate, 2), SASL_AUTHENTICATION_FAILED);
        assert_eq!(refused.principal(), "User:ANONYMOUS");

        let mut open = Auth::new(None, None);
        assert!(matches!(open.check(&metadata, 0), Verdict::Serve));
        assert_eq!(code(open.check(&handshake("PLAIN"), 0), ApiKey::SaslHandshake, 1), ILLEGAL_SASL_STATE);
        assert_eq!(code(open.check(&handshake(BROKER_MECHANISM), 0), ApiKey::SaslHandshake, 1), ILLEGAL_SASL_STATE);
    }

    /// A SaslAuthenticate answer's session lifetime.
    fn lifetime(verdict: Verdict) -> i64 {
        let Verdict::Answer(Response::Frame(mut body, _)) = verdict else { panic!("no answer") };
        ResponseHeader::decode(&mut body, ApiKey::SaslAuthenticate.response_header_version(2)).unwrap();
        SaslAuthenticateResponse::decode(&mut body, 2).unwrap().session_lifetime_ms
    }

    #[test]
    fn a_session_ends_after_connections_max_reauth_ms_unless_renewed_as_the_same_principal() {
        let metadata = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        let mut auth = Auth::new(Some(Arc::new(Fake)), None).with_max_reauth_ms(10_000);
        auth.check(&handshake("PLAIN"), 0);
        assert_eq!(lifetime(auth.check(&authenticate(&b"ok"[..]), 0)), 10_000);
        assert!(matches!(auth.check(&metadata, 9_999), Verdict::Serve));
        // Renewed at 9 s, by the same mechanism, as the same user: 10 s more.
        assert_eq!(
            code(auth.check(&handshake("SCRAM-SHA-512"), 9_000), ApiKey::SaslHandshake, 1),
            UNSUPPORTED_SASL_MECHANISM
        );
        assert_eq!(code(auth.check(&handshake("PLAIN"), 9_000), ApiKey::SaslHandshake, 1), 0);
        assert_eq!(auth.principal(), "User:alice", "the session stands while it is renewed");
        assert_eq!(lifetime(auth.check(&authenticate(&b"ok"[..]), 9_000)), 10_000);
        assert!(matches!(auth.check(&metadata, 18_999), Verdict::Serve));
        assert!(matches!(auth.check(&metadata, 19_000), Verdict::Close(_)), "the session ended");

        // Renewing as someone else is refused.
        let mut auth = Auth::new(Some(Arc::new(Fake)), None).with_max_reauth_ms(10_000);
        auth.check(&handshake("PLAIN"), 0);
        auth.check(&authenticate(&b"ok"[..]), 0);
        auth.check(&handshake("PLAIN"), 5_000);
        let verdict = auth.check(&authenticate(&b"bob"[..]), 5_000);
        assert!(matches!(verdict, Verdict::Refuse(..)), "alice's connection may not become bob's");

        // A credential that expires first ends the session first.
        let mut auth = Auth::new(Some(Arc::new(Fake)), None).with_max_reauth_ms(10_000);
        auth.check(&handshake("PLAIN"), 0);
        assert_eq!(lifetime(auth.check(&authenticate(&b"short"[..]), 0)), 1_000);
        assert!(matches!(auth.check(&metadata, 1_000), Verdict::Close(_)));
        let mut late = Auth::new(Some(Arc::new(Fake)), None);
        late.check(&handshake("PLAIN"), 2_000);
        assert!(matches!(late.check(&authenticate(&b"short"[..]), 2_000), Verdict::Refuse(..)), "an expired token");

        // Without connections.max.reauth.ms, a session lasts as long as its connection.
        let mut auth = Auth::new(Some(Arc::new(Fake)), None);
        auth.check(&handshake("PLAIN"), 0);
        assert_eq!(lifetime(auth.check(&authenticate(&b"short"[..]), 0)), 0);
        assert!(matches!(auth.check(&metadata, 1_000_000), Verdict::Serve));
    }

    /// The answer's auth bytes (KAAS-BROKER's nonce).
    fn auth_bytes(verdict: Verdict) -> Bytes {
        let Verdict::Answer(Response::Frame(mut body, _)) = verdict else { panic!("no answer") };
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
        assert_eq!(code(auth.check(&handshake(BROKER_MECHANISM), 0), ApiKey::SaslHandshake, 1), 0);
        let nonce = auth_bytes(auth.check(&authenticate("2"), 0));
        assert_eq!(nonce.len(), 32, "a fresh nonce");
        assert_eq!(code(auth.check(&authenticate(secret.proof(2, &nonce)), 0), ApiKey::SaslAuthenticate, 2), 0);
        assert!(auth.is_broker());
        assert_eq!(auth.principal(), "User:kaas-broker-2");
        // A broker's session does not end, whatever connections.max.reauth.ms says.
        let mut renewing = Auth::new(None, peers()).with_max_reauth_ms(1000);
        renewing.check(&handshake(BROKER_MECHANISM), 0);
        let nonce = auth_bytes(renewing.check(&authenticate("2"), 0));
        assert_eq!(lifetime(renewing.check(&authenticate(secret.proof(2, &nonce)), 0)), 0);
        let metadata = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        assert!(matches!(renewing.check(&metadata, 1_000_000), Verdict::Serve));

        // Another cluster's broker, or an answer recorded against another nonce: refused.
        let mut other = Auth::new(None, peers());
        other.check(&handshake(BROKER_MECHANISM), 0);
        let fresh = auth_bytes(other.check(&authenticate("2"), 0));
        assert_ne!(fresh, nonce);
        let verdict = other.check(&authenticate(secret.proof(2, &nonce)), 0);
        assert_eq!(code(verdict, ApiKey::SaslAuthenticate, 2), SASL_AUTHENTICATION_FAILED);
        assert!(!other.is_broker());

        // A plain client on the inter-broker listener is served as before, and is no broker.
        let mut client = Auth::new(None, peers());
        let metadata = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        assert!(matches!(client.check(&metadata, 0), Verdict::Serve));
        assert!(!client.is_broker());
        // A SASL listener does not offer KAAS-BROKER.
        let mut sasl = Auth::new(Some(Arc::new(Fake)), None);
        let refused = sasl.check(&handshake(BROKER_MECHANISM), 0);
        assert_eq!(code(refused, ApiKey::SaslHandshake, 1), UNSUPPORTED_SASL_MECHANISM);
    }
}
