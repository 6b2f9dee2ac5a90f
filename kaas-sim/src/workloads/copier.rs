//! Consume-transform-produce copiers (KIP-447). A copier slot owns some partitions of the input
//! and copies every record to the same partition of the output in transactions that also
//! commit the input offsets (AddOffsetsToTxn, TxnOffsetCommit). Its instances stop at random
//! steps of a transaction, in one of two ways:
//! - a crash: the instance is gone; its successor fences it and aborts what it left open;
//! - a pause (a GC pause, a SIGSTOP, a partition from the brokers): the successor starts, and
//!   the paused instance later resumes exactly where it stopped, a zombie that produces the
//!   outputs it owed, stages its offsets and commits. Either its old epoch was fenced by then
//!   and every step is refused, or it was not and its transaction commits whole; after that
//!   one transaction it stops.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::oneshot;

use super::transactional::{CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE, UNSTABLE_OFFSET_COMMIT, retriable};
use super::{RETRIABLE_STREAK_MAX, Shared, backoff};
use crate::checkers::copier::{Copies, copy_of};
use crate::client::{Outcome, ProducerStamp};
use crate::history::outcome_name;
use crate::scenarios::common::now_ms;

/// What the copiers are to do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub input: String,
    pub output: String,
    pub group: String,
    pub partitions: i32,
    pub slots: i32,
    /// Per mille: the chance that an instance stops at a given step of a transaction.
    pub stop_per_mille: u32,
    /// Per mille: the chance that a stop is a pause (the instance comes back) not a crash.
    pub pause_per_mille: u32,
    /// The longest a paused instance stays away.
    pub pause_ms_max: u64,
    pub transaction_timeout_ms: i32,
    /// The slots whose instances speak transactions v2 (KIP-890 part 2): no AddPartitionsToTxn
    /// nor AddOffsetsToTxn, and EndTxn v5's bumped epoch.
    pub tv2_slots: Vec<i32>,
}

/// What the copiers did, for the checker and the fault triggers.
#[derive(Default)]
pub struct Progress {
    pub copies: Copies,
    /// Input records copied by committed transactions, as the copiers count them.
    pub copied: usize,
}

pub type SharedProgress = Arc<Mutex<Progress>>;

/// Why an instance stopped.
#[derive(Debug)]
enum Stop {
    /// Its partitions are copied to the end and committed.
    Done,
    /// It crashed, or a step failed: the next instance takes over.
    Crashed,
    /// It paused, came back as a zombie, and finished (or was refused) its one transaction.
    Zombie,
}

/// Whether an instance is itself, or a zombie back from a pause.
#[derive(PartialEq, Eq)]
enum Life {
    Live,
    Zombie,
}

/// Records and retries a call while the broker answers that a transition is under way.
macro_rules! retrying {
    ($client:ident, $op:literal, $ids:expr, $world:expr, $call:expr) => {{
        let mut tries = 0;
        loop {
            let outcome = $call;
            let name = $client.name().to_string();
            $world.lock().unwrap().history.record(&name, $op, &outcome_name(&outcome), serde_json::json!({"ids": $ids}));
            match outcome {
                Outcome::Failed(
                    CONCURRENT_TRANSACTIONS | COORDINATOR_NOT_AVAILABLE | UNSTABLE_OFFSET_COMMIT | crate::client::NOT_SENT,
                ) if tries < RETRIABLE_STREAK_MAX => {
                    tries += 1;
                    backoff().await
                }
                other => break other,
            }
        }
    }};
}

/// Whether the instance stops at this step: true for a crash (it is gone); a pause tells the
/// slot (its successor may start), waits, and comes back as a zombie that goes on from here.
async fn stops_here(
    rng: &mut ChaCha8Rng,
    life: &mut Life,
    plan: &Plan,
    world: &Shared,
    name: &str,
    paused: &mut Option<oneshot::Sender<()>>,
) -> bool {
    if *life == Life::Zombie || rng.random_range(0..1000) >= plan.stop_per_mille {
        return false;
    }
    if rng.random_range(0..1000) >= plan.pause_per_mille {
        return true;
    }
    let away_ms = rng.random_range(0..=plan.pause_ms_max);
    world.lock().unwrap().history.record(name, "pause", "ok", serde_json::json!({"ms": away_ms}));
    if let Some(paused) = paused.take() {
        let _ = paused.send(());
    }
    tokio::time::sleep(Duration::from_millis(away_ms)).await;
    *life = Life::Zombie;
    false
}

/// One copier instance of `slot`: copies its partitions from the group's committed offsets.
/// `paused` tells the slot that the instance paused, so its successor may start.
async fn instance(
    name: String,
    slot: i32,
    plan: Plan,
    world: Shared,
    progress: SharedProgress,
    seed: u64,
    paused: oneshot::Sender<()>,
) -> Stop {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut paused = Some(paused);
    let mut life = Life::Live;
    let tid = format!("copier-{slot}");
    let mine: Vec<i32> = (0..plan.partitions).filter(|p| p % plan.slots == slot).collect();
    let mut client = super::client(&world, &name);
    let timeout = plan.transaction_timeout_ms;
    let init =
        retrying!(client, "init-txn-producer", (-1, -1), world, client.init_txn_producer(&tid, timeout, None).await);
    let Outcome::Ok(mut ids) = init else { return Stop::Crashed };
    let tv2 = plan.tv2_slots.contains(&slot);
    let committed =
        retrying!(client, "resume", ids, world, client.committed_offsets_stable(&plan.group, &plan.input, &mine).await);
    let Outcome::Ok(committed) = committed else { return Stop::Crashed };
    let mut positions: BTreeMap<i32, i64> = mine.iter().copied().zip(committed.into_iter().map(|o| o.max(0))).collect();
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    loop {
        let ends = progress.lock().unwrap().copies.input_end.clone();
        if positions.iter().all(|(p, o)| *o >= ends[p]) {
            return Stop::Done;
        }
        // Read a few records of each partition not yet at its end.
        let mut batch: Vec<(i32, Vec<i64>, i64)> = Vec::new();
        for (&p, &from) in &positions {
            if from >= ends[&p] {
                continue;
            }
            match client.fetch_committed(&plan.input, p, from, 50).await {
                Outcome::Ok(fetched) => {
                    let offsets: Vec<i64> = fetched.records.iter().take(5).map(|(o, _)| *o).collect();
                    let next = offsets.last().map_or(fetched.next_offset, |o| o + 1);
                    if next > from {
                        batch.push((p, offsets, next));
                    }
                }
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Outcome::Indefinite => return Stop::Crashed,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let offsets: Vec<(i32, i64)> = batch.iter().map(|(p, _, next)| (*p, *next)).collect();
        let partitions: Vec<i32> = batch.iter().map(|(p, _, _)| *p).collect();
        let added = match tv2 {
            true => Outcome::Ok(()),
            false => retrying!(
                client,
                "add-partitions",
                ids,
                world,
                client.add_partitions_to_txn(&tid, ids, &plan.output, &partitions).await
            ),
        };
        if !matches!(added, Outcome::Ok(())) || stops_here(&mut rng, &mut life, &plan, &world, &name, &mut paused).await
        {
            return if life == Life::Zombie { Stop::Zombie } else { Stop::Crashed };
        }
        for (p, offsets, _) in &batch {
            if offsets.is_empty() {
                continue;
            }
            let values: Vec<Bytes> = offsets.iter().map(|o| copy_of(*p, *o)).collect();
            let base_sequence = *sequences.get(p).unwrap_or(&0);
            let stamp = ProducerStamp { producer_id: ids.0, producer_epoch: ids.1, base_sequence };
            let outcome = client.produce_txn(&tid, &plan.output, *p, &values, now_ms(), stamp, tv2).await;
            let detail = serde_json::json!({"partition": p, "ids": ids, "base_sequence": base_sequence});
            world.lock().unwrap().history.record(&name, "produce-copies", &outcome_name(&outcome), detail);
            if !matches!(outcome, Outcome::Ok(_)) {
                return if life == Life::Zombie { Stop::Zombie } else { Stop::Crashed };
            }
            sequences.insert(*p, base_sequence + values.len() as i32);
        }
        if stops_here(&mut rng, &mut life, &plan, &world, &name, &mut paused).await {
            return Stop::Crashed;
        }
        let group = plan.group.clone();
        let added = match tv2 {
            true => Outcome::Ok(()),
            false => retrying!(client, "add-offsets", ids, world, client.add_offsets_to_txn(&tid, ids, &group).await),
        };
        if !matches!(added, Outcome::Ok(())) {
            return if life == Life::Zombie { Stop::Zombie } else { Stop::Crashed };
        }
        let staged = retrying!(
            client,
            "txn-offset-commit",
            ids,
            world,
            client.txn_offset_commit(&tid, ids, &group, &plan.input, &offsets, tv2).await
        );
        if !matches!(staged, Outcome::Ok(()))
            || stops_here(&mut rng, &mut life, &plan, &world, &name, &mut paused).await
        {
            return if life == Life::Zombie { Stop::Zombie } else { Stop::Crashed };
        }
        // EndTxn is retried through lost connections: a retry of a commit that went through
        // is answered as done.
        let mut tries = 0;
        loop {
            let outcome = match tv2 {
                true => client.end_txn_v2(&tid, ids, true).await,
                false => match client.end_txn(&tid, ids, true).await {
                    Outcome::Ok(()) => Outcome::Ok(ids),
                    Outcome::Failed(code) => Outcome::Failed(code),
                    Outcome::Indefinite => Outcome::Indefinite,
                },
            };
            world.lock().unwrap().history.record(
                &name,
                "commit-copies",
                &outcome_name(&outcome),
                serde_json::json!({"ids": ids}),
            );
            match outcome {
                Outcome::Ok(next) => {
                    if next != ids {
                        // A new epoch (v2) starts every partition's sequence at 0.
                        ids = next;
                        sequences.clear();
                    }
                    break;
                }
                Outcome::Failed(code) if retriable(code) && tries < RETRIABLE_STREAK_MAX => {
                    tries += 1;
                    backoff().await
                }
                Outcome::Failed(_) => return if life == Life::Zombie { Stop::Zombie } else { Stop::Crashed },
                Outcome::Indefinite => {}
            }
        }
        let copied: usize = batch.iter().map(|(_, offsets, _)| offsets.len()).sum();
        progress.lock().unwrap().copied += copied;
        if life == Life::Zombie {
            return Stop::Zombie;
        }
        for (p, _, next) in batch {
            positions.insert(p, next);
        }
    }
}

/// One copier slot: instances in turn until one copies its partitions to the end; a paused
/// instance's successor starts while it is away, and the slot waits for its zombies too.
pub async fn slot(slot: i32, plan: Plan, world: Shared, progress: SharedProgress, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut zombies = Vec::new();
    for n in 0.. {
        let name = format!("copier-{slot}.{n}");
        let (paused, mut paused_rx) = oneshot::channel();
        let mut running =
            tokio::spawn(instance(name, slot, plan.clone(), world.clone(), progress.clone(), rng.random(), paused));
        tokio::select! {
            biased;
            stop = &mut running => {
                if matches!(stop, Ok(Stop::Done)) {
                    break;
                }
            }
            Ok(()) = &mut paused_rx => zombies.push(running),
        }
    }
    for z in zombies {
        let _ = z.await;
    }
}
