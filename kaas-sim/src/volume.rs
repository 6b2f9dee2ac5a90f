//! `SimVolume`: the shared volume (the PVC) in memory, one instance for every broker host.
//!
//! Each host works through its own view (`for_host`, optionally `under` a directory of its
//! own), and the volume keeps what a real disk or NFS mount distinguishes:
//! - Appends are pending until the writer syncs the file, and a sync takes simulated time.
//!   Other hosts see a writer's bytes only once synced (close-to-open); two hosts with unsynced
//!   bytes in one file at once break the one-writer invariant and are recorded as a violation
//!   (which only a world of two or more broker hosts can reach).
//! - `crash(host)` throws away what that host had not synced, except that, as on a real disk,
//!   some whole blocks of the pending bytes may have reached the platter anyway (a torn write):
//!   a prefix of them, or scattered blocks with zeros between them (dirty pages written back out
//!   of order).
//! - A failed fsync (injected EIO or ENOSPC) does not drop the bytes it covered: as on Linux,
//!   the pages stay readable in the writer's cache, marked clean, and their durability is
//!   unknown; a later fsync succeeds without writing them. They are in limbo, and a crash of the
//!   writer turns them into zeros. Only a truncate below them takes them out.
//! - Every directory entry change (a file created, a directory created, a rename, a removal) is
//!   durable only once its parent directory is synced; a crash of the host that made it undoes
//!   it. A sync of a directory by any host makes every change in it durable, whoever made it.
//!   `create_dir_all`, `open` (when it creates), `create_exclusive` and the removals sync the
//!   directory themselves, after a simulated delay; `create` and `rename` leave it to `sync_dir`.
//! - A partition between a host and the volume (`stall`) stalls the host's I/O calls; when it
//!   heals (`heal`), each stalled call either completes, late, or fails with EIO. A call of a
//!   host that crashed meanwhile dies with it (a late landing of a dead process's write, which
//!   NFS can do, is not modelled yet), and the restarted host is still cut off until the heal.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kaas_core::env::{Volume, VolumeFile, parent};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Torn writes keep whole blocks of this size.
const BLOCK_BYTES: usize = 512;
/// Chance in a thousand that an I/O call stalled by a volume partition fails once it heals.
const STALLED_CALL_FAILS_PER_MILLE: u32 = 500;

/// The name of a host, as the volume knows its writers.
type Host = Arc<str>;

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    /// Bytes that survive a crash and that every host can read (but for limbo ranges).
    durable_len: usize,
    /// The host whose unsynced bytes lie past `durable_len`.
    writer: Option<Host>,
    /// Byte ranges a failed fsync covered, and the host whose cache holds them: readable, but
    /// zeros after that host crashes.
    limbo: Vec<(usize, usize, Host)>,
}

impl Inode {
    /// How much of the file `host` can read: everything if the pending bytes are its own.
    fn visible_len(&self, host: &Host) -> usize {
        match &self.writer {
            Some(w) if w != host => self.durable_len,
            _ => self.data.len(),
        }
    }

    fn truncate(&mut self, len: usize) {
        self.data.truncate(len);
        self.durable_len = self.data.len();
        self.writer = None;
        self.limbo.retain_mut(|(start, end, _)| {
            *end = (*end).min(len);
            *start < *end
        });
    }
}

/// How to take back a directory entry change whose directory was not synced yet.
#[derive(Debug)]
enum Undo {
    Created {
        path: String,
        inode: u64,
    },
    Renamed {
        from: String,
        to: String,
        inode: u64,
        displaced: Option<u64>,
    },
    Removed {
        path: String,
        inode: u64,
    },
    DirCreated {
        path: String,
    },
    /// A directory removed with everything below it: durable with its parent's sync.
    TreeRemoved {
        path: String,
        files: Vec<(String, u64)>,
        dirs: Vec<String>,
    },
}

impl Undo {
    /// The directory whose sync makes the change durable.
    fn dir(&self) -> &str {
        match self {
            Undo::Created { path, .. }
            | Undo::Removed { path, .. }
            | Undo::DirCreated { path }
            | Undo::TreeRemoved { path, .. } => parent(path),
            Undo::Renamed { to, .. } => parent(to),
        }
    }

    /// Whether undoing this change would bring `inode` back under some path.
    fn keeps(&self, inode: u64) -> bool {
        match self {
            Undo::Renamed { displaced, .. } => *displaced == Some(inode),
            Undo::Removed { inode: i, .. } => *i == inode,
            Undo::TreeRemoved { files, .. } => files.iter().any(|(_, i)| *i == inode),
            Undo::Created { .. } | Undo::DirCreated { .. } => false,
        }
    }
}

/// An entry change waiting for its directory sync.
struct Pending {
    id: u64,
    host: Host,
    undo: Undo,
}

#[derive(Default)]
struct State {
    /// path -> inode number
    paths: BTreeMap<String, u64>,
    inodes: BTreeMap<u64, Inode>,
    dirs: BTreeSet<String>,
    next_inode: u64,
    /// Entry changes waiting for their directory sync, in order.
    unsynced_entries: Vec<Pending>,
    next_pending: u64,
    /// Hosts cut off from the volume: their calls wait.
    stalled: BTreeSet<Host>,
    stats: VolumeStats,
    faults: VolumeFaults,
    rng: Option<ChaCha8Rng>,
    /// Broken volume invariants (two writers of one file), for the checkers.
    violations: Vec<String>,
}

/// What survives of unsynced appends when a host crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Torn {
    /// Nothing unsynced survives.
    #[default]
    None,
    /// A prefix of whole blocks survives.
    Prefix,
    /// Any whole blocks survive; the ones between them read as zeros.
    Scattered,
}

/// The faults a world turns on for the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct VolumeFaults {
    pub torn: Torn,
    /// Each sync (of a file or a directory) takes between 0 and this many simulated ms.
    pub sync_latency_ms_max: u64,
    /// Chance in a thousand that an append, a file sync or a directory sync fails with EIO or
    /// ENOSPC. A failed append writes nothing; a failed file sync leaves its bytes in limbo; a
    /// failed directory sync leaves its entry changes undoable by a crash.
    pub io_error_per_mille: u32,
}

fn injected(errno: i32, what: &str) -> io::Error {
    io::Error::new(io::Error::from_raw_os_error(errno).kind(), format!("injected {what}"))
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
        Some(if rng.random_bool(0.5) { injected(5, "EIO") } else { injected(28, "ENOSPC") })
    }

    /// A file can only be created in a directory that exists, as on a real filesystem.
    fn check_parent(&self, path: &str) -> io::Result<()> {
        let dir = parent(path);
        if dir.is_empty() || self.dirs.contains(dir) {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::NotFound, format!("{dir}: no such directory")))
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

    /// Records an entry change that a crash of `host` undoes until its directory is synced.
    fn unsynced(&mut self, host: &Host, undo: Undo) {
        self.next_pending += 1;
        self.unsynced_entries.push(Pending { id: self.next_pending, host: host.clone(), undo });
    }

    /// The ids of the changes waiting on a sync of `dir`: what a sync begun now covers. Any
    /// host's: a directory's entries are one inode's, whoever made them (on one machine the
    /// fsync of a directory covers every process's changes to it; NFS makes entry changes
    /// synchronously at the server). So a host that creates a file in a directory another
    /// host just made, and syncs it, has made both durable.
    fn waiting_on(&self, _host: &Host, dir: &str) -> Vec<u64> {
        self.unsynced_entries.iter().filter(|p| p.undo.dir() == dir).map(|p| p.id).collect()
    }

    /// Makes the entry changes `ids` durable; files no path names any more are gone.
    fn settle(&mut self, ids: &[u64]) {
        let (done, waiting): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut self.unsynced_entries).into_iter().partition(|p| ids.contains(&p.id));
        self.unsynced_entries = waiting;
        for pending in done {
            let orphans = match pending.undo {
                Undo::Renamed { displaced: Some(old), .. } => vec![old],
                Undo::Removed { inode, .. } => vec![inode],
                Undo::TreeRemoved { files, .. } => files.into_iter().map(|(_, i)| i).collect(),
                _ => continue,
            };
            for orphan in orphans {
                let named = self.paths.values().any(|i| *i == orphan);
                if !named && !self.unsynced_entries.iter().any(|p| p.undo.keeps(orphan)) {
                    self.inodes.remove(&orphan);
                }
            }
        }
    }

    fn path_of(&self, inode: u64) -> &str {
        self.paths.iter().find(|(_, i)| **i == inode).map_or("a removed file", |(p, _)| p.as_str())
    }

    /// Removes `dir` and everything below it.
    fn drop_tree(&mut self, dir: &str) {
        let prefix = format!("{dir}/");
        self.paths.retain(|p, _| !p.starts_with(&prefix));
        self.dirs.retain(|d| d != dir && !d.starts_with(&prefix));
    }
}

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeStats {
    pub bytes_appended: u64,
    pub syncs: u64,
    pub dir_syncs: u64,
    pub renames: u64,
    pub bytes_lost_in_crashes: u64,
    pub bytes_in_limbo: u64,
    pub entries_lost_in_crashes: u64,
    pub injected_errors: u64,
    pub stalled_calls_failed: u64,
}

/// One host's view of the shared volume. Clones share the volume; `for_host` gives another
/// host's view of the same one, `under` a view rooted in one of its directories.
#[derive(Clone)]
pub struct SimVolume {
    state: Arc<Mutex<State>>,
    host: Host,
    /// Prefix of every path of this view ("" for the volume's root).
    root: Arc<str>,
}

impl Default for SimVolume {
    fn default() -> Self {
        SimVolume { state: Arc::default(), host: Arc::from(""), root: Arc::from("") }
    }
}

pub struct SimFile {
    volume: SimVolume,
    inode: u64,
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
        SimVolume { state: Arc::new(Mutex::new(state)), ..SimVolume::default() }
    }

    /// The same volume as `host` sees it and writes to it.
    pub fn for_host(&self, host: &str) -> SimVolume {
        SimVolume { host: Arc::from(host), ..self.clone() }
    }

    /// This view rooted at `dir` (a broker with its own data directory on the shared volume).
    pub fn under(&self, dir: &str) -> SimVolume {
        SimVolume { root: Arc::from(self.full(dir)), ..self.clone() }
    }

    fn full(&self, path: &str) -> String {
        match (self.root.is_empty(), path.is_empty()) {
            (true, _) => path.to_string(),
            (false, true) => self.root.to_string(),
            (false, false) => format!("{}/{path}", self.root),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("volume lock")
    }

    /// `host` crashed: its unsynced bytes are lost but for the blocks the world's torn-write
    /// mode lets survive, what its failed syncs left in limbo reads as zeros, and its entry
    /// changes whose directory was not synced are undone.
    pub fn crash(&self, host: &str) {
        let mut state = self.lock();
        let State { inodes, stats, faults, rng, .. } = &mut *state;
        for inode in inodes.values_mut() {
            for (start, end, _) in inode.limbo.iter().filter(|(_, _, h)| &**h == host) {
                tracing::debug!(
                    host,
                    start,
                    end,
                    len = inode.data.len(),
                    "a crash zeroes bytes a failed fsync covered"
                );
                let end = (*end).min(inode.data.len());
                inode.data[(*start).min(end)..end].fill(0);
                stats.bytes_lost_in_crashes += (end - (*start).min(end)) as u64;
            }
            inode.limbo.retain(|(_, _, h)| &**h != host);
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
        let (undone, kept): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut state.unsynced_entries).into_iter().partition(|p| &*p.host == host);
        state.unsynced_entries = kept;
        for pending in undone.into_iter().rev() {
            state.stats.entries_lost_in_crashes += 1;
            match pending.undo {
                Undo::Created { path, inode } => {
                    if state.paths.get(&path) == Some(&inode) {
                        state.paths.remove(&path);
                    }
                    if !state.paths.values().any(|i| *i == inode) {
                        state.inodes.remove(&inode);
                    }
                }
                Undo::Renamed { from, to, inode, displaced } => {
                    match displaced {
                        Some(old) => state.paths.insert(to, old),
                        None => state.paths.remove(&to),
                    };
                    state.paths.insert(from, inode);
                }
                Undo::Removed { path, inode } => {
                    state.paths.insert(path, inode);
                }
                Undo::DirCreated { path } => state.drop_tree(&path),
                Undo::TreeRemoved { path, files, dirs } => {
                    state.dirs.insert(path);
                    state.dirs.extend(dirs);
                    state.paths.extend(files);
                }
            }
        }
        let orphans: Vec<u64> =
            state.inodes.keys().copied().filter(|i| !state.paths.values().any(|p| p == i)).collect();
        for inode in orphans {
            if !state.unsynced_entries.iter().any(|p| p.undo.keeps(inode)) {
                state.inodes.remove(&inode);
            }
        }
    }

    /// `host` exited cleanly: its files are closed, which on NFS flushes and commits their
    /// bytes, and the kernel keeps its directory changes. Nothing of it is lost any more but
    /// what its failed syncs left in limbo.
    pub fn settle(&self, host: &str) {
        let mut state = self.lock();
        for inode in state.inodes.values_mut().filter(|i| i.writer.as_deref() == Some(host)) {
            inode.durable_len = inode.data.len();
            inode.writer = None;
        }
        let ids: Vec<u64> = state.unsynced_entries.iter().filter(|p| &*p.host == host).map(|p| p.id).collect();
        state.settle(&ids);
    }

    /// Cuts `host` off from the volume: its I/O calls wait until `heal`.
    pub fn stall(&self, host: &str) {
        self.lock().stalled.insert(Arc::from(host));
    }

    pub fn heal(&self, host: &str) {
        self.lock().stalled.remove(host);
    }

    /// Changes the volume's faults from now on (tests).
    pub fn set_faults(&self, faults: VolumeFaults) {
        self.lock().faults = faults;
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
        let mut digest = crate::scenarios::Digest::default();
        for (path, inode) in &state.paths {
            digest.feed(path.as_bytes());
            digest.feed(&state.inodes[inode].data);
        }
        digest.finish()
    }

    /// Bytes of a file as this view's host would read them (tests and checkers).
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        let state = self.lock();
        let inode = &state.inodes[state.paths.get(&self.full(path))?];
        Some(inode.data[..inode.visible_len(&self.host)].to_vec())
    }

    /// Every file under `dir`, at any depth, with its bytes as this view's host would read them
    /// (checkers reading what the brokers left), by path relative to this view's root.
    pub fn files_under(&self, dir: &str) -> Vec<(String, Vec<u8>)> {
        let state = self.lock();
        let prefix = format!("{}/", self.full(dir));
        let strip = if self.root.is_empty() { 0 } else { self.root.len() + 1 };
        state
            .paths
            .range(prefix.clone()..)
            .take_while(|(path, _)| path.starts_with(&prefix))
            .map(|(path, inode)| {
                let inode = &state.inodes[inode];
                (path[strip..].to_string(), inode.data[..inode.visible_len(&self.host)].to_vec())
            })
            .collect()
    }

    /// Waits while this host is cut off from the volume; a call that waited may then fail.
    async fn reach(&self) -> io::Result<()> {
        let mut waited = false;
        loop {
            {
                let mut state = self.lock();
                if !state.stalled.contains(&self.host) {
                    let fails = waited
                        && state.rng.as_mut().is_some_and(|r| r.random_range(0..1000) < STALLED_CALL_FAILS_PER_MILLE);
                    if fails {
                        state.stats.stalled_calls_failed += 1;
                        return Err(injected(5, "EIO after the volume was unreachable"));
                    }
                    return Ok(());
                }
            }
            waited = true;
            sleep_ms(1).await;
        }
    }

    /// Waits out a sync's latency and the host's reach of the volume.
    async fn sync_delay(&self) -> io::Result<()> {
        let latency_ms = self.lock().sync_latency_ms();
        sleep_ms(latency_ms).await;
        self.reach().await
    }

    /// Syncs `dir` after a delay: the changes of this host waiting on it when the sync began
    /// become durable, unless the sync fails.
    async fn sync_dir_full(&self, dir: &str) -> io::Result<()> {
        self.reach().await?;
        let covered = self.lock().waiting_on(&self.host, dir);
        self.sync_delay().await?;
        let mut state = self.lock();
        if let Some(e) = state.injected_error() {
            return Err(e);
        }
        state.stats.dir_syncs += 1;
        state.settle(&covered);
        Ok(())
    }

    /// Creates the missing directories of `full`, each recorded as an entry of its parent.
    fn make_dirs(&self, full: &str) {
        let mut state = self.lock();
        let chain = full.match_indices('/').map(|(i, _)| &full[..i]).chain(std::iter::once(full));
        for dir in chain.filter(|d| !d.is_empty()) {
            if state.dirs.insert(dir.to_string()) {
                state.unsynced(&self.host, Undo::DirCreated { path: dir.to_string() });
            }
        }
    }
}

impl Volume for SimVolume {
    type File = SimFile;

    /// The host: each broker host replaces a file from one actor at a time.
    fn writer_tag(&self) -> String {
        self.host.to_string()
    }

    async fn create_dir_all(&self, path: &str) -> io::Result<()> {
        self.reach().await?;
        let full = self.full(path);
        self.make_dirs(&full);
        // Every parent is synced, not only those of directories made now: an earlier call
        // may have made one and failed to sync its parent.
        let chain: Vec<String> =
            full.match_indices('/').map(|(i, _)| full[..i].to_string()).chain([full.clone()]).collect();
        for dir in chain {
            self.sync_dir_full(parent(&dir)).await?;
        }
        Ok(())
    }

    async fn open(&self, path: &str) -> io::Result<SimFile> {
        self.reach().await?;
        let full = self.full(path);
        let inode = {
            let mut state = self.lock();
            if let Some(inode) = state.paths.get(&full) {
                return Ok(SimFile { volume: self.clone(), inode: *inode });
            }
            state.check_parent(&full)?;
            let inode = state.new_inode(Inode::default());
            state.paths.insert(full.clone(), inode);
            state.unsynced(&self.host, Undo::Created { path: full.clone(), inode });
            inode
        };
        if let Err(e) = self.sync_dir_full(parent(&full)).await {
            // As the real volume does: the file goes again, so that a retry creates it anew
            // and syncs its directory, rather than find it and trust an entry never synced.
            let mut state = self.lock();
            if state.paths.get(&full) == Some(&inode) {
                state.paths.remove(&full);
                state.inodes.remove(&inode);
                state.unsynced_entries.retain(|p| !matches!(&p.undo, Undo::Created { inode: i, .. } if *i == inode));
            }
            return Err(e);
        }
        Ok(SimFile { volume: self.clone(), inode })
    }

    async fn create(&self, path: &str) -> io::Result<SimFile> {
        self.reach().await?;
        let full = self.full(path);
        let mut state = self.lock();
        if let Some(&inode) = state.paths.get(&full) {
            state.inodes.get_mut(&inode).expect("named inode").truncate(0);
            return Ok(SimFile { volume: self.clone(), inode });
        }
        state.check_parent(&full)?;
        let inode = state.new_inode(Inode::default());
        state.paths.insert(full.clone(), inode);
        state.unsynced(&self.host, Undo::Created { path: full, inode });
        Ok(SimFile { volume: self.clone(), inode })
    }

    async fn create_exclusive(&self, path: &str, data: Bytes) -> io::Result<()> {
        self.reach().await?;
        // The content is written and synced under a private name first, as the real volume
        // does; the link into place is the one atomic step, and durable after its dir sync.
        self.sync_delay().await?;
        let full = self.full(path);
        {
            let mut state = self.lock();
            if let Some(e) = state.injected_error() {
                return Err(e);
            }
            if state.paths.contains_key(&full) {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{full} exists")));
            }
            state.check_parent(&full)?;
            let len = data.len();
            let inode = state.new_inode(Inode { data: data.to_vec(), durable_len: len, ..Inode::default() });
            state.paths.insert(full.clone(), inode);
            state.stats.bytes_appended += len as u64;
            state.unsynced(&self.host, Undo::Created { path: full.clone(), inode });
        }
        // A failed sync leaves the entry visible, as a real volume does (other hosts may have
        // read it), and undone only if this host crashes before some host syncs the directory.
        self.sync_dir_full(parent(&full)).await
    }

    async fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        self.reach().await?;
        Ok(self.contents(path).map(Bytes::from))
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.reach().await?;
        let (from, to) = (self.full(from), self.full(to));
        let mut state = self.lock();
        state.check_parent(&to)?;
        let inode = state.paths.remove(&from).ok_or_else(|| not_found(&from))?;
        let displaced = state.paths.insert(to.clone(), inode);
        state.stats.renames += 1;
        state.unsynced(&self.host, Undo::Renamed { from, to, inode, displaced });
        Ok(())
    }

    async fn sync_dir(&self, dir: &str) -> io::Result<()> {
        self.sync_dir_full(&self.full(dir)).await
    }

    async fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        self.reach().await?;
        let state = self.lock();
        let full = self.full(dir);
        let prefix = if full.is_empty() { String::new() } else { format!("{full}/") };
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
        self.reach().await?;
        let full = self.full(path);
        {
            let mut state = self.lock();
            let Some(inode) = state.paths.remove(&full) else { return Ok(()) };
            state.unsynced(&self.host, Undo::Removed { path: full.clone(), inode });
        }
        self.sync_dir_full(parent(&full)).await
    }

    async fn remove_dir_all(&self, path: &str) -> io::Result<()> {
        self.reach().await?;
        let full = self.full(path);
        {
            let mut state = self.lock();
            if !state.dirs.contains(&full) {
                return Ok(());
            }
            let prefix = format!("{full}/");
            let files: Vec<(String, u64)> =
                state.paths.iter().filter(|(p, _)| p.starts_with(&prefix)).map(|(p, i)| (p.clone(), *i)).collect();
            let dirs: Vec<String> = state.dirs.iter().filter(|d| d.starts_with(&prefix)).cloned().collect();
            state.drop_tree(&full);
            state.dirs.remove(&full);
            state.unsynced(&self.host, Undo::TreeRemoved { path: full.clone(), files, dirs });
        }
        self.sync_dir_full(parent(&full)).await
    }
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut Inode, &mut VolumeStats) -> T) -> io::Result<T> {
        let mut state = self.volume.lock();
        let State { inodes, stats, .. } = &mut *state;
        let inode = inodes.get_mut(&self.inode).ok_or_else(|| not_found("removed file"))?;
        Ok(f(inode, stats))
    }
}

impl VolumeFile for SimFile {
    async fn append(&self, data: Bytes) -> io::Result<u64> {
        self.volume.reach().await?;
        let host = &self.volume.host;
        let mut state = self.volume.lock();
        if let Some(e) = state.injected_error() {
            tracing::debug!(inode = self.inode, "an append fails");
            return Err(e);
        }
        let path = state.path_of(self.inode).to_string();
        let State { inodes, stats, violations, .. } = &mut *state;
        let inode = inodes.get_mut(&self.inode).ok_or_else(|| not_found("removed file"))?;
        if let Some(other) = inode.writer.as_ref().filter(|w| *w != host) {
            violations.push(format!("two-writers: {host} appended to {path} while {other} had unsynced bytes in it"));
        }
        let position = inode.data.len() as u64;
        inode.data.extend_from_slice(&data);
        inode.writer = Some(host.clone());
        stats.bytes_appended += data.len() as u64;
        Ok(position)
    }

    async fn sync(&self) -> io::Result<()> {
        self.volume.reach().await?;
        // Only what was written before the sync began is made durable by it.
        let len = self.with(|inode, _| inode.data.len())?;
        self.volume.sync_delay().await?;
        let mut state = self.volume.lock();
        let failed = state.injected_error();
        let host = self.volume.host.clone();
        let State { inodes, stats, .. } = &mut *state;
        let inode = inodes.get_mut(&self.inode).ok_or_else(|| not_found("removed file"))?;
        let len = len.min(inode.data.len());
        if failed.is_some() {
            // The pages are marked clean but their write-back failed: readable, not durable.
            tracing::debug!(
                inode = self.inode,
                from = inode.durable_len,
                to = len,
                "a failed fsync leaves bytes in limbo"
            );
            if inode.durable_len < len {
                stats.bytes_in_limbo += (len - inode.durable_len) as u64;
                inode.limbo.push((inode.durable_len, len, host));
            }
        } else {
            stats.syncs += 1;
        }
        // Either way the kernel forgets them as dirty: a later sync does not write them again.
        inode.durable_len = inode.durable_len.max(len);
        if inode.durable_len == inode.data.len() {
            inode.writer = None;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Bytes> {
        self.volume.reach().await?;
        let host = self.volume.host.clone();
        self.with(|inode, _| {
            let visible = inode.visible_len(&host);
            let start = (position as usize).min(visible);
            let end = start.saturating_add(len).min(visible);
            Bytes::copy_from_slice(&inode.data[start..end])
        })
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.volume.reach().await?;
        tracing::debug!(inode = self.inode, len, "truncate");
        self.with(|inode, _| inode.truncate(len as usize))
    }

    fn len(&self) -> u64 {
        let host = self.volume.host.clone();
        self.with(|inode, _| inode.visible_len(&host) as u64).unwrap_or(0)
    }
}
