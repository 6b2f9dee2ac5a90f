//! idempotence: idempotent producers (InitProducerId, sequence numbers, up to five produce
//! requests in flight on one connection) retry through broker crashes, graceful restarts,
//! torn writes, failed fsyncs, partitions and held messages. A retry resends the batch with
//! its original sequence, so it must never be written twice. Each producer restarts a few
//! times as a new instance with a new producer id; small segments make the broker roll and
//! snapshot its producer state often. Checks: the log checker (where, unlike `smoke`, any
//! duplicate is a violation), no producer id handed out twice, and each instance's batches in
//! the log gapless and in order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::RunResult;
use super::common::{self, Shared};
use crate::checkers::{self, idempotence::Sender};
use crate::client::{Outcome, ProducerStamp};
use crate::faults::{self, Planned};
use crate::history::outcome_name;
use crate::hosts;
use crate::volume::{SimVolume, VolumeFaults};

const TOPIC: &str = "idempotent";
const SIM_SECONDS_MAX: u64 = 900;
const LIVENESS_MS: u64 = 60_000;
/// Produce requests a producer keeps in flight, as max.in.flight.requests.per.connection.
const IN_FLIGHT_MAX: usize = 5;

#[derive(Debug, Clone)]
struct Knobs {
    partitions: i32,
    producers: usize,
    batches_per_producer: usize,
    records_per_batch: usize,
    /// Each producer is this many instances in turn, each with its own producer id.
    instances: usize,
    segment_bytes: u64,
    max_message_latency_ms: u64,
    clock_skew_ms: i64,
    faults: VolumeFaults,
    buggify: Option<u64>,
    plan: Vec<Planned>,
}

impl Knobs {
    fn from_seed(rng: &mut ChaCha8Rng) -> Knobs {
        let producers = rng.random_range(1..=3);
        let batches_per_producer = rng.random_range(20..80);
        let total = producers * batches_per_producer;
        let plan = common::broker_faults(rng, total);
        Knobs {
            partitions: rng.random_range(1..=3),
            producers,
            batches_per_producer,
            records_per_batch: rng.random_range(1..6),
            instances: rng.random_range(1..=3),
            segment_bytes: rng.random_range(1024..16_384),
            max_message_latency_ms: [1, 10, 100][rng.random_range(0..3)],
            clock_skew_ms: rng.random_range(-5000..=5000),
            faults: common::volume_faults(rng),
            buggify: rng.random_bool(0.75).then(|| rng.random()),
            plan,
        }
    }
}

#[derive(Default)]
struct Producers {
    /// (instance, producer id) in the order handed out.
    instances: Vec<(String, i64)>,
    sender_of: BTreeMap<Bytes, Sender>,
}

type Shared2 = Arc<Mutex<Producers>>;

fn value(producer: usize, batch: usize, record: usize) -> Bytes {
    Bytes::from(format!("p{producer}-b{batch:04}-r{record}"))
}

/// One producer: `instances` instances in turn, each with a fresh producer id, writing its
/// share of the batches to partition `producer % partitions` with up to five in flight.
async fn producer(id: usize, knobs: Knobs, world: Shared, producers: Shared2) {
    let partition = (id % knobs.partitions as usize) as i32;
    let per_instance = knobs.batches_per_producer.div_ceil(knobs.instances);
    let batches: Vec<usize> = (0..knobs.batches_per_producer).collect();
    for (instance_index, chunk) in batches.chunks(per_instance).enumerate() {
        let instance = format!("producer-{id}.{instance_index}");
        let mut client = common::connect("broker").await;
        let producer_id = loop {
            let outcome = client.init_producer_id().await;
            world.lock().unwrap().history.record(
                &instance,
                "init-producer-id",
                &outcome_name(&outcome),
                serde_json::json!({"result": format!("{outcome:?}")}),
            );
            match outcome {
                Outcome::Ok((pid, epoch)) => {
                    assert_eq!(epoch, 0, "an idempotent producer starts at epoch 0");
                    break pid;
                }
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Outcome::Indefinite => client = common::connect("broker").await,
            }
        };
        producers.lock().unwrap().instances.push((instance.clone(), producer_id));
        // The instance's batches: (batch id, values, base sequence).
        let mut stream = Vec::new();
        let mut sequence = 0i32;
        for (index, &b) in chunk.iter().enumerate() {
            let values: Vec<Bytes> = (0..knobs.records_per_batch).map(|r| value(id, b, r)).collect();
            let batch_id = (id * 1_000_000 + b) as u64;
            {
                let mut p = producers.lock().unwrap();
                for v in &values {
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
                .insert(batch_id, values.clone());
            stream.push((batch_id, values, sequence));
            sequence += knobs.records_per_batch as i32;
        }
        let mut acked = vec![false; stream.len()];
        let mut first_unacked = 0;
        let mut next = 0;
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        // After a failed answer nothing new is sent until the in-flight answers are in.
        let mut retrying = false;
        while first_unacked < stream.len() {
            // At most five batches unacked, as the broker remembers five per producer.
            while !retrying && next < first_unacked + IN_FLIGHT_MAX && next < stream.len() && !client.is_broken() {
                let (_, values, base_sequence) = &stream[next];
                let stamp = ProducerStamp { producer_id, producer_epoch: 0, base_sequence: *base_sequence };
                if client.send_produce(TOPIC, partition, values, common::now_ms(), stamp).await.is_ok() {
                    in_flight.push_back(next);
                }
                next += 1;
            }
            let Some(index) = in_flight.pop_front() else {
                // The connection broke while sending: start over from the first unacked batch.
                client = common::connect("broker").await;
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
                w.history.record(&instance, "produce", &outcome_name(&outcome), detail);
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
                // Retriable (a storage error, a refused leader, a sequence the broker cannot place
                // because an earlier batch failed): let the in-flight answers come, then resend
                // everything from the first unacked batch, as clients do.
                Outcome::Failed(_) => retrying = true,
                Outcome::Indefinite => {
                    in_flight.clear();
                    client = common::connect("broker").await;
                    next = first_unacked;
                    retrying = false;
                }
            }
            if retrying && in_flight.is_empty() {
                retrying = false;
                next = first_unacked;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    world.lock().unwrap().producers_done += 1;
}

async fn workload(knobs: Knobs, world: Shared, producers: Shared2) -> turmoil::Result {
    common::create_topic("broker", TOPIC, knobs.partitions).await;
    let tasks: Vec<_> = (0..knobs.producers)
        .map(|id| tokio::spawn(producer(id, knobs.clone(), world.clone(), producers.clone())))
        .collect();
    for t in tasks {
        t.await?;
    }
    for p in 0..knobs.partitions {
        let (read, hwm, corrupt) = common::read_partition("broker", TOPIC, p).await;
        let mut w = world.lock().unwrap();
        w.violations.extend(corrupt);
        let history = w.partitions.entry(p).or_default();
        history.read = read;
        history.high_watermark = hwm;
    }
    Ok(())
}

pub fn run(seed: u64) -> RunResult {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = Knobs::from_seed(&mut rng);
    let volume = SimVolume::new(rng.random(), knobs.faults);
    let mut sim = common::simulation(seed, SIM_SECONDS_MAX, knobs.max_message_latency_ms, knobs.buggify);
    let config = BrokerConfig { log_segment_bytes: knobs.segment_bytes, ..BrokerConfig::default() };
    let control = hosts::add_broker(&mut sim, "broker", volume.clone(), rng.random(), knobs.clock_skew_ms, config);
    let world = Shared::default();
    let producers = Shared2::default();
    sim.client("clients", workload(knobs.clone(), world.clone(), producers.clone()));

    let progress = || world.lock().unwrap().partitions.values().map(|p| p.produced.acked.len()).sum();
    let controls = BTreeMap::from([("broker", control)]);
    let mut violations = faults::drive(&mut sim, &volume, &controls, knobs.plan.clone(), progress, LIVENESS_MS);
    let w = world.lock().unwrap();
    let p = producers.lock().unwrap();
    violations.extend(w.violations.iter().cloned());
    violations.extend(checkers::idempotence::check_producer_ids(&p.instances));
    if violations.is_empty() {
        violations = checkers::check_all(&w.partitions);
        for (partition, history) in &w.partitions {
            let name = format!("partition {partition}");
            violations.extend(checkers::idempotence::check(&name, &history.read, &p.sender_of));
        }
    }
    common::finish("idempotence", seed, &knobs, violations, &w.history, &volume, &sim)
}
