//! How the volume keeps a share partition's window: one file per share group and ownership
//! epoch in the partition's directory, `share/<hex(group)>-<epoch:010>.json`, replaced whole
//! (atomically) before anything it changed is answered. It replaces Apache's
//! `__share_group_state`.
//!
//! The epoch in the name fences a paused former owner, as the log's segments do: the owner of
//! epoch e writes only the file of epoch e, and an owner that claims e+1 reads the newest file
//! of an epoch up to its own (probing down from it by name: a listing may be stale on NFS) and
//! writes its own before it serves anyone, so a late write of the old owner lands in a file
//! nobody reads any more. Files of older epochs are removed once the new one is written.
//!
//! A file that does not parse, has an unknown format version, names another group, or whose
//! window breaks an invariant is reported, and the share partition stays offline: never
//! guessed at.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::state::{InFlight, RecordState, ShareSettings, ShareWindow, StagedIn};
use crate::env::{Volume, join};

pub const SHARE_DIR: &str = "share";
const FORMAT_VERSION: u32 = 1;
/// Epochs probed below the owner's own before the listing is trusted to say there is none.
const PROBE_MAX: u32 = 1024;

/// A run of offsets in the same state, as the file keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Run {
    first: i64,
    last: i64,
    /// KIP-932's id of the state (KIP-1289's TX_PENDING is 5).
    state: i8,
    delivery_count: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    member: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    staged: Option<StagedIn>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ShareFile {
    format_version: u32,
    group_id: String,
    /// The ownership epoch the file was written under (its name says it too).
    epoch: u32,
    start_offset: i64,
    runs: Vec<Run>,
}

fn state_of(id: i8) -> Option<RecordState> {
    [
        RecordState::Available,
        RecordState::Acquired,
        RecordState::Acknowledged,
        RecordState::Archiving,
        RecordState::Archived,
        RecordState::TxPending,
    ]
    .into_iter()
    .find(|s| s.id() == id)
}

fn name(group_id: &str, epoch: u32) -> String {
    format!("{}-{epoch:010}.json", crate::hex::encode(group_id.as_bytes()))
}

/// The epoch of a share file's name for `group_id`, if it is one.
fn epoch_of(group_id: &str, file: &str) -> Option<u32> {
    let prefix = format!("{}-", crate::hex::encode(group_id.as_bytes()));
    let digits = file.strip_prefix(&prefix)?.strip_suffix(".json")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok()).flatten()
}

/// The groups with a share file in the partition's directory, as a listing shows them.
pub async fn groups_listed<V: Volume>(volume: &V, dir: &str) -> io::Result<Vec<String>> {
    let names = match volume.list(&join(dir, SHARE_DIR)).await {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut groups: Vec<String> = names
        .iter()
        .filter_map(|n| {
            let (hex, _) = n.strip_suffix(".json")?.rsplit_once('-')?;
            String::from_utf8(crate::hex::decode(hex)?).ok()
        })
        .filter(|g| names.iter().any(|n| epoch_of(g, n).is_some()))
        .collect();
    groups.sort();
    groups.dedup();
    Ok(groups)
}

fn corrupt(path: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {why}"))
}

/// The window as a file: runs of equal entries (an acquired entry is kept as acquired, with its
/// member, though whoever reads it back makes it available again).
fn encode(group_id: &str, epoch: u32, window: &ShareWindow) -> Bytes {
    let mut runs: Vec<Run> = Vec::new();
    for (offset, entry) in window.entries() {
        let member = entry.member.as_deref().map(str::to_string);
        match runs.last_mut() {
            Some(run)
                if run.last + 1 == offset
                    && run.state == entry.state.id()
                    && run.delivery_count == entry.delivery_count
                    && run.member == member
                    && run.staged == entry.staged =>
            {
                run.last = offset
            }
            _ => runs.push(Run {
                first: offset,
                last: offset,
                state: entry.state.id(),
                delivery_count: entry.delivery_count,
                member,
                staged: entry.staged,
            }),
        }
    }
    let file = ShareFile {
        format_version: FORMAT_VERSION,
        group_id: group_id.to_string(),
        epoch,
        start_offset: window.start_offset(),
        runs,
    };
    Bytes::from(serde_json::to_vec(&file).expect("serialisable"))
}

fn decode(path: &str, group_id: &str, raw: &[u8], settings: ShareSettings) -> io::Result<ShareWindow> {
    let file: ShareFile = serde_json::from_slice(raw).map_err(|e| corrupt(path, e))?;
    if file.format_version != FORMAT_VERSION {
        return Err(corrupt(path, format!("unknown format version {}", file.format_version)));
    }
    if file.group_id != group_id {
        return Err(corrupt(path, format!("holds group {:?}", file.group_id)));
    }
    let mut entries = Vec::new();
    for run in &file.runs {
        let state = state_of(run.state).ok_or_else(|| corrupt(path, format!("unknown record state {}", run.state)))?;
        if run.last < run.first || run.last - run.first > i64::from(i32::MAX) {
            return Err(corrupt(path, "a run runs backwards"));
        }
        let member: Option<Arc<str>> = run.member.as_deref().map(Arc::from);
        for offset in run.first..=run.last {
            let lock_expires_ms = (state == RecordState::Acquired).then_some(0);
            let entry = InFlight {
                state,
                delivery_count: run.delivery_count,
                member: member.clone(),
                lock_expires_ms,
                staged: run.staged,
            };
            entries.push((offset, entry));
        }
    }
    ShareWindow::restore(file.start_offset, entries, settings)
        .ok_or_else(|| corrupt(path, "the window breaks an invariant"))
}

/// Writes the window under `epoch`, durably, before it returns.
pub async fn write<V: Volume>(
    volume: &V,
    dir: &str,
    group_id: &str,
    epoch: u32,
    window: &ShareWindow,
) -> io::Result<()> {
    let share_dir = join(dir, SHARE_DIR);
    volume.create_dir_all(&share_dir).await?;
    volume.write_atomic(&join(&share_dir, &name(group_id, epoch)), encode(group_id, epoch, window)).await
}

/// The newest window of an epoch up to `epoch`, if the group ever had one here.
pub async fn read_newest<V: Volume>(
    volume: &V,
    dir: &str,
    group_id: &str,
    epoch: u32,
    settings: ShareSettings,
) -> io::Result<Option<(u32, ShareWindow)>> {
    let share_dir = join(dir, SHARE_DIR);
    // A listing may miss the newest files, never invent one: probing by name from the owner's
    // own epoch down to the newest listed one finds the file a listing missed.
    let listed = match volume.list(&share_dir).await {
        Ok(names) => names.iter().filter_map(|n| epoch_of(group_id, n)).filter(|&e| e <= epoch).max(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let floor = listed.unwrap_or(0).max(epoch.saturating_sub(PROBE_MAX));
    for e in (floor..=epoch).rev() {
        let path = join(&share_dir, &name(group_id, e));
        if let Some(raw) = volume.read(&path).await? {
            return decode(&path, group_id, &raw, settings).map(|w| Some((e, w)));
        }
    }
    Ok(None)
}

/// The newest window a listing of the partition's directory finds, for a broker that does not
/// own the partition (DescribeShareGroupOffsets): a listing may be a moment stale.
pub async fn read_listed<V: Volume>(
    volume: &V,
    dir: &str,
    group_id: &str,
    settings: ShareSettings,
) -> io::Result<Option<(u32, ShareWindow)>> {
    let listed = match volume.list(&join(dir, SHARE_DIR)).await {
        Ok(names) => names.iter().filter_map(|n| epoch_of(group_id, n)).max(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    match listed {
        None => Ok(None),
        Some(epoch) => read_newest(volume, dir, group_id, epoch, settings).await,
    }
}

/// Removes the group's files of epochs below `epoch` (best effort: one left behind is never read
/// while a newer one exists).
pub async fn remove_older<V: Volume>(volume: &V, dir: &str, group_id: &str, epoch: u32) {
    let share_dir = join(dir, SHARE_DIR);
    let Ok(names) = volume.list(&share_dir).await else { return };
    for older in names.iter().filter(|n| epoch_of(group_id, n).is_some_and(|e| e < epoch)) {
        if let Err(e) = volume.remove_file(&join(&share_dir, older)).await {
            tracing::debug!(dir, group = group_id, file = older, error = %e, "cannot remove an old share file");
        }
    }
}

/// Removes every file of the group (the group was deleted, or its offsets were).
pub async fn remove_all<V: Volume>(volume: &V, dir: &str, group_id: &str) -> io::Result<()> {
    let share_dir = join(dir, SHARE_DIR);
    let names = match volume.list(&share_dir).await {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for file in names.iter().filter(|n| epoch_of(group_id, n).is_some()) {
        volume.remove_file(&join(&share_dir, file)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Rng;
    use crate::env::real::{RealRng, RealVolume};
    use crate::partition::share::state::{AcquireMode, Event, LogBatch};

    const SETTINGS: ShareSettings =
        ShareSettings { lock_duration_ms: 1000, delivery_count_limit: 5, max_in_flight: 100, dead_letter: false };

    #[tokio::test]
    async fn the_newest_epoch_wins_and_a_damaged_file_is_reported() {
        let volume =
            RealVolume::new(std::env::temp_dir().join(format!("kaas-share-{:x}", RealRng::default().next_u64())));
        let mut window = ShareWindow::new(3, SETTINGS);
        let batches = [LogBatch { base_offset: 3, last_offset: 9, deliverable: true }];
        window.apply(Event::Acquire {
            member: "m",
            batches: &batches,
            max_records: 4,
            mode: AcquireMode::RecordLimit,
            now_ms: 0,
        });
        write(&volume, "t-0", "g/1", 2, &window).await.unwrap();
        write(&volume, "t-0", "g/1", 5, &ShareWindow::new(8, SETTINGS)).await.unwrap();
        let (epoch, newest) = read_newest(&volume, "t-0", "g/1", 9, SETTINGS).await.unwrap().unwrap();
        assert_eq!((epoch, newest.start_offset()), (5, 8));
        let (epoch, older) = read_newest(&volume, "t-0", "g/1", 4, SETTINGS).await.unwrap().unwrap();
        assert_eq!(
            (epoch, older.start_offset(), older.end_offset()),
            (2, 3, 7),
            "an owner reads no epoch above its own"
        );
        assert_eq!(older.count_in(RecordState::Available), 4, "what was acquired comes back available");
        assert_eq!(read_newest(&volume, "t-0", "other", 9, SETTINGS).await.unwrap().map(|(e, _)| e), None);
        remove_older(&volume, "t-0", "g/1", 5).await;
        assert_eq!(read_newest(&volume, "t-0", "g/1", 4, SETTINGS).await.unwrap().map(|(e, _)| e), None);
        let path = join(&join("t-0", SHARE_DIR), &name("g/1", 6));
        volume.write_atomic(&path, Bytes::from_static(b"{\"format_version\":1,")).await.unwrap();
        assert!(read_newest(&volume, "t-0", "g/1", 9, SETTINGS).await.is_err(), "a torn file is an error");
        let hole = br#"{"format_version":1,"group_id":"g/1","epoch":6,"start_offset":0,"runs":[{"first":2,"last":3,"state":0,"delivery_count":1}]}"#;
        volume.write_atomic(&path, Bytes::from_static(hole)).await.unwrap();
        assert!(read_newest(&volume, "t-0", "g/1", 9, SETTINGS).await.is_err(), "a window with a hole is an error");
    }
}
