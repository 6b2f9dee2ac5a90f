//! The simulated env: turmoil's virtual time and network, a seeded ChaCha random source, the
//! shared `SimVolume`, and two things a host's own process cannot see from the inside:
//! - its clocks (`ClockModel`): the wall clock may be skewed and stepped, and both clocks may
//!   run fast or slow (rate drift), as an NTP-less VM's do;
//! - a pause (`PauseGate`): SIGSTOP or a long GC pause. Every task of the host is gated, so
//!   none runs while the host is paused; timers and sockets keep filling up underneath, and on
//!   resume the host carries on with its memory intact and finds its deadlines long past.
//!
//! Everything else the broker does is the production code.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use kaas_core::env::{Clock, Env, Listener, Net, Rng, Spawner};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::volume::SimVolume;

/// The wall-clock epoch every simulated host starts from (2026-01-01T00:00:00Z).
pub const EPOCH_MS: i64 = 1_767_225_600_000;

/// Simulated time since the start of the run, as turmoil keeps it for the current host.
pub fn world_elapsed() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// How a host's clocks relate to simulated time: a wall-clock offset (skew, moved by clock
/// steps) and a rate that may change (drift). Rate changes are kept as segments of simulated
/// time, so host time is a pure function of simulated time.
#[derive(Debug, Clone, Default)]
struct ClockState {
    skew_ms: i64,
    /// (from simulated µs, rate in parts per million off 1.0), in order; empty means rate 1.
    rates: Vec<(u64, i64)>,
}

impl ClockState {
    /// Host microseconds elapsed by simulated microsecond `world_us`.
    fn host_us(&self, world_us: u64) -> u64 {
        let mut host = 0u64;
        let mut from = 0u64;
        let mut ppm = 0i64;
        for &(at, next) in &self.rates {
            if at >= world_us {
                break;
            }
            host += scale(at - from, ppm);
            (from, ppm) = (at, next);
        }
        host + scale(world_us - from, ppm)
    }

    fn rate_ppm_at(&self, world_us: u64) -> i64 {
        self.rates.iter().rev().find(|(at, _)| *at <= world_us).map_or(0, |(_, ppm)| *ppm)
    }
}

/// `us` of simulated time as host time at `ppm` off the true rate.
fn scale(us: u64, ppm: i64) -> u64 {
    let rate = (1_000_000 + ppm).max(1) as u128;
    (u128::from(us) * rate / 1_000_000) as u64
}

/// The inverse of `scale`: simulated µs in which a host at `ppm` sees `us` pass.
fn unscale(us: u64, ppm: i64) -> u64 {
    let rate = (1_000_000 + ppm).max(1) as u128;
    (u128::from(us) * 1_000_000).div_ceil(rate) as u64
}

/// One host's clock behaviour, shared by every boot of the host and by the fault driver that
/// skews, steps or drifts it.
#[derive(Clone, Debug, Default)]
pub struct ClockModel(Arc<Mutex<ClockState>>);

impl ClockModel {
    pub fn new(skew_ms: i64, drift_ppm: i64) -> ClockModel {
        let rates = if drift_ppm == 0 { Vec::new() } else { vec![(0, drift_ppm)] };
        ClockModel(Arc::new(Mutex::new(ClockState { skew_ms, rates })))
    }

    /// Steps the wall clock by `ms` (an NTP step, a VM resumed from a snapshot).
    pub fn step(&self, ms: i64) {
        self.0.lock().expect("clock lock").skew_ms += ms;
    }

    /// From simulated time `at` on, both of the host's clocks run `ppm` parts per million fast
    /// (or slow, if negative).
    pub fn set_rate(&self, at: Duration, ppm: i64) {
        let mut state = self.0.lock().expect("clock lock");
        let at = at.as_micros() as u64;
        assert!(state.rates.last().is_none_or(|(last, _)| *last <= at), "rate changes come in time order");
        state.rates.push((at, ppm));
    }

    fn host_us(&self, world: Duration) -> u64 {
        self.0.lock().expect("clock lock").host_us(world.as_micros() as u64)
    }
}

/// A host's clocks for one boot: wall time from the model, and a monotonic clock that starts
/// at the boot and runs at the model's rate.
#[derive(Clone)]
pub struct SimClock {
    model: ClockModel,
    /// tokio's instant and the simulated time at the boot.
    boot: (tokio::time::Instant, Duration),
}

impl SimClock {
    pub fn new(model: ClockModel) -> SimClock {
        SimClock { model, boot: (tokio::time::Instant::now(), world_elapsed()) }
    }

    /// Host µs since the boot.
    fn since_boot_us(&self) -> u64 {
        self.model.host_us(world_elapsed()) - self.model.host_us(self.boot.1)
    }

    fn ppm_now(&self) -> i64 {
        self.model.0.lock().expect("clock lock").rate_ppm_at(world_elapsed().as_micros() as u64)
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        let state = self.model.0.lock().expect("clock lock");
        let host_ms = (state.host_us(world_elapsed().as_micros() as u64) / 1000) as i64;
        EPOCH_MS + host_ms + state.skew_ms
    }

    fn monotonic(&self) -> tokio::time::Instant {
        self.boot.0 + Duration::from_micros(self.since_boot_us())
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(Duration::from_micros(unscale(ms * 1000, self.ppm_now())))
    }

    fn sleep_until(&self, deadline: tokio::time::Instant) -> impl Future<Output = ()> + Send {
        // The host's deadline, as simulated time from now at the current rate. A rate change
        // during the sleep does not move it (a fine approximation: drift is slow).
        let ahead_us = deadline.saturating_duration_since(self.monotonic()).as_micros() as u64;
        tokio::time::sleep(Duration::from_micros(unscale(ahead_us, self.ppm_now())))
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

#[derive(Default)]
struct Gate {
    paused: bool,
    /// Tasks that wanted to run during the pause, woken in this order on resume.
    waiting: Vec<Waker>,
}

/// Stops every task of one host while it is paused (SIGSTOP), without dropping any.
#[derive(Clone, Default)]
pub struct PauseGate(Arc<Mutex<Gate>>);

impl PauseGate {
    pub fn pause(&self) {
        self.0.lock().expect("gate lock").paused = true;
    }

    pub fn resume(&self) {
        let waiting = {
            let mut gate = self.0.lock().expect("gate lock");
            gate.paused = false;
            std::mem::take(&mut gate.waiting)
        };
        for waker in waiting {
            waker.wake();
        }
    }

    pub fn is_paused(&self) -> bool {
        self.0.lock().expect("gate lock").paused
    }

    /// Whether a task may run now; if not, it is woken on resume.
    fn admit(&self, cx: &Context<'_>) -> bool {
        let mut gate = self.0.lock().expect("gate lock");
        if gate.paused && !gate.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            gate.waiting.push(cx.waker().clone());
        }
        !gate.paused
    }

    /// `future`, run only while the host is not paused.
    pub fn gated<F: Future>(&self, future: F) -> Gated<F> {
        Gated { gate: self.clone(), inner: Box::pin(future) }
    }
}

pub struct Gated<F> {
    gate: PauseGate,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if !this.gate.admit(cx) {
            return Poll::Pending;
        }
        this.inner.as_mut().poll(cx)
    }
}

/// Spawns the broker's tasks on the host's runtime, each behind the host's pause gate.
#[derive(Clone)]
pub struct SimSpawner {
    gate: PauseGate,
}

impl Spawner for SimSpawner {
    fn spawn<F>(&self, _name: &'static str, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(self.gate.gated(future));
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

    async fn connect(&self, host: &str, port: u16) -> std::io::Result<turmoil::net::TcpStream> {
        turmoil::net::TcpStream::connect((host, port)).await
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
    /// The env of one boot of a host: its view of the volume, its clocks, its pause gate.
    pub fn new(volume: SimVolume, seed: u64, clock: ClockModel, gate: PauseGate) -> Self {
        SimEnv {
            clock: SimClock::new(clock),
            rng: SimRng::new(seed),
            spawner: SimSpawner { gate },
            volume,
            net: SimNet,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_time_integrates_rate_changes() {
        let model = ClockModel::new(0, 0);
        model.set_rate(Duration::from_secs(10), 1000); // 0.1% fast from 10 s
        model.set_rate(Duration::from_secs(20), -2000); // 0.2% slow from 20 s
        assert_eq!(model.host_us(Duration::from_secs(10)), 10_000_000);
        assert_eq!(model.host_us(Duration::from_secs(20)), 20_010_000);
        assert_eq!(model.host_us(Duration::from_secs(30)), 29_990_000);
        assert_eq!(unscale(scale(1_000_000, 1000), 1000), 1_000_000);
    }

    #[test]
    fn a_paused_gate_holds_its_task_until_resumed() {
        let gate = PauseGate::default();
        let polled = Arc::new(Mutex::new(0));
        let counted = polled.clone();
        let mut task = gate.gated(std::future::poll_fn(move |_| {
            *counted.lock().unwrap() += 1;
            Poll::Ready(())
        }));
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        gate.pause();
        assert!(Pin::new(&mut task).poll(&mut cx).is_pending());
        assert_eq!(*polled.lock().unwrap(), 0, "nothing runs while paused");
        gate.resume();
        assert!(Pin::new(&mut task).poll(&mut cx).is_ready());
        assert_eq!(*polled.lock().unwrap(), 1);
    }
}
