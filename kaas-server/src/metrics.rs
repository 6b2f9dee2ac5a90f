//! The Prometheus endpoint (`--metrics HOST:PORT`): GET /metrics answers the broker's counters
//! (kaas-core's `metrics`) and the gauges the actors answer at the scrape (`Broker::gauges`),
//! in Prometheus's text format, encoded by prometheus-client, every family named and explained
//! by kaas-core's catalogue. Anything else is a 404. One request per connection.

use std::fmt::Error;
use std::sync::atomic::{AtomicU64, Ordering};

use kaas_core::Broker;
use kaas_core::broker::gauges::Gauges;
use kaas_core::env::real::RealEnv;
use kaas_core::metrics::{HistogramRead, OWNED_KINDS, Type, family_of};
use kafka_protocol::messages::ApiKey;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

struct BrokerCollector {
    broker: Broker<RealEnv>,
    /// What the actors answered for this scrape.
    gauges: Gauges,
}

impl std::fmt::Debug for BrokerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BrokerCollector({})", self.broker.config.broker_id)
    }
}

/// Writes one family, its help text from kaas-core's catalogue, and its samples (label values
/// in the catalogue's label order).
struct Families<'a> {
    encoder: DescriptorEncoder<'a>,
}

impl Families<'_> {
    fn family(&mut self, name: &str, samples: impl IntoIterator<Item = (Vec<String>, Sample)>) -> Result<(), Error> {
        let f = family_of(name);
        let metric_type = match f.kind {
            Type::Counter => MetricType::Counter,
            Type::Gauge => MetricType::Gauge,
            Type::Histogram => MetricType::Histogram,
        };
        let mut family = self.encoder.encode_descriptor(f.name, f.help, None, metric_type)?;
        for (values, sample) in samples {
            assert_eq!(values.len(), f.labels.len(), "{name}: a value per label");
            let labels: Vec<(&str, &str)> = f.labels.iter().copied().zip(values.iter().map(String::as_str)).collect();
            let encoder = family.encode_family(&labels)?;
            match sample {
                Sample::Count(n) => ConstCounter::new(n).encode(encoder)?,
                Sample::Level(n) => ConstGauge::new(n).encode(encoder)?,
                Sample::Histogram(h, scale) => HistogramSample(h, scale).encode(encoder)?,
            }
        }
        Ok(())
    }

    fn one(&mut self, name: &str, sample: Sample) -> Result<(), Error> {
        self.family(name, [(Vec::new(), sample)])
    }
}

enum Sample {
    Count(u64),
    Level(i64),
    /// A histogram and what its values are divided by (1e6: microseconds shown in seconds).
    Histogram(HistogramRead, f64),
}

struct HistogramSample(HistogramRead, f64);

impl std::fmt::Debug for HistogramSample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HistogramSample({:?})", self.0)
    }
}

impl EncodeMetric for HistogramSample {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), Error> {
        let HistogramSample(read, scale) = self;
        let buckets: Vec<(f64, u64)> =
            read.buckets.iter().map(|(bound, n)| (bound.map_or(f64::INFINITY, |b| b as f64 / scale), *n)).collect();
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            read.sum as f64 / scale,
            read.count(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

const MICROS: f64 = 1e6;

fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map(|k| format!("{k:?}")).unwrap_or_else(|_| format!("api-{key}"))
}

fn error_name(code: i16) -> String {
    kafka_protocol::ResponseError::try_from_code(code).map_or_else(|| format!("error-{code}"), |e| format!("{e:?}"))
}

impl Collector for BrokerCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), Error> {
        use Sample::{Count, Histogram, Level};
        let m = &self.broker.metrics;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = Families { encoder };
        out.family("kaas_requests", m.requests().into_iter().map(|(key, n)| (vec![api_name(key)], Count(n))))?;
        out.family(
            "kaas_request_duration_seconds",
            m.request_durations()
                .into_iter()
                .map(|(key, version, h)| (vec![api_name(key), version.to_string()], Histogram(h, MICROS))),
        )?;
        out.family(
            "kaas_request_errors",
            m.error_counts().into_iter().map(|((key, code), n)| (vec![api_name(key), error_name(code)], Count(n))),
        )?;
        out.one("kaas_connections_accepted", Count(load(&m.connections_accepted)))?;
        out.one("kaas_connections_open", Level(m.connections_open.load(Ordering::Relaxed)))?;
        out.one("kaas_connections_refused", Count(load(&m.connections_refused)))?;
        out.one("kaas_authentication_failures", Count(load(&m.authentication_failures)))?;
        out.one("kaas_authorization_failures", Count(load(&m.authorization_failures)))?;
        out.one("kaas_network_received_bytes", Count(load(&m.bytes_in)))?;
        out.one("kaas_network_sent_bytes", Count(load(&m.bytes_out)))?;
        let topic_bytes = m.topic_byte_counts();
        out.family("kaas_topic_received_bytes", topic_bytes.iter().map(|(t, n, _)| (vec![t.clone()], Count(*n))))?;
        out.family("kaas_topic_sent_bytes", topic_bytes.iter().map(|(t, _, n)| (vec![t.clone()], Count(*n))))?;
        out.one("kaas_log_flush_duration_seconds", Histogram(m.log.flush.read(), MICROS))?;
        out.one("kaas_group_commit_appends", Histogram(m.log.group_commit.read(), 1.0))?;
        let snapshot = self.broker.topics.snapshot();
        let owned = snapshot.topics.values().flat_map(|t| t.partitions.iter()).filter(|p| p.watermarks().owned).count();
        out.one("kaas_topics", Level(snapshot.topics.len() as i64))?;
        out.one("kaas_partitions_owned", Level(owned as i64))?;
        let kinds = || OWNED_KINDS.iter().map(|k| (k, m.ownership(k)));
        out.family("kaas_owned", kinds().map(|(k, o)| (vec![k.to_string()], Level(o.held.load(Ordering::Relaxed)))))?;
        out.family("kaas_ownership_claims", kinds().map(|(k, o)| (vec![k.to_string()], Count(load(&o.claims)))))?;
        out.family("kaas_ownership_takeovers", kinds().map(|(k, o)| (vec![k.to_string()], Count(load(&o.takeovers)))))?;
        out.family("kaas_ownership_releases", kinds().map(|(k, o)| (vec![k.to_string()], Count(load(&o.releases)))))?;
        out.one("kaas_brokers_live", Level(self.broker.membership.view().live.len() as i64))?;
        out.one("kaas_lease_valid", Level(i64::from(self.broker.owns_now())))?;
        out.one("kaas_lease_renewals", Count(load(&m.lease.renewals)))?;
        out.one("kaas_lease_renewal_failures", Count(load(&m.lease.failures)))?;
        out.one("kaas_lease_lapses", Count(load(&m.lease.lapses)))?;
        out.one("kaas_lease_renewal_lateness_seconds", Histogram(m.lease.lateness.read(), MICROS))?;
        let g = &self.gauges;
        out.one("kaas_transactions_open", Level(g.transactions_open as i64))?;
        out.one("kaas_transaction_oldest_age_seconds", Level(g.oldest_transaction_ms / 1000))?;
        out.family(
            "kaas_partition_lso_lag",
            g.lso_lags.iter().map(|(t, p, lag)| (vec![t.clone(), p.to_string()], Level(*lag))),
        )?;
        out.family(
            "kaas_consumer_group_lag",
            g.consumer_group_lags.iter().map(|(id, lag)| (vec![id.clone()], Level(*lag))),
        )?;
        out.family("kaas_share_group_lag", g.share_group_lags.iter().map(|(id, lag)| (vec![id.clone()], Level(*lag))))?;
        out.one("kaas_acl_bindings", Level(snapshot.acls.bindings.len() as i64))?;
        out.one("kaas_acl_files_unreadable", Level(i64::from(snapshot.acls.unreadable.is_some())))?;
        out.one("kaas_client_quota_entities", Level(snapshot.quotas.entities.len() as i64))?;
        out.one("kaas_client_quota_files_unreadable", Level(snapshot.quota_files_unreadable as i64))?;
        let throttling = m.throttling();
        out.family("kaas_throttles", throttling.iter().map(|(k, n, _)| (vec![k.name().to_string()], Count(*n))))?;
        out.family(
            "kaas_throttle_time_milliseconds",
            throttling.iter().map(|(k, _, ms)| (vec![k.name().to_string()], Count(*ms))),
        )?;
        Ok(())
    }
}

/// The text a scrape gets: the counters, and the gauges the actors answer now.
pub async fn scrape(broker: &Broker<RealEnv>) -> String {
    let gauges = broker.gauges().await;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BrokerCollector { broker: broker.clone(), gauges }));
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
                    let body = scrape(&broker).await;
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
