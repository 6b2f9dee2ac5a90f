//! Compaction against a model: seeded logs of keyed records, tombstones, and transactions that
//! commit or abort, cleaned in one pass or several (a small offset map); what a read_committed
//! reader finds for each key must be what it found before, the offsets must still increase, and
//! every record kept must be the very record the producer wrote, at its offset.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::partition::log::batch;

/// A log as the partition holds it, with its aborted index and each producer's last batch.
struct Log {
    batches: Vec<(BatchHeader, Bytes)>,
    aborted: Vec<AbortedTxn>,
    producers_last: BTreeMap<i64, i64>,
}

fn data_batch(base: i64, producer_id: i64, transactional: bool, records: &[(String, Option<String>)]) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional,
            control: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            sequence: (base + i as i64) as i32,
            timestamp: 1_000 + base + i as i64,
            key: Some(Bytes::from(k.clone())),
            value: v.clone().map(Bytes::from),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    let compression = if base % 3 == 0 { Compression::Zstd } else { Compression::None };
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).unwrap();
    buf.freeze()
}

/// A seeded log: three transactional producers (ids 1..=3) and plain writes (id 9), keys k0..k5.
fn random_log(seed: u64) -> Log {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut log = Log { batches: vec![], aborted: vec![], producers_last: BTreeMap::new() };
    let mut open: BTreeMap<i64, i64> = BTreeMap::new(); // producer -> first offset of its open txn
    let mut next = 0i64;
    for _ in 0..rng.random_range(5..60) {
        let producer = [1, 2, 3, 9][rng.random_range(0..4)];
        if producer != 9 && open.contains_key(&producer) && rng.random_bool(0.4) {
            let commit = rng.random_bool(0.6);
            let marker = if commit { Marker::Commit } else { Marker::Abort };
            let raw = batch::stamped(&control::marker_batch(producer, 0, marker, 0, 5_000), next, 0);
            let first = open.remove(&producer).expect("open");
            if !commit {
                log.aborted.push(AbortedTxn { producer_id: producer, first_offset: first, last_offset: next });
            }
            log.batches.push((batch::check(&raw).unwrap(), raw));
            log.producers_last.insert(producer, next);
            next += 1;
            continue;
        }
        let records: Vec<(String, Option<String>)> = (0..rng.random_range(1..4))
            .map(|i| {
                let key = format!("k{}", rng.random_range(0..6));
                let value = rng.random_bool(0.8).then(|| format!("v{}", next + i));
                (key, value)
            })
            .collect();
        let transactional = producer != 9;
        if transactional {
            open.entry(producer).or_insert(next);
        }
        let raw = data_batch(next, producer, transactional, &records);
        let header = batch::check(&raw).unwrap();
        log.producers_last.insert(producer, header.last_offset());
        next = header.next_offset();
        log.batches.push((header, raw));
    }
    // Whatever is still open ends, so that the whole log is below the LSO.
    for (producer, first) in std::mem::take(&mut open) {
        let raw = batch::stamped(&control::marker_batch(producer, 0, Marker::Abort, 0, 5_000), next, 0);
        log.aborted.push(AbortedTxn { producer_id: producer, first_offset: first, last_offset: next });
        log.batches.push((batch::check(&raw).unwrap(), raw));
        log.producers_last.insert(producer, next);
        next += 1;
    }
    log
}

/// What a read_committed reader finds: each key's last (offset, value), tombstones included.
/// It reads as Kafka's consumers read: given the partition's aborted index, a producer's
/// transactional batches are skipped from its aborted transaction's first offset until the
/// producer's next control batch (so a marker cleaned away while its index entry stays would
/// hide the producer's later, committed, transactions).
fn committed_view(batches: &[(BatchHeader, Bytes)], aborted: &[AbortedTxn]) -> BTreeMap<Bytes, (i64, Option<Bytes>)> {
    let mut view = BTreeMap::new();
    let mut index: Vec<&AbortedTxn> = aborted.iter().collect();
    index.sort_by_key(|t| t.first_offset);
    let mut index = index.into_iter().peekable();
    let mut aborting = std::collections::BTreeSet::new();
    for (header, data) in batches {
        while let Some(t) = index.next_if(|t| t.first_offset <= header.last_offset()) {
            aborting.insert(t.producer_id);
        }
        if header.is_control() {
            aborting.remove(&header.producer_id);
            continue;
        }
        if header.is_transactional() && aborting.contains(&header.producer_id) {
            continue;
        }
        for r in raw::records(header, data).unwrap() {
            let value = (!r.tombstone).then(|| r.bytes.clone());
            view.insert(r.key.clone().unwrap(), (r.offset, value));
        }
    }
    view
}

fn parse(out: &[Bytes]) -> Vec<(BatchHeader, Bytes)> {
    out.iter().map(|b| (batch::check(b).expect("a valid batch"), b.clone())).collect()
}

/// Cleans `log` in passes with an offset map of `entries` entries until a pass covers it all.
fn compact(log: &Log, entries: u64, drop_deletes: bool) -> Vec<(BatchHeader, Bytes)> {
    let end = log.batches.last().map_or(0, |(h, _)| h.next_offset());
    let mut current = log.batches.clone();
    let mut dirty_start = 0;
    for _pass in 0..1000 {
        let map = build_map(current.iter().map(|(h, d)| (h, d)), &log.aborted, dirty_start, entries * 24, 1.0).unwrap();
        let horizon = if drop_deletes { i64::MAX } else { 0 };
        let cleaned =
            clean(current.iter().map(|(h, d)| (h, d)), &log.aborted, &map, horizon, &log.producers_last).unwrap();
        let mut next = parse(&cleaned);
        next.extend(current.iter().filter(|(h, _)| h.base_offset >= map.end()).cloned());
        current = next;
        assert!(map.end() > dirty_start || dirty_start == end, "every pass moves on");
        dirty_start = map.end();
        if dirty_start >= end {
            return current;
        }
    }
    panic!("compaction never finished");
}

#[test]
fn a_compacted_log_reads_as_the_log_it_was() {
    for seed in 0..300u64 {
        let log = random_log(seed);
        let before = committed_view(&log.batches, &log.aborted);
        for (entries, drop_deletes) in [(1000, false), (3, false), (1000, true), (2, true)] {
            let after_log = compact(&log, entries, drop_deletes);
            let after = committed_view(&after_log, &log.aborted);
            let mut want = before.clone();
            if drop_deletes {
                want.retain(|_, (_, v)| v.is_some());
            }
            assert_eq!(after, want, "seed {seed}, map of {entries}, drop deletes {drop_deletes}");
            // Offsets increase, and every record kept is the producer's, at its offset.
            let original: BTreeMap<i64, Bytes> = log
                .batches
                .iter()
                .flat_map(|(h, d)| raw::records(h, d).unwrap())
                .map(|r| (r.offset, r.bytes))
                .collect();
            let mut last = -1;
            for (h, d) in &after_log {
                assert!(h.base_offset > last, "seed {seed}: batches in offset order");
                last = h.last_offset();
                for r in raw::records(h, d).unwrap() {
                    assert_eq!(original.get(&r.offset), Some(&r.bytes), "seed {seed}: record at {}", r.offset);
                }
            }
            // One pass with room for every key leaves one record per key.
            if entries == 1000 {
                let records: usize = after_log
                    .iter()
                    .filter(|(h, _)| !h.is_control())
                    .map(|(h, d)| raw::records(h, d).unwrap().len())
                    .sum();
                assert_eq!(records, want.len(), "seed {seed}: one record per key");
            }
            // Each producer's last batch is still there, as far as its last offset.
            for (producer, last_offset) in &log.producers_last {
                assert!(
                    after_log.iter().any(|(h, _)| h.producer_id == *producer && h.last_offset() == *last_offset),
                    "seed {seed}: producer {producer}'s last batch"
                );
            }
        }
    }
}
