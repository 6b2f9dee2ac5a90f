//! Record-level reads of one stored batch. The log otherwise keeps payloads as opaque bytes;
//! a lookup by timestamp must look inside, as Apache's does, decompressing if it must.

use bytes::Bytes;
use kafka_protocol::records::{RecordBatchDecoder, TimestampType};

use super::batch::BatchHeader;

/// A record found by timestamp: ListOffsets answers both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// The first record of `batch` (whose header is `header`) at `from_offset` or later with a
/// timestamp of at least `timestamp`. A LogAppendTime batch's records all carry the batch's
/// max timestamp. kaas stores a producer's compressed payload without opening it, so one may
/// not decode: that batch answers its first offset from `from_offset` on, by its header's
/// max timestamp, as before record-level reads.
pub fn find_at_or_after(
    header: &BatchHeader,
    batch: Bytes,
    timestamp: i64,
    from_offset: i64,
) -> Option<TimestampAndOffset> {
    if header.max_timestamp < timestamp || header.next_offset() <= from_offset {
        return None;
    }
    let by_header = TimestampAndOffset { timestamp: header.max_timestamp, offset: header.base_offset.max(from_offset) };
    let mut buf = batch;
    let set = match RecordBatchDecoder::decode(&mut buf) {
        Ok(set) => set,
        Err(e) => {
            tracing::warn!(base_offset = header.base_offset, error = %e, "cannot read the records of a batch");
            return Some(by_header);
        }
    };
    set.records
        .iter()
        .map(|r| {
            let timestamp = match r.timestamp_type {
                TimestampType::LogAppend => header.max_timestamp,
                TimestampType::Creation => r.timestamp,
            };
            TimestampAndOffset { timestamp, offset: r.offset }
        })
        .find(|r| r.offset >= from_offset && r.timestamp >= timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::log::batch;
    use bytes::BytesMut;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

    /// One batch from offset 10 of records stamped `timestamps`, compressed with `compression`.
    fn encoded(timestamps: &[i64], compression: Compression, log_append_time: bool) -> Bytes {
        let records: Vec<Record> = timestamps
            .iter()
            .enumerate()
            .map(|(i, &ts)| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: 10 + i as i64,
                // No producer: the encoder wants sequences that follow the offsets.
                sequence: i as i32 - 1,
                timestamp: ts,
                key: None,
                value: Some(Bytes::from(format!("v{i}"))),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encodes");
        if log_append_time {
            // The encoder writes CreateTime batches; a broker stamps LogAppendTime (bit 3).
            buf[22] |= 0x08;
            fix_crc(&mut buf);
        }
        buf.freeze()
    }

    fn fix_crc(raw: &mut [u8]) {
        let crc = crc32c::crc32c(&raw[21..]);
        raw[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    fn find(raw: &Bytes, timestamp: i64, from_offset: i64) -> Option<(i64, i64)> {
        let header = batch::check(raw).expect("a valid batch");
        find_at_or_after(&header, raw.clone(), timestamp, from_offset).map(|f| (f.offset, f.timestamp))
    }

    #[test]
    fn the_first_record_at_or_after_the_timestamp_inside_the_batch() {
        // Out of order, as CreateTime allows: the first record at or after, in offset order.
        for compression in
            [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
        {
            let raw = encoded(&[100, 300, 200, 400], compression, false);
            assert_eq!(find(&raw, 50, 0), Some((10, 100)), "{compression:?}");
            assert_eq!(find(&raw, 150, 0), Some((11, 300)), "{compression:?}");
            assert_eq!(find(&raw, 400, 0), Some((13, 400)), "{compression:?}");
            assert_eq!(find(&raw, 401, 0), None, "{compression:?}");
            // Records below the log start are never answered.
            assert_eq!(find(&raw, 150, 12), Some((12, 200)), "{compression:?}");
            assert_eq!(find(&raw, 250, 12), Some((13, 400)), "{compression:?}");
        }
    }

    #[test]
    fn log_append_time_records_carry_the_batch_timestamp() {
        let raw = encoded(&[100, 300, 200], Compression::None, true);
        let header = batch::check(&raw).unwrap();
        let found = find(&raw, 1, 11).unwrap();
        assert_eq!(found, (11, header.max_timestamp));
    }

    #[test]
    fn an_unreadable_payload_answers_by_its_header() {
        let mut raw = encoded(&[100, 300], Compression::Zstd, false).to_vec();
        // Garble the compressed payload and fix the CRC: a well-formed batch whose records
        // cannot be read, as a producer may send one.
        let last = raw.len() - 3;
        raw[last..].copy_from_slice(&[0xff, 0xff, 0xff]);
        fix_crc(&mut raw);
        let raw = Bytes::from(raw);
        assert_eq!(find(&raw, 200, 0), Some((10, 300)));
    }
}
