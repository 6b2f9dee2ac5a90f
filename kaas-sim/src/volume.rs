//! `SimVolume`: the shared volume (the PVC) in memory, one instance for every broker host.
//!
//! Each host works through its own view (`for_host`), and the volume keeps what a real NFS
//! mount would distinguish:
//! - Appends are pending until the writer syncs the file, and a sync takes simulated time. Other
//!   hosts see a writer's bytes only once synced (close-to-open); two hosts with unsynced bytes
//!   in one file at once break the one-writer invariant and are recorded as a violation.
//! - `crash(host)` throws away what that host had not synced, except that, as on a real disk,
//!   some whole blocks of the pending bytes may have reached the platter anyway (a torn write):
//!   a prefix of them, or scattered blocks with zeros between them (dirty pages written back out
//!   of order).
//! - A created, replaced or removed directory entry is durable only once its directory is
//!   synced, which the volume contract does before the call returns, after a simulated delay:
//!   a crash inside that window undoes the entry.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kaas_core::env::{Volume, VolumeFile};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Torn writes keep whole blocks of this size.
const BLOCK_BYTES: usize = 512;

/// The name of a host, as the volume knows its writers.
type Host = Arc<str>;

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    /// Bytes that survive a crash and that every host can read.
    durable_len: usize,
    /// The host whose unsynced bytes lie past `durable_len`.
    writer: Option<Host>,
}

impl Inode {
    /// How much of the file `host` can read: everything if the pending bytes are its own.
    fn visible_len(&self, host: &Host) -> usize {
        match &self.writer {
            Some(w) if w != host => self.durable_len,
            _ => self.data.len(),
        }
    }
}

/// How to take back a directory entry change whose directory was not synced yet.
enum Undo {
    Created { path: String, inode: u64 },
    Replaced { path: String, old: Option<u64>, new: u64 },
    Removed { path: String, inode: u64 },
}

#[derive(Default)]
struct State {
    /// path -> inode number
    paths: BTreeMap<String, u64>,
    inodes: BTreeMap<u64, Inode>,
    dirs: BTreeSet<String>,
    next_inode: u64,
    /// Entry changes waiting for their directory sync: (host, ticket, undo), in order.
    unsynced_entries: Vec<(Host, u64, Undo)>,
    next_ticket: u64,
    /// Bytes written, synced: for the trace.
    stats: VolumeStats,
    faults: VolumeFaults,
    rng: Option<ChaCha8Rng>,
    /// Broken volume invariants (two writers of one file), for the checkers.
    violations: Vec<String>,
}

/// What survives of unsynced appends when a host crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Torn {
    /// Nothing unsynced survives.
    #[default]
    None,
    /// A prefix of whole blocks survives.
    Prefix,
    /// Any whole blocks survive; the ones between them read as zeros.
    Scattered,
}

/// The faults a seed turns on for the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VolumeFaults {
    pub torn: Torn,
    /// Each sync takes between 0 and this many simulated milliseconds.
    pub sync_latency_ms_max: u64,
    /// Chance in a thousand that an append, sync or atomic replace fails with EIO or ENOSPC.
    /// A failed append writes nothing; a failed sync loses the file's unsynced bytes, as on
    /// Linux; a failed replace leaves the old file.
    pub io_error_per_mille: u32,
}

impl State {
    /// Draws whether this operation fails, and with which error.
    fn injected_error(&mut self) -> Option<io::Error> {
        let per_mille = self.faults.io_error_per_mille;
        let rng = self.rng.as_mut()?;
        if per_mille == 0 || rng.random_range(0..1000) >= per_mille {
            return None;
        }
        self.stats.injected_errors += 1;
        let (errno, what) = if rng.random_bool(0.5) { (5, "EIO") } else { (28, "ENOSPC") };
        Some(io::Error::new(io::Error::from_raw_os_error(errno).kind(), format!("injected {what}")))
    }

    /// A file can only be created in a directory that exists, as on a real filesystem.
    fn check_parent(&self, path: &str) -> io::Result<()> {
        let parent = kaas_core::env::parent(path);
        if parent.is_empty() || self.dirs.contains(parent) || self.paths.contains_key(path) {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::NotFound, format!("{parent}: no such directory")))
        }
    }

    /// How long the next sync (of a file or a directory) takes, in simulated milliseconds.
    fn sync_latency_ms(&mut self) -> u64 {
        let max = self.faults.sync_latency_ms_max;
        match self.rng.as_mut() {
            Some(rng) if max > 0 => rng.random_range(0..=max),
            _ => 0,
        }
    }

    fn new_inode(&mut self, inode: Inode) -> u64 {
        self.next_inode += 1;
        self.inodes.insert(self.next_inode, inode);
        self.next_inode
    }

    /// Records entry changes that a crash of `host` undoes until their directory is synced.
    fn unsynced(&mut self, host: &Host, undos: Vec<Undo>) -> u64 {
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.unsynced_entries.extend(undos.into_iter().map(|u| (host.clone(), ticket, u)));
        ticket
    }

    /// The directory sync of `ticket` is done. A directory fsync makes every change to that
    /// directory durable, the host's earlier unsynced ones too.
    fn dir_synced(&mut self, ticket: u64) {
        let synced: Vec<(Host, String)> = self
            .unsynced_entries
            .iter()
            .filter(|(_, t, _)| *t == ticket)
            .map(|(h, _, u)| (h.clone(), kaas_core::env::parent(u.path()).to_string()))
            .collect();
        self.settle(|host, undo| synced.iter().any(|(h, dir)| h == host && kaas_core::env::parent(undo.path()) == dir));
    }

    /// Makes the entry changes `which` picks durable; files no path names any more are gone.
    fn settle(&mut self, which: impl Fn(&Host, &Undo) -> bool) {
        let (done, waiting) = std::mem::take(&mut self.unsynced_entries).into_iter().partition(|(h, _, u)| which(h, u));
        self.unsynced_entries = waiting;
        for (_, _, undo) in done {
            let orphan = match undo {
                Undo::Replaced { old: Some(old), .. } => old,
                Undo::Removed { inode, .. } => inode,
                _ => continue,
            };
            if !self.paths.values().any(|i| *i == orphan)
                && !self.unsynced_entries.iter().any(|(_, _, u)| u.keeps(orphan))
            {
                self.inodes.remove(&orphan);
            }
        }
    }
}

impl Undo {
    fn path(&self) -> &str {
        match self {
            Undo::Created { path, .. } | Undo::Replaced { path, .. } | Undo::Removed { path, .. } => path,
        }
    }

    /// Whether undoing this change would bring `inode` back.
    fn keeps(&self, inode: u64) -> bool {
        match self {
            Undo::Replaced { old, .. } => *old == Some(inode),
            Undo::Removed { inode: i, .. } => *i == inode,
            Undo::Created { .. } => false,
        }
    }
}

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeStats {
    pub bytes_appended: u64,
    pub syncs: u64,
    pub atomic_writes: u64,
    pub bytes_lost_in_crashes: u64,
    pub entries_lost_in_crashes: u64,
    pub injected_errors: u64,
}

/// One host's view of the shared volume. Clones share the volume; `for_host` gives another
/// host's view of the same one.
#[derive(Clone)]
pub struct SimVolume {
    state: Arc<Mutex<State>>,
    host: Host,
}

impl Default for SimVolume {
    fn default() -> Self {
        SimVolume { state: Arc::default(), host: Arc::from("") }
    }
}

pub struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
    host: Host,
}

fn not_found(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.to_string())
}

async fn sleep_ms(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

impl SimVolume {
    pub fn new(seed: u64, faults: VolumeFaults) -> Self {
        let state = State { faults, rng: Some(ChaCha8Rng::seed_from_u64(seed)), ..State::default() };
        SimVolume { state: Arc::new(Mutex::new(state)), host: Arc::from("") }
    }

    /// The same volume as `host` sees it and writes to it.
    pub fn for_host(&self, host: &str) -> SimVolume {
        SimVolume { state: self.state.clone(), host: Arc::from(host) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("volume lock")
    }

    /// `host` crashed: its unsynced bytes are lost but for the blocks the seed's torn-write
    /// mode lets survive, and its entry changes whose directory was not synced are undone.
    pub fn crash(&self, host: &str) {
        let mut state = self.lock();
        let State { inodes, stats, faults, rng, .. } = &mut *state;
        for inode in inodes.values_mut() {
            if inode.writer.as_deref() != Some(host) {
                continue;
            }
            inode.writer = None;
            let pending = inode.data.len() - inode.durable_len;
            let blocks = pending.div_ceil(BLOCK_BYTES);
            let survives: Vec<bool> = match (faults.torn, rng.as_mut()) {
                (Torn::None, _) | (_, None) => vec![false; blocks],
                (Torn::Prefix, Some(rng)) => {
                    let kept = rng.random_range(0..=blocks);
                    (0..blocks).map(|b| b < kept).collect()
                }
                (Torn::Scattered, Some(rng)) => (0..blocks).map(|_| rng.random_bool(0.5)).collect(),
            };
            let end = survives.iter().rposition(|s| *s).map(|b| ((b + 1) * BLOCK_BYTES).min(pending)).unwrap_or(0);
            for (b, kept) in survives.iter().enumerate() {
                let start = inode.durable_len + b * BLOCK_BYTES;
                if !kept && b * BLOCK_BYTES < end {
                    let stop = (start + BLOCK_BYTES).min(inode.durable_len + end);
                    inode.data[start..stop].fill(0);
                }
            }
            inode.data.truncate(inode.durable_len + end);
            inode.durable_len = inode.data.len();
            stats.bytes_lost_in_crashes += (pending - end) as u64;
        }
        let (undone, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut state.unsynced_entries).into_iter().partition(|(h, _, _)| &**h == host);
        state.unsynced_entries = kept;
        for (_, _, undo) in undone.into_iter().rev() {
            state.stats.entries_lost_in_crashes += 1;
            match undo {
                Undo::Created { path, inode } => {
                    if state.paths.get(&path) == Some(&inode) {
                        state.paths.remove(&path);
                    }
                    state.inodes.remove(&inode);
                }
                Undo::Replaced { path, old, new } => {
                    match old {
                        Some(old) => state.paths.insert(path, old),
                        None => state.paths.remove(&path),
                    };
                    state.inodes.remove(&new);
                }
                Undo::Removed { path, inode } => {
                    state.paths.insert(path, inode);
                }
            }
        }
    }

    /// `host` exited cleanly: its files are closed, which on NFS flushes and commits their
    /// bytes, and the kernel keeps its directory changes. Nothing of it is lost any more.
    pub fn settle(&self, host: &str) {
        let mut state = self.lock();
        for inode in state.inodes.values_mut().filter(|i| i.writer.as_deref() == Some(host)) {
            inode.durable_len = inode.data.len();
            inode.writer = None;
        }
        state.settle(|h, _| &**h == host);
    }

    pub fn stats(&self) -> VolumeStats {
        self.lock().stats
    }

    /// Broken volume invariants seen so far (two hosts writing one file at once).
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// A digest of every path and its bytes, for the trace hash.
    pub fn digest(&self) -> u64 {
        let state = self.lock();
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        let mut feed = |bytes: &[u8]| {
            for b in bytes {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(0x100_0000_01b3);
            }
        };
        for (path, inode) in &state.paths {
            feed(path.as_bytes());
            feed(&state.inodes[inode].data);
        }
        hash
    }

    /// Bytes of a file as this view's host would read them (tests and checkers).
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        let state = self.lock();
        let inode = &state.inodes[state.paths.get(path)?];
        Some(inode.data[..inode.visible_len(&self.host)].to_vec())
    }

    /// Waits out the directory sync of `ticket`; a crash of this host meanwhile undoes it.
    async fn sync_dir(&self, ticket: u64) {
        let latency_ms = self.lock().sync_latency_ms();
        sleep_ms(latency_ms).await;
        self.lock().dir_synced(ticket);
    }
}

fn parent_dirs(path: &str) -> impl Iterator<Item = String> + '_ {
    path.match_indices('/').map(move |(i, _)| path[..i].to_string())
}

impl Volume for SimVolume {
    type File = SimFile;

    async fn create_dir_all(&self, path: &str) -> io::Result<()> {
        let mut state = self.lock();
        for dir in parent_dirs(path) {
            state.dirs.insert(dir);
        }
        state.dirs.insert(path.to_string());
        Ok(())
    }

    async fn open(&self, path: &str) -> io::Result<SimFile> {
        let created = {
            let mut state = self.lock();
            state.check_parent(path)?;
            match state.paths.get(path) {
                Some(inode) => {
                    return Ok(SimFile { state: self.state.clone(), inode: *inode, host: self.host.clone() });
                }
                None => {
                    let inode = state.new_inode(Inode::default());
                    state.paths.insert(path.to_string(), inode);
                    let ticket = state.unsynced(&self.host, vec![Undo::Created { path: path.to_string(), inode }]);
                    (inode, ticket)
                }
            }
        };
        self.sync_dir(created.1).await;
        Ok(SimFile { state: self.state.clone(), inode: created.0, host: self.host.clone() })
    }

    async fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        Ok(self.contents(path).map(Bytes::from))
    }

    async fn write_atomic(&self, path: &str, data: Bytes) -> io::Result<()> {
        // The temporary file is written and fsynced first, then renamed over the path.
        let latency_ms = self.lock().sync_latency_ms();
        sleep_ms(latency_ms).await;
        let ticket = {
            let mut state = self.lock();
            state.check_parent(path)?;
            if let Some(e) = state.injected_error() {
                return Err(e);
            }
            let len = data.len();
            let new = state.new_inode(Inode { data: data.to_vec(), durable_len: len, writer: None });
            let old = state.paths.insert(path.to_string(), new);
            state.stats.atomic_writes += 1;
            state.unsynced(&self.host, vec![Undo::Replaced { path: path.to_string(), old, new }])
        };
        self.sync_dir(ticket).await;
        Ok(())
    }

    async fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let state = self.lock();
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut names: Vec<String> = state
            .paths
            .keys()
            .chain(state.dirs.iter())
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter(|rest| !rest.is_empty())
            .map(|rest| rest.split('/').next().expect("non-empty").to_string())
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn remove_file(&self, path: &str) -> io::Result<()> {
        let ticket = {
            let mut state = self.lock();
            let Some(inode) = state.paths.remove(path) else { return Ok(()) };
            state.unsynced(&self.host, vec![Undo::Removed { path: path.to_string(), inode }])
        };
        self.sync_dir(ticket).await;
        Ok(())
    }

    async fn remove_dir_all(&self, path: &str) -> io::Result<()> {
        let ticket = {
            let mut state = self.lock();
            let prefix = format!("{path}/");
            let doomed: Vec<String> = state.paths.keys().filter(|p| p.starts_with(&prefix)).cloned().collect();
            let undos = doomed
                .into_iter()
                .map(|p| {
                    let inode = state.paths.remove(&p).expect("listed");
                    Undo::Removed { path: p, inode }
                })
                .collect();
            state.dirs.retain(|d| d != path && !d.starts_with(&prefix));
            state.unsynced(&self.host, undos)
        };
        self.sync_dir(ticket).await;
        Ok(())
    }
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut Inode, &mut VolumeStats) -> T) -> io::Result<T> {
        let mut state = self.state.lock().expect("volume lock");
        let State { inodes, stats, .. } = &mut *state;
        let inode = inodes.get_mut(&self.inode).ok_or_else(|| not_found("removed file"))?;
        Ok(f(inode, stats))
    }

    /// An injected failure for this operation, if the seed's dice say so. A failed sync also
    /// drops the file's unsynced bytes: Linux marks the pages clean after reporting the error.
    fn injected_error(&self, sync: bool) -> Option<io::Error> {
        let mut state = self.state.lock().expect("volume lock");
        let e = state.injected_error()?;
        if sync && let Some(inode) = state.inodes.get_mut(&self.inode) {
            let lost = inode.data.len() - inode.durable_len;
            inode.data.truncate(inode.durable_len);
            inode.writer = None;
            state.stats.bytes_lost_in_crashes += lost as u64;
        }
        Some(e)
    }
}

impl VolumeFile for SimFile {
    async fn append(&self, data: Bytes) -> io::Result<u64> {
        if let Some(e) = self.injected_error(false) {
            return Err(e);
        }
        let mut state = self.state.lock().expect("volume lock");
        let State { inodes, stats, violations, paths, .. } = &mut *state;
        let inode = inodes.get_mut(&self.inode).ok_or_else(|| not_found("removed file"))?;
        if let Some(other) = inode.writer.as_ref().filter(|w| **w != self.host) {
            let path = paths.iter().find(|(_, i)| **i == self.inode).map_or("a removed file", |(p, _)| p.as_str());
            violations
                .push(format!("two-writers: {} appended to {path} while {other} had unsynced bytes in it", self.host));
        }
        let position = inode.data.len() as u64;
        inode.data.extend_from_slice(&data);
        inode.writer = Some(self.host.clone());
        stats.bytes_appended += data.len() as u64;
        Ok(position)
    }

    async fn sync(&self) -> io::Result<()> {
        // Only what was written before the sync began is made durable by it.
        let len = self.with(|inode, _| inode.data.len())?;
        let latency_ms = self.state.lock().expect("volume lock").sync_latency_ms();
        sleep_ms(latency_ms).await;
        if let Some(e) = self.injected_error(true) {
            return Err(e);
        }
        self.with(|inode, stats| {
            inode.durable_len = inode.durable_len.max(len.min(inode.data.len()));
            if inode.durable_len == inode.data.len() {
                inode.writer = None;
            }
            stats.syncs += 1;
        })
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Bytes> {
        self.with(|inode, _| {
            let visible = inode.visible_len(&self.host);
            let start = (position as usize).min(visible);
            let end = start.saturating_add(len).min(visible);
            Bytes::copy_from_slice(&inode.data[start..end])
        })
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.with(|inode, _| {
            inode.data.truncate(len as usize);
            inode.durable_len = inode.data.len();
            inode.writer = None;
        })
    }

    fn len(&self) -> u64 {
        self.with(|inode, _| inode.visible_len(&self.host) as u64).unwrap_or(0)
    }
}
