//! The simulated env: turmoil's virtual time and network, a seeded ChaCha random source, and
//! the shared `SimVolume`. Everything else the broker does is the production code.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use kaas_core::env::{Clock, Env, Listener, Net, Rng, Spawner};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::volume::SimVolume;

/// The wall-clock epoch every simulated host starts from (2026-01-01T00:00:00Z).
pub const EPOCH_MS: i64 = 1_767_225_600_000;

#[derive(Clone)]
pub struct SimClock {
    skew_ms: i64,
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        let elapsed = turmoil::sim_elapsed().unwrap_or_default();
        EPOCH_MS + elapsed.as_millis() as i64 + self.skew_ms
    }
}

#[derive(Clone)]
pub struct SimRng(Arc<Mutex<ChaCha8Rng>>);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))))
    }
}

impl Rng for SimRng {
    fn next_u64(&self) -> u64 {
        self.0.lock().expect("rng lock").next_u64()
    }
}

#[derive(Clone)]
pub struct SimSpawner;

impl Spawner for SimSpawner {
    fn spawn<F>(&self, _name: &'static str, future: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(future);
    }
}

#[derive(Clone)]
pub struct SimNet;

pub struct SimListener(turmoil::net::TcpListener);

impl Listener for SimListener {
    type Stream = turmoil::net::TcpStream;

    async fn accept(&self) -> std::io::Result<(Self::Stream, String)> {
        let (stream, peer) = self.0.accept().await?;
        Ok((stream, peer.to_string()))
    }

    fn local_addr(&self) -> std::io::Result<String> {
        Ok(self.0.local_addr()?.to_string())
    }
}

impl Net for SimNet {
    type Listener = SimListener;

    async fn bind(&self, addr: &str) -> std::io::Result<SimListener> {
        let port: u16 = addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or(9092);
        let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)).await?;
        Ok(SimListener(listener))
    }
}

#[derive(Clone)]
pub struct SimEnv {
    clock: SimClock,
    rng: SimRng,
    spawner: SimSpawner,
    volume: SimVolume,
    net: SimNet,
}

impl SimEnv {
    pub fn new(volume: SimVolume, seed: u64, skew_ms: i64) -> Self {
        SimEnv { clock: SimClock { skew_ms }, rng: SimRng::new(seed), spawner: SimSpawner, volume, net: SimNet }
    }
}

impl Env for SimEnv {
    type Clock = SimClock;
    type Rng = SimRng;
    type Spawner = SimSpawner;
    type Volume = SimVolume;
    type Net = SimNet;

    fn clock(&self) -> &SimClock {
        &self.clock
    }
    fn rng(&self) -> &SimRng {
        &self.rng
    }
    fn spawner(&self) -> &SimSpawner {
        &self.spawner
    }
    fn volume(&self) -> &SimVolume {
        &self.volume
    }
    fn net(&self) -> &SimNet {
        &self.net
    }
}
