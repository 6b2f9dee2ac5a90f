//! The API and version table against Apache Kafka 4.4, `docs/api.md`: what kaas serves
//! (`SUPPORTED`) beside what Kafka 4.4.0 advertises, with a note where kaas answers in its own
//! way or not yet. Generated, and checked by kaas-server's `docs` test, so it cannot drift.

use kafka_protocol::messages::ApiKey;

use super::SUPPORTED;

/// (API key, name, lowest, highest version) as a single Apache Kafka 4.4.0 KRaft node
/// advertises them to clients (kafka-broker-api-versions against `ci/apache/kafka.sh`).
pub const KAFKA_4_4: &[(i16, &str, i16, i16)] = &[
    (0, "Produce", 0, 13),
    (1, "Fetch", 4, 18),
    (2, "ListOffsets", 1, 11),
    (3, "Metadata", 0, 13),
    (8, "OffsetCommit", 2, 10),
    (9, "OffsetFetch", 1, 10),
    (10, "FindCoordinator", 0, 6),
    (11, "JoinGroup", 0, 9),
    (12, "Heartbeat", 0, 4),
    (13, "LeaveGroup", 0, 5),
    (14, "SyncGroup", 0, 5),
    (15, "DescribeGroups", 0, 6),
    (16, "ListGroups", 0, 5),
    (17, "SaslHandshake", 0, 1),
    (18, "ApiVersions", 0, 5),
    (19, "CreateTopics", 2, 7),
    (20, "DeleteTopics", 1, 6),
    (21, "DeleteRecords", 0, 2),
    (22, "InitProducerId", 0, 5),
    (23, "OffsetForLeaderEpoch", 2, 4),
    (24, "AddPartitionsToTxn", 0, 5),
    (25, "AddOffsetsToTxn", 0, 4),
    (26, "EndTxn", 0, 5),
    (27, "WriteTxnMarkers", 1, 2),
    (28, "TxnOffsetCommit", 0, 6),
    (29, "DescribeAcls", 1, 3),
    (30, "CreateAcls", 1, 3),
    (31, "DeleteAcls", 1, 3),
    (32, "DescribeConfigs", 1, 4),
    (33, "AlterConfigs", 0, 2),
    (34, "AlterReplicaLogDirs", 1, 2),
    (35, "DescribeLogDirs", 1, 5),
    (36, "SaslAuthenticate", 0, 2),
    (37, "CreatePartitions", 0, 3),
    (38, "CreateDelegationToken", 1, 3),
    (39, "RenewDelegationToken", 1, 2),
    (40, "ExpireDelegationToken", 1, 2),
    (41, "DescribeDelegationToken", 1, 3),
    (42, "DeleteGroups", 0, 3),
    (43, "ElectLeaders", 0, 2),
    (44, "IncrementalAlterConfigs", 0, 1),
    (45, "AlterPartitionReassignments", 0, 1),
    (46, "ListPartitionReassignments", 0, 0),
    (47, "OffsetDelete", 0, 0),
    (48, "DescribeClientQuotas", 0, 1),
    (49, "AlterClientQuotas", 0, 1),
    (50, "DescribeUserScramCredentials", 0, 0),
    (51, "AlterUserScramCredentials", 0, 0),
    (55, "DescribeQuorum", 0, 2),
    (57, "UpdateFeatures", 0, 2),
    (60, "DescribeCluster", 0, 2),
    (61, "DescribeProducers", 0, 0),
    (64, "UnregisterBroker", 0, 0),
    (65, "DescribeTransactions", 0, 0),
    (66, "ListTransactions", 0, 2),
    (68, "ConsumerGroupHeartbeat", 0, 1),
    (69, "ConsumerGroupDescribe", 0, 1),
    (74, "ListConfigResources", 0, 1),
    (75, "DescribeTopicPartitions", 0, 0),
    (76, "ShareGroupHeartbeat", 1, 1),
    (77, "ShareGroupDescribe", 1, 1),
    (78, "ShareFetch", 1, 2),
    (79, "ShareAcknowledge", 1, 2),
    (80, "AddRaftVoter", 0, 1),
    (81, "RemoveRaftVoter", 0, 0),
    (83, "InitializeShareGroupState", 0, 0),
    (84, "ReadShareGroupState", 0, 0),
    (85, "WriteShareGroupState", 0, 1),
    (86, "DeleteShareGroupState", 0, 0),
    (87, "ReadShareGroupStateSummary", 0, 1),
    (88, "StreamsGroupHeartbeat", 0, 1),
    (89, "StreamsGroupDescribe", 0, 1),
    (90, "DescribeShareGroupOffsets", 0, 1),
    (91, "AlterShareGroupOffsets", 0, 0),
    (92, "DeleteShareGroupOffsets", 0, 0),
    (93, "StreamsGroupTopologyDescriptionUpdate", 0, 0),
    (94, "UnregisterController", 0, 0),
];

/// What a user should know of an API beyond its versions.
const NOTES: &[(i16, &str)] = &[
    (
        0,
        "v0-v2 are advertised (librdkafka before 2.11.1 wants v0) and answered UNSUPPORTED_VERSION, as Kafka 4 does; v12+ is transactions v2 (a write adds its partition to the transaction), advertised while `transaction.version` is 2",
    ),
    (
        2,
        "by timestamp: the first record at or after it, read inside its batch; latest tiered (-5) and earliest pending upload (-6, v11) are none: there is no tiered storage",
    ),
    (3, "a partition's leader is its owner on the shared volume; replicas and ISR name the owner alone"),
    (8, "v10 names topics by id; an id no topic has is UNKNOWN_TOPIC_ID"),
    (9, "v10 names topics by id; an id no topic has is UNKNOWN_TOPIC_ID"),
    (15, "v6: a group that is not a classic group is GROUP_ID_NOT_FOUND"),
    (17, "SASL listeners (PLAIN, SCRAM-SHA-256/512); v0, raw tokens after the handshake, not served"),
    (18, "v5: a client that names another cluster or node is told REBOOTSTRAP_REQUIRED (KIP-1242)"),
    (26, "v5 is transactions v2 (the epoch bumps at every end), advertised while `transaction.version` is 2"),
    (
        27,
        "v2's transaction version is read and not needed (a partition knows its producer's epochs); brokers of one volume call each other with v1",
    ),
    (
        28,
        "v5 is transactions v2 (the commit adds its group to the transaction), advertised while `transaction.version` is 2; v6 names topics by id and answers a consumer-protocol member's stale epoch STALE_MEMBER_EPOCH (KIP-1319)",
    ),
    (
        29,
        "the ACLs on the volume (DESCRIBE on the cluster); SECURITY_DISABLED without `authorizer.class.name`, as Apache",
    ),
    (
        30,
        "one file per binding on the volume, in force on every broker within a heartbeat (ALTER on the cluster); SECURITY_DISABLED without an authorizer",
    ),
    (
        31,
        "the bindings each filter selects, as the volume has them (ALTER on the cluster); SECURITY_DISABLED without an authorizer",
    ),
    (32, "broker settings under Kafka's names, with synonyms; see configuration.md"),
    (34, "one log directory: a move to it is nothing to do, to any other LOG_DIR_NOT_FOUND"),
    (35, "the data directory, the partitions this broker owns, the file system's size; never cordoned (v5)"),
    (
        36,
        "SASL listeners (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER); re-authentication (KIP-368) under `connections.max.reauth.ms`",
    ),
    (42, "v3: the cause beside a refusal, where kaas has one"),
    (43, "the owner is the only replica: ELECTION_NOT_NEEDED"),
    (
        45,
        "moves ownership, not data: the owner is the first live broker of the new replica list, reached by the ordinary hand-over",
    ),
    (46, "in progress while no broker of the new list holds the partition"),
    (50, "credentials on the shared volume, read by every broker when a user authenticates"),
    (51, "credentials on the shared volume as RFC 5802's stored keys; iterations 4096-16384 as Apache checks them"),
    (
        55,
        "no metadata quorum: the brokers' leases instead; every broker with a lease is a voter, its last renewal as its last fetch; the leader is the controller Metadata names, at epoch 0 with high watermark 0 (no election, no metadata log)",
    ),
    (60, "no broker is fenced: one whose lease ran out is gone"),
    (66, "v2: the transactional id pattern must match the whole id (RE2 syntax)"),
    (
        68,
        "KIP-848: server-side `uniform` and `range` assignors; subscription by topic names or by a regular expression (RE2 syntax, the whole name, resolved again at every heartbeat of the group, so a topic created later joins); classic and consumer-protocol members in one group during an online migration; the group (members, epochs, assignments, target) is written with its offsets before a heartbeat is answered, so a new coordinator carries it on and members keep their epochs",
    ),
    (69, "KIP-848: members, assignments and target assignments"),
    (
        74,
        "topics, brokers (as brokers and broker loggers), groups with configs; no client-metrics resources (kaas takes no client telemetry)",
    ),
    (75, "paged by cursor, as Apache pages it"),
];

fn range(min: i16, max: i16) -> String {
    if min == max { format!("{min}") } else { format!("{min}-{max}") }
}

pub fn api_table_markdown() -> String {
    let mut out = String::from(
        "# Kafka APIs and versions\n\n\
         Generated from `kaas-net/src/api/mod.rs` (`SUPPORTED`) and `reference.rs` (`cargo test -p \
         kaas-server --test docs` fails when this file is stale; `KAAS_WRITE_DOCS=1` rewrites it). \
         The Kafka 4.4 column is what a single Apache Kafka 4.4.0 node advertises to clients.\n\n\
         | Key | API | kaas | Kafka 4.4 | Notes |\n|---|---|---|---|---|\n",
    );
    let mut keys: Vec<i16> = KAFKA_4_4.iter().map(|&(k, ..)| k).collect();
    keys.extend(SUPPORTED.iter().map(|&(k, ..)| k as i16));
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let apache = KAFKA_4_4.iter().find(|&&(k, ..)| k == key);
        let ours = ApiKey::try_from(key).ok().and_then(super::supported);
        let name = match (apache, ApiKey::try_from(key)) {
            (Some(&(_, name, ..)), _) => name.to_string(),
            (None, Ok(api)) => format!("{api:?}"),
            (None, Err(_)) => format!("{key}"),
        };
        let note = NOTES.iter().find(|&&(k, _)| k == key).map_or("", |&(_, n)| n);
        let note = if ours.is_none() && note.is_empty() { "not yet" } else { note };
        out.push_str(&format!(
            "| {key} | {name} | {} | {} | {note} |\n",
            ours.map_or("-".to_string(), |(min, max)| range(min, max)),
            apache.map_or("-".to_string(), |&(_, _, min, max)| range(min, max)),
        ));
    }
    out
}
