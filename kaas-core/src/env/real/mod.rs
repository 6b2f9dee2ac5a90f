//! The production env: the system clock, the OS random source, tokio tasks, std::fs on tokio's
//! blocking pool, and tokio::net. This module is the only place in kaas-core that may touch them.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod volume;

use std::sync::{Arc, Mutex};

use rand::{RngCore, SeedableRng, rngs::StdRng};

pub use volume::{RealFile, RealVolume};

use super::{Clock, Env, Listener, Net, Rng, Spawner};

#[derive(Clone, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now_ms(&self) -> i64 {
        let since =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("system clock before 1970");
        i64::try_from(since.as_millis()).expect("time fits i64")
    }
}

#[derive(Clone)]
pub struct RealRng(Arc<Mutex<StdRng>>);

impl Default for RealRng {
    fn default() -> Self {
        RealRng(Arc::new(Mutex::new(StdRng::from_os_rng())))
    }
}

impl Rng for RealRng {
    fn next_u64(&self) -> u64 {
        self.0.lock().expect("rng lock").next_u64()
    }
}

#[derive(Clone, Default)]
pub struct RealSpawner;

impl Spawner for RealSpawner {
    fn spawn<F>(&self, _name: &'static str, future: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(future);
    }
}

#[derive(Clone, Default)]
pub struct TokioNet;

pub struct TokioListener(tokio::net::TcpListener);

impl Listener for TokioListener {
    type Stream = tokio::net::TcpStream;

    async fn accept(&self) -> std::io::Result<(Self::Stream, String)> {
        let (stream, peer) = self.0.accept().await?;
        // Kafka responses are small and latency-bound; Nagle would add 40 ms to each.
        stream.set_nodelay(true)?;
        Ok((stream, peer.to_string()))
    }

    fn local_addr(&self) -> std::io::Result<String> {
        Ok(self.0.local_addr()?.to_string())
    }
}

impl Net for TokioNet {
    type Listener = TokioListener;

    async fn bind(&self, addr: &str) -> std::io::Result<TokioListener> {
        Ok(TokioListener(tokio::net::TcpListener::bind(addr).await?))
    }

    async fn connect(&self, host: &str, port: u16) -> std::io::Result<tokio::net::TcpStream> {
        let stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// The env of the `kaas` binary.
#[derive(Clone)]
pub struct RealEnv {
    clock: RealClock,
    rng: RealRng,
    spawner: RealSpawner,
    volume: RealVolume,
    net: TokioNet,
}

impl RealEnv {
    pub fn new(data_dir: impl Into<std::path::PathBuf>) -> Self {
        RealEnv {
            clock: RealClock,
            rng: RealRng::default(),
            spawner: RealSpawner,
            volume: RealVolume::new(data_dir),
            net: TokioNet,
        }
    }
}

impl Env for RealEnv {
    type Clock = RealClock;
    type Rng = RealRng;
    type Spawner = RealSpawner;
    type Volume = RealVolume;
    type Net = TokioNet;

    fn clock(&self) -> &RealClock {
        &self.clock
    }
    fn rng(&self) -> &RealRng {
        &self.rng
    }
    fn spawner(&self) -> &RealSpawner {
        &self.spawner
    }
    fn volume(&self) -> &RealVolume {
        &self.volume
    }
    fn net(&self) -> &TokioNet {
        &self.net
    }
}
