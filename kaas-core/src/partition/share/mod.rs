//! Share partitions (KIP-932): a share group's view of one partition, owned with the partition
//! by the same broker under the same ownership epoch, and kept by the partition actor beside the
//! log it reads (`partition::actor::share`), so that a paused former owner, whose lease has run
//! out, can neither acquire nor acknowledge. `state` is the in-flight window, pure; `file` is
//! how the volume keeps it. This file holds what the partition's handle says to the actor.

pub mod file;
pub mod state;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::error::{CoreError, CoreResult};
use state::{AckBatch, AcquireMode, AcquiredRange, DeadLetterRange, ShareSettings};

/// Why a record goes to its group's dead-letter queue (KIP-1191), in Apache's words (the
/// `__dlq.errors.message` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterCause {
    Rejected,
    DeliveryCountExceeded,
}

impl DeadLetterCause {
    pub fn message(self) -> &'static str {
        match self {
            DeadLetterCause::Rejected => "Offset rejected by client.",
            DeadLetterCause::DeliveryCountExceeded => "Offset delivery count exceeded the threshold.",
        }
    }
}

/// Records a share partition holds as Archiving, durable so, for the broker's dead-letter
/// writer (`broker::dead_letter`) to put on the group's dead-letter queue and then archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub topic: String,
    pub partition: i32,
    pub group_id: String,
    pub range: DeadLetterRange,
    pub cause: DeadLetterCause,
}

impl std::fmt::Display for DeadLetter {
    /// As the writer's log lines name it: the group and the source records.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.range;
        write!(
            f,
            "group {} {}-{} offsets {}..={}",
            self.group_id, self.topic, self.partition, r.first_offset, r.last_offset
        )
    }
}

/// Where partition actors send their dead letters: one writer per broker.
pub type DeadLetterSender = mpsc::UnboundedSender<DeadLetter>;

/// Where a share partition starts when its group first consumes it (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    /// The high watermark: only records produced from now on (Apache's default).
    Latest,
    /// The log start offset: every record the log still holds.
    Earliest,
}

/// A share group's settings as one of its share partitions follows them: the group's configs
/// over the broker's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupConfig {
    pub window: ShareSettings,
    /// `share.isolation.level=read_committed`: records of aborted transactions are never
    /// delivered, and nothing past the last stable offset is.
    pub read_committed: bool,
    pub auto_offset_reset: AutoOffsetReset,
}

/// What ShareFetch takes from one partition: the records read (whole batches) and which of
/// their offsets the member acquired, with their delivery counts.
#[derive(Debug, Clone, Default)]
pub struct ShareFetched {
    pub records: Bytes,
    pub acquired: Vec<AcquiredRange>,
}

/// A share partition's progress (DescribeShareGroupOffsets): its start offset, and the records
/// from it to the high watermark not yet acknowledged or archived (KIP-1226's lag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareOffsets {
    pub start_offset: i64,
    pub lag: i64,
}

/// A request to a partition actor about one of its share partitions.
pub enum ShareCommand {
    Acquire {
        group_id: String,
        member_id: String,
        config: ShareGroupConfig,
        max_records: usize,
        max_bytes: usize,
        mode: AcquireMode,
        reply: oneshot::Sender<CoreResult<ShareFetched>>,
    },
    Acknowledge {
        group_id: String,
        member_id: String,
        config: ShareGroupConfig,
        batches: Vec<AckBatch>,
        renew_allowed: bool,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    /// The member's session ended (its connection closed, or it said so): what it acquired here
    /// is let go.
    ReleaseMember { group_id: String, member_id: String },
    /// The guard to read before a TxnShareAcknowledge's transaction is verified.
    Guard { reply: oneshot::Sender<u64> },
    /// KIP-1289: acknowledgements staged in a producer's transaction.
    Stage {
        group_id: String,
        member_id: String,
        config: ShareGroupConfig,
        producer_id: i64,
        producer_epoch: i16,
        batches: Vec<AckBatch>,
        guard: u64,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    /// A transaction's marker for what it staged here.
    Complete {
        group_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        reply: oneshot::Sender<CoreResult<()>>,
    },
    /// KIP-1191: the dead-letter queue has these Archiving records (or will never): archive them.
    DeadLettered { group_id: String, first_offset: i64, last_offset: i64 },
    /// The share partition's progress, if the group ever consumed the partition.
    Offsets { group_id: String, reply: oneshot::Sender<CoreResult<Option<ShareOffsets>>> },
    /// AlterShareGroupOffsets (a new start, nothing in flight) or DeleteShareGroupOffsets
    /// (`start_offset` None: the share partition is forgotten).
    Reset {
        group_id: String,
        start_offset: Option<i64>,
        config: ShareGroupConfig,
        reply: oneshot::Sender<CoreResult<()>>,
    },
}

impl ShareCommand {
    /// Answers the command with `error`, without handling it.
    pub fn refuse(self, error: CoreError) {
        match self {
            ShareCommand::Acquire { reply, .. } => drop(reply.send(Err(error))),
            ShareCommand::Acknowledge { reply, .. }
            | ShareCommand::Stage { reply, .. }
            | ShareCommand::Complete { reply, .. }
            | ShareCommand::Reset { reply, .. } => drop(reply.send(Err(error))),
            ShareCommand::Offsets { reply, .. } => drop(reply.send(Err(error))),
            ShareCommand::Guard { reply } => drop(reply.send(0)),
            ShareCommand::ReleaseMember { .. } | ShareCommand::DeadLettered { .. } => {}
        }
    }
}
