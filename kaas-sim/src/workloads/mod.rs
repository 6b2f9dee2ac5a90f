//! Workload pieces the scenarios share, each with its retry policy: plain producers with
//! acks 0, 1 or all (`plain`), pipelined idempotent producers (`idempotent`), transactional
//! producers and their zombies (`transactional`), committing and read_committed consumers and
//! the final reads (`consumer`), consume-transform-produce copiers (`copier`), and consumer
//! group members of the classic protocol (`member`) and of KIP-848's (`consumer_member`). A scenario is then mostly its knobs, its fault plan and its checks.
//!
//! Every piece talks to the brokers through a `Client` (routing by Metadata and
//! FindCoordinator) and records what it meant and saw in the shared `World`.

pub mod consumer;
pub mod consumer_member;
pub mod copier;
pub mod idempotent;
pub mod member;
pub mod plain;
pub mod share_copier;
pub mod share_member;
pub mod transactional;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::checkers::PartitionHistory;
use crate::client::Client;
use crate::history::History;

/// How long a client waits before it retries a request the broker refused.
pub const RETRY_MS: u64 = 50;
/// A broker that answers the same retriable code this many times in a row is misleading its
/// client (a fenced producer told to retry): the workload stops and says so (`wrong-error`).
pub const RETRIABLE_STREAK_MAX: u32 = 100;
/// ... and for this long at least: in a cluster, a coordinator whose previous owner died
/// answers "not yet" for its lease, its drift margin and a settle period, up to some 30 s of
/// the longest leases drawn.
pub const RETRIABLE_STREAK_MS: u64 = 40_000;

pub async fn backoff() {
    tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
}

/// What the clients of a run did and saw, shared between their tasks (and hosts) and the
/// checkers.
pub struct World {
    /// The broker hosts clients bootstrap from.
    pub bootstrap: Vec<String>,
    pub history: History,
    pub partitions: BTreeMap<i32, PartitionHistory>,
    pub producers_done: usize,
    /// Anomalies a client saw directly (a corrupt read, a position past the log end).
    pub violations: Vec<String>,
}

pub type Shared = Arc<Mutex<World>>;

pub fn shared(bootstrap: Vec<String>, history: &History) -> Shared {
    Arc::new(Mutex::new(World {
        bootstrap,
        history: history.clone(),
        partitions: BTreeMap::new(),
        producers_done: 0,
        violations: Vec::new(),
    }))
}

/// A new client of the world's brokers, named `name` in the history.
pub fn client(world: &Shared, name: &str) -> Client {
    let w = world.lock().unwrap();
    crate::client::new(name, &w.bootstrap, &w.history)
}

/// Creates `topic` (or finds it created), retrying until a broker answers.
pub async fn create_topic(world: &Shared, topic: &str, partitions: i32) {
    let mut client = client(world, "admin");
    loop {
        match client.create_topic(topic, partitions).await {
            crate::client::Outcome::Ok(0 | 36) => return,
            _ => backoff().await,
        }
    }
}

/// Produces `values` to a partition until a try is acked (an indefinite one may have written
/// them too: read the log's end afterwards, `log_end`).
pub async fn produce_until_acked(
    client: &mut crate::client::Client,
    topic: &str,
    partition: i32,
    values: &[bytes::Bytes],
) {
    loop {
        match client.produce(topic, partition, values, crate::scenarios::common::now_ms()).await {
            crate::client::Outcome::Ok(_) => return,
            crate::client::Outcome::Failed(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            crate::client::Outcome::Indefinite => {}
        }
    }
}

/// A partition's log end offset, asked until answered.
pub async fn log_end(client: &mut crate::client::Client, topic: &str, partition: i32) -> i64 {
    loop {
        match client.list_offset(topic, partition, -1, false).await {
            crate::client::Outcome::Ok(end) => return end,
            _ => backoff().await,
        }
    }
}
