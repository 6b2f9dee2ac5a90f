//! Cluster mode: N brokers on one shared volume, no quorum (DESIGN.md, "Cluster mode").
//!
//! - `lease`: the lease file of one broker.
//! - `membership`: the actor that renews this broker's lease, reads the peers' and publishes the
//!   `ClusterView`: the live set, this broker's own lease validity, and ownership by rendezvous
//!   hash. One broker alone is a cluster of one: it owns everything.
//! - `claims`: ownership epochs, claimed by exclusive create once the old holder is gone;
//!   `ownership`: what one actor holds (claimed, held at an epoch in a lease session, released).
//! - `reassignment`: the rules of partition reassignments, which set a partition's preferred
//!   owners; `assignments`: where the replica lists they set are kept, by revision.
//! - `producer_ids`: blocks of producer ids claimed from the volume, never handed out twice.
//!
//! The names of owned things (`partition_key`, `group_key`, `txn_slot_key`) are here too.

pub mod acls;
pub mod assignments;
pub mod broker_auth;
pub mod claims;
pub mod group_configs;
pub mod lease;
pub mod membership;
pub mod ownership;
pub mod producer_ids;
pub mod quotas;
pub mod reassignment;
pub mod report;
pub mod scram;

pub use claims::{Claimed, Claims, Kind};
pub use membership::{ClusterView, Endpoint, LeaseSeen, MembershipHandle, Peer};

/// A topic's id (Kafka's topic UUID), which a topic keeps for life: a topic deleted and made
/// again under its name has another.
pub type TopicId = [u8; 16];

/// The ownership key of a partition, `<topic>-<partition>`, which is also the name of its
/// directory on the volume (`topics::partition_dir`).
pub fn partition_key(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// The ownership key of a transaction slot (`txn::state::slot`).
pub fn txn_slot_key(slot: u32) -> String {
    format!("txn-slot-{slot}")
}

/// The ownership key of a consumer group. Group ids are any string; the key is hashed only.
pub fn group_key(group_id: &str) -> String {
    format!("group-{group_id}")
}
