//! `Client`: what a workload or application talks to, a Kafka client over a set of brokers. Like
//! librdkafka or the Java client it learns partition leaders from Metadata and coordinators
//! from FindCoordinator (asking its bootstrap brokers in order), keeps one connection per
//! broker, and forgets what it learnt when a broker answers NOT_LEADER_OR_FOLLOWER,
//! NOT_COORDINATOR and the like, or a connection breaks, so the caller's retry is routed
//! afresh. Every request it sends is recorded in the run's history.
//!
//! Outcomes are the wire client's; a request it could not send at all (no broker reachable,
//! no leader known) is `Failed(NOT_SENT)`: nothing happened, and the caller may retry.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::{
    Connector, Fetched, Joined, Member, NOT_SENT, Outcome, ProducerStamp, Recorder, TopicRoutes,
    UNKNOWN_TOPIC_OR_PARTITION, WireClient, outcome_name,
};

/// Codes that say the partition's leader is elsewhere or unknown: look it up again.
const LEADER_MOVED: [i16; 4] = [
    UNKNOWN_TOPIC_OR_PARTITION,
    5,  /* LEADER_NOT_AVAILABLE */
    6,  /* NOT_LEADER_OR_FOLLOWER */
    74, /* FENCED_LEADER_EPOCH */
];
/// Codes that say the coordinator is elsewhere or not ready: look it up again.
const COORDINATOR_MOVED: [i16; 3] = [
    14, /* COORDINATOR_LOAD_IN_PROGRESS */
    15, /* COORDINATOR_NOT_AVAILABLE */
    16, /* NOT_COORDINATOR */
];
const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;
/// How long a connection attempt may take before the broker counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a request must go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    /// Any broker (the first bootstrap broker that answers).
    Any,
    /// One named broker.
    Broker(String),
    /// The leader of a partition.
    Leader(String, i32),
    /// The coordinator of a group (key type 0) or a transactional id (1).
    Coordinator(i8, String),
}

/// Sends `$call` (an expression over the connection `$c`) to broker `$host`, as `$api`, for
/// `$route`.
macro_rules! on_host {
    ($self:ident, $host:expr, $route:expr, $api:literal, |$c:ident| $call:expr) => {{
        let host: String = $host;
        let outcome = match $self.connection(&host).await {
            Some($c) => $call.await,
            None => Outcome::Failed(NOT_SENT),
        };
        $self.after(&host, $route, $api, outcome)
    }};
}

/// Sends `$call` (an expression over the connection `$c`) along `$route`, as `$api`.
macro_rules! routed {
    ($self:ident, $route:expr, $api:literal, |$c:ident| $call:expr) => {{
        let route = $route;
        match $self.resolve(&route).await {
            None => $self.unsent(&route, $api),
            Some(host) => on_host!($self, host, &route, $api, |$c| $call),
        }
    }};
}

pub struct Client {
    name: String,
    bootstrap: Vec<String>,
    connector: Arc<dyn Connector>,
    recorder: Arc<dyn Recorder>,
    connections: BTreeMap<String, WireClient>,
    leaders: BTreeMap<(String, i32), String>,
    coordinators: BTreeMap<(i8, String), String>,
    /// Topic ids learnt from Metadata, both ways.
    topic_ids: BTreeMap<String, [u8; 16]>,
    topic_names: BTreeMap<[u8; 16], String>,
    partition_counts: BTreeMap<String, i32>,
    /// How many connections this client opened to each broker: a share session lives on one
    /// connection, so a caller that sees this change starts its session again.
    serials: BTreeMap<String, u64>,
    /// The broker whose connection carries the pipelined produce requests in flight.
    pipeline: Option<String>,
    /// Brokers a connection attempt failed to, with when to try again and the backoff after
    /// that (`reconnect.backoff.ms`, doubled up to `reconnect.backoff.max.ms`, as Kafka
    /// clients do): a broker still starting is not hammered, nor the client host's ports used up.
    reconnect: BTreeMap<String, (tokio::time::Instant, Duration)>,
}

const RECONNECT_BACKOFF: Duration = Duration::from_millis(50);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_millis(1000);

impl Client {
    /// A client named `name` (its client.id, and its name in the records) with `bootstrap`
    /// broker addresses.
    pub fn new(
        name: impl Into<String>,
        bootstrap: &[String],
        connector: Arc<dyn Connector>,
        recorder: Arc<dyn Recorder>,
    ) -> Client {
        assert!(!bootstrap.is_empty(), "a client needs a bootstrap broker");
        Client {
            name: name.into(),
            bootstrap: bootstrap.to_vec(),
            connector,
            recorder,
            connections: BTreeMap::new(),
            leaders: BTreeMap::new(),
            coordinators: BTreeMap::new(),
            topic_ids: BTreeMap::new(),
            topic_names: BTreeMap::new(),
            partition_counts: BTreeMap::new(),
            serials: BTreeMap::new(),
            pipeline: None,
            reconnect: BTreeMap::new(),
        }
    }

    /// The coordinator of `key` (key type 0 a group, 1 a transactional id) as last found,
    /// without asking.
    pub fn known_coordinator(&self, key_type: i8, key: &str) -> Option<&str> {
        self.coordinators.get(&(key_type, key.to_string())).map(String::as_str)
    }

    /// The leader of a partition as last learnt, without asking.
    pub fn known_leader(&self, topic: &str, partition: i32) -> Option<&str> {
        self.leaders.get(&(topic.to_string(), partition)).map(String::as_str)
    }

    /// The connector's wall clock (`Connector::now_ms`).
    pub fn now_ms(&self) -> i64 {
        self.connector.now_ms()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn recorder(&self) -> &dyn Recorder {
        &*self.recorder
    }

    /// Records what the caller meant or saw, under this client's name.
    pub fn record(&self, op: &str, outcome: &str, detail: serde_json::Value) {
        self.recorder.record(&self.name, op, outcome, detail);
    }

    /// The connection to `host`, opened if there is none (or the last one broke).
    async fn connection(&mut self, host: &str) -> Option<&mut WireClient> {
        if self.connections.get(host).is_some_and(WireClient::is_broken) {
            self.connections.remove(host);
        }
        if !self.connections.contains_key(host) {
            let now = tokio::time::Instant::now();
            if self.reconnect.get(host).is_some_and(|(at, _)| now < *at) {
                return None;
            }
            let connecting = self.connector.connect(host);
            match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
                Ok(Ok(stream)) => {
                    self.reconnect.remove(host);
                    self.connections.insert(host.to_string(), WireClient::new(stream, &self.name));
                    *self.serials.entry(host.to_string()).or_default() += 1;
                }
                _ => {
                    let backoff = self.reconnect.get(host).map_or(RECONNECT_BACKOFF, |(_, b)| *b);
                    let now = tokio::time::Instant::now();
                    self.reconnect.insert(host.to_string(), (now + backoff, (backoff * 2).min(RECONNECT_BACKOFF_MAX)));
                    return None;
                }
            }
        }
        self.connections.get_mut(host)
    }

    /// Forgets every route through `host` and its connection.
    fn forget_host(&mut self, host: &str) {
        self.connections.remove(host);
        self.leaders.retain(|_, h| h != host);
        self.coordinators.retain(|_, h| h != host);
        if self.pipeline.as_deref() == Some(host) {
            self.pipeline = None;
        }
    }

    fn forget_route(&mut self, route: &Route) {
        match route {
            Route::Leader(topic, partition) => {
                self.leaders.remove(&(topic.clone(), *partition));
            }
            Route::Coordinator(key_type, key) => {
                self.coordinators.remove(&(*key_type, key.clone()));
            }
            Route::Any | Route::Broker(_) => {}
        }
    }

    /// The broker `route` names, looked up if it is not known.
    async fn resolve(&mut self, route: &Route) -> Option<String> {
        match route {
            Route::Any => {
                for host in self.bootstrap.clone() {
                    if self.connection(&host).await.is_some() {
                        return Some(host);
                    }
                }
                None
            }
            Route::Broker(host) => Some(host.clone()),
            Route::Leader(topic, partition) => {
                if let Some(host) = self.leaders.get(&(topic.clone(), *partition)) {
                    return Some(host.clone());
                }
                self.refresh_metadata(topic).await;
                self.leaders.get(&(topic.clone(), *partition)).cloned()
            }
            Route::Coordinator(key_type, key) => {
                if let Some(host) = self.coordinators.get(&(*key_type, key.clone())) {
                    return Some(host.clone());
                }
                for bootstrap in self.bootstrap.clone() {
                    let outcome = on_host!(self, bootstrap, &Route::Any, "find-coordinator", |c| c
                        .find_coordinator(*key_type, key));
                    if let Outcome::Ok((host, port)) = outcome {
                        let address = self.connector.address(&host, port);
                        self.coordinators.insert((*key_type, key.clone()), address.clone());
                        return Some(address);
                    }
                }
                None
            }
        }
    }

    /// Asks the bootstrap brokers in turn for `topic`'s leaders, until one knows the topic.
    async fn refresh_metadata(&mut self, topic: &str) {
        for bootstrap in self.bootstrap.clone() {
            let outcome = on_host!(self, bootstrap, &Route::Any, "metadata", |c| c.metadata(topic));
            let Outcome::Ok(routes) = outcome else { continue };
            if routes.topic_error != 0 {
                continue;
            }
            self.partition_counts.insert(topic.to_string(), routes.partitions.len() as i32);
            if routes.topic_id != [0; 16] {
                self.topic_ids.insert(topic.to_string(), routes.topic_id);
                self.topic_names.insert(routes.topic_id, topic.to_string());
            }
            for (partition, leader, _epoch) in routes.partitions {
                if let Some((host, port)) = routes.brokers.get(&leader) {
                    self.leaders.insert((topic.to_string(), partition), self.connector.address(host, *port));
                }
            }
            return;
        }
    }

    /// What comes of a request sent (or not) to `host`: recorded; a lost connection forgets
    /// the host's routes, and an answer that says the route moved forgets the route, so that
    /// the caller's retry looks it up again.
    fn after<T>(&mut self, host: &str, route: &Route, api: &'static str, outcome: Outcome<T>) -> Outcome<T> {
        // An acks=0 produce is indefinite on a connection still fine: keep it, and with it the
        // order of what is sent on it.
        let broken = self.connections.get(host).is_none_or(WireClient::is_broken);
        match &outcome {
            Outcome::Indefinite | Outcome::Failed(NOT_SENT) if broken => self.forget_host(host),
            Outcome::Failed(code) if LEADER_MOVED.contains(code) || COORDINATOR_MOVED.contains(code) => {
                self.forget_route(route)
            }
            _ => {}
        }
        self.recorder.record(&self.name, api, &outcome_name(&outcome), serde_json::json!({"broker": host}));
        outcome
    }

    /// A request that could not be routed: recorded, and not sent.
    fn unsent<T>(&mut self, route: &Route, api: &'static str) -> Outcome<T> {
        self.recorder.record(&self.name, api, "unsent", serde_json::json!({"route": format!("{route:?}")}));
        Outcome::Failed(NOT_SENT)
    }

    pub async fn create_topic(&mut self, name: &str, partitions: i32) -> Outcome<i16> {
        routed!(self, Route::Any, "create-topics", |c| c.create_topic_outcome(name, partitions))
    }

    /// Reassigns one partition to `replicas` (`None` cancels), through any broker.
    pub async fn reassign(&mut self, topic: &str, partition: i32, replicas: Option<&[i32]>) -> Outcome<()> {
        routed!(self, Route::Any, "alter-partition-reassignments", |c| c.reassign(topic, partition, replicas))
    }

    /// The partitions of `topic` whose reassignment is in progress, by any broker.
    pub async fn reassigning(&mut self, topic: &str) -> Outcome<Vec<i32>> {
        routed!(self, Route::Any, "list-partition-reassignments", |c| c.reassigning(topic))
    }

    /// Metadata of `topic`, by broker `host`.
    pub async fn metadata_from(&mut self, host: &str, topic: &str) -> Outcome<TopicRoutes> {
        routed!(self, Route::Broker(host.to_string()), "metadata", |c| c.metadata(topic))
    }

    /// Creates (or, `create` false, deletes) one literal topic ACL through the broker `host`.
    pub async fn topic_acl_on(
        &mut self,
        host: &str,
        create: bool,
        topic: &str,
        principal: &str,
        operation: i8,
        allow: bool,
    ) -> Outcome<()> {
        let route = Route::Broker(host.to_string());
        routed!(self, route, "acls", |c| c.topic_acl(create, topic, principal, operation, allow))
    }

    /// AlterClientQuotas of a client id's `producer_byte_rate` (None: removed), through `host`.
    pub async fn client_quota_on(&mut self, host: &str, client_id: &str, rate: Option<f64>) -> Outcome<()> {
        let route = Route::Broker(host.to_string());
        routed!(self, route, "quotas", |c| c.client_quota(client_id, rate))
    }

    /// A client id's `producer_byte_rate` as `host` describes it now.
    pub async fn described_quota_on(&mut self, host: &str, client_id: &str) -> Outcome<Option<f64>> {
        let route = Route::Broker(host.to_string());
        routed!(self, route, "quotas", |c| c.described_quota(client_id))
    }

    /// The broker hosts this client bootstraps from.
    pub fn bootstrap(&self) -> &[String] {
        &self.bootstrap
    }

    pub async fn delete_topic(&mut self, name: &str) -> Outcome<()> {
        let deleted = routed!(self, Route::Any, "delete-topics", |c| c.delete_topic(name));
        self.leaders.retain(|(topic, _), _| topic != name);
        deleted
    }

    /// Produces one batch with `acks` to the partition's leader (acks=0: always indefinite).
    pub async fn produce_acks(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[Bytes],
        timestamp_ms: i64,
        acks: i16,
    ) -> Outcome<i64> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "produce", |c| c.produce_acks(topic, partition, values, timestamp_ms, acks))
    }

    pub async fn produce(&mut self, topic: &str, partition: i32, values: &[Bytes], timestamp_ms: i64) -> Outcome<i64> {
        self.produce_acks(topic, partition, values, timestamp_ms, -1).await
    }

    /// One batch of whole messages (keys, null values), acks=all, to the partition's leader.
    pub async fn produce_messages(
        &mut self,
        topic: &str,
        partition: i32,
        messages: &[crate::Message],
        timestamp_ms: i64,
    ) -> Outcome<i64> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "produce", |c| c.produce_messages(topic, partition, messages, timestamp_ms))
    }

    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Outcome<(Vec<(i64, Bytes)>, i64)> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "fetch", |c| c.fetch(topic, partition, offset, max_wait_ms))
    }

    pub async fn fetch_messages(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Outcome<(Vec<(i64, crate::Message)>, i64)> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "fetch", |c| c.fetch_messages(topic, partition, offset, max_wait_ms))
    }

    pub async fn fetch_committed(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Outcome<Fetched> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "fetch-committed", |c| c.fetch_committed(topic, partition, offset, max_wait_ms))
    }

    pub async fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        read_committed: bool,
    ) -> Outcome<i64> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "list-offsets", |c| c.list_offset(topic, partition, timestamp, read_committed))
    }

    pub async fn committed_offset(&mut self, group: &str, topic: &str, partition: i32) -> Outcome<i64> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "offset-fetch", |c| c.committed_offset(group, topic, partition))
    }

    pub async fn committed_offsets_stable(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Outcome<Vec<i64>> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "offset-fetch-stable", |c| c.committed_offsets_stable(group, topic, partitions))
    }

    pub async fn commit_offset(&mut self, group: &str, topic: &str, partition: i32, offset: i64) -> Outcome<()> {
        self.commit_as(group, &Member::default(), topic, partition, offset).await
    }

    pub async fn commit_as(
        &mut self,
        group: &str,
        member: &Member,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Outcome<()> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "offset-commit", |c| c.commit_as(group, member, topic, partition, offset))
    }

    pub async fn join_group(
        &mut self,
        group: &str,
        member_id: &str,
        session_timeout_ms: i32,
        rebalance_timeout_ms: i32,
        embedded: Option<&str>,
    ) -> Outcome<Joined> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "join-group", |c| c.join_group(
            group,
            member_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            embedded
        ))
    }

    pub async fn sync_group(
        &mut self,
        group: &str,
        member: &Member,
        assignments: &[(String, Vec<i32>)],
        rebalance_timeout_ms: i32,
        embedded: Option<&str>,
    ) -> Outcome<Vec<i32>> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "sync-group", |c| c.sync_group(group, member, assignments, rebalance_timeout_ms, embedded))
    }

    pub async fn heartbeat(&mut self, group: &str, member: &Member) -> Outcome<()> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "heartbeat", |c| c.heartbeat(group, member))
    }

    pub async fn consumer_heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        subscribe: Option<&str>,
        owned: Option<&[([u8; 16], Vec<i32>)]>,
    ) -> Outcome<super::Beat> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "consumer-heartbeat", |c| c.consumer_heartbeat(
            group,
            member_id,
            member_epoch,
            subscribe,
            owned
        ))
    }

    pub async fn leave_group(&mut self, group: &str, member: &Member) -> Outcome<()> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "leave-group", |c| c.leave_group(group, member))
    }

    /// InitProducerId without a transactional id, from any broker.
    pub async fn init_producer_id(&mut self) -> Outcome<(i64, i16)> {
        routed!(self, Route::Any, "init-producer-id", |c| c.init_producer_id())
    }

    /// Sends one idempotent batch to the partition's leader without waiting for its answer;
    /// `recv_produce` reads the answers in the order sent. Every batch in flight goes to one
    /// broker: a caller must let the pipeline drain (or break) before writing elsewhere.
    pub async fn send_produce(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[Bytes],
        timestamp_ms: i64,
        stamp: ProducerStamp,
    ) -> io::Result<()> {
        let route = Route::Leader(topic.to_string(), partition);
        let Some(host) = self.resolve(&route).await else {
            self.recorder.record(&self.name, "produce", "unsent", serde_json::json!({"route": format!("{route:?}")}));
            return Err(io::ErrorKind::NotConnected.into());
        };
        assert!(self.pipeline.as_ref().is_none_or(|h| *h == host), "one broker's pipeline at a time");
        let Some(connection) = self.connection(&host).await else {
            self.forget_host(&host);
            return Err(io::ErrorKind::NotConnected.into());
        };
        let sent = connection.send_produce(topic, partition, values, timestamp_ms, stamp).await;
        self.pipeline = Some(host);
        sent
    }

    /// The answer to the oldest produce in flight.
    pub async fn recv_produce(&mut self) -> Outcome<i64> {
        let Some(host) = self.pipeline.clone() else { return Outcome::Failed(NOT_SENT) };
        let outcome = match self.connections.get_mut(&host) {
            Some(connection) => connection.recv_produce().await,
            None => Outcome::Indefinite,
        };
        if let Outcome::Failed(code) = outcome
            && LEADER_MOVED.contains(&code)
        {
            self.leaders.retain(|_, h| *h != host);
        }
        if outcome == Outcome::Indefinite {
            self.forget_host(&host);
        }
        self.recorder.record(&self.name, "produce", &outcome_name(&outcome), serde_json::json!({"broker": host}));
        outcome
    }

    /// Whether the produce pipeline is gone (its connection broke): start it over.
    pub fn pipeline_broken(&self) -> bool {
        match &self.pipeline {
            Some(host) => self.connections.get(host).is_none_or(WireClient::is_broken),
            None => false,
        }
    }

    /// Ends the pipeline once nothing is in flight: the next batch may go to another broker.
    pub fn end_pipeline(&mut self) {
        self.pipeline = None;
    }

    /// Drops the pipeline's connection, so that the next batch is sent afresh.
    pub fn reset_pipeline(&mut self) {
        if let Some(host) = self.pipeline.take() {
            self.forget_host(&host);
        }
    }

    pub async fn init_txn_producer(
        &mut self,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        current: Option<(i64, i16)>,
    ) -> Outcome<(i64, i16)> {
        let route = Route::Coordinator(TRANSACTION, transactional_id.to_string());
        routed!(self, route, "init-producer-id", |c| c.init_txn_producer(
            transactional_id,
            transaction_timeout_ms,
            current
        ))
    }

    pub async fn add_partitions_to_txn(
        &mut self,
        transactional_id: &str,
        ids: (i64, i16),
        topic: &str,
        partitions: &[i32],
    ) -> Outcome<()> {
        let route = Route::Coordinator(TRANSACTION, transactional_id.to_string());
        routed!(self, route, "add-partitions-to-txn", |c| c.add_partitions_to_txn(
            transactional_id,
            ids,
            topic,
            partitions
        ))
    }

    pub async fn add_offsets_to_txn(&mut self, transactional_id: &str, ids: (i64, i16), group: &str) -> Outcome<()> {
        let route = Route::Coordinator(TRANSACTION, transactional_id.to_string());
        routed!(self, route, "add-offsets-to-txn", |c| c.add_offsets_to_txn(transactional_id, ids, group))
    }

    /// TxnOffsetCommit goes to the group's coordinator, not the transaction's.
    pub async fn txn_offset_commit(
        &mut self,
        transactional_id: &str,
        ids: (i64, i16),
        group: &str,
        topic: &str,
        offsets: &[(i32, i64)],
        tv2: bool,
    ) -> Outcome<()> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "txn-offset-commit", |c| c.txn_offset_commit(
            transactional_id,
            ids,
            group,
            topic,
            offsets,
            tv2
        ))
    }

    pub async fn end_txn(&mut self, transactional_id: &str, ids: (i64, i16), commit: bool) -> Outcome<()> {
        let route = Route::Coordinator(TRANSACTION, transactional_id.to_string());
        routed!(self, route, "end-txn", |c| c.end_txn(transactional_id, ids, commit))
    }

    /// EndTxn v5 (transactions v2): the producer id and epoch to go on with.
    pub async fn end_txn_v2(&mut self, transactional_id: &str, ids: (i64, i16), commit: bool) -> Outcome<(i64, i16)> {
        let route = Route::Coordinator(TRANSACTION, transactional_id.to_string());
        routed!(self, route, "end-txn", |c| c.end_txn_v2(transactional_id, ids, commit))
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn produce_txn(
        &mut self,
        transactional_id: &str,
        topic: &str,
        partition: i32,
        values: &[Bytes],
        timestamp_ms: i64,
        stamp: ProducerStamp,
        tv2: bool,
    ) -> Outcome<i64> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "produce-txn", |c| c.produce_txn(
            transactional_id,
            topic,
            partition,
            values,
            timestamp_ms,
            stamp,
            tv2
        ))
    }

    /// ListTransactions of every bootstrap broker, together; `Failed` unless every one answered.
    pub async fn list_transactions(&mut self) -> Outcome<Vec<(String, String)>> {
        let mut all = Vec::new();
        for host in self.bootstrap.clone() {
            match routed!(self, Route::Broker(host), "list-transactions", |c| c.list_transactions()) {
                Outcome::Ok(listed) => all.extend(listed),
                Outcome::Failed(code) => return Outcome::Failed(code),
                Outcome::Indefinite => return Outcome::Indefinite,
            }
        }
        Outcome::Ok(all)
    }

    /// The connection serial of `address` (0 before the first): it changes whenever a new
    /// connection replaces the last.
    pub fn connection_serial(&self, address: &str) -> u64 {
        self.serials.get(address).copied().unwrap_or(0)
    }

    /// The leader of a partition, looked up if it is not known.
    pub async fn leader_of(&mut self, topic: &str, partition: i32) -> Option<String> {
        self.resolve(&Route::Leader(topic.to_string(), partition)).await
    }

    /// Forgets a partition's leader (a broker said it does not lead it).
    pub fn forget_leader(&mut self, topic: &str, partition: i32) {
        self.leaders.remove(&(topic.to_string(), partition));
    }

    /// The topic's id, by Metadata if it is not known.
    pub async fn topic_id(&mut self, topic: &str) -> Option<[u8; 16]> {
        if !self.topic_ids.contains_key(topic) {
            self.refresh_metadata(topic).await;
        }
        self.topic_ids.get(topic).copied()
    }

    /// How many partitions `topic` has, by Metadata if it is not known.
    pub async fn partition_count(&mut self, topic: &str) -> Option<i32> {
        if !self.partition_counts.contains_key(topic) {
            self.refresh_metadata(topic).await;
        }
        self.partition_counts.get(topic).copied().filter(|n| *n > 0)
    }

    /// The name of a topic this client learnt the id of.
    pub fn topic_name(&self, topic_id: &[u8; 16]) -> Option<&str> {
        self.topic_names.get(topic_id).map(String::as_str)
    }

    pub async fn share_group_heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        subscribe: Option<&[String]>,
    ) -> Outcome<crate::ShareBeat> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "share-group-heartbeat", |c| c.share_group_heartbeat(
            group,
            member_id,
            member_epoch,
            subscribe
        ))
    }

    /// A ShareFetch to broker `address` (the leader of the partitions it names).
    pub async fn share_fetch_on(
        &mut self,
        address: &str,
        spec: &crate::ShareFetchSpec<'_>,
    ) -> Outcome<crate::ShareFetched> {
        routed!(self, Route::Broker(address.to_string()), "share-fetch", |c| c.share_fetch(spec))
    }

    /// A ShareAcknowledge to broker `address`.
    pub async fn share_acknowledge_on(
        &mut self,
        address: &str,
        group: &str,
        member_id: &str,
        session_epoch: i32,
        acks: &[crate::ShareAcks],
    ) -> Outcome<Vec<([u8; 16], i32, i16)>> {
        routed!(self, Route::Broker(address.to_string()), "share-acknowledge", |c| c.share_acknowledge(
            group,
            member_id,
            session_epoch,
            acks
        ))
    }

    /// A TxnShareAcknowledge to broker `address` (the leader of the partitions it names).
    pub async fn txn_share_acknowledge_on(
        &mut self,
        address: &str,
        transactional_id: &str,
        ids: (i64, i16),
        group: &str,
        member: (&str, i32),
        acks: &[crate::ShareAcks],
    ) -> Outcome<Vec<([u8; 16], i32, i16)>> {
        routed!(self, Route::Broker(address.to_string()), "txn-share-acknowledge", |c| c.txn_share_acknowledge(
            transactional_id,
            ids,
            group,
            member,
            acks
        ))
    }

    pub async fn share_group_offsets(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Outcome<Vec<(i32, i64, i64)>> {
        let route = Route::Coordinator(GROUP, group.to_string());
        routed!(self, route, "describe-share-group-offsets", |c| c.share_group_offsets(group, topic, partitions))
    }

    pub async fn alter_group_configs(&mut self, group: &str, set: &[(&str, &str)]) -> Outcome<()> {
        routed!(self, Route::Any, "incremental-alter-configs", |c| c.alter_group_configs(group, set))
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn produce_txn_messages(
        &mut self,
        transactional_id: &str,
        topic: &str,
        partition: i32,
        messages: &[crate::Message],
        timestamp_ms: i64,
        stamp: ProducerStamp,
        tv2: bool,
    ) -> Outcome<i64> {
        let route = Route::Leader(topic.to_string(), partition);
        routed!(self, route, "produce-txn", |c| c.produce_txn_messages(
            transactional_id,
            topic,
            partition,
            messages,
            timestamp_ms,
            stamp,
            tv2
        ))
    }
}
