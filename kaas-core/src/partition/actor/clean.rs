//! The partition actor's log cleaner (`cleanup.policy=compact`): the owner cleans its own log,
//! under its ownership epoch, one segment per turn of the actor, so appends and fetches wait
//! for at most one segment's work.
//!
//! A pass (`compact::schedule` says when, and what it may touch) first reads the dirty part of
//! the log into an offset map (`compact::MapBuilder`), a segment a turn, then cleans every
//! closed segment from the log's start to the map's end (`compact::Cleaner`): each cleaned copy
//! is written beside its segment and synced, then, if no newer owner has claimed the partition
//! and this owner's lease still holds, renamed over it. A newer owner claims before it reads
//! the log, so a copy renamed after the check holds only records that owner has too
//! (docs/architecture.md, "Compaction"). Reads and writes are throttled to
//! `log.cleaner.io.max.bytes.per.second` by when the next turn may run, never by sleeping in
//! the actor.

use std::collections::BTreeMap;

use super::PartitionActor;
use crate::cluster::{Kind, claims, partition_key};
use crate::config::CleanerConfig;
use crate::env::{Clock, Env};
use crate::partition::log::compact::schedule::{self, Cleanable};
use crate::partition::log::compact::{Cleaner, MapBuilder};
use crate::reach;

/// The cleaner's part of the actor.
#[derive(Default)]
pub(super) struct Cleaning {
    /// Where the last pass's map ended: the log before it is clean. 0 (the log's start) after
    /// the log is opened: the first pass reads it all.
    first_dirty: i64,
    /// When to ask the schedule again (the clock's ms); 0: at once.
    next_check_ms: i64,
    pass: Option<(Pass, Phase)>,
}

struct Pass {
    plan: Cleanable,
    started_ms: i64,
    /// Bytes read and written so far, for the I/O limit.
    bytes: u64,
}

enum Phase {
    /// Reading the dirty part into the map, from the segment that holds `from`.
    Mapping { builder: MapBuilder, from: i64 },
    /// Cleaning from the log's start, from the segment that holds `from`.
    Cleaning { cleaner: Cleaner, from: i64 },
}

/// Where a turn left the pass.
enum Next {
    Phase(Phase),
    Done { first_dirty: i64 },
}

impl Cleaning {
    /// A log was (re)opened: nothing is known clean, no pass is under way.
    pub(super) fn reset(&mut self) {
        *self = Cleaning::default();
    }
}

impl<E: Env> PartitionActor<E> {
    fn cleans(&self) -> bool {
        self.cleaner.enable && self.config.cleanup.compact && self.owned.is_some() && self.log.is_some()
    }

    /// When the cleaner's next turn is due (the clock's ms), if this partition is cleaned here.
    pub(super) fn next_clean_ms(&self) -> Option<i64> {
        if !self.cleans() {
            return None;
        }
        Some(match &self.cleaning.pass {
            Some((pass, _)) => pass.started_ms + throttled_ms(pass.bytes, &self.cleaner),
            None => self.cleaning.next_check_ms,
        })
    }

    /// One turn of the cleaner, when due: a pass started, or one segment of it read or cleaned.
    pub(super) async fn clean_turn(&mut self) {
        let now_ms = self.env.clock().now_ms();
        if !self.cleans() || self.next_clean_ms().is_some_and(|at| at > now_ms) {
            return;
        }
        let (mut pass, phase) = match self.cleaning.pass.take() {
            Some(under_way) => under_way,
            None => match self.start_pass(now_ms).await {
                Some(started) => started,
                None => return self.look_again_later(now_ms),
            },
        };
        match self.clean_step(&mut pass, phase).await {
            Ok(Next::Phase(phase)) => self.cleaning.pass = Some((pass, phase)),
            Ok(Next::Done { first_dirty }) => {
                reach("compaction: pass done");
                tracing::info!(dir = %self.dir, from = pass.plan.first_dirty, to = first_dirty,
                    bytes = pass.bytes, "log cleaned");
                self.cleaning.first_dirty = first_dirty;
                self.look_again_later(now_ms);
            }
            Err(why) => {
                reach("compaction: pass abandoned");
                tracing::warn!(dir = %self.dir, reason = %why, "log cleaning pass abandoned");
                self.look_again_later(now_ms);
            }
        }
    }

    /// No pass under way: the schedule is asked again after `log.cleaner.backoff.ms`.
    fn look_again_later(&mut self, now_ms: i64) {
        self.cleaning.next_check_ms = now_ms + self.cleaner.backoff_ms as i64;
    }

    /// A pass, if the schedule says the log needs one.
    async fn start_pass(&mut self, now_ms: i64) -> Option<(Pass, Phase)> {
        // A quiet partition's records reach a closed segment only when `segment.ms` rolls it.
        let log = self.log.as_mut()?;
        if let Err(e) = log.roll_if_older(now_ms).await {
            tracing::warn!(dir = %self.dir, error = %e, "cannot roll the active segment");
            return None;
        }
        let watermarks = self.watermarks_now()?;
        let log = self.log.as_ref()?;
        let plan = schedule::cleanable(
            &log.segment_spans(),
            log.log_start_offset(),
            self.cleaning.first_dirty,
            if crate::mutant!(CleanAboveLso) { i64::MAX } else { watermarks.last_stable_offset },
            now_ms,
            &self.config.compaction,
        )?;
        tracing::debug!(dir = %self.dir, ?plan, "log cleaning pass started");
        let aborted = self.state.aborted_between(plan.first_dirty, plan.end);
        let builder =
            MapBuilder::new(&aborted, plan.first_dirty, self.cleaner.dedupe_buffer_bytes, self.cleaner.load_factor);
        let pass = Pass { plan, started_ms: now_ms, bytes: 0 };
        Some((pass, Phase::Mapping { builder, from: plan.first_dirty }))
    }

    async fn clean_step(&mut self, pass: &mut Pass, phase: Phase) -> Result<Next, String> {
        let log = self.log.as_ref().ok_or("the log closed")?;
        match phase {
            Phase::Mapping { mut builder, from } => {
                let Some(span) = log.closed_segment_holding(from).filter(|s| s.base_offset < pass.plan.end) else {
                    return self.map_done(pass, builder);
                };
                let batches = log.segment_batches(span.base_offset).await.map_err(|e| e.to_string())?;
                pass.bytes += span.size;
                for (header, data) in &batches {
                    if header.last_offset() >= pass.plan.end || !builder.add(header, data)? {
                        return self.map_done(pass, builder);
                    }
                }
                Ok(Next::Phase(Phase::Mapping { builder, from: span.next_offset }))
            }
            Phase::Cleaning { mut cleaner, from } => {
                let end = cleaner.end();
                let Some(span) = log.closed_segment_holding(from).filter(|s| s.base_offset < end) else {
                    return Ok(Next::Done { first_dirty: end });
                };
                let batches = log.segment_batches(span.base_offset).await.map_err(|e| e.to_string())?;
                pass.bytes += span.size;
                let producers_last: BTreeMap<i64, i64> = self
                    .state
                    .producers()
                    .iter()
                    .filter_map(|(&id, p)| p.batches.back().map(|b| (id, b.last_offset)))
                    .collect();
                let cleaned = cleaner.clean(batches.iter().map(|(h, d)| (h, d)), &producers_last)?;
                let next = Next::Phase(Phase::Cleaning { cleaner, from: span.next_offset });
                let bytes_before: usize = batches.iter().map(|(_, d)| d.len()).sum();
                if cleaned.iter().map(|b| b.len()).sum::<usize>() == bytes_before {
                    // Nothing went: no copy to write.
                    return Ok(next);
                }
                self.swap_in(span.base_offset, &cleaned, pass).await?;
                Ok(next)
            }
        }
    }

    /// Writes a segment's cleaned copy and renames it in while this broker still owns the
    /// partition: no newer claim, the lease still held.
    async fn swap_in(&mut self, base_offset: i64, cleaned: &[bytes::Bytes], pass: &mut Pass) -> Result<(), String> {
        let log = self.log.as_mut().ok_or("the log closed")?;
        let staged = log.stage_cleaned(base_offset, cleaned).await.map_err(|e| e.to_string())?;
        pass.bytes += staged.len();
        if crate::crash_point!("log.clean_before_swap") {
            crate::park_for_crash().await;
        }
        let epoch = self.owned.ok_or("no longer owned")?.claimed.epoch;
        let key = partition_key(&self.key.0, self.key.1);
        let superseded = claims::superseded(self.env.volume(), Kind::Partition, &key, epoch).await;
        let superseded = superseded.map_err(|e| format!("cannot check for a newer owner: {e}"))?;
        let still_owner = !superseded && self.lease_ok();
        let log = self.log.as_mut().ok_or("the log closed")?;
        if !still_owner {
            reach("compaction: cleaned copy discarded, a newer owner may read the log");
            log.discard_staged(staged).await;
            return Err(format!("a newer owner than epoch {epoch} may be reading the log"));
        }
        if let Err(e) = log.swap_cleaned(staged).await {
            // The rename may have happened: the segment this log has open may no longer be the
            // file on the volume. The log is read again from the volume (everything in it is
            // durable: a turn runs between group commits), as after a failed write.
            self.drop_log();
            return Err(format!("{e}; the log is opened again"));
        }
        reach("compaction: cleaned copy swapped in");
        Ok(())
    }

    /// The map is complete: cleaning starts at the log's start.
    fn map_done(&self, pass: &Pass, builder: MapBuilder) -> Result<Next, String> {
        let log = self.log.as_ref().ok_or("the log closed")?;
        let map = builder.finish();
        if map.end() <= pass.plan.first_dirty {
            return Err("nothing dirty could be read".into());
        }
        let aborted = self.state.aborted_between(log.log_start_offset(), map.end());
        let cleaner = Cleaner::new(map, &aborted, pass.plan.drop_deletes_below);
        Ok(Next::Phase(Phase::Cleaning { cleaner, from: log.log_start_offset() }))
    }
}

/// How long after a pass's start `bytes` of I/O may have been done, at the cleaner's limit.
fn throttled_ms(bytes: u64, cleaner: &CleanerConfig) -> i64 {
    let rate = cleaner.max_bytes_per_second;
    if rate.is_nan() || rate <= 0.0 || rate >= f64::MAX {
        return 0;
    }
    (bytes as f64 / rate * 1000.0).min(i64::MAX as f64 / 2.0) as i64
}
