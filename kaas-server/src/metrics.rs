//! The Prometheus endpoint (`--metrics HOST:PORT`): GET /metrics answers the broker's counters
//! and a few gauges read at the scrape, in Prometheus's text format, encoded by
//! prometheus-client. Anything else is a 404. One request per connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use kaas_core::Broker;
use kaas_core::broker::metrics::BrokerMetrics;
use kaas_core::env::real::RealEnv;
use kafka_protocol::messages::ApiKey;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

struct BrokerCollector {
    metrics: Arc<BrokerMetrics>,
    broker: Broker<RealEnv>,
}

impl std::fmt::Debug for BrokerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BrokerCollector({})", self.broker.config.broker_id)
    }
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for BrokerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = &self.metrics;
        let requests = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "kaas_requests",
            "Kafka requests received, by API",
            None,
            requests.metric_type(),
        )?;
        for (key, n) in m.requests() {
            let api = ApiKey::try_from(key).map(|k| format!("{k:?}")).unwrap_or_else(|_| format!("api-{key}"));
            ConstCounter::new(n).encode(family.encode_family(&[("api", api.as_str())])?)?;
        }
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        counter(
            &mut encoder,
            "kaas_connections_accepted",
            "Client and peer connections accepted",
            load(&m.connections_accepted),
        )?;
        gauge(
            &mut encoder,
            "kaas_connections_open",
            "Connections open now",
            m.connections_open.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "kaas_connections_refused",
            "Connections closed at once, over max.connections.per.ip",
            load(&m.connections_refused),
        )?;
        counter(
            &mut encoder,
            "kaas_authentication_failures",
            "SASL authentications refused",
            load(&m.authentication_failures),
        )?;
        counter(
            &mut encoder,
            "kaas_authorization_failures",
            "Operations the ACLs refused",
            load(&m.authorization_failures),
        )?;
        counter(
            &mut encoder,
            "kaas_network_received_bytes",
            "Request bytes read, framing included",
            load(&m.bytes_in),
        )?;
        counter(
            &mut encoder,
            "kaas_network_sent_bytes",
            "Response bytes written, framing included",
            load(&m.bytes_out),
        )?;
        let snapshot = self.broker.topics.snapshot();
        let owned = snapshot.topics.values().flat_map(|t| t.partitions.iter()).filter(|p| p.watermarks().owned).count();
        gauge(&mut encoder, "kaas_topics", "Topics this broker knows", snapshot.topics.len() as i64)?;
        gauge(&mut encoder, "kaas_partitions_owned", "Partitions this broker owns and serves", owned as i64)?;
        let view = self.broker.membership.view();
        gauge(
            &mut encoder,
            "kaas_brokers_live",
            "Brokers with a live lease, as this broker sees them",
            view.live.len() as i64,
        )?;
        gauge(
            &mut encoder,
            "kaas_lease_valid",
            "1 while this broker's own lease holds",
            i64::from(self.broker.owns_now()),
        )?;
        gauge(&mut encoder, "kaas_acl_bindings", "ACL bindings in force", snapshot.acls.bindings.len() as i64)?;
        gauge(
            &mut encoder,
            "kaas_acl_files_unreadable",
            "1 while an ACL file cannot be read (only super users are authorized)",
            i64::from(snapshot.acls.unreadable.is_some()),
        )?;
        gauge(
            &mut encoder,
            "kaas_client_quota_entities",
            "Entities with client quotas",
            snapshot.quotas.entities.len() as i64,
        )?;
        gauge(
            &mut encoder,
            "kaas_client_quota_files_unreadable",
            "Client quota files that could not be read (the quotas last read from them stand)",
            snapshot.quota_files_unreadable as i64,
        )?;
        let throttling = m.throttling();
        for (name, help, value) in [
            ("kaas_throttles", "Requests throttled by a client quota, by quota", 1),
            ("kaas_throttle_time_milliseconds", "Time clients were throttled for, by quota", 2),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, requests.metric_type())?;
            for (key, throttles, ms) in &throttling {
                let n = if value == 1 { *throttles } else { *ms };
                ConstCounter::new(n).encode(family.encode_family(&[("quota", key.name())])?)?;
            }
        }
        Ok(())
    }
}

/// The text a scrape gets.
pub fn scrape(broker: &Broker<RealEnv>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BrokerCollector { metrics: broker.metrics.clone(), broker: broker.clone() }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("writing to a String never fails");
    text
}

/// Serves /metrics on `listener` until the process ends.
pub async fn serve(listener: TcpListener, broker: Broker<RealEnv>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let broker = broker.clone();
        tokio::spawn(async move {
            // The request's head, read until its blank line (it may come in pieces), 8 KiB at most.
            let mut request = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
                let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut chunk)).await;
                match read {
                    Ok(Ok(n)) if n > 0 => request.extend_from_slice(&chunk[..n]),
                    _ => return,
                }
            }
            let line = String::from_utf8_lossy(&request);
            let answer = match line.split_whitespace().take(2).collect::<Vec<_>>()[..] {
                ["GET", "/metrics"] => {
                    let body = scrape(&broker);
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
                _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
            };
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
