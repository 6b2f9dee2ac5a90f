//! Requests kaas once answered differently from Apache Kafka 4, sent as bytes and checked
//! field by field: Apache's answer is the one clients and Kafka's tools are written against.

mod common;

use bytes::{Bytes, BytesMut};
use common::Kaas;
use common::wire::Wire;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

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
    // In Apache's order: the partitions its handler refuses first, then the coordinator's.
    let want = [("known", 2, UNKNOWN_TOPIC_OR_PARTITION), ("known", 1, 0), ("nowhere", 0, UNKNOWN_TOPIC_OR_PARTITION)];
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

/// One lz4-compressed batch of records stamped `timestamps` (CreateTime), as a producer sends it.
fn compressed_batch(timestamps: &[i64]) -> Bytes {
    let records: Vec<Record> = timestamps
        .iter()
        .enumerate()
        .map(|(i, &timestamp)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp,
            key: None,
            value: Some(Bytes::from(format!("r{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::Lz4 };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encodes");
    buf.freeze()
}

/// ListOffsets by timestamp answers the first record at or after it, looked for inside its
/// (compressed) batch, with that record's own timestamp; the max-timestamp lookup (-3)
/// answers the record that has it. kaas once answered the batch's base offset.
#[test]
fn list_offsets_by_timestamp_reads_inside_the_batch() {
    let kaas = Kaas::start("offsets-for-times", &[]);
    let mut wire = Wire::connect(&kaas.bootstrap());
    create_topic(&mut wire, "times", 1);
    // Out of order within the batch, as CreateTime allows; appended at offset 0..5.
    let batch = compressed_batch(&[1000, 2000, 5000, 3000, 4000]);
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(name("times"))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch))]),
    ]);
    let response: ProduceResponse = wire.call(ApiKey::Produce, 9, &request);
    assert_eq!(response.responses[0].partition_responses[0].error_code, 0);

    let lookup = |wire: &mut Wire, timestamp: i64| -> (i16, i64, i64) {
        let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            ListOffsetsTopic::default().with_name(name("times")).with_partitions(vec![
                ListOffsetsPartition::default().with_partition_index(0).with_timestamp(timestamp),
            ]),
        ]);
        let response: ListOffsetsResponse = wire.call(ApiKey::ListOffsets, 7, &request);
        let p = &response.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    };
    assert_eq!(lookup(&mut wire, 500), (0, 0, 1000));
    assert_eq!(lookup(&mut wire, 1500), (0, 1, 2000));
    assert_eq!(lookup(&mut wire, 2500), (0, 2, 5000), "the first at or after in offset order, not the nearest");
    assert_eq!(lookup(&mut wire, 5000), (0, 2, 5000));
    assert_eq!(lookup(&mut wire, 5001), (0, -1, -1), "no record that late");
    assert_eq!(lookup(&mut wire, -3), (0, 2, 5000), "the record with the max timestamp");
}

/// DescribeTopicPartitions pages through topics in name order, a page holding at most the
/// asked number of partitions; the cursor names where the next page starts. Named topics that
/// do not exist are answered with an error; a cursor outside the named topics is refused.
#[test]
fn describe_topic_partitions_pages_by_cursor() {
    let kaas = Kaas::start("describe-topic-partitions", &[]);
    let mut wire = Wire::connect(&kaas.bootstrap());
    for (t, partitions) in [("c", 1), ("a", 3), ("b", 2)] {
        create_topic(&mut wire, t, partitions);
    }
    let mut describe = |topics: &[&str], cursor: Option<(&str, i32)>| {
        let request = DescribeTopicPartitionsRequest::default()
            .with_topics(topics.iter().map(|t| TopicRequest::default().with_name(name(t))).collect())
            .with_response_partition_limit(2)
            .with_cursor(cursor.map(|(t, p)| Cursor::default().with_topic_name(name(t)).with_partition_index(p)));
        let response: DescribeTopicPartitionsResponse = wire.call(ApiKey::DescribeTopicPartitions, 0, &request);
        let got: Vec<(String, i16, Vec<i32>)> = response
            .topics
            .iter()
            .map(|t| {
                let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                (name, t.error_code, t.partitions.iter().map(|p| p.partition_index).collect())
            })
            .collect();
        let next = response.next_cursor.map(|c| (c.topic_name.0.to_string(), c.partition_index));
        (got, next)
    };
    let page = |topics: &[(&str, i16, &[i32])]| -> Vec<(String, i16, Vec<i32>)> {
        topics.iter().map(|(t, code, ps)| (t.to_string(), *code, ps.to_vec())).collect()
    };
    assert_eq!(describe(&[], None), (page(&[("a", 0, &[0, 1])]), Some(("a".into(), 2))));
    assert_eq!(describe(&[], Some(("a", 2))), (page(&[("a", 0, &[2]), ("b", 0, &[0])]), Some(("b".into(), 1))));
    assert_eq!(describe(&[], Some(("b", 1))), (page(&[("b", 0, &[1]), ("c", 0, &[0])]), None));
    // Named topics come back in name order, a missing one with its error.
    assert_eq!(describe(&["c", "nope", "b"], None), (page(&[("b", 0, &[0, 1])]), Some(("c".into(), 0))));
    assert_eq!(describe(&["c", "nope", "b"], Some(("c", 0))), (page(&[("c", 0, &[0]), ("nope", 3, &[])]), None));
    const INVALID_REQUEST: i16 = 42;
    assert_eq!(describe(&["a"], Some(("b", 0))), (page(&[("a", INVALID_REQUEST, &[])]), None));
}

/// OffsetDelete (kaas did not serve it): the offsets it removes stay removed through a crash of
/// the broker (SIGKILL right after the answer), and the others stay.
#[test]
fn offset_delete_is_durable_before_it_is_answered() {
    use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
    let mut kaas = Kaas::start("offset-delete", &[]);
    let mut wire = Wire::connect(&kaas.bootstrap());
    create_topic(&mut wire, "odel", 2);
    let partition = |p: i32| OffsetCommitRequestPartition::default().with_partition_index(p).with_committed_offset(9);
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(name("odel"))
                .with_partitions(vec![partition(0), partition(1)]),
        ]);
    let _: OffsetCommitResponse = wire.call(ApiKey::OffsetCommit, 8, &commit);
    let delete =
        OffsetDeleteRequest::default().with_group_id(GroupId(StrBytes::from_static_str("g"))).with_topics(vec![
            OffsetDeleteRequestTopic::default()
                .with_name(name("odel"))
                .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(1)]),
        ]);
    let response: OffsetDeleteResponse = wire.call(ApiKey::OffsetDelete, 0, &delete);
    assert_eq!((response.error_code, response.topics[0].partitions[0].error_code), (0, 0));
    kaas.kill9();
    kaas.restart();
    let mut wire = Wire::connect(&kaas.bootstrap());
    let fetch =
        OffsetFetchRequest::default().with_group_id(GroupId(StrBytes::from_static_str("g"))).with_topics(Some(vec![
            OffsetFetchRequestTopic::default().with_name(name("odel")).with_partition_indexes(vec![0, 1]),
        ]));
    let response: OffsetFetchResponse = wire.call(ApiKey::OffsetFetch, 7, &fetch);
    let offsets: Vec<i64> = response.topics[0].partitions.iter().map(|p| p.committed_offset).collect();
    assert_eq!(offsets, [9, -1], "partition 1's offset deleted, partition 0's kept");
    // A group that does not exist is told so.
    let missing = delete.with_group_id(GroupId(StrBytes::from_static_str("nobody")));
    let response: OffsetDeleteResponse = wire.call(ApiKey::OffsetDelete, 0, &missing);
    assert_eq!(response.error_code, 69, "GROUP_ID_NOT_FOUND");
}
