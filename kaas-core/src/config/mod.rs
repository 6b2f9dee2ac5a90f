//! Broker configuration under Kafka's own names (`num.partitions`, `log.segment.bytes`, ...),
//! set from `--set name=value` and properties files, and the per-topic overrides layered on it.
//! Which names exist, and what each means, is the table in `settings`.

pub mod group;
pub mod listeners;
pub mod settings;

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    pub broker_id: i32,
    /// The listeners as set (`listeners`, `advertised.listeners`,
    /// `listener.security.protocol.map`, `inter.broker.listener.name`; `--listen`,
    /// `--advertised`), checked and bound at start-up.
    pub listener_settings: listeners::ListenerSettings,
    /// Every listener's advertised address once bound: a client is told the one its request
    /// came in on. Set by `advertise`, with the two below.
    pub advertised_listeners: Vec<listeners::ListenerAddress>,
    /// The listener brokers reach each other on, and its advertised host and port.
    pub inter_broker_listener_name: String,
    /// The `ssl.*` settings of SSL listeners.
    pub ssl: listeners::SslSettings,
    /// How late a failed SASL authentication is answered before its connection closes
    /// (`connection.failed.authentication.delay.ms`), so that guessing is slow.
    pub connection_failed_authentication_delay_ms: u64,
    /// How client quotas are measured (`quota.window.num` samples of
    /// `quota.window.size.seconds`).
    pub quota_window_num: u32,
    pub quota_window_size_seconds: u32,
    /// ACLs (`authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`).
    pub authorizer: crate::acl::authorizer::AuthorizerSettings,
    pub authorizer_class_name: String,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub cluster_id: String,
    /// The data directory on the shared volume, as an absolute path (`--data-dir`; Kafka's
    /// `log.dirs`, which DescribeLogDirs and DescribeConfigs report).
    pub log_dir: String,
    pub auto_create_topics_enable: bool,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub log_segment_bytes: u64,
    pub log_index_interval_bytes: u64,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_retention_check_interval_ms: u64,
    /// `log.cleanup.policy`: a topic's `cleanup.policy` unless it sets its own.
    pub log_cleanup_policy: String,
    /// `log.roll.ms`: how old an active segment may grow before it rolls (topic `segment.ms`).
    pub log_roll_ms: i64,
    /// The log cleaner (`log.cleaner.*`), which compacts `cleanup.policy=compact` topics.
    pub log_cleaner_enable: bool,
    pub log_cleaner_threads: u32,
    pub log_cleaner_backoff_ms: u64,
    pub log_cleaner_dedupe_buffer_size: u64,
    pub log_cleaner_io_buffer_size: u64,
    pub log_cleaner_io_buffer_load_factor: f64,
    pub log_cleaner_io_max_bytes_per_second: f64,
    pub log_cleaner_min_cleanable_ratio: f64,
    pub log_cleaner_min_compaction_lag_ms: i64,
    pub log_cleaner_max_compaction_lag_ms: i64,
    pub log_cleaner_delete_retention_ms: i64,
    pub message_max_bytes: i32,
    pub socket_request_max_bytes: usize,
    /// The largest request a connection may send before SASL authenticated it
    /// (`sasl.server.max.receive.size`).
    pub sasl_server_max_receive_size: usize,
    /// The longest an authenticated session lasts before the client must authenticate again
    /// on its connection (`connections.max.reauth.ms`, KIP-368); 0: for ever.
    pub connections_max_reauth_ms: i64,
    /// Client connections open at once, broker-wide (`max.connections`; the inter-broker
    /// listener's are not counted): more wait to be accepted.
    pub max_connections: usize,
    /// Connections open at once from one address (`max.connections.per.ip`, and
    /// `max.connections.per.ip.overrides` by address): more are closed at once.
    pub max_connections_per_ip: usize,
    pub max_connections_per_ip_overrides: std::collections::BTreeMap<String, usize>,
    pub group_initial_rebalance_delay_ms: i64,
    pub group_min_session_timeout_ms: i32,
    pub group_max_session_timeout_ms: i32,
    pub group_max_size: usize,
    /// A consumer-protocol member that has not heartbeated for this long is removed
    /// (`group.consumer.session.timeout.ms`).
    pub group_consumer_session_timeout_ms: i32,
    /// How often consumer-protocol members are told to heartbeat
    /// (`group.consumer.heartbeat.interval.ms`).
    pub group_consumer_heartbeat_interval_ms: i32,
    /// The bounds a group's own `consumer.session.timeout.ms` and
    /// `consumer.heartbeat.interval.ms` must keep (`group.consumer.{min,max}.*`).
    pub group_consumer_min_session_timeout_ms: i32,
    pub group_consumer_max_session_timeout_ms: i32,
    pub group_consumer_min_heartbeat_interval_ms: i32,
    pub group_consumer_max_heartbeat_interval_ms: i32,
    /// The most members one consumer-protocol group holds (`group.consumer.max.size`).
    pub group_consumer_max_size: usize,
    /// Whether a live group moves between the classic and the consumer protocol
    /// (`group.consumer.migration.policy`).
    pub group_consumer_migration_policy: MigrationPolicy,
    /// A share group member that has not heartbeated for this long is removed
    /// (`group.share.session.timeout.ms`).
    pub group_share_session_timeout_ms: i32,
    /// How often share group members are told to heartbeat (`group.share.heartbeat.interval.ms`).
    pub group_share_heartbeat_interval_ms: i32,
    /// The most members one share group holds (`group.share.max.size`).
    pub group_share_max_size: usize,
    /// How long a share group member holds the records it acquired before they are delivered
    /// again (`group.share.record.lock.duration.ms`), and the bounds of the group config of the
    /// same meaning (`group.share.{min,max}.record.lock.duration.ms`).
    pub group_share_record_lock_duration_ms: i32,
    pub group_share_min_record_lock_duration_ms: i32,
    pub group_share_max_record_lock_duration_ms: i32,
    /// How often a record is delivered before it is archived (`group.share.delivery.count.limit`),
    /// and the bounds of the group config (`group.share.{min,max}.delivery.count.limit`).
    pub group_share_delivery_count_limit: i32,
    pub group_share_min_delivery_count_limit: i32,
    pub group_share_max_delivery_count_limit: i32,
    /// Records in flight per share partition at most (`group.share.partition.max.record.locks`),
    /// and the bounds of the group config (`group.share.{min,max}.partition.max.record.locks`).
    pub group_share_partition_max_record_locks: i32,
    pub group_share_min_partition_max_record_locks: i32,
    pub group_share_max_partition_max_record_locks: i32,
    /// Share sessions one broker keeps at most (`group.share.max.share.sessions`).
    pub group_share_max_share_sessions: usize,
    /// The most partitions one DescribeTopicPartitions answer holds
    /// (`max.request.partition.size.limit`).
    pub max_request_partition_size_limit: i32,
    pub delete_topic_enable: bool,
    /// How long a partition remembers an idle producer (`producer.id.expiration.ms`).
    pub producer_id_expiration_ms: i64,
    /// The longest transaction timeout a producer may ask for (`transaction.max.timeout.ms`).
    pub transaction_max_timeout_ms: i32,
    /// How often the reaper aborts timed-out transactions and the reconcile finishes prepared
    /// ones (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    pub transaction_cleanup_interval_ms: u64,
    /// The finalized level of the `transaction.version` feature ApiVersions advertises: 2
    /// offers transactions v2 (KIP-890 part 2) to clients that have it, below 2 keeps every
    /// client on v1 (Apache sets it with `kafka-features`; here it is a setting).
    pub transaction_version: i16,
    /// The finalized level of the `share.version` feature: 1 serves share groups, 3 KIP-1289's
    /// TxnShareAcknowledge too.
    pub share_version: i16,
    /// KIP-1191: the prefix every share group's dead-letter queue topic must have
    /// (`errors.deadletterqueue.topic.name.prefix`; empty: any name).
    pub errors_deadletterqueue_topic_name_prefix: String,
    /// KIP-1191: whether a dead-letter queue topic that does not exist is created when first
    /// written (`errors.deadletterqueue.auto.create.topics.enable`).
    pub errors_deadletterqueue_auto_create_topics_enable: bool,
    /// A peer is live while this broker saw its lease renewed within this long, timed on this
    /// broker's own monotonic clock (`broker.session.timeout.ms`, Apache's name and default).
    pub broker_session_timeout_ms: u64,
    /// How often a broker renews its lease (`broker.heartbeat.interval.ms`).
    pub broker_heartbeat_interval_ms: u64,
    /// How much of its own lease a broker gives up to allow for clock rate drift between it and
    /// its peers (`broker.lease.drift.margin.ms`): it stops acking this long before a peer could
    /// take over, so a peer's clock may run that much fast without two writers.
    pub broker_lease_drift_margin_ms: u64,
    /// How long a joining or returning broker holds its lease before it takes ownership from
    /// live peers (`broker.ownership.settle.ms`): a flapping broker does not make ownership
    /// thrash. A dead broker's things move at once, whatever this is.
    pub broker_ownership_settle_ms: u64,
    /// Every `name=value` given, for DescribeConfigs.
    pub explicit: BTreeMap<String, String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            broker_id: 0,
            listener_settings: listeners::ListenerSettings {
                listeners: "PLAINTEXT://127.0.0.1:9092".into(),
                ..listeners::ListenerSettings::default()
            },
            advertised_listeners: vec![listeners::ListenerAddress {
                listener: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
            }],
            inter_broker_listener_name: "PLAINTEXT".into(),
            connection_failed_authentication_delay_ms: 100,
            quota_window_num: 11,
            quota_window_size_seconds: 1,
            authorizer: Default::default(),
            authorizer_class_name: String::new(),
            ssl: listeners::SslSettings {
                keystore_type: "PEM".into(),
                truststore_type: "PEM".into(),
                principal_mapping_rules: "DEFAULT".into(),
                ..Default::default()
            },
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
            cluster_id: "kaas-cluster".into(),
            log_dir: "./kaas-data".into(),
            auto_create_topics_enable: true,
            num_partitions: 1,
            default_replication_factor: 1,
            log_segment_bytes: 1 << 30,
            log_index_interval_bytes: 4096,
            log_retention_ms: 7 * 24 * 3600 * 1000,
            log_retention_bytes: -1,
            log_retention_check_interval_ms: 300_000,
            log_cleanup_policy: "delete".into(),
            log_roll_ms: 7 * 24 * 3600 * 1000,
            log_cleaner_enable: true,
            log_cleaner_threads: 1,
            log_cleaner_backoff_ms: 15_000,
            log_cleaner_dedupe_buffer_size: 128 << 20,
            log_cleaner_io_buffer_size: 512 << 10,
            log_cleaner_io_buffer_load_factor: 0.9,
            log_cleaner_io_max_bytes_per_second: f64::MAX,
            log_cleaner_min_cleanable_ratio: 0.5,
            log_cleaner_min_compaction_lag_ms: 0,
            log_cleaner_max_compaction_lag_ms: i64::MAX,
            log_cleaner_delete_retention_ms: 86_400_000,
            message_max_bytes: 1_048_588,
            socket_request_max_bytes: 104_857_600,
            sasl_server_max_receive_size: 524_288,
            connections_max_reauth_ms: 0,
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            max_connections_per_ip_overrides: Default::default(),
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            group_max_size: 1000,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            group_consumer_min_session_timeout_ms: 45_000,
            group_consumer_max_session_timeout_ms: 60_000,
            group_consumer_min_heartbeat_interval_ms: 5_000,
            group_consumer_max_heartbeat_interval_ms: 15_000,
            group_consumer_max_size: i32::MAX as usize,
            group_consumer_migration_policy: MigrationPolicy::Bidirectional,
            share_version: 3,
            errors_deadletterqueue_topic_name_prefix: "dlq.".into(),
            errors_deadletterqueue_auto_create_topics_enable: false,
            group_share_session_timeout_ms: 45_000,
            group_share_heartbeat_interval_ms: 5_000,
            group_share_max_size: 200,
            group_share_record_lock_duration_ms: 30_000,
            group_share_min_record_lock_duration_ms: 15_000,
            group_share_max_record_lock_duration_ms: 60_000,
            group_share_delivery_count_limit: 5,
            group_share_min_delivery_count_limit: 2,
            group_share_max_delivery_count_limit: 10,
            group_share_partition_max_record_locks: 2000,
            group_share_min_partition_max_record_locks: 100,
            group_share_max_partition_max_record_locks: 4000,
            group_share_max_share_sessions: 2000,
            max_request_partition_size_limit: 2000,
            delete_topic_enable: true,
            producer_id_expiration_ms: 86_400_000,
            transaction_max_timeout_ms: 900_000,
            transaction_cleanup_interval_ms: 10_000,
            transaction_version: 2,
            broker_session_timeout_ms: 9000,
            broker_heartbeat_interval_ms: 2000,
            broker_lease_drift_margin_ms: 1000,
            broker_ownership_settle_ms: 6000,
            explicit: BTreeMap::new(),
        }
    }
}

impl BrokerConfig {
    /// The advertised listeners, bound: `inter_broker` (one of them) is where peers reach
    /// this broker.
    pub fn advertise(&mut self, advertised: Vec<listeners::ListenerAddress>, inter_broker: &str) {
        let own =
            advertised.iter().find(|a| a.listener == inter_broker).expect("the inter-broker listener is advertised");
        (self.advertised_host, self.advertised_port) = (own.host.clone(), own.port);
        self.inter_broker_listener_name = inter_broker.to_string();
        self.advertised_listeners = advertised;
    }

    /// Applies one Kafka-named setting (`settings::SETTINGS`). Kafka settings that mean nothing
    /// here (`settings::IGNORED`) and unknown names are kept (DescribeConfigs shows them) but
    /// change nothing, so a Kafka properties file can be reused as it is.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        match settings::find(name) {
            Some(settings::Setting { set: Some(set), .. }) => set(self, value)?,
            Some(setting) => {
                let flag = match setting.change {
                    settings::Change::Flag(flag) => flag,
                    _ => "its flag",
                };
                tracing::warn!(name, "set by {flag}, not by a setting: ignored");
            }
            None => match settings::ignored(name) {
                _ if settings::read_by_name(name).is_some() => {}
                Some(why) => tracing::info!(name, "accepted, changes nothing: {why}"),
                None => tracing::warn!(name, "unknown configuration name: kept, but it changes nothing"),
            },
        }
        self.explicit.insert(name.to_string(), value.to_string());
        Ok(())
    }

    /// The `ssl.*` settings of one listener: the broker's, with the listener's own
    /// (`listener.name.<listener>.ssl.*`, the name in lower case) over them, as Apache reads them.
    pub fn ssl_for(&self, listener: &str) -> Result<listeners::SslSettings, String> {
        let prefix = format!("listener.name.{}.ssl.", listener.to_ascii_lowercase());
        let mut own = self.clone();
        for (name, value) in &self.explicit {
            let Some(rest) = name.strip_prefix(&prefix) else { continue };
            let setting = format!("ssl.{rest}");
            match settings::find(&setting) {
                Some(settings::Setting { set: Some(set), .. }) => {
                    set(&mut own, value).map_err(|e| format!("{name}: {e}"))?
                }
                _ => return Err(format!("{name}: {setting} is not an SSL setting kaas reads")),
            }
        }
        own.ssl.check().map_err(|e| format!("listener {listener}: {e}"))?;
        Ok(own.ssl)
    }

    /// Checks settings that constrain each other, once all are given.
    pub fn validate(&self) -> Result<(), String> {
        if self.broker_heartbeat_interval_ms == 0
            || self.broker_heartbeat_interval_ms * 2 > self.broker_session_timeout_ms
            || self.broker_lease_drift_margin_ms * 2 > self.broker_session_timeout_ms
        {
            return Err(
                "broker.heartbeat.interval.ms must be positive and at most half of broker.session.timeout.ms, \
                 and broker.lease.drift.margin.ms at most half of it"
                    .into(),
            );
        }
        Ok(())
    }

    /// Parses a Java properties file's `name=value` lines (`#`/`!` comments, blank lines).
    pub fn apply_properties(&mut self, text: &str) -> Result<(), String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some((name, value)) = line.split_once(['=', ':']) else {
                return Err(format!("line {}: expected name=value", n + 1));
            };
            self.set(name.trim(), value.trim())?;
        }
        Ok(())
    }

    /// The broker-level defaults of every topic config kaas understands, by topic config name.
    pub fn topic_defaults(&self) -> BTreeMap<&'static str, String> {
        let mut m = BTreeMap::new();
        m.insert("cleanup.policy", self.log_cleanup_policy.clone());
        m.insert("delete.retention.ms", self.log_cleaner_delete_retention_ms.to_string());
        m.insert("max.compaction.lag.ms", self.log_cleaner_max_compaction_lag_ms.to_string());
        m.insert("min.cleanable.dirty.ratio", self.log_cleaner_min_cleanable_ratio.to_string());
        m.insert("min.compaction.lag.ms", self.log_cleaner_min_compaction_lag_ms.to_string());
        m.insert("segment.ms", self.log_roll_ms.to_string());
        m.insert("compression.type", "producer".to_string());
        m.insert(DLQ_GROUP_ENABLE, "false".to_string());
        m.insert("index.interval.bytes", self.log_index_interval_bytes.to_string());
        m.insert("max.message.bytes", self.message_max_bytes.to_string());
        m.insert("message.timestamp.type", "CreateTime".to_string());
        let records = RecordPolicy::default();
        m.insert("message.timestamp.after.max.ms", records.timestamp_after_max_ms.to_string());
        m.insert("message.timestamp.before.max.ms", records.timestamp_before_max_ms.to_string());
        m.insert("min.insync.replicas", "1".to_string());
        m.insert("retention.bytes", self.log_retention_bytes.to_string());
        m.insert("retention.ms", self.log_retention_ms.to_string());
        m.insert("segment.bytes", self.log_segment_bytes.to_string());
        m
    }

    /// What a partition of a topic runs with: the topic's overrides on the broker defaults.
    pub fn partition_settings(&self, overrides: &BTreeMap<String, String>) -> PartitionSettings {
        let max_message_bytes = overrides.get("max.message.bytes").and_then(|v| v.parse::<i64>().ok());
        let log = self.log_config(overrides);
        PartitionSettings {
            log,
            // The broker's `log.cleanup.policy` counts too.
            records: RecordPolicy { compacted: log.cleanup.compact, ..record_policy(overrides) },
            max_message_bytes: max_message_bytes.unwrap_or(i64::from(self.message_max_bytes)).max(0) as usize,
            producer_id_expiration_ms: self.producer_id_expiration_ms,
            cleaner: self.cleaner(),
        }
    }

    /// This configuration with dynamic broker overrides applied (IncrementalAlterConfigs on
    /// the broker resource). Each name must be a setting the table marks `Change::Dynamic`.
    pub fn with_dynamic(&self, dynamic: &BTreeMap<String, String>) -> Result<BrokerConfig, String> {
        let mut out = self.clone();
        for (name, value) in dynamic {
            if !settings::find(name).is_some_and(|s| s.change == settings::Change::Dynamic) {
                return Err(format!("{name} cannot be updated dynamically; set it with --set and restart"));
            }
            out.set(name, value)?;
            out.explicit.remove(name);
        }
        Ok(out)
    }

    /// The log settings of a topic: its overrides on top of the broker defaults.
    pub fn log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        let get = |name: &str| overrides.get(name).and_then(|v| v.parse::<i64>().ok());
        LogConfig {
            segment_bytes: get("segment.bytes").map(|v| v.max(1024) as u64).unwrap_or(self.log_segment_bytes),
            index_interval_bytes: get("index.interval.bytes")
                .map(|v| v.max(0) as u64)
                .unwrap_or(self.log_index_interval_bytes),
            retention_ms: get("retention.ms").unwrap_or(self.log_retention_ms),
            retention_bytes: get("retention.bytes").unwrap_or(self.log_retention_bytes),
            segment_ms: get("segment.ms").unwrap_or(self.log_roll_ms),
            cleanup: CleanupPolicy::parse(overrides.get("cleanup.policy").unwrap_or(&self.log_cleanup_policy)),
            compaction: Compaction {
                min_cleanable_dirty_ratio: overrides
                    .get("min.cleanable.dirty.ratio")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(self.log_cleaner_min_cleanable_ratio),
                min_compaction_lag_ms: get("min.compaction.lag.ms").unwrap_or(self.log_cleaner_min_compaction_lag_ms),
                max_compaction_lag_ms: get("max.compaction.lag.ms").unwrap_or(self.log_cleaner_max_compaction_lag_ms),
                delete_retention_ms: get("delete.retention.ms").unwrap_or(self.log_cleaner_delete_retention_ms),
            },
        }
    }

    /// The broker's log cleaner, as its settings say.
    pub fn cleaner(&self) -> CleanerConfig {
        CleanerConfig {
            enable: self.log_cleaner_enable,
            threads: self.log_cleaner_threads,
            backoff_ms: self.log_cleaner_backoff_ms.max(1),
            dedupe_buffer_bytes: self.log_cleaner_dedupe_buffer_size,
            io_buffer_bytes: self.log_cleaner_io_buffer_size,
            load_factor: self.log_cleaner_io_buffer_load_factor.clamp(0.1, 0.95),
            max_bytes_per_second: self.log_cleaner_io_max_bytes_per_second,
        }
    }
}

/// What a partition checks in a producer's records (`partition::log::validate`), from its
/// topic's configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordPolicy {
    /// `cleanup.policy` includes `compact`: every record needs a key.
    pub compacted: bool,
    /// `message.timestamp.type=LogAppendTime`: the broker's time, not the producer's.
    pub log_append_time: bool,
    /// `message.timestamp.before.max.ms`: how far behind the broker's clock a timestamp may be.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far ahead of it.
    pub timestamp_after_max_ms: i64,
}

impl Default for RecordPolicy {
    /// Kafka 4's defaults: no compaction, CreateTime, any age, at most an hour ahead (KIP-1030).
    fn default() -> Self {
        RecordPolicy {
            compacted: false,
            log_append_time: false,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
        }
    }
}

/// A topic's record checks from its overrides (Kafka's defaults where it has none).
pub fn record_policy(overrides: &BTreeMap<String, String>) -> RecordPolicy {
    let defaults = RecordPolicy::default();
    let ms =
        |name: &str, default: i64| overrides.get(name).and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(default);
    RecordPolicy {
        compacted: overrides.get("cleanup.policy").is_some_and(|p| CleanupPolicy::parse(p).compact),
        log_append_time: overrides.get("message.timestamp.type").is_some_and(|t| t == "LogAppendTime"),
        timestamp_before_max_ms: ms("message.timestamp.before.max.ms", defaults.timestamp_before_max_ms),
        timestamp_after_max_ms: ms("message.timestamp.after.max.ms", defaults.timestamp_after_max_ms),
    }
}

/// The broker setting that gives a topic config its default, where the names differ.
pub fn broker_name_of(topic_config: &str) -> &str {
    match topic_config {
        "retention.ms" => "log.retention.ms",
        "retention.bytes" => "log.retention.bytes",
        "segment.bytes" => "log.segment.bytes",
        "index.interval.bytes" => "log.index.interval.bytes",
        "max.message.bytes" => "message.max.bytes",
        "cleanup.policy" => "log.cleanup.policy",
        "message.timestamp.type" => "log.message.timestamp.type",
        "segment.ms" => "log.roll.ms",
        "min.cleanable.dirty.ratio" => "log.cleaner.min.cleanable.ratio",
        "min.compaction.lag.ms" => "log.cleaner.min.compaction.lag.ms",
        "max.compaction.lag.ms" => "log.cleaner.max.compaction.lag.ms",
        "delete.retention.ms" => "log.cleaner.delete.retention.ms",
        other => other,
    }
}

/// A partition's settings: the log's, what it takes from producers, and the largest batch it
/// accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionSettings {
    pub log: LogConfig,
    pub records: RecordPolicy,
    pub max_message_bytes: usize,
    pub producer_id_expiration_ms: i64,
    pub cleaner: CleanerConfig,
}

/// Checks a topic config override's name and value; the error text goes to the client.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), String> {
    let numeric = |min: i64| -> Result<(), String> {
        match value.trim().parse::<i64>() {
            Ok(v) if v >= min => Ok(()),
            _ => Err(format!("Invalid value {value} for configuration {name}")),
        }
    };
    match name {
        "retention.ms" | "retention.bytes" => numeric(-1),
        "min.compaction.lag.ms" | "delete.retention.ms" => numeric(0),
        "max.compaction.lag.ms" => numeric(1),
        "min.cleanable.dirty.ratio" => match value.trim().parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(()),
            _ => Err(format!("Invalid value {value} for configuration {name}: Value must be between 0 and 1")),
        },
        "segment.bytes" => numeric(14),
        "index.interval.bytes"
        | "max.message.bytes"
        | "min.insync.replicas"
        | "segment.ms"
        | "message.timestamp.after.max.ms"
        | "message.timestamp.before.max.ms"
        | "flush.ms"
        | "flush.messages" => numeric(0),
        "cleanup.policy" => match value {
            "delete" | "compact" | "compact,delete" | "delete,compact" => Ok(()),
            _ => Err(format!("Invalid value {value} for configuration {name}")),
        },
        "message.timestamp.type" => match value {
            "CreateTime" | "LogAppendTime" => Ok(()),
            _ => Err(format!("Invalid value {value} for configuration {name}")),
        },
        "compression.type" => match value {
            "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd" => Ok(()),
            _ => Err(format!("Invalid value {value} for configuration {name}")),
        },
        DLQ_GROUP_ENABLE => match value.trim().to_lowercase().as_str() {
            "true" | "false" => Ok(()),
            _ => Err(format!("Invalid value {value} for configuration {name}")),
        },
        _ if KNOWN_TOPIC_CONFIGS.contains(&name) => Ok(()),
        _ => Err(format!("Unknown topic config name: {name}")),
    }
}

/// KIP-1191: a topic share groups may use as their dead-letter queue must say so.
pub const DLQ_GROUP_ENABLE: &str = "errors.deadletterqueue.group.enable";

/// Topic config names Apache Kafka accepts; kaas stores them even where it does not act on them.
const KNOWN_TOPIC_CONFIGS: &[&str] = &[
    "file.delete.delay.ms",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "message.downconversion.enable",
    "message.timestamp.difference.max.ms",
    "preallocate",
    "remote.storage.enable",
    "segment.index.bytes",
    "segment.jitter.ms",
    "unclean.leader.election.enable",
];

/// A partition log's settings (`partition::log`), from the topic's configs over the broker's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub index_interval_bytes: u64,
    /// -1: keep forever.
    pub retention_ms: i64,
    /// -1: no size limit.
    pub retention_bytes: i64,
    /// `segment.ms`: an active segment rolls at the append of a batch more than this younger
    /// than its first batch (record timestamps, as Apache measures it); the cleaner also rolls a
    /// quiet compacted partition's segment this old by the clock, so its records get cleaned.
    pub segment_ms: i64,
    pub cleanup: CleanupPolicy,
    pub compaction: Compaction,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            segment_ms: 7 * 24 * 3600 * 1000,
            cleanup: CleanupPolicy { delete: true, compact: false },
            compaction: Compaction::default(),
        }
    }
}

/// `cleanup.policy`: old segments deleted by `retention.*`, the log compacted, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    /// A validated value (`delete`, `compact`, both in either order).
    pub fn parse(value: &str) -> CleanupPolicy {
        let has = |p: &str| value.split(',').any(|v| v.trim() == p);
        CleanupPolicy { delete: has("delete"), compact: has("compact") }
    }
}

/// A compacted topic's settings, Apache's names and defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compaction {
    /// `min.cleanable.dirty.ratio`: the share of the cleanable log not yet cleaned that makes
    /// a pass worth its I/O.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a record stays uncompacted at least this long.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a record is compacted within this long, dirty ratio or not.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long tombstones (and transaction markers whose transaction
    /// has no records left) stay readable after their segment was cleaned.
    pub delete_retention_ms: i64,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 86_400_000,
        }
    }
}

/// The broker's log cleaner (`log.cleaner.*`). As Apache's, its memory and I/O settings are
/// the whole cleaner's: each of the `threads` passes that may run at once gets its share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanerConfig {
    pub enable: bool,
    /// `log.cleaner.threads`: how many partitions this broker cleans at once (0: none).
    pub threads: u32,
    /// `log.cleaner.backoff.ms`: how long a partition with nothing to clean waits to look again.
    pub backoff_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`: the offset maps' memory.
    pub dedupe_buffer_bytes: u64,
    /// `log.cleaner.io.buffer.size`: the read and write buffers' memory.
    pub io_buffer_bytes: u64,
    /// `log.cleaner.io.buffer.load.factor`: how full an offset map may get.
    pub load_factor: f64,
    /// `log.cleaner.io.max.bytes.per.second`: the cleaner's reads and writes, throttled.
    pub max_bytes_per_second: f64,
}

/// The least a pass reads at a time, whatever `log.cleaner.io.buffer.size` says (a read grows
/// to hold a whole batch anyway).
const CLEANER_READ_MIN: u64 = 128;

impl CleanerConfig {
    fn shares(&self) -> u64 {
        u64::from(self.threads.max(1))
    }

    /// One pass's offset map budget.
    pub fn map_bytes(&self) -> u64 {
        self.dedupe_buffer_bytes / self.shares()
    }

    /// How much one pass reads at a time: half its share of the I/O buffers, as Apache splits
    /// a thread's share between its read and write buffers (a cleaned copy is written as each
    /// read is cleaned, so the write never holds more than the read).
    pub fn read_bytes(&self) -> usize {
        (self.io_buffer_bytes / self.shares() / 2).max(CLEANER_READ_MIN) as usize
    }

    /// One pass's reads and writes per second: the limit is the whole cleaner's.
    pub fn pass_bytes_per_second(&self) -> f64 {
        self.max_bytes_per_second / self.shares() as f64
    }
}

impl Default for CleanerConfig {
    fn default() -> Self {
        BrokerConfig::default().cleaner()
    }
}

/// Apache's `group.consumer.migration.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    Disabled,
    Upgrade,
    Downgrade,
    Bidirectional,
}

impl MigrationPolicy {
    pub fn upgrades(self) -> bool {
        matches!(self, MigrationPolicy::Upgrade | MigrationPolicy::Bidirectional)
    }

    pub fn downgrades(self) -> bool {
        matches!(self, MigrationPolicy::Downgrade | MigrationPolicy::Bidirectional)
    }
}

impl std::str::FromStr for MigrationPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "disabled" => Ok(MigrationPolicy::Disabled),
            "upgrade" => Ok(MigrationPolicy::Upgrade),
            "downgrade" => Ok(MigrationPolicy::Downgrade),
            "bidirectional" => Ok(MigrationPolicy::Bidirectional),
            other => Err(format!("{other:?} is not one of disabled, upgrade, downgrade, bidirectional")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_set_fields_and_properties_files_parse() {
        let mut c = BrokerConfig::default();
        c.apply_properties("# comment\nnum.partitions=6\n\nlog.retention.hours = 1\nunknown.thing=1\n").unwrap();
        assert_eq!(c.num_partitions, 6);
        assert_eq!(c.log_retention_ms, 3_600_000);
        assert!(c.set("num.partitions", "zero").is_err());
        let overrides = BTreeMap::from([("segment.bytes".to_string(), "2048".to_string())]);
        assert_eq!(c.log_config(&overrides).segment_bytes, 2048);
        assert!(validate_topic_config("retention.ms", "-2").is_err());
        assert!(validate_topic_config("no.such", "1").is_err());
        assert!(c.set("transaction.abort.timed.out.transaction.cleanup.interval.ms", "0").is_err());
        assert!(c.set("transaction.version", "3").is_err(), "no such level of the feature");
        assert!(c.set("group.consumer.migration.policy", "sideways").is_err());
        c.set("log.flush.interval.messages", "1").unwrap();
        assert_eq!(c.explicit["log.flush.interval.messages"], "1", "ignored settings are still reported");
    }

    #[test]
    fn a_listener_s_own_ssl_settings_override_the_broker_s() {
        let mut c = BrokerConfig::default();
        c.set("ssl.keystore.location", "/etc/kaas/broker.pem").unwrap();
        c.set("ssl.client.auth", "none").unwrap();
        c.set("listener.name.internal.ssl.keystore.location", "/etc/kaas/internal.pem").unwrap();
        c.set("listener.name.internal.ssl.client.auth", "required").unwrap();
        let internal = c.ssl_for("INTERNAL").unwrap();
        assert_eq!(internal.keystore_location, "/etc/kaas/internal.pem");
        assert_eq!(internal.client_auth, listeners::ClientAuth::Required);
        let external = c.ssl_for("EXTERNAL").unwrap();
        assert_eq!(external.keystore_location, "/etc/kaas/broker.pem");
        assert_eq!(external.client_auth, listeners::ClientAuth::None);
        c.set("listener.name.internal.ssl.no.such.thing", "x").unwrap();
        assert!(c.ssl_for("INTERNAL").is_err(), "an unknown listener SSL setting is refused");
    }

    /// Every setting reads back what it was given, so DescribeConfigs reports what is in force.
    #[test]
    fn every_setting_reads_back_what_it_was_given() {
        for s in settings::SETTINGS {
            let Some(set) = s.set else { continue };
            let mut c = BrokerConfig::default();
            let given = match (s.get)(&c).as_str() {
                "true" => "false".to_string(),
                "false" => "true".to_string(),
                // A feature level: 0 to 2.
                _ if s.name == "transaction.version" || s.name == "share.version" => "1".to_string(),
                // One of its names.
                _ if s.name == "group.consumer.migration.policy" => "downgrade".to_string(),
                _ if s.name == "ssl.client.auth" => "required".to_string(),
                _ if s.name == "authorizer.class.name" => settings::AUTHORIZERS[0].to_string(),
                _ if s.name == "super.users" => "User:admin;User:ops".to_string(),
                _ if s.name == "max.connections.per.ip.overrides" => "10.0.0.1:3,::1:0".to_string(),
                _ if s.name == "log.cleanup.policy" => "compact,delete".to_string(),
                v if v.parse::<i64>().is_ok() => "7".to_string(),
                v if v.parse::<f64>().is_ok() => "0.25".to_string(),
                _ => "other".to_string(),
            };
            set(&mut c, &given).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            // Read as given, reported as in force once the listeners are bound (`advertise`).
            let bound_at_start = match s.name {
                "advertised.listeners" => Some(c.listener_settings.advertised_listeners.clone()),
                "inter.broker.listener.name" => Some(c.listener_settings.inter_broker_listener_name.clone()),
                _ => None,
            };
            match bound_at_start {
                Some(read) => assert_eq!(read, Some(given), "{}", s.name),
                None => assert_eq!((s.get)(&c), given, "{}", s.name),
            }
        }
        let names: Vec<&str> = settings::SETTINGS.iter().map(|s| s.name).collect();
        // What IncrementalAlterConfigs may change at run time: the defaults of every topic's log.
        let dynamic: Vec<&str> =
            settings::SETTINGS.iter().filter(|s| s.change == settings::Change::Dynamic).map(|s| s.name).collect();
        let want = [
            "log.segment.bytes",
            "log.index.interval.bytes",
            "log.retention.ms",
            "log.retention.bytes",
            "log.cleanup.policy",
            "log.roll.ms",
            "log.cleaner.threads",
            "log.cleaner.backoff.ms",
            "log.cleaner.dedupe.buffer.size",
            "log.cleaner.io.buffer.size",
            "log.cleaner.io.buffer.load.factor",
            "log.cleaner.io.max.bytes.per.second",
            "log.cleaner.min.cleanable.ratio",
            "log.cleaner.min.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
            "log.cleaner.delete.retention.ms",
            "message.max.bytes",
        ];
        assert_eq!(dynamic, want);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "each name once");
    }
}
