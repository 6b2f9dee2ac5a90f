//! Ownership epochs. Every owned thing (a partition, a transaction slot, a group) has a claim
//! directory, `__cluster/owners/<kind>/<key>/`, holding one file per epoch,
//! `<epoch:010>.json`, made by exclusive create: of two brokers claiming epoch e+1 one wins.
//! A claim may be made only when the holder of epoch e released it (`<epoch>.released`, written
//! after its last write) or is gone for sure (`ClusterView::holder_gone`), so epochs strictly
//! increase on every change of owner, A to B to A included.
//!
//! Files are opened by known name, never found by listing (NFS listings may be stale): the
//! current epoch is the last of 1, 2, ... that exists, probed from the last one known.

use std::collections::BTreeMap;
use std::io;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::membership::ClusterView;
use crate::env::{Volume, join};

pub const OWNERS_DIR: &str = "__cluster/owners";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimFile {
    pub format_version: u32,
    pub epoch: u32,
    pub broker_id: i32,
    pub incarnation: u64,
    pub session: u64,
}

/// What a successful claim gives its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    pub epoch: u32,
    /// The previous holder did not release: it may still have a write in flight, so the new
    /// owner writes nothing into files of an older epoch (a partition log rolls).
    pub takeover: bool,
}

/// The kinds of owned things, each with its own claim directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Partition,
    TxnSlot,
    Group,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Partition, Kind::Group, Kind::TxnSlot];

    /// The kind as operators see it named (metrics' `kind` label, `kaas admin cluster`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Partition => "partition",
            Kind::TxnSlot => "txn_slot",
            Kind::Group => "group",
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Kind::Partition => "partitions",
            Kind::TxnSlot => "txn",
            Kind::Group => "groups",
        }
    }
}

/// The name of a file numbered `n` in a directory of numbered files (claim epochs here,
/// assignment revisions in `assignments`): ten digits, so that names sort as numbers.
pub(super) fn numbered_name(n: u64) -> String {
    format!("{n:010}.json")
}

/// The number of a file named by `numbered_name`; `None` for any other name (a temporary file).
pub(super) fn parse_numbered_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn claim_name(epoch: u32) -> String {
    numbered_name(u64::from(epoch))
}

fn parse_claim_name(name: &str) -> Option<u32> {
    parse_numbered_name(name).and_then(|n| u32::try_from(n).ok())
}

/// What the release of an epoch that was claimed but never served holds, when its claim was a
/// take-over: the holder before it never released, so the next claimer still owes the
/// take-over's fencing (sealing that holder's last segment, say). A release of a served epoch
/// is empty.
const TAKEOVER_OWED: &[u8] = b"takeover owed";

fn released_name(epoch: u32) -> String {
    format!("{epoch:010}.released")
}

/// Whether a claim newer than `epoch` exists for `key`: whoever holds `epoch` is no longer its
/// owner, whatever its lease says. A paused old owner asks this before a step a successor
/// could not see coming (a cleaned segment renamed in).
pub async fn superseded<V: Volume>(volume: &V, kind: Kind, key: &str, epoch: u32) -> io::Result<bool> {
    let path = join(&Claims::<V>::key_dir(kind, key), &claim_name(epoch + 1));
    Ok(volume.read(&path).await?.is_some())
}

/// Claims and releases epochs for one broker process; remembers the last epoch seen per key
/// so that probing starts there.
pub struct Claims<V: Volume> {
    volume: V,
    known: BTreeMap<(u8, String), u32>,
    /// Releases that failed (the volume refused the write), retried by `retry_releases`: a
    /// live broker that never releases holds its things from every peer for good.
    unreleased: BTreeMap<(Kind, String), (u32, bool)>,
    /// The last epoch this broker claimed per key whose claim file is known durable (its
    /// create, or a directory sync after it, succeeded).
    held: BTreeMap<(Kind, String), u32>,
    /// Claims whose create failed after its entry may have been made (at the directory sync):
    /// peers may see them and wait. Each is taken up by the next `try_claim` of its key that
    /// finds it, or else released by `retry_releases` once read back as ours.
    /// With each, whether it was a take-over.
    uncertain: BTreeMap<(Kind, String), (ClaimFile, bool)>,
}

pub(super) fn corrupt(path: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {why}"))
}

impl<V: Volume> Claims<V> {
    pub fn new(volume: V) -> Self {
        Claims {
            volume,
            known: BTreeMap::new(),
            unreleased: BTreeMap::new(),
            held: BTreeMap::new(),
            uncertain: BTreeMap::new(),
        }
    }

    fn key_dir(kind: Kind, key: &str) -> String {
        join(&join(OWNERS_DIR, kind.dir()), key)
    }

    async fn read_claim(&self, path: &str) -> io::Result<Option<ClaimFile>> {
        let Some(raw) = self.volume.read(path).await? else { return Ok(None) };
        let claim: ClaimFile = serde_json::from_slice(&raw).map_err(|e| corrupt(path, e))?;
        if claim.format_version != FORMAT_VERSION {
            return Err(corrupt(path, format!("unknown claim format version {}", claim.format_version)));
        }
        Ok(Some(claim))
    }

    /// The current epoch's claim, if any epoch was ever claimed.
    pub async fn current(&mut self, kind: Kind, key: &str) -> io::Result<Option<ClaimFile>> {
        let dir = Self::key_dir(kind, key);
        let slot = (kind as u8, key.to_string());
        let mut epoch = match self.known.get(&slot) {
            Some(&known) => known,
            // First look at this key: start from the newest listed epoch rather than probe
            // every epoch from 1. A listing may miss the newest entries (NFS), never invent one:
            // the probe forward below finds what it missed.
            None => self.volume.list(&dir).await?.iter().filter_map(|n| parse_claim_name(n)).max().unwrap_or(0),
        };
        let mut current = None;
        if epoch > 0 {
            current = self.read_claim(&join(&dir, &claim_name(epoch))).await?;
            if current.is_none() {
                // The directory was removed (a topic deleted): start over.
                epoch = 0;
            }
        }
        while let Some(claim) = self.read_claim(&join(&dir, &claim_name(epoch + 1))).await? {
            if claim.epoch != epoch + 1 {
                return Err(corrupt(&dir, format!("epoch {} in the file of epoch {}", claim.epoch, epoch + 1)));
            }
            epoch += 1;
            current = Some(claim);
        }
        self.known.insert(slot, epoch);
        Ok(current)
    }

    /// Every key of `kind` ever claimed, with its newest claim and whether that was released:
    /// what an operator's report shows. Keys are found by listing, fine for a report (never
    /// for a decision, see above); a damaged claim is reported as the error.
    pub async fn report(&mut self, kind: Kind) -> io::Result<Vec<(String, io::Result<(ClaimFile, bool)>)>> {
        let dir = join(OWNERS_DIR, kind.dir());
        let mut keys = self.volume.list(&dir).await?;
        keys.sort();
        let mut rows = Vec::new();
        for key in keys {
            let claim = match self.current(kind, &key).await {
                Ok(Some(claim)) => claim,
                Ok(None) => continue,
                Err(e) => {
                    rows.push((key, Err(e)));
                    continue;
                }
            };
            let release = join(&Self::key_dir(kind, &key), &released_name(claim.epoch));
            let released = self.volume.read(&release).await.map(|r| r.is_some());
            rows.push((key, released.map(|released| (claim, released))));
        }
        Ok(rows)
    }

    /// The broker holding the newest epoch of `key` unreleased; `None` when no one does (never
    /// claimed, or given up and not yet claimed again).
    pub async fn holder(&mut self, kind: Kind, key: &str) -> io::Result<Option<i32>> {
        let Some(claim) = self.current(kind, key).await? else { return Ok(None) };
        let release = join(&Self::key_dir(kind, key), &released_name(claim.epoch));
        Ok(self.volume.read(&release).await?.is_none().then_some(claim.broker_id))
    }

    /// Claims the next epoch of `key` for this broker if its holder released it or is gone.
    /// `Ok(None)`: someone else holds it, or won the race.
    pub async fn try_claim(
        &mut self,
        kind: Kind,
        key: &str,
        view: &ClusterView,
        now: Instant,
    ) -> io::Result<Option<Claimed>> {
        let claimed = self.claim(kind, key, view, now).await?;
        if let Some(c) = &claimed {
            // Epochs strictly increase on every change of owner, so what is held is the newest
            // epoch of its key that this broker has seen: an older one could not keep the next
            // claimer waiting, nor the old one's late writes out.
            let newest = self.known_epoch(kind, key).unwrap_or(0);
            debug_assert!(c.epoch >= newest, "{key}: holds epoch {} but epoch {newest} exists", c.epoch);
            if c.epoch < newest {
                return Err(corrupt(&Self::key_dir(kind, key), format!("epoch {} held below {newest}", c.epoch)));
            }
        }
        Ok(claimed)
    }

    async fn claim(&mut self, kind: Kind, key: &str, view: &ClusterView, now: Instant) -> io::Result<Option<Claimed>> {
        let dir = Self::key_dir(kind, key);
        let current = self.current(kind, key).await?;
        let (epoch, takeover) = match &current {
            None => (1, false),
            Some(c) => {
                let release = self.volume.read(&join(&dir, &released_name(c.epoch))).await?;
                let released = release.is_some();
                let takeover_owed = release.as_deref() == Some(TAKEOVER_OWED);
                let own_earlier_session =
                    c.broker_id == view.me && c.incarnation == view.incarnation && c.session < view.session;
                let gone =
                    view.holder_gone(c.broker_id, c.incarnation, now) || crate::mutant!(TakeoverBeforeLeaseExpiry);
                if !released && !own_earlier_session && !gone {
                    return Ok(None);
                }
                // A claim given up whose release is still owed (the volume refused it) is no
                // longer ours: the retry would release it under us, and a peer would claim the
                // next epoch while we still wrote. A new epoch supersedes it instead.
                let release_owed =
                    self.unreleased.get(&(kind, key.to_string())).is_some_and(|&(epoch, _)| epoch == c.epoch);
                if c.broker_id == view.me
                    && c.incarnation == view.incarnation
                    && c.session == view.session
                    && !released
                    && !release_owed
                {
                    // Ours in this very session and never given up: still ours. If its create
                    // failed at the directory sync, it is made durable before it is used, and
                    // it is the take-over it was made as (one of unknown making counts as one).
                    let mut takeover = false;
                    if self.held.get(&(kind, key.to_string())) != Some(&c.epoch) {
                        self.volume.sync_dir(&dir).await?;
                        self.held.insert((kind, key.to_string()), c.epoch);
                        takeover = self.uncertain.get(&(kind, key.to_string())).is_none_or(|(_, t)| *t);
                    }
                    self.uncertain.remove(&(kind, key.to_string()));
                    return Ok(Some(Claimed { epoch: c.epoch, takeover }));
                }
                if c.broker_id != view.me
                    && let Some(&old) = self.held.get(&(kind, key.to_string()))
                    && crate::mutant!(EpochNotBumpedOnReturn)
                {
                    return Ok(Some(Claimed { epoch: old, takeover: true }));
                }
                (c.epoch + 1, !released || takeover_owed)
            }
        };
        self.volume.create_dir_all(&dir).await?;
        let claim = ClaimFile {
            format_version: FORMAT_VERSION,
            epoch,
            broker_id: view.me,
            incarnation: view.incarnation,
            session: view.session,
        };
        let path = join(&dir, &claim_name(epoch));
        let raw = Bytes::from(serde_json::to_vec(&claim).expect("json"));
        match self.volume.create_exclusive(&path, raw).await {
            Ok(()) => {}
            // A lost reply to our own create looks like this too: read it to tell.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if self.read_claim(&path).await? != Some(claim) {
                    self.known.insert((kind as u8, key.to_string()), epoch);
                    return Ok(None);
                }
                // Ours, from a call whose reply was lost: durable only once its directory is.
                self.volume.sync_dir(&dir).await?;
            }
            Err(e) => {
                // The entry may be there for peers to see: if nothing takes it up, it must be
                // released, or its holder (alive, never giving it up) blocks every peer.
                self.uncertain.insert((kind, key.to_string()), (claim, takeover));
                return Err(e);
            }
        }
        self.uncertain.remove(&(kind, key.to_string()));
        self.known.insert((kind as u8, key.to_string()), epoch);
        self.held.insert((kind, key.to_string()), epoch);
        // A newer epoch of our own: the older one needs no release any more.
        self.unreleased.remove(&(kind, key.to_string()));
        Ok(Some(Claimed { epoch, takeover }))
    }

    /// Gives `epoch` of `key` up, after the last write under it: the next owner need not wait
    /// for this broker's lease to run out. A release the volume refuses is kept and tried
    /// again by `retry_releases`.
    pub async fn release(&mut self, kind: Kind, key: &str, epoch: u32) {
        self.release_marked(kind, key, epoch, false).await;
    }

    /// `release`, of an epoch never served whose claim was a take-over if `takeover_owed`.
    async fn release_marked(&mut self, kind: Kind, key: &str, epoch: u32, takeover_owed: bool) {
        let path = join(&Self::key_dir(kind, key), &released_name(epoch));
        let content = if takeover_owed { Bytes::from_static(TAKEOVER_OWED) } else { Bytes::new() };
        let mut made = self.volume.create_exclusive(&path, content).await;
        if matches!(&made, Err(e) if e.kind() == io::ErrorKind::AlreadyExists) {
            // An earlier try may have failed at the directory sync after the entry was made.
            made = self.volume.sync_dir(&Self::key_dir(kind, key)).await;
        }
        match made {
            Err(e) => {
                tracing::warn!(kind = kind.dir(), key, epoch, error = %e, "cannot release yet; will retry");
                self.unreleased.insert((kind, key.to_string()), (epoch, takeover_owed));
            }
            _ => {
                self.unreleased.remove(&(kind, key.to_string()));
            }
        }
    }

    /// Tries the failed releases again, and releases the uncertain claims found to be ours.
    pub async fn retry_releases(&mut self) {
        for ((kind, key), (claim, takeover)) in std::mem::take(&mut self.uncertain) {
            let path = join(&Self::key_dir(kind, &key), &claim_name(claim.epoch));
            match self.read_claim(&path).await {
                Ok(Some(found)) if found == claim => self.release_marked(kind, &key, claim.epoch, takeover).await,
                // Never made, or another broker's: nothing of ours to give up.
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(kind = kind.dir(), key, epoch = claim.epoch, error = %e, "cannot read back a claim");
                    self.uncertain.insert((kind, key), (claim, takeover));
                }
            }
        }
        for ((kind, key), (epoch, takeover_owed)) in std::mem::take(&mut self.unreleased) {
            self.release_marked(kind, &key, epoch, takeover_owed).await;
        }
    }

    /// The claimed epoch of `key` last seen by this broker, if any.
    pub fn known_epoch(&self, kind: Kind, key: &str) -> Option<u32> {
        self.known.get(&(kind as u8, key.to_string())).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Rng;
    use crate::env::real::{RealRng, RealVolume};

    fn volume() -> RealVolume {
        RealVolume::new(std::env::temp_dir().join(format!("kaas-claims-{:x}", RealRng::default().next_u64())))
    }

    async fn write_claim(volume: &RealVolume, dir: &str, epoch: u32) {
        let claim = ClaimFile { format_version: FORMAT_VERSION, epoch, broker_id: 1, incarnation: 9, session: 0 };
        volume
            .create_exclusive(&join(dir, &claim_name(epoch)), serde_json::to_vec(&claim).unwrap().into())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_fresh_broker_finds_the_newest_epoch_listed_and_those_the_listing_missed() {
        let volume = volume();
        let dir = Claims::<RealVolume>::key_dir(Kind::Partition, "t-0");
        volume.create_dir_all(&dir).await.unwrap();
        // Epochs 1..=4 long gone (pruned, say): a broker finds the newest by listing, not by
        // probing from 1, which would stop at the first gap.
        for epoch in 5..=7 {
            write_claim(&volume, &dir, epoch).await;
        }
        volume.create_exclusive(&join(&dir, &released_name(7)), Bytes::new()).await.unwrap();
        let mut claims = Claims::new(volume.clone());
        assert_eq!(claims.current(Kind::Partition, "t-0").await.unwrap().map(|c| c.epoch), Some(7));
        assert_eq!(claims.known_epoch(Kind::Partition, "t-0"), Some(7));
        // Made after this broker looked: found by probing forward from what it knows.
        write_claim(&volume, &dir, 8).await;
        assert_eq!(claims.current(Kind::Partition, "t-0").await.unwrap().map(|c| c.epoch), Some(8));
        assert_eq!(Claims::new(volume.clone()).current(Kind::Partition, "t-1").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_claim_given_up_whose_release_failed_is_superseded_not_taken_up_again() {
        let volume = volume();
        let view = ClusterView::standalone(1, crate::env::Clock::monotonic(&crate::env::real::RealClock));
        let now = crate::env::Clock::monotonic(&crate::env::real::RealClock);
        let mut claims = Claims::new(volume.clone());
        let dir = Claims::<RealVolume>::key_dir(Kind::Group, "group-g");
        assert_eq!(claims.try_claim(Kind::Group, "group-g", &view, now).await.unwrap().map(|c| c.epoch), Some(1));
        // The volume refuses the release: the directory is away for the moment.
        volume.rename(&dir, "moved-away").await.unwrap();
        claims.release(Kind::Group, "group-g", 1).await;
        volume.rename("moved-away", &dir).await.unwrap();
        assert_eq!(volume.read(&join(&dir, &released_name(1))).await.unwrap(), None);
        // Taken again in the same session: epoch 1's release is still owed, so it cannot be
        // held again (the retry would release it under its holder).
        let claimed = claims.try_claim(Kind::Group, "group-g", &view, now).await.unwrap().expect("claimed");
        assert_eq!((claimed.epoch, claimed.takeover), (2, true));
        claims.retry_releases().await;
        assert_eq!(volume.read(&join(&dir, &released_name(1))).await.unwrap(), None, "no release owed any more");
        assert_eq!(volume.read(&join(&dir, &released_name(2))).await.unwrap(), None, "epoch 2 is held");
        assert_eq!(claims.current(Kind::Group, "group-g").await.unwrap().map(|c| c.epoch), Some(2));
    }

    #[test]
    fn only_claim_files_name_an_epoch() {
        assert_eq!(parse_claim_name(&claim_name(42)), Some(42));
        for name in [released_name(42), "0000000042.json.77.excl".into(), "42.json".into(), "+000000042.json".into()] {
            assert_eq!(parse_claim_name(&name), None, "{name}");
        }
    }
}
