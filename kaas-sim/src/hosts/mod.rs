//! Broker hosts: the production broker (kaas-core + kaas-net) started inside a turmoil host
//! over the simulated env. A crash drops the host's tasks; `bounce` runs this again, and the
//! broker recovers from the shared volume like a restarted process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kaas_core::env::{Env, Net};
use kaas_core::{Broker, BrokerConfig};
use kaas_net::Server;
use tokio::sync::watch;

use crate::env::SimEnv;
use crate::volume::SimVolume;

pub const BROKER_PORT: u16 = 9092;

/// Asks a broker host to stop gracefully, as SIGTERM does: stop accepting, close connections,
/// sync every partition, exit.
/// Also counts the host's boots, which tells a checker which incarnation answered.
#[derive(Clone, Default)]
pub struct BrokerControl {
    stop: Arc<Mutex<Option<watch::Sender<bool>>>>,
    boots: Arc<AtomicU64>,
}

impl BrokerControl {
    pub fn stop(&self) {
        if let Some(stop) = self.stop.lock().expect("control lock").as_ref() {
            let _ = stop.send(true);
        }
    }

    /// How many times the host has started.
    pub fn boots(&self) -> u64 {
        self.boots.load(Ordering::SeqCst)
    }
}

/// Registers a broker host named `name` on the shared `volume`, its wall clock `skew_ms` off.
/// Each boot draws its own seed.
pub fn add_broker(
    sim: &mut turmoil::Sim<'_>,
    name: &'static str,
    volume: SimVolume,
    seed: u64,
    skew_ms: i64,
    config: BrokerConfig,
) -> BrokerControl {
    let volume = volume.for_host(name);
    let control = BrokerControl::default();
    let controls = control.clone();
    sim.host(name, move || {
        let volume = volume.clone();
        let config = config.clone();
        let boot = controls.boots.fetch_add(1, Ordering::SeqCst);
        let (stop, stopped) = watch::channel(false);
        *controls.stop.lock().expect("control lock") = Some(stop);
        async move {
            let env = SimEnv::new(volume, seed ^ boot.wrapping_mul(0x9e37_79b9_7f4a_7c15), skew_ms);
            let mut config = config;
            config.advertised_host = name.to_string();
            config.advertised_port = i32::from(BROKER_PORT);
            let broker = Broker::start(env.clone(), config).await.map_err(|e| e.to_string())?;
            let listener = env.net().bind(&format!("0.0.0.0:{BROKER_PORT}")).await?;
            Server::new(broker.clone(), listener).run(stopped).await;
            broker.shutdown().await;
            Ok(())
        }
    });
    control
}
