//! Connection limits (`max.connections`, `max.connections.per.ip` and its overrides), counted
//! across every listener of the broker as Apache's `ConnectionQuotas` counts them: a client
//! over the broker-wide limit waits to be accepted, one over its address's limit is closed at
//! once. Connections on the inter-broker listener count towards their address's limit only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::config::BrokerConfig;

#[derive(Debug, Default)]
struct Counts {
    /// Client connections (the inter-broker listener's left out).
    total: usize,
    by_address: BTreeMap<String, usize>,
}

/// The connections open on a broker, by address.
#[derive(Debug, Default)]
pub struct Connections {
    counts: Mutex<Counts>,
    freed: Notify,
}

/// Why a connection was not let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooManyConnections {
    pub address: String,
    pub limit: usize,
}

/// A connection counted until it is dropped.
#[derive(Debug)]
pub struct ConnectionSlot {
    connections: Arc<Connections>,
    address: String,
    counted: bool,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut counts = self.connections.counts.lock().expect("connection counts");
        if self.counted {
            counts.total -= 1;
        }
        let n = counts.by_address.get_mut(&self.address).expect("a slot's address is counted");
        *n -= 1;
        if *n == 0 {
            counts.by_address.remove(&self.address);
        }
        drop(counts);
        self.connections.freed.notify_waiters();
    }
}

impl Connections {
    /// Waits until a client connection may be accepted under `max.connections`.
    pub async fn room(&self, config: &BrokerConfig) {
        loop {
            let freed = self.freed.notified();
            if self.counts.lock().expect("connection counts").total < config.max_connections {
                return;
            }
            freed.await;
        }
    }

    /// Counts a connection accepted from `address` (an IP address as text); `client`: not on
    /// the inter-broker listener. Refused over the address's limit.
    pub fn open(
        self: &Arc<Self>,
        config: &BrokerConfig,
        address: &str,
        client: bool,
    ) -> Result<ConnectionSlot, TooManyConnections> {
        let limit =
            config.max_connections_per_ip_overrides.get(address).copied().unwrap_or(config.max_connections_per_ip);
        let mut counts = self.counts.lock().expect("connection counts");
        let n = counts.by_address.get(address).copied().unwrap_or(0);
        if n >= limit {
            return Err(TooManyConnections { address: address.to_string(), limit });
        }
        counts.by_address.insert(address.to_string(), n + 1);
        if client {
            counts.total += 1;
        }
        Ok(ConnectionSlot { connections: self.clone(), address: address.to_string(), counted: client })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_over_its_limit_is_refused_until_one_closes() {
        let config = BrokerConfig {
            max_connections_per_ip: 2,
            max_connections_per_ip_overrides: BTreeMap::from([("10.0.0.9".to_string(), 0)]),
            ..BrokerConfig::default()
        };
        let c = Arc::new(Connections::default());
        let a = c.open(&config, "10.0.0.1", true).expect("first");
        let _b = c.open(&config, "10.0.0.1", false).expect("second");
        assert_eq!(c.open(&config, "10.0.0.1", true).unwrap_err().limit, 2);
        assert!(c.open(&config, "10.0.0.2", true).is_ok(), "another address has its own count");
        assert!(c.open(&config, "10.0.0.9", true).is_err(), "an override of 0 refuses every connection");
        drop(a);
        assert!(c.open(&config, "10.0.0.1", true).is_ok());
    }

    #[tokio::test]
    async fn a_client_beyond_max_connections_waits_for_one_to_close() {
        let config = Arc::new(BrokerConfig { max_connections: 1, ..BrokerConfig::default() });
        let c = Arc::new(Connections::default());
        let first = c.open(&config, "10.0.0.1", true).expect("first");
        let _peer = c.open(&config, "10.0.0.2", false).expect("the inter-broker listener is not counted");
        let waiting = tokio::spawn({
            let (c, config) = (c.clone(), config.clone());
            async move { c.room(&config).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room while the one client connection is open");
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.expect("room once it closed").unwrap();
    }
}
