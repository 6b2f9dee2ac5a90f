//! What a broker counts for its operators: requests and their latency per API and version,
//! errors, connections, bytes per topic, fsyncs and group commits, ownership, the lease,
//! throttles. Plain atomics and fixed-bucket histograms, counted where things happen (kaas-net,
//! the actors) and read at a scrape (kaas-server's Prometheus endpoint); nothing here decides
//! anything, so counting never changes a simulated run.
//!
//! `CATALOGUE` names every series with its type, labels and meaning: the endpoint takes its
//! help texts from it and docs/metrics.md is generated from it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::quota::QuotaKey;

/// API keys counted one by one; higher keys share the last slot.
pub const API_KEYS: usize = 100;
/// Versions counted one by one per API; higher ones share the last slot.
pub const API_VERSIONS: usize = 24;

/// What a series is, as Prometheus types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Counter,
    Gauge,
    Histogram,
}

impl Type {
    pub fn name(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        }
    }
}

/// One series family: its name (a counter's without `_total`, as prometheus-client adds it),
/// type, labels and meaning.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Type,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

const fn family(name: &'static str, kind: Type, labels: &'static [&'static str], help: &'static str) -> Family {
    Family { name, kind, labels, help }
}

use Type::{Counter, Gauge, Histogram as Hist};

/// Every series a scrape shows, in the order it shows them.
pub const CATALOGUE: &[Family] = &[
    family("kaas_requests", Counter, &["api"], "Kafka requests received, by API (undecodable ones included)"),
    family(
        "kaas_request_duration_seconds",
        Hist,
        &["api", "version"],
        "Time from a request read to its answer ready, by API and version (a long poll's wait included)",
    ),
    family(
        "kaas_request_errors",
        Counter,
        &["api", "error"],
        "Error codes answered, by API and Kafka error name: every code of an answer (per partition too), as Apache counts ErrorsPerSec",
    ),
    family("kaas_connections_accepted", Counter, &[], "Client and peer connections accepted"),
    family("kaas_connections_open", Gauge, &[], "Connections open now"),
    family("kaas_connections_refused", Counter, &[], "Connections closed at once, over max.connections.per.ip"),
    family("kaas_authentication_failures", Counter, &[], "SASL authentications refused"),
    family("kaas_authorization_failures", Counter, &[], "Operations the ACLs refused"),
    family("kaas_network_received_bytes", Counter, &[], "Request bytes read, framing included"),
    family("kaas_network_sent_bytes", Counter, &[], "Response bytes written, framing included"),
    family("kaas_topic_received_bytes", Counter, &["topic"], "Record batch bytes appended by Produce, per topic"),
    family("kaas_topic_sent_bytes", Counter, &["topic"], "Record batch bytes answered by Fetch, per topic"),
    family(
        "kaas_log_flush_duration_seconds",
        Hist,
        &[],
        "Time a partition's group commit took to sync its appends to the volume (the fsync)",
    ),
    family("kaas_group_commit_appends", Hist, &[], "Appends made durable by one sync (a group commit's size)"),
    family("kaas_topics", Gauge, &[], "Topics this broker knows"),
    family("kaas_partitions_owned", Gauge, &[], "Partitions this broker owns and serves"),
    family(
        "kaas_owned",
        Gauge,
        &["kind"],
        "What this broker holds a claim on, by kind: partition, group, txn_slot (transaction coordinator slots)",
    ),
    family("kaas_ownership_claims", Counter, &["kind"], "Claims this broker won, by kind"),
    family(
        "kaas_ownership_takeovers",
        Counter,
        &["kind"],
        "Claims won from another broker whose lease had run out, by kind",
    ),
    family("kaas_ownership_releases", Counter, &["kind"], "Claims this broker gave up, by kind"),
    family("kaas_brokers_live", Gauge, &[], "Brokers with a live lease, as this broker sees them"),
    family("kaas_lease_valid", Gauge, &[], "1 while this broker's own lease holds"),
    family("kaas_lease_renewals", Counter, &[], "Lease renewals written"),
    family("kaas_lease_renewal_failures", Counter, &[], "Lease renewals the volume refused"),
    family("kaas_lease_lapses", Counter, &[], "Times this broker's lease ran out (each starts a new lease session)"),
    family(
        "kaas_lease_renewal_lateness_seconds",
        Hist,
        &[],
        "How late a renewal began after broker.heartbeat.interval.ms from the one before (a lease lapses at broker.session.timeout.ms less the drift margin)",
    ),
    family(
        "kaas_transactions_open",
        Gauge,
        &[],
        "Transactions open on the coordinator slots this broker holds (ongoing or ending)",
    ),
    family(
        "kaas_transaction_oldest_age_seconds",
        Gauge,
        &[],
        "Age of the oldest transaction open on this broker's coordinator slots (0: none)",
    ),
    family(
        "kaas_partition_lso_lag",
        Gauge,
        &["topic", "partition"],
        "Offsets between the last stable offset and the high watermark of a partition this broker owns: what read_committed consumers wait for (only partitions with a lag)",
    ),
    family(
        "kaas_consumer_group_lag",
        Gauge,
        &["group"],
        "Offsets between a group's committed offsets and the high watermarks, summed over its partitions, for the groups this broker coordinates",
    ),
    family(
        "kaas_share_group_lag",
        Gauge,
        &["group"],
        "Records of a share group not yet delivered and acknowledged, summed over its partitions (KIP-1226's lag), for the share groups this broker coordinates",
    ),
    family("kaas_acl_bindings", Gauge, &[], "ACL bindings in force"),
    family(
        "kaas_acl_files_unreadable",
        Gauge,
        &[],
        "1 while an ACL file cannot be read (only super users are authorized)",
    ),
    family("kaas_client_quota_entities", Gauge, &[], "Entities with client quotas"),
    family(
        "kaas_client_quota_files_unreadable",
        Gauge,
        &[],
        "Client quota files that could not be read (the quotas last read from them stand)",
    ),
    family("kaas_throttles", Counter, &["quota"], "Requests throttled by a client quota, by quota"),
    family("kaas_throttle_time_milliseconds", Counter, &["quota"], "Time clients were throttled for, by quota"),
];

/// The family named `name` (a broker bug if there is none).
pub fn family_of(name: &str) -> &'static Family {
    CATALOGUE.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("{name}: not in the metrics catalogue"))
}

/// docs/metrics.md: every series, generated from `CATALOGUE`.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         Generated from `kaas-core/src/metrics.rs` (`KAAS_WRITE_DOCS=1 cargo test -p kaas-server --test docs`).\n\n\
         `kaas serve --metrics HOST:PORT` serves them at `http://HOST:PORT/metrics` in Prometheus's text format.\n\
         Counters end in `_total` there; histograms have `_bucket`, `_sum` and `_count` series, in seconds for\n\
         durations. Each broker counts what it does itself: sum over brokers for the cluster. Gauges of\n\
         groups, transactions and partitions come from the broker that owns or coordinates them, so each\n\
         appears on exactly one broker at a time.\n\n\
         | Name | Type | Labels | Meaning |\n|---|---|---|---|\n",
    );
    for f in CATALOGUE {
        let name = match f.kind {
            Type::Counter => format!("{}_total", f.name),
            _ => f.name.to_string(),
        };
        out.push_str(&format!("| `{name}` | {} | {} | {} |\n", f.kind.name(), f.labels.join(", "), f.help));
    }
    out
}

/// Bucket bounds of a duration histogram, in microseconds: 0.5 ms to 10 s.
pub const DURATION_BOUNDS_US: &[u64] = &[
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000,
];
/// Bucket bounds of a count histogram (group commit sizes).
pub const COUNT_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// A histogram of fixed buckets, lock-free: `observe` adds to one bucket and the sum.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// One count per bound, then the count above the last bound.
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

/// What a histogram held when read: per bucket (upper bound, observations in it, not
/// cumulative; `None`: above every bound), and the sum of the observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramRead {
    pub buckets: Vec<(Option<u64>, u64)>,
    pub sum: u64,
}

impl HistogramRead {
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(_, n)| n).sum()
    }
}

impl Histogram {
    pub fn new(bounds: &'static [u64]) -> Self {
        assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds increase");
        Histogram { bounds, buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum: AtomicU64::new(0) }
    }

    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    pub fn read(&self) -> HistogramRead {
        let bounds = self.bounds.iter().map(|&b| Some(b)).chain([None]);
        HistogramRead {
            buckets: bounds.zip(self.buckets.iter()).map(|(b, n)| (b, n.load(Ordering::Relaxed))).collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// One kind of owned thing's counts (`cluster::ownership` keeps them).
#[derive(Debug, Default)]
pub struct OwnershipMetrics {
    pub held: AtomicI64,
    pub claims: AtomicU64,
    pub takeovers: AtomicU64,
    pub releases: AtomicU64,
}

/// The kinds of owned things, as the `kind` label names them (`cluster::claims::Kind::name`).
pub const OWNED_KINDS: [&str; 3] = ["partition", "group", "txn_slot"];

/// The lease's counts (`cluster::membership` keeps them).
#[derive(Debug)]
pub struct LeaseMetrics {
    pub renewals: AtomicU64,
    pub failures: AtomicU64,
    pub lapses: AtomicU64,
    /// Microseconds a renewal began after its schedule.
    pub lateness: Histogram,
}

impl Default for LeaseMetrics {
    fn default() -> Self {
        LeaseMetrics {
            renewals: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            lapses: AtomicU64::new(0),
            lateness: Histogram::new(DURATION_BOUNDS_US),
        }
    }
}

/// The partitions' log counts (every partition actor keeps them).
#[derive(Debug)]
pub struct LogMetrics {
    /// Microseconds per sync.
    pub flush: Histogram,
    /// Appends per sync.
    pub group_commit: Histogram,
}

impl Default for LogMetrics {
    fn default() -> Self {
        LogMetrics { flush: Histogram::new(DURATION_BOUNDS_US), group_commit: Histogram::new(COUNT_BOUNDS) }
    }
}

#[derive(Debug)]
pub struct BrokerMetrics {
    requests: [AtomicU64; API_KEYS],
    /// Microseconds per request, per (API key, version), made at the first such request.
    durations: Box<[OnceLock<Histogram>]>,
    /// Error codes answered, per (API key, error code).
    errors: Mutex<BTreeMap<(i16, i16), u64>>,
    /// Record bytes in (Produce) and out (Fetch), per topic.
    topic_bytes: Mutex<BTreeMap<String, (u64, u64)>>,
    pub connections_accepted: AtomicU64,
    pub connections_open: AtomicI64,
    /// Connections closed at once for `max.connections.per.ip`.
    pub connections_refused: AtomicU64,
    pub authentication_failures: AtomicU64,
    pub authorization_failures: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Per `OWNED_KINDS`.
    ownership: [Arc<OwnershipMetrics>; 3],
    pub lease: Arc<LeaseMetrics>,
    pub log: Arc<LogMetrics>,
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
            durations: (0..API_KEYS * API_VERSIONS).map(|_| OnceLock::new()).collect(),
            errors: Mutex::default(),
            topic_bytes: Mutex::default(),
            connections_accepted: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            connections_refused: AtomicU64::new(0),
            authentication_failures: AtomicU64::new(0),
            authorization_failures: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            ownership: Default::default(),
            lease: Default::default(),
            log: Default::default(),
            throttles: Default::default(),
            throttle_ms: Default::default(),
        }
    }
}

fn slot(value: i16, slots: usize) -> usize {
    usize::try_from(value).unwrap_or(slots - 1).min(slots - 1)
}

impl BrokerMetrics {
    pub fn request(&self, api_key: i16) {
        self.requests[slot(api_key, API_KEYS)].fetch_add(1, Ordering::Relaxed);
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

    /// A request of `api_key` at `version` answered `micros` after it was read.
    pub fn request_duration(&self, api_key: i16, version: i16, micros: u64) {
        let at = slot(api_key, API_KEYS) * API_VERSIONS + slot(version, API_VERSIONS);
        self.durations[at].get_or_init(|| Histogram::new(DURATION_BOUNDS_US)).observe(micros);
    }

    /// (API key, version, durations in µs) of every (API, version) answered at least once.
    pub fn request_durations(&self) -> Vec<(i16, i16, HistogramRead)> {
        self.durations
            .iter()
            .enumerate()
            .filter_map(|(at, h)| {
                let (key, version) = (at / API_VERSIONS, at % API_VERSIONS);
                h.get().map(|h| (key as i16, version as i16, h.read()))
            })
            .collect()
    }

    /// An answer of `api_key` carried these error codes (0s are not errors).
    pub fn errors(&self, api_key: i16, codes: impl IntoIterator<Item = i16>) {
        let mut errors = None;
        for code in codes.into_iter().filter(|&c| c != 0) {
            let errors = errors.get_or_insert_with(|| self.errors.lock().expect("metrics lock"));
            *errors.entry((api_key, code)).or_insert(0) += 1;
        }
    }

    /// ((API key, error code), answers) of every error answered.
    pub fn error_counts(&self) -> Vec<((i16, i16), u64)> {
        self.errors.lock().expect("metrics lock").iter().map(|(k, n)| (*k, *n)).collect()
    }

    /// Record bytes appended to (`produced`) or answered from (`fetched`) each topic.
    pub fn topic_bytes<'a>(&self, produced: bool, bytes: impl IntoIterator<Item = (&'a str, u64)>) {
        let mut topics = self.topic_bytes.lock().expect("metrics lock");
        for (topic, n) in bytes.into_iter().filter(|(_, n)| *n > 0) {
            if !topics.contains_key(topic) {
                topics.insert(topic.to_string(), (0, 0));
            }
            let counts = topics.get_mut(topic).expect("inserted");
            match produced {
                true => counts.0 += n,
                false => counts.1 += n,
            }
        }
    }

    /// (topic, bytes produced, bytes fetched) of every topic with either.
    pub fn topic_byte_counts(&self) -> Vec<(String, u64, u64)> {
        self.topic_bytes.lock().expect("metrics lock").iter().map(|(t, (i, o))| (t.clone(), *i, *o)).collect()
    }

    /// Forgets a deleted topic's bytes, so that its series go with it.
    pub fn topic_deleted(&self, topic: &str) {
        self.topic_bytes.lock().expect("metrics lock").remove(topic);
    }

    /// The counts of one kind of owned thing (one of `OWNED_KINDS`).
    pub fn ownership(&self, kind: &str) -> Arc<OwnershipMetrics> {
        let at = OWNED_KINDS.iter().position(|k| *k == kind).unwrap_or_else(|| panic!("{kind}: not an owned kind"));
        self.ownership[at].clone()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_value_in_the_first_bucket_it_fits() {
        let h = Histogram::new(&[10, 100]);
        for v in [0, 10, 11, 100, 101, 5000] {
            h.observe(v);
        }
        let read = h.read();
        assert_eq!(read.buckets, vec![(Some(10), 2), (Some(100), 2), (None, 2)]);
        assert_eq!((read.sum, read.count()), (5222, 6));
    }

    #[test]
    fn requests_are_timed_per_api_and_version_and_errors_per_code() {
        let m = BrokerMetrics::default();
        m.request_duration(0, 9, 700);
        m.request_duration(0, 9, 300);
        m.request_duration(1, 500, 1); // a version past the slots shares the last
        let durations = m.request_durations();
        assert_eq!(durations.len(), 2);
        assert_eq!((durations[0].0, durations[0].1, durations[0].2.count()), (0, 9, 2));
        assert_eq!((durations[1].0, durations[1].1), (1, API_VERSIONS as i16 - 1));
        m.errors(0, [0, 6, 6, 0, 47]);
        assert_eq!(m.error_counts(), vec![((0, 6), 2), ((0, 47), 1)]);
        m.topic_bytes(true, [("a", 10), ("b", 0)]);
        m.topic_bytes(false, [("a", 3)]);
        assert_eq!(m.topic_byte_counts(), vec![("a".to_string(), 10, 3)]);
        m.topic_deleted("a");
        assert!(m.topic_byte_counts().is_empty());
    }

    #[test]
    fn the_catalogue_names_each_family_once() {
        let mut names: Vec<&str> = CATALOGUE.iter().map(|f| f.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CATALOGUE.len());
        assert!(CATALOGUE.iter().all(|f| f.name.starts_with("kaas_") && !f.name.ends_with("_total")));
        assert!(reference_markdown().contains("| `kaas_requests_total` | counter | api |"));
    }
}
