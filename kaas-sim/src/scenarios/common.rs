//! What the scenarios share: the seed's choice of volume faults and fault triggers, and the
//! client steps every workload takes (connect, create the topic, read a partition back whole).

use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::client::{CORRUPT_READ, Outcome, WireClient};
use crate::faults::Trigger;
use crate::hosts::BROKER_PORT;
use crate::volume::{Torn, VolumeFaults};

pub fn volume_faults(rng: &mut ChaCha8Rng) -> VolumeFaults {
    let torn = match rng.random_range(0..3) {
        0 => Torn::None,
        1 => Torn::Prefix,
        _ => Torn::Scattered,
    };
    VolumeFaults {
        torn,
        sync_latency_ms_max: if rng.random_bool(0.7) { rng.random_range(1..=8) } else { 0 },
        io_error_per_mille: if rng.random_bool(0.3) { rng.random_range(1..=20) } else { 0 },
    }
}

/// A fault trigger: after some of `progress_max` steps of the workload, or within 3 s.
pub fn trigger(rng: &mut ChaCha8Rng, progress_max: usize) -> Trigger {
    if rng.random_bool(0.5) {
        Trigger::Progress(rng.random_range(1..=progress_max))
    } else {
        Trigger::Millis(rng.random_range(50..3000))
    }
}

pub async fn connect(host: &str) -> WireClient {
    loop {
        if let Ok(client) = WireClient::connect(host, BROKER_PORT).await {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The wall clock of the clients, for record timestamps.
pub fn now_ms() -> i64 {
    crate::env::EPOCH_MS + turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

pub async fn create_topic(host: &str, topic: &str, partitions: i32) {
    let mut client = connect(host).await;
    loop {
        match client.create_topic(topic, partitions).await {
            Ok(0) | Ok(36) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(_) => client = connect(host).await,
        }
    }
}

/// Reads a whole partition once the workload is done: its records, the high watermark, and a
/// violation if a batch failed its CRC.
pub async fn read_partition(host: &str, topic: &str, partition: i32) -> (Vec<(i64, Bytes)>, i64, Option<String>) {
    let mut client = connect(host).await;
    let mut offset = 0;
    let mut read = Vec::new();
    loop {
        match client.fetch(topic, partition, offset, 100).await {
            Outcome::Ok((records, hwm)) => {
                if let Some((last, _)) = records.last() {
                    offset = last + 1;
                }
                read.extend(records);
                if offset >= hwm {
                    return (read, hwm, None);
                }
            }
            Outcome::Failed(CORRUPT_READ) => {
                let corrupt =
                    format!("corrupt-read: partition {partition}: the batch at offset {offset} failed its CRC");
                return (read, offset, Some(corrupt));
            }
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Outcome::Indefinite => client = connect(host).await,
        }
    }
}
