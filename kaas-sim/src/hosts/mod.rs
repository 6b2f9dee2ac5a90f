//! Broker hosts: the production broker (kaas-core + kaas-net) started inside a turmoil host
//! over the simulated env. A crash drops the host's tasks; `bounce` runs this again, and the
//! broker recovers from the shared volume like a restarted process. A world names its broker
//! hosts (`BrokerSpec`); the fault driver reaches each through its `BrokerControl`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kaas_core::env::{Env, Net};
use kaas_core::{Broker, BrokerConfig};
use kaas_net::Server;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::env::{ClockModel, PauseGate, SimEnv};
use crate::volume::SimVolume;

pub const BROKER_PORT: u16 = 9092;
/// How long a broker that failed to start waits before it starts again.
const RESTART_DELAY_MS: u64 = 1000;

/// One broker host of a world, as drawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerSpec {
    /// The host name, which is also the broker's advertised host.
    pub host: String,
    pub broker_id: i32,
    /// Each boot draws its random source from this and the boot number.
    pub seed: u64,
    /// How far the host's wall clock is off, and how fast its clocks run (parts per million).
    pub clock_skew_ms: i64,
    pub clock_drift_ppm: i64,
    /// The broker's data directory on the shared volume ("" for the volume's root).
    pub data_dir: String,
}

impl BrokerSpec {
    /// The one broker of a single-broker world, named "broker" as before clusters.
    pub fn single(seed: u64, clock_skew_ms: i64) -> Vec<BrokerSpec> {
        vec![BrokerSpec {
            host: "broker".into(),
            broker_id: 0,
            seed,
            clock_skew_ms,
            clock_drift_ppm: 0,
            data_dir: String::new(),
        }]
    }
}

/// Reaches one broker host from outside: asks it to stop gracefully (SIGTERM: stop accepting,
/// close connections, sync every partition, exit), pauses it, moves its clocks, and counts its
/// boots, which tells a checker which incarnation answered.
#[derive(Clone, Default)]
pub struct BrokerControl {
    stop: Arc<Mutex<Option<watch::Sender<bool>>>>,
    boots: Arc<AtomicU64>,
    pub gate: PauseGate,
    pub clock: ClockModel,
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

/// Every broker host of a world, by host name.
pub type Brokers = BTreeMap<String, BrokerControl>;

/// Registers a broker host for `spec` on the shared `volume`.
pub fn add_broker(
    sim: &mut turmoil::Sim<'_>,
    spec: &BrokerSpec,
    volume: &SimVolume,
    config: BrokerConfig,
) -> BrokerControl {
    let view = volume.for_host(&spec.host);
    let view = if spec.data_dir.is_empty() { view } else { view.under(&spec.data_dir) };
    let control =
        BrokerControl { clock: ClockModel::new(spec.clock_skew_ms, spec.clock_drift_ppm), ..BrokerControl::default() };
    let controls = control.clone();
    let spec = spec.clone();
    let host = spec.host.clone();
    sim.host(host, move || {
        let (view, config, controls, spec) = (view.clone(), config.clone(), controls.clone(), spec.clone());
        let boot = controls.boots.fetch_add(1, Ordering::SeqCst);
        let (stop, stopped) = watch::channel(false);
        *controls.stop.lock().expect("control lock") = Some(stop);
        let gate = controls.gate.clone();
        gate.gated(async move {
            let seed = spec.seed ^ boot.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let env = SimEnv::new(view, seed, controls.clock.clone(), controls.gate.clone());
            let mut config = config;
            config.broker_id = spec.broker_id;
            let address = kaas_core::config::listeners::ListenerAddress {
                listener: "PLAINTEXT".into(),
                host: spec.host.clone(),
                port: i32::from(BROKER_PORT),
            };
            config.advertise(vec![address], "PLAINTEXT");
            // A broker that cannot start (its volume failing) exits, and the fault driver starts
            // it again a little later, as Kubernetes restarts a crashing pod.
            let broker = match Broker::start(env.clone(), config).await {
                Ok(broker) => broker,
                Err(e) => {
                    tracing::warn!(error = %e, "the broker could not start; it exits");
                    tokio::time::sleep(std::time::Duration::from_millis(RESTART_DELAY_MS)).await;
                    return Ok(());
                }
            };
            let listener = env.net().bind(&format!("0.0.0.0:{BROKER_PORT}")).await?;
            Server::new(broker.clone(), listener).run(stopped).await;
            broker.shutdown().await;
            Ok(())
        })
    });
    control
}

/// Registers every broker host of `specs`.
pub fn add_brokers(
    sim: &mut turmoil::Sim<'_>,
    specs: &[BrokerSpec],
    volume: &SimVolume,
    config: &BrokerConfig,
) -> Brokers {
    specs.iter().map(|spec| (spec.host.clone(), add_broker(sim, spec, volume, config.clone()))).collect()
}
