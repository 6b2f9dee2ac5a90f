//! When a compacted log is worth a pass, and which part of it the pass may touch, as Apache's
//! LogCleanerManager decides it: the cleanable part ends at the first offset no pass may clean
//! (the active segment's base, the last stable offset, the first segment younger than
//! `min.compaction.lag.ms`); a pass runs when the part not yet cleaned is at least
//! `min.cleanable.dirty.ratio` of it, or when its oldest record is older than
//! `max.compaction.lag.ms`. Pure: the partition actor asks, then does the I/O.

use crate::config::Compaction;

/// A closed segment as the schedule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSpan {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size: u64,
    /// Its first batch's and its largest timestamp (-1: none).
    pub first_timestamp: i64,
    pub max_timestamp: i64,
}

/// A pass to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    /// Where the part not yet cleaned starts: the offset map is built from here.
    pub first_dirty: i64,
    /// The first offset the pass may not clean (nor read into its map).
    pub end: i64,
    /// Tombstones, and markers whose transaction has no records left, go below this offset:
    /// segments cleaned by an earlier pass whose records are all older than
    /// `delete.retention.ms`.
    pub drop_deletes_below: i64,
    pub dirty_ratio: f64,
    /// `max.compaction.lag.ms` ran out: the pass runs whatever the ratio.
    pub overdue: bool,
}

/// The pass a log needs now, if any. `closed` are its closed segments in order; `first_dirty`
/// is where the last pass's map ended (the log start when no pass ran since the log was opened).
pub fn cleanable(
    closed: &[SegmentSpan],
    log_start_offset: i64,
    first_dirty: i64,
    last_stable_offset: i64,
    now_ms: i64,
    c: &Compaction,
) -> Option<Cleanable> {
    let active_base = closed.last().map_or(log_start_offset, |s| s.next_offset);
    let mut end = active_base.min(last_stable_offset);
    if c.min_compaction_lag_ms > 0 {
        let young = closed.iter().find(|s| s.max_timestamp > now_ms.saturating_sub(c.min_compaction_lag_ms));
        if let Some(young) = young {
            end = end.min(young.base_offset);
        }
    }
    let first_dirty = first_dirty.max(log_start_offset).min(end);
    if end <= first_dirty {
        return None;
    }
    let live = |s: &&SegmentSpan| s.next_offset > log_start_offset && s.base_offset < end;
    let (mut clean_bytes, mut dirty_bytes) = (0u64, 0u64);
    let mut oldest_dirty = None;
    for s in closed.iter().filter(live) {
        if s.next_offset <= first_dirty {
            clean_bytes += s.size;
        } else {
            dirty_bytes += s.size;
            oldest_dirty.get_or_insert(s.first_timestamp);
        }
    }
    if dirty_bytes == 0 {
        return None;
    }
    let dirty_ratio = dirty_bytes as f64 / (clean_bytes + dirty_bytes) as f64;
    let overdue = c.max_compaction_lag_ms < i64::MAX
        && oldest_dirty.is_some_and(|t| t <= now_ms.saturating_sub(c.max_compaction_lag_ms));
    if dirty_ratio < c.min_cleanable_dirty_ratio && !overdue {
        return None;
    }
    let horizon = now_ms.saturating_sub(c.delete_retention_ms);
    let mut drop_deletes_below = log_start_offset;
    for s in closed {
        if s.next_offset > first_dirty || s.max_timestamp >= horizon || crate::mutant!(CleanKeepsTombstones) {
            break;
        }
        drop_deletes_below = drop_deletes_below.max(s.next_offset);
    }
    Some(Cleanable { first_dirty, end, drop_deletes_below, dirty_ratio, overdue })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments of 10 offsets and 100 bytes, the i-th written at `ts[i]`.
    fn log(ts: &[i64]) -> Vec<SegmentSpan> {
        ts.iter()
            .enumerate()
            .map(|(i, &t)| SegmentSpan {
                base_offset: i as i64 * 10,
                next_offset: i as i64 * 10 + 10,
                size: 100,
                first_timestamp: t,
                max_timestamp: t,
            })
            .collect()
    }

    #[test]
    fn a_pass_runs_at_the_dirty_ratio_and_stops_at_the_active_segment_and_the_lso() {
        let c = Compaction::default();
        let segments = log(&[0, 0, 0, 0]);
        let pass = cleanable(&segments, 0, 0, i64::MAX, 1000, &c).expect("all dirty");
        assert_eq!((pass.first_dirty, pass.end, pass.dirty_ratio), (0, 40, 1.0));
        // Half cleaned: exactly the ratio, still worth it; three quarters: not.
        assert!(cleanable(&segments, 0, 20, i64::MAX, 1000, &c).is_some());
        assert_eq!(cleanable(&segments, 0, 30, i64::MAX, 1000, &c), None);
        // An open transaction at 15: nothing from it on.
        assert_eq!(cleanable(&segments, 0, 0, 15, 1000, &c).map(|p| p.end), Some(15));
        assert_eq!(cleanable(&segments, 0, 15, 15, 1000, &c), None, "nothing dirty below the LSO");
        assert_eq!(cleanable(&[], 0, 0, i64::MAX, 1000, &c), None, "only an active segment");
    }

    #[test]
    fn the_compaction_lags_hold_records_back_and_push_them_through() {
        let c = Compaction { min_compaction_lag_ms: 500, ..Compaction::default() };
        // Segments written at 0, 100, 900: at 1000 the last is younger than the lag.
        let pass = cleanable(&log(&[0, 100, 900]), 0, 0, i64::MAX, 1000, &c).expect("two old segments");
        assert_eq!(pass.end, 20);
        // A log cleaned to 30 of 40: a ratio of 1/4, but its dirty part has waited too long.
        let c = Compaction { max_compaction_lag_ms: 5000, ..Compaction::default() };
        let segments = log(&[0, 0, 0, 100]);
        assert_eq!(cleanable(&segments, 0, 30, i64::MAX, 1000, &c), None);
        let pass = cleanable(&segments, 0, 30, i64::MAX, 5100, &c).expect("overdue");
        assert!(pass.overdue && pass.dirty_ratio < 0.5);
    }

    #[test]
    fn deletes_go_only_from_cleaned_segments_past_the_delete_retention() {
        let c = Compaction { delete_retention_ms: 1000, min_cleanable_dirty_ratio: 0.0, ..Compaction::default() };
        let segments = log(&[0, 500, 1500, 1500]);
        // Cleaned to 30; at 2000 the first two segments are older than a second.
        let pass = cleanable(&segments, 0, 30, i64::MAX, 2000, &c).unwrap();
        assert_eq!(pass.drop_deletes_below, 20);
        // Never cleaned: no tombstone has been seen by a pass yet.
        assert_eq!(cleanable(&segments, 0, 0, i64::MAX, 2000, &c).unwrap().drop_deletes_below, 0);
        // The log start past a segment: the horizon starts there.
        assert_eq!(cleanable(&segments, 25, 30, i64::MAX, 9999, &c).unwrap().drop_deletes_below, 30);
    }
}
