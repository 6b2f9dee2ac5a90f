//! OAUTHBEARER's tokens (KIP-255, KIP-768): who a token names, and until when, if the broker
//! trusts it. Two ways, as Apache's brokers have them:
//! - secured: a signed JWT checked by jsonwebtoken against the keys of a JSON Web Key Set
//!   (`sasl.oauthbearer.jwks.endpoint.url`, a `file:` URL read at each authentication, so a
//!   rotated key set holds at once), its `exp` and `nbf` within `sasl.oauthbearer.clock.skew.seconds`,
//!   its `aud` one of `sasl.oauthbearer.expected.audience` and its `iss`
//!   `sasl.oauthbearer.expected.issuer` when those are set; the principal is the claim
//!   `sasl.oauthbearer.sub.claim.name` names (`sub`);
//! - unsecured (Apache's OAuthBearerUnsecuredValidatorCallbackHandler, for tests): an unsigned
//!   JWT (`alg` none), accepted only when the listener's OAUTHBEARER login module is Apache's
//!   unsecured one (`unsecuredLoginStringClaim_sub`), never beside a key set.

use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::Value;

/// How a listener checks OAUTHBEARER tokens.
#[derive(Debug, Clone)]
pub enum Tokens {
    Signed { jwks: PathBuf, audience: Vec<String>, issuer: Option<String>, sub_claim: String, skew_s: u64 },
    Unsecured { sub_claim: String, skew_s: u64 },
}

/// A token the broker trusts: its principal's name, and when it expires (epoch ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    pub user: String,
    pub expires_at_ms: i64,
}

impl Tokens {
    /// From a listener's settings (`setting` looks the listener's up first); None: OAUTHBEARER
    /// cannot be served as configured, and why.
    pub fn from_settings(setting: impl Fn(&str) -> Option<String>, listener: &str) -> Result<Tokens, String> {
        let skew_s = match setting("sasl.oauthbearer.clock.skew.seconds") {
            None => 30,
            Some(v) => v.trim().parse().map_err(|_| format!("sasl.oauthbearer.clock.skew.seconds: {v:?}"))?,
        };
        let sub_claim = setting("sasl.oauthbearer.sub.claim.name").unwrap_or_else(|| "sub".into());
        let jaas = setting("oauthbearer.sasl.jaas.config").or_else(|| setting("sasl.jaas.config")).unwrap_or_default();
        match setting("sasl.oauthbearer.jwks.endpoint.url") {
            Some(url) => {
                let path = url.trim().strip_prefix("file:").ok_or_else(|| {
                    format!(
                        "listener {listener}: sasl.oauthbearer.jwks.endpoint.url {url:?}: kaas reads a key set from a file: URL only"
                    )
                })?;
                let path = PathBuf::from(path.trim_start_matches("//"));
                let csv = |v: Option<String>| -> Vec<String> {
                    v.unwrap_or_default().split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect()
                };
                let issuer = setting("sasl.oauthbearer.expected.issuer").filter(|i| !i.trim().is_empty());
                Ok(Tokens::Signed {
                    jwks: path,
                    audience: csv(setting("sasl.oauthbearer.expected.audience")),
                    issuer,
                    sub_claim,
                    skew_s,
                })
            }
            None if jaas.contains("unsecuredLoginStringClaim_sub") => {
                let sub_claim = option(&jaas, "unsecuredValidatorPrincipalClaimName").unwrap_or(sub_claim);
                Ok(Tokens::Unsecured { sub_claim, skew_s })
            }
            None => Err(format!(
                "listener {listener}: OAUTHBEARER needs sasl.oauthbearer.jwks.endpoint.url (a file: URL of the key set), \
                 or, for tests only, Apache's unsecured login module (unsecuredLoginStringClaim_sub) in \
                 listener.name.{}.oauthbearer.sasl.jaas.config",
                listener.to_ascii_lowercase()
            )),
        }
    }

    /// Checks `token` at `now_ms`; the principal and expiry, or why it is not trusted.
    pub fn check(&self, token: &str, now_ms: i64) -> Result<Trusted, String> {
        let (claims, sub_claim) = match self {
            Tokens::Signed { jwks, audience, issuer, sub_claim, skew_s } => {
                let header = jsonwebtoken::decode_header(token).map_err(|e| format!("not a signed JWT: {e}"))?;
                let raw = std::fs::read(jwks).map_err(|e| format!("{}: {e}", jwks.display()))?;
                let set: JwkSet =
                    serde_json::from_slice(&raw).map_err(|e| format!("{}: not a key set: {e}", jwks.display()))?;
                let jwk = match &header.kid {
                    Some(kid) => set.find(kid).ok_or_else(|| format!("no key {kid:?} in the key set"))?,
                    None if set.keys.len() == 1 => &set.keys[0],
                    None => return Err("the token names no key (kid) and the key set has several".into()),
                };
                let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("key {:?}: {e}", header.kid))?;
                let mut validation = Validation::new(header.alg);
                validation.leeway = *skew_s;
                validation.validate_nbf = true;
                validation.set_required_spec_claims(&["exp"]);
                validation.validate_aud = !audience.is_empty();
                if !audience.is_empty() {
                    validation.set_audience(audience);
                }
                if let Some(issuer) = issuer {
                    validation.set_issuer(&[issuer]);
                }
                let data = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| e.to_string())?;
                (data.claims, sub_claim)
            }
            Tokens::Unsecured { sub_claim, skew_s } => {
                let mut parts = token.split('.');
                let (Some(header), Some(payload), Some(""), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err("not an unsecured JWS (header.payload.)".into());
                };
                let json = |part: &str| -> Result<Value, String> {
                    let raw = URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).map_err(|e| e.to_string())?;
                    serde_json::from_slice(&raw).map_err(|e| e.to_string())
                };
                if json(header)?.get("alg").and_then(Value::as_str) != Some("none") {
                    return Err("an unsecured token's alg must be none".into());
                }
                let claims = json(payload)?;
                let exp = claims.get("exp").and_then(Value::as_f64).ok_or("the token has no exp")?;
                if (exp * 1000.0) as i64 + (*skew_s as i64) * 1000 <= now_ms {
                    return Err("the token has expired".into());
                }
                (claims, sub_claim)
            }
        };
        let user = claims.get(sub_claim.as_str()).and_then(Value::as_str).filter(|u| !u.trim().is_empty());
        let user = user.ok_or_else(|| format!("the token has no {sub_claim} claim"))?.to_string();
        let exp = claims.get("exp").and_then(Value::as_f64).ok_or("the token has no exp")?;
        Ok(Trusted { user, expires_at_ms: (exp * 1000.0) as i64 })
    }
}

/// A JAAS login module's `NAME="value"` option.
fn option(jaas: &str, name: &str) -> Option<String> {
    let at = jaas.find(&format!("{name}="))?;
    let rest = jaas[at + name.len() + 1..].trim_start().strip_prefix('"')?;
    rest.split_once('"').map(|(v, _)| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsecured(claims: &str) -> String {
        format!("{}.{}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#), URL_SAFE_NO_PAD.encode(claims))
    }

    #[test]
    fn unsecured_tokens_only_with_the_unsecured_login_module() {
        let jaas = r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";"#;
        let with = |name: &str| (name == "oauthbearer.sasl.jaas.config").then(|| jaas.to_string());
        let tokens = Tokens::from_settings(with, "SASL_PLAINTEXT").unwrap();
        let now_ms = 1_800_000_000_000;
        let good = unsecured(r#"{"sub":"alice","exp":1800000600,"iat":1800000000}"#);
        assert_eq!(tokens.check(&good, now_ms), Ok(Trusted { user: "alice".into(), expires_at_ms: 1_800_000_600_000 }));
        assert!(tokens.check(&unsecured(r#"{"sub":"alice","exp":1799999000}"#), now_ms).is_err(), "expired");
        assert!(tokens.check(&unsecured(r#"{"exp":1800000600}"#), now_ms).is_err(), "no principal");
        assert!(tokens.check("garbage", now_ms).is_err());
        let signed_header =
            format!("{}.{}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256"}"#), URL_SAFE_NO_PAD.encode("{}"));
        assert!(tokens.check(&signed_header, now_ms).is_err(), "alg must be none");
        // Without the unsecured login module or a key set, OAUTHBEARER is not served.
        assert!(Tokens::from_settings(|_| None, "SASL_PLAINTEXT").is_err());
        let https = |name: &str| (name == "sasl.oauthbearer.jwks.endpoint.url").then(|| "https://idp/jwks".to_string());
        assert!(Tokens::from_settings(https, "SASL_PLAINTEXT").is_err(), "kaas reads key sets from files only");
    }

    #[test]
    fn signed_tokens_are_checked_against_the_key_set() {
        use jsonwebtoken::{Algorithm, EncodingKey, Header};
        let dir = std::env::temp_dir().join(format!("kaas-jwks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let jwks = dir.join("jwks.json");
        let secret = b"a shared secret of thirty-two bytes!";
        let k = URL_SAFE_NO_PAD.encode(secret);
        std::fs::write(&jwks, format!(r#"{{"keys":[{{"kty":"oct","kid":"k1","alg":"HS256","k":"{k}"}}]}}"#)).unwrap();
        let settings = |name: &str| match name {
            "sasl.oauthbearer.jwks.endpoint.url" => Some(format!("file:{}", jwks.display())),
            "sasl.oauthbearer.expected.audience" => Some("kafka".into()),
            "sasl.oauthbearer.expected.issuer" => Some("https://idp".into()),
            _ => None,
        };
        let tokens = Tokens::from_settings(settings, "SASL_SSL").unwrap();
        let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let sign = |kid: &str, claims: Value, key: &[u8]| {
            let header = Header { kid: Some(kid.into()), ..Header::new(Algorithm::HS256) };
            jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(key)).unwrap()
        };
        let claims =
            |aud: &str, iss: &str, exp: i64| serde_json::json!({"sub": "alice", "aud": aud, "iss": iss, "exp": exp});
        let good = sign("k1", claims("kafka", "https://idp", now_s + 600), secret);
        let trusted = tokens.check(&good, now_s * 1000).expect("a good token");
        assert_eq!(trusted, Trusted { user: "alice".into(), expires_at_ms: (now_s + 600) * 1000 });
        for (why, token) in [
            (
                "another key",
                sign("k1", claims("kafka", "https://idp", now_s + 600), b"not the secret at all, no no no!!"),
            ),
            ("an unknown kid", sign("k2", claims("kafka", "https://idp", now_s + 600), secret)),
            ("another audience", sign("k1", claims("other", "https://idp", now_s + 600), secret)),
            ("another issuer", sign("k1", claims("kafka", "https://evil", now_s + 600), secret)),
            ("expired", sign("k1", claims("kafka", "https://idp", now_s - 600), secret)),
            ("unsecured", unsecured(r#"{"sub":"alice","exp":99999999999}"#)),
        ] {
            assert!(tokens.check(&token, now_s * 1000).is_err(), "{why}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
