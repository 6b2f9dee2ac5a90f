//! Transactions (KIP-98, KIP-360, KIP-447): the coordinator's per-transactional.id state
//! machine (`state`) and its slot files (`store`). The coordinator actor that drives them and
//! the partition side (markers, LSO, read_committed) come next (issue 5).

pub mod state;
pub mod store;
