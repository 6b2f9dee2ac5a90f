//! Transactions (KIP-98, KIP-360, KIP-447, KIP-890 part 1): the per-transactional.id state
//! machine (`state`), its slot files (`store`) and the coordinator actor that drives both and
//! writes the markers (`coordinator`). The partition side (LSO, aborted transactions,
//! verification) lives with the partition actor and its producer state.

pub mod coordinator;
pub mod state;
pub mod store;
