//! SSL listeners: rustls from the PEM `ssl.*` settings. The key and certificate chain are read
//! again when their file changes (checked at most every few seconds, on a handshake), so a
//! certificate renewed on disk is served without a restart; a file that cannot be read then
//! keeps the one before it, with a logged reason.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kaas_core::config::listeners::{ClientAuth, SslSettings};
use kaas_net::server::{Handshake, PeerHandshake, Stream};

use crate::principal::PrincipalRules;
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;

/// How often a handshake may look at the keystore file for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(5);

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(what: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>().map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: no certificate in it"));
    }
    Ok(certs)
}

/// The key and chain from PEM text (one text may hold both, as a keystore file does).
fn certified_key(what: &str, key_pem: &[u8], chain_pem: &[u8]) -> Result<CertifiedKey, String> {
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("{what}: no private key in it ({e})"))?;
    let chain = certificates(what, chain_pem)?;
    let signing = provider().key_provider.load_private_key(key).map_err(|e| format!("{what}: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| format!("{what}: the key does not match the certificate ({e})"))?;
    Ok(certified)
}

fn read(path: &str) -> Result<(Vec<u8>, Option<SystemTime>), String> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    Ok((bytes, modified))
}

/// The broker's certificate, from inline settings or a file read again when it changes.
struct Keystore {
    location: Option<String>,
    state: Mutex<KeystoreState>,
}

struct KeystoreState {
    key: Arc<CertifiedKey>,
    modified: Option<SystemTime>,
    checked: Instant,
}

impl fmt::Debug for Keystore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keystore").field("location", &self.location).finish()
    }
}

impl Keystore {
    fn open(ssl: &SslSettings) -> Result<Keystore, String> {
        let (key, location, modified) = if ssl.keystore_location.is_empty() {
            let key = certified_key(
                "ssl.keystore.key",
                ssl.keystore_key.as_bytes(),
                ssl.keystore_certificate_chain.as_bytes(),
            )?;
            (key, None, None)
        } else {
            let (pem, modified) = read(&ssl.keystore_location)?;
            (certified_key(&ssl.keystore_location, &pem, &pem)?, Some(ssl.keystore_location.clone()), modified)
        };
        let state = KeystoreState { key: Arc::new(key), modified, checked: Instant::now() };
        Ok(Keystore { location, state: Mutex::new(state) })
    }

    /// The certificate to serve, read again first if its file changed since it was read.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().expect("never poisoned");
        let Some(path) = &self.location else { return state.key.clone() };
        if state.checked.elapsed() < RELOAD_CHECK {
            return state.key.clone();
        }
        state.checked = Instant::now();
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if modified.is_none() || modified == state.modified {
            return state.key.clone();
        }
        match read(path).and_then(|(pem, modified)| Ok((certified_key(path, &pem, &pem)?, modified))) {
            Ok((key, modified)) => {
                tracing::info!(keystore = %path, "the keystore changed: serving its new certificate");
                state.key = Arc::new(key);
                state.modified = modified;
            }
            // Half-written, or wrong: the certificate before it serves until the file is right.
            Err(e) => {
                tracing::warn!(keystore = %path, error = %e, "the keystore changed but cannot be read: keeping the certificate before it")
            }
        }
        state.key.clone()
    }
}

/// The same certificate, shown to a peer whose listener asks for one.
impl rustls::client::ResolvesClientCert for Keystore {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl ResolvesServerCert for Keystore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The TLS acceptor of the SSL listeners, from the `ssl.*` settings.
pub fn acceptor(ssl: &SslSettings) -> Result<TlsAcceptor, String> {
    ssl.check()?;
    if !ssl.has_keystore() {
        return Err("an SSL listener needs a key and certificate: ssl.keystore.location (PEM)".into());
    }
    let keystore = Arc::new(Keystore::open(ssl)?);
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match ssl.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let roots = truststore(ssl, &format!("ssl.client.auth={}", auth.name()))?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    Ok(TlsAcceptor::from(Arc::new(builder.with_cert_resolver(keystore))))
}

/// The handshake of an SSL listener's connections: a client's certificate, if it gave one,
/// names its principal by `rules`; a certificate no rule maps closes the connection.
pub fn handshake<S>(acceptor: TlsAcceptor, rules: Arc<PrincipalRules>) -> Handshake<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    Arc::new(move |stream: S| {
        let (acceptor, rules) = (acceptor.clone(), rules.clone());
        Box::pin(async move {
            let stream = acceptor.accept(stream).await?;
            let refused = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
            let user = match stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()) {
                None => None,
                Some(leaf) => {
                    let dn = crate::principal::subject_dn(leaf).map_err(refused)?;
                    let user = rules
                        .apply(&dn)
                        .ok_or_else(|| refused(format!("no principal mapping rule applies to {dn}")))?;
                    Some(user)
                }
            };
            Ok((Box::new(stream) as Box<dyn Stream>, user))
        })
    })
}

/// The certificates `ssl.truststore.*` names, as roots.
fn truststore(ssl: &SslSettings, why: &str) -> Result<RootCertStore, String> {
    let trusted = match (ssl.truststore_location.as_str(), ssl.truststore_certificates.as_str()) {
        ("", "") => return Err(format!("{why}: needs ssl.truststore.location")),
        ("", inline) => certificates("ssl.truststore.certificates", inline.as_bytes())?,
        (path, _) => certificates(path, &read(path)?.0)?,
    };
    let mut roots = RootCertStore::empty();
    for cert in trusted {
        roots.add(cert).map_err(|e| format!("a trusted certificate: {e}"))?;
    }
    Ok(roots)
}

/// This broker's side of TLS to its peers on an SSL (or SASL_SSL) inter-broker listener, as
/// Apache's brokers connect to each other: the peer's certificate must lead to the truststore
/// and name the host the peer advertises, and this broker shows its own certificate (the
/// keystore's) should the listener ask for one (`ssl.client.auth`).
pub fn peer_handshake<S>(ssl: &SslSettings) -> Result<PeerHandshake<S>, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let roots = truststore(ssl, "an SSL inter-broker listener (brokers verify each other)")?;
    let keystore = Arc::new(Keystore::open(ssl)?);
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_cert_resolver(keystore);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    Ok(Arc::new(move |stream: S, host: String| {
        let connector = connector.clone();
        Box::pin(async move {
            let name = rustls_pki_types::ServerName::try_from(host.clone())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
            let stream = connector.connect(name, stream).await?;
            Ok(Box::new(stream) as Box<dyn Stream>)
        })
    }))
}
