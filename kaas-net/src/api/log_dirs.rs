//! DescribeLogDirs (v1-v5; v5's is_cordoned is always false: kaas has no cordoning) and AlterReplicaLogDirs (v1-v2). A kaas broker has one log
//! directory, the data directory on the shared volume, and hosts the partitions it owns: those
//! are the ones it describes, with their size on the volume, and the file system's size and
//! free space (v4). There is no other directory to move a partition to: AlterReplicaLogDirs
//! answers as Apache does for a directory it does not have (LOG_DIR_NOT_FOUND), for a partition
//! it does not host (REPLICA_NOT_AVAILABLE), and for a move to where the partition already is
//! (nothing to do).

use kaas_core::acl::{Operation, Resource};
use kaas_core::env::{Env, Volume};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::*;

use super::{text, topic};
use crate::connection::Context;

pub async fn describe<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    // DESCRIBE on the cluster; without it, v3+ says so and older versions get nothing.
    if !ctx.authorized(Operation::Describe, Resource::cluster()) {
        return DescribeLogDirsResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let broker = &ctx.broker;
    // null: every partition this broker hosts.
    let wanted: Option<Vec<(String, Vec<i32>)>> =
        request.topics.map(|ts| ts.into_iter().map(|t| (t.topic.0.to_string(), t.partitions)).collect());
    match &wanted {
        None => broker.topics.refresh_all().await,
        Some(list) => broker.topics.refresh(list.iter().map(|(t, _)| t.as_str())).await,
    }
    let snapshot = broker.topics.snapshot();
    // (topic, partitions) in name order.
    let wanted: Vec<(String, Vec<i32>)> = match wanted {
        None => snapshot.topics.values().map(|t| (t.meta.name.clone(), (0..t.meta.partitions).collect())).collect(),
        Some(mut list) => {
            list.sort_by(|a, b| a.0.cmp(&b.0));
            list
        }
    };
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for (name, wanted_partitions) in wanted {
        let mut partitions = Vec::new();
        for p in wanted_partitions {
            let Some(handle) = snapshot.partition(&name, p) else { continue };
            if !handle.watermarks().owned {
                continue;
            }
            // A partition that stops being ours meanwhile is left out, as one not hosted.
            if let Ok(size) = handle.size_bytes().await {
                partitions.push(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p)
                        .with_partition_size(i64::try_from(size).unwrap_or(i64::MAX))
                        .with_offset_lag(0)
                        .with_is_future_key(false),
                );
            }
        }
        match topics.last_mut() {
            // A topic named twice is answered once.
            Some(last) if last.name.0.as_str() == name => last.partitions.extend(partitions),
            _ if partitions.is_empty() => {}
            _ => topics.push(DescribeLogDirsTopic::default().with_name(topic(&name)).with_partitions(partitions)),
        }
    }
    let space = broker.env.volume().space().await;
    let bytes = |b: Option<u64>| b.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let result = DescribeLogDirsResult::default()
        .with_log_dir(text(&broker.config.log_dir))
        .with_topics(topics)
        .with_total_bytes(bytes(space.map(|s| s.total_bytes)))
        .with_usable_bytes(bytes(space.map(|s| s.usable_bytes)));
    DescribeLogDirsResponse::default().with_results(vec![result])
}

pub async fn alter_replica<E: Env>(
    ctx: &Context<E>,
    _header: &RequestHeader,
    request: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let broker = &ctx.broker;
    let names: Vec<String> = request.dirs.iter().flat_map(|d| &d.topics).map(|t| t.name.0.to_string()).collect();
    broker.topics.refresh(names.iter().map(String::as_str)).await;
    let snapshot = broker.topics.snapshot();
    let mut results = Vec::new();
    for dir in &request.dirs {
        let here = dir.path.as_str() == broker.config.log_dir;
        for t in &dir.topics {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| {
                    let hosted = snapshot.partition(&t.name.0, p).is_some_and(|h| h.watermarks().owned);
                    let code = match (here, hosted) {
                        (false, _) => ResponseError::LogDirNotFound.code(),
                        (true, false) => ResponseError::ReplicaNotAvailable.code(),
                        (true, true) => 0,
                    };
                    AlterReplicaLogDirPartitionResult::default().with_partition_index(p).with_error_code(code)
                })
                .collect();
            results.push(
                AlterReplicaLogDirTopicResult::default().with_topic_name(t.name.clone()).with_partitions(partitions),
            );
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}
