//! Producer-state snapshots: `<offset>.snapshot` in the partition directory holds the producer
//! state as of log offset `offset` (everything below it applied): each producer's dedupe
//! window and open transaction, and the index of aborted transactions. Written on segment roll and
//! on shutdown; on start-up the newest one at or below the log end is loaded and the batch
//! headers after it are applied, so the state matches the log exactly.
//!
//! Layout: format version (u32, big-endian), CRC32C of the rest (u32), then JSON. A snapshot
//! that fails either check is reported and not used: the log itself is scanned instead.

use bytes::{BufMut, Bytes, BytesMut};

use super::state::{Event, ProducerStates};
use crate::env::{Volume, join};
use crate::partition::log::{LogError, PartitionLog};

const FORMAT_VERSION: u32 = 1;
const SUFFIX: &str = ".snapshot";
/// Snapshots kept per partition; older ones are removed once a new one is durable.
pub const KEPT: usize = 2;

/// `<offset>.snapshot`, or `<offset>-<epoch>.snapshot` when written under an ownership epoch.
pub fn name(offset: i64, epoch: u32) -> String {
    if epoch == 0 { format!("{offset:020}{SUFFIX}") } else { format!("{offset:020}-{epoch}{SUFFIX}") }
}

pub fn parse_name(name: &str) -> Option<(i64, u32)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let (digits, epoch) = match stem.split_once('-') {
        Some((digits, epoch)) => (digits, epoch.parse().ok().filter(|e: &u32| *e > 0)?),
        None => (stem, 0),
    };
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, epoch))
}

pub fn encode(states: &ProducerStates) -> Bytes {
    frame(&serde_json::to_vec(states).expect("serialisable"))
}

/// The header (format version, CRC) and the payload.
fn frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(payload.len() + 8);
    b.put_u32(FORMAT_VERSION);
    b.put_u32(crc32c::crc32c(payload));
    b.put_slice(payload);
    b.freeze()
}

pub fn decode(raw: &[u8]) -> Result<ProducerStates, String> {
    if raw.len() < 8 {
        return Err(format!("{} bytes, shorter than the header", raw.len()));
    }
    let version = u32::from_be_bytes(raw[..4].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!("unknown format version {version}"));
    }
    let crc = u32::from_be_bytes(raw[4..8].try_into().expect("4 bytes"));
    if crc32c::crc32c(&raw[8..]) != crc {
        return Err("CRC mismatch".into());
    }
    let states: ProducerStates = serde_json::from_slice(&raw[8..]).map_err(|e| format!("unreadable: {e}"))?;
    match states.broken() {
        Some(invariant) => Err(format!("broken invariant: {invariant}")),
        None => Ok(states),
    }
}

/// The producer state of `log`: the newest readable snapshot at or below the log end, then
/// every batch after it (all of them if there is no snapshot).
pub async fn restore<V: Volume>(volume: &V, log: &PartitionLog<V>) -> Result<ProducerStates, LogError> {
    let dir = log.dir();
    let mut offsets: Vec<(i64, u32)> = volume.list(dir).await?.iter().filter_map(|n| parse_name(n)).collect();
    offsets.sort_unstable_by(|a, b| b.cmp(a));
    let mut restored = None;
    for (offset, epoch) in offsets {
        let path = join(dir, &name(offset, epoch));
        if epoch > log.epoch() || offset > log.epoch_end(epoch) {
            // A paused old owner's, written after the take-over sealed its log (or a newer
            // owner's, which the log's open would have refused): never read.
            tracing::warn!(path, "skipping a snapshot of another owner's epoch");
            continue;
        }
        if offset > log.log_end_offset() {
            // It describes batches a crash took back: it must never be read again.
            tracing::warn!(path, log_end_offset = log.log_end_offset(), "removing a snapshot past the log end");
            volume.remove_file(&path).await?;
            continue;
        }
        let Some(raw) = volume.read(&path).await? else { continue };
        match decode(&raw) {
            Ok(states) => {
                tracing::debug!(path, "restoring producer state from snapshot");
                restored = Some((offset, states));
                break;
            }
            Err(why) => tracing::error!(path, why, "unusable producer state snapshot: rebuilding from the log"),
        }
    }
    let (from, mut states) = match restored {
        Some((_, states)) if crate::mutant!(SnapshotWithoutTailScan) => return Ok(states),
        Some((offset, states)) => (offset, states),
        None => {
            let mut states = ProducerStates::default();
            if log.log_start_offset() > 0 {
                states.transition(Event::HistoryLost);
            }
            (log.log_start_offset(), states)
        }
    };
    states.transition(Event::LogStartMoved { log_start_offset: log.log_start_offset() });
    let from = from.max(log.log_start_offset());
    for (header, marker) in log.batch_headers(from).await? {
        if header.producer_id < 0 || header.base_offset < from {
            continue;
        }
        let event = match marker {
            Some(marker) => Event::Marker {
                producer_id: header.producer_id,
                producer_epoch: header.producer_epoch,
                marker,
                offset: header.base_offset,
            },
            None => Event::Batch { header: &header, base_offset: header.base_offset },
        };
        states.transition(event);
    }
    // What a take-over serves from: every invariant holds of it (the snapshot's were checked
    // when it was read, the tail's by each transition).
    states.check_invariants();
    Ok(states)
}

/// Writes the state as of the log end offset `offset` (atomic replace) and removes snapshots
/// older than the last `KEPT`.
pub async fn write<V: Volume>(
    volume: &V,
    dir: &str,
    offset: i64,
    epoch: u32,
    states: &ProducerStates,
) -> std::io::Result<()> {
    volume.write_atomic(&join(dir, &name(offset, epoch)), encode(states)).await?;
    let mut offsets: Vec<(i64, u32)> = volume.list(dir).await?.iter().filter_map(|n| parse_name(n)).collect();
    offsets.sort_unstable();
    for &(old, old_epoch) in offsets.iter().rev().skip(KEPT) {
        volume.remove_file(&join(dir, &name(old, old_epoch))).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_round_trips_and_damage_is_detected() {
        let mut states = ProducerStates::default();
        let header = crate::partition::producer::state::tests::batch(1 << 40, 3, 9, 3);
        states.transition(Event::Batch { header: &header, base_offset: 42 });
        let raw = encode(&states);
        assert_eq!(decode(&raw).unwrap(), states);
        let mut flipped = raw.to_vec();
        let last = flipped.len() - 2;
        flipped[last] ^= 1;
        assert!(decode(&flipped).unwrap_err().contains("CRC"));
        let mut future = raw.to_vec();
        future[3] = 9;
        assert!(decode(&future).unwrap_err().contains("format version"));
        assert!(decode(&raw[..5]).is_err());
        // Whole and readable, but not a state any transition leaves: refused, not trusted.
        let json = String::from_utf8(raw[8..].to_vec()).unwrap().replace("\"base_offset\":42", "\"base_offset\":99");
        let broken = frame(json.as_bytes());
        assert!(decode(&broken).unwrap_err().contains("batch's offsets run forward"), "{json}");
        assert_eq!(parse_name(&name(42, 0)), Some((42, 0)));
        assert_eq!(parse_name(&name(42, 3)), Some((42, 3)));
        assert_eq!(parse_name("00000000000000000042-0.snapshot"), None);
        assert_eq!(parse_name("00000000000000000042.log"), None);
    }
}
