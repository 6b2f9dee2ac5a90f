//! One segment of a partition log: a `.log` file of whole batches starting at `base_offset`,
//! and a sparse in-memory offset index that is persisted as `.index` when the segment is rolled.
//!
//! The `.index` file of a closed segment carries the segment's size, next offset and largest
//! timestamp, and a CRC; a segment whose index is missing, torn or disagrees with the log is
//! rebuilt by scanning its batch headers, so the index is a cache and never the truth.

use std::io;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::batch::{self, BatchError, BatchHeader, HEADER_LEN};
use super::records::{self, TimestampAndOffset};
use crate::env::{Volume, VolumeFile};

/// One sparse index entry: the batch starting at `position` begins at or before `offset`'s
/// batch; `max_timestamp` is the largest timestamp of every batch before this point and this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: i64,
    pub position: u64,
    pub max_timestamp: i64,
}

const INDEX_FORMAT_VERSION: u16 = 1;
/// Size of one scan read during recovery.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// Segment files carry the ownership epoch of the broker that created them in their names
/// (none for epoch 0, a broker that never ran in a cluster): a paused old owner's late writes
/// land in files of its own epoch, which the new owner sealed and never reads past.
fn stem(base_offset: i64, epoch: u32) -> String {
    if epoch == 0 { format!("{base_offset:020}") } else { format!("{base_offset:020}-{epoch}") }
}

pub fn log_name(base_offset: i64, epoch: u32) -> String {
    format!("{}.log", stem(base_offset, epoch))
}

pub fn index_name(base_offset: i64, epoch: u32) -> String {
    format!("{}.index", stem(base_offset, epoch))
}

/// The index a new owner of epoch `by` wrote for the old owner's last segment at take-over: the
/// segment ends where the seal says, whatever the file holds after.
pub fn seal_name(base_offset: i64, epoch: u32, by: u32) -> String {
    format!("{}.seal-{by}", stem(base_offset, epoch))
}

fn parse_stem(stem: &str) -> Option<(i64, u32)> {
    let (digits, epoch) = match stem.split_once('-') {
        Some((digits, epoch)) => (digits, epoch.parse::<u32>().ok().filter(|e| *e > 0 && !epoch.starts_with('0'))?),
        None => (stem, 0),
    };
    if digits.len() != 20 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, epoch))
}

/// Where a cleaning pass of the owner of `owner_epoch` writes a segment's cleaned copy before
/// renaming it over the segment. Each owner writes its own (a paused old owner creating its copy
/// must never truncate the new owner's); a copy left by a crash before the rename is removed when
/// the log is opened, never read.
pub fn cleaned_name(base_offset: i64, epoch: u32, owner_epoch: u32) -> String {
    format!("{}.{owner_epoch}.cleaned", stem(base_offset, epoch))
}

/// Parses "00000000000000000042.log" into (42, 0) and "00000000000000000042-3.log" into (42, 3).
pub fn parse_log_name(name: &str) -> Option<(i64, u32)> {
    parse_stem(name.strip_suffix(".log")?)
}

/// Parses a seal name into (base offset, segment epoch, sealing epoch).
pub fn parse_seal_name(name: &str) -> Option<(i64, u32, u32)> {
    let (stem, by) = name.rsplit_once(".seal-")?;
    let (base, epoch) = parse_stem(stem)?;
    Some((base, epoch, by.parse().ok()?))
}

pub struct Segment<F> {
    pub base_offset: i64,
    /// The ownership epoch in the file's name.
    pub epoch: u32,
    pub file: F,
    index: Vec<IndexEntry>,
    bytes_since_index_entry: u64,
    /// One past the last offset in the segment (== base_offset when empty).
    pub next_offset: i64,
    /// Largest batch max_timestamp in the segment (-1 when empty).
    pub max_timestamp: i64,
    /// Bytes known durable: the whole file for a closed segment, the last sync for the active one.
    pub durable_len: u64,
}

/// What a recovery scan of a segment found.
pub struct ScanOutcome {
    /// Bytes of valid batches from the start; anything after is torn or corrupt.
    pub valid_len: u64,
    pub file_len: u64,
}

impl<F: VolumeFile> Segment<F> {
    /// A segment created by a roll: its file is new and empty.
    pub fn new_empty(base_offset: i64, epoch: u32, file: F) -> Self {
        assert_eq!(file.len(), 0, "a new segment starts empty");
        Segment::new_loaded(base_offset, epoch, file)
    }

    /// A segment found on the volume; `scan` or `load_index` fills in the rest.
    pub fn new_loaded(base_offset: i64, epoch: u32, file: F) -> Self {
        Segment {
            base_offset,
            epoch,
            file,
            index: Vec::new(),
            bytes_since_index_entry: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            durable_len: 0,
        }
    }

    pub fn size(&self) -> u64 {
        self.file.len()
    }

    /// The first batch's max timestamp (its index's first entry), -1 when empty.
    pub fn first_timestamp(&self) -> i64 {
        self.index.first().map_or(-1, |e| e.max_timestamp)
    }

    /// Appends one batch whose base offset is already assigned.
    pub async fn append(&mut self, header: &BatchHeader, data: Bytes, index_interval_bytes: u64) -> io::Result<()> {
        assert_eq!(header.base_offset, self.next_offset, "batches are appended in offset order");
        assert_eq!(header.total_len(), data.len());
        let len = data.len() as u64;
        let position = self.file.append(data).await?;
        self.note_batch(header, position, len, index_interval_bytes);
        Ok(())
    }

    /// Records a batch written at `position` (its offset at or past the segment's end so far).
    pub(super) fn note_batch(&mut self, header: &BatchHeader, position: u64, len: u64, index_interval_bytes: u64) {
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
        if self.index.is_empty() || self.bytes_since_index_entry >= index_interval_bytes {
            self.index.push(IndexEntry { offset: header.base_offset, position, max_timestamp: self.max_timestamp });
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += len;
        self.next_offset = header.next_offset();
    }

    /// Rebuilds the index by scanning every batch, checking each CRC. Stops at the first batch
    /// that is torn or corrupt and reports where the valid prefix ends.
    pub async fn scan(&mut self, index_interval_bytes: u64) -> io::Result<ScanOutcome> {
        self.index.clear();
        self.bytes_since_index_entry = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        let file_len = self.file.len();
        let mut position = 0u64;
        let mut buffer = BytesMut::new();
        let mut buffer_start = 0u64;
        loop {
            let in_buffer = (position - buffer_start) as usize;
            let available = &buffer[in_buffer..];
            let need = match BatchHeader::parse(available) {
                Ok(h) if available.len() >= h.total_len() => None,
                Ok(h) => Some(h.total_len()),
                Err(BatchError::Corrupt) if available.len() < HEADER_LEN => Some(HEADER_LEN),
                Err(_) => break,
            };
            if let Some(need) = need {
                if position + need as u64 > file_len {
                    break; // a torn tail
                }
                let read = need.max(SCAN_CHUNK_BYTES).min((file_len - position) as usize);
                let data = self.file.read_at(position, read).await?;
                if data.len() < need {
                    break; // the file is shorter than its length said: treat as torn
                }
                buffer = BytesMut::from(&data[..]);
                buffer_start = position;
                continue;
            }
            let checked =
                if crate::mutant!(SkipCrcOnRecovery) { BatchHeader::parse(available) } else { batch::check(available) };
            let Ok(header) = checked else { break };
            if header.base_offset < self.next_offset {
                break; // offsets increase within a segment (a cleaned one has gaps)
            }
            let len = header.total_len() as u64;
            self.note_batch(&header, position, len, index_interval_bytes);
            position += len;
        }
        self.durable_len = position;
        Ok(ScanOutcome { valid_len: position, file_len })
    }

    /// The position of the batch containing `offset`, or the end of the valid data if no batch
    /// does. Requires `base_offset <= offset`.
    pub async fn position_of(&self, offset: i64, limit: u64) -> io::Result<u64> {
        debug_assert!(offset >= self.base_offset);
        let at = self.index.partition_point(|e| e.offset <= offset);
        let mut position = if at == 0 { 0 } else { self.index[at - 1].position };
        while position < limit {
            let raw = self.file.read_at(position, HEADER_LEN).await?;
            let header = BatchHeader::parse(&raw).map_err(|_| corrupt(position))?;
            if header.next_offset() > offset {
                return Ok(position);
            }
            position += header.total_len() as u64;
        }
        Ok(limit)
    }

    /// The first record at `from_offset` or later whose timestamp is at least `timestamp`:
    /// the first batch whose max timestamp reaches it, read record by record.
    pub async fn offset_for_time(
        &self,
        timestamp: i64,
        from_offset: i64,
        limit: u64,
    ) -> io::Result<Option<TimestampAndOffset>> {
        if self.max_timestamp < timestamp || self.next_offset <= from_offset {
            return Ok(None);
        }
        // Start from the last index entry whose running max is still below the target.
        let at = self.index.partition_point(|e| e.max_timestamp < timestamp);
        let mut position = if at == 0 { 0 } else { self.index[at - 1].position };
        while position < limit {
            let raw = self.file.read_at(position, HEADER_LEN).await?;
            let header = BatchHeader::parse(&raw).map_err(|_| corrupt(position))?;
            let len = header.total_len() as u64;
            if header.max_timestamp >= timestamp && header.next_offset() > from_offset {
                let whole = self.file.read_at(position, len as usize).await?;
                if let Some(found) = records::find_at_or_after(&header, whole, timestamp, from_offset) {
                    return Ok(Some(found));
                }
            }
            position += len;
        }
        Ok(None)
    }

    /// The index of a synced segment: it covers `durable_len`, which a seal may put below the
    /// file's length (an old owner's bytes after it are not part of the log).
    pub fn encode_index(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u16(INDEX_FORMAT_VERSION);
        b.put_u64(self.durable_len);
        b.put_i64(self.next_offset);
        b.put_i64(self.max_timestamp);
        b.put_u32(self.index.len() as u32);
        for e in &self.index {
            b.put_i64(e.offset);
            b.put_u64(e.position);
            b.put_i64(e.max_timestamp);
        }
        let crc = crc32c::crc32c(&b);
        b.put_u32(crc);
        b.freeze()
    }

    /// Loads a persisted index if it is intact and matches the log file; false otherwise. A
    /// seal may cover less than the file: what follows is a zombie's, and is never read.
    pub fn load_index(&mut self, raw: &[u8], seal: bool) -> bool {
        let Some(decoded) = decode_index(raw) else {
            return false;
        };
        let size_ok = if seal { decoded.size <= self.size() } else { decoded.size == self.size() };
        // A cleaned segment may start past its base, or (every batch cleaned away) hold nothing.
        let first_ok = match decoded.entries.first() {
            Some(e) => e.offset >= self.base_offset,
            None => decoded.size == 0,
        };
        if !size_ok || !first_ok || decoded.next_offset < self.base_offset {
            return false;
        }
        self.index = decoded.entries;
        self.next_offset = decoded.next_offset;
        self.max_timestamp = decoded.max_timestamp;
        self.durable_len = decoded.size;
        self.bytes_since_index_entry = 0;
        true
    }
}

/// The bytes an intact index (or seal) says its segment holds.
pub fn indexed_len(raw: &[u8]) -> Option<u64> {
    decode_index(raw).map(|d| d.size)
}

struct DecodedIndex {
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
    entries: Vec<IndexEntry>,
}

fn decode_index(raw: &[u8]) -> Option<DecodedIndex> {
    if raw.len() < 2 + 8 + 8 + 8 + 4 + 4 {
        return None;
    }
    let (body, crc) = raw.split_at(raw.len() - 4);
    if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut b = body;
    if b.get_u16() != INDEX_FORMAT_VERSION {
        return None;
    }
    let size = b.get_u64();
    let next_offset = b.get_i64();
    let max_timestamp = b.get_i64();
    let count = b.get_u32() as usize;
    if b.remaining() != count * 24 {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        entries.push(IndexEntry { offset: b.get_i64(), position: b.get_u64(), max_timestamp: b.get_i64() });
    }
    Some(DecodedIndex { size, next_offset, max_timestamp, entries })
}

fn corrupt(position: u64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("corrupt batch header at position {position}"))
}

/// Opens (creating if needed) the segment file `name` in `dir`.
pub async fn open_file<V: Volume>(volume: &V, dir: &str, base_offset: i64, epoch: u32) -> io::Result<V::File> {
    volume.open(&crate::env::join(dir, &log_name(base_offset, epoch))).await
}
