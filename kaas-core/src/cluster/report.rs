//! What the volume says of the cluster, for an operator (`kaas admin cluster --data-dir`): each
//! broker's lease, and who claimed each partition, group and transaction slot at which epoch.
//! Read-only; nothing here decides anything. A lease is alive while its renewal counter moves,
//! so the report reads the leases twice, a heartbeat apart.

use std::io;

use super::claims::{ClaimFile, Claims, Kind};
use super::lease::{self, BROKERS_DIR, LeaseFile};
use crate::env::{Clock, Env, Volume};

#[derive(Debug)]
pub struct LeaseRow {
    pub broker_id: i32,
    /// The lease as read last, or why it could not be.
    pub lease: Result<LeaseFile, String>,
    /// Whether its renewal counter moved between the two reads.
    pub renewing: bool,
}

#[derive(Debug)]
pub struct ClaimRow {
    pub kind: Kind,
    pub key: String,
    /// The newest claim and whether it was released, or why it could not be read.
    pub claim: Result<(ClaimFile, bool), String>,
}

#[derive(Debug)]
pub struct VolumeReport {
    pub leases: Vec<LeaseRow>,
    pub claims: Vec<ClaimRow>,
}

async fn read_leases<V: Volume>(volume: &V) -> io::Result<Vec<(i32, Result<LeaseFile, String>)>> {
    let mut ids: Vec<i32> = volume.list(BROKERS_DIR).await?.iter().filter_map(|n| lease::parse_name(n)).collect();
    ids.sort();
    let mut leases = Vec::new();
    for id in ids {
        let read = match volume.read(&lease::path(id)).await {
            Ok(Some(raw)) => LeaseFile::decode(&raw, id),
            Ok(None) => continue,
            Err(e) => Err(e.to_string()),
        };
        leases.push((id, read));
    }
    Ok(leases)
}

/// The report, its leases read `watch_ms` apart.
pub async fn read<E: Env>(env: &E, watch_ms: u64) -> io::Result<VolumeReport> {
    let volume = env.volume();
    let first = read_leases(volume).await?;
    env.clock().sleep_ms(watch_ms).await;
    let leases = read_leases(volume)
        .await?
        .into_iter()
        .map(|(broker_id, lease)| {
            let before = first.iter().find(|(id, _)| *id == broker_id).and_then(|(_, l)| l.as_ref().ok());
            let renewing = match (&lease, before) {
                (Ok(now), Some(before)) => {
                    (now.incarnation, now.session, now.renewal) != (before.incarnation, before.session, before.renewal)
                }
                _ => false,
            };
            LeaseRow { broker_id, lease, renewing }
        })
        .collect();
    let mut claims = Vec::new();
    let mut reader = Claims::new(volume.clone());
    for kind in Kind::ALL {
        for (key, claim) in reader.report(kind).await? {
            claims.push(ClaimRow { kind, key, claim: claim.map_err(|e| e.to_string()) });
        }
    }
    Ok(VolumeReport { leases, claims })
}
