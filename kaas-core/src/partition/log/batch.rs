//! The Kafka v2 record batch header: the only part of a batch the broker reads. Payloads stay
//! opaque bytes (compressed batches pass through untouched).
//!
//! ```text
//! offset  size  field
//!      0     8  base_offset            (rewritten by the broker on append)
//!      8     4  batch_length           (bytes after this field)
//!     12     4  partition_leader_epoch
//!     16     1  magic                  (2)
//!     17     4  crc                    (CRC-32C of bytes 21..)
//!     21     2  attributes
//!     23     4  last_offset_delta
//!     27     8  base_timestamp
//!     35     8  max_timestamp
//!     43     8  producer_id
//!     51     2  producer_epoch
//!     53     4  base_sequence
//!     57     4  records_count
//! ```

use bytes::{Bytes, BytesMut};

pub const HEADER_LEN: usize = 61;
/// Bytes before `batch_length` ends: a batch occupies `LOG_OVERHEAD + batch_length` bytes.
pub const LOG_OVERHEAD: usize = 12;
const CRC_START: usize = 21;
const MAGIC_V2: i8 = 2;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// Why a batch was refused. Each maps to one Kafka error code in kaas-net.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchError {
    /// Truncated, inconsistent lengths, or a CRC mismatch: CORRUPT_MESSAGE.
    Corrupt,
    /// Magic other than 2: UNSUPPORTED_FOR_MESSAGE_FORMAT.
    UnsupportedMagic,
    /// Well-formed but not acceptable from a producer (a control batch): INVALID_RECORD.
    InvalidRecord,
}

/// A parsed, CRC-checked batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl BatchHeader {
    /// Parses the fixed header from the first `HEADER_LEN` bytes; checks nothing but the magic.
    pub fn parse(b: &[u8]) -> Result<BatchHeader, BatchError> {
        if b.len() < HEADER_LEN {
            // A magic byte other than 2 is a v0/v1 message set, whose header is shorter.
            if b.len() > 16 && b[16] as i8 != MAGIC_V2 {
                return Err(BatchError::UnsupportedMagic);
            }
            return Err(BatchError::Corrupt);
        }
        let magic = b[16] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic);
        }
        Ok(BatchHeader {
            base_offset: i64_at(b, 0),
            batch_length: i32_at(b, 8),
            partition_leader_epoch: i32_at(b, 12),
            magic,
            crc: u32::from_be_bytes(b[17..21].try_into().expect("4 bytes")),
            attributes: i16_at(b, 21),
            last_offset_delta: i32_at(b, 23),
            base_timestamp: i64_at(b, 27),
            max_timestamp: i64_at(b, 35),
            producer_id: i64_at(b, 43),
            producer_epoch: i16_at(b, 51),
            base_sequence: i32_at(b, 53),
            records_count: i32_at(b, 57),
        })
    }

    /// Bytes the whole batch occupies in a log.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Header fields that must hold for any batch, from a producer or from our own log.
    fn check_shape(&self) -> Result<(), BatchError> {
        if (self.batch_length as usize) < HEADER_LEN - LOG_OVERHEAD {
            return Err(BatchError::Corrupt);
        }
        if self.last_offset_delta < 0 || self.records_count < 0 {
            return Err(BatchError::Corrupt);
        }
        Ok(())
    }
}

/// Checks one whole batch at the start of `b`: header, length, CRC. Returns the header.
pub fn check(b: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(b)?;
    header.check_shape()?;
    let total = header.total_len();
    if b.len() < total {
        return Err(BatchError::Corrupt);
    }
    if crc32c::crc32c(&b[CRC_START..total]) != header.crc {
        return Err(BatchError::Corrupt);
    }
    Ok(header)
}

/// Splits a produce request's `records` into CRC-checked batches. A producer's batch must hold
/// at least one record, with `records_count == last_offset_delta + 1`, and must not be a
/// control batch (only the transaction coordinator writes those).
pub fn split_produced(records: &Bytes) -> Result<Vec<(BatchHeader, Bytes)>, BatchError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let header = check(&records[at..])?;
        if header.records_count == 0 || header.records_count != header.last_offset_delta + 1 {
            return Err(BatchError::Corrupt);
        }
        if header.is_control() {
            return Err(BatchError::InvalidRecord);
        }
        let total = header.total_len();
        out.push((header, records.slice(at..at + total)));
        at += total;
    }
    if out.is_empty() {
        return Err(BatchError::Corrupt);
    }
    Ok(out)
}

/// The batch as the partition's leader stores it: `base_offset` in its first 8 bytes and the
/// leader's epoch in `partition_leader_epoch`, as Apache's leaders stamp it (clients compare it
/// with the leader epoch Metadata gives, KIP-320). The CRC covers neither, so the payload and
/// checksum stay as the producer sent them.
pub fn stamped(batch: &Bytes, base_offset: i64, partition_leader_epoch: i32) -> Bytes {
    let mut out = BytesMut::from(&batch[..]);
    out[0..8].copy_from_slice(&base_offset.to_be_bytes());
    out[12..16].copy_from_slice(&partition_leader_epoch.to_be_bytes());
    out.freeze()
}

/// The batch stamped with the broker's time, as Apache stamps a `LogAppendTime` topic's: the
/// timestamp type bit set, `max_timestamp` the time of the append (every record's timestamp, as
/// consumers read it), the CRC recomputed over both. The records are untouched.
pub fn with_log_append_time(header: &BatchHeader, batch: &Bytes, now_ms: i64) -> (BatchHeader, Bytes) {
    let mut out = BytesMut::from(&batch[..]);
    let attributes = header.attributes | ATTR_LOG_APPEND_TIME;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..header.total_len()]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    let stamped = BatchHeader { attributes, max_timestamp: now_ms, crc, ..*header };
    (stamped, out.freeze())
}

impl BatchHeader {
    /// Whether the batch's records carry the broker's time (`max_timestamp`) rather than their own.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A minimal valid uncompressed batch of `count` empty records, for tests.
    pub fn make_batch(base_offset: i64, count: i32, timestamp: i64) -> Bytes {
        let mut records = Vec::new();
        for i in 0..count {
            // length, attributes, timestamp delta, offset delta, key len -1, value len 0, headers 0
            let body = [0u8, 0, (i as u8) << 1, 1, 0, 0];
            records.push(body.len() as u8 * 2);
            records.extend_from_slice(&body);
        }
        let mut b = Vec::new();
        b.extend_from_slice(&base_offset.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes()); // length, fixed below
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&0u32.to_be_bytes()); // crc, fixed below
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&(count - 1).to_be_bytes());
        b.extend_from_slice(&timestamp.to_be_bytes());
        b.extend_from_slice(&timestamp.to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(&records);
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    /// `make_batch` stamped by an idempotent producer.
    pub fn make_producer_batch(count: i32, timestamp: i64, producer_id: i64, epoch: i16, sequence: i32) -> Bytes {
        let mut b = make_batch(0, count, timestamp).to_vec();
        b[43..51].copy_from_slice(&producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&epoch.to_be_bytes());
        b[53..57].copy_from_slice(&sequence.to_be_bytes());
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    #[test]
    fn a_valid_batch_parses_and_a_flipped_byte_is_corrupt() {
        let batch = make_batch(0, 3, 1000);
        let header = check(&batch).unwrap();
        assert_eq!(header.records_count, 3);
        assert_eq!(header.last_offset_delta, 2);
        assert_eq!(header.total_len(), batch.len());
        let mut bad = batch.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(check(&bad), Err(BatchError::Corrupt));
    }

    #[test]
    fn stamping_the_base_offset_and_leader_epoch_keeps_the_crc_valid() {
        let batch = stamped(&make_batch(0, 2, 5), 42, 7);
        let header = check(&batch).unwrap();
        assert_eq!(header.base_offset, 42);
        assert_eq!(header.last_offset(), 43);
        assert_eq!(header.partition_leader_epoch, 7);
    }

    #[test]
    fn wrong_magic_and_truncation_are_refused() {
        let mut batch = make_batch(0, 1, 5).to_vec();
        batch[16] = 1;
        assert_eq!(split_produced(&Bytes::from(batch)), Err(BatchError::UnsupportedMagic));
        let batch = make_batch(0, 1, 5);
        assert_eq!(split_produced(&batch.slice(..batch.len() - 1)), Err(BatchError::Corrupt));
        assert_eq!(split_produced(&Bytes::new()), Err(BatchError::Corrupt));
    }

    #[test]
    fn several_batches_in_one_produce_are_split() {
        let mut both = make_batch(0, 1, 5).to_vec();
        both.extend_from_slice(&make_batch(0, 2, 6));
        let batches = split_produced(&Bytes::from(both)).unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[1].0.records_count, 2);
    }
}
