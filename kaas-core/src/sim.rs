//! Simulation-only hooks, both `false` in a build without the `sim` feature, so production code
//! pays nothing:
//! - `mutant!(Name)` is a deliberate bug that the simulator must catch (`kaas-sim mutants`).
//! - `buggify!("site")` widens a race window (FoundationDB's BUGGIFY): a world enables some of
//!   the sites in `BUGGIFY_SITES` (the simulator draws which, and a seed file records them), and
//!   an enabled site fires on some of its visits.
//! - `crash_point!("site")` parks the caller on an armed visit so the simulator can crash the
//!   host exactly there.
//!
//! Both are switched on per thread: turmoil runs a whole simulation on the calling thread, so
//! one run sees exactly the mutant and the BUGGIFY seed it was given.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mutant {
    /// Acks appends before the fsync that makes them durable.
    AckBeforeFsync,
    /// Recovery trusts batch lengths and skips the CRC check of the active segment.
    SkipCrcOnRecovery,
    /// A reopened log starts with its high watermark at the log start offset.
    HwmNotRestored,
    /// Fetch serves appended bytes past the high watermark, before they are durable.
    FetchPastHwm,
    /// Offset commits are acked from memory and never written to the volume.
    OffsetCommitInMemory,
    /// The group coordinator takes offset commits from any member of any generation.
    CommitIgnoresGeneration,
    /// The idempotence window remembers one batch per producer instead of five.
    DedupeWindowOfOne,
    /// Producer state is restored from the last snapshot without scanning the log after it.
    SnapshotWithoutTailScan,
    /// A producer id block is persisted once it is used up instead of before its first id.
    PidBlockPersistedAfterUse,
    /// EndTxn completes (and releases staged offsets) before its markers are durable.
    CompleteBeforeMarkersDurable,
    /// A rejoin's epoch bump is not applied to the partitions that know the producer.
    SkipCrossPartitionFence,
    /// Staged transactional offsets are kept in memory only.
    PendingOffsetsInMemory,
    /// The last stable offset is the high watermark, open transactions or not.
    LsoNotClamped,
    /// The reaper aborts a timed-out transaction without bumping the producer's epoch.
    ReaperWithoutEpochBump,
    /// Transactional batches are appended without the coordinator's verification.
    NoPartitionVerification,
    /// The atomic replace renames its temporary file over the target and returns without
    /// syncing the directory: a crash can take the rename back.
    AtomicReplaceSkipsDirSync,
    /// After a failed fsync of a log file the partition syncs again and, when that succeeds,
    /// acks and serves what the failed sync covered (the PostgreSQL "fsyncgate" mistake).
    ServeAfterFailedFsync,
    /// Retention deletes segments past the last stable offset, the first offset of an open
    /// transaction among them.
    RetentionPastOpenTransaction,
    /// Creating a topic keeps partition directories a crashed deletion of the same name left.
    RecreateKeepsStalePartitions,
    /// Fetch serves read_committed consumers as read_uncommitted ones.
    FetchIgnoresIsolation,
    /// A fenced producer is answered CONCURRENT_TRANSACTIONS (retriable) instead of
    /// PRODUCER_FENCED (fatal), so it retries instead of stopping.
    FencedAnsweredRetriable,
    /// A partition owner writes and acks without checking that its lease still holds (before
    /// the write and after the fsync): a paused owner that wakes up past its lease goes on.
    AckWithoutLeaseCheck,
    /// A coordinator fences a producer on its own broker's partitions only: the peers'
    /// partitions take the fenced epoch's late batches.
    FenceNotSentToPeers,
    /// A broker claims a thing its view gives it without waiting for the holder to release it
    /// or for the holder's lease to run out.
    TakeoverBeforeLeaseExpiry,
    /// A broker that gets a thing back (A to B to A) takes up the epoch it held before instead
    /// of claiming a new one: no claim file records it, so the next claimer does not wait.
    EpochNotBumpedOnReturn,
    /// The coordinator takes its marker queue entry back as soon as the call is sent, before
    /// the markers are durable: when the call is lost, nothing brings them to the owner, and
    /// the transaction completes all the same.
    MarkerQueueDeletedEarly,
    /// The settle period is zero whatever it is set to: a broker back from a lapse of its
    /// lease gets its share at once, so one that keeps being cut off from the volume takes
    /// ownership back every time, and loses it again, a lease without an owner, at each cut.
    SettleZero,
    /// A v2 EndTxn (v5) ends the transaction under the same epoch: its markers fence nothing,
    /// so a late write of the ended transaction joins the next one (KIP-890's case).
    EndTxnWithoutEpochBump,
    /// A consumer-protocol member is given its target's partitions at once, whether or not
    /// another member still holds them.
    ConsumerAssignsUnreleased,
    /// The online upgrade of a classic group takes its members as owning nothing, so the
    /// consumer-protocol member that joins is given partitions they still hold.
    UpgradeForgetsOwned,
    /// Ownership ignores the replica lists that AlterPartitionReassignments set: every
    /// partition stays where the rendezvous hash puts it.
    ReassignmentIgnored,
    /// A share partition answers acknowledgements (and acquisitions) before its state is
    /// written: a crash takes back what was answered.
    ShareAckBeforeDurable,
    /// Acquisition locks never run out: what a member that went quiet holds is never given
    /// to another.
    ShareLockIgnored,
    /// A share fetch acquires for whoever asks, a member the group removed included.
    ShareAcquireUnfenced,
    /// A share partition's owner answers from its window without checking that its lease still
    /// holds: a paused former owner accepts acknowledgements its successor never sees.
    ShareZombieOwnerAcks,
    /// A transaction's markers reach a share partition and change nothing there: what it
    /// staged waits for an end that has already come (KIP-1289).
    ShareMarkersIgnored,
    /// Staged acknowledgements keep their acquisition lock: a lock that runs out while the
    /// transaction is open gives its records to another member (KIP-1289).
    SharePendingLockExpires,
    /// A record rejected or run out is archived at once, its group's dead-letter queue
    /// notwithstanding (KIP-1191).
    ShareDeadLetterSkipped,
    /// TxnShareAcknowledge checks that its member is one, not at which epoch: a member fenced
    /// and joined again stages records under the epoch it was fenced at (KIP-1289).
    ShareStageEpochUnchecked,
    /// A broker's rescan leaves out the ACLs: a binding made or taken back on a peer never
    /// reaches it.
    AclRescanSkipped,
    /// A broker's rescan leaves out the client quotas: a quota set or removed on a peer never
    /// reaches it.
    QuotaRescanSkipped,
    /// The log cleaner cleans the active segment too: older values of a key still in it go.
    CleanActiveSegment,
    /// The log cleaner takes a committed transaction's records for an aborted one's.
    CleanCommittedAsAborted,
    /// The log cleaner removes a segment before renaming its cleaned copy in: a crash between
    /// the two loses the segment.
    CleanRemovesBeforeSwap,
    /// The log cleaner reads past the last stable offset: an open transaction's records count
    /// as newer values, and if it aborts, the value they hid is gone.
    CleanAboveLso,
    /// The log cleaner never drops a tombstone, whatever its delete retention.
    CleanKeepsTombstones,
}

impl Mutant {
    pub const ALL: [Mutant; 46] = [
        Mutant::AckBeforeFsync,
        Mutant::SkipCrcOnRecovery,
        Mutant::HwmNotRestored,
        Mutant::FetchPastHwm,
        Mutant::OffsetCommitInMemory,
        Mutant::CommitIgnoresGeneration,
        Mutant::DedupeWindowOfOne,
        Mutant::SnapshotWithoutTailScan,
        Mutant::PidBlockPersistedAfterUse,
        Mutant::CompleteBeforeMarkersDurable,
        Mutant::SkipCrossPartitionFence,
        Mutant::PendingOffsetsInMemory,
        Mutant::LsoNotClamped,
        Mutant::ReaperWithoutEpochBump,
        Mutant::NoPartitionVerification,
        Mutant::AtomicReplaceSkipsDirSync,
        Mutant::ServeAfterFailedFsync,
        Mutant::RetentionPastOpenTransaction,
        Mutant::RecreateKeepsStalePartitions,
        Mutant::FetchIgnoresIsolation,
        Mutant::FencedAnsweredRetriable,
        Mutant::AckWithoutLeaseCheck,
        Mutant::FenceNotSentToPeers,
        Mutant::TakeoverBeforeLeaseExpiry,
        Mutant::EpochNotBumpedOnReturn,
        Mutant::MarkerQueueDeletedEarly,
        Mutant::SettleZero,
        Mutant::EndTxnWithoutEpochBump,
        Mutant::ConsumerAssignsUnreleased,
        Mutant::UpgradeForgetsOwned,
        Mutant::ReassignmentIgnored,
        Mutant::ShareAckBeforeDurable,
        Mutant::ShareLockIgnored,
        Mutant::ShareAcquireUnfenced,
        Mutant::ShareZombieOwnerAcks,
        Mutant::ShareMarkersIgnored,
        Mutant::SharePendingLockExpires,
        Mutant::ShareDeadLetterSkipped,
        Mutant::ShareStageEpochUnchecked,
        Mutant::AclRescanSkipped,
        Mutant::QuotaRescanSkipped,
        Mutant::CleanActiveSegment,
        Mutant::CleanCommittedAsAborted,
        Mutant::CleanRemovesBeforeSwap,
        Mutant::CleanAboveLso,
        Mutant::CleanKeepsTombstones,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutant::AckBeforeFsync => "ack-before-fsync",
            Mutant::SkipCrcOnRecovery => "skip-crc-on-recovery",
            Mutant::HwmNotRestored => "hwm-not-restored",
            Mutant::FetchPastHwm => "fetch-past-hwm",
            Mutant::OffsetCommitInMemory => "offset-commit-in-memory",
            Mutant::CommitIgnoresGeneration => "commit-ignores-generation",
            Mutant::DedupeWindowOfOne => "dedupe-window-of-one",
            Mutant::SnapshotWithoutTailScan => "snapshot-without-tail-scan",
            Mutant::PidBlockPersistedAfterUse => "pid-block-persisted-after-use",
            Mutant::CompleteBeforeMarkersDurable => "complete-before-markers-durable",
            Mutant::SkipCrossPartitionFence => "skip-cross-partition-fence",
            Mutant::PendingOffsetsInMemory => "pending-offsets-in-memory",
            Mutant::LsoNotClamped => "lso-not-clamped",
            Mutant::ReaperWithoutEpochBump => "reaper-without-epoch-bump",
            Mutant::NoPartitionVerification => "no-partition-verification",
            Mutant::AtomicReplaceSkipsDirSync => "atomic-replace-skips-dir-sync",
            Mutant::ServeAfterFailedFsync => "serve-after-failed-fsync",
            Mutant::RetentionPastOpenTransaction => "retention-past-open-transaction",
            Mutant::RecreateKeepsStalePartitions => "recreate-keeps-stale-partitions",
            Mutant::FetchIgnoresIsolation => "fetch-ignores-isolation",
            Mutant::FencedAnsweredRetriable => "fenced-answered-retriable",
            Mutant::AckWithoutLeaseCheck => "ack-without-lease-check",
            Mutant::FenceNotSentToPeers => "fence-not-sent-to-peers",
            Mutant::TakeoverBeforeLeaseExpiry => "takeover-before-lease-expiry",
            Mutant::EpochNotBumpedOnReturn => "epoch-not-bumped-on-return",
            Mutant::MarkerQueueDeletedEarly => "marker-queue-deleted-early",
            Mutant::SettleZero => "settle-zero",
            Mutant::EndTxnWithoutEpochBump => "end-txn-without-epoch-bump",
            Mutant::ConsumerAssignsUnreleased => "consumer-assigns-unreleased",
            Mutant::UpgradeForgetsOwned => "upgrade-forgets-owned",
            Mutant::ReassignmentIgnored => "reassignment-ignored",
            Mutant::ShareAckBeforeDurable => "share-ack-before-durable",
            Mutant::ShareLockIgnored => "share-lock-ignored",
            Mutant::ShareAcquireUnfenced => "share-acquire-unfenced",
            Mutant::ShareZombieOwnerAcks => "share-zombie-owner-acks",
            Mutant::ShareMarkersIgnored => "share-markers-ignored",
            Mutant::SharePendingLockExpires => "share-pending-lock-expires",
            Mutant::ShareDeadLetterSkipped => "share-dead-letter-skipped",
            Mutant::ShareStageEpochUnchecked => "share-stage-epoch-unchecked",
            Mutant::AclRescanSkipped => "acl-rescan-skipped",
            Mutant::QuotaRescanSkipped => "quota-rescan-skipped",
            Mutant::CleanActiveSegment => "clean-active-segment",
            Mutant::CleanCommittedAsAborted => "clean-committed-as-aborted",
            Mutant::CleanRemovesBeforeSwap => "clean-removes-before-swap",
            Mutant::CleanAboveLso => "clean-above-lso",
            Mutant::CleanKeepsTombstones => "clean-keeps-tombstones",
        }
    }

    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

thread_local! {
    static ACTIVE: Cell<Option<Mutant>> = const { Cell::new(None) };
}

/// Switches `mutant` on (or every mutant off) for simulations run on this thread.
pub fn set_mutant(mutant: Option<Mutant>) {
    ACTIVE.with(|a| a.set(mutant));
}

/// The mutant switched on for this thread, if any.
pub fn current() -> Option<Mutant> {
    ACTIVE.with(|a| a.get())
}

pub fn active(mutant: Mutant) -> bool {
    ACTIVE.with(|a| a.get() == Some(mutant))
}

/// Every BUGGIFY site in the broker. A world file names the sites its seed enabled, so a site
/// must be listed here to be drawn, and a site that fires must be listed (checked).
pub const BUGGIFY_SITES: [&str; 8] = [
    "dead_letter.queue_down",
    "groups.slow_commit",
    "log.early_roll",
    "partition.not_leader",
    "partition.short_read",
    "partition.slow_sync",
    "txn.dispatch_fails",
    "txn.slow_dispatch",
];

/// Chance that an enabled site fires on a visit.
const SITE_FIRES: f64 = 0.05;

/// A site's chance to fire: `SITE_FIRES`, or more for a site visited once in a long while.
fn fire_chance(site: &str) -> f64 {
    match site {
        // Visited once a dead letter, a few times a world.
        "dead_letter.queue_down" => 0.5,
        _ => SITE_FIRES,
    }
}

/// What a world chose for BUGGIFY: the sites it enabled and the seed of their fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuggifyPlan {
    pub seed: u64,
    pub sites: BTreeSet<&'static str>,
}

impl BuggifyPlan {
    /// The listed site named `name`, for a world read back from a file.
    pub fn site(name: &str) -> Option<&'static str> {
        BUGGIFY_SITES.into_iter().find(|s| *s == name)
    }
}

struct Buggify {
    rng: ChaCha8Rng,
    sites: BTreeSet<&'static str>,
}

thread_local! {
    static BUGGIFY: RefCell<Option<Buggify>> = const { RefCell::new(None) };
}

/// Turns BUGGIFY on for simulations run on this thread with `plan`'s sites, or off (`None`).
pub fn set_buggify(plan: Option<&BuggifyPlan>) {
    BUGGIFY.with(|b| {
        *b.borrow_mut() = plan.map(|p| Buggify { rng: ChaCha8Rng::seed_from_u64(p.seed), sites: p.sites.clone() })
    });
}

/// Whether `site` fires on this visit. Always false while BUGGIFY is off and for sites the
/// world did not enable.
pub fn buggify(site: &'static str) -> bool {
    debug_assert!(BUGGIFY_SITES.contains(&site), "BUGGIFY site {site} is not in BUGGIFY_SITES");
    BUGGIFY.with(|b| {
        let mut b = b.borrow_mut();
        let Some(Buggify { rng, sites }) = b.as_mut() else { return false };
        let fires = sites.contains(site) && rng.random_bool(fire_chance(site));
        if fires {
            reach(format!("buggify {site}"));
        }
        fires
    })
}

/// A crash point: the simulator crashes the broker when the `visit`th visit of `site` happens
/// (`crash_point!`), so that every step of a protocol (say, of EndTxn) gets its crash.
struct CrashPoint {
    site: &'static str,
    visits_left: u32,
    requested: bool,
}

thread_local! {
    static CRASH_POINT: RefCell<Option<CrashPoint>> = const { RefCell::new(None) };
}

/// Arms one crash point for simulations on this thread: `(site, visit)`, or none.
pub fn set_crash_point(point: Option<(&'static str, u32)>) {
    CRASH_POINT.with(|c| {
        *c.borrow_mut() = point.map(|(site, visit)| CrashPoint { site, visits_left: visit.max(1), requested: false })
    });
}

/// Whether this visit of `site` is the armed crash point: then the caller parks and the
/// simulator crashes its host at the end of the step.
pub fn crash_point(site: &'static str) -> bool {
    CRASH_POINT.with(|c| {
        let mut c = c.borrow_mut();
        let Some(point) = c.as_mut().filter(|p| p.site == site && p.visits_left > 0) else { return false };
        point.visits_left -= 1;
        point.requested = point.visits_left == 0;
        if point.requested {
            tracing::info!(site, "the armed crash point is reached");
            reach(format!("crash-point {site}"));
        }
        point.requested
    })
}

/// True once after the armed crash point was reached: the simulator's cue to crash.
pub fn take_crash_request() -> bool {
    CRASH_POINT.with(|c| c.borrow_mut().as_mut().is_some_and(|p| std::mem::take(&mut p.requested)))
}

thread_local! {
    static REACHED: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts a visit of a cell of the corner-case matrix (`kaas-sim coverage`): a crash point
/// reached, a BUGGIFY site fired, a fault applied, a corner case taken. Observes, decides
/// nothing.
pub fn reach(cell: impl Into<String>) {
    REACHED.with(|r| *r.borrow_mut().entry(cell.into()).or_default() += 1);
}

/// How often `cell` was reached since the last `take_reached`.
pub fn reached(cell: &str) -> u64 {
    REACHED.with(|r| r.borrow().get(cell).copied().unwrap_or(0))
}

/// The cells reached since the last call, and their visits; the count starts again.
pub fn take_reached() -> BTreeMap<String, u64> {
    REACHED.with(|r| std::mem::take(&mut *r.borrow_mut()))
}
