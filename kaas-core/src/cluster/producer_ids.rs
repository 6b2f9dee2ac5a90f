//! Producer ids, never handed out twice: `pid = (broker_id + 1) * 2^40 + local`, each broker
//! the only writer of its slice. `local` comes from blocks of `BLOCK_SIZE` whose end is
//! persisted (`__cluster/producer_ids/kaas-<id>.json`, atomic replace) before any id of the
//! block is used, so a crash skips ids forward and never hands one out again.
//!
//! An actor owns the allocator, so allocations are serialised without a lock.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::env::{Env, Spawner, Volume, join};
use crate::error::{CoreError, CoreResult};

pub const PRODUCER_IDS_DIR: &str = "__cluster/producer_ids";
pub const BLOCK_SIZE: i64 = 1000;
const FORMAT_VERSION: u32 = 1;
/// Bits of a producer id below the broker's slice.
const SLICE_BITS: u32 = 40;

#[derive(Serialize, Deserialize)]
struct BlockFile {
    format_version: u32,
    broker_id: i32,
    /// Every local id below this may have been handed out.
    block_end: i64,
}

fn path(broker_id: i32) -> String {
    join(PRODUCER_IDS_DIR, &format!("kaas-{broker_id}.json"))
}

struct Allocator<V: Volume> {
    volume: V,
    broker_id: i32,
    next: i64,
    /// End of the reserved block: `next..block_end` may be handed out.
    block_end: i64,
}

impl<V: Volume> Allocator<V> {
    async fn load(volume: V, broker_id: i32) -> CoreResult<Self> {
        volume.create_dir_all(PRODUCER_IDS_DIR).await.map_err(|e| CoreError::Storage(e.to_string()))?;
        let path = path(broker_id);
        let block_end = match volume.read(&path).await.map_err(|e| CoreError::Storage(e.to_string()))? {
            None => 0,
            Some(raw) => {
                let file: BlockFile = serde_json::from_slice(&raw)
                    .map_err(|e| CoreError::Storage(format!("{path}: unreadable producer id block: {e}")))?;
                if file.format_version != FORMAT_VERSION || file.broker_id != broker_id || file.block_end < 0 {
                    return Err(CoreError::Storage(format!("{path}: unknown format version or broker mismatch")));
                }
                file.block_end
            }
        };
        // Nothing of the persisted block is trusted: the last incarnation may have used it all.
        Ok(Allocator { volume, broker_id, next: block_end, block_end })
    }

    async fn persist(&self, block_end: i64) -> CoreResult<()> {
        let file = BlockFile { format_version: FORMAT_VERSION, broker_id: self.broker_id, block_end };
        let raw = Bytes::from(serde_json::to_vec(&file).expect("serialisable"));
        self.volume.write_atomic(&path(self.broker_id), raw).await.map_err(|e| CoreError::Storage(e.to_string()))
    }

    async fn allocate(&mut self) -> CoreResult<i64> {
        if self.next == self.block_end {
            let block_end = self.block_end + BLOCK_SIZE;
            if block_end > 1 << SLICE_BITS {
                return Err(CoreError::Storage("this broker's producer id slice is used up".into()));
            }
            if !crate::mutant!(PidBlockPersistedAfterUse) {
                self.persist(block_end).await?;
            }
            self.block_end = block_end;
        }
        let local = self.next;
        self.next += 1;
        if crate::mutant!(PidBlockPersistedAfterUse) && self.next == self.block_end {
            self.persist(self.block_end).await?;
        }
        assert!(local < self.block_end, "a producer id comes from a persisted block");
        Ok((i64::from(self.broker_id) + 1) * (1 << SLICE_BITS) + local)
    }
}

type Reply = oneshot::Sender<CoreResult<i64>>;

#[derive(Clone)]
pub struct ProducerIdsHandle {
    tx: mpsc::Sender<Reply>,
}

impl ProducerIdsHandle {
    /// A producer id no producer has had before, on this broker or any other.
    pub async fn allocate(&self) -> CoreResult<i64> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(reply).await.map_err(|_| CoreError::Storage("producer id allocator stopped".into()))?;
        rx.await.map_err(|_| CoreError::Storage("producer id allocator stopped".into()))?
    }
}

/// Loads this broker's block file and starts the allocator.
pub async fn start<E: Env>(env: &E, broker_id: i32) -> CoreResult<ProducerIdsHandle> {
    if broker_id < 0 {
        return Err(CoreError::InvalidConfig(format!("broker.id {broker_id} must not be negative")));
    }
    let mut allocator = Allocator::load(env.volume().clone(), broker_id).await?;
    let (tx, mut rx) = mpsc::channel::<Reply>(256);
    env.spawner().spawn("producer-ids", async move {
        while let Some(reply) = rx.recv().await {
            let _ = reply.send(allocator.allocate().await);
        }
    });
    Ok(ProducerIdsHandle { tx })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::real::RealEnv;
    use crate::env::{Rng, real::RealRng};

    #[tokio::test]
    async fn ids_are_unique_across_restarts_and_brokers() {
        let dir = std::env::temp_dir().join(format!("kaas-pids-{:x}", RealRng::default().next_u64()));
        let env = RealEnv::new(&dir);
        let mut seen = std::collections::BTreeSet::new();
        for _incarnation in 0..3 {
            let ids = start(&env, 0).await.unwrap();
            for _ in 0..1500 {
                assert!(seen.insert(ids.allocate().await.unwrap()), "a producer id was handed out twice");
            }
        }
        let other = start(&env, 1).await.unwrap().allocate().await.unwrap();
        assert!(seen.insert(other));
        assert_eq!(other, 2 << 40, "broker 1's slice starts at 2^41");
        assert!(seen.iter().take(4500).all(|pid| (1 << 40..2 << 40).contains(pid)));
        let file = std::fs::read_to_string(dir.join("__cluster/producer_ids/kaas-0.json")).unwrap(); // allow-nondeterminism: test
        assert!(file.contains("\"block_end\":6000"), "each restart skips to a fresh block: {file}");
        let _ = std::fs::remove_dir_all(dir); // allow-nondeterminism: test clean-up
    }
}
