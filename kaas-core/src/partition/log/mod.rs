//! The partition log: segments of Kafka v2 record batches on the volume, recovered by CRC after
//! a crash. The log knows offsets, positions and durability; it knows nothing of producers,
//! requests or the wire.

pub mod batch;
pub mod compact;
pub mod control;
mod partition_log;
pub mod records;
pub mod segment;
pub mod validate;

pub use partition_log::{
    DurableEnd, LogConfig, LogError, PartitionLog, ReadResult, SegmentChunk, StagedCopy, cut_to_durable,
};

use crate::error::CoreError;
use batch::BatchError;

// How the log's errors are answered: here, so that `error` depends on nothing above it.
impl From<BatchError> for CoreError {
    fn from(e: BatchError) -> Self {
        match e {
            BatchError::Corrupt => CoreError::CorruptMessage,
            BatchError::UnsupportedMagic => CoreError::UnsupportedForMessageFormat,
            BatchError::InvalidRecord => CoreError::InvalidRecord,
        }
    }
}

impl From<LogError> for CoreError {
    fn from(e: LogError) -> Self {
        match e {
            LogError::OffsetOutOfRange => CoreError::OffsetOutOfRange,
            LogError::Fenced(_) => CoreError::NotLeaderOrFollower,
            other => CoreError::Storage(other.to_string()),
        }
    }
}
