//! The Prometheus endpoint (`--metrics`): what a scrape shows after real requests.

mod common;

use std::time::{Duration, Instant};

use common::wire::Wire;
use common::{Kaas, get, sample};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

#[test]
fn a_scrape_counts_requests_connections_and_owned_partitions() {
    let kaas = Kaas::with_metrics("metrics", &[]);
    let port = kaas.metrics_port.expect("metrics");
    let mut wire = Wire::connect(&kaas.bootstrap());
    let create = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("scraped")))
            .with_num_partitions(3)
            .with_replication_factor(1),
    ]);
    let created: CreateTopicsResponse = wire.call(ApiKey::CreateTopics, 5, &create);
    assert_eq!(created.topics[0].error_code, 0);
    for _ in 0..2 {
        let _: ApiVersionsResponse = wire.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let scrape = loop {
        let answer = get(port, "/metrics");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        if sample(&answer, "kaas_partitions_owned") == Some(3.0) || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(sample(&scrape, r#"kaas_requests_total{api="CreateTopics"}"#), Some(1.0), "{scrape}");
    assert_eq!(sample(&scrape, r#"kaas_requests_total{api="ApiVersions"}"#), Some(2.0), "{scrape}");
    assert_eq!(sample(&scrape, "kaas_partitions_owned"), Some(3.0), "{scrape}");
    assert_eq!(sample(&scrape, "kaas_topics"), Some(1.0));
    assert_eq!(sample(&scrape, "kaas_lease_valid"), Some(1.0));
    assert!(sample(&scrape, "kaas_connections_open").is_some_and(|n| n >= 1.0), "{scrape}");
    assert!(sample(&scrape, "kaas_network_received_bytes_total").is_some_and(|n| n > 0.0), "{scrape}");
    assert!(scrape.contains("# TYPE kaas_requests counter"), "{scrape}");
    assert!(get(port, "/other").starts_with("HTTP/1.1 404"), "only /metrics is served");
}

/// Real work moves the named series: produce and fetch bytes per topic, the request
/// histograms and error counts, syncs and group commits, claims, the lease, an open
/// transaction with its LSO lag, and a group's lag; and every family of the catalogue is shown.
#[test]
fn a_workload_moves_the_named_series() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let kaas = Kaas::with_metrics("metrics-workload", &[]);
    let port = kaas.metrics_port.expect("metrics");
    let mut wire = Wire::connect(&kaas.bootstrap());
    let s = StrBytes::from_static_str;
    let create = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default().with_name(TopicName(s("work"))).with_num_partitions(2).with_replication_factor(1),
    ]);
    let created: CreateTopicsResponse = wire.call(ApiKey::CreateTopics, 5, &create);
    assert_eq!(created.topics[0].error_code, 0);
    let produce = |partition: i32, records: bytes::Bytes, transactional_id: Option<&'static str>| {
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
            .with_topic_data(vec![TopicProduceData::default().with_name(TopicName(s("work"))).with_partition_data(
                vec![PartitionProduceData::default().with_index(partition).with_records(Some(records))],
            )])
    };
    let records = common::wire::batch_of(10, 100);
    let record_bytes = records.len() as f64;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer: ProduceResponse = wire.call(ApiKey::Produce, 9, &produce(0, records.clone(), None));
        match answer.responses[0].partition_responses[0].error_code {
            0 => break,
            code if Instant::now() > deadline => panic!("produce: error {code}"),
            _ => std::thread::sleep(Duration::from_millis(100)), // the partitions are being claimed
        }
    }
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![
        FetchTopic::default().with_topic(TopicName(s("work"))).with_partitions(vec![
            FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20),
        ]),
    ]);
    let fetched: FetchResponse = wire.call(ApiKey::Fetch, 12, &fetch);
    assert_eq!(fetched.responses[0].partitions[0].high_watermark, 10);
    // A group that committed offset 4 of 10: its lag is 6.
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("lagging")))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_topics(vec![OffsetCommitRequestTopic::default().with_name(TopicName(s("work"))).with_partitions(vec![
            OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(4),
        ])]);
    let committed: OffsetCommitResponse = wire.call(ApiKey::OffsetCommit, 8, &commit);
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);
    // A transaction left open with 5 records in partition 1: its LSO lags by 5.
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s("open-txn"))))
        .with_transaction_timeout_ms(600_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let producer = loop {
        let answer: InitProducerIdResponse = wire.call(ApiKey::InitProducerId, 4, &init);
        match answer.error_code {
            0 => break (answer.producer_id.0, answer.producer_epoch),
            code if Instant::now() > deadline => panic!("InitProducerId: error {code}"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s("open-txn")))
        .with_v3_and_below_producer_id(ProducerId(producer.0))
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default().with_name(TopicName(s("work"))).with_partitions(vec![1]),
        ]);
    let added: AddPartitionsToTxnResponse = wire.call(ApiKey::AddPartitionsToTxn, 3, &add);
    assert_eq!(added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, 0);
    let txn_batch = common::wire::batch(producer, 0, 5, true);
    let answer: ProduceResponse = wire.call(ApiKey::Produce, 9, &produce(1, txn_batch.clone(), Some("open-txn")));
    assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);
    // An error answered: a topic that does not exist.
    let unknown = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        ListOffsetsTopic::default()
            .with_name(TopicName(s("nowhere")))
            .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)]),
    ]);
    let listed: ListOffsetsResponse = wire.call(ApiKey::ListOffsets, 7, &unknown);
    assert_eq!(listed.topics[0].partitions[0].error_code, 3);

    let scrape = get(port, "/metrics");
    let sample_of = |name: &str| sample(&scrape, name).unwrap_or_else(|| panic!("no sample {name}:\n{scrape}"));
    for family in kaas_core::metrics::CATALOGUE {
        let kind = family.kind.name();
        assert!(scrape.contains(&format!("# TYPE {} {kind}", family.name)), "{} missing:\n{scrape}", family.name);
    }
    let produced = record_bytes + txn_batch.len() as f64;
    assert_eq!(sample_of(r#"kaas_topic_received_bytes_total{topic="work"}"#), produced);
    assert_eq!(sample_of(r#"kaas_topic_sent_bytes_total{topic="work"}"#), record_bytes);
    assert!(sample_of(r#"kaas_request_duration_seconds_count{api="Produce",version="9"}"#) >= 2.0);
    assert_eq!(sample_of(r#"kaas_request_duration_seconds_count{api="Fetch",version="12"}"#), 1.0);
    assert_eq!(sample_of(r#"kaas_request_duration_seconds_bucket{le="+Inf",api="Fetch",version="12"}"#), 1.0);
    assert_eq!(sample_of(r#"kaas_request_errors_total{api="ListOffsets",error="UnknownTopicOrPartition"}"#), 1.0);
    assert!(sample_of("kaas_log_flush_duration_seconds_count") >= 2.0);
    assert!(sample_of("kaas_group_commit_appends_count") >= 2.0);
    assert!(sample_of("kaas_group_commit_appends_sum") >= 2.0);
    assert_eq!(sample_of(r#"kaas_owned{kind="partition"}"#), 2.0);
    assert!(sample_of(r#"kaas_ownership_claims_total{kind="partition"}"#) >= 2.0);
    assert!(sample_of(r#"kaas_owned{kind="group"}"#) >= 1.0);
    assert!(sample_of(r#"kaas_owned{kind="txn_slot"}"#) >= 1.0);
    assert!(sample_of("kaas_lease_renewals_total") >= 1.0);
    assert_eq!(sample_of("kaas_lease_lapses_total"), 0.0);
    assert_eq!(sample_of("kaas_transactions_open"), 1.0);
    assert_eq!(sample_of(r#"kaas_partition_lso_lag{topic="work",partition="1"}"#), 5.0);
    assert_eq!(sample(&scrape, r#"kaas_partition_lso_lag{topic="work",partition="0"}"#), None, "no lag, no series");
    assert_eq!(sample_of(r#"kaas_consumer_group_lag{group="lagging"}"#), 6.0);
}

/// On three brokers a group's lag is shown by its coordinator alone, with the high watermarks
/// of partitions its peers own asked of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_lag_is_shown_by_its_coordinator_across_brokers() {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::{Offset, TopicPartitionList};
    const PARTITIONS: i32 = 6;
    let settings = [
        "broker.session.timeout.ms=3000",
        "broker.heartbeat.interval.ms=500",
        "broker.lease.drift.margin.ms=500",
        "broker.ownership.settle.ms=1000",
        "num.partitions=6",
    ];
    let brokers = Kaas::cluster("metrics-cluster", 3, &settings);
    let bootstrap = brokers.iter().map(|b| b.bootstrap()).collect::<Vec<_>>().join(",");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("message.timeout.ms", "60000")
        .create()
        .expect("producer");
    for p in 0..PARTITIONS {
        for _ in 0..3 {
            let record = FutureRecord::<(), _>::to("spread").partition(p).payload("x");
            producer.send(record, Duration::from_secs(60)).await.expect("sent");
        }
    }
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("group.id", "spread").create().expect("consumer");
    let mut offsets = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        offsets.add_partition_offset("spread", p, Offset::Offset(1)).unwrap();
    }
    tokio::task::spawn_blocking(move || consumer.commit(&offsets, CommitMode::Sync)).await.unwrap().expect("committed");
    let lags = |name: &str| -> Vec<Option<f64>> {
        brokers.iter().map(|b| sample(&get(b.metrics_port.expect("metrics"), "/metrics"), name)).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut shown = lags(r#"kaas_consumer_group_lag{group="spread"}"#);
    while shown.iter().flatten().count() != 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        shown = lags(r#"kaas_consumer_group_lag{group="spread"}"#);
    }
    assert_eq!(shown.iter().flatten().copied().collect::<Vec<_>>(), vec![f64::from(PARTITIONS * 2)], "{shown:?}");
    let owned: f64 = lags("kaas_partitions_owned").into_iter().flatten().sum();
    assert_eq!(owned, f64::from(PARTITIONS), "each partition owned by one broker");
    let owners = lags("kaas_partitions_owned").into_iter().flatten().filter(|n| *n > 0.0).count();
    assert!(owners >= 2, "the partitions spread over the brokers, so peers were asked");
}
