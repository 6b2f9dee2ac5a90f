//! `kaas admin groups`: every group of every broker, or one group's members and offsets with
//! their lag: for consumer and classic groups the committed offset against the partition's
//! high watermark (each asked of its owner), for share groups KIP-1226's lag.

use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::*;

use super::connection::{Admin, check, text};
use super::table::Table;
use super::topics;
use crate::cells;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Every group, from every broker
    List {
        /// Only groups of this type: classic, consumer or share
        #[arg(long = "type")]
        group_type: Option<String>,
    },
    /// A group's state, members, committed offsets and lag
    Describe { group: String },
}

pub async fn run(admin: &mut Admin, command: Command) -> Result<Vec<Table>, String> {
    match command {
        Command::List { group_type } => list(admin, group_type).await,
        Command::Describe { group } => describe(admin, &group).await,
    }
}

async fn list(admin: &mut Admin, group_type: Option<String>) -> Result<Vec<Table>, String> {
    let metadata = admin.metadata(Some(Vec::new())).await?;
    let request = ListGroupsRequest::default().with_types_filter(group_type.iter().map(|t| text(t)).collect());
    let mut table = Table::new("groups", &["GROUP", "TYPE", "STATE", "PROTOCOL TYPE", "COORDINATOR"]);
    let mut rows = Vec::new();
    for broker in metadata.brokers.iter().map(|b| b.node_id.0) {
        let answer = list_on(admin, broker, &request).await?;
        for g in answer.groups {
            rows.push(cells![
                g.group_id.0.as_str(),
                g.group_type.as_str(),
                g.group_state.as_str(),
                g.protocol_type.as_str(),
                broker
            ]);
        }
    }
    rows.sort();
    rows.into_iter().for_each(|r| table.row(r));
    Ok(vec![table])
}

/// One broker's groups. A broker taking groups over from another answers
/// COORDINATOR_LOAD_IN_PROGRESS until it holds them: asked again, as Kafka's admin client does.
async fn list_on(admin: &mut Admin, broker: i32, request: &ListGroupsRequest) -> Result<ListGroupsResponse, String> {
    const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let answer: ListGroupsResponse = admin.call_on(broker, ApiKey::ListGroups, 5, request).await?;
        if answer.error_code != COORDINATOR_LOAD_IN_PROGRESS || std::time::Instant::now() > deadline {
            check(&format!("ListGroups on broker {broker}"), answer.error_code, None)?;
            return Ok(answer);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The group's type and state as its coordinator lists it.
async fn listed(admin: &mut Admin, coordinator: i32, group: &str) -> Result<(String, String), String> {
    let answer = list_on(admin, coordinator, &ListGroupsRequest::default()).await?;
    let g = answer.groups.iter().find(|g| g.group_id.0.as_str() == group).ok_or(format!("{group}: no such group"))?;
    Ok((g.group_type.to_string(), g.group_state.to_string()))
}

async fn describe(admin: &mut Admin, group: &str) -> Result<Vec<Table>, String> {
    let coordinator = admin.coordinator(0, group).await?;
    let (group_type, state) = listed(admin, coordinator, group).await?;
    let mut members = Table::new("members", &["MEMBER ID", "CLIENT ID", "HOST", "ASSIGNMENT"]);
    // A member's row: who it is, and its assignment's (topic, partitions) as topic-partition.
    let mut member = |id: &str, client: &str, host: &str, assignment: Vec<(&str, &[i32])>| {
        let parts: Vec<String> =
            assignment.iter().flat_map(|(t, ps)| ps.iter().map(move |p| format!("{t}-{p}"))).collect();
        let assigned = if parts.is_empty() { "-".to_string() } else { parts.join(",") };
        members.row(cells![id, client, host, assigned]);
    };
    let offsets = match group_type.as_str() {
        "share" => {
            let request = ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(text(group))]);
            let answer: ShareGroupDescribeResponse =
                admin.call_on(coordinator, ApiKey::ShareGroupDescribe, 1, &request).await?;
            let g = answer.groups.first().ok_or("ShareGroupDescribe: no answer")?;
            check("ShareGroupDescribe", g.error_code, g.error_message.as_ref())?;
            for m in &g.members {
                let assignment =
                    m.assignment.topic_partitions.iter().map(|t| (t.topic_name.0.as_str(), &t.partitions[..]));
                member(&m.member_id, &m.client_id, &m.client_host, assignment.collect());
            }
            share_offsets(admin, coordinator, group).await?
        }
        "consumer" => {
            let request = ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(text(group))]);
            let answer: ConsumerGroupDescribeResponse =
                admin.call_on(coordinator, ApiKey::ConsumerGroupDescribe, 0, &request).await?;
            let g = answer.groups.first().ok_or("ConsumerGroupDescribe: no answer")?;
            check("ConsumerGroupDescribe", g.error_code, g.error_message.as_ref())?;
            for m in &g.members {
                let assignment =
                    m.assignment.topic_partitions.iter().map(|t| (t.topic_name.0.as_str(), &t.partitions[..]));
                member(&m.member_id, &m.client_id, &m.client_host, assignment.collect());
            }
            committed_offsets(admin, coordinator, group).await?
        }
        _ => {
            let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(text(group))]);
            let answer: DescribeGroupsResponse =
                admin.call_on(coordinator, ApiKey::DescribeGroups, 5, &request).await?;
            let g = answer.groups.first().ok_or("DescribeGroups: no answer")?;
            check("DescribeGroups", g.error_code, g.error_message.as_ref())?;
            for m in &g.members {
                member(&m.member_id, &m.client_id, &m.client_host, Vec::new());
            }
            committed_offsets(admin, coordinator, group).await?
        }
    };
    let lag: i64 = offsets.rows.iter().filter_map(|r| r.last()?.parse::<i64>().ok()).sum();
    let mut about = Table::new("group", &["GROUP", "TYPE", "STATE", "COORDINATOR", "MEMBERS", "LAG"]);
    about.row(cells![group, group_type, state, coordinator, members.rows.len(), lag]);
    Ok(vec![about, members, offsets])
}

/// A consumer or classic group's committed offsets, the partitions' ends and the lag.
async fn committed_offsets(admin: &mut Admin, coordinator: i32, group: &str) -> Result<Table, String> {
    let request = OffsetFetchRequest::default().with_group_id(GroupId(text(group))).with_topics(None);
    let answer: OffsetFetchResponse = admin.call_on(coordinator, ApiKey::OffsetFetch, 7, &request).await?;
    check("OffsetFetch", answer.error_code, None)?;
    let mut committed = Vec::new();
    for t in &answer.topics {
        for p in t.partitions.iter().filter(|p| p.committed_offset >= 0) {
            committed.push(((t.name.0.to_string(), p.partition_index), p.committed_offset, p.error_code));
        }
    }
    committed.sort();
    let topic_names: Vec<String> = {
        let mut names: Vec<String> = committed.iter().map(|((t, _), _, _)| t.clone()).collect();
        names.dedup();
        names
    };
    let owners = match topic_names.is_empty() {
        true => Default::default(),
        false => topics::owners(admin, Some(topic_names)).await?,
    };
    let located: Vec<((String, i32), i32)> =
        owners.iter().filter_map(|(tp, o)| Some((tp.clone(), o.as_ref().ok()?.0))).collect();
    let ends = topics::offsets(admin, &located, -1, 0).await;
    let mut table = Table::new("offsets", &["TOPIC", "PARTITION", "COMMITTED", "END", "LAG"]);
    for ((t, p), offset, _) in committed {
        let end = ends.get(&(t.clone(), p)).and_then(|e| e.as_ref().ok()).copied();
        let lag = end.map(|e| (e - offset).max(0));
        table.row(cells![t, p, offset, super::or_dash(end), super::or_dash(lag)]);
    }
    Ok(table)
}

/// A share group's start offsets and lag per share partition (DescribeShareGroupOffsets v1).
async fn share_offsets(admin: &mut Admin, coordinator: i32, group: &str) -> Result<Table, String> {
    let request = DescribeShareGroupOffsetsRequest::default()
        .with_groups(vec![DescribeShareGroupOffsetsRequestGroup::default().with_group_id(GroupId(text(group)))]);
    let answer: DescribeShareGroupOffsetsResponse =
        admin.call_on(coordinator, ApiKey::DescribeShareGroupOffsets, 1, &request).await?;
    let g = answer.groups.first().ok_or("DescribeShareGroupOffsets: no answer")?;
    check("DescribeShareGroupOffsets", g.error_code, g.error_message.as_ref())?;
    let mut rows = Vec::new();
    for t in &g.topics {
        for p in &t.partitions {
            let start = (p.start_offset >= 0).then_some(p.start_offset);
            let lag = (p.lag >= 0).then_some(p.lag);
            rows.push((t.topic_name.0.to_string(), p.partition_index, start, lag));
        }
    }
    rows.sort();
    let mut table = Table::new("offsets", &["TOPIC", "PARTITION", "START OFFSET", "LAG"]);
    for (t, p, start, lag) in rows {
        table.row(cells![t, p, super::or_dash(start), super::or_dash(lag)]);
    }
    Ok(table)
}
