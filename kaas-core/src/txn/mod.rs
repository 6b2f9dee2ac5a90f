//! Transactions (KIP-98, KIP-360, KIP-447, KIP-890 part 1): the per-transactional.id state
//! machine (`state`), its slot files (`store`) and the coordinator actor that drives both and
//! writes the markers (`coordinator`), here or by WriteTxnMarkers on the partition's owner.
//! The partition side: KIP-890 verification with the coordinator wherever it lives
//! (`verify`); LSO and aborted transactions live with the partition actor and its producer
//! state.

pub mod coordinator;
pub mod marker_queue;
pub mod markers;
pub mod peers;
pub mod state;
pub mod store;
