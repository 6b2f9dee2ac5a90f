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
