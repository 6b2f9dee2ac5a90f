//! Differential conformance: the same request sequences sent to Apache Kafka 4.4 (one KRaft
//! node from `ci/apache/kafka.sh`) and to kaas, their responses compared field by field, with
//! what is not meant to match masked (ids, timestamps, hosts and ports, error messages).
//! The error paths above all: fencing, stale epochs, bad sequences, unknown topics and
//! partitions, out-of-range offsets, bad versions, bad arguments.
//!
//! A difference fails the test unless `DELIBERATE` lists it with its reason (the README's list
//! of deliberate differences says the same).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Kaas;
use common::wire::{Wire, batch, keyed_batch};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

/// Cases where kaas answers differently on purpose, and why.
const DELIBERATE: &[(&str, &str)] = &[
    (
        "idempotent-first-batch-at-sequence-5",
        "a producer kaas never knew must start at sequence 0 (UNKNOWN_PRODUCER_ID); Apache 2.5+ \
         accepts any, which lets a producer whose first batch failed leave a gap no retry fills",
    ),
    (
        "consumer-protocol-unknown-group",
        "kaas keeps consumer-protocol members in memory, so a member whose group the coordinator \
         does not know (it restarted, or took the group over) is told UNKNOWN_MEMBER_ID and joins \
         again; Apache, which reloads its groups, answers GROUP_ID_NOT_FOUND",
    ),
];

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn name(v: &str) -> TopicName {
    TopicName(s(v))
}

/// Field values that differ between any two brokers and mean nothing here.
const MASKED: &[&str] = &[
    "producer_id",
    "topic_id",
    "timestamp",
    "transaction_start_time_ms",
    // Apache 4.4 computes consumer-group assignments off the request path, so its epoch
    // numbers run ahead of a synchronous assignor's; clients only compare them for equality.
    "member_epoch",
    "group_epoch",
    "assignment_epoch",
    "log_append_time_ms",
    "throttle_time_ms",
    "error_message",
    "member_id",
    "node_id",
    "host",
    "port",
    "leader_id",
    "leader_epoch",
    "current_leader",
    "node_endpoints",
    "session_id",
    "configs",
    "topic_config_error_code",
    "leader",
    "unknown_tagged_fields",
];

/// `{:?}` of a response with the value of every `MASKED` field replaced by `_`.
fn masked(debug: &str) -> String {
    let mut out = String::new();
    let mut rest = debug;
    'scan: while !rest.is_empty() {
        for field in MASKED {
            let key = format!("{field}: ");
            let at_boundary = out.ends_with(' ') || out.ends_with('{') || out.is_empty();
            if at_boundary && rest.starts_with(&key) {
                out.push_str(&key);
                out.push('_');
                rest = skip_value(&rest[key.len()..]);
                continue 'scan;
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// What follows one value of a Debug rendering: up to the `,` or closing bracket that ends it.
fn skip_value(v: &str) -> &str {
    let mut depth = 0i32;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in v.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' if depth == 0 => return &v[i..],
            '}' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => return &v[i..],
            _ => {}
        }
    }
    ""
}

/// One Apache Kafka node, stopped when dropped.
struct Apache {
    child: Child,
    port: u16,
    _dir: std::path::PathBuf,
}

impl Apache {
    fn start() -> Apache {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = std::env::temp_dir().join(format!("kaas-conformance-apache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // kafka.sh takes the port and the next one (its controller).
        let port = loop {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
                break port;
            }
        };
        let child = Command::new(root.join("ci/apache/kafka.sh"))
            .arg(port.to_string())
            .arg(dir.join("node"))
            .arg("auto.create.topics.enable=false")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("ci/apache/kafka.sh");
        let deadline = Instant::now() + Duration::from_secs(300);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "Apache Kafka did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
        Apache { child, port, _dir: dir }
    }
}

impl Drop for Apache {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("--").arg(format!("-{}", self.child.id())).status();
        let _ = self.child.wait();
    }
}

use std::os::unix::process::CommandExt;

/// A client session against one broker: its connection and what a case remembers.
struct Session {
    wire: Wire,
    bootstrap: String,
}

impl Session {
    fn call<Req: kafka_protocol::protocol::Encodable, Resp: kafka_protocol::protocol::Decodable + std::fmt::Debug>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> (String, Resp) {
        let response: Resp = self.wire.call(key, version, request);
        (format!("{key:?} v{version}: {}", masked(&format!("{response:?}"))), response)
    }

    /// Metadata until the topic's partitions all have a leader (Apache elects asynchronously).
    fn await_leaders(&mut self, topic: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let request = MetadataRequest::default().with_topics(Some(vec![
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(name(topic))),
            ]));
            let response: MetadataResponse = self.wire.call(ApiKey::Metadata, 12, &request);
            let ready = response.topics.iter().all(|t| {
                t.error_code == 0 && !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
            });
            // Apache's leader may still refuse a moment after Metadata names it.
            let partitions = response.topics.first().map_or(0, |t| t.partitions.len() as i32);
            if ready && (0..partitions).all(|p| self.partition_serves(topic, p)) {
                return;
            }
            assert!(Instant::now() < deadline, "{topic} has no leader on {}", self.bootstrap);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn create_topic(&mut self, topic: &str, partitions: i32) {
        let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![
            CreatableTopic::default().with_name(name(topic)).with_num_partitions(partitions).with_replication_factor(1),
        ]);
        let response: CreateTopicsResponse = self.wire.call(ApiKey::CreateTopics, 7, &request);
        assert_eq!(response.topics[0].error_code, 0, "{response:?}");
        self.await_leaders(topic);
    }

    /// Whether the partition's leader answers ListOffsets without an error.
    fn partition_serves(&mut self, topic: &str, partition: i32) -> bool {
        let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![
                ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1),
            ]),
        ]);
        let response: ListOffsetsResponse = self.wire.call(ApiKey::ListOffsets, 7, &request);
        response.topics.iter().all(|t| t.partitions.iter().all(|p| p.error_code == 0))
    }

    /// A produce a case builds on, retried until the partition takes it (Apache's leader can
    /// refuse a moment after Metadata names it).
    fn setup_produce(&mut self, topic: &str, partition: i32, records: Bytes) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let response: ProduceResponse =
                self.wire.call(ApiKey::Produce, 9, &produce(topic, partition, records.clone(), None));
            if response.responses[0].partition_responses[0].error_code == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "setup produce to {topic}: {response:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// FindCoordinator until it names a broker (Apache loads its internal topics on demand).
    fn await_coordinator(&mut self, key: &str, key_type: i8) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let request = FindCoordinatorRequest::default().with_key_type(key_type).with_coordinator_keys(vec![s(key)]);
            let response: FindCoordinatorResponse = self.wire.call(ApiKey::FindCoordinator, 4, &request);
            if response.coordinators.iter().all(|c| c.error_code == 0) && self.coordinator_loaded(key, key_type) {
                return;
            }
            assert!(Instant::now() < deadline, "no coordinator for {key}: {response:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether the coordinator serves `key` yet: Apache's answers NOT_COORDINATOR or
    /// COORDINATOR_LOAD_IN_PROGRESS until it has loaded the internal topic's partition.
    fn coordinator_loaded(&mut self, key: &str, key_type: i8) -> bool {
        const LOADING: [i16; 2] = [14, 16];
        if key_type == 0 {
            let request = OffsetFetchRequest::default().with_group_id(GroupId(s(key))).with_topics(None);
            let response: OffsetFetchResponse = self.wire.call(ApiKey::OffsetFetch, 7, &request);
            !LOADING.contains(&response.error_code)
        } else {
            let request = DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s(key))]);
            let response: DescribeTransactionsResponse = self.wire.call(ApiKey::DescribeTransactions, 0, &request);
            response.transaction_states.iter().all(|t| !LOADING.contains(&t.error_code))
        }
    }

    /// EndTxn v5 as a client sends it (again while CONCURRENT_TRANSACTIONS), then waits until
    /// the transaction is complete: Apache answers once it is prepared and writes its markers
    /// after, kaas answers once they are durable.
    fn end_settled(&mut self, transactional_id: &str, request: &EndTxnRequest) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let answer = loop {
            let (answer, response) = self.call::<_, EndTxnResponse>(ApiKey::EndTxn, 5, request);
            if response.error_code != 51 {
                break answer;
            }
            assert!(Instant::now() < deadline, "EndTxn: {answer}");
            std::thread::sleep(Duration::from_millis(100));
        };
        loop {
            let describe = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(s(transactional_id))]);
            let response: DescribeTransactionsResponse = self.wire.call(ApiKey::DescribeTransactions, 0, &describe);
            if !response.transaction_states[0].transaction_state.starts_with("Prepare") {
                return answer;
            }
            assert!(Instant::now() < deadline, "{transactional_id} stays prepared: {response:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn init_producer_id(&mut self, transactional_id: Option<&str>) -> (i64, i16) {
        if let Some(id) = transactional_id {
            self.await_coordinator(id, 1);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let request = InitProducerIdRequest::default()
                .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            let response: InitProducerIdResponse = self.wire.call(ApiKey::InitProducerId, 4, &request);
            if response.error_code == 0 {
                return (response.producer_id.0, response.producer_epoch);
            }
            // COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS while a coordinator loads.
            assert!(Instant::now() < deadline, "InitProducerId: {response:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn produce(topic: &str, partition: i32, records: Bytes, transactional_id: Option<&str>) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
            PartitionProduceData::default().with_index(partition).with_records(Some(records)),
        ])])
}

/// A case: a sequence of requests on a fresh session, each answer rendered with masks.
type Case = fn(&mut Session) -> Vec<String>;

fn produce_errors(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-produce", 2);
    let plain = batch((-1, -1), -1, 3, false);
    let (a, _) = c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &produce("conf-produce", 0, plain.clone(), None));
    let (b, _) = c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &produce("conf-produce", 7, plain.clone(), None));
    let (d, _) = c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &produce("conf-nowhere", 0, plain.clone(), None));
    let acks_two = produce("conf-produce", 1, plain, None).with_acks(2);
    let (e, _) = c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &acks_two);
    vec![a, b, d, e]
}

fn idempotent_sequences(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-idem", 1);
    let producer = c.init_producer_id(None);
    let mut out = Vec::new();
    for (sequence, count) in [(0, 2), (0, 2), (2, 1), (5, 1), (3, 1)] {
        let request = produce("conf-idem", 0, batch(producer, sequence, count, false), None);
        out.push(c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &request).0);
    }
    // A stale epoch: the same producer id at an epoch below the one it has.
    let stale = (producer.0, producer.1.wrapping_sub(1).max(0));
    if stale.1 < producer.1 {
        out.push(
            c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &produce("conf-idem", 0, batch(stale, 4, 1, false), None))
                .0,
        );
    }
    out
}

fn idempotent_first_batch_at_sequence_5(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-idem-gap", 1);
    let producer = c.init_producer_id(None);
    let request = produce("conf-idem-gap", 0, batch(producer, 5, 1, false), None);
    vec![c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &request).0]
}

fn transactions_and_fencing(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-txn", 1);
    let first = c.init_producer_id(Some("conf-tx"));
    let mut out = Vec::new();
    let add = |producer: (i64, i16), topic: &str, partition: i32| {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s("conf-tx")))
            .with_v3_and_below_producer_id(ProducerId(producer.0))
            .with_v3_and_below_producer_epoch(producer.1)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default().with_name(name(topic)).with_partitions(vec![partition]),
            ])
    };
    out.push(c.call::<_, AddPartitionsToTxnResponse>(ApiKey::AddPartitionsToTxn, 3, &add(first, "conf-nowhere", 0)).0);
    out.push(c.call::<_, AddPartitionsToTxnResponse>(ApiKey::AddPartitionsToTxn, 3, &add(first, "conf-txn", 0)).0);
    let request = produce("conf-txn", 0, batch(first, 0, 2, true), Some("conf-tx"));
    out.push(c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &request).0);
    // A second InitProducerId fences the first and aborts its transaction.
    let second = c.init_producer_id(Some("conf-tx"));
    let end = |producer: (i64, i16), committed: bool| {
        EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s("conf-tx")))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_committed(committed)
    };
    out.push(c.call::<_, EndTxnResponse>(ApiKey::EndTxn, 3, &end(first, true)).0);
    let request = produce("conf-txn", 0, batch(first, 2, 1, true), Some("conf-tx"));
    out.push(c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &request).0);
    out.push(c.call::<_, AddPartitionsToTxnResponse>(ApiKey::AddPartitionsToTxn, 3, &add(first, "conf-txn", 0)).0);
    // The new epoch: nothing open, so EndTxn has nothing to end.
    out.push(c.call::<_, EndTxnResponse>(ApiKey::EndTxn, 3, &end(second, true)).0);
    // A timeout beyond transaction.max.timeout.ms.
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s("conf-tx"))))
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    out.push(c.call::<_, InitProducerIdResponse>(ApiKey::InitProducerId, 4, &request).0);
    out
}

fn offsets_and_fetch(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-read", 1);
    c.setup_produce("conf-read", 0, batch((-1, -1), -1, 3, false));
    let mut out = Vec::new();
    let list = |timestamp: i64, partition: i32, topic: &str| {
        ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            ListOffsetsTopic::default().with_name(name(topic)).with_partitions(vec![
                ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(timestamp),
            ]),
        ])
    };
    for (timestamp, partition, topic) in
        [(-1, 0, "conf-read"), (-2, 0, "conf-read"), (-1, 3, "conf-read"), (-1, 0, "conf-nowhere")]
    {
        out.push(c.call::<_, ListOffsetsResponse>(ApiKey::ListOffsets, 7, &list(timestamp, partition, topic)).0);
    }
    let fetch = |offset: i64| {
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default().with_topic(name("conf-read")).with_partitions(vec![
                FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20),
            ])])
    };
    for offset in [3, 99, -5] {
        let (rendered, _) = c.call::<_, FetchResponse>(ApiKey::Fetch, 12, &fetch(offset));
        out.push(rendered);
    }
    out
}

fn groups_and_commits(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-group", 1);
    c.await_coordinator("conf-g", 0);
    let mut out = Vec::new();
    let commit = |topic: &str, partition: i32, generation: i32| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(s("conf-g")))
            .with_generation_id_or_member_epoch(generation)
            .with_topics(vec![OffsetCommitRequestTopic::default().with_name(name(topic)).with_partitions(vec![
                OffsetCommitRequestPartition::default().with_partition_index(partition).with_committed_offset(1),
            ])])
    };
    for (topic, partition, generation) in
        [("conf-group", 0, -1), ("conf-group", 4, -1), ("conf-nowhere", 0, -1), ("conf-group", 0, 7)]
    {
        out.push(c.call::<_, OffsetCommitResponse>(ApiKey::OffsetCommit, 8, &commit(topic, partition, generation)).0);
    }
    let fetch = OffsetFetchRequest::default().with_group_id(GroupId(s("conf-g"))).with_topics(Some(vec![
        OffsetFetchRequestTopic::default().with_name(name("conf-group")).with_partition_indexes(vec![0]),
    ]));
    out.push(c.call::<_, OffsetFetchResponse>(ApiKey::OffsetFetch, 7, &fetch).0);
    let unknown =
        OffsetFetchRequest::default().with_group_id(GroupId(s("conf-no-such-group"))).with_topics(Some(vec![
            OffsetFetchRequestTopic::default().with_name(name("conf-group")).with_partition_indexes(vec![0]),
        ]));
    out.push(c.call::<_, OffsetFetchResponse>(ApiKey::OffsetFetch, 7, &unknown).0);
    let join = |session_timeout_ms: i32| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("conf-join")))
            .with_session_timeout_ms(session_timeout_ms)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(s("range")).with_metadata(Bytes::new())])
    };
    c.await_coordinator("conf-join", 0);
    out.push(c.call::<_, JoinGroupResponse>(ApiKey::JoinGroup, 5, &join(1)).0);
    // v4+: a first join without a member id is told its member id (MEMBER_ID_REQUIRED).
    out.push(c.call::<_, JoinGroupResponse>(ApiKey::JoinGroup, 5, &join(10_000)).0);
    let describe = DescribeGroupsRequest::default().with_groups(vec![GroupId(s("conf-no-such-group"))]);
    out.push(c.call::<_, DescribeGroupsResponse>(ApiKey::DescribeGroups, 5, &describe).0);
    let heartbeat = HeartbeatRequest::default()
        .with_group_id(GroupId(s("conf-no-such-group")))
        .with_generation_id(1)
        .with_member_id(s("m"));
    out.push(c.call::<_, HeartbeatResponse>(ApiKey::Heartbeat, 4, &heartbeat).0);
    out
}

fn admin_errors(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-admin", 1);
    let mut out = Vec::new();
    let create = |topic: &str, partitions: i32| {
        CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![
            CreatableTopic::default().with_name(name(topic)).with_num_partitions(partitions).with_replication_factor(1),
        ])
    };
    for (topic, partitions) in [("conf-admin", 1), ("bad/name", 1), ("conf-zero", 0), ("..", 1)] {
        out.push(c.call::<_, CreateTopicsResponse>(ApiKey::CreateTopics, 7, &create(topic, partitions)).0);
    }
    let delete = DeleteTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![DeleteTopicState::default().with_name(Some(name("conf-nowhere")))]);
    out.push(c.call::<_, DeleteTopicsResponse>(ApiKey::DeleteTopics, 6, &delete).0);
    out
}

fn more_admin_errors(c: &mut Session) -> Vec<String> {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    c.create_topic("conf-more", 2);
    c.setup_produce("conf-more", 0, batch((-1, -1), -1, 3, false));
    let mut out = Vec::new();
    let delete = |topic: &str, partition: i32, offset: i64| {
        DeleteRecordsRequest::default().with_timeout_ms(30_000).with_topics(vec![
            DeleteRecordsTopic::default().with_name(name(topic)).with_partitions(vec![
                DeleteRecordsPartition::default().with_partition_index(partition).with_offset(offset),
            ]),
        ])
    };
    for (topic, partition, offset) in
        [("conf-more", 0, 2), ("conf-more", 0, 99), ("conf-more", 9, 1), ("conf-nowhere", 0, 1)]
    {
        out.push(c.call::<_, DeleteRecordsResponse>(ApiKey::DeleteRecords, 2, &delete(topic, partition, offset)).0);
    }
    for count in [1, 2] {
        let request = CreatePartitionsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatePartitionsTopic::default().with_name(name("conf-more")).with_count(count)]);
        out.push(c.call::<_, CreatePartitionsResponse>(ApiKey::CreatePartitions, 3, &request).0);
    }
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("conf-nowhere"))
            .with_configuration_keys(Some(vec![s("retention.ms")])),
    ]);
    out.push(c.call::<_, DescribeConfigsResponse>(ApiKey::DescribeConfigs, 4, &request).0);
    out
}

fn transaction_state_errors(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-txn2", 1);
    let producer = c.init_producer_id(Some("conf-tx2"));
    let mut out = Vec::new();
    // Offsets staged for a group the transaction never added.
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("conf-tx2")))
        .with_group_id(GroupId(s("conf-tx2-g")))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_topics(vec![
            kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(name("conf-txn2"))
                .with_partitions(vec![
                    kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1),
                ]),
        ]);
    c.await_coordinator("conf-tx2-g", 0);
    out.push(c.call::<_, TxnOffsetCommitResponse>(ApiKey::TxnOffsetCommit, 3, &request).0);
    let add_offsets = |epoch: i16| {
        AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s("conf-tx2")))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(epoch)
            .with_group_id(GroupId(s("conf-tx2-g")))
    };
    out.push(c.call::<_, AddOffsetsToTxnResponse>(ApiKey::AddOffsetsToTxn, 3, &add_offsets(producer.1 + 1)).0);
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s("conf-tx2")))
        .with_producer_id(ProducerId(producer.0 + 1))
        .with_producer_epoch(producer.1)
        .with_committed(false);
    out.push(c.call::<_, EndTxnResponse>(ApiKey::EndTxn, 3, &end).0);
    let unknown = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s("conf-never-initialised")))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(0)
        .with_committed(true);
    c.await_coordinator("conf-never-initialised", 1);
    out.push(c.call::<_, EndTxnResponse>(ApiKey::EndTxn, 3, &unknown).0);
    let describe = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(s("conf-never-initialised"))]);
    out.push(c.call::<_, DescribeTransactionsResponse>(ApiKey::DescribeTransactions, 0, &describe).0);
    out
}

fn offset_delete(c: &mut Session) -> Vec<String> {
    use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
    c.create_topic("conf-odel", 2);
    c.await_coordinator("conf-odel-g", 0);
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("conf-odel-g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default().with_name(name("conf-odel")).with_partitions(vec![
            OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(5),
            OffsetCommitRequestPartition::default().with_partition_index(1).with_committed_offset(6),
        ])]);
    let mut out = vec![c.call::<_, OffsetCommitResponse>(ApiKey::OffsetCommit, 8, &commit).0];
    let delete = |group: &str| {
        OffsetDeleteRequest::default().with_group_id(GroupId(s(group))).with_topics(vec![
            OffsetDeleteRequestTopic::default().with_name(name("conf-odel")).with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0),
                OffsetDeleteRequestPartition::default().with_partition_index(9),
            ]),
            OffsetDeleteRequestTopic::default()
                .with_name(name("conf-nowhere"))
                .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)]),
        ])
    };
    out.push(c.call::<_, OffsetDeleteResponse>(ApiKey::OffsetDelete, 0, &delete("conf-odel-g")).0);
    c.await_coordinator("conf-odel-none", 0);
    out.push(c.call::<_, OffsetDeleteResponse>(ApiKey::OffsetDelete, 0, &delete("conf-odel-none")).0);
    let fetch = OffsetFetchRequest::default().with_group_id(GroupId(s("conf-odel-g"))).with_topics(Some(vec![
        OffsetFetchRequestTopic::default().with_name(name("conf-odel")).with_partition_indexes(vec![0, 1]),
    ]));
    out.push(c.call::<_, OffsetFetchResponse>(ApiKey::OffsetFetch, 7, &fetch).0);
    out
}

/// Transactions v2 (KIP-890 part 2): Produce v12 and TxnOffsetCommit v5 add to the
/// transaction themselves, EndTxn v5 bumps the epoch (a retry is one epoch behind), a late write
/// of an ended transaction is fenced, and an abort with nothing open is allowed.
fn transactions_v2(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-tv2", 2);
    let (producer_id, epoch) = c.init_producer_id(Some("conf-tv2"));
    let mut out = Vec::new();
    // ApiVersions v3 leaves out features whose lowest version is 0 (old clients cannot read
    // them); v4 names them.
    for version in [3, 4] {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(s("kaas-conformance"))
            .with_client_software_version(s("1.0"));
        let versions: ApiVersionsResponse = c.wire.call(ApiKey::ApiVersions, version, &request);
        let feature = |name: &StrBytes| name.as_str() == "transaction.version";
        let supported = versions.supported_features.iter().filter(|f| feature(&f.name));
        let finalized = versions.finalized_features.iter().filter(|f| feature(&f.name));
        out.push(format!(
            "ApiVersions v{version}: error {}, transaction.version supported {:?}, finalized {:?}",
            versions.error_code,
            supported.map(|f| (f.min_version, f.max_version)).collect::<Vec<_>>(),
            finalized.map(|f| f.max_version_level).collect::<Vec<_>>(),
        ));
    }
    let write = |epoch: i16, partition: i32, sequence: i32| {
        produce("conf-tv2", partition, batch((producer_id, epoch), sequence, 2, true), Some("conf-tv2"))
    };
    let end = |epoch: i16, committed: bool| {
        EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s("conf-tv2")))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_committed(committed)
    };
    out.push(c.call::<_, ProduceResponse>(ApiKey::Produce, 12, &write(epoch, 0, 0)).0);
    out.push(c.end_settled("conf-tv2", &end(epoch, true)));
    out.push(c.call::<_, EndTxnResponse>(ApiKey::EndTxn, 5, &end(epoch, true)).0);
    out.push(c.call::<_, EndTxnResponse>(ApiKey::EndTxn, 5, &end(epoch, false)).0);
    // Late writes of the ended transaction: where its marker went, and where it never wrote.
    out.push(c.call::<_, ProduceResponse>(ApiKey::Produce, 12, &write(epoch, 0, 2)).0);
    out.push(c.call::<_, ProduceResponse>(ApiKey::Produce, 12, &write(epoch, 1, 0)).0);
    // Nothing open: an abort is allowed (and bumps), a commit is not.
    out.push(c.end_settled("conf-tv2", &end(epoch + 1, false)));
    out.push(c.call::<_, EndTxnResponse>(ApiKey::EndTxn, 5, &end(epoch + 2, true)).0);
    c.await_coordinator("conf-tv2-g", 0);
    let offsets = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("conf-tv2")))
        .with_group_id(GroupId(s("conf-tv2-g")))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch + 2)
        .with_topics(vec![
            kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(name("conf-tv2"))
                .with_partitions(vec![
                    kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(1)
                        .with_committed_offset(7),
                ]),
        ]);
    out.push(c.call::<_, TxnOffsetCommitResponse>(ApiKey::TxnOffsetCommit, 5, &offsets).0);
    out.push(c.call::<_, ProduceResponse>(ApiKey::Produce, 12, &write(epoch + 2, 1, 0)).0);
    out.push(c.end_settled("conf-tv2", &end(epoch + 2, true)));
    let fetch = OffsetFetchRequest::default().with_group_id(GroupId(s("conf-tv2-g"))).with_topics(Some(vec![
        OffsetFetchRequestTopic::default().with_name(name("conf-tv2")).with_partition_indexes(vec![1]),
    ]));
    out.push(c.call::<_, OffsetFetchResponse>(ApiKey::OffsetFetch, 7, &fetch).0);
    let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s("conf-tv2"))]);
    out.push(c.call::<_, DescribeTransactionsResponse>(ApiKey::DescribeTransactions, 0, &describe).0);
    out
}

/// KIP-848's ConsumerGroupHeartbeat: a join, its errors, the member's epoch, a commit under a
/// stale epoch, a leave, and ConsumerGroupDescribe.
fn consumer_protocol(c: &mut Session) -> Vec<String> {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    c.create_topic("conf-cg", 2);
    c.await_coordinator("conf-cg-g", 0);
    let beat = |member: &str, epoch: i32, topics: Option<Vec<&str>>, assignor: Option<&str>| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("conf-cg-g")))
            .with_member_id(s(member))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(if epoch == 0 { 30_000 } else { -1 })
            .with_subscribed_topic_names(topics.map(|t| t.into_iter().map(name).collect()))
            .with_server_assignor(assignor.map(s))
            .with_topic_partitions(if epoch == 0 { Some(Vec::<TopicPartitions>::new()) } else { None })
    };
    let mut out = Vec::new();
    let mut call = |c: &mut Session, version: i16, request: ConsumerGroupHeartbeatRequest| {
        let (answer, response) =
            c.call::<_, ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat, version, &request);
        out.push(answer);
        response
    };
    call(c, 1, beat("", 0, Some(vec!["conf-cg"]), None));
    call(c, 1, beat("conf-m1", 0, None, None));
    call(c, 1, beat("conf-m1", 0, Some(vec!["conf-cg"]), Some("no-such-assignor")));
    let joined = call(c, 1, beat("conf-m1", 0, Some(vec!["conf-cg"]), Some("range")));
    let epoch = joined.member_epoch;
    call(c, 1, beat("conf-m1", epoch + 5, None, None));
    call(c, 1, beat("conf-m1", epoch, None, None));
    let commit = |epoch: i32| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(s("conf-cg-g")))
            .with_member_id(s("conf-m1"))
            .with_generation_id_or_member_epoch(epoch)
            .with_topics(vec![OffsetCommitRequestTopic::default().with_name(name("conf-cg")).with_partitions(vec![
                OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1),
            ])])
    };
    out.push(c.call::<_, OffsetCommitResponse>(ApiKey::OffsetCommit, 9, &commit(epoch - 1)).0);
    out.push(c.call::<_, OffsetCommitResponse>(ApiKey::OffsetCommit, 9, &commit(epoch)).0);
    // OffsetDelete of a topic the live group subscribes to.
    {
        use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
        let delete = OffsetDeleteRequest::default().with_group_id(GroupId(s("conf-cg-g"))).with_topics(vec![
            OffsetDeleteRequestTopic::default()
                .with_name(name("conf-cg"))
                .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)]),
        ]);
        out.push(c.call::<_, OffsetDeleteResponse>(ApiKey::OffsetDelete, 0, &delete).0);
    }
    let describe = |group: &str| ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group))]);
    out.push(c.call::<_, ConsumerGroupDescribeResponse>(ApiKey::ConsumerGroupDescribe, 0, &describe("conf-cg-g")).0);
    c.await_coordinator("conf-cg-none", 0);
    out.push(c.call::<_, ConsumerGroupDescribeResponse>(ApiKey::ConsumerGroupDescribe, 0, &describe("conf-cg-none")).0);
    let mut call = |c: &mut Session, request: ConsumerGroupHeartbeatRequest| {
        out.push(c.call::<_, ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat, 1, &request).0);
    };
    call(c, beat("conf-m1", -1, None, None));
    call(c, beat("conf-m1", epoch, None, None));
    out
}

/// A consumer-protocol heartbeat of a member with an epoch, to a group that does not exist.
fn consumer_protocol_unknown_group(c: &mut Session) -> Vec<String> {
    c.await_coordinator("conf-cg-gone", 0);
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("conf-cg-gone")))
        .with_member_id(s("conf-nobody"))
        .with_member_epoch(3);
    vec![c.call::<_, ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat, 1, &request).0]
}

/// The online migration of a live group (KIP-848's upgrade path): a classic member forms the
/// group, a consumer-protocol member joins it (the group is upgraded), the classic member is
/// told to rejoin, rejoins and syncs as a member of the consumer group, the consumer-protocol
/// member leaves (the group goes back to classic) and the classic member is told to rejoin
/// again. Only error codes are compared: Apache 4.4 assigns off the request path, so when an
/// answer carries the new assignment is a matter of timing, and the classic member retries its
/// join and sync until they carry it.
fn group_migration(c: &mut Session) -> Vec<String> {
    use kaas_core::group::embedded;
    let group = "conf-mig-g";
    c.create_topic("conf-mig", 1);
    c.await_coordinator(group, 0);
    // The consumer protocol's subscription, v1, to conf-mig, owning nothing.
    let subscription = embedded::encode_subscription(&["conf-mig".into()], &Vec::new(), 1);
    let join = |member: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(member))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default().with_name(s("range")).with_metadata(subscription.clone()),
            ])
    };
    let mut out = Vec::new();
    let code = |api: &str, error_code: i16| format!("{api}: error {error_code}");
    let (_, required) = c.call::<_, JoinGroupResponse>(ApiKey::JoinGroup, 7, &join(""));
    out.push(code("JoinGroup", required.error_code));
    let member = required.member_id.to_string();
    let (_, joined) = c.call::<_, JoinGroupResponse>(ApiKey::JoinGroup, 7, &join(&member));
    out.push(code("JoinGroup", joined.error_code));
    // The leader's assignment: conf-mig's partition 0, in the consumer protocol (v1).
    let assignment = embedded::encode_assignment(&vec![("conf-mig".into(), vec![0])], 1);
    let sync = |generation: i32, assignments: Vec<(String, Bytes)>| {
        SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(&member))
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(id, a)| {
                        sync_group_request::SyncGroupRequestAssignment::default()
                            .with_member_id(s(&id))
                            .with_assignment(a)
                    })
                    .collect(),
            )
    };
    let (_, synced) = c.call::<_, SyncGroupResponse>(
        ApiKey::SyncGroup,
        5,
        &sync(joined.generation_id, vec![(member.clone(), assignment)]),
    );
    out.push(code("SyncGroup", synced.error_code));
    let heartbeat = |generation: i32| {
        HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(&member))
    };
    out.push(code(
        "Heartbeat",
        c.call::<_, HeartbeatResponse>(ApiKey::Heartbeat, 4, &heartbeat(joined.generation_id)).1.error_code,
    ));
    // A consumer-protocol member joins the live classic group.
    let beat = |epoch: i32| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s("conf-mig-new"))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(if epoch == 0 { 30_000 } else { -1 })
            .with_subscribed_topic_names((epoch == 0).then(|| vec![name("conf-mig")]))
            .with_topic_partitions((epoch == 0).then(Vec::new))
    };
    let (_, upgraded) = c.call::<_, ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat, 1, &beat(0));
    out.push(code("ConsumerGroupHeartbeat", upgraded.error_code));
    out.push(code(
        "Heartbeat",
        c.call::<_, HeartbeatResponse>(ApiKey::Heartbeat, 4, &heartbeat(joined.generation_id)).1.error_code,
    ));
    let described = ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group))]);
    let (_, d) = c.call::<_, ConsumerGroupDescribeResponse>(ApiKey::ConsumerGroupDescribe, 1, &described);
    let mut types: Vec<i8> = d.groups[0].members.iter().map(|m| m.member_type).collect();
    types.sort();
    out.push(format!("ConsumerGroupDescribe: error {}, member types {types:?}", d.groups[0].error_code));
    // The classic member rejoins (it has revoked nothing: eager) until it is at the new epoch.
    let deadline = Instant::now() + Duration::from_secs(30);
    let generation = loop {
        let (_, rejoined) = c.call::<_, JoinGroupResponse>(ApiKey::JoinGroup, 7, &join(&member));
        let (_, synced) =
            c.call::<_, SyncGroupResponse>(ApiKey::SyncGroup, 5, &sync(rejoined.generation_id, Vec::new()));
        let hb = c.call::<_, HeartbeatResponse>(ApiKey::Heartbeat, 4, &heartbeat(rejoined.generation_id)).1.error_code;
        if (rejoined.error_code, synced.error_code, hb) == (0, 0, 0) {
            out.push(format!(
                "rejoined as a classic member of a consumer group, leader {:?}",
                rejoined.leader.as_str()
            ));
            break rejoined.generation_id;
        }
        assert!(Instant::now() < deadline, "the classic member never settles: {rejoined:?} {synced:?} {hb}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // The consumer-protocol member leaves: the group is classic again, and rebalances. The
    // classic member's generation is still current there (REBALANCE_IN_PROGRESS, not
    // ILLEGAL_GENERATION).
    let (_, left) = c.call::<_, ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat, 1, &beat(-1));
    out.push(code("ConsumerGroupHeartbeat", left.error_code));
    out.push(code(
        "Heartbeat",
        c.call::<_, HeartbeatResponse>(ApiKey::Heartbeat, 4, &heartbeat(generation)).1.error_code,
    ));
    let (_, d) = c.call::<_, ConsumerGroupDescribeResponse>(ApiKey::ConsumerGroupDescribe, 1, &described);
    out.push(code("ConsumerGroupDescribe", d.groups[0].error_code));
    let (_, classic) = c.call::<_, JoinGroupResponse>(ApiKey::JoinGroup, 7, &join(&member));
    out.push(format!(
        "JoinGroup: error {}, the next generation {}, leading itself {}",
        classic.error_code,
        classic.generation_id == generation + 1,
        classic.leader == classic.member_id
    ));
    out
}

/// DescribeGroups v6 (KIP-1043): a group that does not exist is an error, not a Dead group.
fn describe_groups_v6(c: &mut Session) -> Vec<String> {
    c.await_coordinator("conf-no-such-group-6", 0);
    let describe = DescribeGroupsRequest::default().with_groups(vec![GroupId(s("conf-no-such-group-6"))]);
    vec![c.call::<_, DescribeGroupsResponse>(ApiKey::DescribeGroups, 6, &describe).0]
}

/// ListTransactions v2 (KIP-1152): the transactional id pattern, matched as a whole, and one
/// that is not a regular expression.
fn list_transactions_v2(c: &mut Session) -> Vec<String> {
    for id in ["conf-lt-a", "conf-lt-b", "other-lt"] {
        c.await_coordinator(id, 1);
        c.init_producer_id(Some(id));
    }
    ["conf-lt-.*", "lt", ".*-lt", "conf-lt-[", ""]
        .into_iter()
        .map(|pattern| {
            let list = ListTransactionsRequest::default().with_transactional_id_pattern(Some(s(pattern)));
            let (_, mut response) = c.call::<_, ListTransactionsResponse>(ApiKey::ListTransactions, 2, &list);
            if pattern.is_empty() {
                // Every transaction there is, including other cases': only ours are compared.
                response.transaction_states.retain(|t| t.transactional_id.0.contains("lt"));
            }
            // In no particular order (Apache's is its map's).
            response.transaction_states.sort_by(|a, b| a.transactional_id.0.cmp(&b.transactional_id.0));
            format!("ListTransactions v2 {pattern:?}: {}", masked(&format!("{response:?}")))
        })
        .collect()
}

/// AlterPartitionReassignments' checks of a target, a move to where a partition is, a cancel
/// of none, unknown topics and partitions; ListPartitionReassignments then lists none. Broker
/// 0 is the one broker of both (node.id=0 and kaas's default id); 7 is no broker.
fn partition_reassignments(c: &mut Session) -> Vec<String> {
    use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
    use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
    c.create_topic("conf-reassign", 2);
    let targets: [(&str, i32, Option<Vec<i32>>); 8] = [
        ("conf-reassign", 0, Some(vec![0])),
        ("conf-reassign", 1, Some(vec![])),
        ("conf-reassign", 1, Some(vec![0, 0])),
        ("conf-reassign", 1, Some(vec![7, 0])),
        ("conf-reassign", 0, None),
        ("conf-reassign", 5, Some(vec![0])),
        ("conf-reassign-none", 0, Some(vec![0])),
        ("conf-reassign-none", 0, None),
    ];
    let mut out = Vec::new();
    for (version, (topic, partition, replicas)) in targets.into_iter().enumerate().map(|(i, t)| (i as i16 % 2, t)) {
        let replicas = replicas.map(|r| r.into_iter().map(BrokerId).collect());
        let alter = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(30_000)
            .with_allow_replication_factor_change(version == 0)
            .with_topics(vec![ReassignableTopic::default().with_name(name(topic)).with_partitions(vec![
                ReassignablePartition::default().with_partition_index(partition).with_replicas(replicas),
            ])]);
        out.push(
            c.call::<_, AlterPartitionReassignmentsResponse>(ApiKey::AlterPartitionReassignments, version, &alter).0,
        );
    }
    let all = ListPartitionReassignmentsRequest::default().with_timeout_ms(30_000);
    out.push(c.call::<_, ListPartitionReassignmentsResponse>(ApiKey::ListPartitionReassignments, 0, &all).0);
    let named = all.with_topics(Some(vec![
        ListPartitionReassignmentsTopics::default().with_name(name("conf-reassign")).with_partition_indexes(vec![0, 1]),
    ]));
    out.push(c.call::<_, ListPartitionReassignmentsResponse>(ApiKey::ListPartitionReassignments, 0, &named).0);
    out
}

/// The versions Kafka 4.4 added to APIs kaas served before (issue 24): topics by id in
/// OffsetCommit v10, OffsetFetch v10 and TxnOffsetCommit v6 (an id no topic has included),
/// ListOffsets v11's earliest pending upload, ApiVersions v5 naming another cluster, DeleteGroups
/// v3 and ListConfigResources.
fn kafka_4_4_versions(c: &mut Session) -> Vec<String> {
    c.create_topic("conf-ids", 1);
    c.setup_produce("conf-ids", 0, batch((-1, -1), -1, 2, false));
    c.await_coordinator("conf-ids-g", 0);
    let metadata = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(name("conf-ids")))]));
    let response: MetadataResponse = c.wire.call(ApiKey::Metadata, 12, &metadata);
    let id = response.topics[0].topic_id;
    let nobody = Uuid::from_u128(0x6b61_6173_0000_4000_8000_0000_0000_0024);
    let mut out = Vec::new();
    // By id, with the name left at "" as the Java client leaves it.
    let by_id = MetadataRequest::default().with_topics(Some(
        [id, nobody]
            .map(|id| metadata_request::MetadataRequestTopic::default().with_topic_id(id).with_name(Some(name(""))))
            .to_vec(),
    ));
    let (_, found) = c.call::<_, MetadataResponse>(ApiKey::Metadata, 12, &by_id);
    let found: Vec<(Option<String>, i16)> =
        found.topics.iter().map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.error_code)).collect();
    out.push(format!("Metadata by id: {found:?}"));
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("conf-ids-g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(
            [id, nobody]
                .map(|id| {
                    OffsetCommitRequestTopic::default().with_topic_id(id).with_partitions(vec![
                        OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1),
                    ])
                })
                .to_vec(),
        );
    out.push(c.call::<_, OffsetCommitResponse>(ApiKey::OffsetCommit, 10, &commit).0);
    // By name, a partition and a topic that do not exist beside one that does: the order of
    // Apache's answer (its refusals first).
    let partition = |p: i32| OffsetCommitRequestPartition::default().with_partition_index(p).with_committed_offset(1);
    let by_name = commit.with_topics(vec![
        OffsetCommitRequestTopic::default()
            .with_name(name("conf-ids"))
            .with_partitions(vec![partition(0), partition(2)]),
        OffsetCommitRequestTopic::default().with_name(name("conf-ids-nowhere")).with_partitions(vec![partition(0)]),
    ]);
    out.push(c.call::<_, OffsetCommitResponse>(ApiKey::OffsetCommit, 8, &by_name).0);
    let fetch = |topics: Option<Vec<offset_fetch_request::OffsetFetchRequestTopics>>| {
        OffsetFetchRequest::default().with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("conf-ids-g")))
                .with_topics(topics),
        ])
    };
    let named = [id, nobody]
        .map(|id| {
            offset_fetch_request::OffsetFetchRequestTopics::default().with_topic_id(id).with_partition_indexes(vec![0])
        })
        .to_vec();
    out.push(c.call::<_, OffsetFetchResponse>(ApiKey::OffsetFetch, 10, &fetch(Some(named))).0);
    out.push(c.call::<_, OffsetFetchResponse>(ApiKey::OffsetFetch, 10, &fetch(None)).0);
    let txn_commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("conf-ids-t")))
        .with_group_id(GroupId(s("conf-ids-g")))
        .with_producer_id(ProducerId(4242))
        .with_producer_epoch(0)
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default().with_topic_id(nobody).with_partitions(
                vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1),
                ],
            ),
        ]);
    out.push(c.call::<_, TxnOffsetCommitResponse>(ApiKey::TxnOffsetCommit, 6, &txn_commit).0);
    for timestamp in [-5, -6] {
        let list = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            ListOffsetsTopic::default().with_name(name("conf-ids")).with_partitions(vec![
                ListOffsetsPartition::default().with_partition_index(0).with_timestamp(timestamp),
            ]),
        ]);
        out.push(c.call::<_, ListOffsetsResponse>(ApiKey::ListOffsets, 11, &list).0);
    }
    let elsewhere = ApiVersionsRequest::default()
        .with_client_software_name(s("conformance"))
        .with_client_software_version(s("1"))
        .with_cluster_id(Some(s("another-cluster")))
        .with_node_id(0);
    let (_, versions) = c.call::<_, ApiVersionsResponse>(ApiKey::ApiVersions, 5, &elsewhere);
    out.push(format!("ApiVersions v5 naming another cluster: error {}", versions.error_code));
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("conf-ids-nobody"))]);
    out.push(c.call::<_, DeleteGroupsResponse>(ApiKey::DeleteGroups, 3, &delete).0);
    // The two brokers' topics, brokers and internal topics differ: what is compared is the
    // error, which types come back in which order, and that the case's topic is among them.
    for (version, types) in [(0, vec![]), (1, vec![]), (1, vec![2]), (1, vec![2, 64])] {
        let request = ListConfigResourcesRequest::default().with_resource_types(types.clone());
        let (_, response) = c.call::<_, ListConfigResourcesResponse>(ApiKey::ListConfigResources, version, &request);
        let mut kinds: Vec<i8> = response.config_resources.iter().map(|r| r.resource_type).collect();
        kinds.dedup();
        let listed =
            response.config_resources.iter().any(|r| r.resource_type == 2 && r.resource_name.as_str() == "conf-ids");
        out.push(format!(
            "ListConfigResources v{version} {types:?}: error {}, types {kinds:?}, conf-ids listed {listed}",
            response.error_code
        ));
    }
    out
}

/// What a partition takes from a producer (issue 24): a compacted topic refuses each record
/// without a key, a CreateTime topic each timestamp too far ahead (Kafka 4: an hour), both by
/// the record's index; a LogAppendTime topic answers the time it stamped.
fn record_policies(c: &mut Session) -> Vec<String> {
    let topics = [
        ("conf-compacted", "cleanup.policy", "compact"),
        ("conf-log-append", "message.timestamp.type", "LogAppendTime"),
        ("conf-create-time", "message.timestamp.type", "CreateTime"),
    ];
    for (topic, config, value) in topics {
        let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![
            CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(1)
                .with_replication_factor(1)
                .with_configs(vec![
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(s(config))
                        .with_value(Some(s(value))),
                ]),
        ]);
        let response: CreateTopicsResponse = c.wire.call(ApiKey::CreateTopics, 7, &request);
        assert_eq!(response.topics[0].error_code, 0, "{response:?}");
        c.await_leaders(topic);
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let cases = [
        ("conf-compacted", keyed_batch(&[(Some("a"), now), (None, now), (Some("b"), now), (None, now)])),
        ("conf-compacted", keyed_batch(&[(Some("a"), now), (Some("b"), now)])),
        ("conf-create-time", keyed_batch(&[(None, now), (None, now + 7_200_000), (None, 1_000)])),
        ("conf-log-append", keyed_batch(&[(None, 1_000)])),
    ];
    let mut out = Vec::new();
    for (topic, records) in cases {
        let (_, response) = c.call::<_, ProduceResponse>(ApiKey::Produce, 9, &produce(topic, 0, records, None));
        let p = &response.responses[0].partition_responses[0];
        let refused: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        out.push(format!(
            "{topic}: error {}, records refused {refused:?}, message {}, log append time {}",
            p.error_code,
            p.error_message.is_some(),
            if p.log_append_time_ms >= now { "the broker's" } else { "none" },
        ));
    }
    // What both brokers are expected to answer, not only to answer alike.
    let expected = [
        "error 87, records refused [1, 3], message true, log append time none",
        "error 0, records refused [], message false, log append time none",
        "error 32, records refused [1], message true, log append time none",
        "error 0, records refused [], message false, log append time the broker's",
    ];
    for (answer, expected) in out.iter().zip(expected) {
        assert!(answer.ends_with(expected), "{} answered {answer}", c.bootstrap);
    }
    out
}

/// A consumer group's own configs (the GROUP resource, issue 24): the heartbeat interval it is
/// told is the group's `consumer.heartbeat.interval.ms`, and its session timeout is described.
fn consumer_group_configs(c: &mut Session) -> Vec<String> {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    c.create_topic("conf-gc", 1);
    c.await_coordinator("conf-gc-g", 0);
    let set = |name: &str, value: &str| {
        AlterableConfig::default().with_name(s(name)).with_config_operation(0).with_value(Some(s(value)))
    };
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default().with_resource_type(32).with_resource_name(s("conf-gc-g")).with_configs(vec![
            set("consumer.heartbeat.interval.ms", "6500"),
            set("consumer.session.timeout.ms", "47000"),
        ]),
    ]);
    // Below Apache's group.consumer.min.heartbeat.interval.ms (5 s): refused whole.
    let too_short = alter.clone().with_resources(vec![
        AlterConfigsResource::default().with_resource_type(32).with_resource_name(s("conf-gc-g")).with_configs(vec![
            set("consumer.heartbeat.interval.ms", "2500"),
            set("consumer.session.timeout.ms", "47000"),
        ]),
    ]);
    let mut out = vec![c.call::<_, IncrementalAlterConfigsResponse>(ApiKey::IncrementalAlterConfigs, 1, &too_short).0];
    out.push(c.call::<_, IncrementalAlterConfigsResponse>(ApiKey::IncrementalAlterConfigs, 1, &alter).0);
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("conf-gc-g")))
        .with_member_id(s("conf-gc-m1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![name("conf-gc")]))
        .with_topic_partitions(Some(Vec::new()));
    // Apache applies a group config from its metadata log a moment after it answered.
    let deadline = Instant::now() + Duration::from_secs(10);
    let interval = loop {
        let (_, joined) = c.call::<_, ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat, 1, &join);
        if joined.heartbeat_interval_ms == 6500 || Instant::now() > deadline {
            break joined.heartbeat_interval_ms;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    out.push(format!("heartbeat interval told: {interval}"));
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(s("conf-gc-g"))
            .with_configuration_keys(Some(vec![s("consumer.session.timeout.ms"), s("consumer.heartbeat.interval.ms")])),
    ]);
    let (_, described) = c.call::<_, DescribeConfigsResponse>(ApiKey::DescribeConfigs, 4, &describe);
    let mut values: Vec<String> = described.results[0]
        .configs
        .iter()
        .map(|c| format!("{}={}", c.name.as_str(), c.value.as_deref().unwrap_or("null")))
        .collect();
    values.sort();
    out.push(format!("described: error {}, {values:?}", described.results[0].error_code));
    out
}

/// KIP-848 subscriptions by regular expression (issue 24): one that does not compile is
/// refused; one that does is resolved against the topics (the whole name), a moment later on
/// Apache, which resolves regexes off the request path.
fn consumer_regex_subscription(c: &mut Session) -> Vec<String> {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    for topic in ["conf-rx-1", "conf-rx-2", "conf-rx-1x"] {
        c.create_topic(topic, 1);
    }
    c.await_coordinator("conf-rx-g", 0);
    let beat = |member: &str, epoch: i32, regex: Option<&str>| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("conf-rx-g")))
            .with_member_id(s(member))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(if epoch == 0 { 30_000 } else { -1 })
            .with_subscribed_topic_regex(regex.map(s))
            .with_topic_partitions(if epoch == 0 { Some(Vec::<TopicPartitions>::new()) } else { None })
    };
    let (_, refused) = c.call::<_, ConsumerGroupHeartbeatResponse>(
        ApiKey::ConsumerGroupHeartbeat,
        1,
        &beat("conf-rx-bad", 0, Some("conf-rx-(")),
    );
    let mut out = vec![format!("regex that does not compile: error {}", refused.error_code)];
    let (_, joined) = c.call::<_, ConsumerGroupHeartbeatResponse>(
        ApiKey::ConsumerGroupHeartbeat,
        1,
        &beat("conf-rx-m", 0, Some("conf-rx-[0-9]")),
    );
    out.push(format!("joined by regex: error {}", joined.error_code));
    let mut epoch = joined.member_epoch;
    let mut assigned = joined.assignment.map_or(0, |a| a.topic_partitions.len());
    let deadline = Instant::now() + Duration::from_secs(20);
    while assigned < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        let (_, r) = c.call::<_, ConsumerGroupHeartbeatResponse>(
            ApiKey::ConsumerGroupHeartbeat,
            1,
            &beat("conf-rx-m", epoch, None),
        );
        epoch = r.member_epoch;
        if let Some(a) = r.assignment {
            assigned = a.topic_partitions.len();
        }
    }
    assert_eq!(assigned, 2, "{} assigned conf-rx-1 and conf-rx-2 by the regex, not conf-rx-1x", c.bootstrap);
    out.push(format!("topics assigned by the regex: {assigned}"));
    let describe = ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("conf-rx-g"))]);
    let (_, described) = c.call::<_, ConsumerGroupDescribeResponse>(ApiKey::ConsumerGroupDescribe, 1, &describe);
    let regexes: Vec<String> = described.groups[0]
        .members
        .iter()
        .map(|m| m.subscribed_topic_regex.as_deref().unwrap_or("null").to_string())
        .collect();
    out.push(format!("described regexes: {regexes:?}"));
    out
}

const CASES: &[(&str, Case)] = &[
    ("produce-errors", produce_errors),
    ("idempotent-sequences", idempotent_sequences),
    ("idempotent-first-batch-at-sequence-5", idempotent_first_batch_at_sequence_5),
    ("transactions-and-fencing", transactions_and_fencing),
    ("offsets-and-fetch", offsets_and_fetch),
    ("groups-and-commits", groups_and_commits),
    ("admin-errors", admin_errors),
    ("more-admin-errors", more_admin_errors),
    ("transaction-state-errors", transaction_state_errors),
    ("offset-delete", offset_delete),
    ("transactions-v2", transactions_v2),
    ("consumer-protocol", consumer_protocol),
    ("consumer-protocol-unknown-group", consumer_protocol_unknown_group),
    ("group-migration", group_migration),
    ("describe-groups-v6", describe_groups_v6),
    ("list-transactions-v2", list_transactions_v2),
    ("partition-reassignments", partition_reassignments),
    ("kafka-4-4-versions", kafka_4_4_versions),
    ("record-policies", record_policies),
    ("consumer-group-configs", consumer_group_configs),
    ("consumer-regex-subscription", consumer_regex_subscription),
];

#[test]
fn kaas_answers_as_apache_kafka_does() {
    let apache = Apache::start();
    let kaas = Kaas::start("conformance", &["auto.create.topics.enable=false", "group.initial.rebalance.delay.ms=0"]);
    let mut failures = Vec::new();
    for (case, run) in CASES {
        let answers = [format!("127.0.0.1:{}", apache.port), kaas.bootstrap()].map(|bootstrap| {
            let mut session = Session { wire: Wire::connect(&bootstrap), bootstrap };
            run(&mut session)
        });
        let [theirs, ours] = &answers;
        let differing: Vec<String> = theirs
            .iter()
            .zip(ours)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("  apache: {a}\n  kaas:   {b}"))
            .collect();
        let deliberate = DELIBERATE.iter().find(|(c, _)| c == case);
        match (differing.is_empty() && theirs.len() == ours.len(), deliberate) {
            (true, None) => eprintln!("{case}: the same"),
            (true, Some(_)) => failures.push(format!("{case}: listed as deliberate but the same now")),
            (false, Some((_, why))) => eprintln!("{case}: differs, deliberately: {why}\n{}", differing.join("\n")),
            (false, None) => failures.push(format!("{case}: differs\n{}", differing.join("\n"))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn masking_hides_only_the_named_fields() {
    let rendered = r#"R { producer_id: ProducerId(7), error_code: 3, topic_id: 0a-1b, name: "x, y", leader: Some(L { a: 1 }), n: 2 }"#;
    assert_eq!(masked(rendered), r#"R { producer_id: _, error_code: 3, topic_id: _, name: "x, y", leader: _, n: 2 }"#);
}
