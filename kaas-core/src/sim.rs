//! Simulation-only hooks, both `false` in a build without the `sim` feature, so production code
//! pays nothing:
//! - `mutant!(Name)` is a deliberate bug that the simulator must catch (`kaas-sim mutants`).
//! - `buggify!("site")` widens a race window (FoundationDB's BUGGIFY): a site is enabled or not
//!   per seed, the first time it is reached, and an enabled site fires on some of its visits.
//!
//! Both are switched on per thread: turmoil runs a whole simulation on the calling thread, so
//! one run sees exactly the mutant and the BUGGIFY seed it was given.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

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
}

impl Mutant {
    pub const ALL: [Mutant; 15] = [
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

/// Chance that a site is enabled for a seed, and that an enabled site fires on a visit.
const SITE_ENABLED: f64 = 0.25;
const SITE_FIRES: f64 = 0.05;

struct Buggify {
    rng: ChaCha8Rng,
    /// Each site's coin, tossed on its first visit. A BTreeMap: the order of visits, not of
    /// hashing, decides what the rng hands out.
    sites: BTreeMap<&'static str, bool>,
}

thread_local! {
    static BUGGIFY: RefCell<Option<Buggify>> = const { RefCell::new(None) };
}

/// Turns BUGGIFY on for simulations run on this thread, drawing from `seed`, or off (`None`).
pub fn set_buggify(seed: Option<u64>) {
    BUGGIFY.with(|b| {
        *b.borrow_mut() = seed.map(|s| Buggify { rng: ChaCha8Rng::seed_from_u64(s), sites: BTreeMap::new() })
    });
}

/// Whether `site` fires on this visit. Always false while BUGGIFY is off.
pub fn buggify(site: &'static str) -> bool {
    BUGGIFY.with(|b| {
        let mut b = b.borrow_mut();
        let Some(Buggify { rng, sites }) = b.as_mut() else { return false };
        let enabled = *sites.entry(site).or_insert_with(|| rng.random_bool(SITE_ENABLED));
        enabled && rng.random_bool(SITE_FIRES)
    })
}

/// The sites this run has enabled so far, for a failing seed's report.
pub fn buggify_enabled() -> Vec<&'static str> {
    BUGGIFY
        .with(|b| b.borrow().as_ref().map(|b| b.sites.iter().filter(|(_, on)| **on).map(|(s, _)| *s).collect()))
        .unwrap_or_default()
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
        point.requested
    })
}

/// True once after the armed crash point was reached: the simulator's cue to crash.
pub fn take_crash_request() -> bool {
    CRASH_POINT.with(|c| c.borrow_mut().as_mut().is_some_and(|p| std::mem::take(&mut p.requested)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visits(seed: u64) -> (Vec<bool>, Vec<&'static str>) {
        set_buggify(Some(seed));
        let fired = (0..2000).map(|i| buggify(if i % 2 == 0 { "a" } else { "b" })).collect();
        let enabled = buggify_enabled();
        set_buggify(None);
        (fired, enabled)
    }

    #[test]
    fn sites_are_chosen_per_seed_and_replay_exactly() {
        assert_eq!(visits(7), visits(7), "a seed replays its sites and its fires");
        let runs: Vec<_> = (0..40).map(visits).collect();
        assert!(runs.iter().any(|(_, on)| on.is_empty()), "some seeds leave every site off");
        assert!(runs.iter().any(|(_, on)| !on.is_empty()), "some seeds enable a site");
        for (fired, on) in &runs {
            let fires = fired.iter().filter(|f| **f).count();
            // An enabled site fires on about 5% of its 1000 visits; a disabled one never.
            assert!(fires <= on.len() * 100, "{fires} fires with sites {on:?}");
            assert_eq!(fires == 0, on.is_empty(), "{fires} fires with sites {on:?}");
        }
        assert!(!buggify("a"), "off once the run is over");
    }
}
