//! The partition log: segments of Kafka v2 record batches on the volume, recovered by CRC after
//! a crash. The log knows offsets, positions and durability; it knows nothing of producers,
//! requests or the wire.

pub mod batch;
pub mod control;
mod partition_log;
pub mod records;
pub mod segment;

pub use partition_log::{DurableEnd, LogConfig, LogError, PartitionLog, ReadResult, cut_to_durable};
