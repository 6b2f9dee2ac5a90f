//! Transaction markers: the control batches that end a transaction in a partition log. A
//! marker is a transactional control batch of the producer's id and epoch holding one record:
//! key `[version: i16 = 0, type: i16]` (0 = ABORT, 1 = COMMIT), value
//! `[version: i16 = 0, coordinator_epoch: i32]`, as Kafka writes them.

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::{self, BatchHeader, HEADER_LEN, LOG_OVERHEAD};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

/// Attributes of a marker: transactional (0x10) and control (0x20), no compression.
const MARKER_ATTRIBUTES: i16 = 0x30;

pub(crate) fn put_varint(b: &mut BytesMut, v: i64) {
    // Kafka's varints are zigzag-encoded.
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        b.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    b.put_u8(z as u8);
}

pub(crate) fn get_varint(b: &[u8], at: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        z |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((z >> 1) as i64 ^ -((z & 1) as i64));
        }
    }
    None
}

/// The marker batch, at base offset 0 (the log assigns the real one).
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let mut record = BytesMut::new();
    record.put_i8(0); // attributes
    put_varint(&mut record, 0); // timestamp delta
    put_varint(&mut record, 0); // offset delta
    put_varint(&mut record, 4);
    record.put_i16(0);
    record.put_i16(match marker {
        Marker::Abort => 0,
        Marker::Commit => 1,
    });
    put_varint(&mut record, 6);
    record.put_i16(0);
    record.put_i32(coordinator_epoch);
    put_varint(&mut record, 0); // headers
    let mut b = BytesMut::with_capacity(HEADER_LEN + record.len() + 2);
    b.put_i64(0);
    b.put_i32(0); // batch length, set below
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2);
    b.put_u32(0); // crc, set below
    b.put_i16(MARKER_ATTRIBUTES);
    b.put_i32(0); // last offset delta
    b.put_i64(timestamp_ms);
    b.put_i64(timestamp_ms);
    b.put_i64(producer_id);
    b.put_i16(producer_epoch);
    b.put_i32(-1); // base sequence: markers carry none
    b.put_i32(1);
    put_varint(&mut b, record.len() as i64);
    b.put_slice(&record);
    let len = (b.len() - LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// The marker a control batch holds, with its coordinator epoch; None for any other batch.
pub fn parse_marker(raw: &[u8]) -> Option<(BatchHeader, Marker, i32)> {
    let header = batch::check(raw).ok()?;
    if !header.is_control() || header.compression() != 0 || header.records_count != 1 {
        return None;
    }
    let mut at = HEADER_LEN;
    let _length = get_varint(raw, &mut at)?;
    at += 1; // attributes
    get_varint(raw, &mut at)?; // timestamp delta
    get_varint(raw, &mut at)?; // offset delta
    let key_len = usize::try_from(get_varint(raw, &mut at)?).ok()?;
    let key = raw.get(at..at + key_len)?;
    at += key_len;
    let marker = match key {
        [0, 0, 0, 0] => Marker::Abort,
        [0, 0, 0, 1] => Marker::Commit,
        _ => return None,
    };
    let value_len = usize::try_from(get_varint(raw, &mut at)?).ok()?;
    let value = raw.get(at..at + value_len)?;
    if value_len < 6 {
        return None;
    }
    let coordinator_epoch = i32::from_be_bytes(value[2..6].try_into().ok()?);
    Some((header, marker, coordinator_epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_and_passes_the_batch_checks() {
        for (marker, epoch) in [(Marker::Commit, 7), (Marker::Abort, -1)] {
            let raw = marker_batch(1 << 40, 3, marker, epoch, 1_767_225_600_000);
            let (header, parsed, coordinator_epoch) = parse_marker(&raw).expect("a marker");
            assert_eq!((parsed, coordinator_epoch), (marker, epoch));
            assert!(header.is_control() && header.is_transactional());
            assert_eq!((header.producer_id, header.producer_epoch, header.base_sequence), (1 << 40, 3, -1));
            assert_eq!((header.records_count, header.last_offset_delta), (1, 0));
            assert_eq!(header.total_len(), raw.len());
            assert_eq!(batch::split_produced(&raw), Err(batch::BatchError::InvalidRecord), "never from a producer");
        }
        let mut flipped = marker_batch(1, 0, Marker::Commit, 0, 0).to_vec();
        let last = flipped.len() - 3;
        flipped[last] ^= 1;
        assert_eq!(parse_marker(&flipped), None, "a damaged marker fails its CRC");
        assert_eq!(parse_marker(&batch::tests::make_batch(0, 1, 0)), None, "a data batch is no marker");
    }

    #[test]
    fn varints_are_zigzag() {
        for v in [0i64, 1, -1, 63, -64, 64, 300, -300, i32::MAX as i64, i64::MIN] {
            let mut b = BytesMut::new();
            put_varint(&mut b, v);
            let mut at = 0;
            assert_eq!(get_varint(&b, &mut at), Some(v));
            assert_eq!(at, b.len());
        }
        let mut b = BytesMut::new();
        put_varint(&mut b, -1);
        assert_eq!(&b[..], &[1], "-1 is 1 in zigzag");
    }
}
