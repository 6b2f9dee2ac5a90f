//! `kaas transactions`: finds and ends stuck transactions over the Kafka protocol, as Apache's
//! `kafka-transactions.sh` does.
//!
//! - `list`: every transactional id with its producer id and epoch, state, timeout, start time
//!   and partitions (ListTransactions, then DescribeTransactions).
//! - `abort --transactional-id ID`: fences the id's producer and aborts its open transaction,
//!   by the InitProducerId a new instance of that producer would send (the epoch is bumped, the
//!   transaction aborted, its markers written); retried while the abort completes.
//! - `abort --topic T --partition P --producer-id N --producer-epoch E`: writes an ABORT marker
//!   into one partition (WriteTxnMarkers), for a transaction open in a partition that no
//!   coordinator knows of.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONCURRENT_TRANSACTIONS: i16 = 51;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    List,
    AbortId(String),
    AbortPartition { topic: String, partition: i32, producer_id: i64, producer_epoch: i16 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub bootstrap: String,
    pub action: Action,
}

pub fn parse(args: &[String]) -> Result<Args, String> {
    let mut bootstrap = "127.0.0.1:9092".to_string();
    let mut words = Vec::new();
    let mut flags: Vec<(String, String)> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if let Some(flag) = arg.strip_prefix("--") {
            let value = it.next().ok_or_else(|| format!("--{flag} needs a value"))?.clone();
            if flag == "bootstrap" || flag == "bootstrap-server" {
                bootstrap = value;
            } else {
                flags.push((flag.to_string(), value));
            }
        } else {
            words.push(arg.as_str());
        }
    }
    let flag = |name: &str| flags.iter().find(|(f, _)| f == name).map(|(_, v)| v.clone());
    let number = |name: &str| -> Result<i64, String> {
        let value = flag(name).ok_or_else(|| format!("--{name} is required"))?;
        value.parse().map_err(|_| format!("--{name}: not a number: {value}"))
    };
    let action = match words.as_slice() {
        ["list"] => Action::List,
        ["abort"] => match flag("transactional-id") {
            Some(id) => Action::AbortId(id),
            None => Action::AbortPartition {
                topic: flag("topic").ok_or("abort needs --transactional-id, or --topic and --partition")?,
                partition: i32::try_from(number("partition")?).map_err(|_| "--partition out of range")?,
                producer_id: number("producer-id")?,
                producer_epoch: i16::try_from(number("producer-epoch")?)
                    .map_err(|_| "--producer-epoch out of range")?,
            },
        },
        _ => return Err("expected `list` or `abort`".into()),
    };
    Ok(Args { bootstrap, action })
}

/// A blocking-style Kafka connection: one request, one response.
struct Connection {
    stream: TcpStream,
    correlation_id: i32,
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

impl Connection {
    async fn call<Req, Resp>(&mut self, key: ApiKey, version: i16, request: &Req) -> Result<Resp, String>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(text("kaas-transactions")));
        let mut body = BytesMut::new();
        header.encode(&mut body, Req::header_version(version)).map_err(|e| e.to_string())?;
        request.encode(&mut body, version).map_err(|e| e.to_string())?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        self.stream.write_all(&frame).await.map_err(|e| e.to_string())?;
        let size = self.stream.read_i32().await.map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; size.max(0) as usize];
        self.stream.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        let mut buf = Bytes::from(buf);
        ResponseHeader::decode(&mut buf, key.response_header_version(version)).map_err(|e| e.to_string())?;
        let response = Resp::decode(&mut buf, version).map_err(|e| e.to_string())?;
        if buf.has_remaining() {
            return Err("trailing bytes in the response".into());
        }
        Ok(response)
    }
}

fn error_name(code: i16) -> String {
    match kafka_protocol::ResponseError::try_from_code(code) {
        Some(e) => format!("{e:?} ({code})"),
        None => format!("error {code}"),
    }
}

pub async fn run(args: Args) -> Result<(), String> {
    let stream = TcpStream::connect(&args.bootstrap).await.map_err(|e| format!("{}: {e}", args.bootstrap))?;
    let mut conn = Connection { stream, correlation_id: 0 };
    match args.action {
        Action::List => list(&mut conn).await,
        Action::AbortId(id) => abort_id(&mut conn, &id).await,
        Action::AbortPartition { topic, partition, producer_id, producer_epoch } => {
            abort_partition(&mut conn, &topic, partition, producer_id, producer_epoch).await
        }
    }
}

async fn describe(conn: &mut Connection, ids: Vec<String>) -> Result<DescribeTransactionsResponse, String> {
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(ids.iter().map(|id| TransactionalId(text(id))).collect());
    conn.call(ApiKey::DescribeTransactions, 0, &request).await
}

async fn list(conn: &mut Connection) -> Result<(), String> {
    let listed: ListTransactionsResponse =
        conn.call(ApiKey::ListTransactions, 0, &ListTransactionsRequest::default()).await?;
    if listed.error_code != 0 {
        return Err(format!("ListTransactions: {}", error_name(listed.error_code)));
    }
    let ids: Vec<String> = listed.transaction_states.iter().map(|s| s.transactional_id.0.to_string()).collect();
    let described = describe(conn, ids).await?;
    println!(
        "{:<24} {:>20} {:>6} {:<15} {:>10} {:>15}  PARTITIONS",
        "TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT MS", "STARTED MS"
    );
    for s in described.transaction_states {
        let partitions: Vec<String> =
            s.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| format!("{}-{p}", t.topic.0))).collect();
        println!(
            "{:<24} {:>20} {:>6} {:<15} {:>10} {:>15}  {}",
            s.transactional_id.0.as_str(),
            s.producer_id.0,
            s.producer_epoch,
            s.transaction_state.as_str(),
            s.transaction_timeout_ms,
            s.transaction_start_time_ms,
            partitions.join(",")
        );
    }
    Ok(())
}

async fn abort_id(conn: &mut Connection, id: &str) -> Result<(), String> {
    let described = describe(conn, vec![id.to_string()]).await?;
    let state = described.transaction_states.first().ok_or("no answer for the transactional id")?;
    if state.error_code != 0 {
        return Err(format!("{id}: {}", error_name(state.error_code)));
    }
    // The same timeout as the producer's, so that the fencing InitProducerId changes nothing else.
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(text(id))))
        .with_transaction_timeout_ms(state.transaction_timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    for _ in 0..300 {
        let answer: InitProducerIdResponse = conn.call(ApiKey::InitProducerId, 4, &request).await?;
        match answer.error_code {
            0 => {
                println!(
                    "{id}: was {} with producer id {} epoch {}; fenced (epoch now {}) and its transaction aborted",
                    state.transaction_state.as_str(),
                    state.producer_id.0,
                    state.producer_epoch,
                    answer.producer_epoch
                );
                return Ok(());
            }
            // The abort is being completed: its markers are being written.
            CONCURRENT_TRANSACTIONS => tokio::time::sleep(Duration::from_millis(100)).await,
            code => return Err(format!("{id}: {}", error_name(code))),
        }
    }
    Err(format!("{id}: the abort did not complete within 30 s"))
}

async fn abort_partition(
    conn: &mut Connection,
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(), String> {
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_transaction_result(false)
        .with_coordinator_epoch(-1)
        .with_topics(vec![
            WritableTxnMarkerTopic::default().with_name(TopicName(text(topic))).with_partition_indexes(vec![partition]),
        ]);
    let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
    let answer: WriteTxnMarkersResponse = conn.call(ApiKey::WriteTxnMarkers, 1, &request).await?;
    let code = answer
        .markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .next()
        .ok_or("no answer for the partition")?;
    if code != 0 {
        return Err(format!("{topic}-{partition}: {}", error_name(code)));
    }
    println!("{topic}-{partition}: ABORT marker written for producer id {producer_id} epoch {producer_epoch}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_command_line_names_what_to_abort() {
        assert_eq!(parse(&args("list")).unwrap().action, Action::List);
        let a = parse(&args("--bootstrap h:1 abort --transactional-id t")).unwrap();
        assert_eq!((a.bootstrap.as_str(), a.action), ("h:1", Action::AbortId("t".into())));
        let a = parse(&args("abort --topic x --partition 2 --producer-id 7 --producer-epoch 3")).unwrap();
        assert_eq!(
            a.action,
            Action::AbortPartition { topic: "x".into(), partition: 2, producer_id: 7, producer_epoch: 3 }
        );
        assert!(parse(&args("abort --topic x")).is_err());
        assert!(parse(&args("drop")).is_err());
    }
}
