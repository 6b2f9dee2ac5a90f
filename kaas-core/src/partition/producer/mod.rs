//! The idempotent producer: producer ids handed out from persisted blocks (`ids`), and the
//! per-partition state that recognises retried batches (`state`, kept across restarts by
//! `snapshot`).

pub mod snapshot;
pub mod state;
