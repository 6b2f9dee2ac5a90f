//! Exactly-once queue copiers (KIP-1289): slots of `kaas_client::share_copy::ShareCopier`, the
//! copier `kaas share-copy` runs, each slot with its own transactional id. The simulator's hooks
//! stop an instance at the step its world's corner case names:
//! - a crash (before anything of the transaction is written, after the outputs, after the
//!   acknowledgements are staged): the instance is gone, its connections close, and its
//!   successor's InitProducerId aborts what it left open;
//! - a pause (the zombie case): the successor starts and fences it; the zombie comes back past
//!   its share session timeout, is told by a heartbeat that it is no member, and carelessly
//!   goes on to stage and commit. Both must be refused. In some worlds it first joins again
//!   under its member id (KIP-1082) and stages what it acquires then under the member epoch it
//!   was fenced at: refused too, for the epoch (KIP-1289's member epoch check at staging).
//!
//! What the copiers acquire and acknowledge goes into the share log (`share_member::Observer`);
//! a committed transaction's inputs are accepted as EndTxn answers.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kaas_client::share_consumer::{ShareConsumer, accepts_by_broker};
use kaas_client::share_copy::{CopyConfig, CopyHooks, Go, Placement, ShareCopier, Step, TxnEnd, TxnReport};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::Shared;
use super::share_member::{Observer, SharedMembers};
use crate::checkers::share::{Ack, AckKind, AckOutcome, Staged};
use crate::client::{Client, Outcome};
use crate::history::History;

/// KIP-1289's corner cases, as the reference document lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// The copier dies with records acquired, before anything of its transaction is written.
    CrashBeforeBegin,
    /// ... after its outputs were sent, before the acknowledgements were staged.
    CrashAfterSend,
    /// ... after the acknowledgements were staged, before EndTxn.
    CrashAfterStage,
    /// The coordinator's broker dies after EndTxn(COMMIT) was made durable, before the markers.
    CrashAfterCommit,
    /// A paused copier comes back fenced (producer and member) and carries on.
    Zombie,
    /// Every k-th transaction is aborted on purpose.
    ExplicitAbort,
    /// One of a transaction's produce requests fails while the others succeed.
    PartialProduce,
}

/// What the copiers are to do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub group: String,
    pub input: String,
    pub output: String,
    pub case: Case,
    /// Per mille, at the case's step: that the instance stops there.
    pub stop_per_mille: u32,
    pub pause_ms: (u64, u64),
    pub transaction_timeout_ms: i32,
    pub abort_every: Option<u64>,
    /// Whether a paused copier's successor starts while it is away (and fences its producer).
    pub successor: bool,
    /// Whether a zombie told it is no member joins again under its member id and stages what
    /// it acquires then under the epoch it was fenced at.
    pub rejoin: bool,
}

/// Why an instance ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Idle past its limit, or the scenario said done.
    Done,
    Crashed,
    Zombie,
}

struct Hooks {
    plan: Plan,
    rng: ChaCha8Rng,
    members: SharedMembers,
    history: History,
    member_id: String,
    /// Tells the slot the instance paused, so that its successor starts.
    paused: Option<oneshot::Sender<()>>,
    zombie: bool,
    /// A client of its own, for the zombie's heartbeat when it comes back.
    beat_client: Client,
    /// The world, for the clients of a zombie that joins again.
    world: Shared,
    transactional_id: String,
    /// Where EndTxn was sent from, for the acceptance its commit stands for.
    ending_at: u64,
}

impl Hooks {
    /// The zombie's return: a heartbeat at the epoch it had, which tells it whether it is
    /// still a member (recorded as a fence if not).
    async fn come_back(&mut self, txn: &TxnReport) {
        let member_epoch = txn.member_epoch;
        let outcome =
            self.beat_client.share_group_heartbeat(&self.plan.group, &self.member_id, member_epoch, None).await;
        let received = self.history.next_seq();
        if let crate::client::Outcome::Failed(25 | 110) = outcome {
            self.members.lock().unwrap().log.fences.push((self.member_id.clone(), member_epoch, received));
            if self.plan.rejoin {
                self.stage_stale(txn).await;
            }
        }
    }

    /// A fenced zombie joins again under its member id, acquires, and stages what it acquired
    /// in its open transaction under the epoch it was fenced at, as a client that kept its old
    /// group metadata would. The group knows the member at a newer epoch: refused. Then it
    /// leaves again, giving back what it acquired.
    async fn stage_stale(&mut self, txn: &TxnReport) {
        let name = format!("{}-again", self.member_id);
        let client = super::client(&self.world, &name);
        let mut again = ShareConsumer::new(client, &self.plan.group, &self.plan.input, &self.member_id);
        again.max_records = 10;
        again.max_wait_ms = 300;
        let mut observer = Observer { members: self.members.clone(), history: self.history.clone() };
        let mut deliveries = Vec::new();
        for _ in 0..5 {
            deliveries = again.poll(&mut observer).await;
            if !deliveries.is_empty() {
                break;
            }
        }
        let by_broker = accepts_by_broker(&deliveries, again.topic_id().unwrap_or_default());
        let member = (self.member_id.as_str(), txn.member_epoch);
        for (broker, acks) in by_broker {
            let sent = self.history.next_seq();
            let outcome = again
                .client
                .txn_share_acknowledge_on(&broker, &self.transactional_id, txn.ids, &self.plan.group, member, &acks)
                .await;
            let staged = matches!(&outcome, Outcome::Ok(codes) if codes.iter().all(|(_, _, c)| *c == 0));
            let staged = Staged { member: self.member_id.clone(), member_epoch: txn.member_epoch, sent, staged };
            self.members.lock().unwrap().log.staged.push(staged);
        }
        again.close(&mut observer).await;
        if !deliveries.is_empty() {
            reach_case(Case::Zombie, " (joined again, staged at its old epoch)");
        }
    }
}

impl CopyHooks for Hooks {
    fn at<'a>(&'a mut self, step: Step, txn: &'a TxnReport) -> Pin<Box<dyn Future<Output = Go> + Send + 'a>> {
        Box::pin(async move {
            if step == Step::Ending {
                self.ending_at = self.history.next_seq();
            }
            if self.members.lock().unwrap().done && step == Step::Polled {
                // The queue is finished: nothing of this transaction is written; its records go back.
                return Go::Stop;
            }
            if self.zombie {
                return Go::On;
            }
            let here = match self.plan.case {
                Case::CrashBeforeBegin => step == Step::Polled,
                Case::CrashAfterSend => step == Step::Produced,
                Case::CrashAfterStage => step == Step::Staged,
                Case::Zombie => step == Step::Produced || step == Step::Staged,
                Case::CrashAfterCommit | Case::ExplicitAbort | Case::PartialProduce => false,
            };
            if !here || self.rng.random_range(0..1000) >= self.plan.stop_per_mille {
                return Go::On;
            }
            if self.plan.case != Case::Zombie {
                self.beat_client.record("crash", "ok", serde_json::json!({"step": format!("{step:?}")}));
                reach_case(self.plan.case, "");
                return Go::Stop;
            }
            let away_ms = self.rng.random_range(self.plan.pause_ms.0..=self.plan.pause_ms.1);
            self.beat_client.record("pause", "ok", serde_json::json!({"ms": away_ms, "step": format!("{step:?}")}));
            if let Some(paused) = self.paused.take() {
                let _ = paused.send(());
            }
            tokio::time::sleep(Duration::from_millis(away_ms)).await;
            self.zombie = true;
            self.come_back(txn).await;
            let how = match (step, self.plan.successor) {
                (Step::Produced, true) => " (before staging, fenced by a successor)",
                (Step::Produced, false) => " (before staging, no successor)",
                (_, true) => " (staged, fenced by a successor)",
                (_, false) => " (staged, no successor)",
            };
            reach_case(Case::Zombie, how);
            Go::On
        })
    }

    fn staging(&mut self, txn: &TxnReport, sent: u64, staged: bool) {
        let staged = Staged { member: self.member_id.clone(), member_epoch: txn.member_epoch, sent, staged };
        self.members.lock().unwrap().log.staged.push(staged);
    }

    fn ended(&mut self, txn: &TxnReport, end: TxnEnd) {
        let received = self.history.next_seq();
        if txn.written > 0 && txn.written < txn.outputs {
            reach_case(Case::PartialProduce, "");
        }
        if self.plan.abort_every.is_some() && txn.staged && !txn.commit && end == TxnEnd::Aborted {
            reach_case(Case::ExplicitAbort, "");
        }
        if txn.staged {
            kaas_core::sim::reach(placement_cell(&txn.placement));
        }
        let detail = serde_json::json!({"number": txn.number, "ids": txn.ids, "inputs": txn.inputs.len(), "end": format!("{end:?}")});
        self.beat_client.record("copy-txn", "ok", detail);
        if end != TxnEnd::Committed {
            return;
        }
        let mut m = self.members.lock().unwrap();
        m.accepted += txn.inputs.len();
        for &(partition, offset, _) in &txn.inputs {
            m.log.acks.push(Ack {
                member: self.member_id.clone(),
                partition,
                offset,
                kind: AckKind::Accept,
                sent: self.ending_at,
                received,
                outcome: AckOutcome::Done,
            });
        }
    }
}

/// Counts a world's visit of a KIP-1289 corner case (`kaas-sim coverage`).
pub fn reach_case(case: Case, how: &str) {
    kaas_core::sim::reach(format!("kip1289 {}{how}", case.name()));
}

impl Case {
    pub const ALL: [Case; 7] = [
        Case::CrashBeforeBegin,
        Case::CrashAfterSend,
        Case::CrashAfterStage,
        Case::CrashAfterCommit,
        Case::Zombie,
        Case::ExplicitAbort,
        Case::PartialProduce,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Case::CrashBeforeBegin => "crash-before-begin",
            Case::CrashAfterSend => "crash-after-send",
            Case::CrashAfterStage => "crash-after-stage",
            Case::CrashAfterCommit => "crash-after-commit",
            Case::Zombie => "zombie",
            Case::ExplicitAbort => "abort",
            Case::PartialProduce => "partial-produce",
        }
    }
}

/// Every placement cell: whether the transaction coordinator, the output partitions and the
/// share partitions of one staged transaction were on one broker or apart.
pub fn placement_cells() -> Vec<String> {
    let mut cells = Vec::new();
    for coordinator in ["with", "apart from"] {
        for output in ["with", "apart from"] {
            cells.push(format!("placement coordinator {coordinator} the share partitions, outputs {output} them"));
        }
    }
    cells
}

fn placement_cell(p: &Placement) -> String {
    let with = |brokers: &mut dyn Iterator<Item = &String>| {
        let mut brokers = brokers.peekable();
        if brokers.peek().is_none() {
            return "apart from";
        }
        match brokers.all(|b| p.shares.contains(b)) {
            true => "with",
            false => "apart from",
        }
    };
    let coordinator = with(&mut p.coordinator.iter());
    let output = with(&mut p.outputs.iter());
    format!("placement coordinator {coordinator} the share partitions, outputs {output} them")
}

/// One copier instance: copies until idle, done, or stopped by its hooks.
async fn instance(
    name: String,
    slot: i32,
    plan: Plan,
    world: Shared,
    members: SharedMembers,
    seed: u64,
    paused: oneshot::Sender<()>,
) -> End {
    let history = world.lock().unwrap().history.clone();
    let mut observer = Observer { members: members.clone(), history: history.clone() };
    let member_id = format!("member-{name}");
    let consumer = ShareConsumer::new(super::client(&world, &name), &plan.group, &plan.input, &member_id);
    let config = CopyConfig {
        group: plan.group.clone(),
        input: plan.input.clone(),
        output: plan.output.clone(),
        transactional_id: format!("copier-{slot}"),
        member_id: member_id.clone(),
        max_records: None,
        abort_every: plan.abort_every,
        idle_exit_ms: 3_000,
        transaction_timeout_ms: plan.transaction_timeout_ms,
        poll_records: 10,
        // The partial-produce case is a produce that fails while another of the transaction
        // succeeded: given up at once, not waited out.
        produce_tries: match plan.case {
            Case::PartialProduce => 0,
            _ => kaas_client::share_copy::PRODUCE_TRIES,
        },
    };
    let mut copier = ShareCopier::new(consumer, config);
    copier.consumer.max_wait_ms = 300;
    let mut hooks = Hooks {
        plan: plan.clone(),
        rng: ChaCha8Rng::seed_from_u64(seed),
        members: members.clone(),
        history,
        member_id,
        paused: Some(paused),
        zombie: false,
        beat_client: super::client(&world, &format!("{name}-beats")),
        world: world.clone(),
        transactional_id: format!("copier-{slot}"),
        ending_at: 0,
    };
    let result = copier.run(&mut hooks, &mut observer).await;
    let detail = serde_json::json!({"result": format!("{result:?}")});
    copier.consumer.client.record("copier-end", "ok", detail);
    match result {
        _ if hooks.zombie => End::Zombie,
        Ok(report) if !report.stopped => End::Done,
        _ => End::Crashed,
    }
}

/// One copier slot: instances in turn (a paused one's successor starts while it is away) until
/// the scenario says the queue is finished.
pub async fn slot(slot: i32, plan: Plan, world: Shared, members: SharedMembers, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut zombies = Vec::new();
    for n in 0.. {
        if members.lock().unwrap().done {
            break;
        }
        let name = format!("copier-{slot}.{n}");
        let (paused, mut paused_rx) = oneshot::channel();
        let mut running =
            tokio::spawn(instance(name, slot, plan.clone(), world.clone(), members.clone(), rng.random(), paused));
        tokio::select! {
            biased;
            _ = &mut running => {}
            Ok(()) = &mut paused_rx => match plan.successor {
                true => zombies.push(running),
                false => {
                    let _ = running.await;
                }
            },
        }
    }
    for z in zombies {
        let _ = z.await;
    }
}
