//! `PartitionLog`: one partition's segments, log start offset and high watermark.
//!
//! Durability is the volume's: an append is buffered until `sync`, and the high watermark is
//! the end of what has been synced, so a reader never sees a byte that a crash could take back.
//! Recovery scans the active segment's batches by CRC and cuts a torn tail; closed segments
//! were synced before they were closed and are trusted through their index.

use std::io;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::batch::{BatchHeader, HEADER_LEN};
use super::compact::schedule::SegmentSpan;
use super::control::Marker;
use super::records::TimestampAndOffset;
use super::segment::{self, Segment};
use crate::cluster::Claimed;
pub use crate::config::LogConfig;
use crate::env::{Volume, VolumeFile, join};

const PARTITION_STATE_FILE: &str = "partition.json";
const PARTITION_STATE_VERSION: u32 = 1;

#[derive(Debug)]
pub enum LogError {
    Io(io::Error),
    OffsetOutOfRange,
    /// Stored data failed a check it cannot fail unless the volume lost or changed bytes.
    Corrupt(String),
    /// A newer owner's files are there: this broker no longer owns the partition.
    Fenced(String),
}

impl From<io::Error> for LogError {
    fn from(e: io::Error) -> Self {
        LogError::Io(e)
    }
}

impl std::fmt::Display for LogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogError::Io(e) => write!(f, "i/o error: {e}"),
            LogError::OffsetOutOfRange => write!(f, "offset out of range"),
            LogError::Corrupt(what) => write!(f, "corrupt log: {what}"),
            LogError::Fenced(what) => write!(f, "fenced: {what}"),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct PartitionState {
    format_version: u32,
    log_start_offset: i64,
}

/// The end of what a partition log's last successful sync made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableEnd {
    /// The segment that was active.
    pub base_offset: i64,
    pub epoch: u32,
    /// Its bytes known durable; whatever follows them may be gone after a crash.
    pub len: u64,
}

/// Cuts the segment of `end` in `dir` back to its durable length, durably: what a failed write
/// or sync left after it is unknown to the disk, however readable it looks.
pub async fn cut_to_durable<V: Volume>(volume: &V, dir: &str, end: DurableEnd) -> Result<(), LogError> {
    let file = segment::open_file(volume, dir, end.base_offset, end.epoch).await?;
    if file.len() > end.len {
        tracing::warn!(
            dir,
            base = end.base_offset,
            durable = end.len,
            len = file.len(),
            "cutting what a failed sync covered"
        );
        file.truncate(end.len).await?;
    }
    Ok(())
}

/// A segment's cleaned copy, written beside it a chunk at a time (`StagedCopy::append`), then
/// synced (`PartitionLog::seal_staged`); not yet swapped in.
pub struct StagedCopy<F> {
    base_offset: i64,
    epoch: u32,
    /// The segment's end: every batch of the copy lies below it.
    end: i64,
    /// Where the next batch may start: the copy keeps the segment's order.
    next: i64,
    headers: Vec<BatchHeader>,
    /// Its name in the partition's directory.
    name: String,
    file: F,
}

impl<F: VolumeFile> StagedCopy<F> {
    /// Bytes written for it.
    pub fn written(&self) -> u64 {
        self.headers.iter().map(|h| h.total_len() as u64).sum()
    }

    /// Writes the next cleaned batches: each checked, in offset order, within the segment.
    pub async fn append(&mut self, batches: &[Bytes]) -> Result<(), LogError> {
        for data in batches {
            let header = super::batch::check(data).map_err(|e| LogError::Corrupt(format!("cleaned batch: {e:?}")))?;
            if header.base_offset < self.next || header.next_offset() > self.end {
                return Err(LogError::Corrupt(format!(
                    "{}: cleaned batch at {} outside [{}, {}) of segment {}",
                    self.name, header.base_offset, self.next, self.end, self.base_offset
                )));
            }
            self.file.append(data.clone()).await?;
            self.next = header.next_offset();
            self.headers.push(header);
        }
        Ok(())
    }
}

/// Batches read from a closed segment from a byte position on: what one turn of a cleaning
/// pass reads.
pub struct SegmentChunk {
    pub batches: Vec<(BatchHeader, Bytes)>,
    /// Where the next read starts: the segment's durable end once it is all read.
    pub next_position: u64,
    /// Whether the chunk ends the segment.
    pub last: bool,
}

impl SegmentChunk {
    /// Bytes read.
    pub fn len(&self) -> u64 {
        self.batches.iter().map(|(_, data)| data.len() as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

/// Bytes of whole batches read from one segment.
#[derive(Debug, Default)]
pub struct ReadResult {
    pub records: Bytes,
}

pub struct PartitionLog<V: Volume> {
    volume: V,
    dir: String,
    /// Sorted by base offset; the last is the active segment. Never empty.
    segments: Vec<Segment<V::File>>,
    log_start_offset: i64,
    high_watermark: i64,
    config: LogConfig,
    /// The ownership epoch it is open under: new segments carry it in their names.
    epoch: u32,
}

impl<V: Volume> PartitionLog<V> {
    /// Opens the log in `dir`, creating it if absent, and recovers it: the active segment's torn
    /// tail is cut, every synced batch is kept, and the high watermark is the recovered end.
    ///
    /// `claimed` is the ownership epoch this broker opens it under. The segments read are the
    /// chain of the epochs up to it: a segment of an older epoch than one before it is a late
    /// file of a paused old owner, and is skipped. On a take-over from an owner that did not
    /// release (it may still write), the old owner's last segment is sealed at its recovered end
    /// and a new segment of this epoch starts there, so nothing that owner writes later is read.
    pub async fn open(volume: V, dir: &str, config: LogConfig, claimed: Claimed) -> Result<Self, LogError> {
        volume.create_dir_all(dir).await?;
        let names = volume.list(dir).await?;
        let mut files: Vec<(i64, u32)> = names.iter().filter_map(|n| segment::parse_log_name(n)).collect();
        if let Some(&(base, epoch)) = files.iter().find(|(_, e)| *e > claimed.epoch) {
            return Err(LogError::Fenced(format!(
                "{dir}: segment {base} of epoch {epoch} is newer than this owner's epoch {}",
                claimed.epoch
            )));
        }
        files.sort_unstable();
        let mut chain: Vec<(i64, u32)> = Vec::with_capacity(files.len());
        let mut dropped = Vec::new();
        for (base, epoch) in files {
            let newest = chain.last().map_or(0, |&(_, e)| e);
            if epoch < newest {
                tracing::warn!(dir, base, epoch, newest, "skipping a late segment of an older owner");
                dropped.push((base, epoch));
                continue;
            }
            if chain.last().is_some_and(|&(b, _)| b == base) {
                dropped.extend(chain.pop());
            }
            chain.push((base, epoch));
        }
        // A cleaned copy a crash left before its rename: the segment it copies is whole.
        for name in names.iter().filter(|n| n.ends_with(".cleaned")) {
            tracing::info!(dir, name, "removing a cleaning pass's unfinished copy");
            volume.remove_file(&join(dir, name)).await?;
        }
        // Superseded and late files go: once retention removed the segments that outrank
        // them, they would otherwise be read as the start of the log.
        for (base, epoch) in dropped {
            volume.remove_file(&join(dir, &segment::log_name(base, epoch))).await?;
            volume.remove_file(&join(dir, &segment::index_name(base, epoch))).await?;
        }
        let seals: Vec<(i64, u32, u32)> = names
            .iter()
            .filter_map(|n| segment::parse_seal_name(n))
            .filter(|&(_, _, by)| by <= claimed.epoch)
            .collect();
        let persisted_start = read_state(&volume, dir).await?;
        if chain.is_empty() {
            chain.push((persisted_start.unwrap_or(0), claimed.epoch));
        }
        let last = chain.len() - 1;
        let mut segments = Vec::with_capacity(chain.len());
        let mut last_sealed = false;
        for (i, &(base, epoch)) in chain.iter().enumerate() {
            let file = segment::open_file(&volume, dir, base, epoch).await?;
            let mut seg = Segment::new_loaded(base, epoch, file);
            let seal = seals.iter().filter(|&&(b, e, by)| b == base && e == epoch && by > epoch).map(|s| s.2).max();
            let mut sealed = false;
            if let Some(by) = seal {
                let name = segment::seal_name(base, epoch, by);
                let raw = volume.read(&join(dir, &name)).await?;
                sealed = raw.as_ref().is_some_and(|raw| seg.load_index(raw, true));
                // A seal covering more than the file is a cleaned copy's, swapped in (holding
                // only what the seal covered) before the seal was removed: read as unsealed.
                // An old owner's late bytes only ever make a file longer than its seal.
                let cleaned = raw.as_deref().and_then(segment::indexed_len).is_some_and(|len| len > seg.size());
                let read_unsealed = cleaned && i != last;
                if !sealed && !read_unsealed {
                    return Err(LogError::Corrupt(format!("{dir}/{name}: unreadable seal")));
                }
                last_sealed = sealed && i == last;
            }
            if !sealed {
                let index = volume.read(&join(dir, &segment::index_name(base, epoch))).await?;
                let trusted = i != last && index.is_some_and(|raw| seg.load_index(&raw, false));
                if !trusted {
                    let scan = seg.scan(config.index_interval_bytes).await?;
                    if scan.valid_len < scan.file_len {
                        if i != last {
                            return Err(LogError::Corrupt(format!(
                                "{dir}/{}: invalid batch at position {} of {} in a closed segment",
                                segment::log_name(base, epoch),
                                scan.valid_len,
                                scan.file_len
                            )));
                        }
                        tracing::warn!(dir, base, valid = scan.valid_len, len = scan.file_len, "cutting torn log tail");
                        seg.file.truncate(scan.valid_len).await?;
                    }
                }
            }
            if let Some(prev) = segments.last_mut() {
                let prev: &mut Segment<V::File> = prev;
                if prev.next_offset > base {
                    return Err(LogError::Corrupt(format!(
                        "{dir}: segment {base} does not follow {} (files {names:?})",
                        prev.next_offset
                    )));
                }
                // A cleaned segment whose last batches were cleaned away still ends where the
                // next one begins.
                prev.next_offset = base;
            }
            segments.push(seg);
        }
        // What survived the crash is on disk; make it durable before anyone reads it. The log
        // ends where the scan found it end: an old owner still writing may add bytes after the
        // scan (and on a local disk this fsync makes them durable too), but they are not read.
        let active = segments.last_mut().expect("at least one segment");
        if !last_sealed {
            let scanned = active.durable_len;
            active.file.sync().await?;
            active.durable_len = scanned;
        }
        let log_end_offset = active.next_offset;
        let first_base = segments[0].base_offset;
        let log_start_offset = persisted_start.unwrap_or(first_base).max(first_base).min(log_end_offset);
        let mut log = PartitionLog {
            volume,
            dir: dir.to_string(),
            segments,
            log_start_offset,
            high_watermark: if crate::mutant!(HwmNotRestored) { log_start_offset } else { log_end_offset },
            config,
            epoch: claimed.epoch,
        };
        let active = log.active();
        tracing::debug!(dir, ?chain, ?seals, end = log.log_end_offset(), ?claimed, "opened log");
        if active.epoch < claimed.epoch && (claimed.takeover || last_sealed) {
            log.seal_and_roll(last_sealed).await?;
        }
        log.check_invariants();
        Ok(log)
    }

    /// The take-over of a log whose owner did not release it: its last segment is sealed at the
    /// recovered end (an index that bounds it), and a segment of this epoch starts there. An
    /// empty last segment needs no seal: the new one, at the same base, supersedes it.
    async fn seal_and_roll(&mut self, already_sealed: bool) -> Result<(), LogError> {
        let active = self.active();
        let (base, epoch) = (active.base_offset, active.epoch);
        if active.size() > 0 && !already_sealed {
            let seal = active.encode_index();
            self.volume.write_atomic(&join(&self.dir, &segment::seal_name(base, epoch, self.epoch)), seal).await?;
        }
        let next = self.log_end_offset();
        let file = segment::open_file(&self.volume, &self.dir, next, self.epoch).await?;
        if next == base {
            self.segments.pop();
            self.volume.remove_file(&join(&self.dir, &segment::log_name(base, epoch))).await?;
        }
        let mut seg = Segment::new_empty(next, self.epoch, file);
        seg.durable_len = 0;
        self.segments.push(seg);
        Ok(())
    }

    /// Where the log's records written under `epoch` end for sure: the base of the first segment
    /// of a newer epoch. A snapshot of an older epoch past it is a zombie's.
    pub fn epoch_end(&self, epoch: u32) -> i64 {
        self.segments.iter().find(|s| s.epoch > epoch).map_or(i64::MAX, |s| s.base_offset)
    }

    /// OffsetForLeaderEpoch (KIP-101, KIP-320): the largest epoch of this log up to
    /// `leader_epoch` and the offset its records end at (the next epoch's first offset, or the
    /// log end for the current epoch); `None` if the log holds no epoch that old.
    pub fn end_offset_for_epoch(&self, leader_epoch: u32) -> Option<(u32, i64)> {
        let epoch = self.segments.iter().map(|s| s.epoch).chain([self.epoch]).filter(|&e| e <= leader_epoch).max()?;
        let end = self.segments.iter().find(|s| s.epoch > epoch).map_or(self.log_end_offset(), |s| s.base_offset);
        Some((epoch, end))
    }

    /// The ownership epoch the log is open under.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size()).sum()
    }

    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    fn active(&self) -> &Segment<V::File> {
        self.segments.last().expect("at least one segment")
    }

    /// Appends one producer batch at the log end offset; not durable until `sync`. Returns the
    /// assigned base offset.
    pub async fn append(&mut self, header: &BatchHeader, data: Bytes) -> Result<i64, LogError> {
        let base_offset = self.log_end_offset();
        let leader_epoch = i32::try_from(self.epoch).unwrap_or(i32::MAX);
        let data = super::batch::stamped(&data, base_offset, leader_epoch);
        let header = BatchHeader { base_offset, partition_leader_epoch: leader_epoch, ..*header };
        let active = self.active();
        let full = active.size() + data.len() as u64 > self.config.segment_bytes;
        // `segment.ms`, as Apache measures it: the batch's time against the segment's first
        // batch (record time, not the broker's clock, so a replay of old records does not roll
        // at every append).
        let first = active.first_timestamp();
        let aged = first >= 0 && header.max_timestamp.saturating_sub(first) > self.config.segment_ms;
        if active.size() > 0 && (full || aged || crate::buggify!("log.early_roll")) {
            self.roll().await?;
        }
        let interval = self.config.index_interval_bytes;
        self.segments.last_mut().expect("active").append(&header, data, interval).await?;
        Ok(base_offset)
    }

    /// Closes the active segment (synced, index persisted) and opens a new one at the log end.
    async fn roll(&mut self) -> Result<(), LogError> {
        self.sync().await?;
        let active = self.active();
        let index = active.encode_index();
        let index_path = join(&self.dir, &segment::index_name(active.base_offset, active.epoch));
        self.volume.write_atomic(&index_path, index).await?;
        let base = self.log_end_offset();
        let file = segment::open_file(&self.volume, &self.dir, base, self.epoch).await?;
        self.segments.push(Segment::new_empty(base, self.epoch, file));
        Ok(())
    }

    /// Makes every appended batch durable and advances the high watermark to the log end.
    ///
    /// A failed fsync is final for everything it covered: Linux may mark the dirty pages clean
    /// after reporting the error, so they stay readable while nothing says they reached the
    /// disk, and a second fsync succeeds without writing them (PostgreSQL's "fsyncgate").
    /// The caller must not ack any of it, and must cut the log back to `durable_end` before
    /// anyone reads it again.
    pub async fn sync(&mut self) -> Result<(), LogError> {
        let active = self.segments.last_mut().expect("active");
        if active.durable_len < active.size() {
            if !crate::mutant!(AckBeforeFsync) {
                let synced = active.file.sync().await;
                if synced.is_err() && crate::mutant!(ServeAfterFailedFsync) {
                    active.file.sync().await?;
                } else {
                    synced?;
                }
            }
            active.durable_len = active.size();
        }
        self.high_watermark = self.log_end_offset();
        self.check_invariants();
        Ok(())
    }

    /// Where the durable part of the log ends: the active segment and its synced length.
    pub fn durable_end(&self) -> DurableEnd {
        let active = self.active();
        DurableEnd { base_offset: active.base_offset, epoch: active.epoch, len: active.durable_len }
    }

    /// Whole batches starting with the one containing `offset`, up to `max_bytes` (but always
    /// the first batch whole, as Kafka does since KIP-74), never past the high watermark nor
    /// past `upper` (a batch boundary: the last stable offset of a read_committed fetch).
    pub async fn read(&self, offset: i64, max_bytes: usize, upper: Option<i64>) -> Result<ReadResult, LogError> {
        let end = if crate::mutant!(FetchPastHwm) { self.log_end_offset() } else { self.high_watermark };
        if offset < self.log_start_offset || offset > end {
            return Err(LogError::OffsetOutOfRange);
        }
        let upper = upper.map_or(end, |u| u.min(end));
        if offset >= upper {
            return Ok(ReadResult::default());
        }
        let mut at = self.segments.partition_point(|s| s.base_offset <= offset).saturating_sub(1);
        loop {
            let seg = &self.segments[at];
            let mut limit = if crate::mutant!(FetchPastHwm) { seg.size() } else { seg.durable_len };
            if upper <= seg.base_offset {
                return Ok(ReadResult::default());
            }
            if upper < seg.next_offset {
                limit = seg.position_of(upper, limit).await?;
            }
            // Past the end of a segment (cleaned away, or not yet durable) the next one is read
            // from its start.
            let position = seg.position_of(offset.max(seg.base_offset), limit).await?;
            if position < limit {
                return read_batches(seg, position, limit, max_bytes).await;
            }
            at += 1;
            if at == self.segments.len() {
                return Ok(ReadResult::default());
            }
        }
    }

    /// The headers of every durable batch from the one containing `offset` to the high
    /// watermark, read without the records, and the marker of each control batch: what
    /// rebuilding producer and transaction state needs.
    pub async fn batch_headers(&self, offset: i64) -> Result<Vec<(BatchHeader, Option<Marker>)>, LogError> {
        let mut headers = Vec::new();
        let first = self.segments.partition_point(|s| s.base_offset <= offset).saturating_sub(1);
        for seg in &self.segments[first..] {
            let mut position =
                if seg.base_offset < offset { seg.position_of(offset, seg.durable_len).await? } else { 0 };
            while position < seg.durable_len {
                let corrupt = |what: &str| {
                    LogError::Corrupt(format!("{}: {what} at {position} of segment {}", self.dir, seg.base_offset))
                };
                let raw = seg.file.read_at(position, super::batch::HEADER_LEN).await?;
                let header = BatchHeader::parse(&raw).map_err(|_| corrupt("bad batch header"))?;
                let marker = if header.is_control() {
                    let raw = seg.file.read_at(position, header.total_len()).await?;
                    let (_, marker, _) = super::control::parse_marker(&raw).ok_or_else(|| corrupt("bad marker"))?;
                    Some(marker)
                } else {
                    None
                };
                position += header.total_len() as u64;
                headers.push((header, marker));
            }
        }
        Ok(headers)
    }

    /// How many segments the log has: it grows when the active segment rolls.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// The base offset of the first batch with a timestamp at or after `timestamp`, or `None`.
    pub async fn offset_for_time(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>, LogError> {
        for seg in &self.segments {
            let limit = seg.durable_len;
            if let Some(found) = seg.offset_for_time(timestamp, self.log_start_offset, limit).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The largest timestamp in the log and the base offset of its batch (ListOffsets -3).
    pub fn max_timestamp(&self) -> i64 {
        self.segments.iter().map(|s| s.max_timestamp).max().unwrap_or(-1)
    }

    /// Swaps closed segment `base_offset` for its cleaned copy `batches`: `stage_cleaned`, then
    /// `swap_cleaned` at once (the partition actor checks its ownership between the two).
    #[cfg(test)]
    pub async fn replace_segment(&mut self, base_offset: i64, batches: &[Bytes]) -> Result<(), LogError> {
        let staged = self.stage_cleaned(base_offset, batches).await?;
        self.swap_cleaned(staged).await
    }

    /// The cleaned copy `batches` of closed segment `base_offset`, staged at once: `begin_staged`,
    /// `StagedCopy::append`, `seal_staged`.
    #[cfg(test)]
    pub async fn stage_cleaned(
        &mut self,
        base_offset: i64,
        batches: &[Bytes],
    ) -> Result<StagedCopy<V::File>, LogError> {
        let mut staged = self.begin_staged(base_offset).await?;
        staged.append(batches).await?;
        self.seal_staged(&staged).await?;
        Ok(staged)
    }

    /// Starts the cleaned copy of closed segment `base_offset` (some of its batches, in order,
    /// offsets unchanged), beside it under this owner's name for it. Nothing reads it until
    /// `swap_cleaned`; a crash before that leaves the segment whole, and the copy is removed at
    /// the next open.
    pub async fn begin_staged(&self, base_offset: i64) -> Result<StagedCopy<V::File>, LogError> {
        let at = self.segments.iter().position(|s| s.base_offset == base_offset);
        let Some(at) = at.filter(|&at| self.cleanable(at)) else {
            return Err(LogError::Corrupt(format!("{}: no closed segment at {base_offset} to replace", self.dir)));
        };
        let (epoch, end) = (self.segments[at].epoch, self.segments[at].next_offset);
        let name = segment::cleaned_name(base_offset, epoch, self.epoch);
        let file = self.volume.create(&join(&self.dir, &name)).await?;
        Ok(StagedCopy { base_offset, epoch, end, next: base_offset, headers: Vec::new(), name, file })
    }

    /// Syncs a staged copy: it is whole on the volume, ready to be renamed in.
    pub async fn seal_staged(&self, staged: &StagedCopy<V::File>) -> Result<(), LogError> {
        staged.file.sync().await?;
        if crate::mutant!(CleanRemovesBeforeSwap) {
            let segment = segment::log_name(staged.base_offset, staged.epoch);
            self.volume.remove_file(&join(&self.dir, &segment)).await?;
            self.volume.sync_dir(&self.dir).await?;
        }
        Ok(())
    }

    /// Renames a staged copy over its segment (the one atomic step), syncs the directory, and
    /// indexes it. The segment still ends where it ended, whatever was cleaned away.
    pub async fn swap_cleaned(&mut self, staged: StagedCopy<V::File>) -> Result<(), LogError> {
        let StagedCopy { base_offset, epoch, end, headers, name, file, .. } = staged;
        let at = self.segments.iter().position(|s| s.base_offset == base_offset && s.epoch == epoch);
        let Some(at) = at.filter(|&at| self.cleanable(at)) else {
            return Err(LogError::Corrupt(format!("{}: segment {base_offset} went before its swap", self.dir)));
        };
        let copy = join(&self.dir, &name);
        let path = join(&self.dir, &segment::log_name(base_offset, epoch));
        self.volume.rename(&copy, &path).await?;
        self.volume.sync_dir(&self.dir).await?;
        // The file written is the segment now; its index comes from the batches checked above.
        let mut seg = Segment::new_loaded(base_offset, epoch, file);
        let mut position = 0;
        for header in &headers {
            let len = header.total_len() as u64;
            seg.note_batch(header, position, len, self.config.index_interval_bytes);
            position += len;
        }
        seg.durable_len = position;
        seg.next_offset = end;
        let index = join(&self.dir, &segment::index_name(base_offset, epoch));
        self.volume.write_atomic(&index, seg.encode_index()).await?;
        // A take-over's seal described the file before it was cleaned; the copy holds only what
        // the seal covered, so it goes (`open` reads a seal longer than its file as this).
        // A seal a listing misses stays, and is read so.
        for name in self.volume.list(&self.dir).await? {
            if segment::parse_seal_name(&name).is_some_and(|(b, e, _)| b == base_offset && e == epoch) {
                self.volume.remove_file(&join(&self.dir, &name)).await?;
            }
        }
        self.segments[at] = seg;
        self.check_invariants();
        Ok(())
    }

    /// Removes a staged copy that will not be swapped in (its owner lost the partition).
    pub async fn discard_staged(&mut self, staged: StagedCopy<V::File>) {
        let copy = join(&self.dir, &staged.name);
        drop(staged);
        if let Err(e) = self.volume.remove_file(&copy).await {
            tracing::warn!(path = %copy, error = %e, "cannot remove a cleaned copy; the next open will");
        }
    }

    /// Whether the cleaner may replace the `at`th segment: a closed one.
    fn cleanable(&self, at: usize) -> bool {
        at + 1 < self.segments.len() || (crate::mutant!(CleanActiveSegment) && at < self.segments.len())
    }

    /// The segments the cleaner may clean: the closed ones.
    fn closed(&self) -> &[Segment<V::File>] {
        match crate::mutant!(CleanActiveSegment) {
            true => &self.segments[..],
            false => &self.segments[..self.segments.len() - 1],
        }
    }

    fn span(s: &Segment<V::File>) -> SegmentSpan {
        SegmentSpan {
            base_offset: s.base_offset,
            next_offset: s.next_offset,
            size: s.size(),
            first_timestamp: s.first_timestamp(),
            max_timestamp: s.max_timestamp,
        }
    }

    /// The closed segments as the cleaner's schedule sees them, oldest first.
    pub fn segment_spans(&self) -> Vec<SegmentSpan> {
        self.closed().iter().map(Self::span).collect()
    }

    /// The closed segment holding `offset`, or the first after it.
    pub fn closed_segment_holding(&self, offset: i64) -> Option<SegmentSpan> {
        let closed = self.closed();
        let at = closed.partition_point(|s| s.next_offset <= offset);
        closed.get(at).map(Self::span)
    }

    /// Rolls the active segment if its first batch is older than `segment.ms`, so that a quiet
    /// partition's records reach a closed segment (where retention and the cleaner work).
    pub async fn roll_if_older(&mut self, now_ms: i64) -> Result<bool, LogError> {
        let active = self.active();
        let first = active.first_timestamp();
        if active.size() == 0 || first < 0 || now_ms.saturating_sub(first) <= self.config.segment_ms {
            return Ok(false);
        }
        self.roll().await?;
        Ok(true)
    }

    /// The durable batches of closed segment `base_offset` from byte `position`: about
    /// `max_bytes` of them, at least one whole batch, each checked; None if the segment is gone.
    pub async fn segment_chunk(
        &self,
        base_offset: i64,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<SegmentChunk>, LogError> {
        let Some(seg) = self.segments.iter().find(|s| s.base_offset == base_offset) else {
            return Ok(None);
        };
        let end = seg.durable_len;
        let corrupt = |at: u64| LogError::Corrupt(format!("{}: bad batch at {at} of segment {base_offset}", self.dir));
        if position >= end {
            return Ok(Some(SegmentChunk { batches: Vec::new(), next_position: end, last: true }));
        }
        let available = (end - position) as usize;
        let first = seg.file.read_at(position, HEADER_LEN.min(available)).await?;
        let header = BatchHeader::parse(&first).map_err(|_| corrupt(position))?;
        let raw = seg.file.read_at(position, max_bytes.max(header.total_len()).min(available)).await?;
        let mut batches = Vec::new();
        let mut at = 0;
        // A batch the read's end cuts is the next chunk's first.
        while let Ok(h) = BatchHeader::parse(&raw[at..]) {
            let len = h.total_len();
            if at + len > raw.len() {
                break;
            }
            let header = super::batch::check(&raw[at..at + len]).map_err(|_| corrupt(position + at as u64))?;
            batches.push((header, raw.slice(at..at + len)));
            at += len;
        }
        if at == 0 || (at < raw.len() && raw.len() == available) {
            // Not even the first batch fits in what the segment holds, or its durable end cuts
            // one: the segment is not what its index says.
            return Err(corrupt(position + at as u64));
        }
        let next_position = position + at as u64;
        Ok(Some(SegmentChunk { batches, next_position, last: next_position >= end }))
    }

    /// The durable batches of closed segment `base_offset`, whole, in order.
    #[cfg(test)]
    pub async fn segment_batches(&self, base_offset: i64) -> Result<Vec<(BatchHeader, Bytes)>, LogError> {
        let mut out = Vec::new();
        let mut position = 0;
        while let Some(chunk) = self.segment_chunk(base_offset, position, 4096).await? {
            out.extend(chunk.batches);
            position = chunk.next_position;
            if chunk.last {
                break;
            }
        }
        Ok(out)
    }

    /// Moves the log start offset forward (DeleteRecords). `offset` -1 means the high watermark.
    pub async fn delete_records(&mut self, offset: i64) -> Result<i64, LogError> {
        let offset = if offset == -1 { self.high_watermark } else { offset };
        if offset < 0 || offset > self.high_watermark {
            return Err(LogError::OffsetOutOfRange);
        }
        if offset > self.log_start_offset {
            self.set_log_start_offset(offset).await?;
            self.delete_segments_below_start().await?;
        }
        Ok(self.log_start_offset)
    }

    async fn set_log_start_offset(&mut self, offset: i64) -> Result<(), LogError> {
        assert!(offset >= self.log_start_offset, "the log start offset only moves forward");
        let state = PartitionState { format_version: PARTITION_STATE_VERSION, log_start_offset: offset };
        let raw = serde_json::to_vec(&state).expect("serialisable");
        self.volume.write_atomic(&join(&self.dir, PARTITION_STATE_FILE), Bytes::from(raw)).await?;
        self.log_start_offset = offset;
        Ok(())
    }

    /// Removes closed segments entirely below the log start offset.
    async fn delete_segments_below_start(&mut self) -> Result<(), LogError> {
        while self.segments.len() > 1 && self.segments[0].next_offset <= self.log_start_offset {
            self.remove_oldest_segment().await?;
        }
        Ok(())
    }

    async fn remove_oldest_segment(&mut self) -> Result<(), LogError> {
        assert!(self.segments.len() > 1, "the active segment is never removed");
        let seg = self.segments.remove(0);
        self.volume.remove_file(&join(&self.dir, &segment::log_name(seg.base_offset, seg.epoch))).await?;
        self.volume.remove_file(&join(&self.dir, &segment::index_name(seg.base_offset, seg.epoch))).await?;
        Ok(())
    }

    /// Deletes closed segments past `retention.ms` (by their largest timestamp) or beyond
    /// `retention.bytes`, oldest first, moving the log start offset with them. A segment is
    /// deleted only once it lies wholly below `stable_end` (the last stable offset), so the
    /// log start offset never passes the first offset of an open transaction: its records stay
    /// until the transaction ends, and the last stable offset stays a readable offset.
    pub async fn enforce_retention(&mut self, now_ms: i64, stable_end: i64) -> Result<(), LogError> {
        loop {
            if self.segments.len() < 2 {
                break;
            }
            let oldest = &self.segments[0];
            if oldest.next_offset > stable_end && !crate::mutant!(RetentionPastOpenTransaction) {
                break;
            }
            // A compacted log keeps every key's last record however old (`cleanup.policy`
            // without `delete`).
            if !self.config.cleanup.delete {
                break;
            }
            let expired = self.config.retention_ms >= 0
                && oldest.max_timestamp >= 0
                && now_ms - oldest.max_timestamp > self.config.retention_ms;
            let oversize = self.config.retention_bytes >= 0
                && self.size_bytes().saturating_sub(oldest.size()) >= self.config.retention_bytes as u64;
            if !expired && !oversize {
                break;
            }
            let next = oldest.next_offset;
            if next > self.log_start_offset {
                self.set_log_start_offset(next).await?;
            }
            self.remove_oldest_segment().await?;
        }
        Ok(())
    }

    fn check_invariants(&self) {
        assert!(!self.segments.is_empty());
        assert!(
            self.log_start_offset <= self.high_watermark,
            "log start {} > hwm {}",
            self.log_start_offset,
            self.high_watermark
        );
        assert!(self.high_watermark <= self.log_end_offset());
        debug_assert!(self.segments.windows(2).all(|w| w[0].next_offset == w[1].base_offset));
    }
}

async fn read_state<V: Volume>(volume: &V, dir: &str) -> Result<Option<i64>, LogError> {
    let Some(raw) = volume.read(&join(dir, PARTITION_STATE_FILE)).await? else {
        return Ok(None);
    };
    let state: PartitionState =
        serde_json::from_slice(&raw).map_err(|e| LogError::Corrupt(format!("{dir}/{PARTITION_STATE_FILE}: {e}")))?;
    if state.format_version != PARTITION_STATE_VERSION {
        return Err(LogError::Corrupt(format!(
            "{dir}/{PARTITION_STATE_FILE}: unknown format version {}",
            state.format_version
        )));
    }
    Ok(Some(state.log_start_offset))
}

async fn read_batches<F: VolumeFile>(
    seg: &Segment<F>,
    position: u64,
    limit: u64,
    max_bytes: usize,
) -> Result<ReadResult, LogError> {
    let first = seg.file.read_at(position, HEADER_LEN).await?;
    let header = BatchHeader::parse(&first).map_err(|_| LogError::Corrupt(format!("batch header at {position}")))?;
    let available = (limit - position) as usize;
    let len = max_bytes.max(header.total_len()).min(available);
    let data = seg.file.read_at(position, len).await?;
    // Keep whole batches only.
    let mut end = 0;
    while end + HEADER_LEN <= data.len() {
        let Ok(h) = BatchHeader::parse(&data[end..]) else {
            break;
        };
        if end + h.total_len() > data.len() {
            break;
        }
        end += h.total_len();
    }
    assert!(end > 0 || data.len() < header.total_len(), "the first batch is always returned whole");
    Ok(ReadResult { records: data.slice(..end) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::real::{RealRng, RealVolume};
    use crate::env::{Rng, Volume};
    use crate::partition::log::batch::{self, tests::make_batch};

    const SOLO: Claimed = Claimed { epoch: 0, takeover: false };

    fn scratch() -> RealVolume {
        let dir = std::env::temp_dir().join(format!("kaas-log-test-{:x}", RealRng::default().next_u64()));
        RealVolume::new(dir)
    }

    async fn append(log: &mut PartitionLog<RealVolume>, count: i32, ts: i64) -> i64 {
        let data = make_batch(0, count, ts);
        let header = batch::check(&data).unwrap();
        log.append(&header, data).await.unwrap()
    }

    fn small() -> LogConfig {
        LogConfig { segment_bytes: 300, index_interval_bytes: 100, ..LogConfig::default() }
    }

    #[tokio::test]
    async fn appends_are_invisible_until_synced_and_survive_reopen() {
        let volume = scratch();
        let mut log = PartitionLog::open(volume.clone(), "t-0", small(), SOLO).await.unwrap();
        for i in 0..20 {
            assert_eq!(append(&mut log, 3, 1000 + i).await, i * 3);
        }
        // Rolls sync the closed segment; the active one's tail stays invisible until synced.
        let hwm = log.high_watermark();
        assert!(hwm < 60, "hwm {hwm}");
        assert!(log.read(hwm, 1 << 20, None).await.unwrap().records.is_empty());
        log.sync().await.unwrap();
        assert_eq!(log.high_watermark(), 60);
        let segments = volume.list("t-0").await.unwrap().iter().filter(|n| n.ends_with(".log")).count();
        assert!(segments > 3, "small segments roll: {segments}");
        drop(log);
        let log = PartitionLog::open(volume.clone(), "t-0", small(), SOLO).await.unwrap();
        assert_eq!(log.high_watermark(), 60);
        for offset in [0, 1, 29, 31, 59] {
            let read = log.read(offset, 1, None).await.unwrap();
            let header = batch::check(&read.records).unwrap();
            assert!(header.base_offset <= offset && offset <= header.last_offset(), "offset {offset}");
        }
        assert_eq!(log.offset_for_time(1010).await.unwrap().map(|f| f.offset), Some(30));
        assert_eq!(log.offset_for_time(5000).await.unwrap(), None);
        assert!(matches!(log.read(61, 100, None).await, Err(LogError::OffsetOutOfRange)));
    }

    #[tokio::test]
    async fn a_torn_tail_is_cut_and_synced_batches_are_kept() {
        let volume = scratch();
        let mut log = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap();
        append(&mut log, 2, 1).await;
        append(&mut log, 2, 2).await;
        log.sync().await.unwrap();
        drop(log);
        // A crash mid-append leaves half a batch behind.
        let file = volume.open("t-0/00000000000000000000.log").await.unwrap();
        let torn = make_batch(4, 5, 3);
        file.append(torn.slice(..torn.len() / 2)).await.unwrap();
        let mut log = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap();
        assert_eq!(log.high_watermark(), 4);
        assert_eq!(append(&mut log, 1, 4).await, 4);
        log.sync().await.unwrap();
        assert_eq!(log.high_watermark(), 5);
    }

    #[tokio::test]
    async fn delete_records_and_retention_move_the_log_start() {
        let volume = scratch();
        let mut log = PartitionLog::open(volume.clone(), "t-0", small(), SOLO).await.unwrap();
        for i in 0..20 {
            append(&mut log, 3, 1000 + i).await;
        }
        log.sync().await.unwrap();
        assert_eq!(log.delete_records(31).await.unwrap(), 31);
        assert!(matches!(log.read(30, 10, None).await, Err(LogError::OffsetOutOfRange)));
        assert!(matches!(log.delete_records(61).await, Err(LogError::OffsetOutOfRange)));
        drop(log);
        let mut log = PartitionLog::open(volume.clone(), "t-0", small(), SOLO).await.unwrap();
        assert_eq!(log.log_start_offset(), 31);
        log.set_config(LogConfig { retention_ms: 100, ..small() });
        log.enforce_retention(1125, i64::MAX).await.unwrap();
        assert!(log.log_start_offset() > 31);
        assert_eq!(log.high_watermark(), 60);
    }

    #[tokio::test]
    async fn segment_ms_rolls_at_the_append_that_is_older_by_it_in_record_time() {
        let volume = scratch();
        let config = LogConfig { segment_ms: 100, ..LogConfig::default() };
        let mut log = PartitionLog::open(volume.clone(), "t-0", config, SOLO).await.unwrap();
        let segments = |log: &PartitionLog<RealVolume>| log.segment_spans().len() + 1;
        // Old records (a replay) keep their spacing: within 100 ms of the first, no roll.
        for ts in [5, 50, 105] {
            append(&mut log, 1, ts).await;
        }
        assert_eq!(segments(&log), 1, "105 - 5 is not more than segment.ms");
        append(&mut log, 1, 106).await;
        assert_eq!(segments(&log), 2, "106 - 5 is");
        assert_eq!(log.segment_spans()[0].next_offset, 3, "the batch that was too late opens the new segment");
        // The new segment's age counts from its own first batch.
        append(&mut log, 1, 200).await;
        assert_eq!(segments(&log), 2);
        append(&mut log, 1, 207).await;
        assert_eq!(segments(&log), 3);
    }
}

#[cfg(test)]
mod corruption_tests {
    use super::*;
    use crate::env::real::{RealRng, RealVolume};
    use crate::env::{Rng, Volume};
    use crate::partition::log::batch::{self, tests::make_batch};

    const SOLO: Claimed = Claimed { epoch: 0, takeover: false };

    fn scratch() -> RealVolume {
        RealVolume::new(std::env::temp_dir().join(format!("kaas-corrupt-{:x}", RealRng::default().next_u64())))
    }

    async fn filled(volume: &RealVolume) {
        let config = LogConfig { segment_bytes: 300, index_interval_bytes: 100, ..LogConfig::default() };
        let mut log = PartitionLog::open(volume.clone(), "t-0", config, SOLO).await.unwrap();
        for i in 0..20 {
            let data = make_batch(0, 3, i);
            let header = batch::check(&data).unwrap();
            log.append(&header, data).await.unwrap();
        }
        log.sync().await.unwrap();
    }

    #[tokio::test]
    async fn a_damaged_index_is_rebuilt_from_the_log() {
        let volume = scratch();
        filled(&volume).await;
        let index = volume.list("t-0").await.unwrap().into_iter().find(|n| n.ends_with(".index")).unwrap();
        volume.write_atomic(&format!("t-0/{index}"), Bytes::from_static(b"garbage")).await.unwrap();
        let log = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap();
        assert_eq!(log.high_watermark(), 60);
        for offset in [0, 2, 3, 59] {
            let read = log.read(offset, 1, None).await.unwrap();
            let header = batch::check(&read.records).unwrap();
            assert!(header.base_offset <= offset && offset <= header.last_offset());
        }
    }

    #[tokio::test]
    async fn a_corrupt_closed_segment_is_reported_not_truncated() {
        let volume = scratch();
        filled(&volume).await;
        let first = "t-0/00000000000000000000.log";
        let mut bytes = volume.read(first).await.unwrap().unwrap().to_vec();
        bytes[70] ^= 0xff; // inside the first batch's records: its CRC no longer matches
        volume.remove_file("t-0/00000000000000000000.index").await.unwrap();
        volume.write_atomic(first, Bytes::from(bytes.clone())).await.unwrap();
        let opened = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await;
        assert!(matches!(opened, Err(LogError::Corrupt(_))), "a bad closed segment is an error");
        assert_eq!(volume.read(first).await.unwrap().unwrap().to_vec(), bytes, "nothing was cut from it");
    }

    async fn append_one(log: &mut PartitionLog<RealVolume>) {
        let data = make_batch(0, 2, 1);
        let header = batch::check(&data).unwrap();
        log.append(&header, data).await.unwrap();
    }

    #[tokio::test]
    async fn each_owner_stamps_its_epoch_and_answers_where_an_epoch_ends() {
        let volume = scratch();
        let mut log =
            PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), Claimed { epoch: 1, takeover: false })
                .await
                .unwrap();
        append_one(&mut log).await;
        append_one(&mut log).await;
        log.sync().await.unwrap();
        drop(log);
        // The next owner takes over at epoch 3 (epoch 2 went by without a write).
        let mut log =
            PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), Claimed { epoch: 3, takeover: true })
                .await
                .unwrap();
        append_one(&mut log).await;
        log.sync().await.unwrap();
        let first = batch::check(&log.read(0, 1, None).await.unwrap().records).unwrap();
        let last = batch::check(&log.read(4, 1, None).await.unwrap().records).unwrap();
        assert_eq!((first.partition_leader_epoch, last.partition_leader_epoch), (1, 3));
        assert_eq!(log.end_offset_for_epoch(0), None, "no epoch that old");
        assert_eq!(log.end_offset_for_epoch(1), Some((1, 4)));
        assert_eq!(log.end_offset_for_epoch(2), Some((1, 4)), "the newest epoch up to the one asked");
        assert_eq!(log.end_offset_for_epoch(3), Some((3, 6)), "the current epoch ends at the log end");
        assert_eq!(log.end_offset_for_epoch(9), Some((3, 6)));
    }

    /// The base offset of the batch a one-byte read at `offset` returns.
    async fn read_at(log: &PartitionLog<RealVolume>, offset: i64) -> i64 {
        batch::check(&log.read(offset, 1, None).await.unwrap().records).unwrap().base_offset
    }

    #[tokio::test]
    async fn a_cleaned_segment_is_swapped_in_and_read_past_its_gaps_after_any_crash() {
        let volume = scratch();
        filled(&volume).await;
        let mut log = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap();
        let closed: Vec<i64> = log.segment_spans().iter().map(|s| s.base_offset).collect();
        assert!(closed.len() >= 3, "{closed:?}");
        let (first, second, third) = (closed[0], closed[1], closed[2]);
        let batches = log.segment_batches(first).await.unwrap();
        assert!(batches.len() >= 2);
        // The first segment keeps its second batch only; the second keeps nothing.
        let kept = batches[1].0.base_offset;
        log.replace_segment(first, &[batches[1].1.clone()]).await.unwrap();
        log.replace_segment(second, &[]).await.unwrap();
        let out_of_order = [batches[1].1.clone(), batches[0].1.clone()];
        assert!(matches!(log.replace_segment(third, &out_of_order).await, Err(LogError::Corrupt(_))));
        let last = *log.segments.last().map(|s| &s.base_offset).unwrap();
        assert!(log.replace_segment(last, &[]).await.is_err(), "never the active segment");
        let check = |log: PartitionLog<RealVolume>| async move {
            assert_eq!((log.log_start_offset(), log.high_watermark()), (0, 60));
            assert_eq!(read_at(&log, 0).await, kept, "a fetch in a gap gets the next batch");
            assert_eq!(read_at(&log, kept).await, kept);
            assert_eq!(read_at(&log, second).await, third, "an emptied segment is read past");
            assert_eq!(read_at(&log, 59).await, 57);
        };
        check(log).await;
        // Reopened through the indexes, then through scans.
        check(PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap()).await;
        for name in volume.list("t-0").await.unwrap().iter().filter(|n| n.ends_with(".index")) {
            volume.remove_file(&format!("t-0/{name}")).await.unwrap();
        }
        check(PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap()).await;
        // A crash between writing a cleaned copy and its rename: the copy is not read, and goes.
        let copy = format!("t-0/{}", segment::cleaned_name(third, 0, 0));
        volume.write_atomic(&copy, Bytes::from_static(b"half a copy")).await.unwrap();
        let log = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap();
        assert_eq!(read_at(&log, third).await, third);
        assert!(volume.read(&copy).await.unwrap().is_none(), "the unfinished copy is removed");
        check(log).await;
    }

    #[tokio::test]
    async fn a_segment_is_read_a_buffer_at_a_time_in_whole_checked_batches() {
        let volume = scratch();
        filled(&volume).await;
        let log = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap();
        let first = log.segment_spans()[0];
        let whole = volume.read(&format!("t-0/{}", segment::log_name(first.base_offset, 0))).await.unwrap().unwrap();
        let batches = log.segment_batches(first.base_offset).await.unwrap().len();
        assert!(batches >= 2, "{batches}");
        for max_bytes in [1, 100, 250, 1 << 20] {
            let (mut read, mut position, mut chunks) = (Vec::new(), 0, 0);
            loop {
                let chunk = log.segment_chunk(first.base_offset, position, max_bytes).await.unwrap().unwrap();
                assert!(!chunk.is_empty(), "a read holds at least one batch");
                assert!(chunk.len() as usize <= max_bytes.max(chunk.batches[0].1.len()), "{max_bytes}");
                assert_eq!(chunk.next_position, position + chunk.len());
                read.extend(chunk.batches.iter().flat_map(|(_, data)| data.to_vec()));
                (position, chunks) = (chunk.next_position, chunks + 1);
                if chunk.last {
                    break;
                }
            }
            assert_eq!(read, whole.to_vec(), "the segment's bytes, in order, read with {max_bytes}-byte buffers");
            match max_bytes {
                1 => assert_eq!(chunks, batches, "a buffer smaller than a batch reads one batch"),
                m if m >= whole.len() => assert_eq!(chunks, 1, "a buffer bigger than the segment reads it at once"),
                _ => {}
            }
        }
        assert!(log.segment_chunk(first.next_offset + 1000, 0, 100).await.unwrap().is_none(), "no such segment");
        // A torn batch inside a closed segment is reported, never read as the end.
        let path = format!("t-0/{}", segment::log_name(first.base_offset, 0));
        let mut torn = whole.to_vec();
        torn[HEADER_LEN + 3] ^= 0xff;
        volume.write_atomic(&path, Bytes::from(torn)).await.unwrap();
        let log = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await.unwrap();
        assert_eq!(log.segment_spans()[0], first, "a closed segment is opened through its index");
        assert!(matches!(log.segment_chunk(first.base_offset, 0, 1 << 20).await, Err(LogError::Corrupt(_))));
    }

    #[tokio::test]
    async fn an_unknown_partition_state_version_is_refused() {
        let volume = scratch();
        filled(&volume).await;
        let state = br#"{"format_version": 99, "log_start_offset": 0}"#;
        volume.write_atomic("t-0/partition.json", Bytes::from_static(state)).await.unwrap();
        let opened = PartitionLog::open(volume.clone(), "t-0", LogConfig::default(), SOLO).await;
        assert!(matches!(opened, Err(LogError::Corrupt(_))));
    }
}
