//! A plain producer: numbered batches with acks=all, 1 or 0, each retried until acked (acks=0:
//! sent once, since nothing tells it the outcome). Its attempts are recorded per partition so
//! that the log checker knows which batches may be missing and which may be there twice.

use bytes::Bytes;

use super::{Shared, backoff};
use crate::client::{KAFKA_STORAGE_ERROR, Outcome};
use crate::history::outcome_name;
use crate::scenarios::common::now_ms;

/// Flush batches get ids from here on, past every scenario's own.
const FLUSH_BATCH_IDS: u64 = 1 << 40;

/// One batch a producer writes: its id (unique in the run), partition and values.
#[derive(Debug, Clone)]
pub struct Batch {
    pub id: u64,
    pub partition: i32,
    pub values: Vec<Bytes>,
}

/// Writes `batches` to `topic` in order with `acks`. An acks=0 producer ends with one acks=all
/// batch to the partition of its last batch: once that is acked, every batch sent before it
/// on the connection is durable, so consumers will see it.
pub async fn producer(name: String, topic: String, acks: i16, mut batches: Vec<Batch>, world: Shared) {
    let mut client = super::client(&world, &name);
    let flush = (acks == 0).then(|| {
        let partition = batches.last().map_or(0, |b| b.partition);
        let id = FLUSH_BATCH_IDS + batches.first().map_or(0, |b| b.id);
        Batch { id, partition, values: vec![Bytes::from(format!("{topic}:{name}:flush"))] }
    });
    batches.extend(flush);
    let last = batches.len().saturating_sub(1);
    for (index, batch) in batches.into_iter().enumerate() {
        let acks = if acks == 0 && index == last { -1 } else { acks };
        loop {
            world
                .lock()
                .unwrap()
                .partitions
                .entry(batch.partition)
                .or_default()
                .produced
                .sending(batch.id, &batch.values);
            let outcome = client.produce_acks(&topic, batch.partition, &batch.values, now_ms(), acks).await;
            {
                let mut w = world.lock().unwrap();
                let base = if let Outcome::Ok(base) = outcome { base } else { -1 };
                let detail = serde_json::json!({
                    "batch": batch.id, "partition": batch.partition, "acks": acks, "base_offset": base
                });
                w.history.record(&name, "produce-batch", &outcome_name(&outcome), detail);
                let produced = &mut w.partitions.entry(batch.partition).or_default().produced;
                match outcome {
                    Outcome::Ok(base) => {
                        produced.acked.insert(batch.id, base);
                    }
                    // The volume failed mid-write, or no answer came: the batch may be in the log.
                    Outcome::Failed(KAFKA_STORAGE_ERROR) | Outcome::Indefinite => {
                        produced.indefinite.insert(batch.id);
                    }
                    Outcome::Failed(_) => {}
                }
            }
            match outcome {
                Outcome::Ok(_) => break,
                // acks=0 never knows, so it never retries.
                Outcome::Indefinite if acks == 0 => break,
                Outcome::Indefinite => {}
                Outcome::Failed(_) => backoff().await,
            }
        }
    }
    world.lock().unwrap().producers_done += 1;
}
