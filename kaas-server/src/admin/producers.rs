//! `kaas admin producers`: the producers a topic's partitions remember (DescribeProducers, asked
//! of each partition's owner): their ids, epochs, last sequence and timestamp, and where their
//! open transaction starts.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::*;

use super::connection::{Admin, error_name, topic};
use super::table::Table;
use crate::cells;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The topic
    #[arg(long)]
    topic: String,
    /// Only this partition
    #[arg(long)]
    partition: Option<i32>,
}

pub async fn run(admin: &mut Admin, args: Args) -> Result<Vec<Table>, String> {
    let owners = super::topics::owners(admin, Some(vec![args.topic.clone()])).await?;
    let mut by_owner: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let headers = [
        "PARTITION",
        "PRODUCER ID",
        "EPOCH",
        "LAST SEQUENCE",
        "LAST TIMESTAMP",
        "COORDINATOR EPOCH",
        "TXN START OFFSET",
        "ERROR",
    ];
    let mut table = Table::new("producers", &headers);
    for ((_, p), owner) in owners.iter().filter(|((_, p), _)| args.partition.is_none_or(|only| only == *p)) {
        match owner {
            Ok((owner, _)) => by_owner.entry(*owner).or_default().push(*p),
            Err(e) => table.row(cells![p, "-", "-", "-", "-", "-", "-", e]),
        }
    }
    if by_owner.is_empty() && table.rows.is_empty() {
        return Err(format!("{}: no such partition", args.topic));
    }
    for (owner, partitions) in by_owner {
        let request = DescribeProducersRequest::default().with_topics(vec![
            TopicRequest::default().with_name(topic(&args.topic)).with_partition_indexes(partitions),
        ]);
        let answer: DescribeProducersResponse = admin.call_on(owner, ApiKey::DescribeProducers, 0, &request).await?;
        for p in answer.topics.iter().flat_map(|t| &t.partitions) {
            if p.error_code != 0 {
                table.row(cells![p.partition_index, "-", "-", "-", "-", "-", "-", error_name(p.error_code)]);
            }
            for s in &p.active_producers {
                let txn_start = (s.current_txn_start_offset >= 0).then_some(s.current_txn_start_offset);
                table.row(cells![
                    p.partition_index,
                    s.producer_id.0,
                    s.producer_epoch,
                    s.last_sequence,
                    s.last_timestamp,
                    s.coordinator_epoch,
                    super::or_dash(txn_start),
                    ""
                ]);
            }
        }
    }
    table.rows.sort_by_key(|r| (r[0].parse::<i32>().unwrap_or(-1), r[1].parse::<i64>().unwrap_or(-1)));
    Ok(vec![table])
}
