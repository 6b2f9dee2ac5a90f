//! The idempotent producer, a partition's side of it: the state that recognises retried
//! batches and follows transactions (`state`), kept across restarts by `snapshot`. Producer ids
//! themselves come from `cluster::producer_ids`.

pub mod snapshot;
pub mod state;
