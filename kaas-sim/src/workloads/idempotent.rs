//! An idempotent producer: InitProducerId, sequence numbers, and up to five produce requests in
//! flight to the partition's leader (as `max.in.flight.requests.per.connection`). A retry
//! resends a batch with its original sequence, so it must never be written twice. It runs as
//! several instances in turn, each with a fresh producer id.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{Shared, backoff};
use crate::checkers::idempotence::Sender;
use crate::client::{Outcome, ProducerStamp};
use crate::history::outcome_name;
use crate::scenarios::common::now_ms;

/// Produce requests a producer keeps in flight, as the broker remembers five per producer.
pub const IN_FLIGHT_MAX: usize = 5;

/// What the idempotent producers of a run were handed and sent.
#[derive(Default)]
pub struct Producers {
    /// (instance, producer id) in the order handed out.
    pub instances: Vec<(String, i64)>,
    pub sender_of: BTreeMap<Bytes, Sender>,
}

pub type SharedProducers = Arc<Mutex<Producers>>;

/// One batch of an instance's stream: (batch id, values, base sequence).
type Stream = Vec<(u64, Vec<Bytes>, i32)>;

/// One producer writing `batches` (id, values) to `partition` of `topic` as `instances`
/// instances in turn.
pub async fn producer(
    name: String,
    topic: String,
    partition: i32,
    batches: Vec<(u64, Vec<Bytes>)>,
    instances: usize,
    world: Shared,
    producers: SharedProducers,
) {
    let per_instance = batches.len().div_ceil(instances.max(1)).max(1);
    for (instance_index, chunk) in batches.chunks(per_instance).enumerate() {
        let instance = format!("{name}.{instance_index}");
        let mut client = super::client(&world, &instance);
        let producer_id = new_producer_id(&mut client).await;
        producers.lock().unwrap().instances.push((instance.clone(), producer_id));
        let mut stream: Stream = Vec::new();
        let mut sequence = 0i32;
        for (index, (batch_id, values)) in chunk.iter().enumerate() {
            {
                let mut p = producers.lock().unwrap();
                for v in values {
                    p.sender_of.insert(v.clone(), Sender { instance: instance.clone(), producer_id, index });
                }
            }
            world
                .lock()
                .unwrap()
                .partitions
                .entry(partition)
                .or_default()
                .produced
                .sent
                .insert(*batch_id, values.clone());
            stream.push((*batch_id, values.clone(), sequence));
            sequence += values.len() as i32;
        }
        write_stream(&instance, &topic, partition, producer_id, &mut stream, &mut client, &world, &producers).await;
    }
    world.lock().unwrap().producers_done += 1;
}

/// InitProducerId until it answers: a fresh producer id at epoch 0.
async fn new_producer_id(client: &mut crate::client::Client) -> i64 {
    loop {
        match client.init_producer_id().await {
            Outcome::Ok((pid, epoch)) => {
                assert_eq!(epoch, 0, "an idempotent producer starts at epoch 0");
                return pid;
            }
            _ => backoff().await,
        }
    }
}

/// Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER.
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

/// Writes one instance's stream with up to five batches in flight, until every one is acked.
///
/// An OUT_OF_ORDER_SEQUENCE_NUMBER for the oldest unacked batch, with nothing before it failed,
/// is a gap the producer cannot explain: the broker has lost track of its sequence. It does
/// what the Java client and librdkafka do then: takes a new producer id and sends what is
/// unacked again from sequence 0. Against a correct broker this never happens; against one
/// that forgets a batch it acked (a short dedupe window) it writes a second copy.
#[allow(clippy::too_many_arguments)]
async fn write_stream(
    instance: &str,
    topic: &str,
    partition: i32,
    mut producer_id: i64,
    stream: &mut Stream,
    client: &mut crate::client::Client,
    world: &Shared,
    producers: &SharedProducers,
) {
    let mut acked = vec![false; stream.len()];
    let mut first_unacked = 0;
    let mut next = 0;
    let mut in_flight: VecDeque<usize> = VecDeque::new();
    // After a failed answer nothing new is sent until the in-flight answers are in.
    let mut retrying = false;
    // The broker answered as if it had lost the producer's sequence: start over with a new id.
    let mut lost_track = false;
    let mut resets = 0;
    while first_unacked < stream.len() {
        while !retrying && next < first_unacked + IN_FLIGHT_MAX && next < stream.len() && !client.pipeline_broken() {
            let (_, values, base_sequence) = &stream[next];
            let stamp = ProducerStamp { producer_id, producer_epoch: 0, base_sequence: *base_sequence };
            match client.send_produce(topic, partition, values, now_ms(), stamp).await {
                Ok(()) => {
                    in_flight.push_back(next);
                    next += 1;
                }
                Err(_) if in_flight.is_empty() => {
                    // Nothing is in flight and nothing could be sent: wait for a route.
                    client.reset_pipeline();
                    backoff().await;
                }
                // Take the answers in flight first.
                Err(_) => break,
            }
        }
        let Some(index) = in_flight.pop_front() else {
            // The connection broke while sending: start over from the first unacked batch.
            client.reset_pipeline();
            next = first_unacked;
            continue;
        };
        let outcome = client.recv_produce().await;
        let (batch_id, _, base_sequence) = &stream[index];
        {
            let mut w = world.lock().unwrap();
            let base = if let Outcome::Ok(base) = outcome { base } else { -1 };
            let detail = serde_json::json!({
                "batch": batch_id, "partition": partition, "producer_id": producer_id,
                "base_sequence": base_sequence, "base_offset": base
            });
            w.history.record(instance, "produce-batch", &outcome_name(&outcome), detail);
            if let Outcome::Ok(base) = outcome {
                w.partitions.entry(partition).or_default().produced.acked.insert(*batch_id, base);
            }
        }
        match outcome {
            Outcome::Ok(_) => {
                acked[index] = true;
                while first_unacked < stream.len() && acked[first_unacked] {
                    first_unacked += 1;
                }
            }
            Outcome::Failed(OUT_OF_ORDER_SEQUENCE_NUMBER) if index == first_unacked && !retrying => {
                retrying = true;
                lost_track = true;
            }
            // Retriable (a storage error, a refused leader, a sequence the broker cannot place
            // because an earlier batch failed): let the in-flight answers come, then resend
            // everything from the first unacked batch, as clients do.
            Outcome::Failed(_) => retrying = true,
            Outcome::Indefinite => {
                in_flight.clear();
                client.reset_pipeline();
                next = first_unacked;
                retrying = false;
            }
        }
        if retrying && in_flight.is_empty() {
            retrying = false;
            next = first_unacked;
            if std::mem::take(&mut lost_track) {
                producer_id = new_producer_id(client).await;
                resets += 1;
                producers.lock().unwrap().instances.push((format!("{instance}~{resets}"), producer_id));
                let mut sequence = 0;
                for (_, values, base_sequence) in stream[first_unacked..].iter_mut() {
                    *base_sequence = sequence;
                    sequence += values.len() as i32;
                }
            }
            // Nothing is in flight: the next batch may go to a new leader.
            client.end_pipeline();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    client.end_pipeline();
}
