//! The catalogue of deliberate bugs and the violation each must be caught by. A mutant counts
//! as caught only by a run of one of its scenarios that reports one of its classes (a named
//! checker violation, or `assertion` for a broker assertion), on a world that passes with the
//! mutant off; a hang, a harness panic or any other class catches nothing.

use kaas_core::sim::Mutant;

pub struct MutantSpec {
    pub mutant: Mutant,
    /// The violation classes the bug plants.
    pub catches: &'static [&'static str],
    /// The scenarios whose worlds reach the bug, searched in this order.
    pub scenarios: &'static [&'static str],
}

pub const SPECS: &[MutantSpec] = &[
    MutantSpec { mutant: Mutant::CleanActiveSegment, catches: &["active-segment-cleaned"], scenarios: &["compaction"] },
    MutantSpec { mutant: Mutant::CleanCommittedAsAborted, catches: &["txn-record-lost"], scenarios: &["compaction"] },
    // Only a crash at the cleaner's crash point, between the removal and the rename, loses it.
    MutantSpec { mutant: Mutant::CleanRemovesBeforeSwap, catches: &["last-value-lost"], scenarios: &["compaction"] },
    MutantSpec { mutant: Mutant::CleanAboveLso, catches: &["cleaned-above-lso"], scenarios: &["compaction"] },
    MutantSpec { mutant: Mutant::CleanKeepsTombstones, catches: &["tombstone-kept"], scenarios: &["compaction"] },
    MutantSpec { mutant: Mutant::AckBeforeFsync, catches: &["lost-write"], scenarios: &["smoke", "idempotence"] },
    // Only smoke's padded values make batches span several disk blocks, so that a torn write
    // can keep a batch's header and lose part of its body.
    MutantSpec { mutant: Mutant::SkipCrcOnRecovery, catches: &["corrupt-read"], scenarios: &["smoke"] },
    MutantSpec {
        mutant: Mutant::HwmNotRestored,
        catches: &["nonmonotonic-hwm", "assertion"],
        scenarios: &["smoke", "groups"],
    },
    MutantSpec { mutant: Mutant::FetchPastHwm, catches: &["inconsistent-offsets"], scenarios: &["smoke", "groups"] },
    MutantSpec {
        mutant: Mutant::OffsetCommitInMemory,
        catches: &["commit-backwards"],
        scenarios: &["smoke", "groups"],
    },
    MutantSpec { mutant: Mutant::CommitIgnoresGeneration, catches: &["fenced-commit"], scenarios: &["groups"] },
    MutantSpec { mutant: Mutant::DedupeWindowOfOne, catches: &["duplicate"], scenarios: &["idempotence"] },
    MutantSpec { mutant: Mutant::SnapshotWithoutTailScan, catches: &["duplicate"], scenarios: &["idempotence"] },
    MutantSpec { mutant: Mutant::PidBlockPersistedAfterUse, catches: &["pid-reuse"], scenarios: &["idempotence"] },
    MutantSpec {
        mutant: Mutant::CompleteBeforeMarkersDurable,
        catches: &["lost-commit", "torn-transaction"],
        scenarios: &["txn-crash", "txn-timeout", "txn-zombie"],
    },
    MutantSpec { mutant: Mutant::SkipCrossPartitionFence, catches: &["aborted-read"], scenarios: &["txn-zombie"] },
    MutantSpec {
        mutant: Mutant::PendingOffsetsInMemory,
        catches: &["output-without-offset", "offset-without-output"],
        scenarios: &["txn-copier"],
    },
    MutantSpec {
        mutant: Mutant::LsoNotClamped,
        catches: &["uncommitted-read"],
        scenarios: &["txn-crash", "txn-zombie"],
    },
    MutantSpec {
        mutant: Mutant::ReaperWithoutEpochBump,
        // The woken producer commits the second half of a transaction whose first half the
        // reaper aborted: acked, but not all there.
        catches: &["lost-commit", "torn-transaction", "aborted-read"],
        scenarios: &["txn-timeout"],
    },
    MutantSpec {
        mutant: Mutant::NoPartitionVerification,
        catches: &["lso-stuck", "aborted-read"],
        scenarios: &["txn-zombie", "txn-timeout"],
    },
    MutantSpec {
        mutant: Mutant::AtomicReplaceSkipsDirSync,
        catches: &["pid-reuse", "commit-backwards"],
        scenarios: &["idempotence", "smoke"],
    },
    MutantSpec {
        mutant: Mutant::ServeAfterFailedFsync,
        catches: &["lost-write"],
        scenarios: &["smoke", "idempotence"],
    },
    MutantSpec {
        mutant: Mutant::RetentionPastOpenTransaction,
        catches: &["lso-past-open-transaction"],
        scenarios: &["txn-timeout", "txn-crash"],
    },
    MutantSpec { mutant: Mutant::RecreateKeepsStalePartitions, catches: &["stale-read"], scenarios: &["topic-churn"] },
    MutantSpec {
        mutant: Mutant::FetchIgnoresIsolation,
        catches: &["uncommitted-read"],
        scenarios: &["txn-crash", "txn-zombie"],
    },
    MutantSpec { mutant: Mutant::FencedAnsweredRetriable, catches: &["wrong-error"], scenarios: &["txn-zombie"] },
    MutantSpec {
        mutant: Mutant::AckWithoutLeaseCheck,
        catches: &["lost-write", "two-writers", "duplicate", "assertion"],
        scenarios: &["cluster-zombie"],
    },
    MutantSpec {
        mutant: Mutant::FenceNotSentToPeers,
        catches: &["aborted-read", "uncommitted-read"],
        scenarios: &["cluster-txn"],
    },
    MutantSpec {
        mutant: Mutant::TakeoverBeforeLeaseExpiry,
        catches: &["lost-write", "two-writers", "duplicate", "assertion"],
        scenarios: &["cluster-zombie"],
    },
    MutantSpec {
        mutant: Mutant::EpochNotBumpedOnReturn,
        catches: &["lost-write", "two-writers", "duplicate", "assertion"],
        // cluster-flap's broker takes its share back, unrestarted, after its last cut.
        scenarios: &["cluster-flap", "cluster-failover"],
    },
    MutantSpec {
        mutant: Mutant::MarkerQueueDeletedEarly,
        catches: &[
            "aborted-read",
            "uncommitted-read",
            "lost-commit",
            "torn-transaction",
            "lso-stuck",
            "prepare-never-completes",
        ],
        scenarios: &["cluster-txn", "cluster-copier"],
    },
    MutantSpec { mutant: Mutant::SettleZero, catches: &["thrash"], scenarios: &["cluster-flap"] },
    MutantSpec {
        mutant: Mutant::EndTxnWithoutEpochBump,
        // The held write joins the next transaction and is committed with it.
        catches: &["aborted-read"],
        scenarios: &["txn-late-write"],
    },
    MutantSpec {
        mutant: Mutant::ConsumerAssignsUnreleased,
        // The coordinator's own invariant (one owner at a time) fires first, or a member is
        // given a partition another still holds.
        catches: &["assertion", "split-assignment"],
        scenarios: &["groups"],
    },
    MutantSpec {
        mutant: Mutant::UpgradeForgetsOwned,
        // Only the worlds whose group migrates reach it: the newcomer is given a classic
        // member's partition, which the classic member then commits or heartbeats on.
        catches: &["split-assignment", "fenced-commit"],
        scenarios: &["groups"],
    },
    MutantSpec {
        mutant: Mutant::ReassignmentIgnored,
        // Every partition stays where the rendezvous hash puts it: one reassigned elsewhere
        // never gets there.
        catches: &["misplaced"],
        scenarios: &["cluster-reassign"],
    },
    MutantSpec {
        mutant: Mutant::ShareAckBeforeDurable,
        // An accept answered, then the broker crashes before the state is written: the record
        // comes back, its delivery count as it was.
        catches: &["redelivered-after-accept", "double-acquisition", "delivery-count-backwards"],
        scenarios: &["share"],
    },
    MutantSpec { mutant: Mutant::ShareLockIgnored, catches: &["lost-record"], scenarios: &["share"] },
    MutantSpec { mutant: Mutant::ShareAcquireUnfenced, catches: &["acquired-after-fence"], scenarios: &["share"] },
    MutantSpec {
        mutant: Mutant::ShareZombieOwnerAcks,
        catches: &["redelivered-after-accept", "double-acquisition", "delivery-count-backwards"],
        scenarios: &["share"],
    },
    MutantSpec {
        mutant: Mutant::ShareMarkersIgnored,
        catches: &["not-acknowledged"],
        scenarios: &["kip1289-abort", "kip1289-crash-after-commit"],
    },
    MutantSpec {
        mutant: Mutant::SharePendingLockExpires,
        // A record let go while its transaction is open (its commit slowed by the coordinator's
        // crash) is copied again by another member.
        catches: &["copy-duplicated", "redelivered-after-accept", "double-acquisition"],
        scenarios: &["kip1289-crash-after-commit", "kip1289-zombie"],
    },
    MutantSpec {
        mutant: Mutant::ShareDeadLetterSkipped,
        // A rejected record archived without a word to the group's dead-letter queue.
        catches: &["dead-letter-missing"],
        scenarios: &["share"],
    },
    MutantSpec {
        mutant: Mutant::ShareStageEpochUnchecked,
        // A zombie copier joins again under its member id and stages what it then acquired
        // under the epoch it was fenced at.
        catches: &["ack-after-fence"],
        scenarios: &["kip1289-zombie"],
    },
    MutantSpec {
        mutant: Mutant::AclRescanSkipped,
        // A DENY made through one broker is never in force on another that owns a partition.
        catches: &["acl-not-enforced"],
        scenarios: &["acl-propagation"],
    },
    MutantSpec {
        mutant: Mutant::QuotaRescanSkipped,
        // A quota set through one broker is never described (nor enforced) by another.
        catches: &["quota-not-propagated"],
        scenarios: &["quota-propagation"],
    },
];

pub fn spec(mutant: Mutant) -> &'static MutantSpec {
    SPECS.iter().find(|s| s.mutant == mutant).expect("every mutant has a spec")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mutant_has_one_spec_with_known_scenarios() {
        for mutant in Mutant::ALL {
            assert_eq!(SPECS.iter().filter(|s| s.mutant == mutant).count(), 1, "{}", mutant.name());
        }
        for s in SPECS {
            assert!(!s.catches.is_empty() && !s.scenarios.is_empty(), "{}", s.mutant.name());
            for name in s.scenarios {
                assert!(crate::scenarios::find(name).is_some(), "{}: no scenario {name}", s.mutant.name());
            }
            assert!(
                !s.catches.iter().any(|c| ["hang", "harness-panic", "liveness"].contains(c)),
                "{}",
                s.mutant.name()
            );
        }
    }
}
