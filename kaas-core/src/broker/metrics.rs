//! What a broker counts for its operators: requests per API, connections, failed
//! authentications, bytes on the wire. Plain atomics, counted where things happen (kaas-net)
//! and read at a scrape (kaas-server's Prometheus endpoint); nothing here decides anything.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::quota::QuotaKey;

/// API keys counted one by one; higher keys share the last slot.
pub const API_KEYS: usize = 100;

#[derive(Debug)]
pub struct BrokerMetrics {
    requests: [AtomicU64; API_KEYS],
    pub connections_accepted: AtomicU64,
    pub connections_open: AtomicI64,
    /// Connections closed at once for `max.connections.per.ip`.
    pub connections_refused: AtomicU64,
    pub authentication_failures: AtomicU64,
    pub authorization_failures: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Throttles and their milliseconds, per throttling quota (`THROTTLED_QUOTAS`).
    throttles: [AtomicU64; 3],
    throttle_ms: [AtomicU64; 3],
}

/// The quotas that throttle, in the order their counters are kept.
pub const THROTTLED_QUOTAS: [QuotaKey; 3] =
    [QuotaKey::ProducerByteRate, QuotaKey::ConsumerByteRate, QuotaKey::RequestPercentage];

impl Default for BrokerMetrics {
    fn default() -> Self {
        BrokerMetrics {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            connections_accepted: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            connections_refused: AtomicU64::new(0),
            authentication_failures: AtomicU64::new(0),
            authorization_failures: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            throttles: Default::default(),
            throttle_ms: Default::default(),
        }
    }
}

impl BrokerMetrics {
    pub fn request(&self, api_key: i16) {
        let slot = usize::try_from(api_key).unwrap_or(API_KEYS - 1).min(API_KEYS - 1);
        self.requests[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// (API key, requests) of every API asked at least once.
    pub fn requests(&self) -> Vec<(i16, u64)> {
        self.requests
            .iter()
            .enumerate()
            .map(|(key, n)| (key as i16, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// A client throttled for `ms` by its quota of `key`.
    pub fn throttled(&self, key: QuotaKey, ms: u64) {
        if let Some(i) = THROTTLED_QUOTAS.iter().position(|k| *k == key) {
            self.throttles[i].fetch_add(1, Ordering::Relaxed);
            self.throttle_ms[i].fetch_add(ms, Ordering::Relaxed);
        }
    }

    /// (quota, throttles, milliseconds throttled) per throttling quota.
    pub fn throttling(&self) -> Vec<(QuotaKey, u64, u64)> {
        THROTTLED_QUOTAS
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, self.throttles[i].load(Ordering::Relaxed), self.throttle_ms[i].load(Ordering::Relaxed)))
            .collect()
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
