//! The membership actor: renews this broker's lease every `broker.heartbeat.interval.ms`, reads
//! the peers' leases and publishes the `ClusterView` that every owner of things (partitions,
//! transaction slots, groups) reconciles against.
//!
//! The rules (DESIGN.md, "Cluster mode"):
//! - A peer is live while this broker saw its lease change within `broker.session.timeout.ms`,
//!   timed on this broker's monotonic clock from the moment it saw the change. A lease seen once
//!   and never changing is not live: its process may be long dead.
//! - A peer's process is gone for sure (its things may be taken over) once its lease has not
//!   changed for the session timeout plus the drift margin, or it said it is leaving, or a newer
//!   incarnation holds its broker id.
//! - This broker's own lease is valid until the start of its last renewal plus the session
//!   timeout minus the drift margin, and only if that renewal began while the previous one was
//!   still valid: a lapse starts a new session, and nothing owned in the old one survives it.
//! - A process starting with a broker id whose lease another incarnation holds waits until that
//!   lease is gone, so two processes with one broker id never both serve.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::lease::{self, BROKERS_DIR, LeaseFile};
use crate::config::BrokerConfig;
use crate::config::listeners::ListenerAddress;
use crate::env::{Clock, Env, Rng, Spawner, Volume};
use crate::error::{CoreError, CoreResult};

/// A live broker, as clients are told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub broker_id: i32,
    /// Where peers reach it (its inter-broker listener).
    pub host: String,
    pub port: i32,
    /// Its advertised listeners (empty: a lease from before listeners had names).
    pub listeners: Vec<ListenerAddress>,
    /// Held its lease for the settle period: may own things.
    pub settled: bool,
}

impl Peer {
    fn of_config(config: &BrokerConfig, settled: bool) -> Peer {
        Peer {
            broker_id: config.broker_id,
            host: config.advertised_host.clone(),
            port: config.advertised_port,
            listeners: config.advertised_listeners.clone(),
            settled,
        }
    }

    /// Where a client whose request came in on `listener` is told to reach this broker: that
    /// listener's address, or none if it has no such listener (Apache leaves such a broker out
    /// of what the client is told); with no named listeners, its one address.
    pub fn address_for(&self, listener: &str) -> Option<(&str, i32)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners.iter().find(|l| l.listener == listener).map(|l| (l.host.as_str(), l.port))
    }
}

/// One broker's lease as this broker sees it now (DescribeQuorum reports these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSeen {
    pub broker_id: i32,
    pub host: String,
    pub port: i32,
    /// Its advertised listeners (empty: a lease from before listeners had names).
    pub listeners: Vec<ListenerAddress>,
    pub live: bool,
    /// How long ago this broker saw the lease change last (for its own, renewed it).
    pub unchanged_for: Duration,
}

/// What this broker last observed of one broker id's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observation {
    lease: Option<LeaseFile>,
    /// When this broker saw the lease change last (or first saw it).
    changed_at: Instant,
    /// Whether it has seen it change at all.
    seen_change: bool,
    /// When it last read the lease: a lease counts as stood still only up to the last read
    /// that found it so, never through a spell in which this broker could not read it.
    read_at: Instant,
}

/// A peer broker's endpoint, as its lease advertises it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub broker_id: i32,
    pub host: String,
    pub port: i32,
}

/// The cluster as this broker sees it, replaced whole on every change.
#[derive(Debug, Clone)]
pub struct ClusterView {
    pub me: i32,
    pub incarnation: u64,
    /// The lease session this broker is in, and until when (monotonic) it may ack in it;
    /// `None` while it holds no valid lease.
    pub session: u64,
    pub lease_valid_until: Option<Instant>,
    /// Live brokers by id, this one included while its lease is valid.
    pub live: BTreeMap<i32, Peer>,
    observed: Arc<BTreeMap<i32, Observation>>,
    /// A peer's lease was read that this broker has not seen change yet, within a session
    /// timeout of first reading it: that peer may well be serving.
    peers_unknown: bool,
    session_timeout: Duration,
    drift_margin: Duration,
}

impl ClusterView {
    /// The view of a broker that holds no lease yet.
    fn new(config: &BrokerConfig, incarnation: u64) -> Self {
        ClusterView {
            me: config.broker_id,
            incarnation,
            session: 0,
            lease_valid_until: None,
            live: BTreeMap::new(),
            observed: Arc::new(BTreeMap::new()),
            peers_unknown: false,
            session_timeout: Duration::from_millis(config.broker_session_timeout_ms),
            drift_margin: Duration::from_millis(config.broker_lease_drift_margin_ms),
        }
    }

    /// The view of a broker alone whose lease never runs out, from `now`: for tests of one
    /// actor without a membership.
    pub fn standalone(me: i32, now: Instant) -> Self {
        let mut config = BrokerConfig { broker_id: me, ..BrokerConfig::default() };
        config.broker_id = me;
        let mut view = ClusterView::new(&config, 0);
        view.lease_valid_until = Some(now + Duration::from_secs(100 * 365 * 24 * 3600));
        view.live.insert(me, Peer::of_config(&config, true));
        view
    }

    /// Every lease on the volume that did not say it left, this broker's own included while
    /// it holds one, by broker id.
    pub fn leases_seen(&self, now: Instant) -> Vec<LeaseSeen> {
        let mut seen: BTreeMap<i32, LeaseSeen> = BTreeMap::new();
        for (&broker_id, o) in self.observed.iter().filter(|(id, _)| **id != self.me) {
            let Some(lease) = o.lease.as_ref().filter(|l| !l.leaving) else { continue };
            seen.insert(
                broker_id,
                LeaseSeen {
                    broker_id,
                    host: lease.host.clone(),
                    port: lease.port,
                    listeners: lease.listeners.clone(),
                    live: self.live.contains_key(&broker_id),
                    unchanged_for: now.saturating_duration_since(o.changed_at),
                },
            );
        }
        if let (Some(until), Some(me)) = (self.lease_valid_until, self.live.get(&self.me)) {
            // The last renewal began a session timeout less the drift margin before `until`.
            let renewed = until.checked_sub(self.session_timeout.saturating_sub(self.drift_margin)).unwrap_or(until);
            let unchanged_for = now.saturating_duration_since(renewed);
            let mine = LeaseSeen {
                broker_id: self.me,
                host: me.host.clone(),
                port: me.port,
                listeners: me.listeners.clone(),
                live: true,
                unchanged_for,
            };
            seen.insert(self.me, mine);
        }
        seen.into_values().collect()
    }

    pub fn lease_valid(&self, now: Instant) -> bool {
        self.lease_valid_until.is_some_and(|until| now < until)
    }

    /// The brokers that may own things: the settled live ones, or every live one if none is
    /// settled (a cluster starting, or a broker alone). But none while a peer's liveness is
    /// unknown and none is settled: a broker that has just started cannot tell its live
    /// peers from dead ones for a heartbeat, and if it took everything in that heartbeat it
    /// would give it all back the next, every thing moving twice for each restart.
    pub fn owners(&self) -> Vec<i32> {
        let settled: Vec<i32> = self.live.values().filter(|p| p.settled).map(|p| p.broker_id).collect();
        match (settled.is_empty(), self.peers_unknown) {
            (false, _) => settled,
            (true, true) => Vec::new(),
            (true, false) => self.live.keys().copied().collect(),
        }
    }

    /// The broker that should own `key` (a partition, slot or group name) by rendezvous hash
    /// over `owners()`: every broker computes the same answer from the same leases, and a
    /// broker leaving or joining moves only the keys it wins or held.
    pub fn owner_of(&self, key: &str) -> Option<i32> {
        self.owner_preferring(key, &[])
    }

    /// The broker that should own `key` when a reassignment put `preferred` first (a
    /// partition's replica list, `topics::Assignment`): the first of them that may own
    /// things, else the owner by rendezvous hash. A partition whose chosen brokers are all
    /// down stays served: on a shared volume any broker can serve it.
    pub fn owner_preferring(&self, key: &str, preferred: &[i32]) -> Option<i32> {
        let owners = self.owners();
        match preferred.iter().find(|b| owners.contains(b)) {
            Some(&b) if !crate::mutant!(ReassignmentIgnored) => Some(b),
            _ => owner_among(&owners, key),
        }
    }

    /// The endpoint of the peer that should own `key`; `None` when that is this broker, or no
    /// broker is live (then this one answers, and refuses what it does not own).
    pub fn peer_owning(&self, key: &str) -> Option<Endpoint> {
        self.endpoint_of(self.owner_of(key)?)
    }

    /// The endpoint of live peer `owner`; `None` for this broker or a broker not live.
    pub fn endpoint_of(&self, owner: i32) -> Option<Endpoint> {
        let peer = self.live.get(&owner).filter(|_| owner != self.me)?;
        Some(Endpoint { broker_id: owner, host: peer.host.clone(), port: peer.port })
    }

    /// Whether `broker_id` has a lease on the volume, live or not, or is this broker: a broker
    /// the cluster knows of, as Apache's controller knows its registered brokers.
    pub fn registered(&self, broker_id: i32) -> bool {
        broker_id == self.me || self.observed.get(&broker_id).is_some_and(|o| o.lease.is_some())
    }

    /// Every peer with a lease on the volume that did not say it left, live or not yet known
    /// to be: who must hear of a fence. A broker that just started sees no peer live for a
    /// heartbeat, but its peers may serve all the same.
    pub fn peers_with_lease(&self) -> Vec<Endpoint> {
        self.observed
            .iter()
            .filter(|(id, _)| **id != self.me)
            .filter_map(|(&broker_id, o)| o.lease.as_ref().filter(|l| !l.leaving).map(|l| (broker_id, l)))
            .map(|(broker_id, l)| Endpoint { broker_id, host: l.host.clone(), port: l.port })
            .collect()
    }

    /// Whether this broker should own `key` now, and may: its lease is valid.
    pub fn should_own(&self, key: &str, now: Instant) -> bool {
        self.should_own_preferring(key, &[], now)
    }

    /// `should_own`, for a key whose reassignment prefers `preferred` (`owner_preferring`).
    pub fn should_own_preferring(&self, key: &str, preferred: &[i32], now: Instant) -> bool {
        self.lease_valid(now) && self.owner_preferring(key, preferred) == Some(self.me)
    }

    /// Whether the process `incarnation` of broker `broker_id` has stopped for sure, so that
    /// what it owned may be taken over: it said it left, or a newer process holds its id, or
    /// its lease stood still for the session timeout plus the drift margin on this broker's
    /// clock. This broker's own earlier sessions are gone once it has given up what they owned,
    /// which the caller knows.
    pub fn holder_gone(&self, broker_id: i32, incarnation: u64, now: Instant) -> bool {
        if broker_id == self.me {
            // Older processes of this id were waited out before this one started.
            return incarnation == self.incarnation || generation(incarnation) < generation(self.incarnation);
        }
        let expiry = self.session_timeout + self.drift_margin;
        match self.observed.get(&broker_id) {
            // Never read: nothing is known, and nothing may be taken from it.
            None => false,
            Some(o) => match &o.lease {
                // A later process holds the id: it waited this one out.
                Some(l) if generation(l.incarnation) > generation(incarnation) => true,
                // Not the lease this claim was made under, nor a later one: wait and see.
                Some(l) if l.incarnation != incarnation => false,
                Some(l) if l.leaving => true,
                // Read unchanged at or after the end of its lease plus the margin.
                _ => now >= o.changed_at + expiry && o.read_at >= o.changed_at + expiry,
            },
        }
    }
}

/// The generation of a process incarnation: processes of one broker id count up.
fn generation(incarnation: u64) -> u64 {
    incarnation >> 32
}

/// Rendezvous (highest random weight) hashing: the owner of `key` among `brokers`.
pub fn owner_among(brokers: &[i32], key: &str) -> Option<i32> {
    let h = fnv1a64(key.as_bytes());
    brokers.iter().copied().max_by_key(|&id| (mix(h ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)), id))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// splitmix64's finaliser: spreads the bits of a hash.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How the rest of the broker reaches the membership actor.
#[derive(Clone)]
pub struct MembershipHandle {
    view: watch::Receiver<Arc<ClusterView>>,
    leave: tokio::sync::mpsc::Sender<oneshot::Sender<()>>,
}

impl MembershipHandle {
    pub fn view(&self) -> Arc<ClusterView> {
        self.view.borrow().clone()
    }

    /// A receiver of every new view.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterView>> {
        self.view.clone()
    }

    /// Graceful shutdown, once everything owned was handed over: the lease says `leaving`, so
    /// peers take over at once, and renewals stop.
    pub async fn leave(&self) {
        let (reply, rx) = oneshot::channel();
        if self.leave.send(reply).await.is_ok() {
            let _ = rx.await;
        }
    }
}

struct Membership<E: Env> {
    env: E,
    config: Arc<BrokerConfig>,
    incarnation: u64,
    session: u64,
    renewal: u64,
    valid_until: Option<Instant>,
    observed: BTreeMap<i32, Observation>,
    view: watch::Sender<Arc<ClusterView>>,
    /// When the last renewal began: the next is late by how much more than an interval after.
    last_renewal_start: Option<Instant>,
    metrics: Arc<crate::metrics::LeaseMetrics>,
}

fn storage(e: std::io::Error) -> CoreError {
    CoreError::Storage(e.to_string())
}

/// Waits until no other process holds this broker id's lease, takes the lease, and starts the
/// actor. Returns once the lease is held: the broker owns nothing before.
pub async fn start<E: Env>(
    env: &E,
    config: Arc<BrokerConfig>,
    metrics: Arc<crate::metrics::LeaseMetrics>,
) -> CoreResult<MembershipHandle> {
    let volume = env.volume().clone();
    volume.create_dir_all(BROKERS_DIR).await.map_err(storage)?;
    let older = wait_for_older_process(env, &config).await?;
    // The generation in the high half orders the processes of one broker id (each waited for
    // the one before); the random low half tells two started by mistake at once apart.
    let generation = older.map_or(0, |l| generation(l.incarnation)) + 1;
    let incarnation = (generation << 32) | (env.rng().next_u64() & 0xffff_ffff);
    let (view, view_rx) = watch::channel(Arc::new(ClusterView::new(&config, incarnation)));
    let mut actor = Membership {
        env: env.clone(),
        config,
        incarnation,
        session: 0,
        renewal: 0,
        valid_until: None,
        observed: BTreeMap::new(),
        view,
        last_renewal_start: None,
        metrics,
    };
    while !actor.renew().await {
        env.clock().sleep_ms(actor.config.broker_heartbeat_interval_ms).await;
    }
    actor.observe().await;
    actor.publish();
    let (leave, leave_rx) = tokio::sync::mpsc::channel(1);
    env.spawner().spawn("membership", actor.run(leave_rx));
    Ok(MembershipHandle { view: view_rx, leave })
}

/// A restarted broker (or a second process given the same id by mistake) finds a lease of
/// another incarnation under its id: it may be a paused process that will wake up and write.
/// It waits until that lease stood still for the session timeout plus the drift margin.
async fn wait_for_older_process<E: Env>(env: &E, config: &BrokerConfig) -> CoreResult<Option<LeaseFile>> {
    let path = lease::path(config.broker_id);
    let expiry = Duration::from_millis(config.broker_session_timeout_ms + config.broker_lease_drift_margin_ms);
    let mut last: Option<(Option<bytes::Bytes>, Instant)> = None;
    loop {
        let raw = env.volume().read(&path).await.map_err(storage)?;
        let now = env.clock().monotonic();
        let decoded = raw.as_deref().map(|r| LeaseFile::decode(r, config.broker_id));
        match decoded {
            None => return Ok(None),
            Some(Ok(lease)) if lease.leaving => return Ok(Some(lease)),
            // A torn lease of ours is replaced by the first renewal; another version is not.
            Some(Err(e)) if e.contains("version") => return Err(CoreError::Storage(format!("{path}: {e}"))),
            _ => {}
        }
        match &last {
            Some((seen, since)) if *seen == raw => {
                if now >= *since + expiry {
                    return Ok(raw.as_deref().and_then(|r| LeaseFile::decode(r, config.broker_id).ok()));
                }
            }
            _ => {
                if last.is_some() {
                    tracing::warn!(
                        broker_id = config.broker_id,
                        "another process renews the lease of this broker id; waiting for it to stop"
                    );
                } else {
                    tracing::info!(broker_id = config.broker_id, "waiting for the previous process's lease to run out");
                }
                last = Some((raw, now));
            }
        }
        env.clock().sleep_ms(config.broker_heartbeat_interval_ms).await;
    }
}

impl<E: Env> Membership<E> {
    async fn run(mut self, mut leave: tokio::sync::mpsc::Receiver<oneshot::Sender<()>>) {
        let interval = Duration::from_millis(self.config.broker_heartbeat_interval_ms);
        let mut next = self.env.clock().monotonic() + interval;
        loop {
            // Wake at the lease's end too (once: a lease already over is no deadline): everyone
            // acting on the view must see it lapse.
            let now = self.env.clock().monotonic();
            let wake = self.valid_until.filter(|&until| until > now).map_or(next, |until| until.min(next));
            tokio::select! {
                biased;
                reply = leave.recv() => {
                    self.write_leaving().await;
                    if let Some(reply) = reply {
                        let _ = reply.send(());
                    }
                    return;
                }
                _ = self.env.clock().sleep_until(wake) => {}
            }
            let now = self.env.clock().monotonic();
            if now >= next {
                next = now + interval;
                self.renew().await;
                self.observe().await;
            }
            self.publish();
        }
    }

    /// Renews the lease; true if it is valid afterwards.
    async fn renew(&mut self) -> bool {
        let path = lease::path(self.config.broker_id);
        // Another incarnation in our file: a newer process took our id while we were stopped.
        // It waited for our lease to run out, so it may serve; we must not.
        if let Ok(Some(raw)) = self.env.volume().read(&path).await
            && let Ok(other) = LeaseFile::decode(&raw, self.config.broker_id)
            && other.incarnation != self.incarnation
            && (self.session > 0 || self.renewal > 0)
        {
            tracing::error!(
                broker_id = self.config.broker_id,
                "another process holds this broker id's lease; this one stops serving"
            );
            self.valid_until = None;
            return false;
        }
        let start = self.env.clock().monotonic();
        let interval = Duration::from_millis(self.config.broker_heartbeat_interval_ms);
        if let Some(last) = self.last_renewal_start.replace(start) {
            let late = start.saturating_duration_since(last + interval);
            self.metrics.lateness.observe(late.as_micros() as u64);
        }
        if self.valid_until.is_none_or(|until| start >= until) && self.renewal > 0 {
            // The lease lapsed: whatever a peer took over meanwhile is its now.
            self.session += 1;
            self.renewal = 0;
            crate::metrics::BrokerMetrics::add(&self.metrics.lapses, 1);
            tracing::warn!(session = self.session, "the broker's lease lapsed; starting a new lease session");
        }
        let next = self.next_lease(false);
        match self.env.volume().write_atomic(&path, next.encode()).await {
            Ok(()) => {
                self.renewal += 1;
                crate::metrics::BrokerMetrics::add(&self.metrics.renewals, 1);
                let validity = Duration::from_millis(
                    self.config.broker_session_timeout_ms - self.config.broker_lease_drift_margin_ms,
                );
                self.valid_until = Some(start + validity);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew the broker's lease");
                crate::metrics::BrokerMetrics::add(&self.metrics.failures, 1);
                false
            }
        }
    }

    /// Reads every peer's lease: names from a listing (new brokers), then each by name.
    async fn observe(&mut self) {
        let volume = self.env.volume().clone();
        let mut ids: Vec<i32> = match volume.list(BROKERS_DIR).await {
            Ok(names) => names.iter().filter_map(|n| lease::parse_name(n)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the brokers' leases");
                return;
            }
        };
        ids.extend(self.observed.keys().copied());
        ids.sort_unstable();
        ids.dedup();
        for id in ids.into_iter().filter(|&id| id != self.config.broker_id) {
            let lease = match volume.read(&lease::path(id)).await {
                Ok(None) => None,
                Ok(Some(raw)) => match LeaseFile::decode(&raw, id) {
                    Ok(lease) => Some(lease),
                    Err(e) => {
                        // Never guessed at: the last lease read stands, and ages.
                        tracing::warn!(broker_id = id, error = %e, "unreadable peer lease");
                        continue;
                    }
                },
                Err(e) => {
                    tracing::warn!(broker_id = id, error = %e, "cannot read a peer's lease");
                    continue;
                }
            };
            let now = self.env.clock().monotonic();
            match self.observed.get_mut(&id) {
                Some(o) if o.lease == lease => o.read_at = now,
                Some(o) => {
                    *o = Observation { lease, changed_at: now, seen_change: true, read_at: now };
                }
                None => {
                    self.observed.insert(id, Observation { lease, changed_at: now, seen_change: false, read_at: now });
                }
            }
        }
    }

    /// This broker's lease as its next write: the renewal after the last one.
    fn next_lease(&self, leaving: bool) -> LeaseFile {
        LeaseFile {
            format_version: lease::FORMAT_VERSION,
            broker_id: self.config.broker_id,
            host: self.config.advertised_host.clone(),
            port: self.config.advertised_port,
            listeners: self.config.advertised_listeners.clone(),
            incarnation: self.incarnation,
            session: self.session,
            renewal: self.renewal + 1,
            leaving,
        }
    }

    async fn write_leaving(&mut self) {
        let lease = self.next_lease(true);
        if let Err(e) = self.env.volume().write_atomic(&lease::path(self.config.broker_id), lease.encode()).await {
            tracing::warn!(error = %e, "cannot mark the lease as leaving; peers will wait for it to run out");
        }
        self.valid_until = None;
        self.publish();
    }

    fn settled(&self, renewal: u64) -> bool {
        let settle_ms = if crate::mutant!(SettleZero) { 0 } else { self.config.broker_ownership_settle_ms };
        renewal > settle_ms.div_ceil(self.config.broker_heartbeat_interval_ms)
    }

    fn publish(&mut self) {
        let now = self.env.clock().monotonic();
        let timeout = Duration::from_millis(self.config.broker_session_timeout_ms);
        let mut live = BTreeMap::new();
        for (&id, o) in &self.observed {
            if let Some(l) = &o.lease
                && o.seen_change
                && !l.leaving
                && now < o.changed_at + timeout
            {
                let peer = Peer {
                    broker_id: id,
                    host: l.host.clone(),
                    port: l.port,
                    listeners: l.listeners.clone(),
                    settled: self.settled(l.renewal),
                };
                live.insert(id, peer);
            }
        }
        let valid = self.valid_until.filter(|&until| now < until);
        if valid.is_some() {
            live.insert(self.config.broker_id, Peer::of_config(&self.config, self.settled(self.renewal)));
        }
        let view = ClusterView {
            me: self.config.broker_id,
            incarnation: self.incarnation,
            session: self.session,
            lease_valid_until: valid,
            live,
            observed: Arc::new(self.observed.clone()),
            peers_unknown: self.observed.iter().any(|(&id, o)| {
                id != self.config.broker_id
                    && o.lease.as_ref().is_some_and(|l| !l.leaving)
                    && !o.seen_change
                    && now < o.changed_at + timeout
            }),
            session_timeout: timeout,
            drift_margin: Duration::from_millis(self.config.broker_lease_drift_margin_ms),
        };
        self.view.send_replace(Arc::new(view));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_that_cannot_tell_its_peers_yet_owns_nothing_until_it_can() {
        let mut view = ClusterView::standalone(2, Clock::monotonic(&crate::env::real::RealClock));
        view.live.get_mut(&2).unwrap().settled = false;
        assert_eq!(view.owners(), vec![2], "alone and unsettled: a cluster starting");
        view.peers_unknown = true;
        assert!(view.owners().is_empty(), "a peer's lease not yet seen to change may be live");
        let peer = Peer { broker_id: 0, host: "h".into(), port: 1, listeners: Vec::new(), settled: true };
        view.live.insert(0, peer);
        assert_eq!(view.owners(), vec![0], "a settled peer owns, whatever else is unknown");
    }

    #[test]
    fn rendezvous_moves_only_the_keys_of_the_broker_that_left() {
        let keys: Vec<String> = (0..500).map(|i| format!("topic-{i}")).collect();
        let three: Vec<Option<i32>> = keys.iter().map(|k| owner_among(&[0, 1, 2], k)).collect();
        let two: Vec<Option<i32>> = keys.iter().map(|k| owner_among(&[0, 2], k)).collect();
        for (a, b) in three.iter().zip(&two) {
            if *a != Some(1) {
                assert_eq!(a, b, "a key not owned by the leaver stays put");
            } else {
                assert!(b.is_some_and(|b| b != 1));
            }
        }
        for id in 0..3 {
            let share = three.iter().filter(|o| **o == Some(id)).count();
            assert!((100..240).contains(&share), "broker {id} owns {share} of 500");
        }
        assert_eq!(owner_among(&[], "x"), None);
    }
}
