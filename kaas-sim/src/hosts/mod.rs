//! Broker hosts: the production broker (kaas-core + kaas-net) started inside a turmoil host
//! over the simulated env. A crash drops the host's tasks; `bounce` runs this again, and the
//! broker recovers from the shared volume like a restarted process.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kaas_core::env::{Env, Net};
use kaas_core::{Broker, BrokerConfig};
use kaas_net::Server;
use tokio::sync::watch;

use crate::env::SimEnv;
use crate::volume::SimVolume;

pub const BROKER_PORT: u16 = 9092;

/// Registers a broker host named `name` on the shared `volume`, its wall clock `skew_ms` off.
/// Each boot draws its own seed.
pub fn add_broker(
    sim: &mut turmoil::Sim<'_>,
    name: &'static str,
    volume: SimVolume,
    seed: u64,
    skew_ms: i64,
    config: BrokerConfig,
) {
    let boots = Arc::new(AtomicU64::new(0));
    let volume = volume.for_host(name);
    sim.host(name, move || {
        let volume = volume.clone();
        let config = config.clone();
        let boot = boots.fetch_add(1, Ordering::SeqCst);
        async move {
            let env = SimEnv::new(volume, seed ^ boot.wrapping_mul(0x9e37_79b9_7f4a_7c15), skew_ms);
            let mut config = config;
            config.advertised_host = name.to_string();
            config.advertised_port = i32::from(BROKER_PORT);
            let broker = Broker::start(env.clone(), config).await.map_err(|e| e.to_string())?;
            let listener = env.net().bind(&format!("0.0.0.0:{BROKER_PORT}")).await?;
            let (_stop, stopped) = watch::channel(false);
            Server::new(broker, listener).run(stopped).await;
            Ok(())
        }
    });
}
