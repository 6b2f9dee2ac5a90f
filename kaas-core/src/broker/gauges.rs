//! The gauges a scrape asks the actors for, rather than counts kept as things happen (those
//! are `crate::metrics`): open transactions and the oldest one's age, each owned partition's
//! LSO lag, and the lag of every group this broker coordinates. Each is answered where it is
//! known: transactions by their coordinator, a partition's watermarks by its owner, a group's
//! lag by its coordinator (asking the partitions' owners on peers for their high watermarks).

use std::collections::BTreeMap;

use super::Broker;
use crate::cluster::partition_key;
use crate::env::{Clock, Env};
use crate::txn::state::TxnState;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Transactions open (ongoing or ending) on the slots this broker holds.
    pub transactions_open: usize,
    /// The oldest one's age (0: none open).
    pub oldest_transaction_ms: i64,
    /// (topic, partition, high watermark - last stable offset) of owned partitions with a lag.
    pub lso_lags: Vec<(String, i32, i64)>,
    /// (group, lag summed over its partitions) of the consumer and classic groups coordinated
    /// here that committed offsets; a group whose partitions' ends could not all be read is left
    /// out rather than shown too small.
    pub consumer_group_lags: Vec<(String, i64)>,
    /// (group, KIP-1226 lag summed over its share partitions) of the share groups coordinated here.
    pub share_group_lags: Vec<(String, i64)>,
}

impl<E: Env> Broker<E> {
    pub async fn gauges(&self) -> Gauges {
        let now_ms = self.env.clock().now_ms();
        let open: Vec<i64> = match self.txn.list().await {
            Ok(entries) => entries
                .iter()
                .filter(|e| matches!(e.state, TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort))
                .map(|e| e.ongoing_since_ms)
                .collect(),
            Err(_) => Vec::new(),
        };
        let snapshot = self.topics.snapshot();
        let lso_lags = snapshot
            .topics
            .iter()
            .flat_map(|(name, t)| t.partitions.iter().enumerate().map(move |(p, h)| (name, p as i32, h.watermarks())))
            .filter(|(_, _, w)| w.owned && w.high_watermark > w.last_stable_offset)
            .map(|(name, p, w)| (name.clone(), p, w.high_watermark - w.last_stable_offset))
            .collect();
        let mut gauges = Gauges {
            transactions_open: open.len(),
            oldest_transaction_ms: open.iter().map(|since| (now_ms - since).max(0)).max().unwrap_or(0),
            lso_lags,
            ..Gauges::default()
        };
        for group in self.groups.list().await.unwrap_or_default() {
            match group.group_type {
                "share" => {
                    let Ok(topics) = self.describe_share_offsets(&group.group_id, None, false).await else { continue };
                    let lag = topics.iter().flat_map(|(_, _, ps)| ps).filter_map(|(_, o)| o.as_ref().ok()?.as_ref());
                    gauges.share_group_lags.push((group.group_id, lag.map(|o| o.lag.max(0)).sum()));
                }
                _ => {
                    if let Some(lag) = self.consumer_group_lag(&group.group_id).await {
                        gauges.consumer_group_lags.push((group.group_id, lag));
                    }
                }
            }
        }
        gauges
    }

    /// A group's committed offsets' distance to the high watermarks, summed; `None` if it
    /// committed nothing or an end could not be read.
    async fn consumer_group_lag(&self, group_id: &str) -> Option<i64> {
        let committed = self.groups.fetch(group_id.to_string(), None, false).await.ok()?;
        let committed: Vec<((String, i32), i64)> =
            committed.into_iter().filter_map(|(tp, o)| Some((tp, o.ok()??.offset))).collect();
        if committed.is_empty() {
            return None;
        }
        let snapshot = self.topics.snapshot();
        let view = self.membership.view();
        let mut ends: BTreeMap<(String, i32), i64> = BTreeMap::new();
        let mut on_peers: BTreeMap<crate::cluster::Endpoint, Vec<(String, i32)>> = BTreeMap::new();
        for ((topic, p), _) in &committed {
            let watermarks = snapshot.partition(topic, *p)?.watermarks();
            match view.peer_owning(&partition_key(topic, *p)) {
                None if watermarks.owned => {
                    ends.insert((topic.clone(), *p), watermarks.high_watermark);
                }
                None => return None, // nobody owns it now
                Some(peer) => on_peers.entry(peer).or_default().push((topic.clone(), *p)),
            }
        }
        for (peer, partitions) in on_peers {
            for (tp, end) in self.peers.high_watermarks(peer, partitions).await.ok()? {
                ends.insert(tp, end);
            }
        }
        committed.iter().map(|(tp, offset)| ends.get(tp).map(|end| (end - offset).max(0))).sum()
    }
}
