//! What one actor holds of one kind of owned thing: the topic manager its partitions, the group
//! coordinator its groups, the transaction coordinator its slots. Each key goes
//!
//! ```text
//!            claim (epoch e+1, exclusive create)          release (after the last write)
//!   unheld ──────────────────────────────────────▶ held ─────────────────────────────────▶ unheld
//!                                                 (epoch, lease session)
//! ```
//!
//! A key is held under the epoch claimed and in the lease session it was claimed in: a session
//! that lapsed (the lease ran out, even for a moment) holds nothing any more, and the key is
//! released and claimed anew, at a newer epoch, before it is served again. The claims and
//! releases themselves are `claims`'s; this table is what the actor serves by.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::io;

use tokio::time::Instant;

use super::claims::{Claimed, Claims, Kind};
use super::membership::ClusterView;
use crate::env::Volume;
use crate::metrics::OwnershipMetrics;

/// How a key is held: the epoch claimed, and the lease session it was claimed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub epoch: u32,
    pub session: u64,
}

/// The keys of one kind that one actor holds. `K` is the actor's own name for a key (a
/// partition, a group id, a slot number); `claim_key` gives its name among the claims.
pub struct Ownership<V: Volume, K: Ord + Clone> {
    kind: Kind,
    claim_key: fn(&K) -> String,
    claims: Claims<V>,
    held: BTreeMap<K, Held>,
    metrics: std::sync::Arc<OwnershipMetrics>,
}

impl<V: Volume, K: Ord + Clone + std::fmt::Debug> Ownership<V, K> {
    pub fn new(volume: V, kind: Kind, claim_key: fn(&K) -> String, metrics: std::sync::Arc<OwnershipMetrics>) -> Self {
        Ownership { kind, claim_key, claims: Claims::new(volume), held: BTreeMap::new(), metrics }
    }

    /// What operators see: how many keys are held now.
    fn count_held(&self) {
        self.metrics.held.store(self.held.len() as i64, std::sync::atomic::Ordering::Relaxed);
    }

    /// How `key` is held, if it is.
    pub fn held<Q: Ord + ?Sized>(&self, key: &Q) -> Option<Held>
    where
        K: Borrow<Q>,
    {
        self.held.get(key).copied()
    }

    /// Whether `key` is held in lease session `session`: only then may the actor serve it.
    pub fn holds_in<Q: Ord + ?Sized>(&self, key: &Q, session: u64) -> bool
    where
        K: Borrow<Q>,
    {
        self.held(key).is_some_and(|h| h.session == session)
    }

    /// Every key held, with how.
    pub fn iter(&self) -> impl Iterator<Item = (&K, Held)> {
        self.held.iter().map(|(k, h)| (k, *h))
    }

    /// Claims the next epoch of `key` and holds it in `view.session`. `Ok(None)`: another
    /// broker holds it, or won the race. The key must not be held already: a key held in an
    /// older session is released first (`release`), so that its next epoch fences the old one.
    pub async fn claim(&mut self, key: &K, view: &ClusterView, now: Instant) -> io::Result<Option<Claimed>> {
        assert!(!self.held.contains_key(key), "{key:?}: claimed while held");
        let claim_key = (self.claim_key)(key);
        let Some(claimed) = self.claims.try_claim(self.kind, &claim_key, view, now).await? else {
            return Ok(None);
        };
        assert!(claimed.epoch >= 1, "epochs start at 1");
        assert_eq!(
            self.claims.known_epoch(self.kind, &claim_key),
            Some(claimed.epoch),
            "held is the newest epoch seen"
        );
        self.held.insert(key.clone(), Held { epoch: claimed.epoch, session: view.session });
        crate::metrics::BrokerMetrics::add(&self.metrics.claims, 1);
        if claimed.takeover {
            crate::metrics::BrokerMetrics::add(&self.metrics.takeovers, 1);
        }
        self.count_held();
        Ok(Some(claimed))
    }

    /// Gives `key` up after its last write: no longer held, and its release written (retried by
    /// `retry_releases` if the volume refuses), so the next owner need not wait for this
    /// broker's lease to run out. How it was held, if it was.
    pub async fn release<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<Held>
    where
        K: Borrow<Q>,
    {
        let (key, held) = self.held.remove_entry(key)?;
        self.claims.release(self.kind, &(self.claim_key)(&key), held.epoch).await;
        assert!(!self.held.contains_key::<K>(&key), "released");
        crate::metrics::BrokerMetrics::add(&self.metrics.releases, 1);
        self.count_held();
        Some(held)
    }

    /// Tries the releases the volume refused again (each actor on its heartbeat).
    pub async fn retry_releases(&mut self) {
        self.claims.retry_releases().await;
    }

    /// The broker holding the newest epoch of `key` unreleased, as the volume says now.
    pub async fn holder(&mut self, key: &K) -> io::Result<Option<i32>> {
        self.claims.holder(self.kind, &(self.claim_key)(key)).await
    }

    /// The newest epoch of `key` claimed by anyone, as the volume says now (0: never).
    pub async fn current_epoch(&mut self, key: &K) -> io::Result<u32> {
        Ok(self.claims.current(self.kind, &(self.claim_key)(key)).await?.map_or(0, |c| c.epoch))
    }
}
