//! The broker: the env, the configuration and the handles of the actors that own its state.
//! Connections hold a clone and route each request to the owning actor.

use std::sync::Arc;

use crate::cluster::membership::{self, MembershipHandle};
use crate::cluster::producer_ids::{self, ProducerIdsHandle};
use crate::config::BrokerConfig;
use crate::env::Env;
use crate::error::CoreResult;
use crate::group::{self, GroupsHandle};
use crate::topics::{self, TopicsHandle};
use crate::txn::coordinator::{self, TxnCoordinatorHandle};
use crate::txn::marker_queue;
use crate::txn::peers::PeersHandle;
use tokio::sync::oneshot;

use crate::participant::Participant;
use crate::txn::markers;
use crate::txn::peers::Markers;

mod acls;
pub mod connections;
mod dead_letter;
pub mod gauges;
pub mod quotas;
pub mod scram;
mod share;
mod share_admin;
mod writes;
pub use share::{
    FINAL_EPOCH, ShareFetchAnswer, ShareFetchRequest, SharePartitionAnswer, SharePlan, ShareRequestPartition,
    ShareSessions, TxnShareAcknowledge, TxnShareAnswer,
};
pub use writes::{ProduceRequest, Produced, TxnOffsetCommit};

#[derive(Clone)]
pub struct Broker<E: Env> {
    pub env: E,
    pub config: Arc<BrokerConfig>,
    pub topics: TopicsHandle,
    pub groups: GroupsHandle,
    pub producer_ids: ProducerIdsHandle,
    pub txn: TxnCoordinatorHandle,
    pub membership: MembershipHandle,
    /// Calls to peer brokers, sent by the wire client a server attaches.
    pub peers: PeersHandle,
    /// What operators scrape (`metrics.rs`).
    pub metrics: Arc<crate::metrics::BrokerMetrics>,
    /// The client quotas' rates measured on this broker.
    rates: Arc<quotas::Rates>,
    /// What this broker proves itself to peers with, and checks peers by.
    pub broker_secret: Arc<crate::cluster::broker_auth::BrokerSecret>,
    /// Share sessions (KIP-932), per (group, member), each tied to the connection that opened it.
    share_sessions: share::ShareSessionsHandle,
    /// The connections open, by address, against the connection limits.
    pub open_connections: Arc<connections::Connections>,
    /// Connections accepted so far: each is numbered, for its share sessions.
    connections: Arc<std::sync::atomic::AtomicU64>,
    /// The marker watcher stops when the last clone of the broker is dropped.
    _marker_watcher: Arc<oneshot::Sender<()>>,
}

impl<E: Env> Broker<E> {
    /// Recovers every partition and the committed offsets from the volume and starts the actors.
    pub async fn start(env: E, config: BrokerConfig) -> CoreResult<Self> {
        let config = Arc::new(config);
        let broker_secret = Arc::new(crate::cluster::broker_auth::BrokerSecret::load_or_create(&env).await?);
        let metrics = Arc::new(crate::metrics::BrokerMetrics::default());
        let membership = membership::start(&env, config.clone(), metrics.lease.clone()).await?;
        let (dead_letters, letters) = tokio::sync::mpsc::unbounded_channel();
        let topics = topics::start(&env, config.clone(), membership.clone(), dead_letters, metrics.clone()).await?;
        let groups = group::start(
            &env,
            config.clone(),
            membership.clone(),
            metrics.ownership(crate::cluster::claims::Kind::Group.name()),
        )
        .await?;
        let producer_ids = producer_ids::start(&env, config.broker_id).await?;
        let peers = PeersHandle::default();
        let links = coordinator::Links {
            topics: topics.clone(),
            groups: groups.clone(),
            producer_ids: producer_ids.clone(),
            membership: membership.clone(),
            peers: peers.clone(),
            ownership_metrics: metrics.ownership(crate::cluster::claims::Kind::TxnSlot.name()),
        };
        let txn = coordinator::start(&env, config.clone(), links).await?;
        marker_queue::recover(&env, config.broker_id).await?;
        let stop = marker_queue::start(&env, config.broker_id, topics.clone(), groups.clone(), membership.subscribe());
        let _marker_watcher = Arc::new(stop);
        let writer = dead_letter::DeadLetterWriter {
            env: env.clone(),
            topics: topics.clone(),
            peers: peers.clone(),
            membership: membership.clone(),
        };
        dead_letter::start(writer, letters);
        Ok(Broker {
            env,
            config,
            topics,
            groups,
            producer_ids,
            txn,
            membership,
            peers,
            broker_secret,
            metrics,
            rates: Default::default(),
            share_sessions: Default::default(),
            connections: Default::default(),
            open_connections: Default::default(),
            _marker_watcher,
        })
    }

    /// A number for a new connection, unique while this broker runs.
    pub fn next_connection_id(&self) -> u64 {
        self.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether this broker holds a valid lease now: what it owns it may still answer for.
    pub fn owns_now(&self) -> bool {
        use crate::env::Clock;
        self.membership.view().lease_valid(self.env.clock().monotonic())
    }

    /// A peer coordinator's fence: every partition of this broker refuses the producer's
    /// epochs below `producer_epoch`.
    pub async fn fence_here(&self, producer_id: i64, producer_epoch: i16) {
        let epochs = std::collections::BTreeMap::from([(producer_id, producer_epoch)]);
        crate::txn::coordinator::fence_everywhere(&self.topics, Arc::new(epochs)).await;
    }

    /// Writes `markers` into the partitions and groups this broker owns (`write_markers_here`).
    pub async fn write_markers_here(&self, markers: &Markers) -> Vec<(Participant, CoreResult<()>)> {
        markers::write_markers_here(&self.topics, &self.groups, markers).await
    }

    /// Writes the markers a peer coordinator's call carries, by the marker queue's rule
    /// (`marker_queue::apply_called`): only those its queued entry still owes.
    pub async fn write_called_markers(&self, markers: Markers) -> Vec<(Participant, CoreResult<()>)> {
        marker_queue::apply_called(&self.env, self.config.broker_id, self.topics.clone(), self.groups.clone(), markers)
            .await
    }

    /// Graceful shutdown: flushes and closes every partition log, releasing each, then marks
    /// the lease as leaving, so peers take everything over at once.
    pub async fn shutdown(&self) {
        self.topics.shutdown().await;
        self.membership.leave().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::real::{RealEnv, RealRng};
    use crate::env::{Rng, Volume};

    #[tokio::test]
    async fn unreadable_topic_metadata_stops_the_start_and_a_damaged_group_is_reported() {
        let dir = std::env::temp_dir().join(format!("kaas-broker-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let broker = Broker::start(env.clone(), BrokerConfig::default()).await.unwrap();
        broker.shutdown().await;
        env.volume().write_atomic("__cluster/topics/t.json", bytes::Bytes::from_static(b"{\"torn")).await.unwrap();
        let started = Broker::start(env.clone(), BrokerConfig::default()).await;
        assert!(matches!(started, Err(crate::CoreError::Storage(m)) if m.contains("t.json")));
        env.volume().remove_file("__cluster/topics/t.json").await.unwrap();
        // A damaged group file takes only its group out (a cluster's other groups live on), and
        // says why; "67" is the hex of the group id "g".
        env.volume().write_atomic("__cluster/groups/67.json", bytes::Bytes::from_static(b"[]")).await.unwrap();
        let broker = Broker::start(env, BrokerConfig::default()).await.unwrap();
        let fetched = broker.groups.fetch("g".into(), None, false).await;
        assert!(matches!(fetched, Err(crate::CoreError::Storage(m)) if m.contains("67.json")));
        let committed = broker.groups.commit(crate::group::CommitRequest {
            group_id: "g".into(),
            member_id: String::new(),
            group_instance_id: None,
            generation_id: -1,
            offsets: Vec::new(),
        });
        assert!(matches!(committed.await, Err(crate::CoreError::Storage(m)) if m.contains("67.json")));
        broker.shutdown().await;
    }
}
