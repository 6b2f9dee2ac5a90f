//! `kaas admin transactions`: finds and ends hanging transactions, as Apache's
//! `kafka-transactions.sh` does.
//!
//! - `list`: every transactional id of every broker's coordinator (ListTransactions), with its
//!   producer id and epoch, state, timeout, start and partitions (DescribeTransactions).
//! - `describe ID`: one, asked of its coordinator.
//! - `abort --transactional-id ID`: fences the id's producer and aborts its open transaction,
//!   by the InitProducerId a new instance of that producer would send (the epoch is bumped, the
//!   transaction aborted, its markers written); retried while the abort completes.
//! - `abort --topic T --partition P --producer-id N --producer-epoch E`: writes an ABORT marker
//!   into one partition (WriteTxnMarkers to its owner, which needs CLUSTER_ACTION under ACLs),
//!   for a transaction open in a partition that no coordinator knows of.

use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::*;

use super::connection::{Admin, check, error_name, text, topic};
use super::table::Table;
use crate::cells;

const CONCURRENT_TRANSACTIONS: i16 = 51;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Every transactional id, from every broker's coordinator
    List,
    /// One transactional id's transaction
    Describe { transactional_id: String },
    /// Fence a transactional id's producer and abort its transaction, or write an ABORT
    /// marker into one partition
    Abort(AbortArgs),
}

#[derive(Debug, clap::Args)]
#[group(required = true, multiple = true)]
pub struct AbortArgs {
    /// The transactional id to fence and abort
    #[arg(long, conflicts_with_all = ["topic", "partition", "producer_id", "producer_epoch"])]
    transactional_id: Option<String>,
    /// The partition's topic (with --partition, --producer-id, --producer-epoch)
    #[arg(long, requires_all = ["partition", "producer_id", "producer_epoch"])]
    topic: Option<String>,
    #[arg(long)]
    partition: Option<i32>,
    #[arg(long)]
    producer_id: Option<i64>,
    #[arg(long)]
    producer_epoch: Option<i16>,
}

const HEADERS: [&str; 8] =
    ["TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT MS", "STARTED MS", "PARTITIONS"];

pub async fn run(admin: &mut Admin, command: Command) -> Result<Vec<Table>, String> {
    match command {
        Command::List => list(admin).await,
        Command::Describe { transactional_id } => {
            let coordinator = admin.coordinator(1, &transactional_id).await?;
            let mut table = Table::new("transactions", &HEADERS);
            let state = describe(admin, coordinator, vec![transactional_id.clone()]).await?;
            let state = state.first().ok_or("DescribeTransactions: no answer")?;
            check(&transactional_id, state.error_code, None)?;
            table.row(row(coordinator, state));
            Ok(vec![table])
        }
        Command::Abort(AbortArgs { transactional_id: Some(id), .. }) => abort_id(admin, &id).await,
        Command::Abort(AbortArgs {
            topic: Some(t),
            partition: Some(p),
            producer_id: Some(id),
            producer_epoch: Some(epoch),
            ..
        }) => abort_partition(admin, &t, p, id, epoch).await,
        Command::Abort(_) => {
            Err("abort needs --transactional-id, or --topic, --partition, --producer-id and --producer-epoch".into())
        }
    }
}

fn row(coordinator: i32, s: &describe_transactions_response::TransactionState) -> Vec<String> {
    let partitions: Vec<String> =
        s.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| format!("{}-{p}", t.topic.0))).collect();
    cells![
        s.transactional_id.0.as_str(),
        coordinator,
        s.producer_id.0,
        s.producer_epoch,
        s.transaction_state.as_str(),
        s.transaction_timeout_ms,
        s.transaction_start_time_ms,
        partitions.join(",")
    ]
}

async fn describe(
    admin: &mut Admin,
    coordinator: i32,
    ids: Vec<String>,
) -> Result<Vec<describe_transactions_response::TransactionState>, String> {
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(ids.iter().map(|id| TransactionalId(text(id))).collect());
    let answer: DescribeTransactionsResponse =
        admin.call_on(coordinator, ApiKey::DescribeTransactions, 0, &request).await?;
    Ok(answer.transaction_states)
}

async fn list(admin: &mut Admin) -> Result<Vec<Table>, String> {
    let metadata = admin.metadata(Some(Vec::new())).await?;
    let mut rows = Vec::new();
    for broker in metadata.brokers.iter().map(|b| b.node_id.0) {
        let listed: ListTransactionsResponse =
            admin.call_on(broker, ApiKey::ListTransactions, 0, &ListTransactionsRequest::default()).await?;
        check(&format!("ListTransactions on broker {broker}"), listed.error_code, None)?;
        let ids: Vec<String> = listed.transaction_states.iter().map(|s| s.transactional_id.0.to_string()).collect();
        if ids.is_empty() {
            continue;
        }
        for state in describe(admin, broker, ids).await?.iter().filter(|s| s.error_code == 0) {
            rows.push(row(broker, state));
        }
    }
    rows.sort();
    let mut table = Table::new("transactions", &HEADERS);
    rows.into_iter().for_each(|r| table.row(r));
    Ok(vec![table])
}

async fn abort_id(admin: &mut Admin, id: &str) -> Result<Vec<Table>, String> {
    let coordinator = admin.coordinator(1, id).await?;
    let described = describe(admin, coordinator, vec![id.to_string()]).await?;
    let state = described.first().ok_or("no answer for the transactional id")?;
    check(id, state.error_code, None)?;
    // The same timeout as the producer's, so that the fencing InitProducerId changes nothing else.
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(text(id))))
        .with_transaction_timeout_ms(state.transaction_timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    for _ in 0..300 {
        let answer: InitProducerIdResponse = admin.call_on(coordinator, ApiKey::InitProducerId, 4, &request).await?;
        match answer.error_code {
            0 => {
                let mut table =
                    Table::new("aborted", &["TRANSACTIONAL ID", "WAS", "PRODUCER ID", "EPOCH", "FENCED AT EPOCH"]);
                table.row(cells![
                    id,
                    state.transaction_state.as_str(),
                    state.producer_id.0,
                    state.producer_epoch,
                    answer.producer_epoch
                ]);
                return Ok(vec![table]);
            }
            // The abort is being completed: its markers are being written.
            CONCURRENT_TRANSACTIONS => tokio::time::sleep(Duration::from_millis(100)).await,
            code => return Err(format!("{id}: {}", error_name(code))),
        }
    }
    Err(format!("{id}: the abort did not complete within 30 s"))
}

async fn abort_partition(
    admin: &mut Admin,
    topic_name: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<Vec<Table>, String> {
    let owners = super::topics::owners(admin, Some(vec![topic_name.to_string()])).await?;
    let owner = match owners.get(&(topic_name.to_string(), partition)) {
        Some(Ok((owner, _))) => *owner,
        Some(Err(e)) => return Err(format!("{topic_name}-{partition}: {e}")),
        None => return Err(format!("{topic_name}-{partition}: no such partition")),
    };
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_transaction_result(false)
        .with_coordinator_epoch(-1)
        .with_topics(vec![
            WritableTxnMarkerTopic::default().with_name(topic(topic_name)).with_partition_indexes(vec![partition]),
        ]);
    let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
    let answer: WriteTxnMarkersResponse = admin.call_on(owner, ApiKey::WriteTxnMarkers, 1, &request).await?;
    let code = answer
        .markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .next()
        .ok_or("no answer for the partition")?;
    check(&format!("{topic_name}-{partition}"), code, None)?;
    let mut table = Table::new("aborted", &["TOPIC", "PARTITION", "PRODUCER ID", "EPOCH", "MARKER"]);
    table.row(cells![topic_name, partition, producer_id, producer_epoch, "ABORT"]);
    Ok(vec![table])
}
