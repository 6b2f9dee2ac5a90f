//! Requests kaas once answered differently from Apache Kafka 4, sent as bytes and checked
//! field by field: Apache's answer is the one clients and Kafka's tools are written against.

mod common;

use common::Kaas;
use common::wire::Wire;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(wire: &mut Wire, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default().with_name(name(topic)).with_num_partitions(partitions).with_replication_factor(1),
    ]);
    let response: CreateTopicsResponse = wire.call(ApiKey::CreateTopics, 7, &request);
    assert_eq!(response.topics[0].error_code, 0, "{:?}", response.topics[0].error_message);
}

/// (topic, partition, error code) of each partition of an answer, in its order.
fn codes<'a>(topics: impl IntoIterator<Item = (&'a TopicName, Vec<(i32, i16)>)>) -> Vec<(String, i32, i16)> {
    topics.into_iter().flat_map(|(t, ps)| ps.into_iter().map(move |(p, c)| (t.0.to_string(), p, c))).collect()
}

/// Apache checks an offset commit's partitions against its metadata first: a topic or a
/// partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION and nothing is stored for it,
/// while the others of the same request commit.
#[test]
fn offset_commits_for_partitions_that_do_not_exist_are_refused() {
    let kaas = Kaas::start("unknown-commit", &[]);
    let mut wire = Wire::connect(&kaas.bootstrap());
    create_topic(&mut wire, "known", 2);
    let partition = |p: i32| OffsetCommitRequestPartition::default().with_partition_index(p).with_committed_offset(7);
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(name("known"))
                .with_partitions(vec![partition(1), partition(2)]),
            OffsetCommitRequestTopic::default().with_name(name("nowhere")).with_partitions(vec![partition(0)]),
        ]);
    let response: OffsetCommitResponse = wire.call(ApiKey::OffsetCommit, 8, &request);
    let got = codes(
        response
            .topics
            .iter()
            .map(|t| (&t.name, t.partitions.iter().map(|p| (p.partition_index, p.error_code)).collect())),
    );
    let want = [("known", 1, 0), ("known", 2, UNKNOWN_TOPIC_OR_PARTITION), ("nowhere", 0, UNKNOWN_TOPIC_OR_PARTITION)];
    assert_eq!(got, want.map(|(t, p, c)| (t.to_string(), p, c)));

    // Only the partition that exists was stored.
    let topics = ["known", "nowhere"]
        .map(|t| OffsetFetchRequestTopic::default().with_name(name(t)).with_partition_indexes(vec![0, 1, 2]));
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_topics(Some(topics.to_vec()));
    let response: OffsetFetchResponse = wire.call(ApiKey::OffsetFetch, 7, &request);
    let committed: Vec<(String, i32, i64)> = response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), p.partition_index, p.committed_offset)))
        .filter(|&(_, _, offset)| offset >= 0)
        .collect();
    assert_eq!(committed, vec![("known".to_string(), 1, 7)]);
}

/// The same check in a transaction's offset commit comes before any transaction state is
/// looked at: a request naming only partitions that do not exist is answered with
/// UNKNOWN_TOPIC_OR_PARTITION even from a producer the coordinator never saw.
#[test]
fn txn_offset_commits_for_partitions_that_do_not_exist_are_refused() {
    let kaas = Kaas::start("unknown-txn-commit", &[]);
    let mut wire = Wire::connect(&kaas.bootstrap());
    create_topic(&mut wire, "known", 1);
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("t")))
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_producer_id(ProducerId(4242))
        .with_producer_epoch(0)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default().with_name(name("known")).with_partitions(vec![
                TxnOffsetCommitRequestPartition::default().with_partition_index(5).with_committed_offset(1),
            ]),
            TxnOffsetCommitRequestTopic::default().with_name(name("nowhere")).with_partitions(vec![
                TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1),
            ]),
        ]);
    let response: TxnOffsetCommitResponse = wire.call(ApiKey::TxnOffsetCommit, 3, &request);
    let got = codes(
        response
            .topics
            .iter()
            .map(|t| (&t.name, t.partitions.iter().map(|p| (p.partition_index, p.error_code)).collect())),
    );
    let want = [("known", 5, UNKNOWN_TOPIC_OR_PARTITION), ("nowhere", 0, UNKNOWN_TOPIC_OR_PARTITION)];
    assert_eq!(got, want.map(|(t, p, c)| (t.to_string(), p, c)));
}
