//! Transactions (KIP-98, KIP-360, KIP-447): the coordinator's per-transactional.id state
//! machine (`state`). The slot files, the coordinator actor and the partition side come next
//! (issue 5); this module is the pure core they will drive.

pub mod state;
