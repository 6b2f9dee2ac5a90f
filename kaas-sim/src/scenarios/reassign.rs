//! cluster-reassign: the cluster-failover world (idempotent producers on 3 to 5 brokers whose
//! owners crash, restart and hand over), in half the worlds with cluster-zombie's faults too
//! (owners paused past their lease, cut off from the volume, clocks drifting), with an admin that reassigns partitions while it runs:
//! AlterPartitionReassignments to a replica list of one to three brokers in a drawn order, at
//! drawn points of the load, through whichever broker answers. A reassignment moves ownership
//! by the same release and claim as a failover, so the moves meet the crashes, restarts,
//! volume faults and lost messages of the world.
//!
//! Checks: the load's own (every acked record once at its offset, no batch twice, unique
//! producer ids, the volume's two-writers check), and `misplaced`: once the load is done, within
//! `CONVERGE_MS` (every broker back by then) every broker's Metadata must name every broker
//! live and report each reassigned partition's last accepted list as its replicas (or a list
//! whose request had an unknown outcome, which a broker back from a fault may carry out late),
//! led by that list's first broker, and ListPartitionReassignments must no longer list it (a
//! broker of the list holds its claim).

use std::collections::BTreeMap;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::cluster::Cluster;
use super::common::Common;
use super::idempotence::{Extras, TOPIC};
use super::{RunResult, World};
use crate::client::{Client, KAFKA_STORAGE_ERROR, Outcome};
use crate::workloads::{self, Shared, backoff};

/// How long after the load the partitions have to settle where they were reassigned: a broker
/// paused at the end may sleep for three leases (36 s at most), and one that crashed waits out
/// its old lease (12 s plus its drift margin), then the settle period (at most the session
/// timeout) before it owns anything.
const CONVERGE_MS: u64 = 90_000;
/// How often the admin looks again, while it waits.
const POLL_MS: u64 = 500;

/// One reassignment: once `at_progress` batches are acked, `partition` goes to `replicas`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub at_progress: usize,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterReassign {
    pub cluster: Cluster,
    pub moves: Vec<Move>,
}

impl World for ClusterReassign {
    fn draw(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let zombie = rng.random_bool(0.5);
        let cluster = Cluster::draw_from(&mut rng, zombie);
        let ids: Vec<i32> = cluster.common.brokers.iter().map(|b| b.broker_id).collect();
        let (steps, partitions) = (cluster.load.steps(), cluster.load.partitions);
        let mut moves: Vec<Move> = (0..rng.random_range(2..=6))
            .map(|_| {
                let mut replicas = ids.clone();
                replicas.shuffle(&mut rng);
                replicas.truncate(rng.random_range(1..=3.min(ids.len())));
                Move { at_progress: rng.random_range(0..steps), partition: rng.random_range(0..partitions), replicas }
            })
            .collect();
        moves.sort_by_key(|m| m.at_progress);
        ClusterReassign { cluster, moves }
    }

    fn common(&self) -> &Common {
        &self.cluster.common
    }

    fn run(&self, seed: u64) -> RunResult {
        let Cluster { common, leases, load } = &self.cluster;
        let (moves, steps) = (self.moves.clone(), load.steps());
        let mut broker_ids: Vec<i32> = common.brokers.iter().map(|b| b.broker_id).collect();
        broker_ids.sort_unstable();
        let extras = Extras {
            more_liveness_ms: CONVERGE_MS,
            side: Some(Box::new(move |world| Box::pin(admin(moves, steps, broker_ids, world)))),
            ..Extras::default()
        };
        load.run_with(seed, common, leases.config(), "cluster-reassign", extras, |_| Vec::new())
    }
}

fn acked(world: &Shared) -> usize {
    world.lock().unwrap().partitions.values().map(|p| p.produced.acked.len()).sum()
}

/// Makes each move when the load reaches it, retrying until a broker accepts it; then, once the
/// load is done, waits for every reassigned partition to settle where it was sent.
async fn admin(moves: Vec<Move>, steps: usize, broker_ids: Vec<i32>, world: Shared) -> turmoil::Result {
    let mut client = workloads::client(&world, "admin");
    let mut lists = Lists::default();
    for m in moves {
        while acked(&world) < m.at_progress {
            tokio::time::sleep(Duration::from_millis(POLL_MS / 5)).await;
        }
        loop {
            match client.reassign(TOPIC, m.partition, Some(&m.replicas)).await {
                Outcome::Ok(()) => break,
                // Carried out or not: a broker cut off from the volume may still do it later.
                Outcome::Indefinite | Outcome::Failed(KAFKA_STORAGE_ERROR) => {
                    lists.unknown.entry(m.partition).or_default().push(m.replicas.clone());
                    backoff().await
                }
                // The topic not created yet, a broker down, a timeout: again.
                Outcome::Failed(_) => backoff().await,
            }
        }
        lists.last.insert(m.partition, m.replicas);
    }
    while acked(&world) < steps {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    let done_at = tokio::time::Instant::now();
    loop {
        let misplaced = misplaced(&mut client, &lists, &broker_ids).await;
        if misplaced.is_empty() {
            return Ok(());
        }
        if done_at.elapsed() >= Duration::from_millis(CONVERGE_MS) {
            let found = format!("misplaced: {} s after the load: {}", CONVERGE_MS / 1000, misplaced.join("; "));
            world.lock().unwrap().violations.push(found);
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// The replica lists the admin sent each partition.
#[derive(Default)]
struct Lists {
    /// The last one a broker accepted.
    last: BTreeMap<i32, Vec<i32>>,
    /// Those whose outcome is unknown: a broker that lost the volume mid-request may carry one
    /// out when it is back, after a later list was accepted elsewhere, as long as its timeout
    /// had not run out when it began.
    unknown: BTreeMap<i32, Vec<Vec<i32>>>,
}

impl Lists {
    fn may_end_with(&self, partition: i32, replicas: &[i32]) -> bool {
        self.last.get(&partition).is_some_and(|l| l == replicas)
            || self.unknown.get(&partition).is_some_and(|u| u.iter().any(|l| l == replicas))
    }
}

/// What is not yet where the admin sent it, by every broker's Metadata (each must name every
/// broker live, report one of the lists the partition may have ended with as its replicas and
/// lead it by the list's first broker) and by ListPartitionReassignments (a broker of the list
/// holds the claim).
async fn misplaced(client: &mut Client, lists: &Lists, broker_ids: &[i32]) -> Vec<String> {
    let mut found = Vec::new();
    for host in client.bootstrap().to_vec() {
        let Outcome::Ok(routes) = client.metadata_from(&host, TOPIC).await else {
            found.push(format!("no Metadata answer from {host}"));
            continue;
        };
        if routes.brokers.keys().copied().collect::<Vec<i32>>() != broker_ids {
            found.push(format!("{host} names brokers {:?} live", routes.brokers.keys().collect::<Vec<_>>()));
            continue;
        }
        for (&partition, target) in &lists.last {
            let replicas = routes.replicas.get(&partition).cloned().unwrap_or_default();
            if !lists.may_end_with(partition, &replicas) {
                found.push(format!(
                    "{host} says partition {partition} has replicas {replicas:?}, reassigned to {target:?}"
                ));
                continue;
            }
            let leader = routes.partitions.iter().find(|(p, _, _)| *p == partition).map(|(_, leader, _)| *leader);
            if leader != replicas.first().copied() {
                found.push(format!(
                    "{host} says partition {partition} is led by {leader:?}, reassigned to {replicas:?}"
                ));
            }
        }
    }
    match client.reassigning(TOPIC).await {
        Outcome::Ok(reassigning) => {
            for p in reassigning.iter().filter(|p| lists.last.contains_key(p)) {
                found.push(format!("partition {p} still reassigning"));
            }
        }
        _ => found.push("no ListPartitionReassignments answer".into()),
    }
    found
}
