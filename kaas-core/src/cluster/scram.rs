//! SCRAM credentials (KIP-554) as the volume keeps them: one file per user,
//! `__cluster/scram/<user in hex>.json`, replaced whole, holding per mechanism what RFC 5802's
//! server keeps (salt, StoredKey, ServerKey, iterations), never a password. Every broker reads a
//! user's file when that user authenticates, so a credential altered on one broker holds on all
//! at once. A torn or unknown-version file is an error, never guessed at (no credential).

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};

use crate::env::{Volume, join};
use crate::error::{CoreError, CoreResult};

pub const SCRAM_DIR: &str = "__cluster/scram";
pub const FORMAT_VERSION: u32 = 1;
/// Apache's bounds on a credential's iterations.
pub const ITERATIONS_MIN: i32 = 4096;
pub const ITERATIONS_MAX: i32 = 16384;

/// The SCRAM mechanisms, by Kafka's codes (1 and 2) and SASL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ScramMechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl ScramMechanism {
    pub fn from_code(code: i8) -> Option<ScramMechanism> {
        match code {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        [ScramMechanism::Sha256, ScramMechanism::Sha512].into_iter().find(|m| m.name() == name)
    }
}

/// What the server keeps of one user's password for one mechanism (RFC 5802).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    #[serde(with = "hex")]
    pub salt: Vec<u8>,
    #[serde(with = "hex")]
    pub stored_key: Vec<u8>,
    #[serde(with = "hex")]
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

fn hmac<M: Mac + hmac::digest::KeyInit>(key: &[u8], text: &[u8]) -> Vec<u8> {
    let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(text);
    mac.finalize().into_bytes().to_vec()
}

impl ScramCredential {
    /// The credential of a salted password (what AlterUserScramCredentials sends):
    /// StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key").
    pub fn from_salted(mechanism: ScramMechanism, salt: &[u8], salted_password: &[u8], iterations: i32) -> Self {
        let (stored_key, server_key) = match mechanism {
            ScramMechanism::Sha256 => {
                let client_key = hmac::<Hmac<Sha256>>(salted_password, b"Client Key");
                (Sha256::digest(&client_key).to_vec(), hmac::<Hmac<Sha256>>(salted_password, b"Server Key"))
            }
            ScramMechanism::Sha512 => {
                let client_key = hmac::<Hmac<Sha512>>(salted_password, b"Client Key");
                (Sha512::digest(&client_key).to_vec(), hmac::<Hmac<Sha512>>(salted_password, b"Server Key"))
            }
        };
        ScramCredential { salt: salt.to_vec(), stored_key, server_key, iterations }
    }
}

/// One user's credentials, by mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserFile {
    pub format_version: u32,
    pub user: String,
    pub credentials: BTreeMap<ScramMechanism, ScramCredential>,
}

impl UserFile {
    pub fn decode(raw: &[u8]) -> Result<UserFile, String> {
        let file: UserFile = serde_json::from_slice(raw).map_err(|e| format!("unreadable: {e}"))?;
        if file.format_version != FORMAT_VERSION {
            return Err(format!("unknown format version {}", file.format_version));
        }
        Ok(file)
    }
}

/// The file of `user`, relative to the data directory: its name hex-encoded, so that any user
/// name is a file name.
pub fn path(user: &str) -> String {
    join(SCRAM_DIR, &format!("{}.json", hex::encode(user.as_bytes())))
}

/// `user`'s credentials, if it has any.
pub async fn read<V: Volume>(volume: &V, user: &str) -> CoreResult<Option<UserFile>> {
    let path = path(user);
    let Some(raw) = volume.read(&path).await.map_err(|e| CoreError::Storage(e.to_string()))? else {
        return Ok(None);
    };
    let file = UserFile::decode(&raw).map_err(|e| CoreError::Storage(format!("{path}: {e}")))?;
    if file.user != user {
        return Err(CoreError::Storage(format!("{path}: the credentials of {:?}, not {user:?}", file.user)));
    }
    Ok(Some(file))
}

/// Replaces `user`'s credentials with `credentials` (none: the file goes).
pub async fn write<V: Volume>(
    volume: &V,
    user: &str,
    credentials: BTreeMap<ScramMechanism, ScramCredential>,
) -> CoreResult<()> {
    let path = path(user);
    let storage = |e: std::io::Error| CoreError::Storage(format!("{path}: {e}"));
    if credentials.is_empty() {
        return volume.remove_file(&path).await.map_err(storage);
    }
    volume.create_dir_all(SCRAM_DIR).await.map_err(storage)?;
    let file = UserFile { format_version: FORMAT_VERSION, user: user.to_string(), credentials };
    let data = bytes::Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
    volume.write_atomic(&path, data).await.map_err(storage)
}

/// Every user with credentials, in name order.
pub async fn users<V: Volume>(volume: &V) -> CoreResult<Vec<String>> {
    let names = match volume.list(SCRAM_DIR).await {
        Ok(names) => names,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CoreError::Storage(e.to_string())),
    };
    let mut users: Vec<String> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".json"))
        .filter_map(crate::hex::decode)
        .filter_map(|b| String::from_utf8(b).ok())
        .collect();
    users.sort();
    Ok(users)
}

/// Hex in JSON, for the keys and salts (`crate::hex`).
mod hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub use crate::hex::{decode, encode};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        decode(&text).ok_or_else(|| serde::de::Error::custom("not hex"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example: user "user", password "pencil", SCRAM-SHA-256, 4096 iterations.
    #[test]
    fn keys_are_rfc_5802s_and_files_round_trip() {
        let salt = [0x5bu8, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36, 0xfa, 0x81];
        // SaltedPassword = Hi("pencil", salt, 4096), as a client computes it (PBKDF2-HMAC-SHA-256).
        let mut salted = [0u8; 32];
        let mut u = hmac::<Hmac<Sha256>>(b"pencil", &[&salt[..], &[0, 0, 0, 1]].concat());
        salted.copy_from_slice(&u);
        for _ in 1..4096 {
            u = hmac::<Hmac<Sha256>>(b"pencil", &u);
            salted.iter_mut().zip(&u).for_each(|(s, x)| *s ^= x);
        }
        let c = ScramCredential::from_salted(ScramMechanism::Sha256, &salt, &salted, 4096);
        // The ServerSignature of RFC 7677's exchange from this ServerKey is its v=6rriTRBi... value.
        let auth_message = b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let signature = hmac::<Hmac<Sha256>>(&c.server_key, auth_message);
        assert_eq!(hex::encode(&signature), "eabae24d1062db75a9451ff0b6ea7e98c8546549ff741e672d3251b2397de46e");
        let file = UserFile {
            format_version: FORMAT_VERSION,
            user: "alice/ü".into(),
            credentials: BTreeMap::from([(ScramMechanism::Sha256, c)]),
        };
        let raw = serde_json::to_vec(&file).unwrap();
        assert_eq!(UserFile::decode(&raw).unwrap(), file);
        assert!(UserFile::decode(&raw[..raw.len() / 2]).is_err(), "a torn file is refused");
        assert!(path("alice/ü").starts_with("__cluster/scram/616c696365"));
        assert_eq!(ScramMechanism::from_code(2), Some(ScramMechanism::Sha512));
        assert_eq!(ScramMechanism::from_code(0), None);
    }
}
