//! Client quotas on real brokers, request by request: AlterClientQuotas and
//! DescribeClientQuotas answer as Apache does, a producer or consumer over its quota is told
//! `throttle_time_ms` and its connection muted for that long, and a quota altered on one
//! broker binds on another. The windows are shortened (2 samples of 1 s) so throttles are
//! seconds long.

mod common;

use std::time::{Duration, Instant};

use common::Kaas;
use common::wire::{Wire, batch_of};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const INVALID_REQUEST: i16 = 42;
const UNSUPPORTED_VERSION: i16 = 35;
const WINDOWS: [&str; 2] = ["quota.window.num=2", "quota.window.size.seconds=1"];

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// AlterClientQuotas of one entity; its error code.
fn alter(wire: &mut Wire, entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)], validate_only: bool) -> i16 {
    use alter_client_quotas_request::{EntityData, EntryData, OpData};
    let entry = EntryData::default()
        .with_entity(
            entity
                .iter()
                .map(|(t, n)| EntityData::default().with_entity_type(s(t)).with_entity_name(n.map(s)))
                .collect(),
        )
        .with_ops(
            ops.iter()
                .map(|(k, v)| OpData::default().with_key(s(k)).with_value(v.unwrap_or(0.0)).with_remove(v.is_none()))
                .collect(),
        );
    let request = AlterClientQuotasRequest::default().with_entries(vec![entry]).with_validate_only(validate_only);
    let answer: AlterClientQuotasResponse = wire.call(ApiKey::AlterClientQuotas, 1, &request);
    assert_eq!(answer.entries.len(), 1);
    answer.entries[0].error_code
}

/// DescribeClientQuotas: the error code, and each entity (as `type=name` pairs, `<default>`
/// for a default) with its quotas.
type Described = (i16, Vec<(Vec<String>, Vec<(String, f64)>)>);

fn describe(wire: &mut Wire, components: &[(&str, i8, Option<&str>)], strict: bool) -> Described {
    use describe_client_quotas_request::ComponentData;
    let request = DescribeClientQuotasRequest::default()
        .with_components(
            components
                .iter()
                .map(|(t, m, n)| {
                    ComponentData::default().with_entity_type(s(t)).with_match_type(*m).with_match(n.map(s))
                })
                .collect(),
        )
        .with_strict(strict);
    let answer: DescribeClientQuotasResponse = wire.call(ApiKey::DescribeClientQuotas, 1, &request);
    let entries = answer
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let entity = e
                .entity
                .iter()
                .map(|c| format!("{}={}", c.entity_type, c.entity_name.as_deref().unwrap_or("<default>")))
                .collect();
            (entity, e.values.iter().map(|v| (v.key.to_string(), v.value)).collect())
        })
        .collect();
    (answer.error_code, entries)
}

fn create_topic(wire: &mut Wire, topic: &str) {
    let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![
        CreatableTopic::default().with_name(TopicName(s(topic))).with_num_partitions(1).with_replication_factor(1),
    ]);
    let answer: CreateTopicsResponse = wire.call(ApiKey::CreateTopics, 5, &request);
    assert_eq!(answer.topics[0].error_code, 0, "create {topic}");
}

/// Produces `records` (the batch) to partition 0; the error code and throttle time.
fn produce(wire: &mut Wire, topic: &str, records: bytes::Bytes) -> (i16, i32) {
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(records))]),
    ]);
    let answer: ProduceResponse = wire.call(ApiKey::Produce, 9, &request);
    (answer.responses[0].partition_responses[0].error_code, answer.throttle_time_ms)
}

/// Fetches partition 0 from `offset`; the record bytes answered and the throttle time.
fn fetch(wire: &mut Wire, topic: &str, offset: i64) -> (usize, i32) {
    let request = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![
        FetchTopic::default().with_topic(TopicName(s(topic))).with_partitions(vec![
            FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20),
        ]),
    ]);
    let answer: FetchResponse = wire.call(ApiKey::Fetch, 12, &request);
    let bytes =
        answer.responses.iter().flat_map(|t| &t.partitions).map(|p| p.records.as_ref().map_or(0, |r| r.len())).sum();
    (bytes, answer.throttle_time_ms)
}

/// How long a cheap request takes on `wire`: a muted connection reads it only once unmuted.
fn next_request_waits(wire: &mut Wire) -> Duration {
    let started = Instant::now();
    let _: MetadataResponse = wire.call(ApiKey::Metadata, 9, &MetadataRequest::default().with_topics(Some(vec![])));
    started.elapsed()
}

#[test]
fn quotas_are_altered_and_described_as_apache_does() {
    let kaas = Kaas::start("quotas-admin", &[]);
    let mut wire = Wire::connect(&kaas.bootstrap());
    let slow = [("client-id", Some("slow"))];
    assert_eq!(alter(&mut wire, &slow, &[("producer_byte_rate", Some(1024.0))], false), 0);
    assert_eq!(alter(&mut wire, &[("user", None)], &[("request_percentage", Some(12.5))], false), 0);
    assert_eq!(
        alter(
            &mut wire,
            &[("user", Some("alice")), ("client-id", None)],
            &[("consumer_byte_rate", Some(2048.0))],
            false
        ),
        0
    );
    // Refused as Apache's controller refuses them, and nothing changed.
    for (entity, ops) in [
        (&slow[..], &[("producer_byte_rate", Some(0.0))][..]),
        (&slow[..], &[("producer_byte_rate", Some(10.5))][..]),
        (&slow[..], &[("no_such_quota", Some(1.0))][..]),
        (&slow[..], &[("connection_creation_rate", Some(1.0))][..]),
        (&slow[..], &[("producer_byte_rate", Some(1.0)), ("producer_byte_rate", None)][..]),
        (&[("group", Some("g"))][..], &[("producer_byte_rate", Some(1.0))][..]),
        (&[("user", Some(""))][..], &[("producer_byte_rate", Some(1.0))][..]),
        (&[("ip", Some("10.0.0.1")), ("user", None)][..], &[("producer_byte_rate", Some(1.0))][..]),
        (&[][..], &[("producer_byte_rate", Some(1.0))][..]),
    ] {
        assert_eq!(alter(&mut wire, entity, ops, false), INVALID_REQUEST, "{entity:?} {ops:?}");
    }
    // validate_only checks and stores nothing.
    assert_eq!(alter(&mut wire, &slow, &[("producer_byte_rate", Some(1.0))], true), 0);
    assert_eq!(alter(&mut wire, &[("ip", Some("10.0.0.1"))], &[("connection_creation_rate", Some(5.0))], true), 0);

    let exact = describe(&mut wire, &[("client-id", 0, Some("slow"))], false);
    assert_eq!(exact, (0, vec![(vec!["client-id=slow".into()], vec![("producer_byte_rate".into(), 1024.0)])]));
    let default_user = describe(&mut wire, &[("user", 1, None)], true);
    assert_eq!(default_user, (0, vec![(vec!["user=<default>".into()], vec![("request_percentage".into(), 12.5)])]));
    let (code, users) = describe(&mut wire, &[("user", 2, None)], false);
    assert_eq!((code, users.len()), (0, 2), "{users:?}");
    assert_eq!(describe(&mut wire, &[], false).1.len(), 3);
    assert_eq!(describe(&mut wire, &[("group", 2, None)], false).0, UNSUPPORTED_VERSION);
    assert_eq!(describe(&mut wire, &[("user", 0, None)], false).0, INVALID_REQUEST);
    assert_eq!(describe(&mut wire, &[("ip", 2, None), ("user", 2, None)], false).0, INVALID_REQUEST);

    // Removing the last quota of an entity removes the entity.
    assert_eq!(alter(&mut wire, &slow, &[("producer_byte_rate", None)], false), 0);
    assert_eq!(describe(&mut wire, &[("client-id", 0, Some("slow"))], false), (0, vec![]));
    assert_eq!(describe(&mut wire, &[], false).1.len(), 2);
}

#[test]
fn a_producer_over_its_quota_is_throttled_and_muted() {
    let kaas = Kaas::with_metrics("quotas-produce", &WINDOWS);
    let mut admin = Wire::connect(&kaas.bootstrap());
    create_topic(&mut admin, "metered");
    assert_eq!(alter(&mut admin, &[("client-id", Some("slow"))], &[("producer_byte_rate", Some(10_240.0))], false), 0);

    // 30 KiB against 10 KiB/s over a 1 s window: throttled for about 2 s.
    let mut slow = Wire::connect(&kaas.bootstrap()).with_client_id("slow");
    let (code, throttle_ms) = produce(&mut slow, "metered", batch_of(30, 1024));
    assert_eq!(code, 0, "the records are appended all the same");
    assert!((1500..=2500).contains(&throttle_ms), "throttle_time_ms {throttle_ms}");
    let waited = next_request_waits(&mut slow);
    assert!(waited >= Duration::from_millis(throttle_ms as u64 - 200), "muted for {waited:?} of {throttle_ms} ms");

    // Another client id has no quota, and is neither throttled nor muted.
    let mut fast = Wire::connect(&kaas.bootstrap()).with_client_id("fast");
    assert_eq!(produce(&mut fast, "metered", batch_of(30, 1024)), (0, 0));
    assert!(next_request_waits(&mut fast) < Duration::from_millis(1000));

    let scrape = common::get(kaas.metrics_port.expect("metrics"), "/metrics");
    let throttles = common::sample(&scrape, r#"kaas_throttles_total{quota="producer_byte_rate"}"#);
    assert_eq!(throttles, Some(1.0), "{scrape}");
    let throttled_ms = common::sample(&scrape, r#"kaas_throttle_time_milliseconds_total{quota="producer_byte_rate"}"#);
    assert_eq!(throttled_ms, Some(f64::from(throttle_ms)), "{scrape}");
    assert_eq!(common::sample(&scrape, "kaas_client_quota_entities"), Some(1.0), "{scrape}");
}

#[test]
fn a_consumer_over_its_quota_is_answered_empty_and_throttled() {
    let kaas = Kaas::start("quotas-fetch", &WINDOWS);
    let mut admin = Wire::connect(&kaas.bootstrap());
    create_topic(&mut admin, "metered");
    for _ in 0..20 {
        assert_eq!(produce(&mut admin, "metered", batch_of(1, 400)), (0, 0));
    }
    assert_eq!(alter(&mut admin, &[("client-id", Some("reader"))], &[("consumer_byte_rate", Some(2048.0))], false), 0);

    let mut reader = Wire::connect(&kaas.bootstrap()).with_client_id("reader");
    // The first fetch asks for no more than the quota's window allows (2 KiB), so it is not
    // throttled; the second one at once is over the rate, and is answered empty.
    let (bytes, throttle_ms) = fetch(&mut reader, "metered", 0);
    assert!(bytes > 0 && bytes <= 2048 + 512, "first fetch: {bytes} bytes");
    assert_eq!(throttle_ms, 0);
    let (bytes, throttle_ms) = fetch(&mut reader, "metered", 0);
    assert_eq!(bytes, 0, "a throttled fetch answers no records");
    assert!(throttle_ms > 200, "throttle_time_ms {throttle_ms}");
    let waited = next_request_waits(&mut reader);
    assert!(waited >= Duration::from_millis(throttle_ms as u64 - 200), "muted for {waited:?} of {throttle_ms} ms");
}

#[test]
fn a_quota_altered_on_one_broker_binds_on_another() {
    let brokers = Kaas::cluster("quotas-cluster", 2, &WINDOWS);
    let mut first = Wire::connect(&brokers[0].bootstrap());
    create_topic(&mut first, "metered");
    assert_eq!(alter(&mut first, &[("client-id", Some("slow"))], &[("producer_byte_rate", Some(10_240.0))], false), 0);
    let mut second = Wire::connect(&brokers[1].bootstrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while describe(&mut second, &[("client-id", 0, Some("slow"))], false).1.is_empty() {
        assert!(Instant::now() < deadline, "the quota never reached the second broker");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Whichever broker owns the partition, the request's bytes count on the one it came to.
    let mut slow = Wire::connect(&brokers[1].bootstrap()).with_client_id("slow");
    let (_, throttle_ms) = produce(&mut slow, "metered", batch_of(30, 1024));
    assert!(throttle_ms >= 1500, "throttle_time_ms {throttle_ms}");
}
