//! topic-churn: one topic created, written, deleted and created again, several times over,
//! while the broker crashes; one world in two arms the crash point between a deletion's removal
//! of the topic's metadata and the removal of its partitions' files. Each incarnation's values
//! are its own. The last incarnation read back whole must hold every batch acked to it and no
//! value of an earlier one (`stale-read`), unless that value's request had an unknown outcome
//! and so may have landed late.

use bytes::Bytes;
use kaas_core::BrokerConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::common::{self, Common, CrashPoint, FaultMix};
use super::{RunResult, World};
use crate::checkers;
use crate::client::{KAFKA_STORAGE_ERROR, Outcome, UNKNOWN_TOPIC_OR_PARTITION};
use crate::history::outcome_name;
use crate::workloads::{self, Shared, backoff};

const TOPIC: &str = "churn";
const SIM_SECONDS_MAX: u64 = 600;
const LIVENESS_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicChurn {
    pub common: Common,
    pub partitions: i32,
    pub incarnations: usize,
    pub batches_per_incarnation: usize,
    pub records_per_batch: usize,
    /// The producer's acks: -1 or 1.
    pub acks: i16,
}

impl World for TopicChurn {
    fn draw(seed: u64) -> TopicChurn {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let incarnations = rng.random_range(2..=5);
        let batches_per_incarnation = rng.random_range(5..30);
        let mix =
            FaultMix { progress_max: incarnations * batches_per_incarnation, clock_steps: true, drift_ppm_max: 2000 };
        let mut common = Common::draw(&mut rng, mix);
        if rng.random_bool(0.5) {
            let visit = rng.random_range(1..incarnations as u32);
            common.arm(CrashPoint { site: "topics.before_partition_removal".into(), visit });
        }
        TopicChurn {
            common,
            partitions: rng.random_range(1..=2),
            incarnations,
            batches_per_incarnation,
            records_per_batch: rng.random_range(1..5),
            acks: [-1, 1][rng.random_range(0..2)],
        }
    }

    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let config = BrokerConfig { log_segment_bytes: 4096, ..BrokerConfig::default() };
        let mut run = common::start(seed, &self.common, SIM_SECONDS_MAX, &config);
        let world = workloads::shared(self.common.hosts(), &run.history);
        run.sim.client("clients", workload(self.clone(), world.clone()));
        let progress = || world.lock().unwrap().producers_done;
        let mut violations = run.drive(&self.common, progress, LIVENESS_MS);
        {
            let w = world.lock().unwrap();
            violations.extend(w.violations.iter().cloned());
            if violations.is_empty() {
                violations = checkers::check_all(&w.partitions);
            }
        }
        run.finish("topic-churn", seed, violations)
    }
}

async fn workload(t: TopicChurn, world: Shared) -> turmoil::Result {
    let mut client = workloads::client(&world, "churner");
    for k in 0..t.incarnations {
        workloads::create_topic(&world, TOPIC, t.partitions).await;
        for b in 0..t.batches_per_incarnation {
            let id = (k * 10_000 + b) as u64;
            let partition = (b % t.partitions as usize) as i32;
            let values: Vec<Bytes> =
                (0..t.records_per_batch).map(|r| Bytes::from(format!("i{k}-b{b:03}-r{r}"))).collect();
            produce(&mut client, &world, id, partition, &values, t.acks).await;
            // Progress for the fault triggers: batches answered.
            world.lock().unwrap().producers_done += 1;
        }
        if k + 1 < t.incarnations {
            delete(&mut client, &world).await;
        }
    }
    for p in 0..t.partitions {
        workloads::consumer::final_read(&world, TOPIC, p).await;
    }
    Ok(())
}

/// One batch, retried until acked; every attempt recorded in the partition's history.
async fn produce(
    client: &mut crate::client::Client,
    world: &Shared,
    id: u64,
    partition: i32,
    values: &[Bytes],
    acks: i16,
) {
    loop {
        world.lock().unwrap().partitions.entry(partition).or_default().produced.sending(id, values);
        let outcome = client.produce_acks(TOPIC, partition, values, common::now_ms(), acks).await;
        {
            let mut w = world.lock().unwrap();
            let detail = serde_json::json!({"batch": id, "partition": partition});
            w.history.record("churner", "produce-batch", &outcome_name(&outcome), detail);
            let produced = &mut w.partitions.entry(partition).or_default().produced;
            match outcome {
                Outcome::Ok(base) => {
                    produced.acked.insert(id, base);
                    return;
                }
                Outcome::Failed(KAFKA_STORAGE_ERROR) | Outcome::Indefinite => {
                    produced.indefinite.insert(id);
                }
                Outcome::Failed(_) => {}
            }
        }
        backoff().await;
    }
}

/// Deletes the topic, retrying until it is gone; what was sent to it becomes `earlier`.
async fn delete(client: &mut crate::client::Client, world: &Shared) {
    let mut tried = false;
    loop {
        let outcome = client.delete_topic(TOPIC).await;
        world.lock().unwrap().history.record("churner", "delete-topic", &outcome_name(&outcome), serde_json::json!({}));
        match outcome {
            Outcome::Ok(()) => break,
            // An earlier try of this deletion went through.
            Outcome::Failed(UNKNOWN_TOPIC_OR_PARTITION) if tried => break,
            _ => {}
        }
        tried = true;
        backoff().await;
    }
    let mut w = world.lock().unwrap();
    for history in w.partitions.values_mut() {
        let produced = std::mem::take(&mut history.produced);
        for (id, values) in produced.sent {
            let late = produced.indefinite.contains(&id);
            for v in values {
                history.earlier.insert(v, late);
            }
        }
    }
}
