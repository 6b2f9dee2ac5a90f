//! How the brokers of one cluster know each other: a secret only the volume holds,
//! `__cluster/broker-secret.json`, made once by the first broker to start (an exclusive
//! create: two brokers starting together end up with the same one). A broker calling a peer
//! proves it knows the secret in a SASL exchange of kaas's own (`KAAS-BROKER`, kaas-net's
//! `sasl.rs`): it names itself, the peer answers a fresh nonce, and it answers
//! HMAC-SHA-256(secret, "kaas-broker", its id, the nonce). Whoever can read the volume is a
//! broker of the cluster already; nobody else can answer, and a recorded answer is worth nothing
//! against another nonce. A torn or unknown-version file is an error that stops the start.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::env::{Env, Rng, Volume};
use crate::error::{CoreError, CoreResult};

pub const BROKER_SECRET_FILE: &str = "__cluster/broker-secret.json";
pub const FORMAT_VERSION: u32 = 1;
/// The SASL mechanism brokers authenticate to each other with.
pub const MECHANISM: &str = "KAAS-BROKER";
pub const SECRET_BYTES: usize = 32;

#[derive(Serialize, Deserialize)]
struct SecretFile {
    format_version: u32,
    secret: String,
}

/// The cluster's broker secret. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerSecret(Vec<u8>);

impl std::fmt::Debug for BrokerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerSecret(..)")
    }
}

impl BrokerSecret {
    /// A secret of these bytes (the volume's is made by `load_or_create`).
    pub fn new(secret: [u8; SECRET_BYTES]) -> BrokerSecret {
        BrokerSecret(secret.to_vec())
    }

    fn mac(&self, broker_id: i32, nonce: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new_from_slice(&self.0).expect("any key length");
        mac.update(b"kaas-broker\0");
        mac.update(&broker_id.to_be_bytes());
        mac.update(nonce);
        mac
    }

    /// What broker `broker_id` answers to `nonce`.
    pub fn proof(&self, broker_id: i32, nonce: &[u8]) -> Vec<u8> {
        self.mac(broker_id, nonce).finalize().into_bytes().to_vec()
    }

    /// Whether `proof` is broker `broker_id`'s answer to `nonce` (compared in constant time).
    pub fn verify(&self, broker_id: i32, nonce: &[u8], proof: &[u8]) -> bool {
        self.mac(broker_id, nonce).verify_slice(proof).is_ok()
    }

    /// A fresh nonce for one exchange.
    pub fn nonce<R: Rng>(rng: &R) -> Vec<u8> {
        (0..4).flat_map(|_| rng.next_u64().to_be_bytes()).collect()
    }

    fn decode(raw: &[u8]) -> CoreResult<BrokerSecret> {
        let bad = |why: String| CoreError::Storage(format!("{BROKER_SECRET_FILE}: {why}"));
        let file: SecretFile = serde_json::from_slice(raw).map_err(|e| bad(format!("unreadable: {e}")))?;
        if file.format_version != FORMAT_VERSION {
            return Err(bad(format!("unknown format version {}", file.format_version)));
        }
        match crate::hex::decode(&file.secret) {
            Some(secret) if secret.len() == SECRET_BYTES => Ok(BrokerSecret(secret)),
            _ => Err(bad("not a secret of 32 bytes in hex".into())),
        }
    }

    /// The cluster's secret, made now if no broker made it before.
    pub async fn load_or_create<E: Env>(env: &E) -> CoreResult<BrokerSecret> {
        let volume = env.volume();
        let storage = |e: std::io::Error| CoreError::Storage(format!("{BROKER_SECRET_FILE}: {e}"));
        if let Some(raw) = volume.read(BROKER_SECRET_FILE).await.map_err(storage)? {
            return Self::decode(&raw);
        }
        volume.create_dir_all(crate::env::parent(BROKER_SECRET_FILE)).await.map_err(storage)?;
        let secret: Vec<u8> = (0..SECRET_BYTES / 8).flat_map(|_| env.rng().next_u64().to_be_bytes()).collect();
        let file = SecretFile { format_version: FORMAT_VERSION, secret: crate::hex::encode(&secret) };
        let data = bytes::Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
        match volume.create_exclusive(BROKER_SECRET_FILE, data).await {
            Ok(()) => {}
            // Another broker made it first: its secret is the cluster's.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(storage(e)),
        }
        volume.sync_dir(crate::env::parent(BROKER_SECRET_FILE)).await.map_err(storage)?;
        let raw = volume.read(BROKER_SECRET_FILE).await.map_err(storage)?;
        Self::decode(&raw.ok_or_else(|| CoreError::Storage(format!("{BROKER_SECRET_FILE}: gone after its creation")))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_answers_one_broker_and_one_nonce() {
        let secret = BrokerSecret(vec![7; SECRET_BYTES]);
        let proof = secret.proof(1, b"nonce-a");
        assert!(secret.verify(1, b"nonce-a", &proof));
        assert!(!secret.verify(2, b"nonce-a", &proof), "another broker's id");
        assert!(!secret.verify(1, b"nonce-b", &proof), "a recorded answer to another nonce");
        assert!(!BrokerSecret(vec![8; SECRET_BYTES]).verify(1, b"nonce-a", &proof), "another cluster's secret");
        assert!(!secret.verify(1, b"nonce-a", &proof[..16]), "a truncated proof");
        assert_eq!(format!("{secret:?}"), "BrokerSecret(..)");
    }

    #[test]
    fn only_a_whole_secret_of_this_version_is_read() {
        let good = serde_json::json!({"format_version": 1, "secret": "ab".repeat(32)});
        assert!(BrokerSecret::decode(good.to_string().as_bytes()).is_ok());
        let newer = serde_json::json!({"format_version": 2, "secret": "ab".repeat(32)});
        assert!(BrokerSecret::decode(newer.to_string().as_bytes()).is_err());
        let short = serde_json::json!({"format_version": 1, "secret": "ab".repeat(8)});
        assert!(BrokerSecret::decode(short.to_string().as_bytes()).is_err());
        assert!(BrokerSecret::decode(b"{\"format_version\":1,\"sec").is_err(), "torn");
    }
}
