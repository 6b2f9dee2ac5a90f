//! Share partitions (KIP-932): a share group's view of one partition, owned with the partition
//! by the same broker under the same ownership epoch, kept by the partition actor beside the
//! log it reads. `state` is the in-flight window, pure; `file` is how the volume keeps it.

pub mod file;
pub mod state;
