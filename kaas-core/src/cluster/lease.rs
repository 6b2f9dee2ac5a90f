//! The lease file of one broker, `__cluster/brokers/kaas-<id>.json`: who it is, where clients
//! reach it, which process holds it (the incarnation, drawn at each start) and how many times
//! that process renewed it. Peers never read a time from it: a lease is alive while its renewal
//! counter keeps changing, timed on the reader's own clock.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::listeners::ListenerAddress;
use crate::env::join;

pub const BROKERS_DIR: &str = "__cluster/brokers";
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFile {
    pub format_version: u32,
    pub broker_id: i32,
    /// Where peers reach this broker: its inter-broker listener's advertised address.
    pub host: String,
    pub port: i32,
    /// Every advertised listener, clients being told the one they came in on. Absent from a
    /// lease written before listeners had names: then `host:port` serves every client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerAddress>,
    /// Random per process start: two processes with one broker id tell each other apart by it.
    pub incarnation: u64,
    /// Counts the times this incarnation's lease lapsed and was taken up again: a broker that
    /// could not renew in time starts a new session, and owns nothing of its earlier one.
    pub session: u64,
    /// Renewals in this session, from 1. Peers count them for the settle period.
    pub renewal: u64,
    /// Written by a graceful shutdown after everything was handed over: peers need not wait
    /// for the lease to run out.
    pub leaving: bool,
}

pub fn path(broker_id: i32) -> String {
    join(BROKERS_DIR, &format!("kaas-{broker_id}.json"))
}

/// The broker id of a lease file name, `kaas-<id>.json`.
pub fn parse_name(name: &str) -> Option<i32> {
    name.strip_prefix("kaas-")?.strip_suffix(".json")?.parse().ok().filter(|id: &i32| *id >= 0)
}

impl LeaseFile {
    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("serialisable"))
    }

    /// A lease as read, or why it cannot be trusted: torn, another format, another broker's.
    pub fn decode(raw: &[u8], broker_id: i32) -> Result<LeaseFile, String> {
        let lease: LeaseFile = serde_json::from_slice(raw).map_err(|e| format!("unreadable lease: {e}"))?;
        if lease.format_version != FORMAT_VERSION {
            return Err(format!("unknown lease format version {}", lease.format_version));
        }
        if lease.broker_id != broker_id {
            return Err(format!("lease of broker {} in the file of broker {broker_id}", lease.broker_id));
        }
        Ok(lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_round_trips_and_damage_is_refused() {
        let lease = LeaseFile {
            format_version: FORMAT_VERSION,
            broker_id: 2,
            host: "kaas-2".into(),
            port: 9092,
            listeners: vec![ListenerAddress { listener: "SSL".into(), host: "kaas-2".into(), port: 9093 }],
            incarnation: 7,
            session: 0,
            renewal: 3,
            leaving: false,
        };
        assert_eq!(LeaseFile::decode(&lease.encode(), 2), Ok(lease.clone()));
        assert!(LeaseFile::decode(&lease.encode(), 1).is_err());
        assert!(LeaseFile::decode(&lease.encode()[..10], 2).is_err());
        let future = LeaseFile { format_version: 9, ..lease };
        assert!(LeaseFile::decode(&future.encode(), 2).unwrap_err().contains("version"));
        let older = br#"{"format_version":1,"broker_id":2,"host":"h","port":1,"incarnation":1,"session":0,"renewal":1,"leaving":false}"#;
        assert_eq!(LeaseFile::decode(older, 2).unwrap().listeners, vec![], "a lease without listeners is read");
        assert_eq!(parse_name("kaas-12.json"), Some(12));
        assert_eq!(parse_name("kaas-x.json"), None);
        assert_eq!(parse_name("kaas-1.json.tmp"), None);
    }
}
