//! `kaas admin cluster`: the brokers (DescribeCluster) and each partition's owner and
//! ownership epoch (Metadata's leader and leader epoch); with `--data-dir`, what the volume
//! says instead: each broker's lease, and every claim with its epoch, holder and release.

use std::path::{Path, PathBuf};

use kaas_core::cluster::report;
use kaas_core::env::real::RealEnv;
use kafka_protocol::messages::*;

use super::connection::{Admin, check};
use super::table::Table;
use crate::cells;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shared volume's directory (a broker's --data-dir): read the leases and claims from
    /// it, no broker asked
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// How long to watch the leases: a lease whose renewal counter moves meanwhile is renewing
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    pub watch_ms: u64,
}

pub async fn run(admin: &mut Admin, _: Args) -> Result<Vec<Table>, String> {
    let request = DescribeClusterRequest::default();
    let described: DescribeClusterResponse = admin.call(ApiKey::DescribeCluster, 1, &request).await?;
    check("DescribeCluster", described.error_code, described.error_message.as_ref())?;
    let mut brokers = Table::new("brokers", &["BROKER", "HOST", "PORT", "RACK", "CONTROLLER"]);
    for b in &described.brokers {
        let controller = if b.broker_id == described.controller_id { "yes" } else { "" };
        brokers.row(cells![b.broker_id.0, b.host.as_str(), b.port, super::or_dash(b.rack.as_deref()), controller]);
    }
    let owners = super::topics::owners(admin, None).await?;
    let mut partitions = Table::new("partitions", &["TOPIC", "PARTITION", "OWNER", "EPOCH", "ERROR"]);
    for ((t, p), owner) in &owners {
        match owner {
            Ok((owner, epoch)) => partitions.row(cells![t, p, owner, epoch, ""]),
            Err(e) => partitions.row(cells![t, p, "-", "-", e]),
        }
    }
    let mut about = Table::new("cluster", &["CLUSTER ID", "BROKERS", "PARTITIONS"]);
    about.row(cells![described.cluster_id.as_str(), brokers.rows.len(), partitions.rows.len()]);
    Ok(vec![about, brokers, partitions])
}

/// The volume's view: leases and claims.
pub async fn volume(dir: &Path, watch_ms: u64) -> Result<Vec<Table>, String> {
    if !dir.join(kaas_core::cluster::lease::BROKERS_DIR).is_dir() {
        return Err(format!("{}: no kaas cluster here (no {})", dir.display(), kaas_core::cluster::lease::BROKERS_DIR));
    }
    let env = RealEnv::new(dir);
    let report = report::read(&env, watch_ms).await.map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut leases =
        Table::new("leases", &["BROKER", "HOST", "PORT", "INCARNATION", "SESSION", "RENEWAL", "STATE", "ERROR"]);
    for row in &report.leases {
        match &row.lease {
            Ok(l) => {
                let state = match (l.leaving, row.renewing) {
                    (true, _) => "left",
                    (false, true) => "renewing",
                    (false, false) => "stale",
                };
                leases.row(cells![
                    row.broker_id,
                    l.host,
                    l.port,
                    format!("{:016x}", l.incarnation),
                    l.session,
                    l.renewal,
                    state,
                    ""
                ]);
            }
            Err(e) => leases.row(cells![row.broker_id, "-", "-", "-", "-", "-", "unreadable", e]),
        }
    }
    let mut claims = Table::new("claims", &["KIND", "KEY", "EPOCH", "BROKER", "SESSION", "RELEASED", "ERROR"]);
    // Keys in natural order: orders-2 before orders-10.
    let natural = |key: &str| {
        let digits = key.len() - key.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (stem, number) = key.split_at(key.len() - digits);
        (stem.to_string(), number.parse::<u64>().unwrap_or(0))
    };
    let mut rows: Vec<_> = report.claims.iter().collect();
    rows.sort_by_key(|r| (r.kind, natural(&r.key)));
    for row in rows {
        match &row.claim {
            Ok((c, released)) => {
                claims.row(cells![row.kind.name(), row.key, c.epoch, c.broker_id, c.session, released, ""])
            }
            Err(e) => claims.row(cells![row.kind.name(), row.key, "-", "-", "-", "-", e]),
        }
    }
    Ok(vec![leases, claims])
}
