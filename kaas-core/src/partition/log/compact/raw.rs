//! A batch's records as the bytes they are stored as, and a batch rebuilt from some of them.
//!
//! The cleaner keeps records byte for byte: a v2 record holds its offset and timestamp as deltas
//! from its batch's base offset and base timestamp, so a batch rebuilt with its original header
//! (base offset, last offset delta, base timestamp, producer id, epoch and base sequence, as
//! Apache's cleaner keeps them: the producer's last sequence stays what it was) can hold any of
//! its records unchanged. Only the count, the newest timestamp, the compressed bytes and the CRC
//! are new. Headers, duplicate header keys and all, are never decoded.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as codec, Compressor, Decompressor};

use crate::partition::log::batch::{BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use crate::partition::log::control::get_varint;

/// One stored record: what the cleaner decides on, and its bytes (length prefix included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    /// A record without a value: a tombstone, once its key is compacted.
    pub tombstone: bool,
    pub bytes: Bytes,
}

const COMPRESSION_MASK: i16 = 0x07;
const CRC_START: usize = 21;

/// The records of one CRC-checked batch, decompressed. An error names what did not parse: a
/// batch that passed its CRC and does not parse was written broken, and is reported, not guessed.
pub fn records(header: &BatchHeader, batch: &Bytes) -> Result<Vec<RawRecord>, String> {
    let mut out = Vec::with_capacity(usize::try_from(header.records_count).unwrap_or(0));
    walk(header, batch, |plain, r| {
        out.push(RawRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(|k| plain.slice(k)),
            tombstone: r.tombstone,
            bytes: plain.slice(r.span),
        })
    })?;
    Ok(out)
}

/// Each record's key (None: a record without one) and offset, as `records` reads them, without
/// holding any of them: what the offset map is built from.
pub fn keys(header: &BatchHeader, batch: &Bytes, mut each: impl FnMut(Option<&[u8]>, i64)) -> Result<(), String> {
    walk(header, batch, |plain, r| each(r.key.map(|k| &plain[k]), r.offset))
}

/// Where one record lies in its batch's decompressed records.
struct Located {
    offset: i64,
    timestamp: i64,
    key: Option<Range<usize>>,
    tombstone: bool,
    /// The whole record, its length prefix included.
    span: Range<usize>,
}

/// Decompresses the batch and hands each record to `each`, with the decompressed records it
/// lies in; checks that the count is the header's.
fn walk(header: &BatchHeader, batch: &Bytes, mut each: impl FnMut(&Bytes, Located)) -> Result<(), String> {
    if header.total_len() > batch.len() || header.total_len() < HEADER_LEN {
        return Err(format!("a batch of {} bytes whose header says {}", batch.len(), header.total_len()));
    }
    let section = batch.slice(HEADER_LEN..header.total_len());
    let plain = decompress(header.attributes & COMPRESSION_MASK, section)?;
    let mut count = 0usize;
    let mut at = 0;
    while at < plain.len() {
        let start = at;
        let len = get_varint(&plain, &mut at).and_then(|l| usize::try_from(l).ok()).ok_or("record length")?;
        let end = at.checked_add(len).filter(|&e| e <= plain.len()).ok_or("record past the batch's end")?;
        let body = &plain[..end];
        at += 1; // attributes
        let timestamp_delta = get_varint(body, &mut at).ok_or("timestamp delta")?;
        let offset_delta = get_varint(body, &mut at).ok_or("offset delta")?;
        let key_len = get_varint(body, &mut at).ok_or("key length")?;
        let key = match usize::try_from(key_len) {
            Ok(n) => {
                let key = at..at.checked_add(n).filter(|&e| e <= end).ok_or("key past the record")?;
                at = key.end;
                Some(key)
            }
            Err(_) => None,
        };
        let value_len = get_varint(body, &mut at).ok_or("value length")?;
        each(
            &plain,
            Located {
                offset: header.base_offset + offset_delta,
                timestamp: header.base_timestamp.saturating_add(timestamp_delta),
                key,
                tombstone: value_len < 0,
                span: start..end,
            },
        );
        count += 1;
        at = end;
    }
    if count != usize::try_from(header.records_count).unwrap_or(usize::MAX) {
        return Err(format!("{count} records where the header counts {}", header.records_count));
    }
    Ok(())
}

/// The batch with only `kept` of its records (in order, from `records` of this batch), its header
/// otherwise as it was; with none, the header alone (Apache's empty batch, which keeps a
/// producer's last sequence in the log).
pub fn rebuild(header: &BatchHeader, batch: &Bytes, kept: &[RawRecord]) -> Result<Bytes, String> {
    let compression = if kept.is_empty() { 0 } else { header.attributes & COMPRESSION_MASK };
    let mut out = BytesMut::with_capacity(header.total_len());
    out.put_slice(&batch[..HEADER_LEN]);
    let attributes = (header.attributes & !COMPRESSION_MASK) | compression;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    // A LogAppendTime batch's records carry the broker's time, which is the header's.
    let max_timestamp = match header.is_log_append_time() || kept.is_empty() {
        true => header.max_timestamp,
        false => kept.iter().map(|r| r.timestamp).max().expect("not empty"),
    };
    out[35..43].copy_from_slice(&max_timestamp.to_be_bytes());
    out[57..61].copy_from_slice(&(kept.len() as i32).to_be_bytes());
    let mut plain = BytesMut::new();
    for record in kept {
        plain.put_slice(&record.bytes);
    }
    compress(compression, &plain, &mut out)?;
    let len = i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| "batch too large")?;
    out[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

fn decompress(compression: i16, mut section: Bytes) -> Result<Bytes, String> {
    let section = &mut section;
    let plain = match compression {
        0 => return Ok(std::mem::take(section)),
        1 => codec::Gzip::decompress(section, |b| Ok(std::mem::take(b))),
        2 => codec::Snappy::decompress(section, |b| Ok(std::mem::take(b))),
        3 => codec::Lz4::decompress(section, |b| Ok(std::mem::take(b))),
        4 => codec::Zstd::decompress(section, |b| Ok(std::mem::take(b))),
        other => return Err(format!("compression {other}")),
    };
    plain.map_err(|e| format!("decompressing: {e}"))
}

fn compress(compression: i16, plain: &[u8], out: &mut BytesMut) -> Result<(), String> {
    let done = match compression {
        0 => {
            out.put_slice(plain);
            return Ok(());
        }
        1 => codec::Gzip::compress(out, |b| {
            b.put_slice(plain);
            Ok(())
        }),
        2 => codec::Snappy::compress(out, |b| {
            b.put_slice(plain);
            Ok(())
        }),
        3 => codec::Lz4::compress(out, |b| {
            b.put_slice(plain);
            Ok(())
        }),
        4 => codec::Zstd::compress(out, |b| {
            b.put_slice(plain);
            Ok(())
        }),
        other => return Err(format!("compression {other}")),
    };
    done.map_err(|e| format!("compressing: {e}"))
}

/// One record's bytes as a producer writes them (no headers), for tests here and in the cleaner.
#[cfg(test)]
pub(crate) fn record_bytes(offset_delta: i64, timestamp_delta: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Bytes {
    use crate::partition::log::control::put_varint;
    let mut body = BytesMut::new();
    body.put_u8(0);
    put_varint(&mut body, timestamp_delta);
    put_varint(&mut body, offset_delta);
    for part in [key, value] {
        match part {
            Some(b) => {
                put_varint(&mut body, b.len() as i64);
                body.put_slice(b);
            }
            None => put_varint(&mut body, -1),
        }
    }
    put_varint(&mut body, 0);
    let mut out = BytesMut::new();
    put_varint(&mut out, body.len() as i64);
    out.put_slice(&body);
    out.freeze()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::partition::log::batch;
    use kafka_protocol::records::{Compression, RecordBatchDecoder};

    /// A batch as kafka-protocol encodes it: (key, value) per record, offsets from `base`.
    pub(crate) fn encoded(base: i64, records: &[(Option<&str>, Option<&str>)], compression: Compression) -> Bytes {
        use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
        let records: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, (k, v))| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: 7,
                producer_epoch: 1,
                timestamp_type: TimestampType::Creation,
                offset: base + i as i64,
                sequence: 100 + i as i32,
                timestamp: 1_000 + i as i64,
                key: k.map(|k| Bytes::copy_from_slice(k.as_bytes())),
                value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                headers: [(kafka_protocol::protocol::StrBytes::from_static_str("h"), Some(Bytes::from_static(b"x")))]
                    .into_iter()
                    .collect(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
        buf.freeze()
    }

    #[test]
    fn a_rebuilt_batch_keeps_its_header_and_the_records_it_was_given() {
        for compression in
            [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
        {
            let data = encoded(40, &[(Some("a"), Some("1")), (Some("b"), None), (Some("a"), Some("3"))], compression);
            let header = batch::check(&data).unwrap();
            let all = records(&header, &data).unwrap();
            assert_eq!(all.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![40, 41, 42]);
            assert_eq!(all.iter().map(|r| r.tombstone).collect::<Vec<_>>(), vec![false, true, false]);
            assert_eq!(all[1].key.as_deref(), Some(&b"b"[..]));

            let kept = rebuild(&header, &data, &all[1..2]).unwrap();
            let new = batch::check(&kept).expect("a valid batch, CRC and all");
            assert_eq!(
                (new.base_offset, new.last_offset(), new.base_sequence, new.producer_id, new.base_timestamp),
                (40, 42, 100, 7, header.base_timestamp),
                "offsets and sequences as they were: the producer's last sequence is unchanged"
            );
            assert_eq!((new.records_count, new.max_timestamp), (1, 1_001));
            let mut buf = kept.clone();
            let decoded = RecordBatchDecoder::decode(&mut buf).expect("clients read it");
            assert_eq!(decoded.records.len(), 1);
            assert_eq!((decoded.records[0].offset, decoded.records[0].sequence), (41, 101));
            assert_eq!(decoded.records[0].headers.len(), 1, "headers kept");
            assert_eq!(records(&new, &kept).unwrap(), all[1..2].to_vec(), "the very bytes");

            let empty = rebuild(&header, &data, &[]).unwrap();
            let e = batch::check(&empty).unwrap();
            assert_eq!((e.records_count, e.base_offset, e.last_offset(), e.compression()), (0, 40, 42, 0));
            assert_eq!(empty.len(), HEADER_LEN);
        }
    }

    #[test]
    fn a_record_that_runs_past_its_batch_is_reported() {
        let data = encoded(0, &[(Some("a"), Some("1"))], Compression::None);
        let header = batch::check(&data).unwrap();
        let mut broken = BytesMut::from(&data[..]);
        broken[HEADER_LEN] = 0x7e; // a length far past the end
        assert!(records(&header, &broken.freeze()).is_err());
        let wrong_count = BatchHeader { records_count: 2, ..header };
        assert!(records(&wrong_count, &data).unwrap_err().contains("counts 2"));
    }

    #[test]
    fn record_bytes_parse_back() {
        let r = record_bytes(3, 5, Some(b"k"), None);
        let mut header = batch::check(&encoded(10, &[(Some("z"), Some("v"))], Compression::None)).unwrap();
        header.batch_length = (HEADER_LEN - LOG_OVERHEAD + r.len()) as i32;
        assert!(records(&header, &encoded(10, &[], Compression::None)).is_err(), "no bytes for its length");
        let mut data = BytesMut::from(&encoded(10, &[(Some("z"), Some("v"))], Compression::None)[..HEADER_LEN]);
        data.put_slice(&r);
        let parsed = records(&header, &data.freeze()).unwrap();
        assert_eq!((parsed[0].offset, parsed[0].tombstone, parsed[0].key.as_deref()), (13, true, Some(&b"k"[..])));
    }
}
