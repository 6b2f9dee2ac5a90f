//! `kaas admin topics`: every topic, or some topics' partitions with their owners and offsets
//! (log start, high watermark, last stable offset), each asked of the partition's owner.

use std::collections::BTreeMap;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::*;

use super::connection::{Admin, error_name, topic};
use super::table::Table;
use crate::cells;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Every topic with its partition count
    List,
    /// Partitions of topics: owner, ownership epoch and offsets
    Describe {
        /// The topics (none: every topic)
        topics: Vec<String>,
    },
}

pub async fn run(admin: &mut Admin, command: Command) -> Result<Vec<Table>, String> {
    match command {
        Command::List => {
            let metadata = admin.metadata(None).await?;
            let mut table = Table::new("topics", &["TOPIC", "PARTITIONS", "TOPIC ID"]);
            let mut topics: Vec<_> = metadata.topics.iter().filter(|t| t.error_code == 0).collect();
            topics.sort_by_key(|t| t.name.as_ref().map(|n| n.0.to_string()));
            for t in topics {
                table.row(cells![t.name.as_ref().map_or("", |n| n.0.as_str()), t.partitions.len(), t.topic_id]);
            }
            Ok(vec![table])
        }
        Command::Describe { topics } => {
            let wanted = (!topics.is_empty()).then_some(topics);
            let owners = owners(admin, wanted).await?;
            let located: Vec<((String, i32), i32)> =
                owners.iter().filter_map(|(tp, o)| Some((tp.clone(), o.as_ref().ok()?.0))).collect();
            let start = offsets(admin, &located, -2, 0).await;
            let end = offsets(admin, &located, -1, 0).await;
            let stable = offsets(admin, &located, -1, 1).await;
            let headers =
                ["TOPIC", "PARTITION", "OWNER", "EPOCH", "LOG START", "HIGH WATERMARK", "LAST STABLE", "ERROR"];
            let mut table = Table::new("partitions", &headers);
            for ((t, p), owner) in &owners {
                let key = (t.clone(), *p);
                match owner {
                    Ok((owner, epoch)) => {
                        let offset = |m: &BTreeMap<(String, i32), Result<i64, String>>| match m.get(&key) {
                            Some(Ok(o)) => o.to_string(),
                            _ => "-".to_string(),
                        };
                        let error = [&start, &end, &stable].iter().find_map(|m| m.get(&key)?.as_ref().err().cloned());
                        table.row(cells![
                            t,
                            p,
                            owner,
                            epoch,
                            offset(&start),
                            offset(&end),
                            offset(&stable),
                            error.unwrap_or_default()
                        ]);
                    }
                    Err(e) => table.row(cells![t, p, "-", "-", "-", "-", "-", e]),
                }
            }
            Ok(vec![table])
        }
    }
}

/// Each partition of `topics` (None: every topic) with its owner and ownership epoch, or why
/// it has none; in topic and partition order. A broker knows the epoch of the partitions it
/// owns only, so each owner is asked of its own.
pub async fn owners(
    admin: &mut Admin,
    topics: Option<Vec<String>>,
) -> Result<BTreeMap<(String, i32), Result<(i32, i32), String>>, String> {
    let metadata = admin.metadata(topics.clone()).await?;
    let mut owners = BTreeMap::new();
    for t in &metadata.topics {
        let name = t.name.as_ref().map_or(String::new(), |n| n.0.to_string());
        if t.error_code != 0 {
            return Err(format!("{name}: {}", error_name(t.error_code)));
        }
        for p in &t.partitions {
            let owner = match (p.error_code, p.leader_id.0) {
                (0, leader) if leader >= 0 => Ok((leader, p.leader_epoch)),
                (0, _) => Err("no owner".to_string()),
                (code, _) => Err(error_name(code)),
            };
            owners.insert((name.clone(), p.partition_index), owner);
        }
    }
    let mut leaders: Vec<i32> = owners.values().filter_map(|o| Some(o.as_ref().ok()?.0)).collect();
    leaders.sort();
    leaders.dedup();
    let request = MetadataRequest::default().with_allow_auto_topic_creation(false).with_topics(topics.map(|ts| {
        ts.iter().map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(topic(t)))).collect()
    }));
    for leader in leaders {
        let Ok(own) = admin.call_on::<_, MetadataResponse>(leader, ApiKey::Metadata, 12, &request).await else {
            continue;
        };
        for t in &own.topics {
            let name = t.name.as_ref().map_or(String::new(), |n| n.0.to_string());
            for p in t.partitions.iter().filter(|p| p.error_code == 0 && p.leader_id.0 == leader) {
                owners.insert((name.clone(), p.partition_index), Ok((leader, p.leader_epoch)));
            }
        }
    }
    Ok(owners)
}

/// ListOffsets of each partition, asked of its owner: `timestamp` -1 the end, -2 the start;
/// `isolation` 1 read_committed (the end is then the last stable offset).
pub async fn offsets(
    admin: &mut Admin,
    partitions: &[((String, i32), i32)],
    timestamp: i64,
    isolation: i8,
) -> BTreeMap<(String, i32), Result<i64, String>> {
    let mut by_owner: BTreeMap<i32, Vec<&(String, i32)>> = BTreeMap::new();
    for (tp, owner) in partitions {
        by_owner.entry(*owner).or_default().push(tp);
    }
    let mut found = BTreeMap::new();
    for (owner, tps) in by_owner {
        let mut topics: Vec<ListOffsetsTopic> = Vec::new();
        for (t, p) in &tps {
            let partition = ListOffsetsPartition::default().with_partition_index(*p).with_timestamp(timestamp);
            match topics.last_mut().filter(|x| x.name.0.as_str() == t) {
                Some(x) => x.partitions.push(partition),
                None => topics.push(ListOffsetsTopic::default().with_name(topic(t)).with_partitions(vec![partition])),
            }
        }
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(topics);
        match admin.call_on::<_, ListOffsetsResponse>(owner, ApiKey::ListOffsets, 7, &request).await {
            Ok(answer) => {
                for t in &answer.topics {
                    for p in &t.partitions {
                        let offset = match p.error_code {
                            0 => Ok(p.offset),
                            code => Err(error_name(code)),
                        };
                        found.insert((t.name.0.to_string(), p.partition_index), offset);
                    }
                }
            }
            Err(e) => {
                for tp in tps {
                    found.insert(tp.clone(), Err(e.clone()));
                }
            }
        }
    }
    found
}
