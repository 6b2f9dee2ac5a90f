//! A Kafka client over the wire: kafka-protocol's structs in Kafka's framing, over any byte
//! stream. The simulator runs it over turmoil's network and `kaas share-copy` over TCP; both
//! see every outcome as Kafka's protocol says it, with a lost connection kept apart as an
//! indefinite outcome (the request may or may not have taken effect).
//!
//! - `WireClient` (wire.rs, txn.rs, share.rs): one connection to one broker, one call per API;
//! - `Client` (router.rs): what applications use; it finds partition leaders by Metadata and
//!   coordinators by FindCoordinator as real clients do, keeps a connection per broker, and
//!   moves on when a broker says it is not the leader or not the coordinator. Every request
//!   it sends is told to a `Recorder` (the simulator's history).
//!
//! Share groups (KIP-932) and KIP-1289's TxnShareAcknowledge are here too: no released client
//! speaks the latter, so this is the client side of kaas's exactly-once queues.

use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

mod router;
mod share;
pub mod share_consumer;
pub mod share_copy;
mod txn;
mod wire;

pub use router::Client;
pub use share::{
    ACCEPT, Acquired, GAP, REJECT, RELEASE, RENEW, ShareAcks, ShareBeat, ShareFetchSpec, ShareFetched,
    SharePartitionFetched,
};

pub use txn::Fetched;
pub use wire::*;

/// A connection's byte stream: a TCP stream, or the simulator's.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub type BoxStream = Box<dyn Stream>;
pub type Connecting<'a> = Pin<Box<dyn Future<Output = io::Result<BoxStream>> + Send + 'a>>;

/// How a client reaches brokers: what address a broker's advertised host and port make, and
/// how to connect to one.
pub trait Connector: Send + Sync {
    /// The address of a broker Metadata or FindCoordinator named.
    fn address(&self, host: &str, port: i32) -> String;
    fn connect<'a>(&'a self, address: &'a str) -> Connecting<'a>;
    /// The wall clock, in ms since the Unix epoch, for the timestamps of what is produced: a
    /// simulated world answers with its own.
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    }
}

/// Real TCP: addresses are `host:port`.
pub struct Tcp;

impl Connector for Tcp {
    fn address(&self, host: &str, port: i32) -> String {
        format!("{host}:{port}")
    }

    fn connect<'a>(&'a self, address: &'a str) -> Connecting<'a> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(address).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxStream)
        })
    }
}

/// Where a client tells what it sent and what came of it.
pub trait Recorder: Send + Sync {
    /// `op` is the API (`produce`), `outcome` `ok`, `failed:<code>`, `indefinite` or `unsent`.
    fn record(&self, client: &str, op: &str, outcome: &str, detail: serde_json::Value);
}

/// A recorder that keeps nothing.
pub struct Quiet;

impl Recorder for Quiet {
    fn record(&self, _: &str, _: &str, _: &str, _: serde_json::Value) {}
}

/// The name history records give an outcome.
pub fn outcome_name<T>(outcome: &Outcome<T>) -> String {
    match outcome {
        Outcome::Ok(_) => "ok".into(),
        Outcome::Failed(NOT_SENT) => "unsent".into(),
        Outcome::Failed(code) => format!("failed:{code}"),
        Outcome::Indefinite => "indefinite".into(),
    }
}
