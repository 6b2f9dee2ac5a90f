//! What a partition takes from a producer beyond a well-formed batch, as Apache's LogValidator
//! checks it: a compacted topic takes only records with a key, a `CreateTime` topic only
//! timestamps within `message.timestamp.before.max.ms` before and
//! `message.timestamp.after.max.ms` after the broker's clock, and a `LogAppendTime` topic's
//! batches are stamped with the broker's time. A refusal names each refused record by its index
//! in its batch, and the whole append is refused, as Apache refuses it.
//!
//! Records are read only where a check needs them (a compacted topic, a lower timestamp bound,
//! or a batch whose newest timestamp is past the upper bound): the common case reads the header.

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use super::batch::{self, BatchHeader};
use crate::config::RecordPolicy;
use crate::error::CoreError;

/// The records refused, each by its index in its batch, with why.
pub type RecordErrors = Vec<(i32, String)>;

/// Checks a producer's batches under `policy` at the broker's `now_ms`, and stamps them if the
/// topic keeps the broker's time. `partition` names the partition in the messages, as Apache's do.
pub fn validate(
    policy: &RecordPolicy,
    partition: &str,
    batches: Vec<(BatchHeader, Bytes)>,
    now_ms: i64,
) -> Result<Vec<(BatchHeader, Bytes)>, CoreError> {
    let mut keyless = RecordErrors::new();
    let mut out_of_range = RecordErrors::new();
    let (lowest, highest) =
        (now_ms.saturating_sub(policy.timestamp_before_max_ms), now_ms.saturating_add(policy.timestamp_after_max_ms));
    let check_timestamps = !policy.log_append_time;
    for (header, data) in &batches {
        let timestamps_suspect =
            check_timestamps && (policy.timestamp_before_max_ms != i64::MAX || header.max_timestamp > highest);
        if !policy.compacted && !timestamps_suspect {
            continue;
        }
        let mut buf = data.clone();
        let Ok(set) = RecordBatchDecoder::decode(&mut buf) else {
            return Err(CoreError::CorruptMessage);
        };
        for (index, record) in set.records.iter().enumerate() {
            let index = index as i32;
            if policy.compacted && record.key.is_none() {
                keyless.push((
                    index,
                    format!("Compacted topic cannot accept message without key in topic partition {partition}."),
                ));
            }
            let ts = record.timestamp;
            if timestamps_suspect && ts >= 0 && (ts < lowest || ts > highest) {
                out_of_range.push((
                    index,
                    format!(
                        "Timestamp {ts} of message with offset {} is out of range. The timestamp should be within [{lowest}, {highest}]",
                        record.offset
                    ),
                ));
            }
        }
    }
    // Apache reports a record's key before its timestamp, and fails with the first record's error.
    if !keyless.is_empty() {
        return Err(CoreError::RecordsRejected(keyless));
    }
    if !out_of_range.is_empty() {
        return Err(CoreError::InvalidTimestamp(out_of_range));
    }
    if !policy.log_append_time {
        return Ok(batches);
    }
    Ok(batches.iter().map(|(header, data)| batch::with_log_append_time(header, data, now_ms)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    /// One producer batch of records with these (key, timestamp)s, compressed with `compression`.
    fn produced(records: &[(Option<&str>, i64)], compression: Compression) -> (BatchHeader, Bytes) {
        let records: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, &(key, timestamp))| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // No producer: the encoder wants sequences that follow the offsets.
                sequence: i as i32 - 1,
                timestamp,
                key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
                value: Some(Bytes::from_static(b"v")),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
        let data = buf.freeze();
        (batch::check(&data).unwrap(), data)
    }

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn a_compacted_topic_refuses_each_record_without_a_key() {
        let policy = RecordPolicy { compacted: true, ..RecordPolicy::default() };
        for compression in [Compression::None, Compression::Lz4] {
            let batch = produced(&[(Some("a"), NOW), (None, NOW), (Some("b"), NOW), (None, NOW)], compression);
            match validate(&policy, "t-0", vec![batch], NOW) {
                Err(CoreError::RecordsRejected(errors)) => {
                    assert_eq!(errors.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 3]);
                    assert!(errors[0].1.contains("without key in topic partition t-0"), "{}", errors[0].1);
                }
                other => panic!("{compression:?}: {other:?}"),
            }
            let keyed = produced(&[(Some("a"), NOW), (Some("b"), NOW)], compression);
            assert!(validate(&policy, "t-0", vec![keyed.clone()], NOW).is_ok());
            // Not compacted: a record without a key is fine.
            let keyless = produced(&[(None, NOW)], compression);
            assert!(validate(&RecordPolicy::default(), "t-0", vec![keyless], NOW).is_ok());
        }
    }

    #[test]
    fn create_time_outside_the_bounds_is_refused_record_by_record() {
        let policy =
            RecordPolicy { timestamp_before_max_ms: 1_000, timestamp_after_max_ms: 2_000, ..RecordPolicy::default() };
        let batch = produced(
            &[(None, NOW - 999), (None, NOW - 1_001), (None, NOW + 2_000), (None, NOW + 2_001)],
            Compression::None,
        );
        match validate(&policy, "t-0", vec![batch], NOW) {
            Err(CoreError::InvalidTimestamp(errors)) => {
                assert_eq!(errors.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 3]);
                assert!(errors[0].1.contains("is out of range"), "{}", errors[0].1);
            }
            other => panic!("{other:?}"),
        }
        // Kafka 4's defaults: any age, an hour ahead at most.
        let old = produced(&[(None, 0)], Compression::None);
        assert!(validate(&RecordPolicy::default(), "t-0", vec![old], NOW).is_ok());
        let ahead = produced(&[(None, NOW + 3_600_001)], Compression::None);
        assert!(matches!(
            validate(&RecordPolicy::default(), "t-0", vec![ahead], NOW),
            Err(CoreError::InvalidTimestamp(_))
        ));
    }

    #[test]
    fn log_append_time_stamps_the_batch_and_keeps_it_whole() {
        let policy = RecordPolicy { log_append_time: true, ..RecordPolicy::default() };
        // A producer's timestamps do not matter: the broker's time replaces them.
        let (header, data) = produced(&[(None, 5), (None, NOW + 9_999_999)], Compression::Lz4);
        let stamped = validate(&policy, "t-0", vec![(header, data.clone())], NOW).unwrap();
        let (h, bytes) = &stamped[0];
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, NOW);
        // The stamped batch is whole (its CRC holds) and says the same of itself as the header.
        assert_eq!(batch::check(bytes).unwrap(), *h);
        assert_eq!(bytes.len(), data.len());
        let mut buf = bytes.clone();
        let set = RecordBatchDecoder::decode(&mut buf).unwrap();
        assert!(set.records.iter().all(|r| r.timestamp_type == TimestampType::LogAppend));
        assert_eq!(
            set.records.iter().map(|r| r.value.clone()).collect::<Vec<_>>(),
            vec![Some(Bytes::from_static(b"v")); 2]
        );
    }
}
