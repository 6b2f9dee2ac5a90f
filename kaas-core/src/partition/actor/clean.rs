//! The partition actor's log cleaner (`cleanup.policy=compact`): the owner cleans its own log,
//! under its ownership epoch, one read buffer per turn of the actor, so appends and fetches wait
//! for at most one buffer's work.
//!
//! A pass (`compact::schedule` says when, and what it may touch) holds one of the broker's
//! `log.cleaner.threads` slots from start to end. It first reads the dirty part of the log into
//! an offset map (`compact::MapBuilder`), then cleans every closed segment from the log's start
//! to the map's end (`compact::Cleaner`), a buffer a turn in both phases: memory is the map's
//! share of `log.cleaner.dedupe.buffer.size` and one read of `log.cleaner.io.buffer.size`'s
//! share, whatever the segment size. A segment's cleaned copy is started only when a read loses
//! something (the unchanged part before it copied then), written as each read is cleaned, synced
//! at the segment's end, then, if no newer owner has claimed the partition and this owner's
//! lease still holds, renamed over it. A newer owner claims before it reads the log, so a copy
//! renamed after the check holds only records that owner has too (docs/architecture.md,
//! "Compaction"). Reads and writes are throttled to the pass's share of
//! `log.cleaner.io.max.bytes.per.second` by when the next turn may run, never by sleeping in
//! the actor.

use std::collections::BTreeMap;

use super::PartitionActor;
use crate::cluster::{Kind, claims, partition_key};
use crate::config::CleanerConfig;
use crate::env::{Clock, Env, Volume};
use crate::partition::cleaner_slots::{CleanerSlot, CleanerSlots};
use crate::partition::log::compact::schedule::{self, Cleanable};
use crate::partition::log::compact::{Cleaner, MapBuilder};
use crate::partition::log::{SegmentChunk, StagedCopy};
use crate::reach;

/// Where the partition's log is clean (Apache's cleaner-offset-checkpoint, one per partition
/// here): `CHECKPOINT_VERSION`, `first_dirty`, then a CRC-32C of both.
const CHECKPOINT_FILE: &str = "cleaner.checkpoint";
const CHECKPOINT_VERSION: u16 = 1;

fn encode_checkpoint(first_dirty: i64) -> bytes::Bytes {
    let mut b = Vec::with_capacity(14);
    b.extend_from_slice(&CHECKPOINT_VERSION.to_be_bytes());
    b.extend_from_slice(&first_dirty.to_be_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_be_bytes());
    bytes::Bytes::from(b)
}

/// The checkpoint's `first_dirty`; None for anything not written by `encode_checkpoint`.
fn decode_checkpoint(raw: &[u8]) -> Option<i64> {
    let (body, crc) = raw.split_at_checked(10)?;
    let crc = u32::from_be_bytes(crc.try_into().ok()?);
    let version = u16::from_be_bytes(body[..2].try_into().ok()?);
    (version == CHECKPOINT_VERSION && crc32c::crc32c(body) == crc)
        .then(|| i64::from_be_bytes(body[2..].try_into().expect("8 bytes")))
        .filter(|first_dirty| *first_dirty >= 0)
}

/// The cleaner's part of the actor.
pub(super) struct Cleaning<V: Volume> {
    /// Where the last pass's map ended: the log before it is clean. After the log is opened,
    /// the partition's checkpoint, or 0 (the log's start) without one.
    first_dirty: i64,
    /// When to ask the schedule again (the clock's ms); 0: at once.
    next_check_ms: i64,
    pass: Option<(Pass, Phase<V::File>)>,
    /// The broker's pass slots (`log.cleaner.threads`).
    slots: CleanerSlots,
}

struct Pass {
    plan: Cleanable,
    started_ms: i64,
    /// Bytes read and written so far, for the I/O limit.
    bytes: u64,
    /// Given back when the pass ends, however it ends.
    _slot: CleanerSlot,
}

/// Where a phase reads next: a closed segment, by its base offset, and a byte position in it.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    segment: i64,
    position: u64,
}

enum Phase<F> {
    /// Reading the dirty part into the map.
    Mapping { builder: MapBuilder, at: Cursor },
    /// Cleaning from the log's start; `copy` is the segment's cleaned copy once a read lost
    /// something.
    Cleaning { cleaner: Cleaner, at: Cursor, copy: Option<StagedCopy<F>> },
}

/// Where a turn left the pass.
#[allow(clippy::large_enum_variant, reason = "one a turn, moved straight into the actor's state")]
enum Next<F> {
    Phase(Phase<F>),
    Done { first_dirty: i64 },
}

impl<V: Volume> Cleaning<V> {
    pub(super) fn new(slots: CleanerSlots) -> Self {
        Cleaning { first_dirty: 0, next_check_ms: 0, pass: None, slots }
    }

    /// A log was (re)opened: nothing is known clean, no pass is under way (the open removed
    /// any copy one had staged).
    pub(super) fn reset(&mut self) {
        *self = Cleaning::new(self.slots.clone());
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

    /// One turn of the cleaner, when due: a pass started, or one buffer of it read or cleaned.
    pub(super) async fn clean_turn(&mut self) {
        if !self.cleans() {
            // Disowned, or the policy changed: a pass under way ends here, its slot given back.
            return self.end_pass().await;
        }
        let now_ms = self.env.clock().now_ms();
        if self.next_clean_ms().is_some_and(|at| at > now_ms) {
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
                self.save_checkpoint(first_dirty).await;
                self.look_again_later(now_ms);
            }
            Err(why) => {
                reach("compaction: pass abandoned");
                tracing::warn!(dir = %self.dir, reason = %why, "log cleaning pass abandoned");
                self.look_again_later(now_ms);
            }
        }
    }

    /// The log was opened: where the last pass (of this broker or an earlier owner) left it
    /// clean, from the partition's checkpoint, so that a restart or a take-over does not read
    /// the whole log into a map again. A checkpoint outside the log (cut back since, or from a
    /// log deleted below it) is ignored; a corrupt one is reported and ignored. Either way the
    /// log is read from its start, which only costs time: a map starting too late cleans less,
    /// never wrongly.
    pub(super) async fn load_checkpoint(&mut self) {
        let Some(log) = self.log.as_ref() else { return };
        let path = crate::env::join(&self.dir, CHECKPOINT_FILE);
        let first_dirty = match self.env.volume().read(&path).await {
            Ok(None) => return,
            Ok(Some(raw)) => match decode_checkpoint(&raw) {
                Some(first_dirty) => first_dirty,
                None => {
                    tracing::warn!(dir = %self.dir, "corrupt cleaner checkpoint ignored: the log is cleaned from its start");
                    return;
                }
            },
            Err(e) => {
                tracing::warn!(dir = %self.dir, error = %e, "cannot read the cleaner checkpoint");
                return;
            }
        };
        if (log.log_start_offset()..=log.log_end_offset()).contains(&first_dirty) {
            reach("compaction: cleaner checkpoint read at open");
            self.cleaning.first_dirty = first_dirty;
        }
    }

    /// Keeps where the log is clean for the next open, while this broker still owns the
    /// partition (a former owner's checkpoint would be harmless, as `load_checkpoint` says, but
    /// is not written). A failed write only costs the next open a longer first pass.
    async fn save_checkpoint(&self, first_dirty: i64) {
        if !self.lease_ok() {
            return;
        }
        let path = crate::env::join(&self.dir, CHECKPOINT_FILE);
        if let Err(e) = self.env.volume().write_atomic(&path, encode_checkpoint(first_dirty)).await {
            tracing::warn!(dir = %self.dir, error = %e, "cannot write the cleaner checkpoint");
        }
    }

    /// Ends a pass under way without finishing it: its copy, if one was started, removed.
    pub(super) async fn end_pass(&mut self) {
        let Some((_, phase)) = self.cleaning.pass.take() else { return };
        if let Phase::Cleaning { copy: Some(copy), .. } = phase {
            self.discard(copy).await;
        }
    }

    async fn discard(&mut self, copy: StagedCopy<<E::Volume as Volume>::File>) {
        match self.log.as_mut() {
            Some(log) => log.discard_staged(copy).await,
            // The next open removes it.
            None => drop(copy),
        }
    }

    /// No pass under way: the schedule is asked again after `log.cleaner.backoff.ms`.
    fn look_again_later(&mut self, now_ms: i64) {
        self.cleaning.next_check_ms = now_ms + self.cleaner.backoff_ms as i64;
    }

    /// A pass, if the schedule says the log needs one and one of the broker's slots is free.
    async fn start_pass(&mut self, now_ms: i64) -> Option<(Pass, Phase<<E::Volume as Volume>::File>)> {
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
        let Some(slot) = self.cleaning.slots.try_take(self.cleaner.threads) else {
            reach("compaction: pass waits for a cleaner thread");
            return None;
        };
        let start = log.closed_segment_holding(plan.first_dirty)?;
        tracing::debug!(dir = %self.dir, ?plan, "log cleaning pass started");
        let aborted = self.state.aborted_between(plan.first_dirty, plan.end);
        let builder = MapBuilder::new(&aborted, plan.first_dirty, self.cleaner.map_bytes(), self.cleaner.load_factor);
        let pass = Pass { plan, started_ms: now_ms, bytes: 0, _slot: slot };
        Some((pass, Phase::Mapping { builder, at: Cursor { segment: start.base_offset, position: 0 } }))
    }

    /// The next read of a pass: the segment at the cursor, from its position.
    async fn read_at(&self, at: Cursor, pass: &mut Pass) -> Result<SegmentChunk, String> {
        let log = self.log.as_ref().ok_or("the log closed")?;
        let chunk = log.segment_chunk(at.segment, at.position, self.cleaner.read_bytes()).await;
        let chunk = chunk.map_err(|e| e.to_string())?.ok_or_else(|| format!("segment {} went", at.segment))?;
        pass.bytes += chunk.len();
        Ok(chunk)
    }

    /// Where a phase reads after `chunk`: on in its segment, or the next closed segment below
    /// `end`; None when it reached `end`.
    fn advance(&self, at: Cursor, chunk: &SegmentChunk, end: i64) -> Result<Option<Cursor>, String> {
        if !chunk.last {
            return Ok(Some(Cursor { position: chunk.next_position, ..at }));
        }
        let log = self.log.as_ref().ok_or("the log closed")?;
        let segment = log.closed_segment_holding(at.segment).ok_or_else(|| format!("segment {} went", at.segment))?;
        let next = log.closed_segment_holding(segment.next_offset).filter(|s| s.base_offset < end);
        Ok(next.map(|s| Cursor { segment: s.base_offset, position: 0 }))
    }

    async fn clean_step(
        &mut self,
        pass: &mut Pass,
        phase: Phase<<E::Volume as Volume>::File>,
    ) -> Result<Next<<E::Volume as Volume>::File>, String> {
        match phase {
            Phase::Mapping { mut builder, at } => {
                let chunk = self.read_at(at, pass).await?;
                for (header, data) in &chunk.batches {
                    if header.last_offset() >= pass.plan.end || !builder.add(header, data)? {
                        return self.map_done(pass, builder);
                    }
                }
                match self.advance(at, &chunk, pass.plan.end)? {
                    Some(at) => Ok(Next::Phase(Phase::Mapping { builder, at })),
                    None => self.map_done(pass, builder),
                }
            }
            Phase::Cleaning { mut cleaner, at, mut copy } => {
                let result = self.clean_chunk(pass, &mut cleaner, at, &mut copy).await;
                match result {
                    Ok(Some(at)) => Ok(Next::Phase(Phase::Cleaning { cleaner, at, copy })),
                    Ok(None) => Ok(Next::Done { first_dirty: cleaner.end() }),
                    Err(why) => {
                        if let Some(copy) = copy {
                            self.discard(copy).await;
                        }
                        Err(why)
                    }
                }
            }
        }
    }

    /// Cleans the next read of the segment at `at` into its copy, and swaps the copy in at the
    /// segment's end. Returns where the next turn reads, None when the pass is done.
    async fn clean_chunk(
        &mut self,
        pass: &mut Pass,
        cleaner: &mut Cleaner,
        at: Cursor,
        copy: &mut Option<StagedCopy<<E::Volume as Volume>::File>>,
    ) -> Result<Option<Cursor>, String> {
        let chunk = self.read_at(at, pass).await?;
        let producers_last: BTreeMap<i64, i64> = self
            .state
            .producers()
            .iter()
            .filter_map(|(&id, p)| p.batches.back().map(|b| (id, b.last_offset)))
            .collect();
        let cleaned = cleaner.clean(chunk.batches.iter().map(|(h, d)| (h, d)), &producers_last)?;
        let lost_some = cleaned.iter().map(|b| b.len() as u64).sum::<u64>() != chunk.len();
        if copy.is_none() && lost_some {
            *copy = Some(self.begin_copy(at, pass).await?);
        }
        if let Some(staged) = copy.as_mut() {
            let before = staged.written();
            staged.append(&cleaned).await.map_err(|e| e.to_string())?;
            pass.bytes += staged.written() - before;
        }
        let next = self.advance(at, &chunk, cleaner.end())?;
        if chunk.last
            && let Some(staged) = copy.take()
        {
            self.swap_in(staged).await?;
        }
        Ok(next)
    }

    /// Starts a segment's cleaned copy at the first read that lost something: the reads before
    /// it, unchanged, are copied first, a buffer at a time.
    async fn begin_copy(
        &mut self,
        at: Cursor,
        pass: &mut Pass,
    ) -> Result<StagedCopy<<E::Volume as Volume>::File>, String> {
        let log = self.log.as_ref().ok_or("the log closed")?;
        let mut staged = log.begin_staged(at.segment).await.map_err(|e| e.to_string())?;
        if at.position > 0 {
            reach("compaction: copy started midway through a segment");
        }
        let mut position = 0;
        while position < at.position {
            let copied = match self.read_at(Cursor { position, ..at }, pass).await {
                Ok(chunk) if chunk.next_position <= at.position => {
                    position = chunk.next_position;
                    let kept: Vec<_> = chunk.batches.into_iter().map(|(_, data)| data).collect();
                    staged.append(&kept).await.map_err(|e| e.to_string())
                }
                Ok(_) => Err(format!("segment {} changed under its pass", at.segment)),
                Err(why) => Err(why),
            };
            if let Err(why) = copied {
                self.discard(staged).await;
                return Err(why);
            }
        }
        pass.bytes += staged.written();
        Ok(staged)
    }

    /// Syncs a segment's cleaned copy and renames it in while this broker still owns the
    /// partition: no newer claim, the lease still held.
    async fn swap_in(&mut self, staged: StagedCopy<<E::Volume as Volume>::File>) -> Result<(), String> {
        let log = self.log.as_ref().ok_or("the log closed")?;
        if let Err(e) = log.seal_staged(&staged).await {
            self.discard(staged).await;
            return Err(e.to_string());
        }
        if crate::crash_point!("log.clean_before_swap") {
            crate::park_for_crash().await;
        }
        let Some(owned) = self.owned else {
            self.discard(staged).await;
            return Err("no longer owned".into());
        };
        let epoch = owned.claimed.epoch;
        let key = partition_key(&self.key.0, self.key.1);
        let superseded = claims::superseded(self.env.volume(), Kind::Partition, &key, epoch).await;
        let still_owner = superseded.as_ref().is_ok_and(|s| !s) && self.lease_ok();
        let log = self.log.as_mut().ok_or("the log closed")?;
        if !still_owner {
            log.discard_staged(staged).await;
            return Err(match superseded {
                Err(e) => format!("cannot check for a newer owner: {e}"),
                Ok(_) => {
                    reach("compaction: cleaned copy discarded, a newer owner may read the log");
                    format!("a newer owner than epoch {epoch} may be reading the log")
                }
            });
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
    fn map_done(&self, pass: &Pass, builder: MapBuilder) -> Result<Next<<E::Volume as Volume>::File>, String> {
        let log = self.log.as_ref().ok_or("the log closed")?;
        let map = builder.finish();
        if map.end() <= pass.plan.first_dirty {
            return Err("nothing dirty could be read".into());
        }
        let aborted = self.state.aborted_between(log.log_start_offset(), map.end());
        let cleaner = Cleaner::new(map, &aborted, pass.plan.drop_deletes_below);
        let first = log.closed_segment_holding(log.log_start_offset()).filter(|s| s.base_offset < cleaner.end());
        match first {
            Some(s) => Ok(Next::Phase(Phase::Cleaning {
                cleaner,
                at: Cursor { segment: s.base_offset, position: 0 },
                copy: None,
            })),
            None => Ok(Next::Done { first_dirty: cleaner.end() }),
        }
    }
}

/// How long after a pass's start `bytes` of I/O may have been done, at the pass's share of the
/// cleaner's limit.
fn throttled_ms(bytes: u64, cleaner: &CleanerConfig) -> i64 {
    let rate = cleaner.pass_bytes_per_second();
    if rate.is_nan() || rate <= 0.0 || rate >= f64::MAX {
        return 0;
    }
    (bytes as f64 / rate * 1000.0).min(i64::MAX as f64 / 2.0) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_reads_back_and_a_damaged_one_does_not() {
        for first_dirty in [0, 1, 4096, i64::MAX] {
            assert_eq!(decode_checkpoint(&encode_checkpoint(first_dirty)), Some(first_dirty));
        }
        let good = encode_checkpoint(12_345).to_vec();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert_eq!(decode_checkpoint(&bad), None, "byte {at} flipped");
        }
        assert_eq!(decode_checkpoint(&good[..13]), None, "torn");
        assert_eq!(decode_checkpoint(&[good.as_slice(), &[0]].concat()), None, "trailing bytes");
        assert_eq!(decode_checkpoint(&encode_checkpoint(-1)), None, "no offset is negative");
    }
}
