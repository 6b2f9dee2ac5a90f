#![no_main]
//! SASL before authentication: the handshake, then SaslAuthenticate frames into rsasl's PLAIN,
//! SCRAM and OAUTHBEARER exchanges as a kaas listener runs them.

use std::sync::{Arc, OnceLock};

use kaas_net::sasl::Mechanisms;

fn listener() -> Arc<dyn Mechanisms> {
    static LISTENER: OnceLock<Arc<dyn Mechanisms>> = OnceLock::new();
    let dir = std::env::temp_dir().join("kaas-fuzz-sasl");
    LISTENER.get_or_init(|| Arc::new(kaas_server::sasl::fuzz_listener(&dir.display().to_string()))).clone()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_net::fuzz::sasl(listener(), data));
