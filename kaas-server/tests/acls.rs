//! ACLs on real brokers, request by request: each gate answers Apache's error code, in
//! Apache's order, for a principal the ACLs refuse, and lets through one they allow. Clients
//! authenticate with SASL/PLAIN on a SASL_PLAINTEXT listener (admin is a super user); the
//! PLAINTEXT listener is the brokers' own, where a client is User:ANONYMOUS.

mod common;

use std::time::{Duration, Instant};

use common::Kaas;
use common::wire::{Wire, batch};
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const USERS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";"#;

// Kafka's codes, as the wire carries them.
const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_ID_DENIED: i16 = 53;
const NOT_ATTEMPTED: i16 = 55;
const SECURITY_DISABLED: i16 = 54;

// ACL codes.
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const TRANSACTIONAL_ID: i8 = 5;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const ALLOW: i8 = 3;
const DENY: i8 = 2;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn settings(users: &str) -> Vec<String> {
    vec![
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "super.users=User:admin".into(),
        format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={users}"),
        "group.initial.rebalance.delay.ms=0".into(),
    ]
}

fn start(name: &str) -> Kaas {
    let settings = settings(USERS);
    Kaas::with_sasl(name, &settings.iter().map(String::as_str).collect::<Vec<_>>())
}

fn acl(resource_type: i8, name: &str, pattern: i8, principal: &str, operation: i8, permission: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

fn create_acls(wire: &mut Wire, creations: Vec<AclCreation>) -> Vec<i16> {
    let answer: CreateAclsResponse =
        wire.call(ApiKey::CreateAcls, 3, &CreateAclsRequest::default().with_creations(creations));
    answer.results.iter().map(|r| r.error_code).collect()
}

fn create_topic(wire: &mut Wire, topic: &str) -> i16 {
    let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![
        CreatableTopic::default().with_name(TopicName(s(topic))).with_num_partitions(1).with_replication_factor(1),
    ]);
    let answer: CreateTopicsResponse = wire.call(ApiKey::CreateTopics, 5, &request);
    answer.topics[0].error_code
}

fn produce(wire: &mut Wire, topic: &str, producer: (i64, i16), transactional_id: Option<&str>) -> i16 {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
        .with_topic_data(vec![TopicProduceData::default().with_name(TopicName(s(topic))).with_partition_data(vec![
            PartitionProduceData::default().with_index(0).with_records(Some(batch(
                producer,
                0,
                1,
                transactional_id.is_some(),
            ))),
        ])]);
    let answer: ProduceResponse = wire.call(ApiKey::Produce, 9, &request);
    answer.responses[0].partition_responses[0].error_code
}

fn fetch(wire: &mut Wire, topic: &str) -> i16 {
    let request = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![
        FetchTopic::default().with_topic(TopicName(s(topic))).with_partitions(vec![
            FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20),
        ]),
    ]);
    let answer: FetchResponse = wire.call(ApiKey::Fetch, 12, &request);
    answer.responses[0].partitions[0].error_code
}

/// Metadata of every topic: the names listed.
fn topics_listed(wire: &mut Wire) -> Vec<String> {
    let answer: MetadataResponse = wire.call(ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(None));
    answer.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.0.to_string())).collect()
}

fn metadata_of(wire: &mut Wire, topic: &str) -> i16 {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(s(topic))))]))
        .with_allow_auto_topic_creation(false);
    let answer: MetadataResponse = wire.call(ApiKey::Metadata, 12, &request);
    answer.topics[0].error_code
}

fn init_producer_id(wire: &mut Wire, transactional_id: Option<&str>) -> (i16, i64, i16) {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // A transaction coordinator may still be loading a moment after the start.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer: InitProducerIdResponse = wire.call(ApiKey::InitProducerId, 4, &request);
        if ![14, 15, 51].contains(&answer.error_code) || Instant::now() > deadline {
            return (answer.error_code, answer.producer_id.0, answer.producer_epoch);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn find_coordinator(wire: &mut Wire, key_type: i8, key: &str) -> i16 {
    let request = FindCoordinatorRequest::default().with_key_type(key_type).with_coordinator_keys(vec![s(key)]);
    let answer: FindCoordinatorResponse = wire.call(ApiKey::FindCoordinator, 4, &request);
    answer.coordinators[0].error_code
}

#[test]
fn every_gate_answers_apaches_code_to_whom_the_acls_refuse() {
    let kaas = start("acls-gates");
    let mut anonymous = Wire::connect(&kaas.bootstrap());
    let mut admin = Wire::connect_plain(&kaas.sasl_bootstrap(), "admin", "admin-secret");
    let mut alice = Wire::connect_plain(&kaas.sasl_bootstrap(), "alice", "alice-secret");
    let mut bob = Wire::connect_plain(&kaas.sasl_bootstrap(), "bob", "bob-secret");

    // Only a principal with ALTER on the cluster changes ACLs; the super user may.
    let grant = || {
        vec![
            acl(TOPIC, "orders", LITERAL, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW),
            acl(GROUP, "g", LITERAL, "User:alice", READ, ALLOW),
            acl(TRANSACTIONAL_ID, "t-a", LITERAL, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "pub-", PREFIXED, "User:*", READ, ALLOW),
        ]
    };
    assert_eq!(create_acls(&mut anonymous, grant()), vec![CLUSTER_DENIED; 5]);
    assert_eq!(create_acls(&mut alice, grant()), vec![CLUSTER_DENIED; 5]);
    assert_eq!(create_acls(&mut admin, grant()), vec![0; 5]);
    let described: DescribeAclsResponse = admin.call(
        ApiKey::DescribeAcls,
        3,
        &DescribeAclsRequest::default()
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1),
    );
    assert_eq!(described.error_code, 0);
    assert_eq!(described.resources.iter().map(|r| r.acls.len()).sum::<usize>(), 5);
    let refused: DescribeAclsResponse = bob.call(ApiKey::DescribeAcls, 3, &DescribeAclsRequest::default());
    assert_eq!(refused.error_code, CLUSTER_DENIED);

    // Topics: CREATE, DESCRIBE (Metadata), WRITE (Produce), READ (Fetch).
    assert_eq!(create_topic(&mut bob, "orders"), TOPIC_DENIED);
    assert_eq!(create_topic(&mut admin, "orders"), 0);
    assert_eq!(create_topic(&mut admin, "secret"), 0);
    assert_eq!(topics_listed(&mut alice), vec!["orders".to_string()], "only what alice may describe");
    assert!(topics_listed(&mut bob).is_empty());
    assert_eq!(metadata_of(&mut bob, "orders"), TOPIC_DENIED);
    assert_eq!(metadata_of(&mut alice, "orders"), 0);
    assert_eq!(produce(&mut bob, "orders", (-1, -1), None), TOPIC_DENIED);
    assert_eq!(produce(&mut alice, "orders", (-1, -1), None), 0);
    assert_eq!(fetch(&mut bob, "orders"), TOPIC_DENIED);
    assert_eq!(fetch(&mut alice, "orders"), 0);
    assert_eq!(fetch(&mut alice, "secret"), TOPIC_DENIED);

    // Idempotence (KIP-679): WRITE on some topic, else CLUSTER_AUTHORIZATION_FAILED.
    assert_eq!(init_producer_id(&mut bob, None).0, CLUSTER_DENIED);
    assert_eq!(init_producer_id(&mut alice, None).0, 0);

    // The transaction surface: the transactional id before anything is revealed.
    assert_eq!(find_coordinator(&mut alice, 1, "t-b"), TXN_ID_DENIED);
    assert_eq!(find_coordinator(&mut alice, 1, "t-a"), 0);
    assert_eq!(find_coordinator(&mut bob, 0, "g"), GROUP_DENIED);
    assert_eq!(init_producer_id(&mut alice, Some("t-b")).0, TXN_ID_DENIED);
    let (code, producer_id, producer_epoch) = init_producer_id(&mut alice, Some("t-a"));
    assert_eq!(code, 0);
    let producer = (producer_id, producer_epoch);
    let add = |topics: Vec<&str>, id: &str| {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(id)))
            .with_v3_and_below_producer_id(ProducerId(producer.0))
            .with_v3_and_below_producer_epoch(producer.1)
            .with_v3_and_below_topics(
                topics
                    .into_iter()
                    .map(|t| AddPartitionsToTxnTopic::default().with_name(TopicName(s(t))).with_partitions(vec![0]))
                    .collect(),
            )
    };
    let codes = |answer: AddPartitionsToTxnResponse| -> Vec<i16> {
        answer.results_by_topic_v3_and_below.iter().map(|t| t.results_by_partition[0].partition_error_code).collect()
    };
    let answer = alice.call(ApiKey::AddPartitionsToTxn, 3, &add(vec!["orders", "secret"], "t-a"));
    assert_eq!(codes(answer), vec![NOT_ATTEMPTED, TOPIC_DENIED], "the refused topic, and the rest not attempted");
    let answer = bob.call(ApiKey::AddPartitionsToTxn, 3, &add(vec!["orders"], "t-a"));
    assert_eq!(codes(answer), vec![TXN_ID_DENIED]);
    let answer = alice.call(ApiKey::AddPartitionsToTxn, 3, &add(vec!["orders"], "t-a"));
    assert_eq!(codes(answer), vec![0]);
    assert_eq!(produce(&mut bob, "orders", producer, Some("t-a")), TXN_ID_DENIED);
    assert_eq!(produce(&mut alice, "orders", producer, Some("t-a")), 0);
    // v4+ is a broker's verification: CLUSTER_ACTION.
    let verify = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(s("t-a")))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_verify_only(true)
            .with_topics(vec![
                AddPartitionsToTxnTopic::default().with_name(TopicName(s("orders"))).with_partitions(vec![0]),
            ]),
    ]);
    let answer: AddPartitionsToTxnResponse = alice.call(ApiKey::AddPartitionsToTxn, 4, &verify);
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    let add_offsets = |group: &str| {
        AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s("t-a")))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_group_id(GroupId(s(group)))
    };
    let answer: AddOffsetsToTxnResponse = alice.call(ApiKey::AddOffsetsToTxn, 3, &add_offsets("h"));
    assert_eq!(answer.error_code, GROUP_DENIED);
    let answer: AddOffsetsToTxnResponse = alice.call(ApiKey::AddOffsetsToTxn, 3, &add_offsets("g"));
    assert_eq!(answer.error_code, 0);
    let txn_commit = |topic: &str| {
        TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s("t-a")))
            .with_group_id(GroupId(s("g")))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(s(""))
            .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(TopicName(s(topic))).with_partitions(
                vec![TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1)],
            )])
    };
    let answer: TxnOffsetCommitResponse = alice.call(ApiKey::TxnOffsetCommit, 3, &txn_commit("secret"));
    assert_eq!(answer.topics[0].partitions[0].error_code, TOPIC_DENIED, "READ per topic");
    let answer: TxnOffsetCommitResponse = bob.call(ApiKey::TxnOffsetCommit, 3, &txn_commit("orders"));
    assert_eq!(answer.topics[0].partitions[0].error_code, TXN_ID_DENIED);
    let answer: TxnOffsetCommitResponse = alice.call(ApiKey::TxnOffsetCommit, 3, &txn_commit("orders"));
    assert_eq!(answer.topics[0].partitions[0].error_code, 0);
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s("t-a")))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(true);
    let answer: EndTxnResponse = bob.call(ApiKey::EndTxn, 3, &end);
    assert_eq!(answer.error_code, TXN_ID_DENIED);
    let answer: EndTxnResponse = alice.call(ApiKey::EndTxn, 3, &end);
    assert_eq!(answer.error_code, 0);
    // WriteTxnMarkers: only the cluster's brokers (CLUSTER_ACTION), not a client, not ANONYMOUS.
    let markers = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_transaction_result(false)
            .with_coordinator_epoch(0)
            .with_topics(vec![
                WritableTxnMarkerTopic::default().with_name(TopicName(s("orders"))).with_partition_indexes(vec![0]),
            ]),
    ]);
    for wire in [&mut alice, &mut anonymous] {
        let answer: WriteTxnMarkersResponse = wire.call(ApiKey::WriteTxnMarkers, 1, &markers);
        assert_eq!(answer.markers[0].topics[0].partitions[0].error_code, CLUSTER_DENIED);
    }

    // Groups: READ to join and commit, DESCRIBE to fetch offsets; ListGroups shows what one
    // may describe.
    let join = |group: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(""))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(s("range"))])
    };
    let answer: JoinGroupResponse = bob.call(ApiKey::JoinGroup, 5, &join("g"));
    assert_eq!(answer.error_code, GROUP_DENIED);
    let commit = |topic: &str| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(s(""))
            .with_topics(vec![OffsetCommitRequestTopic::default().with_name(TopicName(s(topic))).with_partitions(
                vec![OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1)],
            )])
    };
    let answer: OffsetCommitResponse = bob.call(ApiKey::OffsetCommit, 8, &commit("orders"));
    assert_eq!(answer.topics[0].partitions[0].error_code, GROUP_DENIED);
    let answer: OffsetCommitResponse = alice.call(ApiKey::OffsetCommit, 8, &commit("secret"));
    assert_eq!(answer.topics[0].partitions[0].error_code, TOPIC_DENIED);
    let answer: OffsetCommitResponse = alice.call(ApiKey::OffsetCommit, 8, &commit("orders"));
    assert_eq!(answer.topics[0].partitions[0].error_code, 0);
    let answer: OffsetFetchResponse =
        bob.call(ApiKey::OffsetFetch, 7, &OffsetFetchRequest::default().with_group_id(GroupId(s("g"))));
    assert_eq!(answer.error_code, GROUP_DENIED);
    let listed = |wire: &mut Wire| -> Vec<String> {
        let answer: ListGroupsResponse = wire.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default());
        answer.groups.iter().map(|g| g.group_id.0.to_string()).collect()
    };
    assert_eq!(listed(&mut alice), vec!["g".to_string()]);
    assert!(listed(&mut bob).is_empty());

    // A DENY wins over an ALLOW; DeleteAcls takes it back, in force at once.
    assert_eq!(create_acls(&mut admin, vec![acl(TOPIC, "ord", PREFIXED, "User:alice", WRITE, DENY)]), vec![0]);
    assert_eq!(produce(&mut alice, "orders", (-1, -1), None), TOPIC_DENIED);
    let delete = DeleteAclsRequest::default().with_filters(vec![
        DeleteAclsFilter::default()
            .with_resource_type_filter(TOPIC)
            .with_resource_name_filter(Some(s("ord")))
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(PREFIXED)
            .with_operation(1)
            .with_permission_type(DENY),
    ]);
    let deleted: DeleteAclsResponse = admin.call(ApiKey::DeleteAcls, 3, &delete);
    assert_eq!(deleted.filter_results[0].error_code, 0);
    assert_eq!(deleted.filter_results[0].matching_acls.len(), 1);
    assert_eq!(produce(&mut alice, "orders", (-1, -1), None), 0);
}

#[test]
fn without_an_authorizer_acls_are_off_and_everything_is_allowed() {
    let kaas = Kaas::start("acls-off", &[]);
    let mut wire = Wire::connect(&kaas.bootstrap());
    assert_eq!(create_acls(&mut wire, vec![acl(TOPIC, "t", LITERAL, "User:a", READ, ALLOW)]), vec![SECURITY_DISABLED]);
    let described: DescribeAclsResponse = wire.call(ApiKey::DescribeAcls, 3, &DescribeAclsRequest::default());
    assert_eq!(described.error_code, SECURITY_DISABLED);
    assert_eq!(create_topic(&mut wire, "open"), 0);
    assert_eq!(produce(&mut wire, "open", (-1, -1), None), 0);
}

#[test]
fn an_acl_made_on_one_broker_is_in_force_on_another_within_a_heartbeat() {
    let settings = settings(USERS);
    let mut brokers = Kaas::cluster_with_sasl(
        "acls-cluster",
        2,
        &settings.iter().map(String::as_str).chain(["broker.heartbeat.interval.ms=500"]).collect::<Vec<_>>(),
    );
    let second = brokers.pop().expect("two");
    let first = brokers.pop().expect("two");
    let mut admin = Wire::connect_plain(&first.sasl_bootstrap(), "admin", "admin-secret");
    assert_eq!(create_topic(&mut admin, "shared"), 0);
    let mut bob = Wire::connect_plain(&second.sasl_bootstrap(), "bob", "bob-secret");
    assert_eq!(metadata_of(&mut bob, "shared"), TOPIC_DENIED);
    let made = Instant::now();
    assert_eq!(create_acls(&mut admin, vec![acl(TOPIC, "shared", LITERAL, "User:bob", READ, ALLOW)]), vec![0]);
    while metadata_of(&mut bob, "shared") != 0 {
        assert!(made.elapsed() < Duration::from_secs(10), "the ACL never reached the second broker");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A torn binding file fails closed: bob loses what the ACLs gave him, admin keeps all.
    let acls = first.data_dir.join("__cluster/acls");
    std::fs::write(acls.join("0000.json"), b"{\"format_version\":1,\"bin").unwrap();
    let torn = Instant::now();
    while metadata_of(&mut bob, "shared") == 0 {
        assert!(torn.elapsed() < Duration::from_secs(10), "a torn ACL file did not fail closed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metadata_of(&mut admin, "shared"), 0, "super users go on");
    drop(second);
}
