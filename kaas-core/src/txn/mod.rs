//! Transactions (KIP-98, KIP-360, KIP-447, KIP-890): the per-transactional.id state machine
//! (`state`), its slot files (`store`) and the coordinator actor that drives both
//! (`coordinator`). A transaction's markers reach its participants (`participant`) by one path
//! on the broker that owns them (`markers`), sent there by the coordinator itself, by
//! WriteTxnMarkers from a peer coordinator (`peers`, which also carries KIP-890 verification
//! and fences), or through the marker queue on the volume (`marker_queue`). The participants'
//! own side (the LSO, aborted transactions, staged offsets) lives with their actors.

pub mod coordinator;
pub mod marker_queue;
pub mod markers;
pub mod peers;
pub mod state;
pub mod store;
