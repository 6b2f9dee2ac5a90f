//! What a broker counts for its operators: requests per API, connections, failed
//! authentications, bytes on the wire. Plain atomics, counted where things happen (kaas-net)
//! and read at a scrape (kaas-server's Prometheus endpoint); nothing here decides anything.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// API keys counted one by one; higher keys share the last slot.
pub const API_KEYS: usize = 100;

#[derive(Debug)]
pub struct BrokerMetrics {
    requests: [AtomicU64; API_KEYS],
    pub connections_accepted: AtomicU64,
    pub connections_open: AtomicI64,
    pub authentication_failures: AtomicU64,
    pub authorization_failures: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        BrokerMetrics {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            connections_accepted: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            authentication_failures: AtomicU64::new(0),
            authorization_failures: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
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

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
