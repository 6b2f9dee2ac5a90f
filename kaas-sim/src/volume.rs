//! `SimVolume`: the shared volume (the PVC) in memory, one instance for every broker host.
//!
//! Appends are pending until the file is synced, and a sync takes simulated time; `crash`
//! throws away what a crashed host had not synced, except that, as on a real disk, some whole
//! blocks of the pending bytes may have reached the platter anyway (a torn write): a prefix of
//! them, or scattered blocks with zeros between them (dirty pages written back out of order).
//! Atomic replaces, removals and file creations are durable when they return, as the real
//! volume makes them (file + directory fsync).

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kaas_core::env::{Volume, VolumeFile};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Torn writes keep whole blocks of this size.
const BLOCK_BYTES: usize = 512;

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    /// Bytes that survive a crash.
    durable_len: usize,
}

#[derive(Default)]
struct State {
    /// path -> inode number
    paths: BTreeMap<String, u64>,
    inodes: BTreeMap<u64, Inode>,
    dirs: std::collections::BTreeSet<String>,
    next_inode: u64,
    /// Bytes written, synced: for the trace.
    stats: VolumeStats,
    faults: VolumeFaults,
    rng: Option<ChaCha8Rng>,
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
}

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeStats {
    pub bytes_appended: u64,
    pub syncs: u64,
    pub atomic_writes: u64,
    pub bytes_lost_in_crashes: u64,
    pub injected_errors: u64,
}

#[derive(Clone, Default)]
pub struct SimVolume {
    state: Arc<Mutex<State>>,
}

pub struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
}

fn not_found(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.to_string())
}

impl SimVolume {
    pub fn new(seed: u64, faults: VolumeFaults) -> Self {
        let state = State { faults, rng: Some(ChaCha8Rng::seed_from_u64(seed)), ..State::default() };
        SimVolume { state: Arc::new(Mutex::new(state)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("volume lock")
    }

    /// A host crashed: unsynced bytes are lost but for the blocks the seed's torn-write mode
    /// lets survive.
    pub fn crash(&self) {
        let mut state = self.lock();
        let State { inodes, stats, faults, rng, .. } = &mut *state;
        for inode in inodes.values_mut() {
            let pending = inode.data.len() - inode.durable_len;
            if pending == 0 {
                continue;
            }
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
    }

    pub fn stats(&self) -> VolumeStats {
        self.lock().stats
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

    /// Bytes of a file as a reader would see them (tests and checkers).
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        let state = self.lock();
        state.paths.get(path).map(|i| state.inodes[i].data.clone())
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
        let mut state = self.lock();
        let inode = match state.paths.get(path) {
            Some(inode) => *inode,
            None => {
                state.next_inode += 1;
                let inode = state.next_inode;
                state.inodes.insert(inode, Inode::default());
                state.paths.insert(path.to_string(), inode);
                inode
            }
        };
        Ok(SimFile { state: self.state.clone(), inode })
    }

    async fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        let state = self.lock();
        Ok(state.paths.get(path).map(|i| Bytes::copy_from_slice(&state.inodes[i].data)))
    }

    async fn write_atomic(&self, path: &str, data: Bytes) -> io::Result<()> {
        let mut state = self.lock();
        if let Some(e) = state.injected_error() {
            return Err(e);
        }
        state.next_inode += 1;
        let inode = state.next_inode;
        let len = data.len();
        state.inodes.insert(inode, Inode { data: data.to_vec(), durable_len: len });
        if let Some(old) = state.paths.insert(path.to_string(), inode) {
            state.inodes.remove(&old);
        }
        state.stats.atomic_writes += 1;
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
        let mut state = self.lock();
        if let Some(inode) = state.paths.remove(path) {
            state.inodes.remove(&inode);
        }
        Ok(())
    }

    async fn remove_dir_all(&self, path: &str) -> io::Result<()> {
        let mut state = self.lock();
        let prefix = format!("{path}/");
        let doomed: Vec<String> = state.paths.keys().filter(|p| p.starts_with(&prefix)).cloned().collect();
        for p in doomed {
            let inode = state.paths.remove(&p).expect("listed");
            state.inodes.remove(&inode);
        }
        state.dirs.retain(|d| d != path && !d.starts_with(&prefix));
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
        self.with(|inode, stats| {
            let position = inode.data.len() as u64;
            inode.data.extend_from_slice(&data);
            stats.bytes_appended += data.len() as u64;
            position
        })
    }

    async fn sync(&self) -> io::Result<()> {
        // Only what was written before the sync began is made durable by it.
        let len = self.with(|inode, _| inode.data.len())?;
        let latency_ms = {
            let mut state = self.state.lock().expect("volume lock");
            let max = state.faults.sync_latency_ms_max;
            match state.rng.as_mut() {
                Some(rng) if max > 0 => rng.random_range(0..=max),
                _ => 0,
            }
        };
        if latency_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(latency_ms)).await;
        }
        if let Some(e) = self.injected_error(true) {
            return Err(e);
        }
        self.with(|inode, stats| {
            inode.durable_len = inode.durable_len.max(len.min(inode.data.len()));
            stats.syncs += 1;
        })
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Bytes> {
        self.with(|inode, _| {
            let start = (position as usize).min(inode.data.len());
            let end = start.saturating_add(len).min(inode.data.len());
            Bytes::copy_from_slice(&inode.data[start..end])
        })
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.with(|inode, _| {
            inode.data.truncate(len as usize);
            inode.durable_len = inode.data.len();
        })
    }

    fn len(&self) -> u64 {
        self.with(|inode, _| inode.data.len() as u64).unwrap_or(0)
    }
}
