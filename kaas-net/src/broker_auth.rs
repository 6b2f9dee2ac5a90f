//! KAAS-BROKER, both ends (`kaas_core::cluster::broker_auth` holds the secret and the HMAC):
//! the mechanism the inter-broker listener offers a peer (never advertised to clients), and
//! the proof a peer link gives before its first call. Two rounds of SaslAuthenticate: the
//! caller names its broker id, is answered a fresh nonce, and answers the proof.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kaas_core::cluster::broker_auth::{BrokerSecret, MECHANISM};
use kaas_core::env::Env;
use kafka_protocol::messages::{
    ApiKey, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::sasl::{Exchange, Mechanisms, Step};

const HANDSHAKE_VERSION: i16 = 1;
const AUTHENTICATE_VERSION: i16 = 2;

/// The inter-broker listener's KAAS-BROKER.
pub struct BrokerMechanism<E: Env> {
    pub env: E,
    pub secret: Arc<BrokerSecret>,
}

impl<E: Env> Mechanisms for BrokerMechanism<E> {
    fn enabled(&self) -> Vec<String> {
        Vec::new()
    }

    fn start(&self, mechanism: &str) -> Option<Box<dyn Exchange>> {
        let nonce = BrokerSecret::nonce(self.env.rng());
        (mechanism == MECHANISM).then(|| {
            Box::new(BrokerExchange { secret: self.secret.clone(), nonce, claimed: None }) as Box<dyn Exchange>
        })
    }
}

struct BrokerExchange {
    secret: Arc<BrokerSecret>,
    nonce: Vec<u8>,
    claimed: Option<i32>,
}

impl Exchange for BrokerExchange {
    fn step(&mut self, client: &[u8]) -> Step {
        match self.claimed {
            None => match std::str::from_utf8(client).ok().and_then(|id| id.parse::<i32>().ok()) {
                Some(id) => {
                    self.claimed = Some(id);
                    Step::Continue(Bytes::from(self.nonce.clone()))
                }
                None => Step::Failed("no broker id".into()),
            },
            Some(id) if self.secret.verify(id, &self.nonce, client) => {
                Step::Done { user: format!("kaas-broker-{id}"), answer: Bytes::new(), expires_at_ms: None }
            }
            Some(id) => Step::Failed(format!("broker {id}: not this cluster's secret")),
        }
    }
}

fn request<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, client_id: &str, body: &T) -> Bytes {
    let header = kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, key.request_header_version(version)).expect("a header encodes");
    body.encode(&mut buf, version).expect("a SASL request encodes");
    crate::frame::frame(&buf)
}

fn answer<T: Decodable>(key: ApiKey, version: i16, frame: Option<Bytes>) -> Result<T, String> {
    let mut frame = frame.ok_or("the peer closed the connection")?;
    ResponseHeader::decode(&mut frame, key.response_header_version(version)).map_err(|e| e.to_string())?;
    T::decode(&mut frame, version).map_err(|e| e.to_string())
}

/// Proves to the peer on the other end of `writer` (its answers come on `frames`) that this is
/// broker `broker_id` of the cluster. Uses correlation ids from `correlation_id` on.
pub async fn prove<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frames: &mut mpsc::Receiver<Bytes>,
    correlation_id: &mut i32,
    client_id: &str,
    broker_id: i32,
    secret: &BrokerSecret,
) -> Result<(), String> {
    let mut next_id = || {
        *correlation_id = correlation_id.wrapping_add(1);
        *correlation_id
    };
    let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(MECHANISM));
    let frame = request(ApiKey::SaslHandshake, HANDSHAKE_VERSION, next_id(), client_id, &handshake);
    writer.write_all(&frame).await.map_err(|e| e.to_string())?;
    let handshaken: SaslHandshakeResponse = answer(ApiKey::SaslHandshake, HANDSHAKE_VERSION, frames.recv().await)?;
    if handshaken.error_code != 0 {
        return Err(format!("the peer refused {MECHANISM} (error {})", handshaken.error_code));
    }
    let mut authenticate = |auth_bytes: Bytes| {
        let body = SaslAuthenticateRequest::default().with_auth_bytes(auth_bytes);
        request(ApiKey::SaslAuthenticate, AUTHENTICATE_VERSION, next_id(), client_id, &body)
    };
    let frame = authenticate(Bytes::from(broker_id.to_string()));
    writer.write_all(&frame).await.map_err(|e| e.to_string())?;
    let challenged: SaslAuthenticateResponse =
        answer(ApiKey::SaslAuthenticate, AUTHENTICATE_VERSION, frames.recv().await)?;
    if challenged.error_code != 0 {
        return Err(format!("the peer refused this broker's id (error {})", challenged.error_code));
    }
    let frame = authenticate(Bytes::from(secret.proof(broker_id, &challenged.auth_bytes)));
    writer.write_all(&frame).await.map_err(|e| e.to_string())?;
    let done: SaslAuthenticateResponse = answer(ApiKey::SaslAuthenticate, AUTHENTICATE_VERSION, frames.recv().await)?;
    match done.error_code {
        0 => Ok(()),
        code => Err(format!("the peer refused this broker's proof (error {code}): another cluster's secret?")),
    }
}
