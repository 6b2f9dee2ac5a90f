//! Group configs (IncrementalAlterConfigs and DescribeConfigs on the GROUP resource), with
//! Apache 4.4's names: what a group may set over the broker's defaults, and the bounds the
//! broker puts on it. Share groups read theirs when their share partitions serve them.

use super::BrokerConfig;

/// How a group config's value is checked.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An integer within the bounds the broker gives.
    Int(fn(&BrokerConfig) -> (i64, i64)),
    OneOf(&'static [&'static str]),
    Bool,
    /// A topic name, or empty; never an internal topic's (`__`).
    TopicOrEmpty,
}

/// One group config: its name, how it is checked, its default (the broker's), what it means.
pub struct GroupConfig {
    pub name: &'static str,
    kind: Kind,
    pub default: fn(&BrokerConfig) -> String,
    pub doc: &'static str,
}

pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const SHARE_DELIVERY_COUNT_LIMIT: &str = "share.delivery.count.limit";
pub const SHARE_PARTITION_MAX_RECORD_LOCKS: &str = "share.partition.max.record.locks";
pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
pub const ERRORS_DEADLETTERQUEUE_TOPIC_NAME: &str = "errors.deadletterqueue.topic.name";
pub const ERRORS_DEADLETTERQUEUE_COPY_RECORD_ENABLE: &str = "errors.deadletterqueue.copy.record.enable";

pub const GROUP_CONFIGS: &[GroupConfig] = &[
    GroupConfig {
        name: SHARE_AUTO_OFFSET_RESET,
        kind: Kind::OneOf(&["latest", "earliest"]),
        default: |_| "latest".into(),
        doc: "Where a share group starts in a partition it has never consumed: `latest` (records produced from then on) or `earliest` (every record the log holds).",
    },
    GroupConfig {
        name: SHARE_ISOLATION_LEVEL,
        kind: Kind::OneOf(&["read_uncommitted", "read_committed"]),
        default: |_| "read_uncommitted".into(),
        doc: "`read_committed`: a share group is delivered no record of an aborted transaction, nor any past the last stable offset.",
    },
    GroupConfig {
        name: SHARE_RECORD_LOCK_DURATION_MS,
        kind: Kind::Int(|c| {
            (i64::from(c.group_share_min_record_lock_duration_ms), i64::from(c.group_share_max_record_lock_duration_ms))
        }),
        default: |c| c.group_share_record_lock_duration_ms.to_string(),
        doc: "How long a member holds the records it acquired before they are delivered again.",
    },
    GroupConfig {
        name: SHARE_DELIVERY_COUNT_LIMIT,
        kind: Kind::Int(|c| {
            (i64::from(c.group_share_min_delivery_count_limit), i64::from(c.group_share_max_delivery_count_limit))
        }),
        default: |c| c.group_share_delivery_count_limit.to_string(),
        doc: "How often a record is delivered before it is archived.",
    },
    GroupConfig {
        name: SHARE_PARTITION_MAX_RECORD_LOCKS,
        kind: Kind::Int(|c| {
            (
                i64::from(c.group_share_min_partition_max_record_locks),
                i64::from(c.group_share_max_partition_max_record_locks),
            )
        }),
        default: |c| c.group_share_partition_max_record_locks.to_string(),
        doc: "How many records of one share partition may be in flight at once.",
    },
    GroupConfig {
        name: ERRORS_DEADLETTERQUEUE_TOPIC_NAME,
        kind: Kind::TopicOrEmpty,
        default: |_| String::new(),
        doc: "KIP-1191: the share group's dead-letter queue: a record it rejects, or one delivered as often as `share.delivery.count.limit` allows, is written there (headers `__dlq.errors.topic`, `.partition`, `.offset`, `.group`, `.delivery.count`, `.message`) before it is archived. The topic must have `errors.deadletterqueue.group.enable=true` and the broker's `errors.deadletterqueue.topic.name.prefix`. Empty: no queue.",
    },
    GroupConfig {
        name: ERRORS_DEADLETTERQUEUE_COPY_RECORD_ENABLE,
        kind: Kind::Bool,
        default: |_| "false".into(),
        doc: "KIP-1191: whether the dead-letter queue gets a copy of the record (key, value and headers) beside the context headers, or the context headers alone.",
    },
    GroupConfig {
        name: "share.session.timeout.ms",
        kind: Kind::Int(|c| (1, i64::from(c.group_share_session_timeout_ms.max(1)) * 4)),
        default: |c| c.group_share_session_timeout_ms.to_string(),
        doc: "Accepted and reported; share group members time out by the broker's `group.share.session.timeout.ms`.",
    },
    GroupConfig {
        name: "share.heartbeat.interval.ms",
        kind: Kind::Int(|c| (1, i64::from(c.group_share_heartbeat_interval_ms.max(1)) * 4)),
        default: |c| c.group_share_heartbeat_interval_ms.to_string(),
        doc: "Accepted and reported; share group members heartbeat by the broker's `group.share.heartbeat.interval.ms`.",
    },
    GroupConfig {
        name: "share.renew.acknowledge.enable",
        kind: Kind::Bool,
        default: |_| "true".into(),
        doc: "Accepted and reported; RENEW acknowledgements (KIP-1222) are always served.",
    },
    GroupConfig {
        name: CONSUMER_SESSION_TIMEOUT_MS,
        kind: Kind::Int(|c| {
            (i64::from(c.group_consumer_min_session_timeout_ms), i64::from(c.group_consumer_max_session_timeout_ms))
        }),
        default: |c| c.group_consumer_session_timeout_ms.to_string(),
        doc: "How long a consumer-protocol member may go without a heartbeat before it is removed.",
    },
    GroupConfig {
        name: CONSUMER_HEARTBEAT_INTERVAL_MS,
        kind: Kind::Int(|c| {
            (
                i64::from(c.group_consumer_min_heartbeat_interval_ms),
                i64::from(c.group_consumer_max_heartbeat_interval_ms),
            )
        }),
        default: |c| c.group_consumer_heartbeat_interval_ms.to_string(),
        doc: "The interval consumer-protocol members are told to heartbeat at.",
    },
];

/// A group's integer config: the group's own value (the GROUP resource) where it set one, else
/// the broker's `default`.
pub fn int_of(own: Option<&std::collections::BTreeMap<String, String>>, name: &str, default: i32) -> i32 {
    own.and_then(|g| g.get(name)).and_then(|v| v.trim().parse::<i32>().ok()).unwrap_or(default)
}

pub fn find(name: &str) -> Option<&'static GroupConfig> {
    GROUP_CONFIGS.iter().find(|g| g.name == name)
}

/// Whether `value` may be set for group config `name` on a broker configured as `broker`.
pub fn validate(name: &str, value: &str, broker: &BrokerConfig) -> Result<(), String> {
    let config = find(name).ok_or_else(|| format!("Unknown group config name: {name}"))?;
    match config.kind {
        Kind::Int(bounds) => {
            let (min, max) = bounds(broker);
            let v: i64 = value.trim().parse().map_err(|_| format!("Invalid value {value} for configuration {name}"))?;
            if !(min..=max).contains(&v) {
                return Err(format!(
                    "Invalid value {value} for configuration {name}: Value must be between {min} and {max}"
                ));
            }
        }
        Kind::OneOf(values) => {
            if !values.contains(&value.trim().to_lowercase().as_str()) {
                return Err(format!(
                    "Invalid value {value} for configuration {name}: String must be one of: {}",
                    values.join(", ")
                ));
            }
        }
        Kind::TopicOrEmpty => {
            if value.starts_with("__") {
                return Err(format!("{name}: DLQ topic name must not start with '__'"));
            }
        }
        Kind::Bool => {
            if !matches!(value.trim().to_lowercase().as_str(), "true" | "false") {
                return Err(format!(
                    "Invalid value {value} for configuration {name}: Expected value to be either true or false"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_configs_are_checked_against_the_brokers_bounds() {
        let broker = BrokerConfig::default();
        assert_eq!(validate(SHARE_RECORD_LOCK_DURATION_MS, "20000", &broker), Ok(()));
        assert!(
            validate(SHARE_RECORD_LOCK_DURATION_MS, "1000", &broker).is_err(),
            "below group.share.min.record.lock.duration.ms"
        );
        assert!(validate(SHARE_DELIVERY_COUNT_LIMIT, "11", &broker).is_err());
        assert_eq!(validate(SHARE_AUTO_OFFSET_RESET, "earliest", &broker), Ok(()));
        assert!(validate(SHARE_ISOLATION_LEVEL, "serializable", &broker).is_err());
        assert!(validate("share.no.such.thing", "1", &broker).is_err());
    }
}
