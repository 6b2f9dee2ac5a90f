//! Simulation-only hooks. `mutant!(Name)` is a deliberate bug that the simulator must catch
//! (`kaas-sim mutants`); it is `false` in a build without the `sim` feature, so production code
//! pays nothing. A mutant is switched on per thread: turmoil runs a whole simulation on the
//! calling thread, so one run sees exactly the mutant it was given.

use std::cell::Cell;

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
}

impl Mutant {
    pub const ALL: [Mutant; 5] = [
        Mutant::AckBeforeFsync,
        Mutant::SkipCrcOnRecovery,
        Mutant::HwmNotRestored,
        Mutant::FetchPastHwm,
        Mutant::OffsetCommitInMemory,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutant::AckBeforeFsync => "ack-before-fsync",
            Mutant::SkipCrcOnRecovery => "skip-crc-on-recovery",
            Mutant::HwmNotRestored => "hwm-not-restored",
            Mutant::FetchPastHwm => "fetch-past-hwm",
            Mutant::OffsetCommitInMemory => "offset-commit-in-memory",
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
